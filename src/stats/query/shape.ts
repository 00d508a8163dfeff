/**
 * SQL rows → the answer: values typed (a time bucket as ISO 8601, a domain as its name, a boolean
 * as a boolean), a time series' empty buckets filled in, ordered and paged (without a time
 * dimension SQL already did both), the previous window joined for `compare`.
 */
import { pagination, type Pagination } from '../../http/envelope.js';
import type { Interval } from '../registry.js';
import type { OrderTerm, Query, Window } from './parse.js';
import { keyOf, MAX_SERIES_GROUPS, tooManyGroups, type RunResult, type SqlRow } from './run.js';
import { compareBytes, type GroupKey } from './sql.js';

export type DimensionValue = string | number | boolean;
export type MetricValue = number | null;

export interface ResultRow {
  dimensions: DimensionValue[];
  metrics: MetricValue[];
  comparison?: MetricValue[];
  change?: MetricValue[];
}

export interface QueryAnswer {
  results: ResultRow[];
  meta: { metrics: string[]; dimensions: string[]; startDate: string; endDate: string; interval: string | null };
  pagination: Pagination;
}

/** A group: its dimension values as SQL gave them (a time bucket as epoch ms) and its metrics. */
interface Group {
  key: GroupKey;
  metrics: MetricValue[];
}

const metricsOf = (query: Query, row: SqlRow): MetricValue[] => query.metrics.map((_, i) => (row[`m${i}`] == null ? null : Number(row[`m${i}`])));
const emptyMetrics = (query: Query): MetricValue[] => query.metrics.map((m) => m.empty);

function groupOf(query: Query, row: SqlRow): Group {
  const key = keyOf(query, row).map((v, i) => (i === query.timeIndex ? Number(v) : v));
  return { key, metrics: metricsOf(query, row) };
}

/** The starts of the buckets from the one holding window.start to the one holding window.end. */
function bucketsOf(interval: Interval, window: Window): number[] {
  const starts: number[] = [];
  for (let at = interval.floor(window.start); at <= window.end; at = interval.next(at)) starts.push(at);
  return starts;
}

const withoutTime = (query: Query, key: GroupKey) => JSON.stringify(key.filter((_, i) => i !== query.timeIndex));

/**
 * The series with a group for every bucket and every combination of the other dimensions that has
 * rows (one combination without other dimensions), empty buckets holding the metrics' empty values.
 */
function fillSeries(query: Query, rows: SqlRow[], window: Window): Group[] {
  const buckets = bucketsOf(query.interval!, window);
  const found = new Map<string, Group>();
  const combinations = new Map<string, GroupKey>();
  for (const row of rows) {
    const group = groupOf(query, row);
    found.set(JSON.stringify(group.key), group);
    combinations.set(withoutTime(query, group.key), group.key);
  }
  if (query.dimensions.length === 1) combinations.set('[]', [0]);
  if (combinations.size * buckets.length > MAX_SERIES_GROUPS) throw tooManyGroups('The series would hold');
  const filled: Group[] = [];
  for (const example of combinations.values()) {
    for (const start of buckets) {
      const key = example.map((v, i) => (i === query.timeIndex ? start : v));
      filled.push(found.get(JSON.stringify(key)) ?? { key, metrics: emptyMetrics(query) });
    }
  }
  return filled;
}

/** Numbers ascending with nulls after them whatever the direction, as SQL's NULLS LAST. */
const compareNullsLast = (a: MetricValue, b: MetricValue, desc: boolean) => {
  if (a === null || b === null) return a === b ? 0 : a === null ? 1 : -1;
  return desc ? b - a : a - b;
};

/** The order of sql.ts's ORDER BY, for a series ordered here. */
function comparatorOf(query: Query, names: Map<number, string>): (a: Group, b: Group) => number {
  const compareTerm = (term: OrderTerm, a: Group, b: Group): number => {
    if (term.of === 'metric') return compareNullsLast(a.metrics[term.index]!, b.metrics[term.index]!, term.desc);
    const kind = query.dimensions[term.index]!.dimension.kind;
    const [x, y] = [a.key[term.index], b.key[term.index]];
    const ascending =
      kind === 'string' ? compareBytes(String(x), String(y)) : kind === 'domain' ? compareBytes(names.get(Number(x)) ?? '', names.get(Number(y)) ?? '') : Number(x) - Number(y);
    return term.desc ? -ascending : ascending;
  };
  return (a, b) => {
    for (const term of query.orderBy) {
      const order = compareTerm(term, a, b);
      if (order !== 0) return order;
    }
    return 0;
  };
}

function typedDimensions(query: Query, key: GroupKey, names: Map<number, string>): DimensionValue[] {
  return key.map((value, i) => {
    switch (query.dimensions[i]!.dimension.kind) {
      case 'time':
        return new Date(Number(value)).toISOString();
      case 'domain':
        return names.get(Number(value)) ?? '';
      case 'integer':
        return Number(value);
      case 'boolean':
        return Number(value) === 1;
      case 'string':
        return String(value);
    }
  });
}

const round4 = (x: number) => Math.round(x * 10_000) / 10_000 || 0;
const changeOf = (current: MetricValue, previous: MetricValue): MetricValue =>
  current === null || previous === null || previous === 0 ? null : round4((current - previous) / previous);

/**
 * Where a group is found in the previous window: the same dimension values, a time bucket by its
 * place in its window's buckets.
 */
function placeOf(query: Query, window: Window): (key: GroupKey) => string {
  if (query.timeIndex < 0) return (key) => JSON.stringify(key);
  const buckets = bucketsOf(query.interval!, window);
  const index = new Map(buckets.map((start, i) => [start, i]));
  return (key) => JSON.stringify(key.map((v, i) => (i === query.timeIndex ? index.get(Number(v)) : v)));
}

export function shapeAnswer(query: Query, result: RunResult): QueryAnswer {
  const names = new Map(query.domains.map((d) => [d.id, d.name]));
  let groups: Group[];
  let total = result.total;
  if (query.timeIndex >= 0) {
    const all = fillSeries(query, result.rows, query.window).sort(comparatorOf(query, names));
    total = all.length;
    const from = (query.page - 1) * query.limit;
    groups = all.slice(from, from + query.limit);
  } else {
    groups = result.rows.map((row) => groupOf(query, row));
  }

  let previousOf: ((group: Group) => MetricValue[]) | null = null;
  if (query.previous && result.previous) {
    const currentPlace = placeOf(query, query.window);
    const previousPlace = placeOf(query, query.previous);
    const previous = new Map(result.previous.map((row) => groupOf(query, row)).map((g) => [previousPlace(g.key), g.metrics]));
    previousOf = (group) => previous.get(currentPlace(group.key)) ?? emptyMetrics(query);
  }

  const results = groups.map((group): ResultRow => {
    const row: ResultRow = { dimensions: typedDimensions(query, group.key, names), metrics: group.metrics };
    if (previousOf) {
      const comparison = previousOf(group);
      row.comparison = comparison;
      row.change = group.metrics.map((value, i) => changeOf(value, comparison[i]!));
    }
    return row;
  });
  return {
    results,
    meta: {
      metrics: query.metrics.map((m) => m.name),
      dimensions: query.dimensions.map((d) => d.name),
      startDate: new Date(query.window.start).toISOString(),
      endDate: new Date(query.window.end).toISOString(),
      interval: query.interval?.name ?? null,
    },
    pagination: pagination(query.page, query.limit, total),
  };
}
