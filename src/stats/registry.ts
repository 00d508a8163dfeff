/**
 * The one list of what the statistics compute: metrics and dimensions, each with the SQL that
 * computes it from access_logs rows (sql/clickhouse/002_logs.sql, 010_agent_classes.sql).
 * The query pipeline (src/stats/query/) generates every SQL it runs from these entries; adding a
 * metric or a dimension is one entry here plus its test.
 *
 * Metrics are computed from partials: mergeable states (a count, a sum, an exact distinct set, a
 * histogram). A query aggregates each source into partial columns (`raw` for access_logs rows)
 * and merges the sources' columns (`merge`) before the metrics' `final` SQL reads them:
 *
 *   SELECT dims, final(partials) FROM (SELECT dims, merge(partials) FROM (raw part UNION ALL …) GROUP BY dims)
 *
 * so that a rollup source holding the same partials slots in beside the raw rows. Each partial also
 * merges in JavaScript (JsMerge) and each metric has the same `final` there (`value`): the kept built
 * part of GET …/stats (src/stats/kept-window.ts) merges its states with the window's ends in memory.
 * GET …/stats shows registry metrics (src/stats/figures.ts), so a metric is written only here.
 */
import { z } from '@hono/zod-openapi';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../core/durations.js';
import { Params, statusCondition, URL_FILTER_MAX } from '../logs/filters.js';

// ---------------------------------------------------------------------------------------------
// Partials
// ---------------------------------------------------------------------------------------------

/**
 * A partial's column in access_rollups' total rows (sql/clickhouse/009_rollup_partials.sql):
 * `read`, the same state as `raw` from some of those rows (the day builds, the held part of a
 * rebuild, and the rollup part of a read); `difference`, what a rebuild writes from the fresh state
 * and the held one: the builder adds to what a bucket holds, so a sum is written as fresh − held,
 * while a set union or a maximum is written whole (merging it again changes nothing).
 */
export interface RollupColumn {
  column: string;
  read: string;
  difference: ((fresh: string, held: string) => string) | null;
}

/**
 * A partial merged in JavaScript (the kept built part of GET …/stats, src/stats/kept-window.ts):
 * what a query sends for its column, that value read back as a state, and two states merged: the
 * same merge as the partial's SQL `merge` (test/src/stats/registry.test.ts compares every metric's
 * value both ways).
 */
export interface JsMerge<S> {
  /** SQL of what a query sends for the partial column `column`. */
  sent(column: string): string;
  /** That value as the JSON answer gives it; undefined when it does not have the layout read here (the reader then merges in SQL). */
  read(value: unknown): S | undefined;
  /** The state of two sources' rows together; neither argument changes (a kept state is merged again by the next request). */
  merge(a: S, b: S): S;
  /** The entries it holds: what a cache of states is bounded by. */
  size(state: S): number;
}

/**
 * A mergeable state: its column name, its aggregate over access_logs rows, how columns of several
 * sources combine in SQL and in JavaScript, and where the rollups keep it (`Rollup`: its
 * RollupColumn, or null for a partial the rollups do not hold, which only raw rows give).
 */
export interface PartialState<Rollup extends RollupColumn | null = RollupColumn> {
  name: string;
  raw: string;
  /** How the sources' columns (`column`) combine per group. */
  merge: (column: string) => string;
  /**
   * The same as `merge` where one source alone gives every group, each in one row (no GROUP BY:
   * over millions of groups, hashing them a second time cost a fifth of the query); absent where
   * that form is not written (the histogram always has two sources over raw rows).
   */
  alone?: (column: string) => string;
  rollup: Rollup;
  /**
   * How a query's sources read it when not in the form stored (`raw`, `rollup.read`): the
   * histogram as its keys and counts, which groups merge by concatenation.
   */
  source?: { raw: string; rollup: string };
  /**
   * What a query source gives for it where another source of the same groups holds it: the
   * empty state, of the type of `raw` (src/stats/query/sql.ts splits the raw rows in two sources).
   */
  neutral: string;
  /**
   * Read from raw rows by key first (src/stats/query/sql.ts): the rows of `rows` counted per group
   * and `key` (column c, Int64, beside k), then `collect` over those counts per group. Counting
   * per key is a plain GROUP BY, several times cheaper than a map state per group (sumMap;
   * bench/README, "Figures behind the code's choices").
   */
  byKey?: { key: string; rows: string; collect: string };
  js: JsMerge<unknown>;
}

/** Any partial: one the rollups hold (PARTIALS) or one read from raw rows only (RAW_PARTIALS). */
export type AnyPartial = PartialState<RollupColumn | null>;

/** A sum's rollup column: summed when read, written as a difference. */
const summed = (column: string) => ({ column, read: `sum(${column})`, difference: (fresh: string, held: string) => `${fresh} - ${held}` });

/** A partial as the rollup builder stores it: its aggregate over access_logs rows, named p_<name>. */
export const rawPartial = (x: PartialState) => `${x.raw} AS p_${x.name}`;
/** A partial as the rollup builder stores it, from access_rollups' total rows, named p_<name>. */
export const rollupPartial = (x: PartialState) => `${x.rollup.read} AS p_${x.name}`;
/** A partial as a column of one query source's groups (access_logs rows or access_rollups' total rows), named p_<name>. */
export const sourcePartial = (x: AnyPartial, source: 'raw' | 'rollup') => `${x.source?.[source] ?? (source === 'raw' ? x.raw : heldRead(x))} AS p_${x.name}`;
/** A partial's SQL over access_rollups' total rows; a query asks for none the rollups do not hold (src/stats/query/parse.ts, servedBy). */
function heldRead(x: AnyPartial): string {
  if (!x.rollup) throw new Error(`the rollups hold no column of the partial ${x.name}`);
  return x.rollup.read;
}
/** A partial merged over groups of the sources (`column`: their p_<name>, qualified where needed), named <name>. */
export const mergedPartial = (x: AnyPartial, column = `p_${x.name}`) => `${x.merge(column)} AS ${x.name}`;
/** A partial of the one source that gives every group in one row (PartialState.alone), named <name>; null where it has no such form. */
export const alonePartial = (x: AnyPartial) => (x.alone ? `${x.alone(`p_${x.name}`)} AS ${x.name}` : null);

/** The URL `url` (SQL) up to its first "?". */
const pathOf = (url: string) => `if(position(${url}, '?') > 0, substring(${url}, 1, position(${url}, '?') - 1), ${url})`;

const merge = (fn: string) => (column: string) => `${fn}(${column})`;
/** A sum's or a maximum's one column, as it is. */
const asIs = (column: string) => column;
/** An exact distinct state's count, over one source alone. */
const finalized = (column: string) => `finalizeAggregation(${column})`;
/** A uniqExact state as hex text: its serialised form (a varint count, then each value's 16-byte hash, for strings). */
const stateHex = (column: string) => `hex(CAST(${column} AS String))`;

/**
 * The hashes of a `uniqExact` state of strings from its hex (stateHex), or null if it does not have
 * that layout: then the kept part is not used (another ClickHouse version may lay it out otherwise).
 */
export function hashesOf(hex: string): string[] | null {
  let count = 0;
  let at = 0;
  for (let shift = 0; ; shift += 7) {
    if (at + 2 > hex.length || shift > 56) return null;
    const byte = parseInt(hex.slice(at, at + 2), 16);
    at += 2;
    count += (byte & 0x7f) * 2 ** shift;
    if ((byte & 0x80) === 0) break;
  }
  if (hex.length !== at + 32 * count) return null;
  const hashes: string[] = new Array(count);
  for (let i = 0; i < count; i++) hashes[i] = hex.slice(at + 32 * i, at + 32 * (i + 1));
  return hashes;
}

const summedInJs: JsMerge<number> = { sent: asIs, read: Number, merge: (a, b) => a + b, size: () => 1 };
/** null: no row had a value. */
const maximumInJs: JsMerge<number | null> = {
  sent: asIs,
  read: (v) => (v === null ? null : Number(v)),
  merge: (a, b) => (a === null ? b : b === null ? a : Math.max(a, b)),
  size: () => 1,
};

/**
 * An exact distinct set as the hashes its uniqExact state holds (hex), in disjoint parts: merging
 * a kept window's set with its ends adds the ends' new hashes as a part instead of copying the kept
 * set, whose addresses may be a million.
 */
export type DistinctHashes = readonly ReadonlySet<string>[];
/** How many distinct values a DistinctHashes holds. */
const distinctCount = (parts: DistinctHashes) => parts.reduce((n, part) => n + part.size, 0);
const distinctInJs: JsMerge<DistinctHashes> = {
  sent: stateHex,
  read: (hex) => {
    const hashes = typeof hex === 'string' ? hashesOf(hex) : null;
    return hashes ? [new Set(hashes)] : undefined;
  },
  merge: (a, b) => [...a, ...b.map((part) => new Set([...part].filter((h) => !a.some((known) => known.has(h)))))],
  size: distinctCount,
};

/** A response-time histogram as histogram key → rows (its keys as one source gives them: not necessarily distinct nor sorted). */
const histogramInJs: JsMerge<ReadonlyMap<number, number>> = {
  sent: asIs,
  read: (v) => {
    const [keys, counts] = v as [(number | string)[], (number | string)[]];
    const histogram = new Map<number, number>();
    keys.forEach((k, i) => histogram.set(Number(k), (histogram.get(Number(k)) ?? 0) + Number(counts[i])));
    return histogram;
  },
  merge: (a, b) => {
    const merged = new Map(a);
    for (const [k, rows] of b) merged.set(k, (merged.get(k) ?? 0) + rows);
    return merged;
  },
  size: (h) => h.size,
};

/**
 * Response-time histogram keys: exact below 128 ms, then buckets 2 % wide
 * (key = 128 + floor(log(v / 128) / log(1.02)); a UInt32 of milliseconds stays below key 1004).
 * A bucket's representative is 1.01 × its lower edge, so any value of it is within 1 % of it.
 */
export const EXACT_BELOW_MS = 128;
export const HISTOGRAM_GROWTH = 1.02;

const rt = 'ifNull(response_time, 0)';
const histogramKey = `toUInt16(if(${rt} < ${EXACT_BELOW_MS}, ${rt}, ${EXACT_BELOW_MS} + floor(log(greatest(${rt}, ${EXACT_BELOW_MS}) / ${EXACT_BELOW_MS}) / log(${HISTOGRAM_GROWTH}))))`;
/**
 * A group's sources' keys and counts concatenated, the counts put in key order, as (key, cumulative
 * count) at the last of each key: what every percentile reads, computed once per group (a
 * percentile over the sorted pairs would make its own cumulative sums each). Keys and counts stay
 * two arrays until then: concatenating arrays of tuples costs several times as much (bench/README,
 * "Figures behind the code's choices").
 */
const mergedHistogram = (column: string) => {
  const keys = `groupArrayArray(tupleElement(${column}, 1))`;
  const counts = `groupArrayArray(tupleElement(${column}, 2))`;
  return `arrayFilter((x, next) -> x.1 != next, arrayZip((arraySort(${keys}) AS rt_keys), arrayCumSum(arraySort((c, k) -> k, ${counts}, ${keys}))), arrayResize(arrayPopFront(rt_keys), length(rt_keys), toUInt16(65535)))`;
};

/** The histogram of access_logs rows, as stored: the count of rows per key. */
const rawHistogram = `sumMapIf([${histogramKey}], [toInt64(1)], response_time IS NOT NULL)`;

const ZERO = 'toUInt64(0)';

/** A sum: summed in SQL and in JavaScript, kept by the rollups in `rollupColumn`. */
const summedPartial = (name: string, raw: string, rollupColumn: string) =>
  ({ name, raw, merge: merge('sum'), alone: asIs, rollup: summed(rollupColumn), neutral: ZERO, js: summedInJs }) as const;

/** An exact distinct set of the strings `value` (SQL over access_logs rows): merged as a union in SQL (uniqExactMerge) and in JavaScript (its hashes). */
const distinctPartial = <Rollup extends RollupColumn | null>(name: string, value: string, rollup: Rollup) =>
  ({ name, raw: `uniqExactState(${value})`, merge: merge('uniqExactMerge'), alone: finalized, rollup, neutral: "uniqExactStateIf('', 0)", js: distinctInJs }) as const;

/** The partials access_rollups' total rows hold, each in its column (the rollup builder writes every one, src/rollups/builder.ts). */
export const PARTIALS = {
  requests: summedPartial('requests', 'count()', 'requests'),
  serverErrors: summedPartial('server_errors', 'countIf(status_code >= 500)', 'errors'),
  clientErrors: summedPartial('client_errors', 'countIf(status_code >= 400 AND status_code < 500)', 'client_errors'),
  bytes: summedPartial('bytes', 'sum(response_size)', 'bytes'),
  visitors: distinctPartial('visitors', 'ip_address', { column: 'visitors', read: 'uniqExactMergeState(visitors)', difference: null }),
  rtSum: summedPartial('rt_sum', `sum(${rt})`, 'response_time_sum'),
  rtCount: summedPartial('rt_count', 'count(response_time)', 'response_time_count'),
  // NULL over rows without a response time; the rollup column holds 0 there, and its count tells.
  rtMax: {
    name: 'rt_max',
    raw: 'max(response_time)',
    merge: merge('max'),
    alone: asIs,
    rollup: { column: 'rt_max', read: 'if(sum(response_time_count) = 0, NULL, max(rt_max))', difference: null },
    neutral: "CAST(NULL, 'Nullable(UInt32)')",
    js: maximumInJs,
  },
  // Stored as Tuple(Array(UInt16), Array(Int64)): keys ascending, each with its count of rows
  // (signed, so that a rebuild can write the per-key difference). A query's sources give it in the
  // same form, keys not necessarily distinct nor sorted (the rollup rows' arrays concatenated), and
  // groups merge them by concatenation, sorted by key once merged, which is several times cheaper
  // than sumMap per group (a map of Fields; bench/README, "Figures behind the code's choices"). Merged, it is (key,
  // cumulative count) at the last pair of each key, where the cumulative count is the whole of the
  // keys up to it (mergedHistogram).
  rtHistogram: {
    name: 'rt_hist',
    raw: rawHistogram,
    merge: (column: string) => mergedHistogram(column),
    rollup: { column: 'rt_hist', read: 'sumMap(rt_hist)', difference: (fresh: string, held: string) => `mapSubtract(${fresh}, ${held})` },
    source: {
      raw: rawHistogram,
      rollup: "(groupArrayArray(tupleElement(rt_hist, 1)), groupArrayArray(tupleElement(rt_hist, 2)))",
    },
    neutral: "CAST(([], []), 'Tuple(Array(UInt16), Array(Int64))')",
    byKey: { key: histogramKey, rows: 'response_time IS NOT NULL', collect: '(groupArray(k), groupArray(c))' },
    js: histogramInJs,
  },
} as const satisfies Record<string, PartialState>;

/**
 * The partials the rollups do not hold (`rollup` null), read from raw rows only: no kind of rollup
 * rows lists them (ROLLUP_ROWS), so a query asking for one reads raw rows (src/stats/query/parse.ts).
 */
export const RAW_PARTIALS = {
  paths: distinctPartial('paths', pathOf('url'), null),
} as const satisfies Record<string, AnyPartial>;

/** Each partial's state in JavaScript, by partial (JsMerge). */
export type PartialStates = ReadonlyMap<AnyPartial, unknown>;

/** What a query sends for a partial's column `p_<name>` to be merged in JavaScript (JsMerge.sent), named s_<name>. */
export const sentPartial = (x: AnyPartial) => `${x.js.sent(`p_${x.name}`)} AS s_${x.name}`;
/**
 * What a query sends for a partial over no rows (its `neutral` state), named s_<name>, for the rows
 * of a UNION ALL that give no partials: a scalar subquery, since `neutral` may be an aggregate
 * (uniqExactStateIf), which would make those rows' SELECT an aggregation.
 */
export const sentNeutral = (x: AnyPartial) => `(SELECT ${x.js.sent(x.neutral)}) AS s_${x.name}`;

/** The states of `partials` from a row of their sentPartial columns; null when one does not have the layout read here (JsMerge.read). */
export function statesOf(partials: readonly AnyPartial[], row: Readonly<Record<string, unknown>>): PartialStates | null {
  const states = new Map<AnyPartial, unknown>();
  for (const x of partials) {
    const state = x.js.read(row[`s_${x.name}`]);
    if (state === undefined) return null;
    states.set(x, state);
  }
  return states;
}

/** The states of two sources' rows together, partial by partial (JsMerge.merge). */
export const mergedStates = (a: PartialStates, b: PartialStates): PartialStates => new Map([...a].map(([x, state]) => [x, x.js.merge(state, b.get(x))]));

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

/** What the values of each kind of metric are (docs/reference/metrics.md). */
export const METRIC_KINDS = {
  integer: 'a count or a sum',
  fraction4: 'a share, 4 decimals',
  ms2: 'milliseconds, 2 decimals',
  ms: 'milliseconds as logged',
} as const;
export type MetricKind = keyof typeof METRIC_KINDS;

/** A partial's merged state in JavaScript, for a metric's `value`: of the type its JsMerge gives. */
export type StateOf = <S>(x: AnyPartial & { js: JsMerge<S> }) => S;

export interface Metric {
  name: string;
  partials: readonly AnyPartial[];
  /**
   * A sum of the list rows that the metric equals wherever that sum is positive: a top list by the
   * metric, descending, is then a top list by the sum, which the short lists of SHORT_LISTS may prove.
   */
  rankedBy?: PartialState;
  /** SQL over the merged partial columns (named by PartialState.name). */
  final: string;
  /** The same as `final` in JavaScript, over the partials' states merged there (JsMerge): the same operations, so the same number. */
  value: (of: StateOf) => number | null;
  kind: MetricKind;
  /** The value over no rows: what a time bucket without rows shows. */
  empty: 0 | null;
  description: string;
}

/** `Math.round(x * 10^d) / 10^d` in SQL (round() would round half to even). */
const roundHalfUp = (x: string, decimals: number) => `floor(${x} * ${10 ** decimals} + 0.5) / ${10 ** decimals}`;

/**
 * part ÷ whole rounded half up to `decimals`, as 10^d × part ÷ whole: the product of integers is
 * exact, so a quotient whose exact value ends in 5 rounds up (part ÷ whole first may land below it:
 * 201 ÷ 200 × 100 gives 100.49999999999999), in SQL and in JavaScript alike.
 */
const roundedRatio = (part: string, whole: string, decimals: number) => `floor(${part} * ${10 ** decimals} / ${whole} + 0.5) / ${10 ** decimals}`;
const roundedRatioOf = (part: number, whole: number, decimals: number) => Math.floor((part * 10 ** decimals) / whole + 0.5) / 10 ** decimals;

/** The share of the requests `part` (a partial counting some of them), 4 decimals; 0 without requests: `final` and `value`. */
const share = (part: PartialState & { js: JsMerge<number> }) => ({
  partials: [PARTIALS.requests, part],
  final: `if(requests = 0, 0, ${roundedRatio(part.name, 'requests', 4)})`,
  value: (of: StateOf) => {
    const requests = of(PARTIALS.requests);
    return requests === 0 ? 0 : roundedRatioOf(of(part), requests, 4);
  },
});

/** The representative of histogram key `k` (an SQL expression of a UInt16). */
const representative = (k: string) =>
  `if(${k} < ${EXACT_BELOW_MS}, toFloat64(${k}), ${roundHalfUp(`${EXACT_BELOW_MS} * pow(${HISTOGRAM_GROWTH}, ${k} - ${EXACT_BELOW_MS}) * 1.01`, 2)})`;

/**
 * The nearest-rank percentile `n` of the merged histogram ((key, cumulative count) per key,
 * mergedHistogram): the first key whose cumulative count reaches ceil(n / 100 × total), as its
 * representative; NULL when no row had a response time (the last cumulative count, the total, is
 * 0, as is that of an empty array's default).
 */
const percentile = (n: number) => {
  const total = 'rt_hist[-1].2';
  const key = `rt_hist[arrayFirstIndex(x -> x.2 >= intDiv(${n} * ${total} + 99, 100), rt_hist)].1`;
  return `if(${total} = 0, NULL, ${representative(key)})`;
};

/**
 * `representative` in JavaScript, for a histogram merged in memory (src/stats/kept-window.ts): the
 * same operations in the same order, so the same number for every key (a test compares all of them).
 */
export const representativeOf = (k: number) =>
  k < EXACT_BELOW_MS ? k : Math.floor(EXACT_BELOW_MS * Math.pow(HISTOGRAM_GROWTH, k - EXACT_BELOW_MS) * 1.01 * 100 + 0.5) / 100;

/**
 * `percentile(n)` in JavaScript over a histogram (key → rows), for each of `ns`: the first key whose
 * cumulative count reaches the rank; null without rows. The keys are sorted and their cumulative
 * counts summed once for all of them.
 */
export function percentilesOf(histogram: ReadonlyMap<number, number>, ns: readonly number[]): (number | null)[] {
  const keys = [...histogram.keys()].sort((a, b) => a - b);
  let total = 0;
  const cumulative = keys.map((k) => (total += histogram.get(k)!));
  return ns.map((n) => {
    if (total === 0) return null;
    const rank = Math.floor((n * total + 99) / 100);
    const at = cumulative.findIndex((c) => c >= rank);
    return at < 0 ? null : representativeOf(keys[at]!);
  });
}

const percentileMetric = (n: number): Metric => ({
  name: `p${n}ResponseTime`,
  partials: [PARTIALS.rtHistogram],
  final: percentile(n),
  value: (of) => percentilesOf(of(PARTIALS.rtHistogram), [n])[0]!,
  kind: 'ms2',
  empty: null,
  description: `The ${n}th percentile (nearest rank) of the response times, ms; exact below ${EXACT_BELOW_MS} ms, else within 1 %; null when no row has one`,
});

/**
 * Every metric: a new one is an entry here (with its partials, above, if it needs new ones) and its
 * brute force in test/support/query-rows.ts (POST /api/logs/query's tests ask for every metric;
 * test/src/stats/registry.test.ts compares its `final` with its `value`).
 */
export const METRICS = [
  { name: 'requests', partials: [PARTIALS.requests], final: 'requests', value: (of) => of(PARTIALS.requests), rankedBy: PARTIALS.requests, kind: 'integer', empty: 0, description: 'Requests' },
  { name: 'visitors', partials: [PARTIALS.visitors], final: 'visitors', value: (of) => distinctCount(of(PARTIALS.visitors)), kind: 'integer', empty: 0, description: 'Distinct client addresses (exact)' },
  { name: 'errorRate', ...share(PARTIALS.serverErrors), kind: 'fraction4', empty: 0, description: 'Requests with status ≥ 500 ÷ requests, 4 decimals; 0 without requests' },
  { name: 'clientErrorRate', ...share(PARTIALS.clientErrors), kind: 'fraction4', empty: 0, description: 'Requests with status 400-499 ÷ requests, 4 decimals; 0 without requests' },
  { name: 'bandwidth', partials: [PARTIALS.bytes], final: 'bytes', value: (of) => of(PARTIALS.bytes), rankedBy: PARTIALS.bytes, kind: 'integer', empty: 0, description: 'Sum of the response sizes, bytes' },
  {
    name: 'averageResponseTime',
    partials: [PARTIALS.rtSum, PARTIALS.rtCount],
    final: `if(rt_count = 0, NULL, ${roundedRatio('rt_sum', 'rt_count', 2)})`,
    value: (of) => (of(PARTIALS.rtCount) === 0 ? null : roundedRatioOf(of(PARTIALS.rtSum), of(PARTIALS.rtCount), 2)),
    kind: 'ms2',
    empty: null,
    description: 'Mean response time of the rows that have one, ms, 2 decimals; null when none has',
  },
  {
    name: 'totalResponseTime',
    partials: [PARTIALS.rtSum, PARTIALS.rtCount],
    final: 'if(rt_count = 0, NULL, rt_sum)',
    value: (of) => (of(PARTIALS.rtCount) === 0 ? null : of(PARTIALS.rtSum)),
    // A positive sum has a response time counted.
    rankedBy: PARTIALS.rtSum,
    kind: 'ms',
    empty: null,
    description: 'The sum of the response times, ms: where the server spent its time; null when no row has one',
  },
  percentileMetric(50),
  percentileMetric(95),
  percentileMetric(99),
  { name: 'maxResponseTime', partials: [PARTIALS.rtMax], final: 'rt_max', value: (of) => of(PARTIALS.rtMax), kind: 'ms', empty: null, description: 'The longest response time, ms; null when no row has one' },
  { name: 'uniquePaths', partials: [RAW_PARTIALS.paths], final: 'paths', value: (of) => distinctCount(of(RAW_PARTIALS.paths)), kind: 'integer', empty: 0, description: 'Distinct paths (the URL up to its first "?"), exact' },
] as const satisfies readonly Metric[];

export type MetricName = (typeof METRICS)[number]['name'];
export const METRIC_NAMES = METRICS.map((m) => m.name) as [MetricName, ...MetricName[]];
export const metricByName = new Map<string, Metric>(METRICS.map((m) => [m.name, m]));

/** Each metric's value from its partials' states merged in JavaScript (Metric.value over `states`). */
export const metricValues =
  (states: PartialStates) =>
  (m: Metric): number | null =>
    m.value(<S>(x: AnyPartial & { js: JsMerge<S> }) => {
      if (!states.has(x)) throw new Error(`the partial ${x.name} of ${m.name} was not read`);
      return states.get(x) as S;
    });

// ---------------------------------------------------------------------------------------------
// Time intervals
// ---------------------------------------------------------------------------------------------

const WEEK_MS = 7 * DAY_MS;
/** 1970-01-01 was a Thursday: weeks start on Monday, three days earlier. */
const MONDAY_OFFSET = 3 * DAY_MS;

/**
 * A time column of a source: access_logs' `timestamp` (DateTime64(3)) or access_rollups' `bucket`
 * (DateTime, the start of an hour or a day), and the same as epoch milliseconds.
 */
export interface TimeColumn {
  column: string;
  ms: string;
}
export const RAW_TIME: TimeColumn = { column: 'timestamp', ms: 'toUnixTimestamp64Milli(timestamp)' };
export const ROLLUP_TIME: TimeColumn = { column: 'bucket', ms: 'toInt64(toUnixTimestamp(bucket)) * 1000' };

/** A time bucket width: its name (meta.interval), the SQL of a row's bucket start (epoch ms) and the same in JavaScript. */
export interface Interval {
  name: string;
  sql: (time: TimeColumn) => string;
  /**
   * The finest rollup rows whose buckets each lie inside one of this interval's buckets: 'day' for
   * intervals made of whole UTC days, 'hour' for those made of whole hours, null for finer ones
   * (read from raw rows only).
   */
  rollupSpan: 'hour' | 'day' | null;
  /** The start of the bucket holding `ms`. */
  floor(ms: number): number;
  /** The start of the bucket after the one starting at `start`. */
  next(start: number): number;
  /** How many buckets run from the one holding `from` to the one holding `to`. */
  count(from: number, to: number): number;
}

const fixedInterval = (name: string, size: number, offset = 0): Interval => ({
  name,
  sql: (time) => `intDiv(${time.ms} + ${offset}, ${size}) * ${size} - ${offset}`,
  rollupSpan: size % DAY_MS === 0 && offset % DAY_MS === 0 ? 'day' : size % HOUR_MS === 0 ? 'hour' : null,
  floor: (ms) => Math.floor((ms + offset) / size) * size - offset,
  next: (start) => start + size,
  count: (from, to) => (Math.floor((to + offset) / size) - Math.floor((from + offset) / size)) + 1,
});

const monthIndex = (ms: number) => {
  const d = new Date(ms);
  return d.getUTCFullYear() * 12 + d.getUTCMonth();
};

const month: Interval = {
  name: 'month',
  // A Date counts days since 1970-01-01.
  sql: (time) => `toInt64(toUInt16(toStartOfMonth(${time.column}))) * ${DAY_MS}`,
  rollupSpan: 'day',
  floor: (ms) => {
    const d = new Date(ms);
    return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  },
  next: (start) => {
    const d = new Date(start);
    return Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  },
  count: (from, to) => monthIndex(to) - monthIndex(from) + 1,
};

/** Every interval, finest first: the automatic one is the first giving at most AUTO_MAX_POINTS buckets. */
export const INTERVALS: readonly Interval[] = [
  fixedInterval('minute', MINUTE_MS),
  fixedInterval('5minutes', 5 * MINUTE_MS),
  fixedInterval('15minutes', 15 * MINUTE_MS),
  fixedInterval('hour', HOUR_MS),
  fixedInterval('6hours', 6 * HOUR_MS),
  fixedInterval('day', DAY_MS),
  fixedInterval('week', WEEK_MS, MONDAY_OFFSET),
  month,
];
export const AUTO_MAX_POINTS = 400;

const intervalNamed = (name: string) => INTERVALS.find((i) => i.name === name)!;

// ---------------------------------------------------------------------------------------------
// Dimensions
// ---------------------------------------------------------------------------------------------

export type DimensionKind = 'string' | 'integer' | 'boolean' | 'time' | 'domain';
export const FILTER_OPS = ['is', 'isNot', 'contains', 'glob', 'cidr'] as const;
export type FilterOp = (typeof FILTER_OPS)[number];


export interface Dimension {
  name: string;
  kind: DimensionKind;
  /** SQL over access_logs columns; a time dimension's is its interval's (over rollup rows too, see rollupSpan). */
  raw: string;
  /** A fixed interval, or 'auto' for `time`; null for the other dimensions. */
  interval: Interval | 'auto' | null;
  ops: readonly FilterOp[];
  /** The ClickHouse type of `raw`, for bound parameters holding its values. */
  paramType: string;
  /** A value of an `is` / `isNot` filter. */
  value: z.ZodType<string | number | boolean>;
  /** The condition of an `is` filter when it is not `raw IN values` (a faster one over the stored columns). */
  isCondition?: (values: readonly (string | number | boolean)[], p: Params) => string;
  /**
   * Where `raw` is a function of one stored column of few values: raw rows are grouped by that
   * column first and `value` of each group's key (SQL over `key`) computed once per group, not per
   * row (the agent classes' joinGet per row was half of a 30-day browser panel).
   */
  byColumn?: {
    column: string;
    value: (key: string) => string;
    /** A SELECT of every key the column may hold, as `key`: an `is` filter becomes the set of keys whose value matches. */
    keys: string;
  };
  description: string;
}

const text = z
  .string({ message: 'must be a string' })
  .max(URL_FILTER_MAX, { message: `must be at most ${URL_FILTER_MAX} characters` });

const STRING_OPS = ['is', 'isNot', 'contains', 'glob'] as const;
const EXACT_OPS = ['is', 'isNot'] as const;

const stringDimension = (name: string, raw: string, description: string, ops: readonly FilterOp[] = STRING_OPS, value: z.ZodType<string> = text): Dimension => ({
  name,
  kind: 'string',
  raw,
  interval: null,
  ops,
  paramType: 'String',
  value,
  description,
});

const timeDimension = (name: string, interval: Interval | 'auto', description: string): Dimension => ({
  name,
  kind: 'time',
  raw: interval === 'auto' ? '' : interval.sql(RAW_TIME),
  interval,
  ops: [],
  paramType: 'Int64',
  value: z.never(),
  description,
});

/**
 * The host of an absolute URL (RFC 3986: after the scheme and any user info, before the port or
 * path). ClickHouse's domain() and domainRFC() give '' for a host without a dot (localhost).
 */
const REFERRER_HOST = String.raw`lower(extract(referrer, '^[A-Za-z][A-Za-z0-9+.\-]*://(?:[^/?#]*@)?(\[[^\]/?#]*\]|[^:/?#]*)'))`;

/**
 * One of a row's user agent class values (sql/clickhouse/010_agent_classes.sql): looked up by the
 * row's class number; '' for a row not classified yet (agent_class 0).
 */
const agentClassValue = (column: 'browser' | 'os' | 'device' | 'bot_name' | 'bot_kind', agentClass = 'agent_class') => `joinGet('agent_classes', '${column}', ${agentClass})`;
/** `value` of a row's agent class number (SQL over `agentClass`), grouped by that number first (Dimension.byColumn). */
const byAgentClass = (value: (agentClass: string) => string) => ({
  raw: value('agent_class'),
  // 0: a row not classified yet (its values are '').
  byColumn: { column: 'agent_class', value, keys: 'SELECT id AS key FROM agent_classes UNION ALL SELECT toUInt64(0) AS key' },
});
/** One of the agent class values as a string dimension. */
const agentClassDimension = (name: string, column: Parameters<typeof agentClassValue>[0], description: string, ops: readonly FilterOp[] = STRING_OPS, value: z.ZodType<string> = text): Dimension => {
  const { raw, byColumn } = byAgentClass((agentClass) => agentClassValue(column, agentClass));
  return { ...stringDimension(name, raw, description, ops, value), byColumn };
};

/** "1xx" … "5xx" of the status code `status` (SQL). */
const statusClassOf = (status: string) => `concat(toString(intDiv(${status}, 100)), 'xx')`;

export const DEVICES = ['desktop', 'mobile', 'tablet', 'bot', 'other'] as const;
const BOT_KINDS = ['ai', 'search', 'other'] as const;
const STATUS_CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const;

export const DIMENSIONS = [
  timeDimension('time', 'auto', `Time buckets of an automatic width: the first of ${INTERVALS.map((i) => i.name).join(', ')} giving at most ${AUTO_MAX_POINTS} buckets (meta.interval names it)`),
  timeDimension('time:minute', intervalNamed('minute'), 'Minutes (UTC)'),
  timeDimension('time:hour', intervalNamed('hour'), 'Hours (UTC)'),
  timeDimension('time:day', intervalNamed('day'), 'Days (UTC)'),
  timeDimension('time:week', intervalNamed('week'), 'Weeks from Monday (UTC)'),
  timeDimension('time:month', intervalNamed('month'), 'Calendar months (UTC)'),
  {
    name: 'domain',
    kind: 'domain',
    raw: 'domain_id',
    interval: null,
    ops: EXACT_OPS,
    paramType: 'UInt32',
    value: text,
    description: "The domain's name; a filter value naming a domain the caller does not see matches nothing",
  },
  stringDimension('url', 'url', 'The request URL, query string included'),
  stringDimension('path', pathOf('url'), 'The URL up to its first "?"'),
  {
    name: 'statusCode',
    kind: 'integer',
    raw: 'status_code',
    interval: null,
    ops: EXACT_OPS,
    paramType: 'UInt16',
    value: z.number({ message: 'must be a status code (0-999)' }).int({ message: 'must be a status code (0-999)' }).min(0, { message: 'must be a status code (0-999)' }).max(999, { message: 'must be a status code (0-999)' }),
    description: 'The status code',
  },
  {
    name: 'statusClass',
    kind: 'string',
    raw: statusClassOf('status_code'),
    interval: null,
    ops: EXACT_OPS,
    paramType: 'String',
    value: z.enum(STATUS_CLASSES, { message: `must be one of ${STATUS_CLASSES.join(', ')}` }),
    isCondition: (values, p) => statusCondition(values.map((v) => ({ class: Number(String(v)[0]) })), p),
    description: 'The status class: 1xx … 5xx',
  },
  stringDimension('method', 'method', 'The request method as logged'),
  stringDimension('ipAddress', 'ip_address', 'The client address as logged; the cidr filter takes addresses and CIDR ranges (IPv4, IPv6)', [...STRING_OPS, 'cidr']),
  stringDimension('userAgent', 'user_agent', "The User-Agent header; '' when none"),
  stringDimension('referrer', 'referrer', "The Referer header; '' when none"),
  stringDimension('referrerHost', REFERRER_HOST, "The host of a referrer scheme://[user@]host[:port]…, ASCII letters lower-cased (an IPv6 address in its brackets); '' when none"),
  agentClassDimension('browser', 'browser', 'The browser family the user agent names'),
  agentClassDimension('os', 'os', 'The operating system the user agent names'),
  agentClassDimension('device', 'device', `The device class: ${DEVICES.join(', ')}`, STRING_OPS, z.enum(DEVICES, { message: `must be one of ${DEVICES.join(', ')}` })),
  {
    name: 'bot',
    kind: 'boolean',
    ...byAgentClass((agentClass) => `${agentClassValue('device', agentClass)} = 'bot'`),
    interval: null,
    ops: EXACT_OPS,
    paramType: 'UInt8',
    value: z.boolean({ message: 'must be true or false' }),
    description: 'Whether the user agent is a bot (device is bot)',
  },
  agentClassDimension('botName', 'bot_name', "The bot's name (Googlebot, GPTBot, …); '' for no bot"),
  agentClassDimension('botKind', 'bot_kind', `What a bot is: ${BOT_KINDS.join(', ')} (ai: a crawler or assistant gathering data for AI models); '' for no bot`),
] as const satisfies readonly Dimension[];

export type DimensionName = (typeof DIMENSIONS)[number]['name'];
export const DIMENSION_NAMES = DIMENSIONS.map((d) => d.name) as [DimensionName, ...DimensionName[]];
export const dimensionByName = new Map<string, Dimension>(DIMENSIONS.map((d) => [d.name, d]));

// ---------------------------------------------------------------------------------------------
// Rollup rows
// ---------------------------------------------------------------------------------------------

/** A filter as the query validated it (src/stats/query/filters.ts), as far as the rollup rows look at it. */
export interface FilterShape {
  op: FilterOp;
  dimension: string;
  values: readonly unknown[];
}

/**
 * A kind of access_rollups rows (sql/clickhouse/009_rollup_partials.sql, 011_rollup_lists.sql)
 * that can serve a query in place of the raw rows of its built buckets: a query whose metrics need
 * only `partials`, whose dimensions and filters are among `columns` (time by the bucket, at the
 * rows' span) and whose filters keep it within the rows the kind counts (`covers`) reads them. The
 * rollup builder (src/rollups/builder.ts) writes each kind for every bucket it builds, the lists
 * before the totals, so a bucket built by its total row is built for every kind.
 */
export interface RollupRows {
  /** access_rollups.dim of these rows. */
  dim: 'total' | (typeof ROLLUP_LISTS)[number]['dim'];
  partials: readonly PartialState[];
  /** Dimension values over these rows, by dimension name. */
  columns: Readonly<Record<string, string>>;
  /**
   * Whether the filters keep every matching row among those the kind counts (a list of some rows
   * only), and the rows can test them (a filter whose SQL reads a stored column of its own cannot).
   */
  covers: (filters: readonly FilterShape[]) => boolean;
  /**
   * Whether each group of `dimension` under `filters` is one key of these rows, so that a short
   * list's keys are the groups (src/stats/query/short-tops.ts); without it, where the dimension's
   * column is the key itself.
   */
  keyPerGroup?: (dimension: string, filters: readonly FilterShape[]) => boolean;
}

/**
 * The lists of access_rollups: each one's `dim` and number in its Enum, and its key over access_logs
 * rows. The rollup builder (src/rollups/builder.ts) writes every row once per list, with the sums
 * of LIST_PARTIALS, leaving out the empty keys of the lists that say `skipEmpty`: referrers (`topReferrers`
 * leaves out the empty referrer, docs/reference/logs.md#statistics), error URLs (the key of a
 * row below 400) and agent classes (a row not classified yet). A list that says `bounds` must hold
 * every row of a built bucket: the builder writes a bucket's total no higher than such a list's
 * requests, so that a bucket whose lists lack rows reads as unbuilt. A new list is an entry here,
 * and a ROLLUP_ROWS entry below for the queries it serves.
 */
export const ROLLUP_LISTS = [
  { dim: 'url', number: 1, key: 'url', skipEmpty: false, bounds: false },
  { dim: 'status', number: 2, key: 'toString(status_code)', skipEmpty: false, bounds: true },
  { dim: 'agent', number: 3, key: 'user_agent', skipEmpty: false, bounds: false },
  { dim: 'referrer', number: 4, key: 'referrer', skipEmpty: true, bounds: false },
  // "<status> <url>" of the rows with a status of 400 or above (ERROR_STATUS and ERROR_TARGET below read it).
  { dim: 'error_url', number: 5, key: "if(status_code >= 400, concat(toString(status_code), ' ', url), '')", skipEmpty: true, bounds: false },
  // '' for a row without a referrer, or with none readable.
  { dim: 'referrer_host', number: 6, key: REFERRER_HOST, skipEmpty: false, bounds: false },
  // The URL without its query string: the dashboard's pages panels (a 30-day panel grouped 3.3 million
  // distinct URLs of the 10M-row bench, query strings included).
  { dim: 'path', number: 7, key: pathOf('url'), skipEmpty: false, bounds: false },
  // The client address as logged: the dashboard's addresses panel.
  { dim: 'ip', number: 8, key: 'ip_address', skipEmpty: false, bounds: false },
  // The agent class number: the browser, system, device and bot panels. A row not classified yet
  // (agent_class 0, until the backfill's mutation sets it: ingest/user-agent-backfill.ts) is left out
  // and keeps its bucket unbuilt (`bounds`), so no list row ever holds a class that changes later.
  { dim: 'agent_class', number: 9, key: "if(agent_class = 0, '', toString(agent_class))", skipEmpty: true, bounds: true },
  // "<status> <path>" of the rows with a status of 400 or above: the dashboard's not-found panel (paths
  // of the 404s), proven from its short list over 30 days as the pages panels are.
  { dim: 'error_path', number: 10, key: `if(status_code >= 400, concat(toString(status_code), ' ', ${pathOf('url')}), '')`, skipEmpty: true, bounds: false },
] as const;

/**
 * The partials every list row holds beside its requests: the sums, so that the rates, the bandwidth
 * and the response-time sum and mean of a list's keys read the rollups too. The distinct addresses
 * and the histogram stay in the total rows: a state per key of every list would cost more than the
 * raw rows it replaces.
 */
export const LIST_PARTIALS = [PARTIALS.requests, PARTIALS.serverErrors, PARTIALS.clientErrors, PARTIALS.bytes, PARTIALS.rtSum, PARTIALS.rtCount] as const satisfies readonly PartialState[];

/** A list of ROLLUP_LISTS by its access_rollups.dim. */
const rollupList = (dim: (typeof ROLLUP_LISTS)[number]['dim']) => ROLLUP_LISTS.find((l) => l.dim === dim)!;

/**
 * The short lists the rollup builder keeps for every built bucket (access_tops,
 * sql/clickhouse/015_short_lists_by_sum.sql): of a list, its first keys by the sum `by` (one of
 * LIST_PARTIALS, by its name), each with every LIST_PARTIALS sum, and the next key's `by` as the
 * threshold. GET …/stats proposes its four top lists from those by requests (src/stats/top-lists.ts);
 * POST /api/logs/query proves a top page of a list's keys by a metric ranked by `by` (Metric.rankedBy)
 * from them (src/stats/query/short-tops.ts). A new one is an entry here: a bucket is listed only with
 * every entry built, so the builder builds the short lists of every bucket again.
 */
export const SHORT_LISTS = [
  { list: rollupList('url'), by: PARTIALS.requests },
  { list: rollupList('status'), by: PARTIALS.requests },
  { list: rollupList('agent'), by: PARTIALS.requests },
  { list: rollupList('referrer'), by: PARTIALS.requests },
  // The dashboard's top pages and time spent by path.
  { list: rollupList('path'), by: PARTIALS.requests },
  { list: rollupList('path'), by: PARTIALS.rtSum },
  // The not-found panel: paths of one error status (shortListOf: the status fixed makes each path one key).
  { list: rollupList('error_path'), by: PARTIALS.requests },
  // The client addresses panel: a big site's month holds millions of distinct addresses.
  { list: rollupList('ip'), by: PARTIALS.requests },
] as const satisfies readonly { list: (typeof ROLLUP_LISTS)[number]; by: (typeof LIST_PARTIALS)[number] }[];
export type ShortList = (typeof SHORT_LISTS)[number];

const everyRow = () => true;
/** The agent class dimensions (Dimension.byColumn over agent_class), which the agent class list's rows serve from their key. */
const AGENT_CLASS_DIMENSIONS = DIMENSIONS.filter((d): d is (typeof DIMENSIONS)[number] & { byColumn: NonNullable<Dimension['byColumn']> } => 'byColumn' in d && d.byColumn?.column === 'agent_class');
const AGENT_CLASS_KEY = 'toUInt64OrZero(key)';
// The two parts of an error list row's key, "<status> <url or path>". OrZero: the engine may evaluate a condition on rows of other lists before `dim` rules them out.
const ERROR_STATUS = "toUInt16OrZero(substringIndex(key, ' ', 1))";
const ERROR_TARGET = "substring(key, position(key, ' ') + 1)";
/** Whether an `is` filter keeps only statuses of 400 and above. */
const errorStatusesOnly = (f: FilterShape) =>
  f.op === 'is' && ((f.dimension === 'statusClass' && f.values.every((v) => v === '4xx' || v === '5xx')) || (f.dimension === 'statusCode' && f.values.every((v) => Number(v) >= 400)));
/** Whether a filter fixes one status code: an error list row's key is then fixed by its URL or path. */
const oneStatus = (f: FilterShape) => f.op === 'is' && f.dimension === 'statusCode' && new Set(f.values).size === 1;

/**
 * The kinds a query may be read from, tried in this order (the smallest first). List rows hold
 * the sums only (LIST_PARTIALS). The referrer list holds no row without a referrer (the stats' top list shows
 * none), so it serves no query; the referrer host list holds them all.
 */
export const ROLLUP_ROWS: readonly RollupRows[] = [
  // One row per bucket with every partial.
  { dim: 'total', partials: Object.values(PARTIALS), columns: { domain: 'domain_id' }, covers: everyRow },
  // One row per bucket and status code, key toString(status_code).
  { dim: 'status', partials: LIST_PARTIALS, columns: { domain: 'domain_id', statusCode: 'toUInt16OrZero(key)', statusClass: statusClassOf('toUInt16OrZero(key)') }, covers: everyRow },
  // One row per bucket and user agent.
  { dim: 'agent', partials: LIST_PARTIALS, columns: { domain: 'domain_id', userAgent: 'key' }, covers: everyRow },
  // One row per bucket and referrer host (REFERRER_HOST; '' for none), key the host.
  { dim: 'referrer_host', partials: LIST_PARTIALS, columns: { domain: 'domain_id', referrerHost: 'key' }, covers: everyRow },
  // One row per bucket, status code of 400 or above and path, key "<status> <path>": before the URLs, fewer rows.
  {
    dim: 'error_path',
    partials: LIST_PARTIALS,
    columns: { domain: 'domain_id', path: ERROR_TARGET, statusCode: ERROR_STATUS, statusClass: statusClassOf(ERROR_STATUS) },
    covers: (filters) => filters.some(errorStatusesOnly),
    keyPerGroup: (dimension, filters) => dimension === 'path' && filters.some(oneStatus),
  },
  // One row per bucket, status code of 400 or above and URL, key "<status> <url>".
  {
    dim: 'error_url',
    partials: LIST_PARTIALS,
    columns: { domain: 'domain_id', url: ERROR_TARGET, path: pathOf(ERROR_TARGET), statusCode: ERROR_STATUS, statusClass: statusClassOf(ERROR_STATUS) },
    covers: (filters) => filters.some(errorStatusesOnly),
  },
  // One row per bucket and agent class (a classified one), key its number.
  {
    dim: 'agent_class',
    partials: LIST_PARTIALS,
    columns: {
      domain: 'domain_id',
      ...Object.fromEntries(AGENT_CLASS_DIMENSIONS.map((d) => [d.name, d.byColumn.value(AGENT_CLASS_KEY)])),
    },
    covers: everyRow,
  },
  // One row per bucket and client address; a cidr filter tests access_logs' ip column, which these rows lack.
  { dim: 'ip', partials: LIST_PARTIALS, columns: { domain: 'domain_id', ipAddress: 'key' }, covers: (filters) => !filters.some((f) => f.op === 'cidr') },
  // One row per bucket and path, before the URLs: fewer rows where URLs carry query strings.
  { dim: 'path', partials: LIST_PARTIALS, columns: { domain: 'domain_id', path: 'key' }, covers: everyRow },
  // One row per bucket and URL.
  { dim: 'url', partials: LIST_PARTIALS, columns: { domain: 'domain_id', url: 'key', path: pathOf('key') }, covers: everyRow },
];
