/**
 * The ClickHouse reads of the live tail (sql/clickhouse/002_logs.sql): where each segment of a
 * domain stands, and the rows stored since given marks (cursor.ts), with, for each row, which of a
 * list of filters it matches. The filters' SQL is the listings' own (filters.ts), so a tail
 * matches exactly what a listing with the same filters returns.
 */
import { SEGMENT_SIZE } from '../../../core/entries.js';
import { selectRows, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { accessConditions, errorConditions, Params, type AccessFilters, type ErrorFilters } from '../filters.js';
import { EITHER_ENTRY_COLUMNS, EITHER_ENTRY_NAMES, toEitherEntry, type EitherEntryRow, type SearchEntry } from '../store.js';
import { ENTRY_KINDS, type EntryKind } from './cursor.js';

const TABLE: Record<EntryKind, string> = { access: 'access_logs', error: 'error_logs' };

// The segment of a row's id (core/entries.ts); a constant of ours, not input.
const SEGMENT = `intDiv(id, ${SEGMENT_SIZE})`;

/** The newest row of one segment of a table. */
export interface SegmentHead {
  kind: EntryKind;
  id: number;
  ms: number;
}

/** Per table and segment of the domain, the highest id and newest time among the rows dated from `since` (epoch ms) on. */
export async function segmentHeads(clickhouse: ClickHouseClient, domainId: number, since: number): Promise<SegmentHead[]> {
  const p = new Params('h');
  const domain = p.bind('UInt32', domainId);
  const from = p.bind('Int64', since);
  const query = ENTRY_KINDS.map(
    (kind) =>
      `SELECT '${kind}' AS kind, max(id) AS last_id, toUnixTimestamp64Milli(max(timestamp)) AS last_ms FROM ${TABLE[kind]} ` +
      `WHERE domain_id = ${domain} AND timestamp >= fromUnixTimestamp64Milli(${from}, 'UTC') GROUP BY ${SEGMENT}`,
  ).join(' UNION ALL ');
  const rows = await selectRows<{ kind: EntryKind; last_id: string | number; last_ms: string | number }>(clickhouse, query, p.values);
  return rows.map((r) => ({ kind: r.kind, id: Number(r.last_id), ms: Number(r.last_ms) }));
}

export interface NewRowsRequest {
  domainId: number;
  /** Rows dated before this (epoch ms) are not read. */
  since: number;
  /** Per table, per segment, the id after which it is read; a segment not named is read from its first row. */
  after: Record<EntryKind, Map<number, number>>;
  /** Per table, the filters each row is matched against, in the order of the row's `matches`. */
  filters: { access: AccessFilters[]; error: ErrorFilters[] };
  /** At most this many rows per segment, the lowest ids: a prefix of the segment's order. */
  rowsPerSegment: number;
}

export interface NewRow {
  /** The entry as the listings return it, with its type. */
  entry: SearchEntry;
  /** The entry's time, epoch milliseconds. */
  ms: number;
  /** Per filter of the row's table, 1 when the row matches it. */
  matches: number[];
  /** The newest time (epoch ms) among all the rows the read went over in the row's segment, matching or not. */
  segmentMs: number;
}

/**
 * The rows of the domain dated from `since` on and past `after` in their segment (at most
 * `rowsPerSegment` a segment, the lowest ids), both tables in one query: those matching at least
 * one filter, and the last row read of each segment whatever it matches, which tells how far the
 * read went (the cursors move over the rows that match nothing up to there).
 */
export async function newRows(clickhouse: ClickHouseClient, request: NewRowsRequest): Promise<NewRow[]> {
  const p = new Params('t');
  const domain = p.bind('UInt32', request.domainId);
  const from = p.bind('Int64', request.since);
  const limit = p.bind('UInt32', request.rowsPerSegment);
  const arm = (kind: EntryKind) => {
    const conditions =
      kind === 'access' ? request.filters.access.map((f) => accessConditions(f, p)) : request.filters.error.map((f) => errorConditions(f, p));
    const matches = `CAST([${conditions.map((c) => `toUInt8(${c.length > 0 ? c.join(' AND ') : '1'})`).join(', ')}], 'Array(UInt8)')`;
    const segments = [...request.after[kind].keys()];
    const ids = segments.map((s) => request.after[kind].get(s)!);
    const after = `transform(${SEGMENT}, ${p.bind('Array(UInt64)', segments)}, ${p.bind('Array(UInt64)', ids)}, toUInt64(0))`;
    const read =
      `SELECT ${EITHER_ENTRY_COLUMNS[kind]}, ${matches} AS matches FROM ${TABLE[kind]} ` +
      `WHERE domain_id = ${domain} AND timestamp >= fromUnixTimestamp64Milli(${from}, 'UTC') AND id > ${after} ` +
      `ORDER BY id LIMIT ${limit} BY ${SEGMENT}`;
    const bySegment = `OVER (PARTITION BY ${SEGMENT})`;
    return (
      `SELECT ${EITHER_ENTRY_NAMES}, matches, segment_ms FROM (SELECT *, max(id) ${bySegment} AS segment_end, max(ms) ${bySegment} AS segment_ms FROM (${read})) ` +
      `WHERE has(matches, 1) OR id = segment_end`
    );
  };
  const rows = await selectRows<EitherEntryRow & { matches: number[]; segment_ms: string | number }>(clickhouse, ENTRY_KINDS.map(arm).join(' UNION ALL '), p.values);
  return rows.map((r) => ({ entry: toEitherEntry(r), ms: Number(r.ms), matches: r.matches, segmentMs: Number(r.segment_ms) }));
}
