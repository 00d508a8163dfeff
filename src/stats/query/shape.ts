/**
 * SQL rows → the answer: values typed (a time bucket as ISO 8601, a domain as its name, a boolean
 * as a boolean), a time series' empty buckets filled in, ordered and paged (without a time
 * dimension SQL already did both), the previous window joined for `compare`.
 */
import { pagination, type Pagination } from '../../http/envelope.js';
import type { Interval } from '../registry.js';
import type { OrderTerm, Query, Window } from './parse.js';
import { MAX_SERIES_GROUPS, tooManyGroups, type RunResult, type SqlRow } from './run.js';
import { compareBytes } from '../../../core/byte-order.js';
import { dimensionColumn, metricColumn, type GroupKey } from './sql.js';

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
  /** totalIsLowerBound: pagination.total (and pages) counts only the groups a page proven from short lists saw (src/stats/query/short-tops.ts). */
  meta: { metrics: string[]; dimensions: string[]; startDate: string; endDate: string; interval: string | null; totalIsLowerBound?: true };
  pagination: Pagination;
}

/** A group: its dimension values as SQL gave them (a time bucket as epoch ms) and its metrics. */
interface Group {
  key: GroupKey;
  metrics: MetricValue[];
}

const emptyMetrics = (query: Query): MetricValue[] => query.metrics.map((m) => m.empty);

/**
 * Reads SQL rows as groups (a time bucket as a number). Column names are made once and each row
 * fills two arrays: a fleet's series is 25,000 rows, and arrays made per row and column were most
 * of its shaping time (and of the collector's).
 */
function groupReader(query: Query): (row: SqlRow) => Group {
  const dims = query.dimensions.map((_, i) => dimensionColumn(i));
  const metrics = query.metrics.map((_, i) => metricColumn(i));
  return (row) => {
    const key: GroupKey = new Array(dims.length);
    for (let i = 0; i < dims.length; i++) key[i] = i === query.timeIndex ? Number(row[dims[i]!]) : row[dims[i]!];
    const values: MetricValue[] = new Array(metrics.length);
    for (let i = 0; i < metrics.length; i++) {
      const value = row[metrics[i]!];
      values[i] = value == null ? null : Number(value);
    }
    return { key, metrics: values };
  };
}

/** The starts of the buckets from the one holding window.start to the one holding window.end. */
function bucketsOf(interval: Interval, window: Window): number[] {
  const starts: number[] = [];
  for (let at = interval.floor(window.start); at <= window.end; at = interval.next(at)) starts.push(at);
  return starts;
}

/** What tells apart a series' groups in one bucket: the other dimension's value when there is one, else all of them as JSON. */
function combinationOf(query: Query): (key: GroupKey) => unknown {
  const others = query.dimensions.map((_, i) => i).filter((i) => i !== query.timeIndex);
  if (others.length === 1) return (key) => key[others[0]!];
  return (key) => JSON.stringify(others.map((i) => key[i]));
}

/** A series' rows by combination of the other dimensions: each one's groups as an array by bucket index. */
interface Series {
  buckets: number[];
  combinations: { example: GroupKey; found: (Group | undefined)[] }[];
}

/**
 * The series' rows by combination of the other dimensions that has rows (one combination without
 * other dimensions). A fleet's sparklines are 25,000 groups: each combination's groups are an
 * array by bucket index.
 */
function seriesOf(query: Query, rows: SqlRow[], window: Window): Series {
  const buckets = bucketsOf(query.interval!, window);
  const indexOf = new Map(buckets.map((start, i) => [start, i]));
  const combination = combinationOf(query);
  const combinations = new Map<unknown, { example: GroupKey; found: (Group | undefined)[] }>();
  if (query.dimensions.length === 1) combinations.set(combination([0]), { example: [0], found: [] });
  const groupOf = groupReader(query);
  for (const row of rows) {
    const group = groupOf(row);
    const id = combination(group.key);
    let entry = combinations.get(id);
    if (!entry) combinations.set(id, (entry = { example: group.key, found: [] }));
    entry.found[indexOf.get(group.key[query.timeIndex] as number)!] = group;
  }
  if (combinations.size * buckets.length > MAX_SERIES_GROUPS) throw tooManyGroups('The series would hold');
  return { buckets, combinations: [...combinations.values()] };
}

/** The group of a combination in bucket `i`: its row, or the metrics' empty values. */
const groupAt = (query: Query, series: Series, combination: Series['combinations'][number], i: number): Group =>
  combination.found[i] ?? { key: combination.example.map((v, d) => (d === query.timeIndex ? series.buckets[i]! : v)), metrics: emptyMetrics(query) };

/**
 * The series filled (every bucket of every combination) in the query's order. Ordered by time
 * first and then by dimensions only (the default order), every bucket holds its combinations in
 * the same order: the combinations are sorted once and laid out bucket by bucket; any other order
 * sorts every group.
 */
function orderedSeries(query: Query, series: Series, names: Map<number, string>): Group[] {
  const [first, ...rest] = query.orderBy;
  if (first!.of === 'dimension' && first!.index === query.timeIndex && rest.every((t) => t.of === 'dimension')) {
    const byExample = new Map(series.combinations.map((c): [Group, Series['combinations'][number]] => [{ key: c.example, metrics: [] }, c]));
    const combinations = sortGroups(query, rest, [...byExample.keys()], names).map((g) => byExample.get(g)!);
    const filled: Group[] = [];
    for (let b = 0; b < series.buckets.length; b++) {
      const i = first!.desc ? series.buckets.length - 1 - b : b;
      for (const combination of combinations) filled.push(groupAt(query, series, combination, i));
    }
    return filled;
  }
  const filled: Group[] = [];
  for (const combination of series.combinations) series.buckets.forEach((_, i) => filled.push(groupAt(query, series, combination, i)));
  return sortGroups(query, query.orderBy, filled, names);
}

/** NULLS LAST in either direction: above every value once the direction is applied. */
const NULL_LAST = Number.MAX_VALUE;

/** One order term's values as numbers that sort ascending in the term's order (strings and domain names by their ranks in byte order). */
function sortColumn(query: Query, term: OrderTerm, groups: Group[], names: Map<number, string>): number[] {
  const sign = term.desc ? -1 : 1;
  if (term.of === 'metric') return groups.map((g) => (g.metrics[term.index] === null ? NULL_LAST : sign * g.metrics[term.index]!));
  const kind = query.dimensions[term.index]!.dimension.kind;
  if (kind !== 'string' && kind !== 'domain') return groups.map((g) => sign * Number(g.key[term.index]));
  const text = kind === 'domain' ? (g: Group) => names.get(Number(g.key[term.index])) ?? '' : (g: Group) => String(g.key[term.index]);
  const rank = new Map([...new Set(groups.map(text))].sort(compareBytes).map((value, i) => [value, i]));
  return groups.map((g) => sign * rank.get(text(g))!);
}

/**
 * Groups in the order of `orderBy` (sql.ts's ORDER BY, or its terms after time), for a series ordered
 * here. Every term is turned into numbers first, so that the comparisons compare numbers only.
 */
function sortGroups(query: Query, orderBy: OrderTerm[], groups: Group[], names: Map<number, string>): Group[] {
  const terms = orderBy.length;
  const values = new Float64Array(groups.length * terms);
  orderBy.forEach((term, t) => sortColumn(query, term, groups, names).forEach((value, g) => (values[g * terms + t] = value)));
  const order = groups.map((_, i) => i);
  order.sort((a, b) => {
    for (let t = 0; t < terms; t++) {
      const difference = values[a * terms + t]! - values[b * terms + t]!;
      if (difference !== 0) return difference;
    }
    return 0;
  });
  return order.map((i) => groups[i]!);
}

/** A bucket start as ISO 8601, each once per answer (a page of a fleet's sparklines has 10,000 rows over 25 buckets). */
function isoTimes(): (ms: number) => string {
  const known = new Map<number, string>();
  return (ms) => {
    let iso = known.get(ms);
    if (iso === undefined) known.set(ms, (iso = new Date(ms).toISOString()));
    return iso;
  };
}

/** Each dimension's value as the answer gives it, the conversion chosen once per answer. */
function dimensionTypers(query: Query, names: Map<number, string>): ((value: unknown) => DimensionValue)[] {
  const isoOf = isoTimes();
  return query.dimensions.map((d) => {
    switch (d.dimension.kind) {
      case 'time':
        return (value) => isoOf(Number(value));
      case 'domain':
        return (value) => names.get(Number(value)) ?? '';
      case 'integer':
        return (value) => Number(value);
      case 'boolean':
        return (value) => Number(value) === 1;
      case 'string':
        return (value) => String(value);
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

/**
 * The groups an answer is cut from: a series whole, filled and sorted here (to be paged here);
 * otherwise SQL's page. With compare, the previous window's metrics by a group's place (placeOf).
 */
export interface OrderedGroups {
  groups: Group[];
  total: number;
  totalIsLowerBound: boolean;
  /** True when `groups` is every group of a series, paged by answerOf. */
  whole: boolean;
  previous: Map<string, MetricValue[]> | null;
}

export function orderGroups(query: Query, result: RunResult): OrderedGroups {
  const whole = query.timeIndex >= 0;
  const names = new Map(query.domains.map((d) => [d.id, d.name]));
  const groupOf = groupReader(query);
  const groups = whole ? orderedSeries(query, seriesOf(query, result.rows, query.window), names) : result.rows.map(groupOf);
  let previous: Map<string, MetricValue[]> | null = null;
  if (query.previous && result.previous) {
    const previousPlace = placeOf(query, query.previous);
    previous = new Map(result.previous.map(groupOf).map((g) => [previousPlace(g.key), g.metrics]));
  }
  return { groups, total: whole ? groups.length : result.total, totalIsLowerBound: result.totalIsLowerBound, whole, previous };
}

/** The answer: the query's page of the ordered groups, typed, with the previous window joined. */
export function answerOf(query: Query, ordered: OrderedGroups): QueryAnswer {
  const names = new Map(query.domains.map((d) => [d.id, d.name]));
  const from = (query.page - 1) * query.limit;
  const groups = ordered.whole ? ordered.groups.slice(from, from + query.limit) : ordered.groups;
  const currentPlace = placeOf(query, query.window);
  const typers = dimensionTypers(query, names);
  const results = groups.map((group): ResultRow => {
    const row: ResultRow = { dimensions: typers.map((typed, i) => typed(group.key[i])), metrics: group.metrics };
    if (ordered.previous) {
      const comparison = ordered.previous.get(currentPlace(group.key)) ?? emptyMetrics(query);
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
      ...(ordered.totalIsLowerBound ? { totalIsLowerBound: true as const } : {}),
    },
    pagination: pagination(query.page, query.limit, ordered.total),
  };
}
