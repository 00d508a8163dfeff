/**
 * Log statistics of a domain (CONTRACT §5): the last `period` up to now, read from the rollups of
 * sql/clickhouse/004_stats_rollups.sql wherever a whole day or hour of the window is covered, and
 * from access_logs only for the partial hours at its two ends, so that the answer is the raw rows'
 * answer while a 30-day window reads a few thousand rollup rows instead of every request.
 *
 * One query per request: chDB runs parameterised queries one at a time per process.
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
 * How a window [start, end] (epoch ms, both ends included) is read: days [dayFrom, dayTo) and hours
 * [hourFrom, dayFrom) ∪ [dayTo, hourTo) from the rollups, and [start, hourFrom) ∪ [hourTo, end] from
 * access_logs. Rollup ranges are whole hours or days; an empty one has equal ends.
 */
export interface WindowPlan {
  start: number;
  end: number;
  hourFrom: number;
  dayFrom: number;
  dayTo: number;
  hourTo: number;
}

const floorTo = (ms: number, unit: number) => Math.floor(ms / unit) * unit;
const ceilTo = (ms: number, unit: number) => Math.ceil(ms / unit) * unit;

/**
 * Splits a window into rollup and raw pieces. `rollups: false` reads all of it from access_logs
 * (the reference answer for tests and the benchmark).
 */
export function planWindow(start: number, end: number, rollups = true): WindowPlan {
  const hourFrom = ceilTo(start, HOUR_MS);
  const hourTo = floorTo(end, HOUR_MS);
  if (!rollups || hourFrom >= hourTo) return { start, end, hourFrom: start, dayFrom: start, dayTo: start, hourTo: start };
  const dayFrom = ceilTo(hourFrom, DAY_MS);
  const dayTo = floorTo(hourTo, DAY_MS);
  if (dayFrom >= dayTo) return { start, end, hourFrom, dayFrom: hourTo, dayTo: hourTo, hourTo };
  return { start, end, hourFrom, dayFrom, dayTo, hourTo };
}

// Rollup rows of the plan's days and hours (bucket times in seconds), and raw rows of its edges (ms).
const DOMAIN = 'domain_id = {domainId:UInt32}';
const BUCKETS =
  "((span = 'day' AND bucket >= toDateTime({dayFrom:UInt32}, 'UTC') AND bucket < toDateTime({dayTo:UInt32}, 'UTC'))" +
  " OR (span = 'hour' AND ((bucket >= toDateTime({hourFrom:UInt32}, 'UTC') AND bucket < toDateTime({dayFrom:UInt32}, 'UTC'))" +
  " OR (bucket >= toDateTime({dayTo:UInt32}, 'UTC') AND bucket < toDateTime({hourTo:UInt32}, 'UTC')))))";
const RAW =
  "((timestamp >= fromUnixTimestamp64Milli({start:Int64}, 'UTC') AND timestamp < fromUnixTimestamp64Milli({rawHeadEnd:Int64}, 'UTC'))" +
  " OR (timestamp >= fromUnixTimestamp64Milli({rawTailStart:Int64}, 'UTC') AND timestamp <= fromUnixTimestamp64Milli({end:Int64}, 'UTC')))";

// The top lists: access_stats_top.dim, the raw column (leaving out what the list leaves out), and the
// tie-break after the count (status codes as numbers, the others by their bytes).
const DIMENSIONS = [
  { dim: 1, name: 'url', column: 'url', skip: '', order: 'key' },
  { dim: 2, name: 'status', column: 'toString(status_code)', skip: '', order: 'toUInt32OrZero(key), key' },
  { dim: 3, name: 'agent', column: 'user_agent', skip: '', order: 'key' },
  { dim: 4, name: 'referrer', column: 'referrer', skip: " AND referrer != ''", order: 'key' },
] as const;
const DIM = { url: 1, status: 2, agent: 3, referrer: 4 } as const;

/** One top list: its keys summed over the rollup buckets and the raw edges, the first TOP_LIMIT. */
const topBranch = (d: (typeof DIMENSIONS)[number]) => `
SELECT ${d.dim}, key, requests, 0, 0, 0, 0
FROM (
  SELECT key, sum(requests) AS requests
  FROM (
    SELECT key, requests FROM access_stats_top WHERE ${DOMAIN} AND dim = '${d.name}' AND ${BUCKETS}
    UNION ALL
    SELECT ${d.column} AS key, count() AS requests FROM access_logs WHERE ${DOMAIN} AND ${RAW}${d.skip} GROUP BY key
  )
  GROUP BY key
  ORDER BY requests DESC, ${d.order}
  LIMIT ${TOP_LIMIT}
)`;

/**
 * Row dim 0 carries the totals; the others each list's entries, already cut to TOP_LIMIT. Each list
 * is aggregated on its own key alone: grouping all four by (dim, key) at once took three times as long.
 */
const STATS_QUERY = `
SELECT 0 AS dim, '' AS key, sum(requests) AS requests, sum(errors) AS errors, sum(rt_sum) AS rt_sum, sum(rt_count) AS rt_count,
       uniqExactMerge(visitors) AS visitors
FROM (
  SELECT requests, errors, response_time_sum AS rt_sum, response_time_count AS rt_count, visitors
  FROM access_stats WHERE ${DOMAIN} AND ${BUCKETS}
  UNION ALL
  SELECT count(), countIf(status_code >= 500), sum(ifNull(response_time, 0)), count(response_time), uniqExactState(ip_address)
  FROM access_logs WHERE ${DOMAIN} AND ${RAW}
)
${DIMENSIONS.map((d) => `UNION ALL${topBranch(d)}`).join('\n')}`;

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
  return entries
    .sort((a, b) => b.count - a.count || (numeric ? Number(a.key) - Number(b.key) : 0) || byBytes(a.key, b.key))
    .slice(0, TOP_LIMIT);
}

/** The statistics of [plan.start, plan.end] for one domain. */
export async function queryWindowStats(clickhouse: ClickHouseClient, domainId: number, plan: WindowPlan): Promise<WindowStats> {
  const seconds = (ms: number) => Math.floor(ms / 1000);
  const result = await clickhouse.query({
    query: STATS_QUERY,
    query_params: {
      domainId,
      start: plan.start,
      end: plan.end,
      rawHeadEnd: plan.hourFrom,
      rawTailStart: plan.hourTo,
      hourFrom: seconds(plan.hourFrom),
      dayFrom: seconds(plan.dayFrom),
      dayTo: seconds(plan.dayTo),
      hourTo: seconds(plan.hourTo),
    },
    format: 'JSONEachRow',
  });
  const rows = await result.json<StatsRow>();
  const lists: Record<number, TopEntry[]> = { [DIM.url]: [], [DIM.status]: [], [DIM.agent]: [], [DIM.referrer]: [] };
  let totals: StatsRow | undefined;
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim === 0) totals = row;
    else lists[dim]?.push({ key: row.key, count: Number(row.requests) });
  }
  const total = Number(totals?.requests ?? 0);
  const share = (count: number) => percentageOf(count, total);
  return {
    totalRequests: total,
    uniqueVisitors: Number(totals?.visitors ?? 0),
    averageResponseTime: meanOf(Number(totals?.rt_sum ?? 0), Number(totals?.rt_count ?? 0)),
    errorRate: fractionOf(Number(totals?.errors ?? 0), total),
    topUrls: topOf(lists[DIM.url]!, false).map((e) => ({ url: e.key, requests: e.count, percentage: share(e.count) })),
    topStatusCodes: topOf(lists[DIM.status]!, true).map((e) => ({ code: Number(e.key), count: e.count, percentage: share(e.count) })),
    topUserAgents: topOf(lists[DIM.agent]!, false).map((e) => ({ userAgent: e.key, requests: e.count, percentage: share(e.count) })),
    topReferrers: topOf(lists[DIM.referrer]!, false).map((e) => ({ referrer: e.key, requests: e.count, percentage: share(e.count) })),
  };
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
  return { period, ...(await queryWindowStats(deps.clickhouse, domainId, planWindow(start, end))) };
}

/** The rollup tables of sql/clickhouse/004_stats_rollups.sql. */
const STATS_TABLES = ['access_stats', 'access_stats_top'] as const;

/**
 * Deletes a domain's rollup rows. A delete on access_logs does not reach the materialized views'
 * tables, so deleting a domain's logs must call this too.
 */
export async function deleteDomainStats(clickhouse: ClickHouseClient, domainId: number): Promise<void> {
  for (const table of STATS_TABLES) {
    await clickhouse.command({ query: `DELETE FROM ${table} WHERE domain_id = {domainId:UInt32}`, query_params: { domainId } });
  }
}
