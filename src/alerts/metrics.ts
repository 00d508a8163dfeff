/**
 * The alert measures (docs/reference/alerts.md#evaluation) of every enabled alert, from ClickHouse,
 * in ONE statement per round.
 *
 * A measure asks for a condition over one domain's trailing `duration` (whole seconds), among the
 * rows its filters keep: a row is in the window when its age, end − timestamp in ms, is in
 * [0, duration × 1000), the end being now (or now − 7 days for the earlier window of requestChange).
 *
 * Measures with the same filters and the same end share a branch. A branch first groups the rows of
 * its longest window by (domain, bucket): with the branch's distinct durations sorted d1 < d2 < …,
 * a row's bucket is the first k with age < dk × 1000, so bucket k holds the ages in
 * [d(k−1), dk) seconds; then it joins those groups, not the rows, with its distinct (domain,
 * duration) windows: the window of dk takes the buckets 1..k, exactly its ages [0, dk × 1000).
 * Joining the rows themselves (each meeting all of its domain's windows) took 2.4 s for 10M rows
 * and 600 windows. Groups by minute of age (and second, in a minute where a window ends), as
 * before, made 60 groups per domain for a 1-hour window, each with its own visitor set and
 * response-time histogram to build and merge: 7 s of a 9 s round over 1,000 domains × 10 rules
 * (bench/alerts); the buckets are as many per domain as the branch has distinct durations, a fleet's
 * rules a handful.
 *
 * Branches, because filters decide which rows a group holds: measures with different filters can
 * share no group, and the earlier window of requestChange reads other rows (7 days back). A branch
 * computes only the metrics its measures ask for (a histogram per group costs several times the
 * counts and sums, and only the percentiles need it). The branches are one statement joined by
 * UNION ALL, each row tagged with its branch's number, every metric cast to Nullable(Float64) (a
 * branch gives NULL for the metrics it does not compute), so their columns agree. Round trips
 * matter: chDB serialises parameterised queries process-wide, so a query per alert or per filter
 * set would queue behind each other and behind the API's own log reads; ClickHouse runs the
 * branches of a UNION ALL side by side.
 *
 * Everything of the alerts (domains, windows, ends, filter values) travels as bound parameters
 * (Params); nothing of them is spliced into the SQL. A branch's filter (domain IN …, timestamp
 * within its longest window) is what the primary key (domain_id, timestamp) prunes by.
 *
 * Each condition but requestChange is the metric of the statistics' registry of the same name
 * (src/stats/registry.ts; requestCount is `requests`): the groups hold its partials (their SQL over
 * rows), each window merges its groups' partials, and the metric's final SQL gives the value, the
 * one POST /api/logs/query shows for the same rows and filters.
 */
import { DAY_MS } from '../../core/durations.js';
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { Params } from '../logs/filters.js';
import { mergedPartial, metricByName, PARTIALS, sourcePartial, type Metric, type MetricName } from '../stats/registry.js';
import type { QueryFilter } from '../stats/query/filters.js';
import { filterConditions } from '../stats/query/where.js';
import { CONDITIONS, type Condition } from './schemas.js';

/** The default noise guard: a rate (errorRate, clientErrorRate) over fewer requests than this never fires. */
export const MIN_ERROR_RATE_REQUESTS = 10;

/** requestChange has no value when the window 7 days earlier had fewer requests than this (a change against 3 requests is noise). */
export const REQUEST_CHANGE_MIN_PREVIOUS = 20;

/** How far back requestChange's earlier window ends. */
const WEEK_MS = 7 * DAY_MS;

/** The conditions that are a metric of the registry. */
type MetricCondition = Exclude<Condition, 'requestChange'>;

/** The registry's metric of a condition: the one of the same name, `requests` for requestCount (the specification's name). */
const metricOfCondition = (condition: MetricCondition): Metric => {
  const name: MetricName = condition === 'requestCount' ? 'requests' : condition;
  return metricByName.get(name)!;
};

/** The conditions whose metric is a share of the requests (a fraction), and so needs a minimum of requests. */
export const RATE_CONDITIONS: readonly Condition[] = CONDITIONS.filter((c) => c !== 'requestChange' && metricOfCondition(c).kind === 'fraction4');

export interface Measure {
  domainId: number;
  /** The trailing window, whole seconds (60..86400). */
  duration: number;
  /** The alert's filters; [] = all rows. Never the `domain` dimension (the alert's scope chooses domains). */
  filters: readonly QueryFilter[];
  condition: Condition;
}

/**
 * A measure's figures: its condition's value (null: the window says nothing about it, see
 * `measure`) and the requests of its window among the rows its filters keep.
 */
export interface Measured {
  value: number | null;
  requests: number;
  /** requestChange only: the requests of the window 7 days earlier. */
  previousRequests?: number;
}

/**
 * The filters as a text equal for the same set of filters in any order (AND), each filter's values
 * in any order (OR): the filters' part of a measure's key, and what measures share a branch by.
 */
const canonicalFilters = (filters: readonly QueryFilter[]): string =>
  JSON.stringify(
    filters
      .map((f) => JSON.stringify([f.op, f.dimension, f.values.map((v) => JSON.stringify(typeof v === 'object' ? [v.first, v.last] : v)).sort()]))
      .sort(),
  );

/** A measure's key in `measure`'s answer: equal for measures asking the same. */
export const measureKey = (m: Measure): string => `${m.domainId}:${m.duration}:${m.condition}:${canonicalFilters(m.filters)}`;

/** A window of a branch: one domain's trailing seconds. */
interface Window {
  domainId: number;
  duration: number;
}
const windowKey = (w: Window) => `${w.domainId}:${w.duration}`;

/** Measures' windows over the same rows: the same filters, the same end (now − offsetMs). */
interface Branch {
  /** Its place in the statement, which tags its rows. */
  number: number;
  filters: readonly QueryFilter[];
  offsetMs: number;
  metrics: Set<Metric>;
  windows: Map<string, Window>;
}

/**
 * One branch's SELECT: per window, its branch's number, domain, duration, requests and, for each
 * of `columns`, the metric's value if the branch computes it, else NULL.
 */
function branchQuery(branch: Branch, columns: readonly Metric[], nowMs: number, p: Params): string {
  const partials = [...new Set([PARTIALS.requests, ...[...branch.metrics].flatMap((m) => m.partials)])];
  const windows = [...branch.windows.values()];
  const end = p.bind('Int64', nowMs - branch.offsetMs);
  const durations = [...new Set(windows.map((w) => w.duration))].sort((a, b) => a - b);
  const longest = durations[durations.length - 1]!;
  const bucketOf = new Map(durations.map((d, k) => [d, k + 1]));
  const bounds = p.bind('Array(Int64)', durations.map((d) => d * 1000));
  const age = `(${end} - toUnixTimestamp64Milli(timestamp))`;
  const where = [
    `domain_id IN ${p.bind('Array(UInt32)', [...new Set(windows.map((w) => w.domainId))])}`,
    `timestamp > fromUnixTimestamp64Milli(${p.bind('Int64', nowMs - branch.offsetMs - longest * 1000)}, 'UTC')`,
    `timestamp <= fromUnixTimestamp64Milli(${end}, 'UTC')`,
    // No domain dimension among them (schemas.ts, alertFiltersField), so no domain names to look up.
    ...filterConditions(branch.filters, [], p),
  ];
  const values = columns.map((m) => `CAST(${branch.metrics.has(m) ? m.final : 'NULL'} AS Nullable(Float64)) AS m_${m.name}`);
  return `
SELECT toUInt32(${branch.number}) AS branch, domain_id, duration, requests${values.map((v) => `, ${v}`).join('')}
FROM (
  SELECT ws.w.1 AS domain_id, ws.w.2 AS duration, ${partials.map((x) => mergedPartial(x, `g.p_${x.name}`)).join(', ')}
  FROM (
    SELECT domain_id, arrayFirstIndex(x -> ${age} < x, ${bounds}) AS bucket,
      ${partials.map((x) => sourcePartial(x, 'raw')).join(',\n      ')}
    FROM access_logs
    WHERE ${where.join('\n      AND ')}
    GROUP BY domain_id, bucket
  ) AS g
  INNER JOIN (
    SELECT arrayJoin(arrayZip(${p.bind('Array(UInt32)', windows.map((w) => w.domainId))}, ${p.bind('Array(UInt32)', windows.map((w) => w.duration))}, ${p.bind('Array(UInt32)', windows.map((w) => bucketOf.get(w.duration)!))})) AS w
  ) AS ws ON g.domain_id = ws.w.1
  WHERE g.bucket <= ws.w.3
  GROUP BY ws.w
)`;
}

type FigureRow = { branch: number; domain_id: number; duration: number; requests: number | string } & Record<`m_${string}`, number | null>;

/** A window's figures as the statement gives them: requests and the value of each metric its branch computes. */
interface Figures {
  requests: number;
  values: ReadonlyMap<Metric, number | null>;
}

const roundHalfUp4 = (x: number) => Math.floor(x * 10_000 + 0.5) / 10_000;

/**
 * Every measure at `nowMs`, keyed by `measureKey`, in one statement whatever their number (none
 * without measures). `value` is null when the window says nothing about the condition, and such
 * a window never meets it (so it neither fires nor keeps an alert firing):
 *
 * - errorRate, clientErrorRate (RATE_CONDITIONS): null below `minRequests` requests (0 of 0, or 2
 *   errors out of 3 requests, is noise, not an outage).
 * - the response-time metrics: null when no request of the window carries one (no traffic, or a
 *   log format without $request_time), so a `lessThan` alert does not fire on an idle or untimed site.
 * - requests, requestCount, bandwidth, visitors: 0 is a real value (`lessThan 1` is how one
 *   watches for a site that went silent).
 * - requestChange: (requests − requests of the same window 7 days earlier) ÷ the latter, 4
 *   decimals half up (−1: traffic gone, 0: unchanged); null when the earlier window had fewer
 *   than REQUEST_CHANGE_MIN_PREVIOUS requests.
 *
 * A window without rows has each metric's value over no rows (the registry's `empty`).
 */
export async function measure(clickhouse: ClickHouseClient, measures: readonly Measure[], nowMs: number, minRequests: number): Promise<Map<string, Measured>> {
  const branches = new Map<string, Branch>();
  const branchOf = (filters: readonly QueryFilter[], offsetMs: number, window: Window): Branch => {
    const key = `${offsetMs}:${canonicalFilters(filters)}`;
    let branch = branches.get(key);
    if (!branch) branches.set(key, (branch = { number: branches.size, filters, offsetMs, metrics: new Set(), windows: new Map() }));
    branch.windows.set(windowKey(window), window);
    return branch;
  };
  const figures = new Map<string, Figures>();
  const figuresKey = (branch: Branch, w: Window) => `${branch.number}:${windowKey(w)}`;
  const figuresOf = (branch: Branch, w: Window): Figures =>
    figures.get(figuresKey(branch, w)) ?? { requests: 0, values: new Map([...branch.metrics].map((m) => [m, m.empty])) };

  // Each measure puts its windows in their branches, and reads its figures once the statement ran.
  const readers = measures.map((m): [string, () => Measured] => {
    const window = { domainId: m.domainId, duration: m.duration };
    const current = branchOf(m.filters, 0, window);
    if (m.condition === 'requestChange') {
      const previous = branchOf(m.filters, WEEK_MS, window);
      return [measureKey(m), () => requestChange(figuresOf(current, window).requests, figuresOf(previous, window).requests)];
    }
    const metric = metricOfCondition(m.condition);
    current.metrics.add(metric);
    const rate = RATE_CONDITIONS.includes(m.condition);
    return [
      measureKey(m),
      () => {
        const { requests, values } = figuresOf(current, window);
        return { value: rate && requests < Math.max(1, minRequests) ? null : values.get(metric)!, requests };
      },
    ];
  });

  if (branches.size > 0) {
    const list = [...branches.values()];
    const columns = [...new Set(list.flatMap((b) => [...b.metrics]))];
    const p = new Params('m');
    const query = list.map((b) => branchQuery(b, columns, nowMs, p)).join('\nUNION ALL\n');
    for (const row of await selectRows<FigureRow>(clickhouse, query, p.values)) {
      const branch = list[Number(row.branch)]!;
      figures.set(figuresKey(branch, { domainId: Number(row.domain_id), duration: Number(row.duration) }), {
        requests: Number(row.requests),
        values: new Map([...branch.metrics].map((m) => [m, row[`m_${m.name}`] ?? null])),
      });
    }
  }
  return new Map(readers.map(([key, read]) => [key, read()]));
}

/** requestChange of a window's requests and those of the same window 7 days earlier. */
function requestChange(requests: number, previousRequests: number): Measured {
  const value = previousRequests < REQUEST_CHANGE_MIN_PREVIOUS ? null : roundHalfUp4((requests - previousRequests) / previousRequests);
  return { value, requests, previousRequests };
}
