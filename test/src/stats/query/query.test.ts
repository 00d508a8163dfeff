/**
 * POST /api/logs/query (src/stats/query) through the real app on the embedded stores, against
 * answers computed in JavaScript from the inserted rows (test/support/query-rows.ts): every metric,
 * every dimension, every filter operator (hostile values too), percentiles within their bound,
 * time buckets with gaps filled, compare, order and paging, the domains a caller sees, validation.
 */
import { describe, expect, it } from 'vitest';
import { prng } from '../../../support/random.js';
import { hashesOf } from '../../../../src/stats/kept-window.js';
import { selectRows as select, type ClickHouseClient } from '../../../../core/db/clickhouse.js';
import { type Query } from '../../../../src/stats/query/parse.js';
import { keepSeries, keptSeries, SERIES_PAGES_MS } from '../../../../src/stats/query/series-pages.js';
import type { OrderedGroups } from '../../../../src/stats/query/shape.js';
import { dimensionByName, mergedPartial, metricByName, PARTIALS, percentilesOf, representativeOf } from '../../../../src/stats/registry.js';
import { call } from '../../../support/app.js';
import { AGENTS, bruteForce, dimensionValue, generateRows, HOSTILE, insertRows, LONG_URL, LONG_URL_PCT, REFERRERS, selected, withinPercentileBound, type ExpectedRow, type Filter, type Spec } from '../../../support/query-rows.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../../../core/durations.js';
import { admin, alice, aliceDomains, ALL_METRICS, alpha, ask, askAll, BASE, beta, bob, comparable, custom, everyDomain, expectBruteForce, fleet, gamma, iso, names, nora, PLAIN_DIMENSIONS, rows, STRING_DIMENSIONS, t, useDataset, W_ALL, W_EMPTY, W_PART } from './dataset.js';

useDataset();

describe('POST /api/logs/query: metrics', () => {
  it('every metric over one domain, several, and all the caller sees, for several windows, one row each', async () => {
    for (const window of [W_ALL, W_PART, W_EMPTY]) {
      await expectBruteForce(alice.token, [alpha.id], { domains: [alpha.id], metrics: ALL_METRICS }, window);
      await expectBruteForce(alice.token, aliceDomains(), { domains: [beta.id, alpha.id], metrics: ALL_METRICS }, window);
      await expectBruteForce(alice.token, aliceDomains(), { metrics: ALL_METRICS }, window);
      await expectBruteForce(admin, everyDomain(), { metrics: [...ALL_METRICS].reverse() }, window);
    }
    // An empty window: zero counts and rates, null response times.
    const { data } = await ask(alice.token, { metrics: ALL_METRICS, ...custom(W_EMPTY) });
    expect(data.results).toEqual([{ dimensions: [], metrics: [0, 0, 0, 0, 0, null, null, null, null, null, null, 0] }]);
    expect(data.pagination).toEqual({ page: 1, limit: 100, total: 1, pages: 1 });
  });

  it('the relative date ranges end now and read the rows of the last hour, day, 7 and 30 days', async () => {
    for (const dateRange of ['1h', '24h', '7d', '30d']) {
      const before = Date.now();
      const { data } = await ask(alice.token, { metrics: ALL_METRICS, dateRange });
      const [start, end] = [Date.parse(data.meta.startDate), Date.parse(data.meta.endDate)];
      expect(end).toBeGreaterThanOrEqual(before);
      expect(end - start).toBe({ '1h': HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS }[dateRange]);
      const expected = bruteForce(rows, { domains: aliceDomains(), metrics: ALL_METRICS, dimensions: [], filters: [], window: { start, end }, names });
      expect(comparable(data.results, expected, ALL_METRICS)).toEqual(expected);
      expect(data.results[0].metrics[0]).toBeGreaterThan(dateRange === '30d' ? 3000 : 0);
    }
  });

  it('percentiles are exact below 128 ms and within 1 % of the exact nearest rank above, in every group', async () => {
    // Ordered by requests: an order by a percentile could differ from the exact values' within the bound.
    const metrics = ['requests', 'p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime'];
    let checked = 0;
    for (const dimensions of [['url'], ['ipAddress'], ['time:hour'], ['statusCode', 'device']]) {
      const data = await askAll(admin, { ...custom(W_ALL), metrics, dimensions });
      const expected = bruteForce(rows, { domains: everyDomain(), metrics, dimensions, filters: [], window: W_ALL, interval: data.meta.interval, names });
      expect(data.results.map((r: ExpectedRow) => r.dimensions)).toEqual(expected.map((r) => r.dimensions));
      data.results.forEach((row: ExpectedRow, i: number) => {
        for (const j of [1, 2, 3]) {
          const [actual, exact] = [row.metrics[j]!, expected[i]!.metrics[j]!];
          expect(withinPercentileBound(actual, exact), `${metrics[j]} of ${JSON.stringify(row.dimensions)}: ${actual}, exact ${exact}`).toBe(true);
          checked++;
        }
      });
    }
    // Enough values on both sides of 128 ms were compared.
    expect(checked).toBeGreaterThan(500);
  });
});

describe('percentiles over merged histograms', () => {
  it('a key given several times (sources merged by concatenation, signed rebuild differences) counts with its whole count', async () => {
    // Key 10 holds 5 − 4 = 1 row, key 20 three: the median (rank 2 of 4) is 20, though 5 ≥ 2 at key 10's first pair.
    const final = metricByName.get('p50ResponseTime')!.final;
    const merged = (...sources: string[]) => `SELECT ${final} FROM (SELECT ${mergedPartial(PARTIALS.rtHistogram)} FROM (${sources.map((h) => `SELECT ${h} AS p_rt_hist`).join(' UNION ALL ')}))`;
    // A source's histogram: its keys and their counts, as two arrays.
    const histogram = (...pairs: [key: number, count: number][]) =>
      `CAST(([${pairs.map(([k]) => k).join(', ')}], [${pairs.map(([, c]) => c).join(', ')}]), 'Tuple(Array(UInt16), Array(Int64))')`;
    const [row] = await select<{ p: number | null; none: number | null; empty: number | null }>(
      t.runtime.clickhouse,
      `SELECT (${merged(histogram([10, 5]), histogram([20, 3], [10, -4]))}) AS p,
              (${merged(histogram([10, 2]), histogram([10, -2]))}) AS none,
              (${merged(PARTIALS.rtHistogram.neutral)}) AS empty`,
      {},
    );
    expect(row).toEqual({ p: 20, none: null, empty: null });
  });

  it('merged in JavaScript (the kept built part of GET …/stats) they give the SQL numbers: every key, and random histograms', async () => {
    // Every key a UInt32 of milliseconds can have, alone: its representative.
    const keys = Array.from({ length: 1004 }, (_, k) => k);
    const final = (n: number) => metricByName.get(`p${n}ResponseTime`)!.final;
    const ofHistograms = (histograms: [number[], number[]][], n: number) =>
      select<{ p: number | null }>(
        t.runtime.clickhouse,
        `SELECT ${final(n)} AS p FROM (SELECT ${mergedPartial(PARTIALS.rtHistogram)} FROM (SELECT arrayJoin(arrayZip({keys:Array(Array(UInt16))}, {counts:Array(Array(Int64))})) AS p_rt_hist)) `,
        { keys: histograms.map(([k]) => k), counts: histograms.map(([, c]) => c) },
      );
    const one = await select<{ p: number }>(
      t.runtime.clickhouse,
      `SELECT ${final(50)} AS p FROM (SELECT ${mergedPartial(PARTIALS.rtHistogram)} FROM (SELECT (CAST([k], 'Array(UInt16)'), CAST([1], 'Array(Int64)')) AS p_rt_hist, k FROM (SELECT arrayJoin({keys:Array(UInt16)}) AS k)) GROUP BY k ORDER BY k)`,
      { keys },
    );
    expect(one.map((r) => r.p)).toEqual(keys.map(representativeOf));
    // Few rows per key, so that a rank one off lands on another key.
    const rnd = prng(97);
    for (let i = 0; i < 60; i++) {
      const histograms = Array.from({ length: 1 + Math.floor(rnd() * 3) }, (): [number[], number[]] => {
        const ks = Array.from({ length: Math.floor(rnd() * 40) }, () => Math.floor(rnd() ** 2 * 1004));
        return [ks, ks.map(() => 1 + Math.floor(rnd() * 3))];
      });
      const merged = new Map<number, number>();
      for (const [ks, cs] of histograms) ks.forEach((k, j) => merged.set(k, (merged.get(k) ?? 0) + cs[j]!));
      const inJs = percentilesOf(merged, [50, 95, 99]);
      for (const [j, n] of [50, 95, 99].entries()) expect(inJs[j], `${i} p${n}`).toBe((await ofHistograms(histograms, n))[0]!.p);
    }
  });

  it("the exact addresses kept in JavaScript are the hashes of uniqExact's state: the same for the same address from any source", async () => {
    const addresses = ['10.0.0.1', '2001:db8::1', '', `${'9'.repeat(300)}`, ...Array.from({ length: 200 }, (_, i) => `10.1.${i >> 8}.${i & 255}`)];
    const [row] = await select<{ state: string; merged: string; hashes: string[] }>(
      t.runtime.clickhouse,
      `SELECT hex(CAST(uniqExactState(a) AS String)) AS state, hashes,
              (SELECT hex(CAST(uniqExactMergeState(s) AS String)) FROM (SELECT uniqExactState(a) AS s FROM (SELECT arrayJoin({a:Array(String)}) AS a) GROUP BY a)) AS merged
       FROM (SELECT arrayJoin({a:Array(String)}) AS a, (SELECT groupArray(hex(sipHash128(x))) FROM (SELECT arrayJoin({a:Array(String)}) AS x)) AS hashes) GROUP BY hashes`,
      { a: addresses },
    );
    const expected = [...row!.hashes].sort();
    expect([...hashesOf(row!.state)!].sort()).toEqual(expected);
    expect([...hashesOf(row!.merged)!].sort()).toEqual(expected);
    expect(hashesOf('00')).toEqual([]);
    // Any other layout is refused (the kept part is then not used).
    expect(hashesOf(row!.state.slice(0, -2))).toBeNull();
    expect(hashesOf('')).toBeNull();
    expect(hashesOf('FF')).toBeNull();
  });
});

describe('POST /api/logs/query: dimensions', () => {
  it('every dimension alone, with every metric', async () => {
    for (const dimension of PLAIN_DIMENSIONS) {
      const data = await expectBruteForce(admin, everyDomain(), { metrics: ALL_METRICS, dimensions: [dimension] });
      expect(data.results.length, dimension).toBeGreaterThan(1);
    }
  });

  it('the user-agent classes and the referrer host give the values the rows hold', async () => {
    const values = async (dimension: string) => (await askAll(admin, { ...custom(W_ALL), metrics: ['requests'], dimensions: [dimension] })).results.map((r: ExpectedRow) => r.dimensions[0]);
    expect(new Set(await values('device'))).toEqual(new Set(AGENTS.map((a) => a.device)));
    expect(new Set(await values('botName'))).toEqual(new Set(AGENTS.map((a) => a.botName)));
    expect(new Set(await values('botKind'))).toEqual(new Set(['', 'ai', 'search', 'other']));
    expect(new Set(await values('bot'))).toEqual(new Set([true, false]));
    expect(new Set(await values('referrerHost'))).toEqual(new Set(REFERRERS.map(([, host]) => host)));
  });

  it('several dimensions together, ties ordered by every dimension', async () => {
    for (const dimensions of [['statusClass', 'device'], ['domain', 'bot'], ['referrerHost', 'method', 'statusCode'], ['path', 'browser']]) {
      await expectBruteForce(admin, everyDomain(), { metrics: ['requests', 'visitors', 'errorRate'], dimensions });
    }
  });
});

/** Values for each operator of each dimension: values the rows hold, values they do not, several at once. */
function filterCases(): Filter[] {
  const sample = (dimension: string) => {
    const data = bruteForce(rows, { domains: everyDomain(), metrics: ['requests'], dimensions: [dimension], filters: [], window: W_PART, names });
    return data.map((r) => r.dimensions[0]!);
  };
  const cases: Filter[] = [];
  for (const dimension of PLAIN_DIMENSIONS) {
    // A status class outside 1xx-5xx (status 0) is shown but cannot be a filter value.
    const present = sample(dimension).filter((v) => dimension !== 'statusClass' || /^[1-5]xx$/.test(String(v)));
    const ops = dimensionByName.get(dimension)!.ops;
    const absent = dimension === 'statusCode' ? 599 : dimension === 'statusClass' ? '1xx' : dimension === 'bot' ? null : dimension === 'device' ? 'other' : 'absent-value';
    const exact = [[present[0]], [present[1], present[present.length - 1]], ...(absent === null ? [] : [[absent], [absent, present[0]]])];
    for (const values of exact) {
      cases.push(['is', dimension, values as unknown[]]);
      cases.push(['isNot', dimension, values as unknown[]]);
    }
    if (ops.includes('contains')) {
      const text = String(present.find((v) => String(v).length > 3) ?? present[0]);
      cases.push(['contains', dimension, [text.slice(1, 4).toUpperCase()]], ['contains', dimension, [text.slice(-3), 'zzz-none']]);
      cases.push(['glob', dimension, [`${text.slice(0, 2)}*`]], ['glob', dimension, [`*${text.slice(-2)}`, text]], ['glob', dimension, ['*']]);
    }
  }
  cases.push(['cidr', 'ipAddress', ['10.0.0.0/8']], ['cidr', 'ipAddress', ['2001:db8::/48', '203.0.113.7']], ['cidr', 'ipAddress', ['192.168.1.0/25', '2001:db8:1::/64']]);
  cases.push(['contains', 'url', ['ç']], ['contains', 'url', ['ÜNÏ']]);
  return cases;
}

describe('POST /api/logs/query: filters', () => {
  it('every operator on every dimension it applies to, alone and with others (AND)', async () => {
    const cases = filterCases();
    for (const filter of cases) {
      const [op, dimension] = filter;
      await expectBruteForce(admin, everyDomain(), { metrics: ['requests', 'visitors', 'bandwidth'], filters: [filter] });
      await expectBruteForce(admin, everyDomain(), { metrics: ['requests'], dimensions: [dimension], filters: [filter] });
      expect(dimensionByName.get(dimension)!.ops).toContain(op);
    }
    await expectBruteForce(admin, everyDomain(), {
      metrics: ['requests', 'errorRate'],
      dimensions: ['url'],
      filters: [['is', 'statusClass', ['5xx', '4xx']], ['glob', 'url', ['/api/*']], ['isNot', 'bot', [true]], ['cidr', 'ipAddress', ['10.0.0.0/8', '2001:db8::/32']]],
    });
    // Every operator of every dimension was tried.
    for (const dimension of PLAIN_DIMENSIONS) for (const op of dimensionByName.get(dimension)!.ops) expect(cases.some(([o, d]) => o === op && d === dimension), `${op} ${dimension}`).toBe(true);
  }, 120_000);

  it('hostile values (SQL and LIKE metacharacters, 8 KB strings) in every string filter match exactly', async () => {
    const hostile = [HOSTILE, `/h/${HOSTILE}`, "'", '"', '\\', '%', '_', '*', ';--', '{f0:String}', "/quote/it's", '/pct/100%_off', '/back\\slash', LONG_URL, LONG_URL_PCT, 'L'.repeat(8192), `${LONG_URL}x`];
    const all = selected(rows, { domains: everyDomain(), metrics: [], dimensions: [], filters: [], window: W_PART, names });
    let matched = 0;
    for (const dimension of STRING_DIMENSIONS) {
      // The values of the rows that hold a metacharacter, and text that only looks like them.
      const own = [...new Set(all.map((r) => String(dimensionValue(r, dimension, names))).filter((v) => /['"\\%_*]/.test(v)))];
      const values = [...hostile, ...own];
      // One query for is and one for isNot: grouped by the dimension, every value that matched shows as a group.
      for (const op of dimension === 'device' ? [] : ['is', 'isNot']) {
        const data = await expectBruteForce(admin, everyDomain(), { metrics: ['requests'], dimensions: [dimension], filters: [[op, dimension, values]] });
        if (op === 'is') matched += data.results.length;
      }
      // contains and glob value by value (in one filter, a value matching too much would hide behind
      // another): each metacharacter alone, the hostile text, 8 KB with LIKE wildcards, two of the rows' own.
      for (const op of ['contains', 'glob']) {
        for (const value of [HOSTILE, "'", '"', '\\', '%', '_', '*', LONG_URL_PCT, 'L'.repeat(8192), ...own.slice(0, 2)]) {
          await expectBruteForce(admin, everyDomain(), { metrics: ['requests'], filters: [[op, dimension, [value]]] });
        }
      }
    }
    // Rows hold some of the hostile values, so exact matches were seen, not only "nothing".
    expect(matched).toBeGreaterThan(20);
  }, 120_000);
});

describe('POST /api/logs/query: time', () => {
  it('time buckets of every interval run from the bucket of startDate to that of endDate, gaps filled', async () => {
    const cases: [string, { start: number; end: number }, string][] = [
      ['time:minute', { start: W_PART.start, end: W_PART.start + 3 * HOUR_MS }, 'minute'],
      ['time:hour', W_PART, 'hour'],
      ['time:day', W_ALL, 'day'],
      ['time:week', { start: BASE - 300 * DAY_MS, end: BASE + 5 * DAY_MS }, 'week'],
      ['time:month', { start: BASE - 420 * DAY_MS, end: BASE + 5 * DAY_MS }, 'month'],
      // The automatic interval: the first giving at most 400 buckets.
      ['time', { start: W_PART.start, end: W_PART.start + 6 * HOUR_MS }, 'minute'],
      ['time', { start: W_PART.start, end: W_PART.start + 30 * HOUR_MS }, '5minutes'],
      ['time', { start: W_PART.start, end: W_PART.start + 4 * DAY_MS }, '15minutes'],
      ['time', { start: BASE - 5 * DAY_MS, end: BASE + 7 * DAY_MS }, 'hour'],
      ['time', { start: BASE - 80 * DAY_MS, end: BASE + 7 * DAY_MS }, '6hours'],
      ['time', { start: BASE - 380 * DAY_MS, end: BASE + 7 * DAY_MS }, 'day'],
      ['time', { start: BASE - 1500 * DAY_MS, end: BASE + 7 * DAY_MS }, 'week'],
      ['time', { start: BASE - 3000 * DAY_MS, end: BASE + 7 * DAY_MS }, 'month'],
    ];
    let gaps = 0;
    for (const [dimension, window, interval] of cases) {
      const data = await expectBruteForce(alice.token, aliceDomains(), { metrics: ['requests', 'errorRate', 'averageResponseTime', 'p95ResponseTime', 'bandwidth'], dimensions: [dimension] }, window);
      expect(data.meta.interval, `${dimension} over ${iso(window.start)}..${iso(window.end)}`).toBe(interval);
      expect(data.meta.dimensions).toEqual([dimension]);
      expect(data.results.length).toBeLessThanOrEqual(dimension === 'time' ? 400 : 10_000);
      gaps += data.results.filter((r: ExpectedRow) => r.metrics[0] === 0 && r.metrics[3] === null).length;
    }
    // Gaps were there, with zero counts and null response times.
    expect(gaps).toBeGreaterThan(100);
    // With another dimension: every bucket for each of its values that has rows.
    for (const [dimensions, window] of [[['time:day', 'statusClass'], W_ALL], [['bot', 'time:hour'], W_ALL], [['time', 'domain'], W_PART]] as const) {
      await expectBruteForce(admin, everyDomain(), { metrics: ['requests', 'visitors', 'maxResponseTime'], dimensions: [...dimensions] }, window);
    }
    // A series over an empty window still has every bucket.
    const empty = await expectBruteForce(alice.token, aliceDomains(), { metrics: ['requests'], dimensions: ['time:hour'] }, W_EMPTY);
    expect(empty.results).toHaveLength(25);
  });

  it('a week starts on Monday and a bucket is its start in UTC with milliseconds', async () => {
    const data = await askAll(alice.token, { ...custom(W_ALL), metrics: ['requests'], dimensions: ['time:week'] });
    for (const row of data.results) {
      expect(row.dimensions[0]).toMatch(/^\d{4}-\d\d-\d\dT00:00:00\.000Z$/);
      expect(new Date(row.dimensions[0]).getUTCDay()).toBe(1);
    }
  });
});

describe('POST /api/logs/query: compare', () => {
  const previousOf = (w: { start: number; end: number }) => ({ start: 2 * w.start - w.end - 1, end: w.start - 1 });
  const change = (cur: number | null, prev: number | null) => (cur === null || prev === null || prev === 0 ? null : Math.round(((cur - prev) / prev) * 10_000) / 10_000 || 0);

  it('the previous window of the same length, for a breakdown (on any page) and without dimensions', async () => {
    const window = { start: BASE + 3 * DAY_MS + 5 * HOUR_MS + 17 * MINUTE_MS + 3, end: BASE + 5 * DAY_MS + 11 * HOUR_MS };
    const metrics = ['requests', 'visitors', 'errorRate', 'averageResponseTime', 'maxResponseTime'];
    for (const [dimensions, page, limit] of [[[], 1, 100], [['url'], 1, 5], [['url'], 2, 5], [['statusClass', 'bot'], 1, 100]] as const) {
      const { data } = await ask(alice.token, { ...custom(window), metrics, dimensions, compare: 'previous', page, limit });
      const spec = { domains: aliceDomains(), metrics, dimensions: [...dimensions], filters: [], names };
      const current = bruteForce(rows, { ...spec, window });
      const previous = bruteForce(rows, { ...spec, window: previousOf(window) });
      const pageRows = current.slice((page - 1) * limit, page * limit);
      expect(data.results.map((r: any) => ({ dimensions: r.dimensions, metrics: r.metrics }))).toEqual(pageRows);
      data.results.forEach((row: any) => {
        const before = previous.find((p) => JSON.stringify(p.dimensions) === JSON.stringify(row.dimensions))?.metrics ?? [0, 0, 0, null, null];
        expect(row.comparison, JSON.stringify(row.dimensions)).toEqual(before);
        expect(row.change).toEqual(row.metrics.map((m: number | null, i: number) => change(m, before[i]!)));
      });
      expect(data.results.some((r: any) => r.comparison[0] > 0)).toBe(true);
    }
  });

  it('a time series compares each bucket with the bucket at the same place of the previous window', async () => {
    const window = { start: BASE + 3 * DAY_MS + 30 * MINUTE_MS, end: BASE + 5 * DAY_MS + 29 * MINUTE_MS };
    const metrics = ['requests', 'bandwidth'];
    const data = await askAll(alice.token, { ...custom(window), metrics, dimensions: ['time:hour'], compare: 'previous' });
    const previousWindow = previousOf(window);
    const spec = { domains: aliceDomains(), metrics, dimensions: ['time:hour'], filters: [], interval: 'hour', names };
    const current = bruteForce(rows, { ...spec, window });
    const previous = bruteForce(rows, { ...spec, window: previousWindow });
    expect(previous).toHaveLength(current.length);
    expect(data.results.map((r: any) => ({ dimensions: r.dimensions, metrics: r.metrics }))).toEqual(current);
    expect(data.results.map((r: any) => r.comparison)).toEqual(previous.map((p) => p.metrics));
    expect(data.results.map((r: any) => r.change)).toEqual(current.map((c, i) => c.metrics.map((m, j) => change(m, previous[i]!.metrics[j]!))));
  });
});

describe('POST /api/logs/query: order and pages', () => {
  it('orderBy, limit, page and total, without and with a time dimension', async () => {
    const bodies = [
      { metrics: ['visitors', 'requests'], dimensions: ['url'], orderBy: [['visitors', 'asc'], ['url', 'desc']] },
      { metrics: ['requests'], dimensions: ['method', 'statusCode'], orderBy: [['statusCode', 'desc']] },
      { metrics: ['requests', 'maxResponseTime'], dimensions: ['botName'], orderBy: [['maxResponseTime', 'asc']] },
      { metrics: ['requests'], dimensions: ['domain'], orderBy: [['domain', 'desc']] },
      { metrics: ['requests', 'errorRate'], dimensions: ['time:hour', 'statusClass'], orderBy: [['requests', 'desc']] },
      { metrics: ['requests'], dimensions: ['statusClass', 'time:day'] },
      // Time first, then dimensions only: each bucket's combinations in one order, laid out bucket by bucket (shape.ts).
      { metrics: ['requests'], dimensions: ['domain', 'time:day', 'statusClass'], orderBy: [['time:day', 'desc'], ['statusClass', 'desc']] },
      { metrics: ['requests', 'bandwidth'], dimensions: ['time:day', 'domain'], orderBy: [['time:day', 'asc'], ['domain', 'desc']] },
      { metrics: ['requests'], dimensions: ['time:day'], orderBy: [['time:day', 'desc']] },
    ];
    for (const body of bodies) {
      const spec: Spec = { domains: everyDomain(), metrics: body.metrics, dimensions: body.dimensions, filters: [], window: W_PART, interval: body.dimensions.includes('time:hour') ? 'hour' : 'day', orderBy: body.orderBy as Spec['orderBy'], names };
      const expected = bruteForce(rows, spec);
      const limit = 7;
      const pages = Math.ceil(expected.length / limit);
      const seen: ExpectedRow[] = [];
      for (let page = 1; page <= pages + 1; page++) {
        const { data } = await ask(admin, { ...custom(W_PART), ...body, limit, page });
        expect(data.pagination).toEqual({ page, limit, total: expected.length, pages });
        seen.push(...data.results);
        if (page > pages) expect(data.results).toEqual([]);
      }
      expect(comparable(seen, expected, body.metrics), JSON.stringify(body)).toEqual(expected);
    }
    // Without dimensions: one row on page 1, none on page 2.
    const { data } = await ask(admin, { ...custom(W_PART), metrics: ['requests'], page: 2, limit: 1 });
    expect(data).toMatchObject({ results: [], pagination: { page: 2, limit: 1, total: 1, pages: 1 } });
  });
  it('the later pages of a series come from the series its first page computed; a first page is computed afresh', async () => {
    const body = { ...custom(W_PART), domains: fleet.map((d) => d.id), metrics: ['requests'], dimensions: ['domain', 'time:hour'], limit: 500 };
    const spec = (): Spec => ({ domains: body.domains, metrics: body.metrics, dimensions: body.dimensions, filters: [], window: W_PART, interval: 'hour', names });
    const pagesOf = async (from: number, count: number) => {
      const seen: ExpectedRow[] = [];
      for (let page = from; page <= count; page++) seen.push(...(await ask(admin, { ...body, page })).data.results);
      return seen;
    };
    const before = bruteForce(rows, spec());
    const first = (await ask(admin, { ...body, page: 1 })).data;
    const pages = first.pagination.pages;
    expect(pages).toBeGreaterThan(2);
    // A line into the window's last hour of a fleet domain: on the last page.
    const late = generateRows({ seed: 77, domain: fleet[0]!.id, count: 1, from: W_PART.end - 10 * MINUTE_MS, to: W_PART.end - 9 * MINUTE_MS, firstId: 90_001 });
    await insertRows(t.runtime.clickhouse, late);
    rows.push(...late);
    const after = bruteForce(rows, spec());
    expect(after).not.toEqual(before);
    expect([...first.results, ...(await pagesOf(2, pages))]).toEqual(before);
    // Another caller's question is another series, and the domains are checked first.
    expect((await ask(bob.token, { ...body, page: 2 }, 404)).success).toBe(false);
    // A first page reads afresh, and its later pages follow it.
    const again = (await ask(admin, { ...body, page: 1 })).data;
    expect([...again.results, ...(await pagesOf(2, pages))]).toEqual(after);
  });
});

describe('series pages kept', () => {
  it('serve later pages for SERIES_PAGES_MS, only series longer than a page, per client', () => {
    const client = {} as ClickHouseClient;
    const ordered = (total: number): OrderedGroups => ({ groups: [], total, totalIsLowerBound: false, whole: true, previous: null });
    const query = { limit: 10 } as Query;
    keepSeries(client, 'long', { query, ordered: ordered(11), at: 1000 });
    keepSeries(client, 'short', { query, ordered: ordered(10), at: 1000 });
    expect(keptSeries(client, 'long', 1000 + SERIES_PAGES_MS)?.ordered.total).toBe(11);
    expect(keptSeries(client, 'long', 1001 + SERIES_PAGES_MS)).toBeUndefined();
    expect(keptSeries(client, 'short', 1000)).toBeUndefined();
    expect(keptSeries({} as ClickHouseClient, 'long', 1000)).toBeUndefined();
  });
});

describe('POST /api/logs/query: domains', () => {
  it('a domain the caller does not see is 404; no logs:read is 403; no token is 401', async () => {
    for (const domains of [[gamma.id], [alpha.id, gamma.id], [2 ** 31 - 1]]) {
      expect(await ask(alice.token, { domains, metrics: ['requests'] }, 404)).toEqual({ success: false, error: 'Domain not found' });
    }
    expect(await ask(bob.token, { domains: [alpha.id], metrics: ['requests'] }, 404)).toEqual({ success: false, error: 'Domain not found' });
    expect(await ask(nora.token, { metrics: ['requests'] }, 403)).toEqual({ success: false, error: 'Insufficient permissions' });
    const anonymous = await call(t.app, 'POST', '/api/logs/query', { body: { metrics: ['requests'] } });
    expect(anonymous.status).toBe(401);
  });

  it('by default every domain the caller sees: a plain user its own, an administrator the whole fleet by name', async () => {
    const byDomain = { ...custom(W_ALL), metrics: ['requests', 'errorRate', 'p95ResponseTime'], dimensions: ['domain'] };
    const mine = await expectBruteForce(alice.token, aliceDomains(), byDomain, W_ALL);
    expect(mine.results.map((r: ExpectedRow) => r.dimensions[0]).sort()).toEqual([alpha.name, beta.name]);
    const theirs = await expectBruteForce(bob.token, [gamma.id], byDomain, W_ALL);
    expect(theirs.results.map((r: ExpectedRow) => r.dimensions[0])).toEqual([gamma.name]);
    const all = await expectBruteForce(admin, everyDomain(), byDomain, W_ALL);
    expect(all.results.map((r: ExpectedRow) => r.dimensions[0]).sort()).toEqual([alpha.name, beta.name, gamma.name, ...fleet.map((d) => d.name)].sort());
    // The fleet's sparklines: every domain, every hour of a day.
    const day = { start: BASE + DAY_MS, end: BASE + 2 * DAY_MS - 1 };
    const sparklines = await expectBruteForce(admin, fleet.map((d) => d.id), { domains: fleet.map((d) => d.id), metrics: ['requests', 'errorRate', 'p95ResponseTime'], dimensions: ['domain', 'time:hour'] }, day);
    expect(sparklines.results).toHaveLength(fleet.length * 24);
  });

  it('a domain filter names domains; one the caller does not see matches nothing', async () => {
    await expectBruteForce(alice.token, aliceDomains(), { metrics: ['requests'], dimensions: ['domain'], filters: [['is', 'domain', [beta.name]]] });
    await expectBruteForce(alice.token, aliceDomains(), { metrics: ['requests'], dimensions: ['domain'], filters: [['isNot', 'domain', [beta.name, gamma.name]]] });
    const { data } = await ask(alice.token, { ...custom(W_ALL), metrics: ['requests'], filters: [['is', 'domain', [gamma.name]]] });
    expect(data.results).toEqual([{ dimensions: [], metrics: [0] }]);
    const notAsked = await ask(alice.token, { ...custom(W_ALL), domains: [alpha.id], metrics: ['requests'], filters: [['is', 'domain', [beta.name]]] });
    expect(notAsked.data.results).toEqual([{ dimensions: [], metrics: [0] }]);
  });
});

describe('POST /api/logs/query: validation', () => {
  const valid = { metrics: ['requests'], ...custom(W_PART) };
  const cases: [string, Record<string, unknown>, string[]][] = [
    ['no metrics', { dateRange: '24h' }, ['metrics']],
    ['empty metrics', { ...valid, metrics: [] }, ['metrics']],
    ['unknown metric', { ...valid, metrics: ['requests', 'nope'] }, ['metrics']],
    ['metric twice', { ...valid, metrics: ['requests', 'requests'] }, ['metrics']],
    ['unknown dimension', { ...valid, dimensions: ['nope'] }, ['dimensions']],
    ['dimension twice', { ...valid, dimensions: ['url', 'url'] }, ['dimensions']],
    ['two time dimensions', { ...valid, dimensions: ['time', 'time:day'] }, ['dimensions']],
    ['too many buckets', { ...valid, dimensions: ['time:minute'], ...custom({ start: BASE - 30 * DAY_MS, end: BASE }) }, ['dimensions']],
    ['a series of too many rows', { ...valid, dimensions: ['time:minute', 'ipAddress'], ...custom({ start: BASE, end: BASE + 6 * DAY_MS }) }, ['dimensions']],
    ['statusClass 6xx', { ...valid, filters: [['is', 'statusClass', ['6xx']]] }, ['filters']],
    ['bot "yes"', { ...valid, filters: [['is', 'bot', ['yes']]] }, ['filters']],
    ['cidr "x"', { ...valid, filters: [['cidr', 'ipAddress', ['x']]] }, ['filters']],
    ['cidr on url', { ...valid, filters: [['cidr', 'url', ['10.0.0.0/8']]] }, ['filters']],
    ['contains on statusCode', { ...valid, filters: [['contains', 'statusCode', ['1']]] }, ['filters']],
    ['statusCode as text', { ...valid, filters: [['is', 'statusCode', ['404']]] }, ['filters']],
    ['device not a class', { ...valid, filters: [['is', 'device', ['phone']]] }, ['filters']],
    ['unknown dimension in a filter', { ...valid, filters: [['is', 'nope', ['x']]] }, ['filters']],
    ['filter on time', { ...valid, filters: [['is', 'time:hour', [1]]] }, ['filters']],
    ['unknown operator', { ...valid, filters: [['like', 'url', ['x']]] }, ['filters']],
    ['no values', { ...valid, filters: [['is', 'url', []]] }, ['filters']],
    ['a value over 64 KiB', { ...valid, filters: [['is', 'url', ['x'.repeat(65_537)]]] }, ['filters']],
    ['1001 values', { ...valid, filters: [['is', 'url', Array.from({ length: 1001 }, (_, i) => `/${i}`)]] }, ['filters']],
    ['an empty glob', { ...valid, filters: [['glob', 'url', ['']]] }, ['filters']],
    ['a filter not a triple', { ...valid, filters: [['is', 'url']] }, ['filters']],
    ['a filter not an array', { ...valid, filters: ['x'] }, ['filters']],
    ['unknown dateRange', { ...valid, dateRange: '2d' }, ['dateRange']],
    ['custom without startDate', { metrics: ['requests'], dateRange: 'custom' }, ['startDate']],
    ['startDate without custom', { metrics: ['requests'], dateRange: '7d', startDate: iso(BASE) }, ['startDate']],
    ['endDate before startDate', { ...valid, startDate: iso(BASE), endDate: iso(BASE - 1) }, ['endDate']],
    ['endDate before the retention', { ...valid, startDate: '1990-01-01', endDate: '1990-01-02' }, ['endDate']],
    ['an unparsable date', { ...valid, startDate: 'yesterday' }, ['startDate']],
    ['compare "next"', { ...valid, compare: 'next' }, ['compare']],
    ['orderBy a metric not asked', { ...valid, orderBy: [['visitors', 'asc']] }, ['orderBy']],
    ['orderBy a direction', { ...valid, orderBy: [['requests', 'up']] }, ['orderBy']],
    ['orderBy twice', { ...valid, orderBy: [['requests', 'asc'], ['requests', 'desc']] }, ['orderBy']],
    ['limit 0', { ...valid, limit: 0 }, ['limit']],
    ['limit 10001', { ...valid, limit: 10_001 }, ['limit']],
    ['page 0', { ...valid, page: 0 }, ['page']],
    ['page too deep', { ...valid, page: 101, limit: 10_000 }, ['page']],
    ['empty domains', { ...valid, domains: [] }, ['domains']],
    ['domain 0', { ...valid, domains: [0] }, ['domains']],
    ['domain as text', { ...valid, domains: ['1'] }, ['domains']],
    ['domain twice', { ...valid, domains: [1, 1] }, ['domains']],
    ['an unknown field', { ...valid, zzz: 1 }, ['zzz']],
  ];

  it('each wrong body is a 422 whose details name the top-level field', async () => {
    for (const [label, body, fields] of cases) {
      const res = await call(t.app, 'POST', '/api/logs/query', { token: alice.token, body });
      expect(res.status, label).toBe(422);
      expect(res.body.error, label).toBe('Validation failed');
      expect(Object.keys(res.body.details).sort(), `${label}: ${JSON.stringify(res.body.details).slice(0, 300)}`).toEqual(fields);
    }
  });
});
