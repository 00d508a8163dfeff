/**
 * The SQL of a Query, generated from the registry: each source (the raw rows of access_logs, and
 * where a plan allows, the built buckets' rows of access_rollups of the query's kind) aggregates its rows into
 * the metrics' partial columns per group,
 * the sources' partials are merged per group, and the metrics' final SQL reads the merged ones:
 *
 *   SELECT d0…, final AS m0…            -- ORDER BY, LIMIT, count() OVER () as asked
 *   FROM (SELECT d0…, merge(p_x) AS x … FROM (source UNION ALL …) GROUP BY d0…)
 *
 * Dimension values come out as d0, d1, … and metrics as m0, m1, … in the order asked.
 */
import { TupleParam } from '@clickhouse/client';
import { compareBytes } from '../../../core/byte-order.js';
import { Params } from '../../logs/filters.js';
import type { PlanConditions } from '../../rollups/plan.js';
import { unionAll } from '../../rollups/shared-sql.js';
import { alonePartial, mergedPartial, sourcePartial, type AnyPartial, type PartialState } from '../registry.js';
import type { OrderTerm, Query, QueryDimension, Window } from './parse.js';
import { filterConditions, whereOf, type Source } from './where.js';

export interface BuiltQuery {
  query: string;
  params: Record<string, unknown>;
}

/** A group's dimension values as the SQL returned them (a domain as its id, a boolean as 0 or 1). */
export type GroupKey = unknown[];

/**
 * What the outer SELECT gives: one page in the query's order (its LIMIT lets the engine count the
 * groups: selectPage); or every group, up to `cap` + 1 (the caller orders them).
 */
export type Selection = { kind: 'page' } | { kind: 'all'; cap: number };

/** The result columns of dimension i and metric i (every reader of the rows names them through these). */
export const dimensionColumn = (i: number) => `d${i}`;
export const metricColumn = (i: number) => `m${i}`;

/** The partials the query's metrics need, each once. */
export const partialsOf = (query: Query): AnyPartial[] => [...new Set(query.metrics.flatMap((m) => m.partials))];

/** The SQL to order by a term: a domain by its name (the place of its id among the ids sorted by name). */
function orderTerm(query: Query, term: OrderTerm, p: Params): string {
  const direction = term.desc ? 'DESC' : 'ASC';
  if (term.of === 'metric') return `${metricColumn(term.index)} ${direction} NULLS LAST`;
  if (query.dimensions[term.index]!.dimension.kind === 'domain') {
    const byName = [...query.domains].sort((a, b) => compareBytes(a.name, b.name)).map((d) => d.id);
    return `indexOf(${p.bind('Array(UInt32)', byName)}, ${dimensionColumn(term.index)}) ${direction}`;
  }
  return `${dimensionColumn(term.index)} ${direction}`;
}

/** A dimension's SQL over a source's rows (parse.ts resolves both). */
const dimensionSql = (d: QueryDimension, source: Source) => (source === 'raw' ? d.raw : d.rollup!);

/** Only the groups whose dimension values are among `keys` (the rows of a page). */
function amongKeys(query: Query, keys: GroupKey[], p: Params, source: Source): string {
  const types = query.dimensions.map((d) => d.dimension.paramType);
  const values = query.dimensions.map((d) => dimensionSql(d, source));
  if (types.length === 1) return `${values[0]} IN ${p.bind(`Array(${types[0]})`, keys.map((k) => k[0]))}`;
  return `(${values.join(', ')}) IN ${p.bind(`Array(Tuple(${types.join(', ')}))`, keys.map((k) => new TupleParam(k)))}`;
}

/**
 * Where a window is read: the plan's raw ranges of access_logs and its built buckets of
 * access_rollups (src/rollups/plan.ts), or with no plan every row of access_logs.
 */
export type Reads = PlanConditions | null;

/**
 * One source's rows of the window (those of `reads` for it) aggregated into partials per group, as
 * one SELECT per part. A partial read by key from raw rows (PartialState.byKey: the histogram) is a
 * part of its own beside the others, its rows counted per group and key first; each of the two
 * gives the other's partials empty (PartialState.neutral), and the groups merge them (groupsSql).
 */
function sourceSql(query: Query, window: Window, partials: AnyPartial[], p: Params, keys: GroupKey[] | undefined, source: Source, part: string | null): string[] {
  // Over raw rows a dimension of one stored column's values (Dimension.byColumn) groups by that
  // column, as g<i>, and each group's value is computed once, as d<i>, around the SELECT.
  const byColumn = query.dimensions.map((d) => (source === 'raw' ? (d.dimension.byColumn ?? null) : null));
  const dims = query.dimensions.map((_, i) => dimensionColumn(i));
  const groups = dims.map((d, i) => (byColumn[i] ? `g${i}` : d));
  const dimensionColumns = query.dimensions.map((d, i) => `${byColumn[i]?.column ?? dimensionSql(d, source)} AS ${groups[i]}`);
  const where = [whereOf(query, window, p, source), ...(part ? [`(${part})`] : []), ...(keys ? [amongKeys(query, keys, p, source)] : [])].join(' AND ');
  const groupBy = groups.length ? `\nGROUP BY ${groups.join(', ')}` : '';
  const table = source === 'raw' ? 'access_logs' : 'access_rollups';
  const byKey = source === 'raw' ? partials.filter((x) => x.byKey) : [];
  const partial = (x: AnyPartial) => (byKey.includes(x) ? `${x.neutral} AS p_${x.name}` : sourcePartial(x, source));
  const rows = `SELECT ${[...dimensionColumns, ...partials.map(partial)].join(', ')}\nFROM ${table}\nWHERE ${where}${groupBy}`;
  const selects = [
    rows,
    ...byKey.map((keyed) => {
      const counted = `SELECT ${[...dimensionColumns, `${keyed.byKey!.key} AS k`, 'toInt64(count()) AS c'].join(', ')}\nFROM ${table}\nWHERE ${where} AND ${keyed.byKey!.rows}\nGROUP BY ${[...groups, 'k'].join(', ')}`;
      const columns = partials.map((x) => (x === keyed ? `${keyed.byKey!.collect} AS p_${x.name}` : `${x.neutral} AS p_${x.name}`));
      return `SELECT ${[...groups, ...columns].join(', ')}\nFROM (\n${counted}\n)${groupBy}`;
    }),
  ];
  if (!byColumn.some(Boolean)) return selects;
  const values = dims.map((d, i) => (byColumn[i] ? `${byColumn[i].value(groups[i]!)} AS ${d}` : d));
  return selects.map((select) => `SELECT ${[...values, ...partials.map((x) => `p_${x.name}`)].join(', ')}\nFROM (\n${select}\n)`);
}

/** The SELECTs of a window's sources: raw rows where the plan has raw ranges (or has nothing at all: one part must give the empty groups), rollups where it has built buckets. */
function sourcesSql(query: Query, window: Window, partials: AnyPartial[], p: Params, keys: GroupKey[] | undefined, reads: Reads): string[] {
  if (!reads) return sourceSql(query, window, partials, p, keys, 'raw', null);
  Object.assign(p.values, reads.params);
  return [
    ...(reads.raw !== null || reads.built === null ? sourceSql(query, window, partials, p, keys, 'raw', reads.raw ?? '0') : []),
    ...(reads.built !== null ? sourceSql(query, window, partials, p, keys, 'rollup', reads.built) : []),
  ];
}

/**
 * Each group's partials merged over the sources' SELECTs. Where one SELECT gives every group in
 * one row (`onePerGroup`: no dimension grouped by another column first) and each partial can be
 * read alone, without a second GROUP BY.
 */
function mergedSql(dims: string[], partials: AnyPartial[], sources: string[], onePerGroup: boolean): string {
  const alone = sources.length === 1 && onePerGroup ? partials.map(alonePartial) : null;
  if (alone?.every((column): column is string => column !== null)) return `SELECT ${[...dims, ...alone].join(', ')}\nFROM (\n${sources[0]}\n)`;
  return `SELECT ${[...dims, ...partials.map((x) => mergedPartial(x))].join(', ')}\nFROM (\n${unionAll(sources)}\n)` + (dims.length ? `\nGROUP BY ${dims.join(', ')}` : '');
}

/**
 * The SQL of the query over `window`, read as `reads` says: `keys` restricts it to the groups with
 * those dimension values (a compared page asks the previous window for its own rows only).
 */
export function groupsSql(query: Query, window: Window, reads: Reads, selection: Selection, keys?: GroupKey[]): BuiltQuery {
  const p = new Params('q');
  const partials = partialsOf(query);
  const dims = query.dimensions.map((_, i) => dimensionColumn(i));
  const onePerGroup = !query.dimensions.some((d) => d.dimension.byColumn);
  const merged = mergedSql(dims, partials, sourcesSql(query, window, partials, p, keys, reads), onePerGroup);

  const columns = [...dims, ...query.metrics.map((m, i) => `${m.final} AS ${metricColumn(i)}`)];
  if (selection.kind === 'all') {
    return { query: `SELECT ${columns.join(', ')}\nFROM (\n${merged}\n)\nLIMIT ${p.bind('UInt32', selection.cap + 1)}`, params: p.values };
  }
  const orderBy = query.orderBy.map((t) => orderTerm(query, t, p)).join(', ');
  const offset = (query.page - 1) * query.limit;
  return {
    query: `SELECT ${columns.join(', ')}\nFROM (\n${merged}\n)\nORDER BY ${orderBy}\nLIMIT ${p.bind('UInt32', query.limit)} OFFSET ${p.bind('UInt64', offset)}`,
    params: p.values,
  };
}

/**
 * Short lists' sums for a proven page (short-tops.ts), by key: each of the query's partials
 * (partialsOf) summed over the covered buckets whose list holds the key, and those buckets'
 * thresholds summed (`held`); `threshold`, every covered bucket's threshold summed.
 */
export interface ShortSums {
  keys: string[];
  sums: number[][];
  held: number[];
  threshold: number;
}

/**
 * The candidates of a page proven from short lists (short-tops.ts), in the query's order, the first
 * `count`: the groups of the short lists' sums and of `edges` (the raw ranges, and as `built` the
 * built buckets without short lists), each with its metrics, `ranked` (its sum `by` over those
 * sources: exact where every covered list holds it), `upper` (ranked plus the thresholds of the
 * covered buckets whose list does not hold it: what it has at most) and `beyond` (the largest
 * `upper` of the groups after it). The query has one dimension, one key per group, and filters
 * over the key's values (shortListOf): both read from the listed keys through the rows' columns.
 */
export function shortTopSql(query: Query, window: Window, edges: Reads, short: ShortSums, by: PartialState, count: number): BuiltQuery {
  const p = new Params('q');
  const partials = partialsOf(query);
  const d0 = dimensionColumn(0);
  const arrays = [p.bind('Array(String)', short.keys), ...short.sums.map((sums) => p.bind('Array(UInt64)', sums)), p.bind('Array(UInt64)', short.held)];
  const rowColumns = query.rollup!.rows.columns;
  const filters = filterConditions(query.filters, query.domains, p, (d) => rowColumns[d.name]!);
  const listed = `SELECT ${rowColumns[query.dimensions[0]!.name]} AS ${d0}, ${partials.map((x, i) => `e.${i + 2} AS p_${x.name}`).join(', ')}, e.${partials.length + 2} AS held
FROM (SELECT arrayJoin(arrayZip(${arrays.join(', ')})) AS e, e.1 AS key)${filters.length > 0 ? `\nWHERE ${filters.join(' AND ')}` : ''}`;
  const edgeSources = sourcesSql(query, window, partials, p, undefined, edges).map((select) => `SELECT *, toUInt64(0) AS held FROM (\n${select}\n)`);
  const merged = `SELECT ${d0}, ${partials.map((x) => mergedPartial(x)).join(', ')}, sum(held) AS held_sum\nFROM (\n${unionAll([listed, ...edgeSources])}\n)\nGROUP BY ${d0}`;
  const orderBy = query.orderBy.map((t) => orderTerm(query, t, p)).join(', ');
  const columns = [
    d0,
    ...query.metrics.map((m, i) => `${m.final} AS ${metricColumn(i)}`),
    `${by.name} AS ranked`,
    `${by.name} + ${p.bind('UInt64', short.threshold)} - held_sum AS upper`,
    `max(upper) OVER (ORDER BY ${orderBy} ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING) AS beyond`,
  ];
  return { query: `SELECT ${columns.join(', ')}\nFROM (\n${merged}\n)\nORDER BY ${orderBy}\nLIMIT ${p.bind('UInt32', count)}`, params: p.values };
}
