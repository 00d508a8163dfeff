import type { AccessEntry as ParsedAccessEntry, ErrorEntry as ParsedErrorEntry, RejectCause } from '../../core/entries.js';
import { selectPage, selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { timeRangesCondition } from '../rollups/plan.js';
import type { HourCountsQuery } from './hour-counts.js';
import { likeEscape, Params, timeConditions, type Level, type SqlFilter } from './filters.js';

// ---------------------------------------------------------------------------------------------
// Entries as the API returns them (docs/reference/logs.md)
// ---------------------------------------------------------------------------------------------

/** An access entry as the API returns it: the parsed fields (core/entries.ts), its id, its time as ISO text. */
export type AccessEntry = Omit<ParsedAccessEntry, 'timestamp' | 'host'> & { id: number; timestamp: string };

/** An error entry as the API returns it. */
export type ErrorEntry = Omit<ParsedErrorEntry, 'timestamp'> & { id: number; timestamp: string };

export type SearchEntry = ({ type: 'access' } & AccessEntry) | ({ type: 'error' } & ErrorEntry);

// The columns read for an entry; `ms` is the timestamp as epoch milliseconds (no text round trip).
const ACCESS_COLUMNS = 'id, toUnixTimestamp64Milli(timestamp) AS ms, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time';
const ERROR_COLUMNS = 'id, toUnixTimestamp64Milli(timestamp) AS ms, level, message, context';

interface AccessRow {
  id: string | number;
  ms: string | number;
  ip_address: string;
  method: string;
  url: string;
  protocol: string;
  status_code: number;
  response_size: string | number;
  referrer: string;
  user_agent: string;
  response_time: number | null;
}

interface ErrorRow {
  id: string | number;
  ms: string | number;
  level: Level;
  message: string;
  context: Record<string, string>;
}

const iso = (ms: string | number) => new Date(Number(ms)).toISOString();

const toAccess = (r: AccessRow): AccessEntry => ({
  id: Number(r.id),
  timestamp: iso(r.ms),
  ipAddress: r.ip_address,
  method: r.method,
  url: r.url,
  protocol: r.protocol,
  statusCode: Number(r.status_code),
  responseSize: Number(r.response_size),
  referrer: r.referrer,
  userAgent: r.user_agent,
  responseTime: r.response_time === null ? null : Number(r.response_time),
});

const toError = (r: ErrorRow): ErrorEntry => ({
  id: Number(r.id),
  timestamp: iso(r.ms),
  level: r.level,
  message: r.message,
  context: r.context ?? {},
});

// ---------------------------------------------------------------------------------------------
// Access and error entries in one result (search, live tail)
// ---------------------------------------------------------------------------------------------

/**
 * The SELECT list of each arm of a UNION ALL over both tables: the same named columns in the same
 * order in each, the other table's columns as defaults, and `type` naming the table.
 */
export const EITHER_ENTRY_COLUMNS: Record<'access' | 'error', string> = {
  access: `'access' AS type, ${ACCESS_COLUMNS}, '' AS level, '' AS message, CAST(map(), 'Map(LowCardinality(String), String)') AS context`,
  error:
    `'error' AS type, ${ERROR_COLUMNS}, '' AS ip_address, '' AS method, '' AS url, '' AS protocol, toUInt16(0) AS status_code, ` +
    `toUInt64(0) AS response_size, '' AS referrer, '' AS user_agent, CAST(NULL, 'Nullable(UInt32)') AS response_time`,
};

/** The names of EITHER_ENTRY_COLUMNS, in their order. */
export const EITHER_ENTRY_NAMES = 'type, id, ms, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time, level, message, context';

/** A row read with EITHER_ENTRY_COLUMNS. */
export type EitherEntryRow = { type: 'access' | 'error' } & AccessRow & ErrorRow;

/** The entry of an EITHER_ENTRY_COLUMNS row, as the listings return it, with its `type`. */
export const toEitherEntry = (r: EitherEntryRow): SearchEntry => (r.type === 'access' ? { type: 'access', ...toAccess(r) } : { type: 'error', ...toError(r) });

export interface PageRequest {
  /** Rows to skip: (page − 1) × limit. */
  offset: number;
  limit: number;
}

/** A listing's page, and whether its filter is the domain and a time range only (see pageOf). */
export interface ListRequest extends PageRequest {
  keyOnly: boolean;
  /** A query of the filter's matches per hour, when there is one (hour-counts.ts): total and the page's hours come from it. */
  matchesByHour?: HourCountsQuery | undefined;
  /**
   * For a `keyOnly` listing of access_logs: the domain and end of the range, whose rows per hour
   * (access_hour_rows) tell how far back the page lies (see pageOf).
   */
  rowsByHour?: { domainId: number; endDate?: Date | undefined } | undefined;
}

export interface PageOf<T> {
  rows: T[];
  total: number;
}

type Table = 'access_logs' | 'error_logs';

/**
 * One page of a table, newest first (ties: higher id first), and the exact count, in one query.
 *
 * A deep page does not read the full rows it skips: a scalar subquery finds where the page
 * starts by reading the sort-key columns only (plus whatever the filters need), and the full rows
 * are then read from there in key order with LIMIT, so only about `limit` rows' worth of wide
 * columns is ever decompressed, on a ClickHouse server without lazy materialization too.
 * Two ways to find the start, measured on 3 million rows (bench/README, "Figures behind the code's
 * choices"):
 *
 * - the domain and a time range only (`keyOnly`): the timestamp `bt` of the page's first row
 *   from the timestamp column alone, `above` = the rows newer than `bt` (counted by the primary
 *   key, no scan), and `LIMIT limit OFFSET offset - above` from `bt` on, where the small offset
 *   steps over the predecessors that share `bt`;
 * - other filters: the (timestamp, id) of the page's first row (counting `above` would be a
 *   second scan of the filter columns), then `(timestamp, id) <= boundary` with LIMIT.
 *
 * The count rides along as another scalar subquery; a page past the end returns no row to carry
 * it, so only then is the count asked for on its own.
 *
 * Without a lower time bound a read in key order opens every part of the domain's table (136
 * parts for the 10M-row benchmark: 28 ms for page 1 instead of 8), so the reads are bounded where
 * the rows per hour are known: with `matchesByHour`, exactly, to the hours that hold the page; with
 * `rowsByHour`, to the newest hours that hold at least offset + limit rows by access_hour_rows'
 * counts (`lo`, a scalar subquery). Those counts are a hint only: if the bounded read comes back
 * short of a page although the exact total says there are more rows, it is read again unbounded.
 */
async function pageOf<R>(
  clickhouse: ClickHouseClient,
  table: Table,
  columns: string,
  filter: SqlFilter,
  page: ListRequest,
): Promise<PageOf<R>> {
  const p = new Params('pg');
  const limit = p.bind('UInt32', page.limit);
  const order = 'ORDER BY timestamp DESC, id DESC';
  const w = filter.where;
  if (page.matchesByHour) {
    // The hours newest first with their matches, and the running sum: the page starts in the first
    // hour where the sum passes the offset and ends where it reaches offset + limit (or in the
    // oldest hour); the offset within that span skips the matches of its newer hours.
    const counts = page.matchesByHour;
    const offset = p.bind('UInt64', page.offset);
    // One scalar (a constant to the outer query, as LIMIT's OFFSET needs): (newest hour, oldest
    // hour, matches in newer hours, total, whether the page has rows).
    const span =
      `(SELECT (hc[first].1, hc[if(reached = 0, length(cum), reached)].1, cum[first] - hc[first].2, cum[-1], first > 0) FROM (` +
      `SELECT arrayReverseSort(x -> x.1, groupArray((toUInt32(hour), toUInt64(n)))) AS hc, arrayCumSum(arrayMap(x -> x.2, hc)) AS cum, ` +
      `arrayFirstIndex(c -> c > ${offset}, cum) AS first, arrayFirstIndex(c -> c >= ${offset} + ${limit}, cum) AS reached ` +
      `FROM (${counts.sql}))) AS span`;
    const query =
      `WITH ${span} SELECT ${columns}, span.4 AS total FROM ${table} ` +
      `WHERE ${w} AND span.5 AND timestamp >= toDateTime(span.2, 'UTC') AND timestamp < toDateTime(span.1 + 3600, 'UTC') ` +
      `${order} LIMIT ${limit} OFFSET ${offset} - span.3`;
    const rows = await selectRows<R & { total: string | number }>(clickhouse, query, { ...filter.params, ...counts.params, ...p.values });
    if (rows.length > 0) return { rows, total: Number(rows[0]!.total) };
    // Past the last match (or none): the total alone.
    const [sum] = await selectRows<{ total: string | number }>(clickhouse, `SELECT sum(n) AS total FROM (${counts.sql})`, counts.params);
    return { rows, total: Number(sum?.total ?? 0) };
  }
  const total = `(SELECT count() FROM ${table} WHERE ${w}) AS total`;
  const hint = page.keyOnly ? page.rowsByHour : undefined;
  // The hint's scalar subquery, and the bound it puts on the reads.
  const lo = hint ? [`${newestHoursHolding(p, hint.domainId, page.offset + page.limit, hint.endDate)} AS lo`] : [];
  const bounded = hint ? `${w} AND timestamp >= lo` : w;
  let query = `${withClause(lo)}SELECT ${columns}, ${total} FROM ${table} WHERE ${bounded} ${order} LIMIT ${limit}`;
  if (page.offset > 0 && page.keyOnly) {
    const offset = p.bind('UInt64', page.offset);
    query =
      withClause([
        ...lo,
        `(SELECT timestamp FROM ${table} WHERE ${bounded} ORDER BY timestamp DESC LIMIT 1 OFFSET ${offset}) AS bt`,
        `(SELECT count() FROM ${table} WHERE ${w} AND timestamp > bt) AS above`,
      ]) + `SELECT ${columns}, ${total} FROM ${table} WHERE ${bounded} AND timestamp <= bt ${order} LIMIT ${limit} OFFSET ${offset} - above`;
  } else if (page.offset > 0) {
    query =
      `WITH (SELECT (timestamp, id) FROM ${table} WHERE ${w} ${order} LIMIT 1 OFFSET ${p.bind('UInt64', page.offset)}) AS boundary ` +
      `SELECT ${columns}, ${total} FROM ${table} WHERE ${w} AND timestamp <= boundary.1 AND (timestamp < boundary.1 OR id <= boundary.2) ${order} LIMIT ${limit}`;
  }
  const rows = await selectRows<R & { total: string | number }>(clickhouse, query, { ...filter.params, ...p.values });
  if (hint && rows.length < page.limit) {
    // Short: the last page, or the hint cut it (then the exact total says there is more).
    const total = rows.length > 0 ? Number(rows[0]!.total) : await countOf(clickhouse, table, filter);
    return total > page.offset + rows.length ? pageOf(clickhouse, table, columns, filter, { ...page, rowsByHour: undefined }) : { rows, total };
  }
  if (rows.length > 0) return { rows, total: Number(rows[0]!.total) };
  if (page.offset === 0) return { rows, total: 0 };
  return { rows, total: await countOf(clickhouse, table, filter) };
}

const withClause = (items: string[]) => (items.length > 0 ? `WITH ${items.join(', ')} ` : '');

async function countOf(clickhouse: ClickHouseClient, table: Table, filter: SqlFilter): Promise<number> {
  const [count] = await selectRows<{ total: string | number }>(clickhouse, `SELECT count() AS total FROM ${table} WHERE ${filter.where}`, filter.params);
  return Number(count?.total ?? 0);
}

/**
 * A scalar subquery: the start of the newest hour from which on, by access_hour_rows, the domain
 * has at least `rows` rows (up to `endDate`'s hour), or 1970 when all its hours hold fewer.
 */
function newestHoursHolding(p: Params, domainId: number, rows: number, endDate: Date | undefined): string {
  const end = endDate ? ` AND hour <= toStartOfHour(fromUnixTimestamp64Milli(${p.bind('Int64', endDate.getTime())}, 'UTC'))` : '';
  return (
    `(SELECT max(hour) FROM (SELECT hour, sum(n) OVER (ORDER BY hour DESC) AS newer FROM ` +
    `(SELECT hour, sum(rows) AS n FROM access_hour_rows WHERE domain_id = ${p.bind('UInt32', domainId)}${end} GROUP BY hour)) ` +
    `WHERE newer >= ${p.bind('UInt64', rows)})`
  );
}

/** A page of access entries matching `filter` (from filters.ts `accessWhere`). */
export async function listAccessEntries(clickhouse: ClickHouseClient, filter: SqlFilter, page: ListRequest): Promise<PageOf<AccessEntry>> {
  const { rows, total } = await pageOf<AccessRow>(clickhouse, 'access_logs', ACCESS_COLUMNS, filter, page);
  return { rows: rows.map(toAccess), total };
}

/** A page of error entries matching `filter` (from filters.ts `errorWhere`). */
export async function listErrorEntries(clickhouse: ClickHouseClient, filter: SqlFilter, page: ListRequest): Promise<PageOf<ErrorEntry>> {
  const { rows, total } = await pageOf<ErrorRow>(clickhouse, 'error_logs', ERROR_COLUMNS, filter, page);
  return { rows: rows.map(toError), total };
}

// ---------------------------------------------------------------------------------------------
// Search
// ---------------------------------------------------------------------------------------------

export const SEARCH_FIELDS = ['url', 'message', 'userAgent', 'referrer', 'ipAddress'] as const;
export type SearchField = (typeof SEARCH_FIELDS)[number];

/** The column of each search field in each table; an entry type without the field never matches on it. */
export const SEARCH_COLUMNS: Record<Table, Partial<Record<SearchField, string>>> = {
  access_logs: { url: 'url', userAgent: 'user_agent', referrer: 'referrer', ipAddress: 'ip_address' },
  error_logs: { message: 'message' },
};

export interface SearchRequest {
  domainId: number;
  /** Matched as a case-insensitive substring. */
  query: string;
  fields: readonly SearchField[];
  startDate: Date;
  endDate: Date;
  /**
   * Where in the range access_logs can hold a match, as half-open ranges [from, to) of epoch ms
   * (search-fields.ts); null or absent: anywhere.
   */
  accessRanges?: readonly [number, number][] | null;
}

/** The search's needle as one LIKE pattern: `%…%` with its own `%`, `_` and `\` escaped. */
export const searchPattern = (query: string) => `%${likeEscape(query)}%`;

/**
 * `expression` holds the needle (`pattern`, the placeholder of a searchPattern), case-insensitively:
 * `lowerUTF8(column) LIKE lowerUTF8(pattern)`, the expression of the text indexes of
 * sql/clickhouse/003_search_index.sql (ClickHouse skips the granules that cannot match), and the
 * one search-fields.ts matches the rollups' keys with.
 */
export const searchMatches = (expression: string, pattern: string) => `lowerUTF8(${expression}) LIKE lowerUTF8(${pattern})`;

/** A table's search conditions, or null when none of the fields is one of its columns or, for access_logs, accessRanges is empty. */
function searchWhere(table: Table, request: SearchRequest, prefix: string): SqlFilter | null {
  const columns = [...new Set(request.fields.flatMap((f) => SEARCH_COLUMNS[table][f] ?? []))];
  if (columns.length === 0) return null;
  const p = new Params(prefix);
  const conditions = [`domain_id = ${p.bind('UInt32', request.domainId)}`, ...timeConditions(request, p)];
  if (table === 'access_logs' && request.accessRanges) {
    const ranges = timeRangesCondition(`${prefix}r`, request.accessRanges, p.values);
    if (!ranges) return null;
    conditions.push(`(${ranges})`);
  }
  const pattern = p.bind('String', searchPattern(request.query));
  const matches = columns.map((c) => searchMatches(c, pattern));
  conditions.push(matches.length === 1 ? matches[0]! : `(${matches.join(' OR ')})`);
  return { where: conditions.join(' AND '), params: p.values };
}

type SearchRow = EitherEntryRow & { total: string | number };

/**
 * A page of search matches across both tables, newest first (ties: higher id first; ids are unique
 * within a domain across both tables), and the exact count, in one query.
 *
 * As in the listings, a deep page reads no full row it skips. The matches are counted per hour in
 * the one scan a search needs to count them anyway (a GROUP BY of a few thousand hours); the running
 * sum of those counts, newest hour first, names the hour where the page starts and how many
 * matches come before it; the page's first (timestamp, id) is then found among that hour's matches
 * alone. Each table gives at most `limit` full rows from that boundary, and the two short lists
 * are merged. So a deep page costs what the first does: keeping every skipped match's key instead
 * (a sorted aggregate of offset + 1 keys) took 5.3 s at the deepest page of 2.6 million matches,
 * against 1.9 s for page 1 (bench/worst-request, a busy machine). Each row carries both tables'
 * columns (the other table's as defaults), shaped by `type` here.
 */
export async function searchEntries(clickhouse: ClickHouseClient, request: SearchRequest, page: PageRequest): Promise<PageOf<SearchEntry>> {
  const { parts, params, keys } = searchParts(request);
  if (parts.length === 0) return { rows: [], total: 0 };
  const p = new Params('pg');
  const limit = p.bind('UInt32', page.limit);
  const order = 'ORDER BY timestamp DESC, id DESC';

  let withClause = `(SELECT count() FROM (${keys})) AS total `;
  let boundary = '';
  if (page.offset > 0) {
    // span: (the hour holding match offset + 1, newest first; the matches in newer hours; the total;
    // whether there is such a match), from the matches per hour and their running sum.
    const offset = p.bind('UInt64', page.offset);
    const span =
      `(SELECT (hc[first].1, cum[first] - hc[first].2, cum[-1], first > 0) FROM (` +
      `SELECT arrayReverseSort(x -> x.1, groupArray((toUInt32(hour), toUInt64(n)))) AS hc, arrayCumSum(arrayMap(x -> x.2, hc)) AS cum, ` +
      `arrayFirstIndex(c -> c > ${offset}, cum) AS first ` +
      `FROM (SELECT toUnixTimestamp(toStartOfHour(timestamp)) AS hour, count() AS n FROM (${keys}) GROUP BY hour))) AS span`;
    const inSpanHour = `timestamp >= toDateTime(span.1, 'UTC') AND timestamp < toDateTime(span.1 + 3600, 'UTC')`;
    const hourKeys = parts.map((x) => `SELECT timestamp, id FROM ${x.table} WHERE ${x.filter.where} AND ${inSpanHour}`).join(' UNION ALL ');
    withClause =
      `${span}, span.3 AS total, ` +
      `(SELECT (timestamp, id) FROM (${hourKeys}) ${order} LIMIT 1 OFFSET ${offset} - span.2) AS boundary, boundary.1 AS bt, boundary.2 AS bid `;
    boundary = ` AND span.4 AND timestamp <= bt AND (timestamp < bt OR id <= bid)`;
  }
  // Each arm sorted and cut to `limit` on its own.
  const arms = parts
    .map((x) => `SELECT ${EITHER_ENTRY_NAMES} FROM (SELECT ${EITHER_ENTRY_COLUMNS[x.type]}, timestamp FROM ${x.table} WHERE ${x.filter.where}${boundary} ${order} LIMIT ${limit})`)
    .join(' UNION ALL ');
  const query = `WITH ${withClause}SELECT *, total FROM (${arms}) ORDER BY ms DESC, id DESC LIMIT ${limit}`;
  const rows = await selectRows<SearchRow>(clickhouse, query, { ...params, ...p.values });
  const entries = rows.map(toEitherEntry);
  if (rows.length > 0) return { rows: entries, total: Number(rows[0]!.total) };
  if (page.offset === 0) return { rows: entries, total: 0 };
  return { rows: entries, total: await countSearchMatches(clickhouse, request) };
}

/** The search's matches, counted alone. */
export async function countSearchMatches(clickhouse: ClickHouseClient, request: SearchRequest): Promise<number> {
  const { parts, params, keys } = searchParts(request);
  if (parts.length === 0) return 0;
  const [count] = await selectRows<{ total: string | number }>(clickhouse, `SELECT count() AS total FROM (${keys})`, params);
  return Number(count?.total ?? 0);
}

/** The tables a search reads with their conditions, all their parameters, and the (timestamp, id) of every match as one UNION ALL. */
function searchParts(request: SearchRequest) {
  const parts: { table: Table; type: 'access' | 'error'; filter: SqlFilter }[] = [];
  const access = searchWhere('access_logs', request, 'a');
  const error = searchWhere('error_logs', request, 'e');
  if (access) parts.push({ table: 'access_logs', type: 'access', filter: access });
  if (error) parts.push({ table: 'error_logs', type: 'error', filter: error });
  const params: Record<string, unknown> = Object.assign({}, ...parts.map((x) => x.filter.params));
  const keys = parts.map((x) => `SELECT timestamp, id FROM ${x.table} WHERE ${x.filter.where}`).join(' UNION ALL ');
  return { parts, params, keys };
}

// ---------------------------------------------------------------------------------------------
// Rejected lines
// ---------------------------------------------------------------------------------------------

/** A line kept in ingest_rejects (sql/clickhouse/002_logs.sql) as the API returns it. */
export interface RejectedLine {
  time: string;
  kind: 'access' | 'error';
  source: string;
  /** Null for the lines rejected before causes were recorded (sql/clickhouse/014). */
  cause: RejectCause | null;
  reason: string;
  line: string;
  length: number;
}

/**
 * A page of a domain's rejected lines, newest first, and their count. Lines of one batch share
 * their time: the line's place in its source (identity, offset) orders them, so pages do not overlap.
 */
export async function listRejects(clickhouse: ClickHouseClient, domainId: number, filter: { cause?: RejectCause | undefined }, page: PageRequest): Promise<PageOf<RejectedLine>> {
  const p = new Params('r');
  const where = [`domain_id = ${p.bind('UInt32', domainId)}`];
  if (filter.cause) where.push(`cause = ${p.bind('String', filter.cause)}`);
  const { rows, total } = await selectPage<{ ms: string | number; kind: 'access' | 'error'; source: string; cause: string; reason: string; line: string; length: string | number }>(
    clickhouse,
    `SELECT toUnixTimestamp64Milli(time) AS ms, kind, source, cause, reason, line, length FROM ingest_rejects WHERE ${where.join(' AND ')} ` +
      `ORDER BY time DESC, identity DESC, offset DESC LIMIT ${p.bind('UInt32', page.limit)} OFFSET ${p.bind('UInt64', page.offset)}`,
    p.values,
  );
  return {
    rows: rows.map((r) => ({ time: iso(r.ms), kind: r.kind, source: r.source, cause: r.cause === '' ? null : (r.cause as RejectCause), reason: r.reason, line: r.line, length: Number(r.length) })),
    total,
  };
}
