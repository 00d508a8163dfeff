/**
 * Log statistics of a domain (CONTRACT §5): the last `period` up to now, read from the rollups of
 * sql/clickhouse/005_stats_deferred_rollups.sql wherever a whole day or hour of the window is
 * covered and built (src/logs/rollups.ts), and from access_logs for the partial hours at its two
 * ends and for buckets not built yet, so that the answer is the raw rows' answer while a 30-day
 * window reads a few thousand rollup rows instead of every request.
 *
 * Two queries per request (the build state, then the figures): chDB runs parameterised queries one
 * at a time per process, so each round trip counts.
 */
import type { ClickHouseClient } from '../db/clickhouse.js';
import type { Principal, Services } from '../context.js';
import { resolveDomain } from '../domains/service.js';

export const STATS_PERIODS = ['1h', '24h', '7d', '30d'] as const;
export type StatsPeriod = (typeof STATS_PERIODS)[number];

const HOUR_MS = 3_600_000;
const DAY_MS = 86_400_000;
const PERIOD_MS: Record<StatsPeriod, number> = { '1h': HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS };

/** How many entries a top list holds at most. */
export const TOP_LIMIT = 10;

export interface LogStats {
  period: StatsPeriod;
  totalRequests: number;
  uniqueVisitors: number;
  averageResponseTime: number;
  errorRate: number;
  topUrls: { url: string; requests: number; percentage: number }[];
  topStatusCodes: { code: number; count: number; percentage: number }[];
  topUserAgents: { userAgent: string; requests: number; percentage: number }[];
  topReferrers: { referrer: string; requests: number; percentage: number }[];
}

/** The figures of a window, before they are shaped for a period. */
export type WindowStats = Omit<LogStats, 'period'>;

/**
 * How a window [start, end] (epoch ms, both ends included) is read: whole days and whole hours from
 * access_rollups where they are built, everything else (the partial hours at both ends, and buckets
 * not yet built or written to since) from access_logs as half-open ranges [from, to).
 */
export interface WindowPlan {
  start: number;
  end: number;
  days: number[];
  hours: number[];
  raw: [number, number][];
  /** Whether every day of `days` has its short top lists (access_day_tops) built with it. */
  tops: boolean;
}

/** The whole days and hours a window could read from rollups: [hourFrom, hourTo) ⊇ [dayFrom, dayTo). */
export interface WindowBuckets {
  hourFrom: number;
  dayFrom: number;
  dayTo: number;
  hourTo: number;
}

const floorTo = (ms: number, unit: number) => Math.floor(ms / unit) * unit;
const ceilTo = (ms: number, unit: number) => Math.ceil(ms / unit) * unit;

/** The whole hours of [start, end] and the whole days among them; empty ranges have equal ends. */
export function windowBuckets(start: number, end: number): WindowBuckets {
  const hourFrom = ceilTo(start, HOUR_MS);
  const hourTo = floorTo(end, HOUR_MS);
  if (hourFrom >= hourTo) return { hourFrom: start, dayFrom: start, dayTo: start, hourTo: start };
  const dayFrom = ceilTo(hourFrom, DAY_MS);
  const dayTo = floorTo(hourTo, DAY_MS);
  if (dayFrom >= dayTo) return { hourFrom, dayFrom: hourTo, dayTo: hourTo, hourTo };
  return { hourFrom, dayFrom, dayTo, hourTo };
}

/** How far a window's buckets are built: rows counted and requests built, by bucket start (ms). */
export interface BuildState {
  /** Hour → rows access_hour_rows counted. */
  counted: Map<number, number>;
  /** Hour → requests of its built total row. */
  builtHours: Map<number, number>;
  /** Day → requests of its built total row. */
  builtDays: Map<number, number>;
  /** Day → the day's requests when its short top lists were built. */
  topsDays: Map<number, number>;
}

/** Beyond this many raw ranges a window is read from access_logs alone (a rare, unbuilt backlog). */
const MAX_RAW_RANGES = 48;

/**
 * Chooses, bucket by bucket, rollup or raw rows: a day whose total equals the rows counted in its
 * hours, else each hour whose total equals its count; the rest of the window is raw. Adjacent raw
 * ranges are joined. Pure, so the tests can drive it with any state.
 */
export function planWindow(start: number, end: number, state: BuildState | null): WindowPlan {
  const b = windowBuckets(start, end);
  const raw: [number, number][] = [];
  const addRaw = (from: number, to: number) => {
    if (from >= to) return;
    const last = raw[raw.length - 1];
    if (last && last[1] === from) last[1] = to;
    else raw.push([from, to]);
  };
  const whole: WindowPlan = { start, end, days: [], hours: [], raw: [[start, end + 1]], tops: false };
  if (!state || b.hourFrom >= b.hourTo) return whole;
  const days: number[] = [];
  const hours: number[] = [];
  const hour = (h: number) => {
    const counted = state.counted.get(h) ?? 0;
    if (counted === 0) return; // no rows (or none counted yet: read raw so a fresh insert is seen)
    if (state.builtHours.get(h) === counted) hours.push(h);
    else addRaw(h, h + HOUR_MS);
  };
  addRaw(start, b.hourFrom);
  for (let h = b.hourFrom; h < b.dayFrom; h += HOUR_MS) hour(h);
  for (let d = b.dayFrom; d < b.dayTo; d += DAY_MS) {
    let counted = 0;
    for (let h = d; h < d + DAY_MS; h += HOUR_MS) counted += state.counted.get(h) ?? 0;
    if (counted === 0) continue;
    if (state.builtDays.get(d) === counted) days.push(d);
    else for (let h = d; h < d + DAY_MS; h += HOUR_MS) hour(h);
  }
  for (let h = b.dayTo; h < b.hourTo; h += HOUR_MS) hour(h);
  addRaw(b.hourTo, end + 1);
  const tops = days.length > 0 && days.every((d) => state.topsDays.get(d) === state.builtDays.get(d));
  return raw.length > MAX_RAW_RANGES ? whole : { start, end, days, hours, raw, tops };
}

/** Rows counted and rollups built for the whole hours and days of [start, end]. */
const BUILD_STATE_QUERY = `
SELECT 'hour' AS span, toUnixTimestamp(c.hour) AS bucket, c.counted AS counted, b.requests AS built
FROM (
  SELECT hour, sum(rows) AS counted FROM access_hour_rows
  WHERE domain_id = {domainId:UInt32} AND hour >= toDateTime({hourFrom:UInt32}, 'UTC') AND hour < toDateTime({hourTo:UInt32}, 'UTC')
  GROUP BY hour
) AS c
LEFT JOIN (
  SELECT bucket AS hour, sum(requests) AS requests FROM access_rollups
  WHERE domain_id = {domainId:UInt32} AND span = 'hour' AND dim = 'total'
    AND bucket >= toDateTime({hourFrom:UInt32}, 'UTC') AND bucket < toDateTime({hourTo:UInt32}, 'UTC')
  GROUP BY hour
) AS b USING (hour)
UNION ALL
SELECT 'day', toUnixTimestamp(bucket), 0, sum(requests) FROM access_rollups
WHERE domain_id = {domainId:UInt32} AND span = 'day' AND dim = 'total'
  AND bucket >= toDateTime({dayFrom:UInt32}, 'UTC') AND bucket < toDateTime({dayTo:UInt32}, 'UTC')
GROUP BY bucket
UNION ALL
SELECT 'tops', toUnixTimestamp(day), 0, max(built_requests) FROM access_day_tops
WHERE domain_id = {domainId:UInt32} AND day >= toDateTime({dayFrom:UInt32}, 'UTC') AND day < toDateTime({dayTo:UInt32}, 'UTC')
GROUP BY day`;

const seconds = (ms: number) => Math.floor(ms / 1000);

export async function queryBuildState(clickhouse: ClickHouseClient, domainId: number, start: number, end: number): Promise<BuildState> {
  const b = windowBuckets(start, end);
  const result = await clickhouse.query({
    query: BUILD_STATE_QUERY,
    query_params: { domainId, hourFrom: seconds(b.hourFrom), hourTo: seconds(b.hourTo), dayFrom: seconds(b.dayFrom), dayTo: seconds(b.dayTo) },
    format: 'JSONEachRow',
  });
  const state: BuildState = { counted: new Map(), builtHours: new Map(), builtDays: new Map(), topsDays: new Map() };
  for (const row of await result.json<{ span: string; bucket: number; counted: string; built: string }>()) {
    const at = Number(row.bucket) * 1000;
    if (row.span === 'day') state.builtDays.set(at, Number(row.built));
    else if (row.span === 'tops') state.topsDays.set(at, Number(row.built));
    else {
      state.counted.set(at, Number(row.counted));
      state.builtHours.set(at, Number(row.built));
    }
  }
  return state;
}

// The plan's rollup buckets (seconds) and raw ranges (ms), as bound parameters; the number of
// ranges is the plan's, never the request's.
const DOMAIN = 'domain_id = {domainId:UInt32}';
const BUCKETS =
  "((span = 'day' AND bucket IN arrayMap(x -> toDateTime(x, 'UTC'), {days:Array(UInt32)}))" +
  " OR (span = 'hour' AND bucket IN arrayMap(x -> toDateTime(x, 'UTC'), {hours:Array(UInt32)})))";
export const rawCondition = (ranges: number) =>
  ranges === 0
    ? '0'
    : Array.from(
        { length: ranges },
        (_, i) => `(timestamp >= fromUnixTimestamp64Milli({raw${i}from:Int64}, 'UTC') AND timestamp < fromUnixTimestamp64Milli({raw${i}to:Int64}, 'UTC'))`,
      ).join(' OR ');

// The top lists: access_rollups.dim, the raw column (leaving out what the list leaves out), and the
// tie-break after the count (status codes as numbers, the others by their bytes).
const DIMENSIONS = [
  { dim: 1, name: 'url', column: 'url', skip: '', order: 'key' },
  { dim: 2, name: 'status', column: 'toString(status_code)', skip: '', order: 'toUInt32OrZero(key), key' },
  { dim: 3, name: 'agent', column: 'user_agent', skip: '', order: 'key' },
  { dim: 4, name: 'referrer', column: 'referrer', skip: " AND referrer != ''", order: 'key' },
] as const;
type Dimension = (typeof DIMENSIONS)[number];

const DAYS = "arrayMap(x -> toDateTime(x, 'UTC'), {days:Array(UInt32)})";
const rawKeys = (d: Dimension, raw: string) => `SELECT ${d.column} AS key, count() AS requests FROM access_logs WHERE ${DOMAIN} AND (${raw})${d.skip} GROUP BY key`;

/** One top list: its keys summed over the rollup buckets and the raw ranges, the first TOP_LIMIT. */
const topBranch = (d: Dimension, raw: string) => `
SELECT ${d.dim} AS dim, key, requests, 0 AS errors, 0 AS rt_sum, 0 AS rt_count, 0 AS visitors
FROM (
  SELECT key, sum(requests) AS requests
  FROM (
    SELECT key, requests FROM access_rollups WHERE ${DOMAIN} AND dim = '${d.name}' AND ${BUCKETS}
    UNION ALL
    ${rawKeys(d, raw)}
  )
  GROUP BY key
  ORDER BY requests DESC, ${d.order}
  LIMIT ${TOP_LIMIT}
)`;

/** How many keys a list's short form (access_day_tops) proposes for the exact count. */
const CANDIDATES = 30;

/**
 * One list's candidates when the days have short top lists: per key, `requests` = its counts in the
 * days' short lists plus `errors` = its exact count in the hours and raw ranges (the edge), the
 * first CANDIDATES + 1 by that sum; and a row of dim 10 + list whose `requests` is the sum of the
 * days' thresholds.
 */
const candidateBranch = (d: Dimension, raw: string) => `
SELECT ${d.dim} AS dim, key, proposed AS requests, edge AS errors, 0 AS rt_sum, 0 AS rt_count, 0 AS visitors
FROM (
  SELECT key, sum(in_short) + sum(in_edge) AS proposed, sum(in_edge) AS edge
  FROM (
    SELECT key, count AS in_short, 0 AS in_edge
    FROM (
      SELECT argMax(keys, built_requests) AS ks, argMax(counts, built_requests) AS cs
      FROM access_day_tops WHERE ${DOMAIN} AND dim = '${d.name}' AND day IN ${DAYS} GROUP BY day
    )
    ARRAY JOIN ks AS key, cs AS count
    UNION ALL
    SELECT key, 0, requests FROM access_rollups
    WHERE ${DOMAIN} AND dim = '${d.name}' AND span = 'hour' AND bucket IN arrayMap(x -> toDateTime(x, 'UTC'), {hours:Array(UInt32)})
    UNION ALL
    SELECT key, 0, requests FROM (${rawKeys(d, raw)})
  )
  GROUP BY key
  ORDER BY proposed DESC, key
  LIMIT ${CANDIDATES + 1}
)
UNION ALL
SELECT ${10 + d.dim}, '', sum(threshold), 0, 0, 0, 0
FROM (SELECT argMax(threshold, built_requests) AS threshold FROM access_day_tops WHERE ${DOMAIN} AND dim = '${d.name}' AND day IN ${DAYS} GROUP BY day)`;

/**
 * Row dim 0 carries the totals; the others each list's entries, already cut to TOP_LIMIT, or its
 * candidates (`tops`). Each list is aggregated on its own key alone: grouping all four by (dim,
 * key) at once took three times as long.
 */
const statsQuery = (rawRanges: number, tops: boolean) => {
  const raw = rawCondition(rawRanges);
  return `
SELECT 0 AS dim, '' AS key, sum(requests) AS requests, sum(errors) AS errors, sum(rt_sum) AS rt_sum, sum(rt_count) AS rt_count,
       uniqExactMerge(visitors) AS visitors
FROM (
  SELECT requests, errors, response_time_sum AS rt_sum, response_time_count AS rt_count, visitors
  FROM access_rollups WHERE ${DOMAIN} AND dim = 'total' AND ${BUCKETS}
  UNION ALL
  SELECT count(), countIf(status_code >= 500), sum(ifNull(response_time, 0)), count(response_time), uniqExactState(ip_address)
  FROM access_logs WHERE ${DOMAIN} AND (${raw})
)
${DIMENSIONS.map((d) => `UNION ALL${tops ? candidateBranch(d, raw) : topBranch(d, raw)}`).join('\n')}`;
};

/** The full top lists of some dimensions (those the short lists could not prove). */
const topListsQuery = (rawRanges: number, dims: Dimension[]) => dims.map((d) => topBranch(d, rawCondition(rawRanges))).join('\nUNION ALL');

/** The candidates' counts in the days' full rows. */
const DAY_COUNTS_QUERY = `
SELECT CAST(dim, 'Int8') AS list, key, sum(requests) AS requests
FROM access_rollups
WHERE ${DOMAIN} AND span = 'day' AND bucket IN ${DAYS}
  AND ((dim = 'url' AND key IN {k1:Array(String)}) OR (dim = 'status' AND key IN {k2:Array(String)})
    OR (dim = 'agent' AND key IN {k3:Array(String)}) OR (dim = 'referrer' AND key IN {k4:Array(String)}))
GROUP BY list, key`;

interface StatsRow {
  dim: number;
  key: string;
  requests: string | number;
  errors: string | number;
  rt_sum: string | number;
  rt_count: string | number;
  visitors: string | number;
}

/** 100 × part / whole to 2 decimals (half up), from integers, so no binary fraction tips a .5. */
export const percentageOf = (part: number, whole: number) => (whole === 0 ? 0 : Math.round((10_000 * part) / whole) / 100);
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

/** One list's candidates as the short lists propose them (see candidateBranch). */
export interface Candidates {
  /** Keys by proposed count, at most CANDIDATES + 1; `edge` is the exact count outside the days. */
  proposed: { key: string; proposed: number; edge: number }[];
  /** The sum of the days' thresholds: what a key has at most, in the days, beyond its short-list counts. */
  threshold: number;
}

/**
 * The exact top list from the candidates, or null when the short lists cannot prove it. A key
 * outside the first CANDIDATES has at most the next key's proposed count plus the threshold sum
 * (in each day it is in the short list with its count, or out of it with at most the threshold);
 * if that bound is below the TOP_LIMIT-th exact count (strictly, so no tie can change the order),
 * no key outside can enter the list. `dayCounts` are the candidates' exact counts in the days.
 */
export function provenTop(candidates: Candidates, dayCounts: Map<string, number>, numeric: boolean): TopEntry[] | null {
  const chosen = candidates.proposed.slice(0, CANDIDATES);
  const bound = (candidates.proposed[CANDIDATES]?.proposed ?? 0) + candidates.threshold;
  const exact = topOf(chosen.map((c) => ({ key: c.key, count: (dayCounts.get(c.key) ?? 0) + c.edge })), numeric);
  if (bound === 0) return exact;
  return exact.length === TOP_LIMIT && bound < exact[TOP_LIMIT - 1]!.count ? exact : null;
}

const NUMERIC = (d: Dimension) => d.name === 'status';

/** The statistics of a planned window for one domain. */
export async function queryPlannedStats(clickhouse: ClickHouseClient, domainId: number, plan: WindowPlan): Promise<WindowStats> {
  const rawParams = Object.fromEntries(plan.raw.flatMap(([from, to], i) => [[`raw${i}from`, from], [`raw${i}to`, to]]));
  const params = { domainId, days: plan.days.map(seconds), hours: plan.hours.map(seconds), ...rawParams };
  const select = async <Row = StatsRow>(query: string, extra: Record<string, unknown> = {}) =>
    (await clickhouse.query({ query, query_params: { ...params, ...extra }, format: 'JSONEachRow' })).json<Row>();

  const rows = await select(statsQuery(plan.raw.length, plan.tops));
  const lists = new Map<number, TopEntry[]>(DIMENSIONS.map((d) => [d.dim, []]));
  const candidates = new Map<number, Candidates>(DIMENSIONS.map((d) => [d.dim, { proposed: [], threshold: 0 }]));
  let totals: StatsRow | undefined;
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim === 0) totals = row;
    else if (dim > 10) candidates.get(dim - 10)!.threshold = Number(row.requests);
    else if (plan.tops) candidates.get(dim)!.proposed.push({ key: row.key, proposed: Number(row.requests), edge: Number(row.errors) });
    else lists.get(dim)!.push({ key: row.key, count: Number(row.requests) });
  }
  if (plan.tops) {
    // ClickHouse returns the candidates in its order; the bound needs them by proposed count.
    for (const c of candidates.values()) c.proposed.sort((a, b) => b.proposed - a.proposed || byBytes(a.key, b.key));
    const keys = Object.fromEntries(DIMENSIONS.map((d) => [`k${d.dim}`, candidates.get(d.dim)!.proposed.slice(0, CANDIDATES).map((c) => c.key)]));
    const dayCounts = new Map<number, Map<string, number>>(DIMENSIONS.map((d) => [d.dim, new Map()]));
    for (const row of await select<{ list: number; key: string; requests: string }>(DAY_COUNTS_QUERY, keys)) dayCounts.get(Number(row.list))?.set(row.key, Number(row.requests));
    const unproven: Dimension[] = [];
    for (const d of DIMENSIONS) {
      const top = provenTop(candidates.get(d.dim)!, dayCounts.get(d.dim)!, NUMERIC(d));
      if (top) lists.set(d.dim, top);
      else unproven.push(d);
    }
    // Rare (a flat distribution): these lists sum the days' full rows after all.
    if (unproven.length > 0) for (const row of await select(topListsQuery(plan.raw.length, unproven))) lists.get(Number(row.dim))!.push({ key: row.key, count: Number(row.requests) });
  }
  const total = Number(totals?.requests ?? 0);
  const share = (count: number) => percentageOf(count, total);
  const list = (d: Dimension) => topOf(lists.get(d.dim)!, NUMERIC(d));
  const [url, status, agent, referrer] = DIMENSIONS;
  return {
    totalRequests: total,
    uniqueVisitors: Number(totals?.visitors ?? 0),
    averageResponseTime: meanOf(Number(totals?.rt_sum ?? 0), Number(totals?.rt_count ?? 0)),
    errorRate: fractionOf(Number(totals?.errors ?? 0), total),
    topUrls: list(url).map((e) => ({ url: e.key, requests: e.count, percentage: share(e.count) })),
    topStatusCodes: list(status).map((e) => ({ code: Number(e.key), count: e.count, percentage: share(e.count) })),
    topUserAgents: list(agent).map((e) => ({ userAgent: e.key, requests: e.count, percentage: share(e.count) })),
    topReferrers: list(referrer).map((e) => ({ referrer: e.key, requests: e.count, percentage: share(e.count) })),
  };
}

/**
 * The statistics of [start, end] for one domain: the build state first, then the figures from the
 * rollups it allows and the raw rows for the rest. `rollups: false` reads every row from
 * access_logs (the reference answer for tests and the benchmark).
 */
export async function queryWindowStats(clickhouse: ClickHouseClient, domainId: number, start: number, end: number, rollups = true): Promise<WindowStats> {
  const state = rollups ? await queryBuildState(clickhouse, domainId, start, end) : null;
  return queryPlannedStats(clickhouse, domainId, planWindow(start, end, state));
}

/**
 * The window of a period ending at `now`: [now − period, now], but never older than the retention
 * (LOG_RETENTION_DAYS), whose rows the raw table and the rollups drop at different moments.
 */
export function periodWindow(period: StatsPeriod, now: number, retentionDays: number): { start: number; end: number } {
  return { start: Math.max(now - PERIOD_MS[period], now - retentionDays * DAY_MS), end: now };
}

type StatsDeps = Pick<Services, 'db' | 'clickhouse' | 'config'>;

/** GET /api/logs/domains/:domainId/stats: the domain must be visible and the caller hold logs:read. */
export async function getLogStats(deps: StatsDeps, principal: Principal, domainId: number, period: StatsPeriod, now = Date.now()): Promise<LogStats> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const { start, end } = periodWindow(period, now, deps.config.logRetentionDays);
  return { period, ...(await queryWindowStats(deps.clickhouse, domainId, start, end)) };
}

/** The rollup tables of sql/clickhouse/005_stats_deferred_rollups.sql. */
const STATS_TABLES = ['access_rollups', 'access_day_tops', 'access_hour_rows'] as const;

/**
 * Deletes a domain's rollup rows. A delete on access_logs does not reach the materialized views'
 * tables, so deleting a domain's logs must call this too.
 */
export async function deleteDomainStats(clickhouse: ClickHouseClient, domainId: number): Promise<void> {
  for (const table of STATS_TABLES) {
    await clickhouse.command({ query: `DELETE FROM ${table} WHERE domain_id = {domainId:UInt32}`, query_params: { domainId } });
  }
}
