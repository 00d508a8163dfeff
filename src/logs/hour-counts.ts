/**
 * How many access rows match a status-code filter in each hour, exactly: built hours from their
 * status lists in access_rollups (src/logs/rollups.ts), every other part of the range (hours not
 * built, the partial hours at its ends) from access_logs. A listing with only a status filter
 * takes its total from these and starts a deep page in the right hour (src/logs/store.ts), instead
 * of counting and skipping the matches of the whole range row by row.
 */
import { selectRows, type ClickHouseClient } from '../db/clickhouse.js';
import { Params, statusCondition, type StatusCodeFilter } from './filters.js';
import { planConditions, planWindow, queryBuildState, unionAll } from './stats.js';

const HOUR_MS = 3_600_000;

/** Matching rows in one hour (start, epoch ms). */
export interface HourCount {
  hour: number;
  count: number;
}

const BOUNDS = 'SELECT toUnixTimestamp(min(hour)) AS first, toUnixTimestamp(max(hour)) AS last, count() AS n FROM access_hour_rows WHERE domain_id = {domainId:UInt32}';

/** The hours with matches in [startDate, endDate] (both included; open ends: all rows), newest first. */
export async function statusMatchesByHour(
  clickhouse: ClickHouseClient,
  domainId: number,
  statusCodes: StatusCodeFilter[],
  range: { startDate?: Date | undefined; endDate?: Date | undefined },
): Promise<HourCount[]> {
  let start = range.startDate?.getTime();
  let end = range.endDate?.getTime();
  if (start === undefined || end === undefined) {
    // Every stored row is counted in access_hour_rows (by the insert itself), so its hours bound them.
    const [bounds] = await selectRows<{ first: number; last: number; n: string }>(clickhouse, BOUNDS, { domainId });
    if (!bounds || Number(bounds.n) === 0) return [];
    start ??= Number(bounds.first) * 1000;
    end ??= Number(bounds.last) * 1000 + HOUR_MS - 1;
  }
  if (start > end) return [];
  // Hours only: a built day says nothing about which of its hours a deep page starts in.
  const plan = planWindow(start, end, await queryBuildState(clickhouse, domainId, start, end, { days: false }));
  const p = new Params('h');
  const codes = statusCondition(statusCodes, p);
  const pieces = planConditions(plan);
  const query = unionAll([
    pieces.built &&
      `SELECT toUnixTimestamp(bucket) AS hour, sum(requests) AS n
FROM (
  SELECT bucket, requests, toUInt16OrZero(key) AS status_code FROM access_rollups
  WHERE domain_id = {domainId:UInt32} AND dim = 'status' AND (${pieces.built})
)
WHERE ${codes}
GROUP BY bucket`,
    pieces.raw &&
      `SELECT toUnixTimestamp(toStartOfHour(timestamp)) AS hour, count() AS n
FROM access_logs
WHERE domain_id = {domainId:UInt32} AND (${pieces.raw}) AND ${codes}
GROUP BY hour`,
  ]);
  if (!query) return [];
  const rows = await selectRows<{ hour: number; n: string }>(clickhouse, query, { domainId, ...pieces.params, ...p.values });
  // Built hours and raw ranges are disjoint; a raw range yields each hour it spans.
  const byHour = new Map<number, number>();
  for (const row of rows) byHour.set(Number(row.hour) * 1000, (byHour.get(Number(row.hour) * 1000) ?? 0) + Number(row.n));
  return [...byHour].map(([hour, count]) => ({ hour, count })).filter((h) => h.count > 0).sort((a, b) => b.hour - a.hour);
}
