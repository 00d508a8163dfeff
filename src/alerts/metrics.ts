/**
 * The alert metrics (docs/reference/alerts.md#evaluation) of every enabled alert, from ClickHouse,
 * in ONE query per round.
 *
 * Each alert asks for its domain over its trailing `duration` (whole seconds): a row is in the
 * window when its age, now − timestamp in ms, is in [0, duration × 1000). The query first groups
 * the rows of the longest window by (domain, age in whole minutes), and by the age in whole seconds
 * as well for the few minutes where some window ends inside the minute (`splitMinutes`); then it
 * joins those groups, not the rows, with the distinct (domain, duration) windows: a window takes
 * every group of a younger minute, and in its last minute the seconds below its duration. Joining
 * the rows themselves (each meeting all of its domain's windows) took 2.4 s for 10M rows and 600
 * windows; the groups are a few per minute and domain.
 *
 * The windows travel as bound Array(UInt32) parameters, zipped and array-joined into a small
 * table; nothing of the alerts is spliced into the SQL. The filter (domain IN …, timestamp within
 * the longest window) is what the primary key (domain_id, timestamp) prunes by.
 *
 * Each condition is a metric of the statistics' registry (src/stats/registry.ts): the groups hold
 * its partials (their SQL over rows), each window merges its groups' partials, and the metric's
 * final SQL gives the value, the one POST /api/logs/query shows for the same rows.
 *
 * Round trips matter: chDB serialises parameterised queries process-wide, so a query per alert
 * would queue behind each other and behind the API's own log reads.
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { mergedPartial, metricByName, PARTIALS, sourcePartial, type Metric, type MetricName } from '../stats/registry.js';
import { CONDITIONS, type Condition } from './schemas.js';

/** The default noise guard: a rate (errorRate, clientErrorRate) over fewer requests than this never fires. */
export const MIN_ERROR_RATE_REQUESTS = 10;

/** The statistics metric (src/stats/registry.ts) each condition watches: the value a dashboard shows for the same window. */
const CONDITION_METRICS: Record<Condition, MetricName> = {
  errorRate: 'errorRate',
  clientErrorRate: 'clientErrorRate',
  requestCount: 'requests',
  averageResponseTime: 'averageResponseTime',
  p95ResponseTime: 'p95ResponseTime',
};

const metricOfCondition = (condition: Condition): Metric => metricByName.get(CONDITION_METRICS[condition])!;

/** The conditions whose metric is a share of the requests (a fraction), and so needs MIN_ERROR_RATE_REQUESTS of them. */
export const RATE_CONDITIONS: readonly Condition[] = CONDITIONS.filter((c) => metricOfCondition(c).kind === 'fraction4');

export interface Window {
  domainId: number;
  /** Seconds. */
  duration: number;
}

/**
 * The figures of one window, (nowMs - duration s, nowMs]: its requests and the metric of each
 * condition measured (null: none, as the registry's metric gives it).
 */
export interface WindowFigures {
  requests: number;
  values: Partial<Record<Condition, number | null>>;
}

export const windowKey = (w: Window) => `${w.domainId}:${w.duration}`;

/**
 * The query measuring `conditions`: only their metrics' partials are computed (a histogram per
 * group costs several times the counts and sums, and only p95ResponseTime needs it).
 */
function figuresQuery(conditions: readonly Condition[]): string {
  const metrics = conditions.map(metricOfCondition);
  const partials = [...new Set([PARTIALS.requests, ...metrics.flatMap((m) => m.partials)])];
  return `
SELECT domain_id, duration, requests${metrics.map((m, i) => `, ${m.final} AS m${i}`).join('')}
FROM (
  SELECT ws.w.1 AS domain_id, ws.w.2 AS duration, ${partials.map((x) => mergedPartial(x, `g.p_${x.name}`)).join(', ')}
  FROM (
    SELECT domain_id, intDiv({nowMs:Int64} - toUnixTimestamp64Milli(timestamp), 60000) AS minute,
      if(has({splitMinutes:Array(UInt32)}, minute), intDiv({nowMs:Int64} - toUnixTimestamp64Milli(timestamp), 1000), -1) AS second,
      ${partials.map((x) => sourcePartial(x, 'raw')).join(',\n      ')}
    FROM access_logs
    WHERE domain_id IN {domainSet:Array(UInt32)}
      AND timestamp > fromUnixTimestamp64Milli({fromMs:Int64}, 'UTC')
      AND timestamp <= fromUnixTimestamp64Milli({nowMs:Int64}, 'UTC')
    GROUP BY domain_id, minute, second
  ) AS g
  INNER JOIN (SELECT arrayJoin(arrayZip({domains:Array(UInt32)}, {durations:Array(UInt32)})) AS w) AS ws ON g.domain_id = ws.w.1
  WHERE g.minute < intDiv(ws.w.2, 60) OR (g.minute = intDiv(ws.w.2, 60) AND g.second >= 0 AND g.second < ws.w.2)
  GROUP BY ws.w
)`;
}

type FigureRow = { domain_id: number | string; duration: number | string; requests: number | string } & Record<`m${number}`, number | string | null>;

/**
 * The figures of each distinct window at `nowMs` for `conditions` (those of the alerts measured),
 * keyed by `windowKey`; a window without rows has each metric's value over no rows (the registry's
 * `empty`). One query whatever the number of alerts; none when there are no windows.
 */
export async function windowFigures(clickhouse: ClickHouseClient, windows: Window[], nowMs: number, conditions: readonly Condition[]): Promise<Map<string, WindowFigures>> {
  const measured = [...new Set(conditions)];
  const distinct = new Map<string, Window>();
  for (const w of windows) distinct.set(windowKey(w), w);
  const figures = new Map<string, WindowFigures>();
  const empty: WindowFigures = { requests: 0, values: Object.fromEntries(measured.map((c) => [c, metricOfCondition(c).empty])) };
  for (const key of distinct.keys()) figures.set(key, empty);
  if (distinct.size === 0) return figures;
  const list = [...distinct.values()];
  const longest = Math.max(...list.map((w) => w.duration));
  const rows = await selectRows<FigureRow>(clickhouse, figuresQuery(measured), {
    domains: list.map((w) => w.domainId),
    durations: list.map((w) => w.duration),
    domainSet: [...new Set(list.map((w) => w.domainId))],
    // The minutes where a window ends inside the minute (a duration not a whole number of minutes).
    splitMinutes: [...new Set(list.filter((w) => w.duration % 60 !== 0).map((w) => Math.floor(w.duration / 60)))],
    fromMs: nowMs - longest * 1000,
    nowMs,
  });
  for (const row of rows) {
    const values = Object.fromEntries(measured.map((c, i) => [c, row[`m${i}`] === null ? null : Number(row[`m${i}`])]));
    figures.set(windowKey({ domainId: Number(row.domain_id), duration: Number(row.duration) }), { requests: Number(row.requests), values });
  }
  return figures;
}

/**
 * An alert's metric from its window's figures. `value` is null when the window says nothing about
 * the condition, and such a window never meets it (so it neither fires nor keeps an alert firing):
 *
 * - errorRate, clientErrorRate: the share of requests with status ≥ 500 (400–499), 4 decimals;
 *   null below `minRequests` requests (0 of 0, or 2 errors out of 3 requests, is noise, not an
 *   outage).
 * - averageResponseTime, p95ResponseTime: of the response times that are not NULL (ms); null when
 *   no request of the window carries one (no traffic, or a log format without $request_time), so
 *   a `lessThan` alert does not fire on an idle or untimed site.
 * - requestCount: the number of requests; 0 is a real value (`lessThan 1` is how one watches
 *   for a site that went silent).
 */
export function metricOf(condition: Condition, f: WindowFigures, minRequests: number): number | null {
  if (RATE_CONDITIONS.includes(condition) && f.requests < Math.max(1, minRequests)) return null;
  const value = f.values[condition];
  if (value === undefined) throw new Error(`the window's figures do not measure ${condition}`);
  return value;
}
