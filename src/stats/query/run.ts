/**
 * Runs a Query's SQL (sql.ts): where rollup rows may serve it (Query.rollup), first the build
 * state of its windows for all its domains at once, planned bucket by bucket (src/rollups/plan.ts);
 * then one query per window (chDB runs one query at a time per process, so each round trip
 * counts), a page's count of groups counted by the engine beside it (selectPage).
 */
import { selectPage, selectRows, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { invalidField } from '../../http/errors.js';
import { knownDomainsBuildState } from '../../rollups/known-plans.js';
import { planConditions, planWindow, readsWholeWindowRaw, sparseHoursUnbuilt, type DomainsBuildState, type HourRows, type WindowPlan } from '../../rollups/plan.js';
import type { Query, Window } from './parse.js';
import { provenPage, shortListOf } from './short-tops.js';
import { dimensionColumn, groupsSql, type BuiltQuery, type GroupKey, type Reads } from './sql.js';
import { readWindow } from './where.js';

/** Beyond this many groups of a time series (or filled rows, shape.ts) the query is refused. */
export const MAX_SERIES_GROUPS = 100_000;

/** A result row as the SQL gives it: d0…, m0…. */
export type SqlRow = Record<string, unknown>;

export interface RunResult {
  rows: SqlRow[];
  /** The count of groups: without a time dimension from SQL; with one, shape.ts counts after filling. */
  total: number;
  /** Whether `total` is only a lower bound: a page proven from short lists counts the groups it saw (short-tops.ts). */
  totalIsLowerBound: boolean;
  /** With compare: the previous window's rows (for a page without a time dimension, those of the page's groups). */
  previous: SqlRow[] | null;
}

export const keyOf = (query: Query, row: SqlRow): GroupKey => query.dimensions.map((_, i) => row[dimensionColumn(i)]);

const select = (clickhouse: ClickHouseClient, built: BuiltQuery) => selectRows<SqlRow>(clickhouse, built.query, built.params);
const selectGroupsPage = (clickhouse: ClickHouseClient, built: BuiltQuery) => selectPage<SqlRow>(clickhouse, built.query, built.params);

export const tooManyGroups = (what: string) =>
  invalidField('dimensions', `${what} more than ${MAX_SERIES_GROUPS} rows with a time dimension: add a filter, fewer dimensions or a coarser interval`);

/** The windows a query reads (with compare, the previous one too). */
const windowsOf = (query: Query): Window[] => (query.previous ? [query.window, query.previous] : [query.window]);

/** The span of time a query reads, its windows cut at readFrom: what its build state and its data version cover. */
export function readRange(query: Query): Window {
  const read = windowsOf(query).map((w) => readWindow(query, w));
  return { start: Math.min(...read.map((w) => w.start)), end: Math.max(...read.map((w) => w.end)) };
}

/** The rows counted per whole hour of some domains' window (queryDomainsHourRows, or counts already read). */
export type HourRowsReader = (domainIds: number[], start: number, end: number) => Promise<HourRows>;

/** How a window is read: its plan (null: raw rows only), and the rows counted per hour of the domains it was made from. */
interface WindowRead {
  plan: WindowPlan | null;
  rows: HourRows;
}

/**
 * How each window is read: raw rows only unless the rollups may serve the query; then one build
 * state for the windows' domains (both windows of a compare at once) and a plan per window.
 */
async function planReads(clickhouse: ClickHouseClient, query: Query, rollupMinRows: number, hourRows: HourRowsReader | undefined): Promise<WindowRead[]> {
  const windows = windowsOf(query);
  if (query.rollup === null) return windows.map(() => ({ plan: null, rows: new Map() }));
  const read = windows.map((w) => readWindow(query, w));
  const { start: from, end: to } = readRange(query);
  const plansOf = (found: DomainsBuildState) => {
    const state = sparseHoursUnbuilt(found, rollupMinRows);
    return read.map((w) => (w.start > w.end ? null : planWindow(w.start, w.end, state)));
  };
  const dependsOnCounts = (found: DomainsBuildState) => !plansOf(found).every((plan) => plan === null || readsWholeWindowRaw(plan));
  const found = await knownDomainsBuildState(clickhouse, query.domains.map((d) => d.id), from, to, query.rollup.span, dependsOnCounts, hourRows);
  return plansOf(found).map((plan) => ({ plan, rows: found.rows }));
}

const readsOf = (read: WindowRead): Reads => read.plan && planConditions(read.plan);

/** Every group of a time series over `window`, refused beyond MAX_SERIES_GROUPS. */
async function series(clickhouse: ClickHouseClient, query: Query, window: Window, reads: Reads): Promise<SqlRow[]> {
  const rows = await select(clickhouse, groupsSql(query, window, reads, { kind: 'all', cap: MAX_SERIES_GROUPS }));
  if (rows.length > MAX_SERIES_GROUPS) throw tooManyGroups('The window holds');
  return rows;
}

/**
 * `rollupMinRows`: STATS_ROLLUP_MIN_ROWS, below which an hour's rows per domain are read raw
 * (sparseHoursUnbuilt); `hourRows`: where the rows per hour were read already (a batch's versions).
 */
export async function runQuery(clickhouse: ClickHouseClient, query: Query, rollupMinRows: number, hourRows?: HourRowsReader): Promise<RunResult> {
  const [current, before] = await planReads(clickhouse, query, rollupMinRows, hourRows);
  if (query.timeIndex >= 0) {
    const rows = await series(clickhouse, query, query.window, readsOf(current!));
    return { rows, total: 0, totalIsLowerBound: false, previous: query.previous ? await series(clickhouse, query, query.previous, readsOf(before!)) : null };
  }
  const list = shortListOf(query);
  const proven = list && current!.plan ? await provenPage(clickhouse, query, query.window, current!.plan, current!.rows, list) : null;
  const { rows, total } = proven ?? (await selectGroupsPage(clickhouse, groupsSql(query, query.window, readsOf(current!), { kind: 'page' })));
  let previous: SqlRow[] | null = null;
  if (query.previous) {
    const keys = rows.map((row) => keyOf(query, row));
    const pageOnly = query.dimensions.length > 0 ? keys : undefined;
    previous = pageOnly?.length === 0 ? [] : await select(clickhouse, groupsSql(query, query.previous, readsOf(before!), { kind: 'all', cap: query.limit }, pageOnly));
  }
  return { rows, total, totalIsLowerBound: proven !== null, previous };
}
