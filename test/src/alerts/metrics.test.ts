/**
 * measure (src/alerts/metrics.ts): every condition of every measure equals a brute force over the
 * same rows, with and without filters, with rows on both sides of each window's start to the
 * millisecond, durations in whole minutes and not, several domains sharing durations, and rows
 * outside every window; requestChange against the window 7 days earlier; one statement for all
 * filter sets (a branch each) and none without measures; hostile filter values matched literally;
 * alertFiltersField refusing the domain dimension.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { derivedClient, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { dedupToken, insertAccessBatch, type AccessRow } from '../../../ingest/sinks/clickhouse.js';
import {
  measure,
  measureKey,
  MIN_ERROR_RATE_REQUESTS,
  RATE_CONDITIONS,
  REQUEST_CHANGE_MIN_PREVIOUS,
  type Measure,
  type Measured,
} from '../../../src/alerts/metrics.js';
import { alertFiltersField, CONDITIONS, queryFiltersOf, type Condition } from '../../../src/alerts/schemas.js';
import type { QueryFilter } from '../../../src/stats/query/filters.js';
import { startTestApp, type TestApp } from '../../support/app.js';
import { accessRow, select } from '../../support/ingest.js';
import { prngInt } from '../../support/random.js';
import { AGENTS } from '../../support/user-agents.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
}, 60_000);
afterAll(async () => {
  await t?.close();
});

const WEEK_MS = 7 * 86_400_000;
const DURATIONS = [60, 61, 90, 119, 300, 3_600, 3_617];
/** The end of every window: whole seconds plus 123 ms, a few seconds ago. */
const NOW_MS = Math.floor(Date.now() / 1000) * 1000 - 5_000 + 123;

// Rows of each test are numbered apart (ids, dedup tokens), so that no insert is taken for another.
let rowNumber = 0;
async function insert(rows: AccessRow[], tag: string): Promise<void> {
  await insertAccessBatch(t.runtime.clickhouse, rows, dedupToken(`alerts-metrics-${tag}`, 0, rows.length));
}
const row = (patch: Partial<AccessRow>) => accessRow(rowNumber++, patch);

/** A client that records each statement it is asked to run. */
function recording(base: ClickHouseClient): { client: ClickHouseClient; statements: string[] } {
  const statements: string[] = [];
  const query = ((params: Parameters<ClickHouseClient['query']>[0]) => {
    statements.push(params.query);
    return base.query(params);
  }) as ClickHouseClient['query'];
  return { client: derivedClient(base, { query }), statements };
}

/** The SELECT of each branch of a statement of `measure`, by its tag (a filter's own SQL may hold a UNION ALL too). */
const branchesOf = (statement: string) => statement.split(/(?=\nSELECT toUInt32\(\d+\) AS branch)/).filter((part) => part.includes(' AS branch'));

const userAgent = (what: string) => AGENTS.find(([name]) => name === what)![1];
const BOT_AGENTS = new Set(AGENTS.filter(([, , expected]) => expected.length === 2).map(([, ua]) => ua));
const USER_AGENTS = ['Chrome on Windows', 'GPTBot', 'Googlebot', 'curl (a tool: isbot suspects it, Matomo\'s list does not name it)', 'no user agent'].map(userAgent);
const URLS = ['/checkout', '/checkout/pay?step=2', '/checkoutx?a=/checkout', '/cart?next=/checkout', '/', '/Checkout'];

/** A filter set: the filters as an alert stores them (parsed by alertFiltersField), and the same in JavaScript. */
interface FilterSet {
  name: string;
  filters: QueryFilter[];
  keeps: (r: AccessRow) => boolean;
}
const filterSet = (name: string, raw: unknown, keeps: (r: AccessRow) => boolean): FilterSet => ({ name, filters: queryFiltersOf(alertFiltersField.parse(raw)), keeps });
const pathOf = (url: string) => url.split('?')[0]!;
const CHECKOUT = filterSet('checkout', [['glob', 'path', ['/checkout*']]], (r) => pathOf(r.url).startsWith('/checkout'));
const NO_BOTS = filterSet('no bots', [['isNot', 'bot', [true]]], (r) => !BOT_AGENTS.has(r.userAgent));
const SERVER_ERRORS = filterSet('5xx', [['is', 'statusClass', ['5xx']]], (r) => r.statusCode >= 500 && r.statusCode < 600);
const FILTER_SETS: FilterSet[] = [
  filterSet('all rows', [], () => true),
  CHECKOUT,
  NO_BOTS,
  SERVER_ERRORS,
  filterSet('checkout without bots', [['glob', 'path', ['/checkout*']], ['isNot', 'bot', [true]]], (r) => CHECKOUT.keeps(r) && NO_BOTS.keeps(r)),
];

const roundTo = (x: number, decimals: number) => Math.floor(x * 10 ** decimals + 0.5) / 10 ** decimals;

/** The exact nearest-rank percentile `n` of `values`; null when there are none. */
function nearestRank(values: number[], n: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil((n * sorted.length) / 100) - 1]!;
}

const PERCENTILES: Partial<Record<Condition, number>> = { p50ResponseTime: 50, p95ResponseTime: 95, p99ResponseTime: 99 };

/** The rows of a measure's window ending at `endMs` that its filters keep. */
const windowRows = (rows: AccessRow[], m: Measure, keeps: FilterSet['keeps'], endMs: number) =>
  rows.filter((r) => r.domainId === m.domainId && r.timestamp <= endMs && r.timestamp > endMs - m.duration * 1000 && keeps(r));

/** What `measure` should give for `m`, computed over the rows in JavaScript (percentiles exact). */
function bruteForce(rows: AccessRow[], m: Measure, keeps: FilterSet['keeps'], minRequests: number): Measured {
  const inside = windowRows(rows, m, keeps, NOW_MS);
  const requests = inside.length;
  if (m.condition === 'requestChange') {
    const previousRequests = windowRows(rows, m, keeps, NOW_MS - WEEK_MS).length;
    const value = previousRequests < REQUEST_CHANGE_MIN_PREVIOUS ? null : roundTo((requests - previousRequests) / previousRequests, 4);
    return { value, requests, previousRequests };
  }
  const times = inside.flatMap((r) => (r.responseTime === null ? [] : [r.responseTime]));
  const share = (count: number) => (requests < Math.max(1, minRequests) ? null : roundTo(count / requests, 4));
  const percentile = PERCENTILES[m.condition];
  const value =
    percentile !== undefined
      ? nearestRank(times, percentile)
      : {
          errorRate: () => share(inside.filter((r) => r.statusCode >= 500).length),
          clientErrorRate: () => share(inside.filter((r) => r.statusCode >= 400 && r.statusCode < 500).length),
          requests: () => requests,
          requestCount: () => requests,
          bandwidth: () => inside.reduce((sum, r) => sum + r.responseSize, 0),
          visitors: () => new Set(inside.map((r) => r.ipAddress)).size,
          averageResponseTime: () => (times.length === 0 ? null : roundTo(times.reduce((sum, v) => sum + v, 0) / times.length, 2)),
          maxResponseTime: () => (times.length === 0 ? null : Math.max(...times)),
        }[m.condition as Exclude<Condition, 'p50ResponseTime' | 'p95ResponseTime' | 'p99ResponseTime' | 'requestChange'>]();
  return { value, requests };
}

/** The registry's percentiles: exact below 128 ms, else within 1 % of the exact nearest rank (and its 2-decimal rounding). */
function expectPercentile(got: number | null, exact: number | null, label: string) {
  if (exact === null || exact < 128) return expect(got, label).toBe(exact);
  expect(got, label).not.toBeNull();
  expect(Math.abs(got! - exact), `${label}: ${got} for ${exact}`).toBeLessThanOrEqual(0.01 * exact + 0.005);
}

/** `got` against the brute force of each measure. */
function expectBruteForce(got: Map<string, Measured>, rows: AccessRow[], measures: { measure: Measure; set: FilterSet }[], minRequests: number) {
  for (const { measure: m, set } of measures) {
    const label = `${set.name} ${measureKey(m)}`;
    const expected = bruteForce(rows, m, set.keeps, minRequests);
    const measured = got.get(measureKey(m));
    if (PERCENTILES[m.condition] === undefined) {
      expect(measured, label).toEqual(expected);
    } else {
      expect(measured?.requests, label).toBe(expected.requests);
      expectPercentile(measured?.value ?? null, expected.value, label);
    }
  }
}

describe('measure', () => {
  it('equals the brute force for every condition, filter set and window, to the millisecond at each window’s start, in one statement', async () => {
    const r = prngInt(5);
    const domains = [9_101, 9_102, 9_103];
    const rows: AccessRow[] = [];
    const add = (domainId: number, timestamp: number) =>
      rows.push(
        row({
          domainId,
          timestamp,
          statusCode: [503, 500, 404, 200, 200, 301][r(6)]!,
          responseTime: r(5) === 0 ? null : r(4) === 0 ? 128 + r(60_000) : r(900),
          responseSize: r(100_000),
          ipAddress: `198.51.100.${r(40)}`,
          url: URLS[r(URLS.length)]!,
          userAgent: USER_AGENTS[r(USER_AGENTS.length)]!,
        }),
      );
    for (const domainId of domains) {
      // Just inside and just outside each window's start, and on it (outside: the window is open there).
      for (const d of DURATIONS) for (const delta of [-1, 0, 1, 999, 1000]) add(domainId, NOW_MS - d * 1000 + delta);
      // Spread over the longest window and a little beyond it, and a few after now (in no window).
      for (let i = 0; i < 600; i++) add(domainId, NOW_MS - r(3_700_000));
      for (let i = 0; i < 5; i++) add(domainId, NOW_MS + 1 + r(10_000));
      add(domainId, NOW_MS);
    }
    await insert(rows, 'brute-force');

    // Measures of two of the domains only; the third's rows must not leak into them.
    const conditions = CONDITIONS.filter((c) => c !== 'requestChange');
    const measures = FILTER_SETS.flatMap((set) =>
      domains.slice(0, 2).flatMap((domainId) => DURATIONS.flatMap((duration) => conditions.map((condition) => ({ measure: { domainId, duration, filters: set.filters, condition }, set })))),
    );
    const { client, statements } = recording(t.runtime.clickhouse);
    const started = performance.now();
    const got = await measure(client, measures.map((x) => x.measure), NOW_MS, MIN_ERROR_RATE_REQUESTS);
    console.log(`measure: ${measures.length} measures over ${FILTER_SETS.length} filter sets, ${rows.length} rows: ${(performance.now() - started).toFixed(0)} ms`);
    expect(statements).toHaveLength(1);
    // A branch per filter set.
    expect(branchesOf(statements[0]!)).toHaveLength(FILTER_SETS.length);
    expect(got.size).toBe(measures.length);
    expectBruteForce(got, rows, measures, MIN_ERROR_RATE_REQUESTS);
    // The rates met both sides of the noise guard.
    const rates = measures.filter((x) => RATE_CONDITIONS.includes(x.measure.condition)).map((x) => got.get(measureKey(x.measure))!.value);
    expect(rates.filter((v) => v === null).length).toBeGreaterThan(0);
    expect(rates.filter((v) => v !== null).length).toBeGreaterThan(0);

    // Without a minimum, a rate is one as soon as there is a request.
    const unguarded = measures.filter((x) => RATE_CONDITIONS.includes(x.measure.condition));
    expectBruteForce(await measure(t.runtime.clickhouse, unguarded.map((x) => x.measure), NOW_MS, 0), rows, unguarded, 0);
  });

  it('gives a window without rows each metric over no rows, and runs no statement without measures', async () => {
    const { client, statements } = recording(t.runtime.clickhouse);
    expect(await measure(client, [], NOW_MS, MIN_ERROR_RATE_REQUESTS)).toEqual(new Map());
    expect(statements).toHaveLength(0);
    const measures = CONDITIONS.map((condition) => ({ domainId: 9_999, duration: 61, filters: [], condition }));
    const got = await measure(client, measures, NOW_MS, 0);
    expect(statements).toHaveLength(1);
    // A rate of no requests is null even without a minimum: 0 of 0 says nothing.
    const zero = ['requests', 'requestCount', 'bandwidth', 'visitors'];
    for (const m of measures) {
      const expected: Measured = m.condition === 'requestChange' ? { value: null, requests: 0, previousRequests: 0 } : { value: zero.includes(m.condition) ? 0 : null, requests: 0 };
      expect(got.get(measureKey(m)), m.condition).toEqual(expected);
    }
  });

  it('computes only the branch’s own metrics: a histogram only where a percentile is asked, no branch for a filter set without measures', async () => {
    const { client, statements } = recording(t.runtime.clickhouse);
    await measure(
      client,
      [
        { domainId: 9_101, duration: 300, filters: [], condition: 'p95ResponseTime' },
        { domainId: 9_102, duration: 300, filters: SERVER_ERRORS.filters, condition: 'errorRate' },
        { domainId: 9_102, duration: 60, filters: SERVER_ERRORS.filters, condition: 'requests' },
      ],
      NOW_MS,
      MIN_ERROR_RATE_REQUESTS,
    );
    expect(statements).toHaveLength(1);
    const branches = branchesOf(statements[0]!);
    expect(branches).toHaveLength(2);
    expect(branches[0]).toContain('sumMapIf');
    expect(branches[1]).not.toContain('sumMapIf');
  });

  it('gives a measure’s key by what it asks: filters in any order, not by object identity', () => {
    const a = queryFiltersOf([['glob', 'path', ['/a*', '/b*']], ['isNot', 'bot', [true]], ['cidr', 'ipAddress', ['10.0.0.0/8']]]);
    const b = queryFiltersOf([['cidr', 'ipAddress', ['10.0.0.0/8']], ['isNot', 'bot', [true]], ['glob', 'path', ['/b*', '/a*']]]);
    const key = (filters: QueryFilter[], patch: Partial<Measure> = {}) => measureKey({ domainId: 1, duration: 60, filters, condition: 'errorRate', ...patch });
    expect(key(a)).toBe(key(b));
    expect(key(a)).not.toBe(key([]));
    expect(key(a)).not.toBe(key(queryFiltersOf([['glob', 'path', ['/a*']], ['isNot', 'bot', [true]], ['cidr', 'ipAddress', ['10.0.0.0/8']]])));
    expect(key(a)).not.toBe(key(queryFiltersOf([['glob', 'path', ['/a*', '/b*']], ['isNot', 'bot', [true]], ['cidr', 'ipAddress', ['10.0.0.0/9']]])));
    expect(key(a)).not.toBe(key(a, { condition: 'clientErrorRate' }));
    expect(key(a)).not.toBe(key(a, { duration: 61 }));
    expect(key(a)).not.toBe(key(a, { domainId: 2 }));
  });
});

describe('requestChange', () => {
  it('compares the requests with those of the same window 7 days earlier, to the millisecond at both ends', async () => {
    const r = prngInt(11);
    const [gone, same, few, mixed] = [9_201, 9_202, 9_203, 9_204];
    const rows: AccessRow[] = [];
    const add = (domainId: number, timestamp: number) =>
      rows.push(row({ domainId, timestamp, statusCode: [500, 200, 200][r(3)]!, url: URLS[r(URLS.length)]!, userAgent: USER_AGENTS[r(USER_AGENTS.length)]! }));
    const lastMinute = () => NOW_MS - r(60_000);
    // Traffic gone: 30 requests a week ago, none now.
    for (let i = 0; i < 30; i++) add(gone, lastMinute() - WEEK_MS);
    // The same traffic: each request now has its twin a week earlier.
    for (let i = 0; i < 30; i++) {
      const at = lastMinute();
      add(same, at);
      add(same, at - WEEK_MS);
    }
    // Fewer than REQUEST_CHANGE_MIN_PREVIOUS a week ago: no value, whatever the traffic now.
    for (let i = 0; i < REQUEST_CHANGE_MIN_PREVIOUS - 1; i++) add(few, lastMinute() - WEEK_MS);
    for (let i = 0; i < 40; i++) add(few, lastMinute());
    // Both windows' edges, to the millisecond, and traffic spread over both windows and a day around them.
    for (const end of [NOW_MS, NOW_MS - WEEK_MS]) {
      for (const d of DURATIONS) for (const delta of [-1, 0, 1]) add(mixed, end - d * 1000 + delta);
      for (const delta of [-1, 0, 1]) add(mixed, end + delta);
      for (let i = 0; i < 400; i++) add(mixed, end - r(3_700_000));
    }
    for (let i = 0; i < 200; i++) add(mixed, NOW_MS - WEEK_MS - 86_400_000 + r(2 * 86_400_000));
    await insert(rows, 'request-change');

    const all = FILTER_SETS[0]!;
    const measures = [
      ...[gone, same, few].flatMap((domainId) => DURATIONS.map((duration) => ({ measure: { domainId, duration, filters: all.filters, condition: 'requestChange' as const }, set: all }))),
      ...[all, SERVER_ERRORS, CHECKOUT].flatMap((set) => DURATIONS.map((duration) => ({ measure: { domainId: mixed, duration, filters: set.filters, condition: 'requestChange' as const }, set }))),
    ];
    const { client, statements } = recording(t.runtime.clickhouse);
    const got = await measure(client, measures.map((x) => x.measure), NOW_MS, MIN_ERROR_RATE_REQUESTS);
    // Three filter sets, each now and 7 days earlier.
    expect(statements).toHaveLength(1);
    expect(branchesOf(statements[0]!)).toHaveLength(6);
    const of = (domainId: number, duration: number) => got.get(measureKey({ domainId, duration, filters: [], condition: 'requestChange' }));
    expect(of(gone, 60)).toEqual({ value: -1, requests: 0, previousRequests: 30 });
    expect(of(same, 60)).toEqual({ value: 0, requests: 30, previousRequests: 30 });
    expect(of(few, 60)).toEqual({ value: null, requests: 40, previousRequests: REQUEST_CHANGE_MIN_PREVIOUS - 1 });
    expectBruteForce(got, rows, measures, MIN_ERROR_RATE_REQUESTS);
    // The mixed traffic gives changes other than −1, 0 and null.
    expect(measures.some((x) => ![-1, 0, null].includes(got.get(measureKey(x.measure))!.value))).toBe(true);
  });
});

describe('filters', () => {
  const HOSTILE = ["'; DROP TABLE access_logs; --", "\\'; DROP TABLE access_logs; --", 'back\\slash\\', '{x:String}', '{m0:Int64}', "100%_'\\\\"];

  it('matches hostile values literally, bound as parameters, and leaves the table as it was', async () => {
    const domainId = 9_301;
    const urls = [
      ...HOSTILE,
      ...HOSTILE.map((h) => `/before${h}after`),
      // Near misses: what a value would match if it were read as SQL, LIKE or an escape.
      "'; drop table access_logs; --",
      '; DROP TABLE access_logs; --',
      'backslash',
      'back\\\\slash\\\\',
      'x:String',
      '100xx',
      "100%_'\\",
    ];
    const rows = urls.flatMap((url, i) => Array.from({ length: i + 1 }, (_, j) => row({ domainId, url, timestamp: NOW_MS - 1_000 * (j + 1) })));
    await insert(rows, 'hostile');
    const sets = [
      filterSet('is hostile', [['is', 'url', HOSTILE]], (r) => HOSTILE.includes(r.url)),
      filterSet('is not hostile', [['isNot', 'url', HOSTILE]], (r) => !HOSTILE.includes(r.url)),
      filterSet('glob braces', [['glob', 'url', ['*{x:String}*']]], (r) => r.url.includes('{x:String}')),
      filterSet('glob backslash', [['glob', 'url', ['*\\*']]], (r) => r.url.includes('\\')),
      filterSet('glob percent', [['glob', 'url', ['100%_*']]], (r) => r.url.startsWith('100%_')),
      filterSet('contains quote', [['contains', 'url', ["'; drop TABLE"]]], (r) => r.url.toLowerCase().includes("'; drop table")),
    ];
    const measures = sets.map((set) => ({ measure: { domainId, duration: 3_600, filters: set.filters, condition: 'requests' as const }, set }));
    const { client, statements } = recording(t.runtime.clickhouse);
    const got = await measure(client, measures.map((x) => x.measure), NOW_MS, MIN_ERROR_RATE_REQUESTS);
    expectBruteForce(got, rows, measures, MIN_ERROR_RATE_REQUESTS);
    for (const { measure: m } of measures) expect(got.get(measureKey(m))!.value, measureKey(m)).toBeGreaterThan(0);
    // Nothing the alerts wrote is in the statement's text.
    expect(statements).toHaveLength(1);
    for (const text of ['DROP', 'slash', '{x:String}', '100%']) expect(statements[0]).not.toContain(text);
    const [{ n }] = (await select<{ n: string }>(t.runtime.clickhouse, 'SELECT count() AS n FROM access_logs WHERE domain_id = {d:UInt32}', { d: domainId })) as [{ n: string }];
    expect(Number(n)).toBe(rows.length);
  });

  it('alertFiltersField takes the query endpoint’s filters but for the domain dimension', () => {
    // Kept as written (a CIDR as its text); queryFiltersOf parses them for the SQL.
    expect(alertFiltersField.parse([['cidr', 'ipAddress', ['10.0.0.0/8']]])).toEqual([['cidr', 'ipAddress', ['10.0.0.0/8']]]);
    expect(queryFiltersOf([['is', 'statusClass', ['5xx']]])).toEqual([{ op: 'is', dimension: 'statusClass', values: ['5xx'] }]);
    const refused = alertFiltersField.safeParse([['glob', 'path', ['/a*']], ['is', 'domain', ['example.com']]]);
    expect(refused.success).toBe(false);
    expect(refused.error!.issues.map((i) => ({ path: i.path, message: i.message }))).toEqual([
      { path: [1, 1], message: "takes no filter in an alert: the alert's domain or its scope chooses the domains" },
    ]);
    // The query endpoint's own rules still hold.
    const unknown = alertFiltersField.safeParse([['is', 'nope', ['x']]]);
    expect(unknown.error!.issues[0]!.path).toEqual([0, 1]);
  });
});
