/**
 * A validated body (schemas.ts) and what the request found out (the domains, the time) → the
 * Query every later stage reads: registry entries instead of names, the window resolved, the time
 * buckets chosen, the complete order.
 */
import type { DomainName } from '../../domains/store.js';
import { invalidField } from '../../http/errors.js';
import { retainedSince, windowAt } from '../periods.js';
import { AUTO_MAX_POINTS, dimensionByName, INTERVALS, metricByName, RAW_TIME, ROLLUP_ROWS, ROLLUP_TIME, type Dimension, type Interval, type Metric, type RollupRows } from '../registry.js';
import type { QueryFilter } from './filters.js';
import type { QueryBody } from './schemas.js';


/** Beyond this many buckets an explicit interval is refused. */
export const MAX_BUCKETS = 10_000;

/** Both ends included, epoch ms. */
export interface Window {
  start: number;
  end: number;
}

/** A dimension of the query: its entry, with its time buckets resolved. */
export interface QueryDimension {
  name: string;
  dimension: Dimension;
  /** SQL of the value over access_logs rows … */
  raw: string;
  /** … and over the query's rollup rows (null: read raw only). */
  rollup: string | null;
}

/** The rollup rows that may serve a query where its buckets are built, and their finest span. */
export interface QueryRollup {
  rows: RollupRows;
  /**
   * 'day' (days and hours) or 'hour' (hours only: the query's time buckets are finer than a day).
   */
  span: 'hour' | 'day';
}

/** An order term: a metric or a dimension (index into the query's lists). */
export interface OrderTerm {
  of: 'metric' | 'dimension';
  index: number;
  desc: boolean;
}

export interface Query {
  /** The domains read, with their names. */
  domains: DomainName[];
  metrics: Metric[];
  dimensions: QueryDimension[];
  filters: QueryFilter[];
  window: Window;
  /** With compare: the window of the same length just before. */
  previous: Window | null;
  /** Rows before this are never read (the retention: raw rows and rollups drop them at different moments). */
  readFrom: number;
  /**
   * The rollup rows that may serve the query where they are built, or null (raw rows only: a
   * metric, a dimension or a filter no kind of rollup row holds, or time buckets finer than an hour).
   */
  rollup: QueryRollup | null;
  /** The time dimension's buckets, and its place among the dimensions (-1: none). */
  interval: Interval | null;
  timeIndex: number;
  /** Complete: every dimension is in it, so the order is total and pages are stable. */
  orderBy: OrderTerm[];
  limit: number;
  page: number;
}

export interface QueryContext {
  now: number;
  retentionDays: number;
  domains: DomainName[];
}

function windowOf(body: QueryBody, ctx: QueryContext): Window {
  if (body.dateRange !== 'custom') return windowAt({ period: body.dateRange }, ctx.now, ctx.retentionDays);
  const oldest = retainedSince(ctx.now, ctx.retentionDays);
  if (body.endDate && body.endDate.getTime() < oldest) {
    throw invalidField('endDate', `must be after ${new Date(oldest).toISOString()}: logs are kept ${ctx.retentionDays} days (LOG_RETENTION_DAYS)`);
  }
  return windowAt({ startDate: body.startDate!, endDate: body.endDate }, ctx.now, ctx.retentionDays);
}

function intervalOf(dimension: Dimension, window: Window): Interval {
  if (dimension.interval !== 'auto') {
    const interval = dimension.interval!;
    const buckets = interval.count(window.start, window.end);
    if (buckets > MAX_BUCKETS) throw invalidField('dimensions', `${dimension.name} gives ${buckets} buckets over the window, more than ${MAX_BUCKETS}: choose a coarser interval or a shorter window`);
    return interval;
  }
  return INTERVALS.find((i) => i.count(window.start, window.end) <= AUTO_MAX_POINTS) ?? INTERVALS[INTERVALS.length - 1]!;
}

/** Whether rollup rows of the kind `rows` hold every partial of `metric`. */
export const holdsMetric = (rows: RollupRows, metric: Metric) => metric.partials.every((x) => rows.partials.some((held) => held === x));
/** Whether rollup rows of the kind `rows` give the values of `dimension` (time by their bucket, whatever its width). */
export const holdsDimension = (rows: RollupRows, dimension: Dimension) => dimension.kind === 'time' || dimension.name in rows.columns;

/** Whether rollup rows of the kind `rows` hold what the query asks (its time buckets aside). */
const servedBy = (rows: RollupRows, metrics: Metric[], dimensions: Dimension[], filters: QueryFilter[]) =>
  metrics.every((m) => holdsMetric(rows, m)) &&
  dimensions.every((d) => holdsDimension(rows, d)) &&
  filters.every((f) => f.dimension in rows.columns) &&
  rows.covers(filters);

export function parseQuery(body: QueryBody, ctx: QueryContext): Query {
  const window = windowOf(body, ctx);
  const entries = body.dimensions.map((name) => dimensionByName.get(name)!);
  const timeIndex = entries.findIndex((d) => d.kind === 'time');
  const interval = timeIndex < 0 ? null : intervalOf(entries[timeIndex]!, window);
  const metrics = body.metrics.map((name) => metricByName.get(name)!);
  const rows = interval?.rollupSpan === null ? undefined : ROLLUP_ROWS.find((r) => servedBy(r, metrics, entries, body.filters));
  const dimensions = entries.map((dimension) => ({
    name: dimension.name,
    dimension,
    raw: dimension.kind === 'time' ? interval!.sql(RAW_TIME) : dimension.raw,
    rollup: !rows ? null : dimension.kind === 'time' ? interval!.sql(ROLLUP_TIME) : rows.columns[dimension.name]!,
  }));

  const asked = (name: string): Omit<OrderTerm, 'desc'> => {
    const metric = body.metrics.indexOf(name as (typeof body.metrics)[number]);
    return metric >= 0 ? { of: 'metric', index: metric } : { of: 'dimension', index: body.dimensions.indexOf(name as (typeof body.dimensions)[number]) };
  };
  // An empty list gives no order, as an absent one: the default's.
  const orderBy: OrderTerm[] = body.orderBy?.length
    ? body.orderBy.map(([name, direction]) => ({ ...asked(name), desc: direction === 'desc' }))
    : [timeIndex >= 0 ? { of: 'dimension', index: timeIndex, desc: false } : { of: 'metric', index: 0, desc: true }];
  for (let index = 0; index < dimensions.length; index++) {
    if (!orderBy.some((t) => t.of === 'dimension' && t.index === index)) orderBy.push({ of: 'dimension', index, desc: false });
  }

  const length = window.end - window.start + 1;
  return {
    domains: ctx.domains,
    metrics,
    dimensions,
    filters: body.filters,
    window,
    previous: body.compare ? { start: window.start - length, end: window.start - 1 } : null,
    readFrom: retainedSince(ctx.now, ctx.retentionDays),
    rollup: rows ? { rows, span: interval?.rollupSpan ?? 'day' } : null,
    interval,
    timeIndex,
    orderBy,
    limit: body.limit,
    page: body.page,
  };
}
