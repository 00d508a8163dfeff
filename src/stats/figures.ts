/**
 * The statistics of a window as the API answers them (docs/reference/logs.md#statistics): its
 * figures, each a metric of the registry (src/stats/registry.ts) under the specification's name,
 * and the top lists with their proofs. Pure: the readers (window.ts from one query, kept-window.ts
 * from a kept built part and the window's ends) hand it the metrics' values and the lists' counts.
 */
import { compareBytes } from '../../core/byte-order.js';
import { metricByName, ROLLUP_LISTS, type AnyPartial, type Metric } from './registry.js';
import type { StatsPeriod } from './periods.js';

/** How many entries a top list holds at most. */
export const TOP_LIMIT = 10;
/** How many keys a list's candidates hold with their exact counts (the short lists propose one more, for the bound). */
export const CANDIDATES = 30;

export interface LogStats {
  /** 'custom' for a window from startDate to endDate. */
  period: StatsPeriod | 'custom';
  totalRequests: number;
  uniqueVisitors: number;
  averageResponseTime: number;
  errorRate: number;
  topUrls: { url: string; requests: number; percentage: number }[];
  topStatusCodes: { code: number; count: number; percentage: number }[];
  topUserAgents: { userAgent: string; requests: number; percentage: number }[];
  topReferrers: { referrer: string; requests: number; percentage: number }[];
  /** Beyond the specification: the bytes sent, and the response-time percentiles (the registry's; null without response times). */
  bandwidth: number;
  responseTimePercentiles: { p50: number | null; p95: number | null; p99: number | null };
}

/** The figures of a window, before they are shaped for a period. */
export type WindowStats = Omit<LogStats, 'period'>;

// The stats' top lists: entries of the registry's rollup lists (access_rollups.dim as `dim`, which the
// primary key narrows on, its Enum value as `number`, the raw key as `key`).
const listNamed = (name: 'url' | 'status' | 'agent' | 'referrer') => ROLLUP_LISTS.find((l) => l.dim === name)!;
export const URL_LIST = listNamed('url');
export const STATUS_LIST = listNamed('status');
export const AGENT_LIST = listNamed('agent');
export const REFERRER_LIST = listNamed('referrer');
export const DIMENSIONS = [URL_LIST, STATUS_LIST, AGENT_LIST, REFERRER_LIST];
export type Dimension = (typeof DIMENSIONS)[number];
/** Status codes order as numbers among equal counts. */
export const isNumeric = (d: Dimension) => d === STATUS_LIST;

/** 100 × part / whole to 2 decimals (half up), from integers, so no binary fraction tips a .5. */
const percentageOf = (part: number, whole: number) => (whole === 0 ? 0 : Math.round((10_000 * part) / whole) / 100);

/** The answer's figures, by the specification's name: the registry's metric of each. */
const FIGURES = {
  totalRequests: 'requests',
  uniqueVisitors: 'visitors',
  averageResponseTime: 'averageResponseTime',
  errorRate: 'errorRate',
  bandwidth: 'bandwidth',
} as const satisfies Partial<Record<keyof LogStats, string>>;
const PERCENTILES = { p50: 'p50ResponseTime', p95: 'p95ResponseTime', p99: 'p99ResponseTime' } as const satisfies Record<keyof LogStats['responseTimePercentiles'], string>;
const metricNamed = (name: string) => metricByName.get(name)!;

/** The metrics the answer shows. */
export const FIGURE_METRICS: readonly Metric[] = [...Object.values(FIGURES), ...Object.values(PERCENTILES)].map(metricNamed);
/** The partials those metrics need, each once: what the readers aggregate and merge. */
export const FIGURE_PARTIALS: readonly AnyPartial[] = [...new Set(FIGURE_METRICS.flatMap((m) => m.partials))];

/** A metric's value over the window, as a reader computed it (the registry's `final` in SQL, or its `value` in JavaScript). */
export type MetricValue = (m: Metric) => number | null;

export interface TopEntry {
  key: string;
  count: number;
}

/** Count descending, then key ascending (status codes as numbers); the first TOP_LIMIT. */
export function topOf(entries: TopEntry[], numeric: boolean): TopEntry[] {
  return [...entries]
    .sort((a, b) => b.count - a.count || (numeric ? Number(a.key) - Number(b.key) : 0) || compareBytes(a.key, b.key))
    .slice(0, TOP_LIMIT);
}

/** Some keys of a list with their exact counts; every other key has at most `bound` (0: there is no other key). */
export interface ListCounts {
  exact: TopEntry[];
  bound: number;
}

/**
 * The exact top list, or null when the counts cannot prove it: if the bound is below the
 * TOP_LIMIT-th exact count (strictly, so no tie can change the order), no other key can enter.
 */
export function topProven(counts: ListCounts, numeric: boolean): TopEntry[] | null {
  const top = topOf(counts.exact, numeric);
  if (counts.bound === 0) return top;
  return top.length === TOP_LIMIT && counts.bound < top[TOP_LIMIT - 1]!.count ? top : null;
}

/**
 * The counts of a list over two disjoint parts of a window (the kept built part and the raw ends):
 * a key's count is exact where each part knows it (or has no other key); any other key has at most
 * the bounds' sum, or what its known part and the other's bound allow.
 */
export function countsOverBoth(a: ListCounts, b: ListCounts): ListCounts {
  const inA = new Map(a.exact.map((e) => [e.key, e.count]));
  const inB = new Map(b.exact.map((e) => [e.key, e.count]));
  const exact: TopEntry[] = [];
  let bound = a.bound + b.bound;
  for (const key of new Set([...inA.keys(), ...inB.keys()])) {
    const countA = inA.get(key);
    const countB = inB.get(key);
    if ((countA !== undefined || a.bound === 0) && (countB !== undefined || b.bound === 0)) exact.push({ key, count: (countA ?? 0) + (countB ?? 0) });
    else bound = Math.max(bound, (countA ?? a.bound) + (countB ?? b.bound));
  }
  return { exact, bound };
}

/** One list's candidates as the short lists propose them (src/stats/window.ts's listsQuery with `short`). */
export interface Candidates {
  /**
   * Keys by proposed count, at most CANDIDATES + 1; `edge` is the exact count outside the listed
   * buckets, `listedIn` how many of the listed buckets' short lists hold the key.
   */
  proposed: { key: string; proposed: number; edge: number; listedIn: number }[];
  /** The sum of the listed buckets' thresholds: what a key has at most, in them, beyond its short-list counts. */
  threshold: number;
}

/**
 * The first CANDIDATES keys with their exact counts (`listedCounts`: in the listed buckets; plus
 * `edge`), and the bound: a key outside them has at most the next key's proposed count plus the
 * threshold sum (in each listed bucket it is in the short list with its count, or out of it with
 * at most the threshold).
 */
export function candidateCounts(candidates: Candidates, listedCounts: Map<string, number>): ListCounts {
  return {
    exact: candidates.proposed.slice(0, CANDIDATES).map((c) => ({ key: c.key, count: (listedCounts.get(c.key) ?? 0) + c.edge })),
    bound: (candidates.proposed[CANDIDATES]?.proposed ?? 0) + candidates.threshold,
  };
}

/** The exact top list from the candidates, or null when the short lists cannot prove it (candidateCounts, topProven). */
export function provenTop(candidates: Candidates, listedCounts: Map<string, number>, numeric: boolean): TopEntry[] | null {
  return topProven(candidateCounts(candidates, listedCounts), numeric);
}

/**
 * The answer from the metrics' values and the top lists (each exact, by list number). A figure the
 * registry has no value for is 0 there (averageResponseTime without response times, as the
 * specification has it); the percentiles stay null.
 */
export function windowStatsOf(valueOf: MetricValue, lists: Map<number, TopEntry[]>): WindowStats {
  const figure = (name: string) => valueOf(metricNamed(name)) ?? 0;
  const requests = figure(FIGURES.totalRequests);
  const share = (count: number) => percentageOf(count, requests);
  const list = (d: Dimension) => topOf(lists.get(d.number) ?? [], isNumeric(d));
  return {
    totalRequests: requests,
    uniqueVisitors: figure(FIGURES.uniqueVisitors),
    averageResponseTime: figure(FIGURES.averageResponseTime),
    errorRate: figure(FIGURES.errorRate),
    topUrls: list(URL_LIST).map((e) => ({ url: e.key, requests: e.count, percentage: share(e.count) })),
    topStatusCodes: list(STATUS_LIST).map((e) => ({ code: Number(e.key), count: e.count, percentage: share(e.count) })),
    topUserAgents: list(AGENT_LIST).map((e) => ({ userAgent: e.key, requests: e.count, percentage: share(e.count) })),
    topReferrers: list(REFERRER_LIST).map((e) => ({ referrer: e.key, requests: e.count, percentage: share(e.count) })),
    bandwidth: figure(FIGURES.bandwidth),
    responseTimePercentiles: {
      p50: valueOf(metricNamed(PERCENTILES.p50)),
      p95: valueOf(metricNamed(PERCENTILES.p95)),
      p99: valueOf(metricNamed(PERCENTILES.p99)),
    },
  };
}
