/**
 * How many access rows match a status-code filter in each hour, exactly: whole hours from the
 * status codes the insert itself counted per hour (access_hour_rows.statuses,
 * sql/clickhouse/007_hour_statuses.sql), the partial hours at a range's ends from access_logs. A
 * listing with only a status filter takes its total from these and starts a deep page in the right
 * hour (src/logs/store.ts, which reads the counts and the page in one query), instead of counting
 * and skipping the matches of the whole range row by row. For a range without dates the counts
 * are one read of a table of a few rows per hour.
 */
import { STORED_TIME_RANGE } from '../../core/db/time-range.js';
import { Params, statusCondition, type StatusCodeFilter } from './filters.js';
import { unionAll } from '../rollups/shared-sql.js';
import { HOUR_MS } from '../../core/durations.js';

/** The open ends of a range: the times the stores hold (whole days, so whole hours), the end exclusive. */
const OPEN_START = STORED_TIME_RANGE.first;
const OPEN_END = STORED_TIME_RANGE.last + 1;

/** A query with bound parameters whose rows are (hour: start in seconds, n: matches), one per hour. */
export interface HourCountsQuery {
  sql: string;
  params: Record<string, unknown>;
}

/**
 * The query of the matches per hour in [startDate, endDate] (both included; open ends: all rows),
 * or null when the range is empty. Its hours come each from one branch: the edges lie in hours of
 * their own.
 */
export function statusCountsQuery(
  domainId: number,
  statusCodes: StatusCodeFilter[],
  range: { startDate?: Date | undefined; endDate?: Date | undefined },
): HourCountsQuery | null {
  // [from, to): the range with its end made exclusive; its whole hours, and the parts before and after them.
  const from = range.startDate?.getTime() ?? OPEN_START;
  const to = range.endDate ? range.endDate.getTime() + 1 : OPEN_END;
  if (from >= to) return null;
  const hourFrom = Math.ceil(from / HOUR_MS) * HOUR_MS;
  const hourTo = Math.floor(to / HOUR_MS) * HOUR_MS;
  const edges: [number, number][] = hourFrom >= to ? [[from, to]] : [[from, hourFrom], [hourTo, to]];
  const p = new Params('h');
  const domain = `domain_id = ${p.bind('UInt32', domainId)}`;
  const codes = statusCondition(statusCodes, p);
  const raw = edges
    .filter(([a, b]) => a < b)
    .map(([a, b]) => `(timestamp >= fromUnixTimestamp64Milli(${p.bind('Int64', a)}, 'UTC') AND timestamp < fromUnixTimestamp64Milli(${p.bind('Int64', b)}, 'UTC'))`);
  // Every branch names its columns: the first one present names them for all.
  const sql = unionAll([
    hourFrom < hourTo &&
      // The filter is written over status_code: here the name of the codes in a lambda over each row's (codes, counts).
      `SELECT toUnixTimestamp(hour) AS hour, sum(arraySum((status_code, matches) -> if(${codes}, matches, 0), statuses.1, statuses.2)) AS n
FROM access_hour_rows
WHERE ${domain} AND hour >= toDateTime(${p.bind('UInt32', hourFrom / 1000)}, 'UTC') AND hour < toDateTime(${p.bind('UInt32', hourTo / 1000)}, 'UTC')
GROUP BY hour
HAVING n > 0`,
    raw.length > 0 &&
      `SELECT toUnixTimestamp(toStartOfHour(timestamp)) AS hour, count() AS n
FROM access_logs
WHERE ${domain} AND (${raw.join(' OR ')}) AND ${codes}
GROUP BY hour`,
  ]);
  return { sql, params: p.values };
}
