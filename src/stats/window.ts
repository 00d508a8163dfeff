/**
 * Log statistics of a domain (docs/reference/logs.md#statistics): the last `period` up to now, read from the rollups of
 * sql/clickhouse/005_stats_deferred_rollups.sql and 006_stats_hour_tops.sql wherever a whole day or
 * hour of the window is covered and built (src/rollups/builder.ts, planned by src/rollups/plan.ts), and from access_logs for the
 * partial hours at its two ends and for buckets not built yet, so that the answer is the raw rows'
 * answer while a 30-day window reads a few thousand rollup rows instead of every request.
 *
 * One query per request in the steady state (queryWindowStats): chDB runs parameterised queries
 * one at a time per process, so each round trip counts.
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Principal, Services } from '../context.js';
import { resolveDomain } from '../domains/service.js';
import { timeQuery } from '../metrics/registry.js';
import { readWithKnownPlan } from '../rollups/known-plans.js';
import {
  buildStateOf,
  buildStateParams,
  buildStateQuery,
  planConditions,
  planWindow,
  queryBuildState,
  windowBuckets,
  type BuildState,
  type BuildStateRow,
  type PlanConditions,
  type StateParts,
  type WindowPlan,
} from '../rollups/plan.js';
import { countedPerList, unionAll } from '../rollups/shared-sql.js';
import { Params, type SqlFilter } from '../logs/filters.js';
import type { QueryFilter } from './query/filters.js';
import { filterConditions } from './query/where.js';
import { windowAt, type StatsPeriod, type StatsWindow } from './periods.js';
import { mergedPartial, metricByName, PARTIALS, ROLLUP_LISTS, sourcePartial } from './registry.js';
import { listedCounts, shortListSums } from '../rollups/short-lists.js';

/** How many entries a top list holds at most. */
export const TOP_LIMIT = 10;

export interface LogStats {
  /** 'custom' for a window from startDate to endDate. */
  period: StatsPeriod | 'custom';
  totalRequests: number;
  uniqueVisitors: number;
  averageResponseTime: number;
  errorRate: number;
  topUrls: { url: string; requests: number; percentage: number }[];
  topStatusCodes: { code: number; count: number; percentage: number }[];
  topUserAgents: { userAgent: string; requests: number; percentage: number }[];
  topReferrers: { referrer: string; requests: number; percentage: number }[];
  /** Beyond the specification: the bytes sent, and the response-time percentiles (the registry's; null without response times). */
  bandwidth: number;
  responseTimePercentiles: { p50: number | null; p95: number | null; p99: number | null };
}

/** The figures of a window, before they are shaped for a period. */
export type WindowStats = Omit<LogStats, 'period'>;

const DOMAIN = 'domain_id = {domainId:UInt32}';

// The stats' top lists: entries of the registry's rollup lists (access_rollups.dim as `dim`, which the
// primary key narrows on, its Enum value as `number`, the raw key as `key`).
const listNamed = (name: 'url' | 'status' | 'agent' | 'referrer') => ROLLUP_LISTS.find((l) => l.dim === name)!;
const URL_LIST = listNamed('url');
const STATUS_LIST = listNamed('status');
const AGENT_LIST = listNamed('agent');
const REFERRER_LIST = listNamed('referrer');
const DIMENSIONS = [URL_LIST, STATUS_LIST, AGENT_LIST, REFERRER_LIST];
type Dimension = (typeof DIMENSIONS)[number];
/** The lists' names as an SQL tuple (the registry's constants, not input). */
const dimNames = (dims: readonly Dimension[]) => `(${dims.map((d) => `'${d.dim}'`).join(', ')})`;

/** How many keys a list's short form (access_tops) proposes for the exact count. */
const CANDIDATES = 30;

/**
 * The top lists, all four in one GROUP BY over up to three reads (each read of a MergeTree costs
 * about 8–10 ms here whatever it reads, so a query per list and source cost more than the data):
 *
 * - with `short`, the listed buckets' short lists, summed per list and key in memory
 *   (src/rollups/short-lists.ts) and passed as array parameters: their counts as `in_short`, the buckets
 *   holding the key as `holders`, and each list's threshold sum as an entry of list 10 + list;
 * - access_rollups: the other built buckets (all of them without `short`), as `in_edge`;
 * - access_logs over the raw ranges, each row once per list (referrers without ''), as `in_edge`.
 *
 * Per list and key: `requests` = in_short + in_edge, `edge` = in_edge (the exact count outside
 * the short lists), `listed_in` = the buckets whose short list holds the key, the first `limit` by
 * requests (tie-break: status codes as numbers, the others by their bytes). Without `short` that
 * is the exact top list; with it, the candidates.
 */
const listsQuery = (c: PlanConditions, short: boolean, limit: number, dims: readonly Dimension[] = DIMENSIONS) => `
SELECT list AS dim, key, sum(in_short) + sum(in_edge) AS requests, sum(in_edge) AS edge, sum(holders) AS listed_in,
       ${noTotals()}
FROM (
  ${unionAll([
    short &&
      c.listed &&
      `SELECT e.1 AS list, e.2 AS key, e.3 AS in_short, toUInt64(0) AS in_edge, e.4 AS holders
  FROM (SELECT arrayJoin(arrayZip({shortLists:Array(Int8)}, {shortKeys:Array(String)}, {shortCounts:Array(UInt64)}, {shortHolders:Array(UInt64)})) AS e)`,
    (short ? c.unlisted : c.built) &&
      `SELECT CAST(dim, 'Int8') AS list, key, toUInt64(0) AS in_short, requests AS in_edge, toUInt64(0) AS holders FROM access_rollups
  WHERE ${DOMAIN} AND dim IN ${dimNames(dims)} AND (${short ? c.unlisted : c.built})`,
    c.raw &&
      `SELECT list, key, toUInt64(0) AS in_short, requests AS in_edge, toUInt64(0) AS holders FROM (${countedPerList(dims, {}, `access_logs WHERE ${DOMAIN} AND (${c.raw})`)})`,
  ])}
)
GROUP BY list, key
ORDER BY requests DESC, if(list = 2, toUInt32OrZero(key), 0), key
LIMIT ${limit} BY list`;

/** The partials of the totals, as the registry defines them (src/stats/registry.ts), and the percentiles shown. */
const TOTAL_PARTIALS = [PARTIALS.requests, PARTIALS.serverErrors, PARTIALS.rtSum, PARTIALS.rtCount, PARTIALS.visitors, PARTIALS.bytes, PARTIALS.rtHistogram];
const PERCENTILES = [50, 95, 99] as const;
const percentileMetric = (n: (typeof PERCENTILES)[number]) => metricByName.get(`p${n}ResponseTime`)!;

/** The totals' columns in a row that is not the totals row (a build-state row puts its built count in `errors`). */
const noTotals = (errors = '0') => `${errors} AS errors, 0 AS rt_sum, 0 AS rt_count, 0 AS visitors, 0 AS bytes, ${PERCENTILES.map((n) => `CAST(NULL, 'Nullable(Float64)') AS p${n}`).join(', ')}`;

/**
 * Row dim 0 carries the totals: the registry's partials from the built buckets' total rows and
 * from the raw ranges, merged, and the percentiles' final SQL over them; then the lists (listsQuery).
 */
const figuresQuery = (c: PlanConditions, short: boolean) => `
SELECT 0 AS dim, '' AS key, requests, 0 AS edge, 0 AS listed_in, server_errors AS errors, rt_sum, rt_count, visitors, bytes,
       ${PERCENTILES.map((n) => `${percentileMetric(n).final} AS p${n}`).join(', ')}
FROM (
  SELECT ${TOTAL_PARTIALS.map((x) => mergedPartial(x)).join(', ')}
  FROM (
    ${unionAll([
      c.built && `SELECT ${TOTAL_PARTIALS.map((x) => sourcePartial(x, 'rollup')).join(', ')}\n    FROM access_rollups WHERE ${DOMAIN} AND dim = 'total' AND (${c.built})`,
      c.raw && `SELECT ${TOTAL_PARTIALS.map((x) => sourcePartial(x, 'raw')).join(', ')}\n    FROM access_logs WHERE ${DOMAIN} AND (${c.raw})`,
    ])}
  )
)
UNION ALL
${listsQuery(c, short, short ? CANDIDATES + 1 : TOP_LIMIT)}`;

/** The window's build state in the figures' row shape, as dim STATE_ROW: span as key, bucket as requests, counted as edge, built as errors. */
const STATE_ROW = 20;
const stateAsFigures = (parts: StateParts) => `
SELECT ${STATE_ROW} AS dim, span AS key, toUInt64(bucket) AS requests, toUInt64(counted) AS edge, 0 AS listed_in, ${noTotals('toUInt64(built)')}
FROM (${buildStateQuery(parts)})`;

/** The figures of a plan (none when it reads nothing), and with `state` those parts of the build state, read again. */
const statsQuery = (c: PlanConditions, short: boolean, state: StateParts | null) =>
  unionAll([(c.built !== null || c.raw !== null) && figuresQuery(c, short), state !== null && stateAsFigures(state)]);

interface StatsRow {
  dim: number;
  key: string;
  requests: string | number;
  edge: string | number;
  listed_in: string | number;
  errors: string | number;
  rt_sum: string | number;
  rt_count: string | number;
  visitors: string | number;
  bytes: string | number;
  p50: number | null;
  p95: number | null;
  p99: number | null;
}

/** 100 × part / whole to 2 decimals (half up), from integers, so no binary fraction tips a .5. */
export const percentageOf = (part: number, whole: number) => (whole === 0 ? 0 : Math.round((10_000 * part) / whole) / 100);
const numberOrNull = (v: number | string | null | undefined) => (v === null || v === undefined ? null : Number(v));

/** A fraction to 4 decimals. */
export const fractionOf = (part: number, whole: number) => (whole === 0 ? 0 : Math.round((10_000 * part) / whole) / 10_000);
/** A mean to 2 decimals. */
export const meanOf = (sum: number, count: number) => (count === 0 ? 0 : Math.round((100 * sum) / count) / 100);

/** ClickHouse orders strings by their bytes; JavaScript's `<` by UTF-16 code units. */
const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

interface TopEntry {
  key: string;
  count: number;
}

/** Count descending, then key ascending (status codes as numbers); the first TOP_LIMIT. */
function topOf(entries: TopEntry[], numeric: boolean): TopEntry[] {
  return [...entries]
    .sort((a, b) => b.count - a.count || (numeric ? Number(a.key) - Number(b.key) : 0) || byBytes(a.key, b.key))
    .slice(0, TOP_LIMIT);
}

/** One list's candidates as the short lists propose them (listsQuery with `short`). */
export interface Candidates {
  /**
   * Keys by proposed count, at most CANDIDATES + 1; `edge` is the exact count outside the listed
   * buckets, `listedIn` how many of the listed buckets' short lists hold the key.
   */
  proposed: { key: string; proposed: number; edge: number; listedIn: number }[];
  /** The sum of the listed buckets' thresholds: what a key has at most, in them, beyond its short-list counts. */
  threshold: number;
}

/**
 * The exact top list from the candidates, or null when the short lists cannot prove it. A key
 * outside the first CANDIDATES has at most the next key's proposed count plus the threshold sum
 * (in each listed bucket it is in the short list with its count, or out of it with at most the
 * threshold); if that bound is below the TOP_LIMIT-th exact count (strictly, so no tie can change
 * the order), no key outside can enter the list. `listedCounts` are the candidates' exact counts
 * in the listed buckets.
 */
export function provenTop(candidates: Candidates, listedCounts: Map<string, number>, numeric: boolean): TopEntry[] | null {
  const chosen = candidates.proposed.slice(0, CANDIDATES);
  const bound = (candidates.proposed[CANDIDATES]?.proposed ?? 0) + candidates.threshold;
  const exact = topOf(chosen.map((c) => ({ key: c.key, count: (listedCounts.get(c.key) ?? 0) + c.edge })), numeric);
  if (bound === 0) return exact;
  return exact.length === TOP_LIMIT && bound < exact[TOP_LIMIT - 1]!.count ? exact : null;
}

const NUMERIC = (d: Dimension) => d === STATUS_LIST;

/**
 * The statistics of a planned window for one domain, and with `state` those parts of the window's
 * build state as the same query read them (see queryWindowStats).
 */
async function statsOfPlan(
  clickhouse: ClickHouseClient,
  domainId: number,
  planned: WindowPlan,
  state: StateParts | null,
  filter: SqlFilter | null = null,
): Promise<{ answer: WindowStats; state: BuildState }> {
  // The listed buckets whose short lists are at hand at the plan's versions; the others are read in full.
  const sums = planned.listed.length > 0 ? await shortListSums(clickhouse, domainId, planned.listed) : null;
  const covered = sums?.covered ?? [];
  const plan = { ...planned, listed: covered };
  const unfiltered = planConditions(plan);
  // A filter reads raw rows only (the plan has no built bucket then): it narrows them.
  const conditions = filter && unfiltered.raw ? { ...unfiltered, raw: `(${unfiltered.raw}) AND ${filter.where}`, params: { ...unfiltered.params, ...filter.params } } : unfiltered;
  const params = {
    ...buildStateParams(domainId, plan.start, plan.end),
    ...conditions.params,
    ...sums?.params,
  };
  const select = <Row = StatsRow>(query: string, extra: Record<string, unknown> = {}) => selectRows<Row>(clickhouse, query, { ...params, ...extra });
  const listedBuckets = covered.length;
  const short = listedBuckets > 0;
  const query = statsQuery(conditions, short, state);
  const rows = query ? await select(query) : [];
  const stateRows: BuildStateRow[] = [];
  const lists = new Map<number, TopEntry[]>(DIMENSIONS.map((d) => [d.number, []]));
  const candidates = new Map<number, Candidates>(DIMENSIONS.map((d) => [d.number, { proposed: [], threshold: 0 }]));
  let totals: StatsRow | undefined;
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim === 0) totals = row;
    else if (dim === STATE_ROW) stateRows.push({ span: row.key, bucket: row.requests, counted: row.edge, built: row.errors });
    else if (dim > 10) candidates.get(dim - 10)!.threshold = Number(row.requests);
    else if (short) candidates.get(dim)!.proposed.push({ key: row.key, proposed: Number(row.requests), edge: Number(row.edge), listedIn: Number(row.listed_in) });
    else lists.get(dim)!.push({ key: row.key, count: Number(row.requests) });
  }
  if (short) {
    // ClickHouse returns the candidates in its order; the bound needs them by proposed count.
    for (const c of candidates.values()) c.proposed.sort((a, b) => b.proposed - a.proposed || byBytes(a.key, b.key));
    // A candidate in every listed bucket's short list has its exact count there already (its
    // short-list sum); only the others are looked up in those buckets' full rows, and usually
    // there are none.
    const inListed = new Map<number, Map<string, number>>(DIMENSIONS.map((d) => [d.number, new Map()]));
    const lookups = new Map<number, string[]>(DIMENSIONS.map((d) => [d.number, []]));
    for (const [dim, c] of candidates) {
      for (const k of c.proposed.slice(0, CANDIDATES)) {
        if (k.listedIn === listedBuckets) inListed.get(dim)!.set(k.key, k.proposed - k.edge);
        else lookups.get(dim)!.push(k.key);
      }
    }
    // No query when there is nothing to look up, or all of it is in memory.
    for (const [dim, counts] of await listedCounts(clickhouse, domainId, covered, lookups)) for (const [key, n] of counts) inListed.get(dim)!.set(key, n);
    const unproven: Dimension[] = [];
    for (const d of DIMENSIONS) {
      const top = provenTop(candidates.get(d.number)!, inListed.get(d.number)!, NUMERIC(d));
      if (top) lists.set(d.number, top);
      else unproven.push(d);
    }
    // Rare (a flat distribution): these lists sum the buckets' full rows after all.
    if (unproven.length > 0) {
      const rows = await select(listsQuery(conditions, false, TOP_LIMIT, unproven));
      for (const row of rows) lists.get(Number(row.dim))!.push({ key: row.key, count: Number(row.requests) });
    }
  }
  const total = Number(totals?.requests ?? 0);
  const share = (count: number) => percentageOf(count, total);
  const list = (d: Dimension) => topOf(lists.get(d.number)!, NUMERIC(d));
  const answer: WindowStats = {
    totalRequests: total,
    uniqueVisitors: Number(totals?.visitors ?? 0),
    averageResponseTime: meanOf(Number(totals?.rt_sum ?? 0), Number(totals?.rt_count ?? 0)),
    errorRate: fractionOf(Number(totals?.errors ?? 0), total),
    topUrls: list(URL_LIST).map((e) => ({ url: e.key, requests: e.count, percentage: share(e.count) })),
    topStatusCodes: list(STATUS_LIST).map((e) => ({ code: Number(e.key), count: e.count, percentage: share(e.count) })),
    topUserAgents: list(AGENT_LIST).map((e) => ({ userAgent: e.key, requests: e.count, percentage: share(e.count) })),
    topReferrers: list(REFERRER_LIST).map((e) => ({ referrer: e.key, requests: e.count, percentage: share(e.count) })),
    bandwidth: Number(totals?.bytes ?? 0),
    responseTimePercentiles: { p50: numberOrNull(totals?.p50), p95: numberOrNull(totals?.p95), p99: numberOrNull(totals?.p99) },
  };
  return { answer, state: buildStateOf(stateRows) };
}

/**
 * The statistics of [start, end] for one domain: the figures from the rollups the build state
 * allows and the raw rows for the rest, in one query once the window's buckets were asked for
 * (src/rollups/known-plans.ts). `rollups: false` reads every row from access_logs (the reference answer for
 * tests and the benchmark).
 */
export async function queryWindowStats(clickhouse: ClickHouseClient, domainId: number, start: number, end: number, rollups = true): Promise<WindowStats> {
  if (!rollups) return (await statsOfPlan(clickhouse, domainId, planWindow(start, end, null), null)).answer;
  const b = windowBuckets(start, end);
  return readWithKnownPlan(clickhouse, `stats:${domainId}:${b.hourFrom}:${b.dayFrom}:${b.dayTo}:${b.hourTo}`, {
    readState: () => queryBuildState(clickhouse, domainId, start, end),
    plan: (state) => planWindow(start, end, state),
    run: (plan, whole) => statsOfPlan(clickhouse, domainId, plan, whole ? 'all' : 'counted'),
  });
}

/**
 * The statistics of [start, end] for the rows that pass `filters` (the registry's, src/stats/query/
 * filters.ts): in one query over the window's raw rows, since the rollups hold no row's fields.
 * Without filters, queryWindowStats.
 */
async function filteredWindowStats(clickhouse: ClickHouseClient, domainId: number, start: number, end: number, filters: readonly QueryFilter[]): Promise<WindowStats> {
  if (filters.length === 0) return queryWindowStats(clickhouse, domainId, start, end);
  const p = new Params('sf');
  const where = filterConditions(filters, [], p).join(' AND ');
  return (await statsOfPlan(clickhouse, domainId, planWindow(start, end, null), null, { where, params: p.values })).answer;
}

type StatsDeps = Pick<Services, 'db' | 'clickhouse' | 'config' | 'metrics'>;

/** GET /api/logs/domains/:domainId/stats: the domain must be visible and the caller hold logs:read. */
export async function getLogStats(deps: StatsDeps, principal: Principal, domainId: number, window: StatsWindow, filters: readonly QueryFilter[] = [], now = Date.now()): Promise<LogStats> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  return windowStats(deps, domainId, window, filters, now);
}

/** A domain's statistics over `window` (no access check: GET …/stats checks it, `tailhouse stats` runs as the operator). */
export async function windowStats(deps: Omit<StatsDeps, 'db'>, domainId: number, window: StatsWindow, filters: readonly QueryFilter[] = [], now = Date.now()): Promise<LogStats> {
  const { start, end } = windowAt(window, now, deps.config.logRetentionDays);
  const stats = await timeQuery(deps.metrics, 'stats', () => filteredWindowStats(deps.clickhouse, domainId, start, end, filters));
  return { period: 'period' in window ? window.period : 'custom', ...stats };
}
