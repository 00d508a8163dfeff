/**
 * POST /api/logs/query (src/stats/query) through the real app on the embedded stores, against
 * answers computed in JavaScript from the inserted rows (test/support/query-rows.ts): every metric,
 * every dimension, every filter operator (hostile values too), percentiles within their bound,
 * time buckets with gaps filled, compare, order and paging, the domains a caller sees, validation.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { insertDomain } from '../../../../src/domains/store.js';
import { prng } from '../../../support/random.js';
import { hashesOf } from '../../../../src/stats/kept-window.js';
import { agentClass } from '../../../../ingest/transforms/user-agent.js';
import { buildRollups } from '../../../../src/rollups/builder.js';
import { planWindow, queryDomainsBuildState } from '../../../../src/rollups/plan.js';
import { requestReads, selectRows as select, type ClickHouseClient } from '../../../../core/db/clickhouse.js';
import { parseQuery, type Query } from '../../../../src/stats/query/parse.js';
import { queryBody } from '../../../../src/stats/query/schemas.js';
import { keepSeries, keptSeries, SERIES_PAGES_MS } from '../../../../src/stats/query/series-pages.js';
import { provesPage } from '../../../../src/stats/query/short-tops.js';
import type { OrderedGroups } from '../../../../src/stats/query/shape.js';
import { dimensionByName, DIMENSION_NAMES, mergedPartial, metricByName, METRIC_NAMES, PARTIALS, percentilesOf, representativeOf } from '../../../../src/stats/registry.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../../support/app.js';
import {
  AGENTS,
  bruteForce,
  dimensionValue,
  generateRows,
  HOSTILE,
  insertRows,
  LONG_URL,
  LONG_URL_PCT,
  PERCENTILE_METRICS,
  REFERRERS,
  selected,
  withinPercentileBound,
  type ExpectedRow,
  type Filter,
  type Row,
  type Spec,
} from '../../../support/query-rows.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../../../core/durations.js';

const ALL_METRICS = [...METRIC_NAMES];
/** The metrics whose partials the rollups hold (a raw-only partial, such as uniquePaths', has `rollup` null): those the rollup tests ask for. */
const HELD_METRICS = ALL_METRICS.filter((m) => metricByName.get(m)!.partials.every((x) => x.rollup !== null));
/** Every dimension but the time ones. */
const PLAIN_DIMENSIONS = DIMENSION_NAMES.filter((d) => dimensionByName.get(d)!.kind !== 'time');
const STRING_DIMENSIONS = PLAIN_DIMENSIONS.filter((d) => dimensionByName.get(d)!.ops.includes('contains'));

/** A whole day 20 days back: most rows lie in the week from it; 'custom' windows are fixed times around it. */
const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 20 * DAY_MS;
const W_ALL = { start: BASE - 2 * DAY_MS, end: BASE + 8 * DAY_MS };
/** Odd edges, with rows on them and a millisecond outside them. */
const W_PART = { start: BASE + DAY_MS + 7 * HOUR_MS + 13 * MINUTE_MS + 7_123, end: BASE + 3 * DAY_MS + 5 * HOUR_MS + 2 * MINUTE_MS + 456 };
/** Between the rows far back (up to 30 days before BASE) and the others. */
const W_EMPTY = { start: BASE - 10 * DAY_MS, end: BASE - 9 * DAY_MS };

let t: TestApp;
let admin: string;
let alice: { id: number; token: string };
let bob: { id: number; token: string };
let nora: { id: number; token: string };
/** alice owns alpha and beta, bob gamma; the fleet is nobody's. */
let alpha: { id: number; name: string };
let beta: { id: number; name: string };
let gamma: { id: number; name: string };
let fleet: { id: number; name: string }[];
const rows: Row[] = [];
const names = new Map<number, string>();

const iso = (ms: number) => new Date(ms).toISOString();
const custom = (w: { start: number; end: number }) => ({ dateRange: 'custom', startDate: iso(w.start), endDate: iso(w.end) });

async function ask(token: string, body: unknown, status = 200): Promise<any> {
  const res = await call(t.app, 'POST', '/api/logs/query', { token, body });
  expect(res.status, JSON.stringify(res.body).slice(0, 600)).toBe(status);
  return res.body;
}

/** The whole answer in one page. */
async function askAll(token: string, body: Record<string, unknown>): Promise<any> {
  const { data } = await ask(token, { limit: 10_000, ...body });
  expect(data.pagination.total).toBe(data.results.length);
  return data;
}

/** Percentiles within their bound are replaced by the exact value, so that one toEqual compares everything. */
function comparable(results: ExpectedRow[], expected: ExpectedRow[], metrics: string[]): ExpectedRow[] {
  return results.map((row, i) => ({
    dimensions: row.dimensions,
    metrics: row.metrics.map((value, j) => {
      const exact = expected[i]?.metrics[j];
      return PERCENTILE_METRICS.has(metrics[j]!) && exact !== undefined && withinPercentileBound(value, exact) ? exact : value;
    }),
  }));
}

/** Asks `body` as `token` and compares the whole answer with the brute force over `domains`. */
async function expectBruteForce(token: string, domains: number[], body: Record<string, any>, window = W_PART): Promise<any> {
  const data = await askAll(token, { ...custom(window), ...body });
  const spec: Spec = {
    domains,
    metrics: body.metrics,
    dimensions: body.dimensions ?? [],
    filters: body.filters ?? [],
    window: { start: Date.parse(data.meta.startDate), end: Date.parse(data.meta.endDate) },
    interval: data.meta.interval,
    orderBy: body.orderBy,
    names,
  };
  const expected = bruteForce(rows, spec);
  expect(comparable(data.results, expected, spec.metrics), JSON.stringify(body).slice(0, 300)).toEqual(expected);
  return data;
}

const aliceDomains = () => [alpha.id, beta.id];
const everyDomain = () => [...names.keys()];

beforeAll(async () => {
  // The test's hours hold a few rows each, which the query endpoint would read raw (STATS_ROLLUP_MIN_ROWS):
  // 0 keeps every built hour on the rollups, so the tests compare them with the raw rows.
  t = await startTestApp({ LOG_RETENTION_DAYS: '3650', STATS_ROLLUP_MIN_ROWS: '0' });
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com' });
  bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com' });
  nora = await createUserAndLogin(t.app, admin, { email: 'nora@example.com' });
  const revoked = await call(t.app, 'PUT', `/api/users/${nora.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'alerts', actions: ['read'] }] } });
  expect(revoked.status).toBe(200);
  const domain = async (name: string, ownerId: number | null) => {
    const row = await insertDomain(t.runtime.db, { name, ownerId });
    names.set(row.id, name);
    return { id: row.id, name };
  };
  alpha = await domain('alpha.example.com', alice.id);
  beta = await domain('beta.example.com', alice.id);
  gamma = await domain('gamma.example.com', bob.id);
  await domain('noras.example.com', nora.id);
  fleet = [];
  for (let i = 0; i < 40; i++) fleet.push(await domain(`fleet-${String(i).padStart(2, '0')}.example.net`, null));

  rows.push(...generateRows({ seed: 1, domain: alpha.id, count: 3000, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
  // Far back (weeks and months), and in the last hour (the relative date ranges).
  rows.push(...generateRows({ seed: 2, domain: alpha.id, count: 300, from: BASE - 400 * DAY_MS, to: BASE - 30 * DAY_MS, firstId: 10_001 }));
  rows.push(...generateRows({ seed: 3, domain: alpha.id, count: 20, from: Date.now() - 30 * MINUTE_MS, to: Date.now() - 10 * MINUTE_MS, firstId: 20_001 }));
  // On W_PART's edges and a millisecond outside them.
  const edges = generateRows({ seed: 4, domain: alpha.id, count: 4, from: 0, to: 1, firstId: 30_001 });
  [W_PART.start - 1, W_PART.start, W_PART.end, W_PART.end + 1].forEach((at, i) => (edges[i]!.t = at));
  rows.push(...edges);
  rows.push(...generateRows({ seed: 5, domain: beta.id, count: 800, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
  rows.push(...generateRows({ seed: 6, domain: gamma.id, count: 500, from: BASE - DAY_MS, to: BASE + 6 * DAY_MS }));
  fleet.forEach((d, i) => rows.push(...generateRows({ seed: 100 + i, domain: d.id, count: 3 + ((i * 7) % 30), from: BASE + DAY_MS, to: BASE + 2 * DAY_MS })));
  await insertRows(t.runtime.clickhouse, rows);
}, 120_000);

afterAll(async () => {
  await t?.close();
});

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

describe('POST /api/logs/query: from the rollups', () => {
  /**
   * The builder's whole backlog of the last 40 days, as `serve` runs it (settled a second after a
   * bucket ends): the rows far back stay unbuilt, read raw beside the built ones.
   */
  const buildAll = () => buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 120_000, retentionDays: 40 });
  /** Time and domain: what the rollups' total rows hold (ROLLUP_ROWS), each interval made of whole hours or days. */
  const SHAPES: { dimensions: string[]; filters?: Filter[] }[] = [
    { dimensions: [] },
    { dimensions: ['time:hour'] },
    { dimensions: ['time:day'] },
    { dimensions: ['time:week'] },
    { dimensions: ['time:month'] },
    { dimensions: ['time'] },
    { dimensions: ['domain'] },
    { dimensions: ['domain', 'time:day'] },
    { dimensions: ['time:hour', 'domain'] },
  ];
  const WINDOWS = [W_PART, W_ALL, { start: BASE - 400 * DAY_MS, end: BASE + 8 * DAY_MS - 1 }];
  /** A filter that every row passes and the rollups do not hold: the same question, read from raw rows only. */
  const RAW_ONLY: Filter = ['isNot', 'method', ['\u0001 no such method']];

  /** Every shape in every window against the brute force, and equal to the same question read raw (percentiles too: the same histogram). */
  async function expectShapes(filters: Filter[] = [], windows = WINDOWS): Promise<void> {
    for (const window of windows) {
      for (const shape of SHAPES) {
        // Series of at most a few thousand rows.
        const days = (window.end - window.start) / DAY_MS;
        if ((shape.dimensions.includes('time:hour') && days > 3) || (shape.dimensions.length > 1 && days > 30)) continue;
        const body = { metrics: HELD_METRICS, dimensions: shape.dimensions, filters };
        const data = await expectBruteForce(admin, everyDomain(), body, window);
        const raw = await askAll(admin, { ...custom(window), ...body, filters: [...filters, RAW_ONLY] });
        expect(data.results, JSON.stringify(shape)).toEqual(raw.results);
      }
    }
  }

  /**
   * Requests by what the rollups' list rows hold (ROLLUP_ROWS): status codes, user agents, URLs, and
   * URLs of the 4xx and 5xx (a filter on them first), with the filters those rows can read; `dim`
   * is the kind of rows parse.ts must pick.
   */
  const LIST_SHAPES: { dimensions: string[]; filters?: Filter[]; dim: string }[] = [
    { dimensions: ['statusCode'], dim: 'status' },
    { dimensions: ['time:day', 'statusClass'], dim: 'status' },
    { dimensions: ['statusClass', 'domain'], filters: [['isNot', 'statusCode', [404, 0]]], dim: 'status' },
    { dimensions: ['userAgent'], dim: 'agent' },
    { dimensions: ['time:hour', 'userAgent'], filters: [['contains', 'userAgent', ['BOT']]], dim: 'agent' },
    { dimensions: ['referrerHost'], dim: 'referrer_host' },
    { dimensions: ['time:day', 'referrerHost', 'domain'], filters: [['contains', 'referrerHost', ['EXAMPLE', 'GOOGLE']], ['isNot', 'referrerHost', ['']]], dim: 'referrer_host' },
    { dimensions: ['browser'], dim: 'agent_class' },
    { dimensions: ['botName', 'botKind'], filters: [['is', 'bot', [true]]], dim: 'agent_class' },
    { dimensions: ['device', 'time:day'], filters: [['contains', 'os', ['WIN', 'mac']], ['isNot', 'browser', ['']]], dim: 'agent_class' },
    { dimensions: ['ipAddress'], dim: 'ip' },
    { dimensions: ['ipAddress', 'time:day'], filters: [['glob', 'ipAddress', ['10.*', '2001:*']], ['contains', 'ipAddress', ['DB8', '.1']]], dim: 'ip' },
    { dimensions: ['path'], dim: 'path' },
    { dimensions: ['path', 'time:day'], filters: [['glob', 'path', ['/h/*', '/a*']], ['isNot', 'path', [`/h/${HOSTILE}`]]], dim: 'path' },
    { dimensions: ['url'], dim: 'url' },
    { dimensions: ['path'], filters: [['glob', 'url', ['/api/*']]], dim: 'url' },
    { dimensions: ['url'], filters: [['is', 'path', ['/']]], dim: 'url' },
    { dimensions: ['url', 'time:day'], filters: [['contains', 'url', ['ITEM', HOSTILE]]], dim: 'url' },
    { dimensions: ['url'], filters: [['is', 'statusClass', ['5xx']]], dim: 'error_url' },
    { dimensions: ['url', 'statusCode'], filters: [['is', 'statusCode', [404, 499]]], dim: 'error_url' },
    { dimensions: ['path', 'time:day'], filters: [['is', 'statusClass', ['4xx', '5xx']], ['isNot', 'url', [`/h/${HOSTILE}`, LONG_URL]]], dim: 'error_url' },
    { dimensions: ['domain', 'url'], filters: [['is', 'statusCode', [500, 503]], ['glob', 'url', ['/h/*', '/long/*%_']]], dim: 'error_url' },
    { dimensions: [], filters: [['is', 'statusClass', ['4xx']], ['contains', 'url', [HOSTILE]]], dim: 'error_url' },
  ];

  /** What list rows hold (LIST_PARTIALS): the metrics of sums. */
  const LIST_METRICS = ['requests', 'errorRate', 'clientErrorRate', 'bandwidth', 'averageResponseTime', 'totalResponseTime'];

  /** The list shapes' metrics in every window against the brute force and the same question read raw. */
  async function expectListShapes(windows = WINDOWS): Promise<void> {
    for (const window of windows) {
      for (const shape of LIST_SHAPES) {
        const days = (window.end - window.start) / DAY_MS;
        if ((shape.dimensions.includes('time:hour') && days > 3) || (shape.dimensions.some((d) => d.startsWith('time')) && days > 30)) continue;
        const body = { metrics: LIST_METRICS, dimensions: shape.dimensions, filters: shape.filters ?? [] };
        const data = await expectBruteForce(admin, everyDomain(), body, window);
        const raw = await askAll(admin, { ...custom(window), ...body, filters: [...body.filters, RAW_ONLY] });
        expect(data.results, JSON.stringify(shape)).toEqual(raw.results);
      }
    }
  }

  it('each shape is read from the rollup rows that hold it: totals, status codes, user agents, referrer hosts, agent classes, client addresses, paths, URLs, error URLs; anything else raw', () => {
    const now = BASE + 10 * DAY_MS;
    const rollupOf = (body: Record<string, unknown>) =>
      parseQuery(queryBody.parse({ dateRange: '30d', metrics: ['requests'], ...body }), { now, retentionDays: 3650, domains: [{ id: 1, name: 'a.example.com' }] }).rollup;
    for (const shape of SHAPES) expect(rollupOf({ metrics: HELD_METRICS, dimensions: shape.dimensions })?.rows.dim, JSON.stringify(shape)).toBe('total');
    for (const shape of LIST_SHAPES) expect(rollupOf({ metrics: LIST_METRICS, dimensions: shape.dimensions, filters: shape.filters ?? [] })?.rows.dim, JSON.stringify(shape)).toBe(shape.dim);
    // Raw: metrics the lists do not hold, filters the rows cannot read, error URLs without a filter keeping them to 400 and above.
    const raw: Record<string, unknown>[] = [
      { dimensions: ['url'], metrics: ['requests', 'p95ResponseTime'] },
      { dimensions: ['path'], metrics: ['visitors'] },
      { dimensions: ['ipAddress'], filters: [['cidr', 'ipAddress', ['10.0.0.0/8']]] },
      { dimensions: ['path'], metrics: ['maxResponseTime'] },
      { dimensions: ['statusCode'], metrics: ['visitors'] },
      { dimensions: ['url'], filters: [['isNot', 'statusClass', ['2xx']]] },
      { dimensions: ['url'], filters: [['is', 'statusCode', [404, 200]]] },
      { dimensions: ['url'], filters: [['is', 'statusClass', ['3xx', '5xx']]] },
      { dimensions: ['url'], filters: [['is', 'method', ['GET']]] },
      { dimensions: ['userAgent'], filters: [['is', 'statusCode', [404]]] },
      { dimensions: ['referrer'] },
      { dimensions: ['time:minute', 'statusCode'], dateRange: '24h' },
      { dimensions: ['browser'], metrics: ['p50ResponseTime'] },
      { dimensions: ['os'], filters: [['is', 'method', ['GET']]] },
      // A metric whose partial the rollups do not hold (RAW_PARTIALS), alone or beside held ones.
      { metrics: ['uniquePaths'] },
      { dimensions: ['domain', 'time:day'], metrics: ['requests', 'uniquePaths'] },
      { dimensions: ['path'], metrics: ['requests', 'uniquePaths'] },
    ];
    for (const body of raw) expect(rollupOf(body), JSON.stringify(body)).toBeNull();
  });

  it('built hours and days: time series, domains and totals equal the raw rows’ answer', async () => {
    const round = await buildAll();
    expect(round.hours).toBeGreaterThan(100);
    expect(round.days).toBeGreaterThanOrEqual(8);
    await expectShapes();
    await expectListShapes();
    await expectShapes([['is', 'domain', [alpha.name, fleet[3]!.name, 'nobody.example.com']]], [W_PART]);
    await expectShapes([['isNot', 'domain', [beta.name]]], [W_ALL]);
    await expectBruteForce(alice.token, aliceDomains(), { metrics: HELD_METRICS, dimensions: ['time:day'] }, W_PART);
    // A metric the rollups do not hold, where the hours and days are built: read raw, exact.
    await expectBruteForce(alice.token, aliceDomains(), { metrics: ['requests', 'uniquePaths'], dimensions: ['time:day'] }, W_PART);
  }, 300_000);

  it('late lines into built hours: read raw for every domain until built again, then from the rollups, exact', async () => {
    const late = [
      // Into built hours and days of alpha only: a plan for several domains reads those buckets raw for all.
      ...generateRows({ seed: 900, domain: alpha.id, count: 40, from: BASE + 2 * DAY_MS + 3 * HOUR_MS, to: BASE + 2 * DAY_MS + 5 * HOUR_MS, firstId: 90_001 }),
      ...generateRows({ seed: 901, domain: alpha.id, count: 25, from: BASE + 4 * DAY_MS, to: BASE + 5 * DAY_MS, firstId: 91_001 }),
      ...generateRows({ seed: 902, domain: fleet[5]!.id, count: 10, from: BASE + DAY_MS + 7 * HOUR_MS, to: BASE + DAY_MS + 8 * HOUR_MS, firstId: 92_001 }),
      // Into the same built hours of beta: rebuilt in one group with alpha's (builder.ts packs domains), each against its own rows.
      ...generateRows({ seed: 904, domain: beta.id, count: 30, from: BASE + 2 * DAY_MS + 3 * HOUR_MS, to: BASE + 2 * DAY_MS + 5 * HOUR_MS, firstId: 94_001 }),
    ];
    await insertRows(t.runtime.clickhouse, late);
    rows.push(...late);
    await expectShapes();
    await expectListShapes();
    const round = await buildAll();
    // The three hours written to and their two days, built again as differences (the histogram too).
    expect(round.hours).toBeGreaterThanOrEqual(3);
    expect(round.days).toBeGreaterThanOrEqual(2);
    // Every bucket built again exactly (a rebuild that miscounted would be read raw, still exact, but slow):
    // the plan over every domain reads the whole window from the rollups but for its last millisecond.
    const { state } = await queryDomainsBuildState(t.runtime.clickhouse, everyDomain(), W_ALL.start, W_ALL.end, 'day');
    const plan = planWindow(W_ALL.start, W_ALL.end, state);
    expect(plan.raw).toEqual([[W_ALL.end, W_ALL.end + 1]]);
    expect(plan.days.length).toBe(7); // the days holding rows
    await expectShapes();
    await expectListShapes();
  }, 300_000);

  it('the rollups serve the shapes they hold where built; finer buckets, other dimensions and filters read raw rows', async () => {
    // A mark in gamma's rollups that the raw rows do not hold: bytes without requests in one built hour and its day.
    const hour = BASE + 2 * DAY_MS + 10 * HOUR_MS;
    const mark = 1_000_000_000;
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_rollups (domain_id, span, dim, bucket, key, requests, bytes) VALUES
        ({d:UInt32}, 'hour', 'total', toDateTime({h:UInt32}, 'UTC'), '', 0, {mark:UInt64}), ({d:UInt32}, 'day', 'total', toDateTime({day:UInt32}, 'UTC'), '', 0, {mark:UInt64})`,
      query_params: { d: gamma.id, h: hour / 1000, day: (BASE + 2 * DAY_MS) / 1000, mark },
    });
    const window = { start: BASE + 2 * DAY_MS - HOUR_MS, end: BASE + 3 * DAY_MS + HOUR_MS - 1 };
    const bandwidth = async (body: Record<string, unknown>) => (await askAll(admin, { ...custom(window), domains: [gamma.id], metrics: ['bandwidth', 'requests'], ...body })).results;
    const exact = bruteForce(rows, { domains: [gamma.id], metrics: ['bandwidth', 'requests'], dimensions: [], filters: [], window, names })[0]!.metrics;
    // From the day's row (totals, days) or the hour's (hours): the mark shows.
    expect((await bandwidth({}))[0].metrics).toEqual([exact[0]! + mark, exact[1]]);
    expect((await bandwidth({ dimensions: ['time:day'] })).map((r: ExpectedRow) => r.metrics[0])).toContain(
      bruteForce(rows, { domains: [gamma.id], metrics: ['bandwidth'], dimensions: ['time:day'], filters: [], window, interval: 'day', names }).find((r) => r.dimensions[0] === iso(BASE + 2 * DAY_MS))!.metrics[0]! + mark,
    );
    const hours = await bandwidth({ dimensions: ['time:hour'] });
    expect(hours.find((r: ExpectedRow) => r.dimensions[0] === iso(hour)).metrics[0]).toBe(
      bruteForce(rows, { domains: [gamma.id], metrics: ['bandwidth'], dimensions: ['time:hour'], filters: [], window, interval: 'hour', names }).find((r) => r.dimensions[0] === iso(hour))!.metrics[0]! + mark,
    );
    // Raw rows: buckets finer than an hour, a dimension or a filter the rollups do not hold.
    const minutes = await bandwidth({ dimensions: ['time:minute'] });
    expect(minutes.reduce((sum: number, r: ExpectedRow) => sum + r.metrics[0]!, 0)).toBe(exact[0]);
    expect((await bandwidth({ dimensions: ['statusClass'] })).reduce((sum: number, r: ExpectedRow) => sum + r.metrics[0]!, 0)).toBe(exact[0]);
    expect((await bandwidth({ filters: [RAW_ONLY] }))[0].metrics).toEqual(exact);

    // Marks in the list rows of the same hour and day: requests of a status code, a user agent, a URL and an error URL.
    const listMark = 1000;
    const lists: [dim: string, key: string, body: Record<string, unknown>, value: unknown[]][] = [
      ['status', '404', { dimensions: ['statusCode'] }, [404]],
      ['agent', AGENTS[0]!.agent, { dimensions: ['userAgent'] }, [AGENTS[0]!.agent]],
      ['url', '/', { dimensions: ['url'] }, ['/']],
      ['path', '/', { dimensions: ['path'] }, ['/']],
      ['ip', '192.168.1.7', { dimensions: ['ipAddress'] }, ['192.168.1.7']],
      ['agent_class', String(agentClass(AGENTS[0]! as Parameters<typeof agentClass>[0]).id), { dimensions: ['browser'] }, [AGENTS[0]!.browser]],
      ['referrer_host', '', { dimensions: ['referrerHost'] }, ['']],
      ['error_url', `503 /h/${HOSTILE}`, { dimensions: ['url', 'statusCode'], filters: [['is', 'statusClass', ['5xx']]] }, [`/h/${HOSTILE}`, 503]],
    ];
    for (const [dim, key] of lists) {
      await t.runtime.clickhouse.command({
        query: `INSERT INTO access_rollups (domain_id, span, dim, bucket, key, requests) VALUES
          ({d:UInt32}, 'hour', {dim:String}, toDateTime({h:UInt32}, 'UTC'), {key:String}, {mark:UInt64}), ({d:UInt32}, 'day', {dim:String}, toDateTime({day:UInt32}, 'UTC'), {key:String}, {mark:UInt64})`,
        query_params: { d: gamma.id, dim, key, h: hour / 1000, day: (BASE + 2 * DAY_MS) / 1000, mark: listMark },
      });
    }
    const requestsOf = async (body: Record<string, unknown>, value: unknown[]) => {
      const found = (await askAll(admin, { ...custom(window), domains: [gamma.id], metrics: ['requests'], ...body })).results.find((r: ExpectedRow) => JSON.stringify(r.dimensions) === JSON.stringify(value));
      return found?.metrics[0] ?? 0;
    };
    for (const [dim, , body, value] of lists) {
      const expected = bruteForce(rows, { domains: [gamma.id], metrics: ['requests'], dimensions: body.dimensions as string[], filters: (body.filters as Filter[]) ?? [], window, names }).find(
        (r) => JSON.stringify(r.dimensions) === JSON.stringify(value),
      )?.metrics[0] ?? 0;
      expect(await requestsOf(body, value), dim).toBe(expected + listMark);
      expect(await requestsOf({ ...body, filters: [...((body.filters as Filter[]) ?? []), RAW_ONLY] }, value), dim).toBe(expected);
      // By the hour, only the marked hour holds the mark.
      const hourly = await requestsOf({ ...body, dimensions: ['time:hour', ...(body.dimensions as string[])] }, [iso(hour), ...value]);
      const exactHour = bruteForce(rows, { domains: [gamma.id], metrics: ['requests'], dimensions: ['time:hour', ...(body.dimensions as string[])], filters: (body.filters as Filter[]) ?? [], window, interval: 'hour', names }).find(
        (r) => JSON.stringify(r.dimensions) === JSON.stringify([iso(hour), ...value]),
      )?.metrics[0] ?? 0;
      expect(hourly, dim).toBe(exactHour + listMark);
    }

    // Hours with fewer rows per domain than STATS_ROLLUP_MIN_ROWS are read raw; days are not.
    const exactHourBytes = bruteForce(rows, { domains: [gamma.id], metrics: ['bandwidth'], dimensions: ['time:hour'], filters: [], window, interval: 'hour', names }).find((r) => r.dimensions[0] === iso(hour))!.metrics[0]!;
    const hourRows = rows.filter((r) => r.domain === gamma.id && Math.floor(r.t / HOUR_MS) * HOUR_MS === hour).length;
    t.runtime.config.statsRollupMinRows = hourRows + 1;
    try {
      expect((await bandwidth({ dimensions: ['time:hour'] })).find((r: ExpectedRow) => r.dimensions[0] === iso(hour)).metrics[0]).toBe(exactHourBytes);
      expect((await bandwidth({}))[0].metrics).toEqual([exact[0]! + mark, exact[1]]);
      t.runtime.config.statsRollupMinRows = hourRows;
      expect((await bandwidth({ dimensions: ['time:hour'] })).find((r: ExpectedRow) => r.dimensions[0] === iso(hour)).metrics[0]).toBe(exactHourBytes + mark);
    } finally {
      t.runtime.config.statsRollupMinRows = 0;
    }

    // A late line in the marked hour: its hour and day are read raw again.
    const late = generateRows({ seed: 903, domain: gamma.id, count: 1, from: hour + MINUTE_MS, to: hour + 2 * MINUTE_MS, firstId: 93_001 });
    await insertRows(t.runtime.clickhouse, late);
    rows.push(...late);
    const after = bruteForce(rows, { domains: [gamma.id], metrics: ['bandwidth', 'requests'], dimensions: [], filters: [], window, names })[0]!.metrics;
    expect((await bandwidth({}))[0].metrics).toEqual(after);
    for (const [dim, , body, value] of lists) {
      const expected = bruteForce(rows, { domains: [gamma.id], metrics: ['requests'], dimensions: body.dimensions as string[], filters: (body.filters as Filter[]) ?? [], window, names }).find(
        (r) => JSON.stringify(r.dimensions) === JSON.stringify(value),
      )?.metrics[0] ?? 0;
      expect(await requestsOf(body, value), dim).toBe(expected);
    }
  }, 120_000);

  it('a plan that reads its whole window raw is made from the kept state without checking the counts, and stays exact', async () => {
    // Whole hours of one day, each built, each read raw while STATS_ROLLUP_MIN_ROWS is above its rows.
    const window = { start: BASE + 3 * DAY_MS + 2 * HOUR_MS, end: BASE + 3 * DAY_MS + 8 * HOUR_MS - 1 };
    const metrics = ['requests', 'bandwidth'];
    await buildAll();
    // A request's statements go through the client of the reads of requests.
    const queries = vi.spyOn(requestReads(t.runtime.clickhouse), 'query');
    /** Asks, compares with the brute force, and gives the count of ClickHouse queries it took. */
    const queriesOfExact = async () => {
      queries.mockClear();
      const { results } = await askAll(admin, { ...custom(window), domains: [alpha.id], metrics });
      expect(results[0].metrics).toEqual(bruteForce(rows, { domains: [alpha.id], metrics, dimensions: [], filters: [], window, names })[0]!.metrics);
      return queries.mock.calls.length;
    };
    t.runtime.config.statsRollupMinRows = 1_000_000;
    // No answer reused (src/stats/query/cache.ts): the request's data version (read by every request,
    // it also gives the counts a plan checks) and the figures.
    t.runtime.config.queryCacheMb = 0;
    try {
      await queriesOfExact();
      expect(await queriesOfExact()).toBe(2);
      // Late lines in a built hour: read raw, they count at once, and nothing else is read.
      const late = generateRows({ seed: 904, domain: alpha.id, count: 3, from: window.start + HOUR_MS, to: window.start + 2 * HOUR_MS, firstId: 94_001 });
      await insertRows(t.runtime.clickhouse, late);
      rows.push(...late);
      expect(await queriesOfExact()).toBe(2);
      // With the built hours in the plan again, the counts are checked: the late lines' hour is no
      // longer what the kept state says, so the state is read anew and that hour read raw.
      t.runtime.config.statsRollupMinRows = 0;
      expect(await queriesOfExact()).toBeGreaterThan(2);
    } finally {
      t.runtime.config.statsRollupMinRows = 0;
      t.runtime.config.queryCacheMb = 64;
      queries.mockRestore();
    }
  });
});

describe('POST /api/logs/query: top pages proven from the short lists', () => {
  const buildAll = () => buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 120_000, retentionDays: 40 });
  /** The dashboard's two path panels: pages by requests, and time spent (web/src/panels.ts). */
  const ORDERS: Record<string, unknown>[] = [
    { metrics: ['requests', 'errorRate'] },
    { metrics: ['totalResponseTime', 'averageResponseTime'], orderBy: [['totalResponseTime', 'desc']] },
  ];

  /**
   * One page of `body` against the brute force over the raw rows: the page's rows exactly; the count
   * of groups exactly, or where the answer says it is a lower bound, between the rows up to the page
   * and the brute force's. Whether the page was proven from the short lists.
   */
  async function expectPage(domains: number[], body: Record<string, any>, window: { start: number; end: number }): Promise<boolean> {
    const { data } = await ask(admin, { ...custom(window), domains, ...body });
    const expected = bruteForce(rows, { domains, metrics: body.metrics, dimensions: body.dimensions, filters: body.filters ?? [], window, orderBy: body.orderBy, names });
    const from = (body.page - 1) * body.limit;
    expect(data.results, JSON.stringify(body)).toEqual(expected.slice(from, from + body.limit));
    if (data.meta.totalIsLowerBound) {
      expect(data.pagination.total).toBeGreaterThanOrEqual(from + data.results.length);
      expect(data.pagination.total).toBeLessThanOrEqual(expected.length);
    } else expect(data.pagination.total, JSON.stringify(body)).toBe(expected.length);
    return data.meta.totalIsLowerBound === true;
  }

  it('pages of paths by requests and by time spent, with filters over the path or not, and of URLs and user agents: the brute force, most of them proven', async () => {
    await buildAll();
    const filters: Filter[][] = [[], [['glob', 'path', ['/u/*']]], [['isNot', 'path', ['/']]]];
    let proven = 0;
    let asked = 0;
    for (const window of [W_PART, W_ALL]) {
      for (const order of ORDERS) {
        for (const f of filters) {
          for (const [limit, page] of [[1, 1], [3, 1], [3, 2], [10, 1]] as const) {
            asked++;
            if (await expectPage([alpha.id], { ...order, dimensions: ['path'], filters: f, limit, page }, window)) proven++;
          }
        }
        // URLs and user agents have short lists by requests too.
        for (const dimension of ['url', 'userAgent']) {
          for (const [limit, page] of [[1, 1], [3, 2]] as const) {
            asked++;
            if (await expectPage([alpha.id], { ...order, dimensions: [dimension], limit, page }, window)) proven++;
          }
        }
        // The not-found panel (a 404 filter: the error URL rows, which have no short list), read from the full rows.
        expect(await expectPage([alpha.id], { ...order, dimensions: ['path'], filters: [['is', 'statusCode', [404]]], limit: 10, page: 1 }, window)).toBe(false);
        // Two domains: lists are per domain.
        expect(await expectPage(aliceDomains(), { ...order, dimensions: ['path'], limit: 3, page: 1 }, window)).toBe(false);
      }
    }
    expect(proven).toBeGreaterThan(asked / 2);
  }, 300_000);

  it('shaped lists: a key below every list that wins over the window, one tied at the bound, one out of some lists, are read from the full rows; the rest proven', async () => {
    const shaped = { id: (await insertDomain(t.runtime.db, { name: 'shaped.example.com', ownerId: null })).id };
    names.set(shaped.id, 'shaped.example.com');
    const template = generateRows({ seed: 950, domain: shaped.id, count: 1, from: 0, to: 1 })[0]!;
    let id = 500_001;
    const hits = (path: string, count: number, at: number): Row[] =>
      Array.from({ length: count }, (_, i) => ({ ...template, id: id++, url: path, t: at + i * 1000, status: 200, rt: 100 }));
    const S = BASE + 10 * DAY_MS;
    const added: Row[] = [];
    // Three days, each holding /hot 4 times and 100 others 3 times (their own each day): the lists
    // (TOP_KEYS = 100) hold /hot and 99 of those; /sleeper, twice a day, is in none, and second over the three days.
    for (let k = 0; k < 3; k++) {
      const day = S + k * DAY_MS;
      for (let i = 0; i < 100; i++) added.push(...hits(`/0-${k}-${String(i).padStart(3, '0')}`, 3, day + HOUR_MS + i * 10_000));
      added.push(...hits('/sleeper', 2, day + 2 * HOUR_MS), ...hits('/hot', 4, day + 3 * HOUR_MS));
    }
    // Two days holding /b 6 times, 99 others 3 times, /a 3 times (the 101st key: the threshold is its
    // count) and /z once; then /a 6 times in the first minute of the third day, read raw: /a ties
    // with /b over the window, and comes first by its path.
    const T = S + 5 * DAY_MS;
    for (let k = 0; k < 2; k++) {
      const day = T + k * DAY_MS;
      for (let i = 0; i < 99; i++) added.push(...hits(`/0-${k}-${String(i).padStart(3, '0')}`, 3, day + HOUR_MS + i * 10_000));
      added.push(...hits('/b', 6, day + 2 * HOUR_MS), ...hits('/a', 3, day + 3 * HOUR_MS), ...hits('/z', 1, day + 4 * HOUR_MS));
    }
    added.push(...hits('/a', 6, T + 2 * DAY_MS));
    // Two days: /warm 50 times on the first (in its list), 3 times on the second (out of it, after the
    // 99 others of 3): first over both, but its count in the lists is not all of it.
    const W = S + 3 * DAY_MS;
    for (let k = 0; k < 2; k++) {
      const day = W + k * DAY_MS;
      for (let i = 0; i < 100; i++) added.push(...hits(`/0-${k}-${String(i).padStart(3, '0')}`, 3, day + HOUR_MS + i * 10_000));
      added.push(...hits('/warm', k === 0 ? 50 : 3, day + 2 * HOUR_MS), ...hits('/hot', 4, day + 3 * HOUR_MS));
    }
    await insertRows(t.runtime.clickhouse, added);
    rows.push(...added);
    await buildAll();

    // Windows of whole days (the end is included: a window ending a millisecond before midnight reads its last day by the hour).
    const sleeper = { start: S, end: S + 3 * DAY_MS };
    const tie = { start: T, end: T + 2 * DAY_MS + 30 * MINUTE_MS - 1 };
    const warm = { start: W, end: W + 2 * DAY_MS };
    for (const order of ORDERS) {
      const page = (limit: number, window: typeof sleeper, filters: Filter[] = []) => expectPage([shaped.id], { ...order, dimensions: ['path'], filters, limit, page: 1 }, window);
      // /hot above anything the lists leave out: proven.
      expect(await page(1, sleeper)).toBe(true);
      // Second place: a listed key whose bound reaches /sleeper's count, so the full rows give /sleeper.
      expect(await page(2, sleeper)).toBe(false);
      // /a's bound equals /b's count: not proven (a tie orders by path), the full rows give /a.
      expect(await page(1, tie)).toBe(false);
      // Without /a, /b is above every bound.
      expect(await page(1, tie, [['isNot', 'path', ['/a']]])).toBe(true);
      // /warm's lists hold 50 of its 53: not exact, read from the full rows; /hot after it is.
      expect(await page(1, warm)).toBe(false);
      expect(await page(1, warm, [['isNot', 'path', ['/warm']]])).toBe(true);
    }
    // Late lines into a built day: its bucket is read raw until built again, then its new lists are
    // read at their new version (the answer kept under the old data version is not reused).
    const late = hits('/sleeper', 12, S + DAY_MS + 5 * HOUR_MS);
    await insertRows(t.runtime.clickhouse, late);
    rows.push(...late);
    for (const rebuilt of [false, true]) {
      if (rebuilt) await buildAll();
      for (const order of ORDERS) for (const limit of [1, 2]) await expectPage([shaped.id], { ...order, dimensions: ['path'], limit, page: 1 }, sleeper);
    }
  }, 300_000);
});

describe('a top page proven from short lists (provesPage)', () => {
  /** Rows of these sums, exact, each with the largest bound after it. */
  const exact = (...values: number[]) => values.map((v, i) => ({ ranked: v, upper: v, beyond: Math.max(0, ...values.slice(i + 1)) }));
  it('needs every key up to the page exact and the last of them strictly above every other bound', () => {
    expect(provesPage(exact(10, 9, 5), 2, 4)).toBe(true);
    // A key of the page not exact.
    expect(provesPage([{ ranked: 10, upper: 10, beyond: 11 }, { ranked: 9, upper: 11, beyond: 5 }, { ranked: 5, upper: 5, beyond: 0 }], 2, 4)).toBe(false);
    // A key after the page whose bound reaches the page's last, or the thresholds of the keys seen nowhere.
    expect(provesPage([{ ranked: 10, upper: 10, beyond: 9 }, { ranked: 9, upper: 9, beyond: 9 }, { ranked: 5, upper: 9, beyond: 0 }], 2, 4)).toBe(false);
    expect(provesPage(exact(10, 9, 5), 2, 9)).toBe(false);
    expect(provesPage(exact(10, 9, 9), 2, 0)).toBe(false);
    // Fewer keys than the page: the lists cannot tell the rest.
    expect(provesPage(exact(10), 2, 0)).toBe(false);
  });
});
