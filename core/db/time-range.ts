/**
 * The times the log store holds, whole UTC days: ClickHouse's DateTime (the hour counts and rollups
 * of the log tables, sql/clickhouse/005_stats_deferred_rollups.sql) runs from 1970-01-01 to
 * 2106-02-07T06:28:15Z. The API refuses dates outside (422) and the ingest keeps lines dated outside
 * as rejects, so no query fails on them and no stored row is out of every query's reach.
 */
export const STORED_TIME_RANGE = { first: Date.UTC(1970, 0, 1), last: Date.UTC(2106, 1, 6, 23, 59, 59, 999) } as const;

export const STORED_TIME_RANGE_TEXT = `${new Date(STORED_TIME_RANGE.first).toISOString()} to ${new Date(STORED_TIME_RANGE.last).toISOString()}`;

export const isStoredTime = (ms: number): boolean => ms >= STORED_TIME_RANGE.first && ms <= STORED_TIME_RANGE.last;
