/**
 * The WHERE of a query's parts: its domains, its window and its filters over access_logs columns
 * (the raw part) or over the query's access_rollups rows (the rollup part), every value a bound
 * parameter (`{name:Type}` through Params).
 */
import type { DomainName } from '../../domains/store.js';
import { globToLike, ipRangeCondition, Params, timeConditions, type IpRange } from '../../logs/filters.js';
import { searchMatches, searchPattern } from '../../logs/store.js';
import { dimensionByName, type Dimension } from '../registry.js';
import type { FilterValue, QueryFilter } from './filters.js';
import type { Query, Window } from './parse.js';

/** A value as ClickHouse takes it for the dimension's paramType: booleans as 0 or 1. */
const paramValue = (value: FilterValue) => (typeof value === 'boolean' ? Number(value) : value);

const anyOf = (conditions: string[]) => (conditions.length === 1 ? conditions[0]! : `(${conditions.join(' OR ')})`);

/** Which rows a condition reads: access_logs rows, or the query's rollup rows (Query.rollup). */
export type Source = 'raw' | 'rollup';

/** A dimension's SQL over the rows a condition reads: access_logs columns, or the rollup rows' (RollupRows.columns). */
export type ColumnOf = (dimension: Dimension) => string;
const rawColumn: ColumnOf = (dimension) => dimension.raw;

/** `dimension` is one of `values`; a domain's values are names, of which those not among `domains` match nothing. */
function isCondition(dimension: Dimension, values: FilterValue[], domains: DomainName[], p: Params, column: ColumnOf): string {
  if (dimension.kind === 'domain') {
    const ids = domains.filter((d) => values.includes(d.name)).map((d) => d.id);
    return `${column(dimension)} IN ${p.bind('Array(UInt32)', ids)}`;
  }
  const exact = values as (string | number | boolean)[];
  if (dimension.isCondition && column === rawColumn) return dimension.isCondition(exact, p);
  const matching = (value: string) => `${value} IN ${p.bind(`Array(${dimension.paramType})`, [...new Set(exact.map(paramValue))])}`;
  // A stored key in a set is cheaper per row than computing the value (Dimension.byColumn).
  const byColumn = column === rawColumn ? dimension.byColumn : undefined;
  if (byColumn) return `${byColumn.column} IN (SELECT key FROM (${byColumn.keys}) WHERE ${matching(byColumn.value('key'))})`;
  return matching(column(dimension));
}

function filterCondition(filter: QueryFilter, domains: DomainName[], p: Params, column: ColumnOf): string {
  const dimension = dimensionByName.get(filter.dimension)!;
  switch (filter.op) {
    case 'is':
      return isCondition(dimension, filter.values, domains, p, column);
    case 'isNot':
      return `NOT (${isCondition(dimension, filter.values, domains, p, column)})`;
    case 'contains':
      // The search's expression: the url text index serves it, and unlike positionCaseInsensitiveUTF8
      // (about a second per row) a long needle over long values of one repeated letter stays in milliseconds.
      return anyOf(filter.values.map((v) => searchMatches(column(dimension), p.bind('String', searchPattern(v as string)))));
    case 'glob':
      return anyOf(filter.values.map((v) => `${column(dimension)} LIKE ${p.bind('String', globToLike(v as string))}`));
    case 'cidr':
      return anyOf(filter.values.map((v) => ipRangeCondition(v as IpRange, p)));
  }
}

/** The conditions of `filters`, one per filter (to be joined by AND), over access_logs columns unless `column` says otherwise; `domains` name the domains a domain filter may match. */
export const filterConditions = (filters: readonly QueryFilter[], domains: DomainName[], p: Params, column: ColumnOf = rawColumn): string[] =>
  filters.map((f) => `(${filterCondition(f, domains, p, column)})`);

/** The window a query reads: never before readFrom. */
export const readWindow = (query: Query, window: Window): Window => ({ start: Math.max(window.start, query.readFrom), end: window.end });

/**
 * Conditions joined by AND over the query's domains and filters, and for the raw part `window`;
 * the rollup part's buckets are the plan's (sql.ts), its rows those of Query.rollup.
 */
export function whereOf(query: Query, window: Window, p: Params, source: Source): string {
  const domains = `domain_id IN ${p.bind('Array(UInt32)', query.domains.map((d) => d.id))}`;
  if (source === 'raw') {
    const read = readWindow(query, window);
    const time = timeConditions({ startDate: new Date(read.start), endDate: new Date(read.end) }, p);
    return [domains, ...time, ...filterConditions(query.filters, query.domains, p)].join(' AND ');
  }
  const rows = query.rollup!.rows;
  const column: ColumnOf = (dimension) => rows.columns[dimension.name]!;
  return [domains, `dim = '${rows.dim}'`, ...filterConditions(query.filters, query.domains, p, column)].join(' AND ');
}
