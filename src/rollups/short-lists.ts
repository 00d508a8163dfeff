/**
 * The short lists of built buckets (access_tops, sql/clickhouse/015_short_lists_by_sum.sql; the
 * registry's SHORT_LISTS), kept in memory so that a request passes their sums to its query as
 * parameters instead of reading access_tops again (a read costs several milliseconds of planning in
 * chDB, and a window's lists change only when one of its buckets is built again).
 *
 * A bucket's lists are kept by the version they were built for (the bucket's requests then,
 * `built_requests`); a plan names each listed bucket's version (plan.ts planWindow), and lists of
 * another version are never used for it. Lists missing from memory are read in one query; a bucket
 * whose lists are not all there at the plan's version is left out of the covered buckets, so that
 * its full rows are read instead (exact either way, as in src/stats/window.ts).
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { DIMENSIONS } from '../stats/figures.js';
import { PARTIALS, SHORT_LISTS, type ShortList } from '../stats/registry.js';
import { BoundedCache, perClient } from './bounded-cache.js';
import { inBuckets } from './shared-sql.js';

/**
 * How many keys a bucket's short list keeps (the builder's; src/stats/window.ts and
 * src/stats/query/short-tops.ts prove from them): bench/README, "Issue 31: the path panels from
 * short lists", has why 100.
 */
export const TOP_KEYS = 100;

/** One bucket's short list as built for one version: its keys, each key's sums by partial name, and the threshold. */
export interface KeptList {
  keys: string[];
  sums: ReadonlyMap<string, number[]>;
  threshold: number;
}

/**
 * Bytes of lists kept per client at most, about (each key's length plus 8 per sum and 32 for its
 * slot): a 30-day window's 76 buckets hold up to 7,600 keys of each short list (SHORT_LISTS), about 1 MB.
 */
const KEPT_BYTES = 64 * 1024 * 1024;
const kept = new WeakMap<ClickHouseClient, BoundedCache<KeptList>>();
const sizeOf = (list: KeptList) => list.keys.reduce((n, k) => n + k.length + 32 + 8 * list.sums.size, 64);

/** A listed bucket: span, start (epoch ms) and the version its lists must have. */
export interface ListedBucket {
  span: 'day' | 'hour';
  start: number;
  version: number;
}

interface TopsRow {
  span: 'day' | 'hour';
  /** Named apart from the bucket column: an alias would shadow it in WHERE. */
  start: number | string;
  list: number;
  by: string;
  version: number | string;
  keys: string[];
  sums: Record<string, (number | string)[]>;
  threshold: number | string;
}

const bucketOf = (domainId: number, b: ListedBucket) => `${domainId}:${b.span}:${b.start}:${b.version}`;
const listOf = (list: number, by: string) => `${list}:${by}`;
const keyOf = (domainId: number, b: ListedBucket, s: ShortList) => `${bucketOf(domainId, b)}:${listOf(s.list.number, s.by.name)}`;

/** Reads the short lists of `buckets` (newest build of each) and keeps those of `lists` found. */
async function fetchLists(clickhouse: ClickHouseClient, domainId: number, buckets: ListedBucket[], lists: readonly ShortList[], cache: BoundedCache<KeptList>): Promise<void> {
  const starts = (span: 'day' | 'hour') => buckets.filter((b) => b.span === span).map((b) => b.start / 1000);
  const rows = await selectRows<TopsRow>(
    clickhouse,
    `SELECT span, toUnixTimestamp(bucket) AS start, toInt8(dim) AS list, by, built_requests AS version, keys, sums, threshold
     FROM access_tops FINAL
     WHERE domain_id = {domainId:UInt32} AND ((span = 'day' AND ${inBuckets('bucket', 'days')}) OR (span = 'hour' AND ${inBuckets('bucket', 'hours')}))
       AND concat(toString(toInt8(dim)), ':', by) IN {lists:Array(String)}`,
    { domainId, days: starts('day'), hours: starts('hour'), lists: lists.map((s) => listOf(s.list.number, s.by.name)) },
  );
  for (const row of rows) {
    const bucket: ListedBucket = { span: row.span, start: Number(row.start) * 1000, version: Number(row.version) };
    const sums = new Map(Object.entries(row.sums).map(([name, values]) => [name, values.map(Number)]));
    cache.set(`${bucketOf(domainId, bucket)}:${listOf(Number(row.list), row.by)}`, { keys: row.keys, sums, threshold: Number(row.threshold) });
  }
}

/**
 * The short lists `lists` of the listed buckets that have them all at the plan's version (the
 * covered buckets), each bucket's in the order of `lists`: at most one query, none when all are in
 * memory.
 */
export async function shortListsOf(clickhouse: ClickHouseClient, domainId: number, listed: ListedBucket[], lists: readonly ShortList[]): Promise<{ bucket: ListedBucket; lists: KeptList[] }[]> {
  const cache = perClient(kept, clickhouse, () => new BoundedCache<KeptList>(KEPT_BYTES, sizeOf));
  const found = () => listed.map((bucket) => ({ bucket, lists: lists.map((s) => cache.get(keyOf(domainId, bucket, s))) }));
  let buckets = found();
  const missing = buckets.filter((b) => b.lists.some((l) => !l)).map((b) => b.bucket);
  if (missing.length > 0) {
    await fetchLists(clickhouse, domainId, missing, lists, cache);
    buckets = found();
  }
  return buckets.filter((b): b is { bucket: ListedBucket; lists: KeptList[] } => b.lists.every(Boolean));
}

/** The stats' four lists (src/stats/figures.ts), by requests. */
const STATS_LISTS = DIMENSIONS.map((d) => SHORT_LISTS.find((s) => s.list === d && s.by === PARTIALS.requests)!);

/** The summed short lists of some buckets, as array parameters of the stats query (src/stats/window.ts listsQuery). */
export interface ShortListParams {
  /** List (1–4) of each entry; 10 + list for the list's threshold sum (key ''). */
  shortLists: number[];
  shortKeys: string[];
  /** The key's counts summed over the buckets whose lists hold it. */
  shortCounts: number[];
  /** How many of the buckets' lists hold the key (0 for a threshold). */
  shortHolders: number[];
}

/**
 * The stats' summed short lists of the listed buckets, and which of them they cover (those whose
 * lists were found at the plan's version): at most one query, none when all are in memory.
 */
export async function shortListSums(clickhouse: ClickHouseClient, domainId: number, listed: ListedBucket[]): Promise<{ covered: ListedBucket[]; params: ShortListParams }> {
  const buckets = await shortListsOf(clickhouse, domainId, listed, STATS_LISTS);
  const sums = new Map<string, { list: number; key: string; count: number; holders: number }>();
  const add = (list: number, key: string, count: number, holders: number) => {
    const id = `${list}\u0000${key}`;
    const sum = sums.get(id) ?? { list, key, count: 0, holders: 0 };
    sum.count += count;
    sum.holders += holders;
    sums.set(id, sum);
  };
  for (const { lists } of buckets) {
    lists.forEach(({ keys, sums: partials, threshold }, i) => {
      const list = STATS_LISTS[i]!.list.number;
      const counts = partials.get(PARTIALS.requests.name)!;
      keys.forEach((key, k) => add(list, key, counts[k]!, 1));
      add(10 + list, '', threshold, 0);
    });
  }
  const entries = [...sums.values()];
  return {
    covered: buckets.map((b) => b.bucket),
    params: {
      shortLists: entries.map((e) => e.list),
      shortKeys: entries.map((e) => e.key),
      shortCounts: entries.map((e) => e.count),
      shortHolders: entries.map((e) => e.holders),
    },
  };
}

/** Per client: a key's requests in one listed bucket's full rows, by domain, bucket, version, list and key. */
const keptCounts = new WeakMap<ClickHouseClient, BoundedCache<number>>();
/** Counts kept per client at most (about 150 bytes each): a 30-day window's lookups are some 6,000. */
const KEPT_COUNTS = 200_000;

/**
 * The requests of some keys (by list) in the full rows of the listed buckets, summed over them:
 * the exact counts the short lists leave open (src/stats/window.ts). A bucket's rows at a version
 * do not change (a rebuild gives it another version), so each bucket's count of a key is kept and
 * read once; at most one query, for the buckets with a key not in memory.
 */
export async function listedCounts(clickhouse: ClickHouseClient, domainId: number, listed: ListedBucket[], keys: Map<number, string[]>): Promise<Map<number, Map<string, number>>> {
  const cache = perClient(keptCounts, clickhouse, () => new BoundedCache<number>(KEPT_COUNTS, () => 1));
  const wanted = [...keys].flatMap(([list, names]) => names.map((key) => ({ list, key })));
  const idOf = (b: ListedBucket, list: number, key: string) => `${bucketOf(domainId, b)}:${list}:${key}`;
  // Taken from memory first: what this request stores below could push out what it found there.
  const counts = new Map<string, number>();
  const missing: ListedBucket[] = [];
  for (const b of listed) {
    const found = wanted.map((w) => cache.get(idOf(b, w.list, w.key)));
    if (found.some((n) => n === undefined)) missing.push(b);
    else wanted.forEach((w, i) => counts.set(idOf(b, w.list, w.key), found[i]!));
  }
  if (missing.length > 0) {
    const starts = (span: 'day' | 'hour') => missing.filter((b) => b.span === span).map((b) => b.start / 1000);
    const rows = await selectRows<{ span: 'day' | 'hour'; start: number | string; list: number; key: string; requests: number | string }>(
      clickhouse,
      `SELECT span, toUnixTimestamp(bucket) AS start, CAST(dim, 'Int8') AS list, key, sum(requests) AS requests
       FROM access_rollups
       WHERE domain_id = {domainId:UInt32} AND ((span = 'day' AND ${inBuckets('bucket', 'days')}) OR (span = 'hour' AND ${inBuckets('bucket', 'hours')}))
         AND ((dim = 'url' AND key IN {k1:Array(String)}) OR (dim = 'status' AND key IN {k2:Array(String)})
           OR (dim = 'agent' AND key IN {k3:Array(String)}) OR (dim = 'referrer' AND key IN {k4:Array(String)}))
       GROUP BY span, bucket, list, key`,
      { domainId, days: starts('day'), hours: starts('hour'), k1: keys.get(1) ?? [], k2: keys.get(2) ?? [], k3: keys.get(3) ?? [], k4: keys.get(4) ?? [] },
    );
    const read = new Map(rows.map((r) => [`${r.span}:${Number(r.start) * 1000}:${Number(r.list)}:${r.key}`, Number(r.requests)]));
    // Every key asked of every bucket read, 0 where the bucket has no row for it.
    for (const b of missing) {
      for (const w of wanted) {
        const n = read.get(`${b.span}:${b.start}:${w.list}:${w.key}`) ?? 0;
        counts.set(idOf(b, w.list, w.key), n);
        cache.set(idOf(b, w.list, w.key), n);
      }
    }
  }
  const sums = new Map<number, Map<string, number>>([...keys.keys()].map((list) => [list, new Map()]));
  for (const w of wanted) sums.get(w.list)!.set(w.key, listed.reduce((n, b) => n + counts.get(idOf(b, w.list, w.key))!, 0));
  return sums;
}
