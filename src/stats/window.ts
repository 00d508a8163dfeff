/**
 * Log statistics of a domain (docs/reference/logs.md#statistics): the last `period` up to now, read from the rollups of
 * sql/clickhouse/005_stats_deferred_rollups.sql and 006_stats_hour_tops.sql wherever a whole day or
 * hour of the window is covered and built (src/rollups/builder.ts, planned by src/rollups/plan.ts), and from access_logs for the
 * partial hours at its two ends and for buckets not built yet, so that the answer is the raw rows'
 * answer while a 30-day window reads a few thousand rollup rows instead of every request.
 *
 * One query per request in the steady state (queryWindowStats): chDB runs parameterised queries
 * one at a time per process, so each round trip counts. That query reads only the window's raw
 * ends and the rows counted per hour while the built part is kept in memory (kept-window.ts); the
 * query of this module, which reads the built buckets too, answers when it is not (and is the
 * reference, with `rollups: false`, for the tests).
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Principal, Services } from '../context.js';
import { resolveDomain } from '../domains/service.js';
import { timeQuery } from '../metrics/registry.js';
import { withReads } from '../reads/client.js';
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
import { unionAll } from '../rollups/shared-sql.js';
import { Params, type SqlFilter } from '../logs/filters.js';
import type { QueryFilter } from './query/filters.js';
import { filterConditions } from './query/where.js';
import { windowAt, type StatsWindow } from './periods.js';
import { mergedPartial, sourcePartial, type Metric } from './registry.js';
import { shortListSums } from '../rollups/short-lists.js';
import { DIMENSIONS, FIGURE_METRICS, FIGURE_PARTIALS, isNumeric, TOP_LIMIT, CANDIDATES, topProven, windowStatsOf, type Dimension, type LogStats, type TopEntry, type WindowStats } from './figures.js';
import { candidatesOf, countsOfCandidates, exactLists, listsQuery } from './top-lists.js';
import { keptWindowStats } from './kept-window.js';

const DOMAIN = 'domain_id = {domainId:UInt32}';

/** A metric's column in the figures' rows. */
const metricColumn = (m: Metric) => `m_${m.name}`;
/** The metrics' columns in a row that is not the figures row. */
const noFigures = FIGURE_METRICS.map((m) => `NULL AS ${metricColumn(m)}`).join(', ');

/**
 * Row dim 0 carries the figures: the registry's partials of the shown metrics from the built
 * buckets' total rows and from the raw ranges, merged, and the metrics' final SQL over them (in a
 * subquery of their own: the partials' names, such as `requests`, are not the row's columns); then
 * the lists (listsQuery).
 */
const figuresQuery = (c: PlanConditions, short: boolean) => `
SELECT 0 AS dim, '' AS key, toUInt64(0) AS requests, toUInt64(0) AS edge, toUInt64(0) AS listed_in, ${FIGURE_METRICS.map(metricColumn).join(', ')}
FROM (
  SELECT ${FIGURE_METRICS.map((m) => `${m.final} AS ${metricColumn(m)}`).join(', ')}
  FROM (
    SELECT ${FIGURE_PARTIALS.map((x) => mergedPartial(x)).join(', ')}
    FROM (
      ${unionAll([
        c.built && `SELECT ${FIGURE_PARTIALS.map((x) => sourcePartial(x, 'rollup')).join(', ')}\n      FROM access_rollups WHERE ${DOMAIN} AND dim = 'total' AND (${c.built})`,
        c.raw && `SELECT ${FIGURE_PARTIALS.map((x) => sourcePartial(x, 'raw')).join(', ')}\n      FROM access_logs WHERE ${DOMAIN} AND (${c.raw})`,
      ])}
    )
  )
)
UNION ALL
SELECT dim, key, requests, edge, listed_in, ${noFigures} FROM (${listsQuery(c, short, short ? CANDIDATES + 1 : TOP_LIMIT)})`;

/** The window's build state in the figures' row shape, as dim STATE_ROW: span as key, bucket as requests, counted as edge, built as listed_in. */
const STATE_ROW = 20;
const stateAsFigures = (parts: StateParts) => `
SELECT ${STATE_ROW} AS dim, span AS key, toUInt64(bucket) AS requests, toUInt64(counted) AS edge, toUInt64(built) AS listed_in, ${noFigures}
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
  /** The metrics' columns (metricColumn), in the figures row. */
  [metric: string]: unknown;
}

const numberOrNull = (v: unknown) => (v === null || v === undefined ? null : Number(v));

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
  const short = covered.length > 0;
  const query = statsQuery(conditions, short, state);
  const rows = query ? await selectRows<StatsRow>(clickhouse, query, params) : [];
  const stateRows: BuildStateRow[] = [];
  const lists = new Map<number, TopEntry[]>(DIMENSIONS.map((d) => [d.number, []]));
  const listRows: StatsRow[] = [];
  let figures: StatsRow | undefined;
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim === 0) figures = row;
    else if (dim === STATE_ROW) stateRows.push({ span: row.key, bucket: row.requests, counted: row.edge, built: row.listed_in });
    else if (short) listRows.push(row);
    else lists.get(dim)!.push({ key: row.key, count: Number(row.requests) });
  }
  if (short) {
    const counts = await countsOfCandidates(clickhouse, domainId, covered, candidatesOf(listRows));
    const unproven: Dimension[] = [];
    for (const d of DIMENSIONS) {
      const top = topProven(counts.get(d.number)!, isNumeric(d));
      if (top) lists.set(d.number, top);
      else unproven.push(d);
    }
    if (unproven.length > 0) for (const [dim, top] of await exactLists(clickhouse, conditions, params, unproven)) lists.set(dim, top);
  }
  // No figures row: the plan read nothing, and each metric has its value over no rows.
  const answer = windowStatsOf((m) => (figures ? numberOrNull(figures[metricColumn(m)]) : m.empty), lists);
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
    run: async (plan, whole) => {
      const parts = whole ? 'all' : 'counted';
      return (await keptWindowStats(clickhouse, domainId, plan, parts, buildStateParams(domainId, start, end))) ?? statsOfPlan(clickhouse, domainId, plan, parts);
    },
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

type StatsDeps = Pick<Services, 'db' | 'clickhouse' | 'reads' | 'config' | 'metrics'>;

/** GET /api/logs/domains/:domainId/stats: the domain must be visible and the caller hold logs:read. */
export async function getLogStats(deps: StatsDeps, principal: Principal, domainId: number, window: StatsWindow, filters: readonly QueryFilter[] = [], now = Date.now()): Promise<LogStats> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  return withReads(deps, principal, 'stats', (clickhouse) => windowStats({ ...deps, clickhouse }, domainId, window, filters, now));
}

/** A domain's statistics over `window` (no access check: GET …/stats checks it, `tailhouse stats` runs as the operator). */
export async function windowStats(deps: Pick<StatsDeps, 'clickhouse' | 'config' | 'metrics'>, domainId: number, window: StatsWindow, filters: readonly QueryFilter[] = [], now = Date.now()): Promise<LogStats> {
  const { start, end } = windowAt(window, now, deps.config.logRetentionDays);
  const stats = await timeQuery(deps.metrics, 'stats', () => filteredWindowStats(deps.clickhouse, domainId, start, end, filters));
  return { period: 'period' in window ? window.period : 'custom', ...stats };
}
