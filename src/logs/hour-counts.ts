/**
 * How many access rows match a status-code filter in each hour, exactly: built hours from their
 * status lists in access_rollups (src/logs/rollups.ts), every other part of the range (hours not
 * built, the partial hours at its ends) from access_logs. A listing with only a status filter
 * takes its total from these and starts a deep page in the right hour (src/logs/store.ts), instead
 * of counting and skipping the matches of the whole range row by row.
 *
 * One query per request once the range's hours were asked for (known-plans.ts): the counts and,
 * beside them, the build state of the range's hours, which also gives an open range its ends.
 */
import { selectRows, type ClickHouseClient } from '../db/clickhouse.js';
import { Params, statusCondition, type StatusCodeFilter } from './filters.js';
import { readWithKnownPlan } from './known-plans.js';
import { buildStateOf, buildStateParams, buildStateQuery, planConditions, planWindow, queryBuildState, unionAll, windowBuckets, type BuildState, type BuildStateRow, type WindowPlan } from './stats.js';

const HOUR_MS = 3_600_000;
/** The open ends of a range: before any row, and after any (DateTime's range ends in 2106). */
const OPEN_START = 0;
const OPEN_END = Date.UTC(2100, 0, 1) - 1;

/** Matching rows in one hour (start, epoch ms). */
export interface HourCount {
  hour: number;
  count: number;
}

/**
 * The plan of [startDate, endDate] (both included), hours only (a built day says nothing about
 * which of its hours a deep page starts in). An open end is the first or last hour with rows: every
 * stored row is counted in access_hour_rows (by the insert itself), so its hours bound them. Null
 * when the range holds no hour with rows.
 */
function planHours(range: { startDate?: Date | undefined; endDate?: Date | undefined }, state: BuildState): WindowPlan | null {
  const hours = [...state.counted].filter(([, n]) => n > 0).map(([h]) => h);
  if (hours.length === 0 && (!range.startDate || !range.endDate)) return null;
  const start = range.startDate?.getTime() ?? Math.min(...hours);
  const end = range.endDate?.getTime() ?? Math.max(...hours) + HOUR_MS - 1;
  return start > end ? null : planWindow(start, end, state);
}

interface CountRow {
  kind: string;
  hour: number | string;
  n: number | string;
  built: number | string;
}

/** The hours with matches in [startDate, endDate] (both included; open ends: all rows), newest first. */
export async function statusMatchesByHour(
  clickhouse: ClickHouseClient,
  domainId: number,
  statusCodes: StatusCodeFilter[],
  range: { startDate?: Date | undefined; endDate?: Date | undefined },
): Promise<HourCount[]> {
  const from = range.startDate?.getTime() ?? OPEN_START;
  const to = range.endDate?.getTime() ?? OPEN_END;
  if (from > to) return [];
  const b = windowBuckets(from, to);
  return readWithKnownPlan(clickhouse, `hours:${domainId}:${b.hourFrom}:${b.hourTo}`, {
    readState: () => queryBuildState(clickhouse, domainId, from, to, 'hours'),
    plan: (state) => planHours(range, state),
    run: async (plan, whole) => {
      const p = new Params('h');
      const codes = statusCondition(statusCodes, p);
      const pieces = plan ? planConditions(plan) : { built: null, raw: null, params: {} };
      // Every branch names its columns: the first one present names them for all.
      const query = unionAll([
        pieces.built &&
          `SELECT 'matches' AS kind, toUnixTimestamp(bucket) AS hour, sum(requests) AS n, toUInt64(0) AS built
FROM (
  SELECT bucket, requests, toUInt16OrZero(key) AS status_code FROM access_rollups
  WHERE domain_id = {domainId:UInt32} AND dim = 'status' AND (${pieces.built})
)
WHERE ${codes}
GROUP BY bucket`,
        pieces.raw &&
          `SELECT 'matches' AS kind, toUnixTimestamp(toStartOfHour(timestamp)) AS hour, count() AS n, toUInt64(0) AS built
FROM access_logs
WHERE domain_id = {domainId:UInt32} AND (${pieces.raw}) AND ${codes}
GROUP BY hour`,
        `SELECT span AS kind, bucket AS hour, counted AS n, built FROM (${buildStateQuery(whole ? 'hours' : 'counted')})`,
      ]);
      const rows = await selectRows<CountRow>(clickhouse, query, { ...buildStateParams(domainId, from, to), ...pieces.params, ...p.values });
      // Built hours and raw ranges are disjoint; a raw range yields each hour it spans.
      const byHour = new Map<number, number>();
      const state: BuildStateRow[] = [];
      for (const row of rows) {
        const hour = Number(row.hour) * 1000;
        if (row.kind === 'matches') byHour.set(hour, (byHour.get(hour) ?? 0) + Number(row.n));
        else state.push({ span: row.kind, bucket: row.hour, counted: row.n, built: row.built });
      }
      const answer = [...byHour].map(([hour, count]) => ({ hour, count })).filter((h) => h.count > 0).sort((a, b) => b.hour - a.hour);
      return { answer, state: buildStateOf(state) };
    },
  });
}
