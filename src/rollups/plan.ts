/**
 * How a window of one domain is read: bucket by bucket from the rollups (access_rollups,
 * access_tops; built by builder.ts) where they are built, from access_logs elsewhere. The build
 * state of a window, the plan made from it, and the plan as SQL conditions over bound parameters.
 * The stats reader (src/stats/window.ts) and the search check (src/logs/search-fields.ts) plan
 * with it.
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { inBuckets, topsVersions, unionAll } from './shared-sql.js';
import type { ListedBucket } from './short-lists.js';
import { HOUR_MS, DAY_MS } from '../../core/durations.js';


/**
 * How a window [start, end] (epoch ms, both ends included) is read: whole days and whole hours from
 * access_rollups where they are built, everything else (the partial hours at both ends, and buckets
 * not yet built or written to since) from access_logs as half-open ranges [from, to).
 */
export interface WindowPlan {
  start: number;
  end: number;
  days: number[];
  hours: number[];
  raw: [number, number][];
  /**
   * The days and hours (of `days`, `hours`) whose short top lists (access_tops) are current, each
   * with the version those lists must have (its built total).
   */
  listed: ListedBucket[];
}

/** Day and hour starts (epoch ms). */
export interface BucketSet {
  days: number[];
  hours: number[];
}

/** The day and hour starts of some listed buckets. */
export const bucketSetOf = (buckets: ListedBucket[]): BucketSet => ({
  days: buckets.filter((b) => b.span === 'day').map((b) => b.start),
  hours: buckets.filter((b) => b.span === 'hour').map((b) => b.start),
});

/** The whole days and hours a window could read from rollups: [hourFrom, hourTo) ⊇ [dayFrom, dayTo). */
export interface WindowBuckets {
  hourFrom: number;
  dayFrom: number;
  dayTo: number;
  hourTo: number;
}

const floorTo = (ms: number, unit: number) => Math.floor(ms / unit) * unit;
const ceilTo = (ms: number, unit: number) => Math.ceil(ms / unit) * unit;

/** The whole hours of [start, end] and the whole days among them; empty ranges have equal ends. */
export function windowBuckets(start: number, end: number): WindowBuckets {
  const hourFrom = ceilTo(start, HOUR_MS);
  const hourTo = floorTo(end, HOUR_MS);
  if (hourFrom >= hourTo) return { hourFrom: start, dayFrom: start, dayTo: start, hourTo: start };
  const dayFrom = ceilTo(hourFrom, DAY_MS);
  const dayTo = floorTo(hourTo, DAY_MS);
  if (dayFrom >= dayTo) return { hourFrom, dayFrom: hourTo, dayTo: hourTo, hourTo };
  return { hourFrom, dayFrom, dayTo, hourTo };
}

/** How far a window's buckets are built: rows counted and requests built, by bucket start (ms). */
export interface BuildState {
  /** Hour → rows access_hour_rows counted. */
  counted: Map<number, number>;
  /** Hour → requests of its built total row. */
  builtHours: Map<number, number>;
  /** Day → requests of its built total row. */
  builtDays: Map<number, number>;
  /** Hour → the hour's requests when its short top lists were built. */
  topsHours: Map<number, number>;
  /** Day → the day's requests when its short top lists were built. */
  topsDays: Map<number, number>;
}

/** A build state with nothing built. */
export const emptyBuildState = (): BuildState => ({ counted: new Map(), builtHours: new Map(), builtDays: new Map(), topsHours: new Map(), topsDays: new Map() });

/** Beyond this many raw ranges a window is read from access_logs alone (a rare, unbuilt backlog). */
const MAX_RAW_RANGES = 48;

/**
 * Chooses, bucket by bucket, rollup or raw rows: a day whose total equals the rows counted in its
 * hours, else each hour whose total equals its count; the rest of the window is raw. Adjacent raw
 * ranges are joined. Hours without counted rows are left out (none to read; a fresh insert is
 * counted as it is stored). Only the counted hours are visited, never every hour of the window: a
 * window may span all the times the stores hold (1970 to 2106, a million hours) while a domain
 * holds rows in a few thousand. Pure, so the tests can drive it with any state.
 */
export function planWindow(start: number, end: number, state: BuildState | null): WindowPlan {
  const b = windowBuckets(start, end);
  const raw: [number, number][] = [];
  const addRaw = (from: number, to: number) => {
    if (from >= to) return;
    const last = raw[raw.length - 1];
    if (last && last[1] === from) last[1] = to;
    else raw.push([from, to]);
  };
  const whole: WindowPlan = { start, end, days: [], hours: [], raw: [[start, end + 1]], listed: [] };
  if (!state || b.hourFrom >= b.hourTo) return whole;
  const days: number[] = [];
  const hours: number[] = [];
  const hour = (h: number) => {
    if (state.builtHours.get(h) === state.counted.get(h)) hours.push(h);
    else addRaw(h, h + HOUR_MS);
  };
  // The window's counted hours in time order, each whole day's taken together.
  const counted = [...state.counted].filter(([h, n]) => n > 0 && h >= b.hourFrom && h < b.hourTo).sort(([x], [y]) => x - y);
  addRaw(start, b.hourFrom);
  for (let i = 0; i < counted.length; ) {
    const h = counted[i]![0];
    const day = floorTo(h, DAY_MS);
    if (day < b.dayFrom || day >= b.dayTo) {
      hour(h);
      i++;
      continue;
    }
    let j = i;
    let rows = 0;
    for (; j < counted.length && counted[j]![0] < day + DAY_MS; j++) rows += counted[j]![1];
    if (state.builtDays.get(day) === rows) days.push(day);
    else for (let k = i; k < j; k++) hour(counted[k]![0]);
    i = j;
  }
  addRaw(b.hourTo, end + 1);
  const listedOf = (span: ListedBucket['span'], starts: number[], built: Map<number, number>, tops: Map<number, number>) =>
    starts.filter((at) => tops.get(at) === built.get(at)).map((at) => ({ span, start: at, version: built.get(at)! }));
  const listed = [...listedOf('day', days, state.builtDays, state.topsDays), ...listedOf('hour', hours, state.builtHours, state.topsHours)];
  return raw.length > MAX_RAW_RANGES ? whole : { start, end, days, hours, raw, listed };
}

/**
 * The built days and hours of a plan made from one domain's build state, each with the version its
 * short lists must have: the rows `rows` counts in it, which its built total equals (planWindow).
 */
export function builtBuckets(plan: WindowPlan, rows: HourRows): ListedBucket[] {
  const counted = (from: number, to: number) => {
    let n = 0;
    for (const [h, r] of rows) if (h >= from && h < to) n += r;
    return n;
  };
  return [
    ...plan.days.map((start) => ({ span: 'day' as const, start, version: counted(start, start + DAY_MS) })),
    ...plan.hours.map((start) => ({ span: 'hour' as const, start, version: rows.get(start) ?? 0 })),
  ];
}

/**
 * Whether the plan reads every row of its window raw: what it reads then does not depend on the
 * state it was made from (another plan skips the hours without rows, and reads built ones).
 */
export const readsWholeWindowRaw = (plan: WindowPlan) =>
  plan.days.length === 0 && plan.hours.length === 0 && plan.raw.length === 1 && plan.raw[0]![0] === plan.start && plan.raw[0]![1] === plan.end + 1;

/**
 * What a build-state read covers: the rows counted per whole hour only, or everything (adding the
 * built totals per whole hour and day, and the short lists' versions).
 */
export type StateParts = 'counted' | 'all';

/** The window's whole hours and whole days, as rows of access_rollups or access_tops (span, bucket). */
const WINDOW_BUCKETS = `((span = 'hour' AND bucket >= toDateTime({hourFrom:UInt32}, 'UTC') AND bucket < toDateTime({hourTo:UInt32}, 'UTC'))
    OR (span = 'day' AND bucket >= toDateTime({dayFrom:UInt32}, 'UTC') AND bucket < toDateTime({dayTo:UInt32}, 'UTC')))`;

/**
 * The build state of a window (`parts` of it), without joins. Rows: (span, bucket, counted,
 * built); span 'counted', 'hour', 'day', 'tops-hour' or 'tops-day'.
 */
export const buildStateQuery = (parts: StateParts) => unionAll([
  `SELECT 'counted' AS span, toUnixTimestamp(hour) AS bucket, sum(rows) AS counted, toUInt64(0) AS built FROM access_hour_rows
WHERE domain_id = {domainId:UInt32} AND hour >= toDateTime({hourFrom:UInt32}, 'UTC') AND hour < toDateTime({hourTo:UInt32}, 'UTC')
GROUP BY hour`,
  parts === 'all' &&
    `SELECT toString(span), toUnixTimestamp(bucket), 0, sum(requests) FROM access_rollups
WHERE domain_id = {domainId:UInt32} AND dim = 'total' AND ${WINDOW_BUCKETS}
GROUP BY span, bucket`,
  parts === 'all' &&
    `SELECT concat('tops-', toString(span)), toUnixTimestamp(bucket), 0, version
FROM (${topsVersions('span, bucket', `domain_id = {domainId:UInt32} AND ${WINDOW_BUCKETS}`)})`,
]);

const seconds = (ms: number) => Math.floor(ms / 1000);

/** A build-state row: a bucket's span ('counted', 'hour', 'day', 'tops-hour', 'tops-day'), start (seconds) and figures. */
export interface BuildStateRow {
  span: string;
  bucket: number | string;
  counted: number | string;
  built: number | string;
}

/** The build-state query's parameters for [start, end]. */
export const buildStateParams = (domainId: number, start: number, end: number) => {
  const b = windowBuckets(start, end);
  return { domainId, hourFrom: seconds(b.hourFrom), hourTo: seconds(b.hourTo), dayFrom: seconds(b.dayFrom), dayTo: seconds(b.dayTo) };
};

export function buildStateOf(rows: BuildStateRow[]): BuildState {
  const state = emptyBuildState();
  const into: Record<string, Map<number, number>> = { hour: state.builtHours, day: state.builtDays, 'tops-hour': state.topsHours, 'tops-day': state.topsDays };
  for (const row of rows) {
    const at = Number(row.bucket) * 1000;
    if (row.span === 'counted') state.counted.set(at, Number(row.counted));
    else into[row.span]?.set(at, Number(row.built));
  }
  return state;
}

/** The whole build state of [start, end]. */
export async function queryBuildState(clickhouse: ClickHouseClient, domainId: number, start: number, end: number): Promise<BuildState> {
  const rows = await selectRows<BuildStateRow>(clickhouse, buildStateQuery('all'), buildStateParams(domainId, start, end));
  return buildStateOf(rows);
}

/** Rows counted per hour (start, ms), summed over some domains: what tells whether their build state may have changed. */
export type HourRows = Map<number, number>;

/** A build state folded over several domains (queryDomainsBuildState), with the rows it was read at. */
export interface DomainsBuildState {
  state: BuildState;
  rows: HourRows;
}

const rangeOf = (column: string, from: string, to: string) => `${column} >= toDateTime({${from}:UInt32}, 'UTC') AND ${column} < toDateTime({${to}:UInt32}, 'UTC')`;

const domainsStateParams = (domainIds: number[], b: WindowBuckets) => ({
  domainIds,
  hourFrom: seconds(b.hourFrom),
  hourTo: seconds(b.hourTo),
  dayFrom: seconds(b.dayFrom),
  dayTo: seconds(b.dayTo),
});

/**
 * The build state of several domains' window, folded into one state that planWindow reads as it
 * reads one domain's, so that a bucket is read from the rollups only where it is built for every
 * domain holding rows in it (one plan, one condition on the buckets for all the domains):
 *
 * - counted: hour → how many of the domains hold rows in it;
 * - builtHours: hour → how many of those have a built total equal to their count;
 * - builtDays: day → the sum, over the domains whose day total equals the rows counted in its
 *   hours, of how many hours of the day hold their rows.
 *
 * planWindow compares builtHours with counted, and builtDays with the sum of counted over the
 * day's hours (the sum over the domains of their hours with rows): each is equal only when every
 * domain's bucket is built. With `span` 'hour' the days are left out (every hour planned alone).
 * The short lists are not read (a query of totals needs none). Also the rows per hour, as
 * queryDomainsHourRows counts them.
 */
export async function queryDomainsBuildState(clickhouse: ClickHouseClient, domainIds: number[], start: number, end: number, span: 'hour' | 'day'): Promise<DomainsBuildState> {
  const b = windowBuckets(start, end);
  const found: DomainsBuildState = { state: emptyBuildState(), rows: new Map() };
  if (domainIds.length === 0 || b.hourFrom >= b.hourTo) return found;
  const counted = `SELECT domain_id, hour, sum(rows) AS n FROM access_hour_rows
  WHERE domain_id IN {domainIds:Array(UInt32)} AND ${rangeOf('hour', 'hourFrom', 'hourTo')}
  GROUP BY domain_id, hour HAVING n > 0`;
  const totals = (s: 'hour' | 'day', from: string, to: string) => `SELECT domain_id, bucket, sum(requests) AS built FROM access_rollups
  WHERE domain_id IN {domainIds:Array(UInt32)} AND span = '${s}' AND dim = 'total' AND ${rangeOf('bucket', from, to)}
  GROUP BY domain_id, bucket`;
  const query = unionAll([
    `SELECT 'hour' AS span, toUnixTimestamp(c.hour) AS bucket, count() AS counted, countIf(t.built = c.n) AS built, sum(c.n) AS rows
FROM (${counted}) AS c LEFT JOIN (${totals('hour', 'hourFrom', 'hourTo')}) AS t ON t.domain_id = c.domain_id AND t.bucket = c.hour
GROUP BY c.hour`,
    span === 'day' &&
      b.dayFrom < b.dayTo &&
      `SELECT 'day', toUnixTimestamp(c.day), 0, sumIf(c.hours, t.built = c.n), 0
FROM (SELECT domain_id, toStartOfDay(hour) AS day, sum(n) AS n, count() AS hours FROM (${counted}) GROUP BY domain_id, day) AS c
LEFT JOIN (${totals('day', 'dayFrom', 'dayTo')}) AS t ON t.domain_id = c.domain_id AND t.bucket = c.day
WHERE c.day >= toDateTime({dayFrom:UInt32}, 'UTC') AND c.day < toDateTime({dayTo:UInt32}, 'UTC')
GROUP BY c.day`,
  ]);
  for (const row of await selectRows<BuildStateRow & { rows: number | string }>(clickhouse, query, domainsStateParams(domainIds, b))) {
    const at = Number(row.bucket) * 1000;
    if (row.span === 'hour') {
      found.state.counted.set(at, Number(row.counted));
      found.state.builtHours.set(at, Number(row.built));
      found.rows.set(at, Number(row.rows));
    } else found.state.builtDays.set(at, Number(row.built));
  }
  return found;
}

/**
 * The state with the hours whose domains hold fewer than `minRows` rows each, on average, taken as
 * unbuilt, so that they are read raw. Reading an hour from the rollups costs about the same for
 * every domain in it (its index range, its total row, the build state's entry), reading it raw
 * costs its rows: a fleet of small sites (13 rows per domain and hour) reads its day twice as fast
 * raw (bench/README, "Issue 14"). Days are left as they are: a day row stands for a day of rows.
 */
export function sparseHoursUnbuilt(found: DomainsBuildState, minRows: number): BuildState {
  if (minRows <= 0) return found.state;
  const builtHours = new Map(found.state.builtHours);
  for (const [hour, domains] of found.state.counted) if ((found.rows.get(hour) ?? 0) < minRows * domains) builtHours.delete(hour);
  return { ...found.state, builtHours };
}

/** The rows counted per whole hour of the window, summed over the domains (hours without rows left out). */
export async function queryDomainsHourRows(clickhouse: ClickHouseClient, domainIds: number[], start: number, end: number): Promise<HourRows> {
  const b = windowBuckets(start, end);
  const rows: HourRows = new Map();
  if (domainIds.length === 0 || b.hourFrom >= b.hourTo) return rows;
  const query = `SELECT toUnixTimestamp(hour) AS bucket, sum(rows) AS n FROM access_hour_rows
WHERE domain_id IN {domainIds:Array(UInt32)} AND ${rangeOf('hour', 'hourFrom', 'hourTo')}
GROUP BY hour HAVING n > 0`;
  for (const row of await selectRows<{ bucket: number | string; n: number | string }>(clickhouse, query, domainsStateParams(domainIds, b))) rows.set(Number(row.bucket) * 1000, Number(row.n));
  return rows;
}

/**
 * A plan's pieces as SQL conditions over bound parameters (the number of pieces is the plan's,
 * never the request's); null where the plan has no such piece, so that its read is left out.
 */
export interface PlanConditions {
  /** access_logs rows of the raw ranges. */
  raw: string | null;
  /** access_rollups (or access_tops) buckets: every built day and hour of the plan … */
  built: string | null;
  /** … those with current short lists … */
  listed: string | null;
  /** … and those without. */
  unlisted: string | null;
  params: Record<string, unknown>;
}

/** Joins consecutive bucket starts (ms, ascending) into half-open runs [from, to). */
function runsOf(starts: number[], unit: number): [number, number][] {
  const runs: [number, number][] = [];
  for (const at of starts) {
    const last = runs[runs.length - 1];
    if (last && last[1] === at) last[1] = at + unit;
    else runs.push([at, at + unit]);
  }
  return runs;
}

const anyOf = (conditions: string[]) => (conditions.length === 0 ? null : conditions.map((c) => `(${c})`).join(' OR '));

/**
 * A set of days and hours as a condition on `span` and `bucket`, with its parameters (named after
 * `name`) added to `params`. The days as one IN (see inBuckets); the hours as runs of consecutive
 * hours, each one range of the primary key, where an IN over the hours would read every hour row
 * between the first and the last (the days between the two ends of a 30-day window).
 */
function bucketsCondition(name: string, set: BucketSet, params: Record<string, unknown>): string | null {
  const parts: string[] = [];
  if (set.days.length > 0) {
    params[`${name}Days`] = set.days.map(seconds);
    parts.push(`span = 'day' AND ${inBuckets('bucket', `${name}Days`)}`);
  }
  const runs = runsOf([...set.hours].sort((a, b) => a - b), HOUR_MS);
  runs.forEach(([from, to], i) => Object.assign(params, { [`${name}${i}from`]: seconds(from), [`${name}${i}to`]: seconds(to) }));
  const hours = anyOf(runs.map((_, i) => `bucket >= toDateTime({${name}${i}from:UInt32}, 'UTC') AND bucket < toDateTime({${name}${i}to:UInt32}, 'UTC')`));
  if (hours) parts.push(`span = 'hour' AND (${hours})`);
  return anyOf(parts);
}

/**
 * Half-open time ranges [from, to) (epoch ms) as a condition on `timestamp`, with their parameters
 * (named after `name`) added to `params`; null for none. The plan's raw part, and the search's
 * read of access_logs (src/logs/search-fields.ts).
 */
export function timeRangesCondition(name: string, ranges: readonly [number, number][], params: Record<string, unknown>): string | null {
  ranges.forEach(([from, to], i) => Object.assign(params, { [`${name}${i}from`]: from, [`${name}${i}to`]: to }));
  return anyOf(
    ranges.map((_, i) => `timestamp >= fromUnixTimestamp64Milli({${name}${i}from:Int64}, 'UTC') AND timestamp < fromUnixTimestamp64Milli({${name}${i}to:Int64}, 'UTC')`),
  );
}

export function planConditions(plan: WindowPlan): PlanConditions {
  const params: Record<string, unknown> = {};
  const listed = bucketSetOf(plan.listed);
  const unlisted = { days: plan.days.filter((d) => !listed.days.includes(d)), hours: plan.hours.filter((h) => !listed.hours.includes(h)) };
  return {
    raw: timeRangesCondition('raw', plan.raw, params),
    built: bucketsCondition('built', plan, params),
    listed: bucketsCondition('listed', listed, params),
    unlisted: bucketsCondition('unlisted', unlisted, params),
    params,
  };
}

