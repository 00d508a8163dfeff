/**
 * POST /api/logs/query read from the rollups (src/rollups, src/stats/query/parse.ts's plan) against the
 * same brute force as the raw rows: every shape the rollups hold, built hours and days beside raw
 * ones, late rows, and top pages proven from the short lists (short-tops.ts) or read from full rows.
 */
import { describe, expect, it, vi } from 'vitest';
import { insertDomain } from '../../../../src/domains/store.js';
import { agentClass } from '../../../../ingest/transforms/user-agent.js';
import { planWindow, queryDomainsBuildState } from '../../../../src/rollups/plan.js';
import { requestReads } from '../../../../core/db/clickhouse.js';
import { parseQuery } from '../../../../src/stats/query/parse.js';
import { queryBody } from '../../../../src/stats/query/schemas.js';
import { provesPage } from '../../../../src/stats/query/short-tops.js';
import { AGENTS, bruteForce, generateRows, HOSTILE, insertRows, LONG_URL, type ExpectedRow, type Filter, type Row } from '../../../support/query-rows.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../../../core/durations.js';
import { admin, alice, aliceDomains, alpha, ask, askAll, BASE, beta, buildAll, custom, everyDomain, expectBruteForce, expectGroupCount, fleet, gamma, HELD_METRICS, iso, names, rows, t, useDataset, W_ALL, W_PART } from './dataset.js';

useDataset();

describe('POST /api/logs/query: from the rollups', () => {
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
   * paths and URLs of the 4xx and 5xx (a filter on them first), with the filters those rows can read; `dim`
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
    { dimensions: ['path'], filters: [['is', 'statusCode', [404]]], dim: 'error_path' },
    { dimensions: ['path', 'statusCode', 'time:day'], filters: [['is', 'statusClass', ['4xx', '5xx']], ['glob', 'path', ['/h/*', '/a*']]], dim: 'error_path' },
    { dimensions: ['statusCode'], filters: [['is', 'statusCode', [404, 500]], ['isNot', 'path', [`/h/${HOSTILE}`]]], dim: 'error_path' },
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

  it('each shape is read from the rollup rows that hold it: totals, status codes, user agents, referrer hosts, agent classes, client addresses, paths, URLs, error paths and URLs; anything else raw', () => {
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
      ['error_path', `503 /h/${HOSTILE}`, { dimensions: ['path', 'statusCode'], filters: [['is', 'statusClass', ['5xx']]] }, [`/h/${HOSTILE}`, 503]],
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
    expectGroupCount(data, from + data.results.length, expected.length, JSON.stringify(body));
    return data.meta.totalIsLowerBound === true;
  }

  it('pages of paths by requests and by time spent, with filters over the path or not, of the 404s, and of URLs, user agents and client addresses: the brute force, most of them proven', async () => {
    await buildAll();
    const filters: Filter[][] = [[], [['glob', 'path', ['/u/*']]], [['isNot', 'path', ['/']]]];
    // Pages proven, by what was asked: the paths, the 404s' paths, and each other dimension.
    const provenBy = new Map<string, number>();
    const count = (what: string, proven: boolean) => proven && provenBy.set(what, (provenBy.get(what) ?? 0) + 1);
    let asked = 0;
    for (const window of [W_PART, W_ALL]) {
      for (const order of ORDERS) {
        for (const f of filters) {
          for (const [limit, page] of [[1, 1], [3, 1], [3, 2], [10, 1]] as const) {
            asked++;
            count('path', await expectPage([alpha.id], { ...order, dimensions: ['path'], filters: f, limit, page }, window));
          }
        }
        // URLs, user agents and client addresses have short lists by requests too.
        for (const dimension of ['url', 'userAgent', 'ipAddress']) {
          for (const [limit, page] of [[1, 1], [3, 2]] as const) {
            asked++;
            count(dimension, await expectPage([alpha.id], { ...order, dimensions: [dimension], limit, page }, window));
          }
        }
        // The not-found panel: paths of one error status have a short list by requests (the error path
        // rows, one key per path with the status fixed); of two statuses, read from the full rows.
        for (const [limit, page] of [[1, 1], [3, 2], [10, 1]] as const) {
          asked++;
          count('404', await expectPage([alpha.id], { ...order, dimensions: ['path'], filters: [['is', 'statusCode', [404]]], limit, page }, window));
        }
        expect(await expectPage([alpha.id], { ...order, dimensions: ['path'], filters: [['is', 'statusCode', [404, 500]]], limit: 3, page: 1 }, window)).toBe(false);
        // Two domains: lists are per domain.
        expect(await expectPage(aliceDomains(), { ...order, dimensions: ['path'], limit: 3, page: 1 }, window)).toBe(false);
      }
    }
    expect([...provenBy.values()].reduce((a, b) => a + b, 0)).toBeGreaterThan(asked / 2);
    expect(provenBy.get('404')).toBeGreaterThan(0);
    expect(provenBy.get('ipAddress')).toBeGreaterThan(0);
  }, 300_000);

  it('shaped lists: a key below every list that wins over the window, one tied at the bound, one out of some lists, are read from the full rows; the rest proven', async () => {
    const shaped = { id: (await insertDomain(t.runtime.db, { name: 'shaped.example.com', ownerId: null })).id };
    names.set(shaped.id, 'shaped.example.com');
    const template = generateRows({ seed: 950, domain: shaped.id, count: 1, from: 0, to: 1 })[0]!;
    let id = 500_001;
    const hits = (path: string, count: number, at: number, status = 200): Row[] =>
      Array.from({ length: count }, (_, i) => ({ ...template, id: id++, url: path, t: at + i * 1000, status, rt: 100 }));
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
    // One day of errors: "404 /p" 5 times and 100 other 404 paths 3 times (the list holds /p and 99 of
    // them, the threshold 3), "500 /p" once, out of the list: the 404s' top page is proven, but /p's
    // 404s and 500s together are not one key, so that page is read from the full rows.
    const E = S + 8 * DAY_MS;
    for (let i = 0; i < 100; i++) added.push(...hits(`/q-${String(i).padStart(3, '0')}`, 3, E + HOUR_MS + i * 10_000, 404));
    added.push(...hits('/p', 5, E + 2 * HOUR_MS, 404), ...hits('/p', 1, E + 3 * HOUR_MS, 500));
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
    const errors = { start: E, end: E + DAY_MS };
    const errorPage = (statuses: number[]) => expectPage([shaped.id], { metrics: ['requests'], dimensions: ['path'], filters: [['is', 'statusCode', statuses]], limit: 1, page: 1 }, errors);
    expect(await errorPage([404])).toBe(true);
    expect(await errorPage([404, 500])).toBe(false);
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
