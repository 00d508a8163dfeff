/**
 * The short top lists of built buckets (access_tops, sql/clickhouse/006_stats_hour_tops.sql),
 * kept in memory so that a stats request passes their sums to its query as parameters instead of
 * reading access_tops again (a read costs several milliseconds of planning in chDB, and a window's
 * lists change only when one of its buckets is built again).
 *
 * A bucket's lists are kept by the version they were built for (the bucket's requests then,
 * `built_requests`); a plan names each listed bucket's version (plan.ts planWindow), and lists of
 * another version are never used for it. Lists missing from memory are read in one query; a bucket
 * whose four lists are not there at the plan's version is left out of the listed buckets, so that
 * its full rows are read instead (exact either way, as in src/stats/window.ts).
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { BoundedCache, perClient } from './bounded-cache.js';
import { inBuckets } from './shared-sql.js';

/** The four lists of one bucket as built for one version: list (1–4) → keys, counts and the threshold. */
type BucketLists = Map<number, { keys: string[]; counts: number[]; threshold: number }>;

const LISTS = 4;
/**
 * Bytes of keys kept per client at most, about (each key's length plus 32 for its count and
 * slot): a 30-day window's 52 buckets hold about 21,000 keys, some 2.5 MB with URLs of 80 bytes.
 */
const KEPT_BYTES = 32 * 1024 * 1024;
const kept = new WeakMap<ClickHouseClient, BoundedCache<BucketLists>>();
const sizeOf = (lists: BucketLists) => [...lists.values()].reduce((n, l) => n + l.keys.reduce((b, k) => b + k.length + 32, 32), 0);

/** A listed bucket: span, start (epoch ms) and the version its lists must have. */
export interface ListedBucket {
  span: 'day' | 'hour';
  start: number;
  version: number;
}

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

interface TopsRow {
  span: 'day' | 'hour';
  /** Named apart from the bucket column: an alias would shadow it in WHERE. */
  start: number | string;
  list: number;
  version: number | string;
  keys: string[];
  counts: (number | string)[];
  threshold: number | string;
}

const keyOf = (domainId: number, b: ListedBucket) => `${domainId}:${b.span}:${b.start}:${b.version}`;

/** Reads the lists of `buckets` (newest build of each) and keeps those whose four lists have the wanted version. */
async function fetchLists(clickhouse: ClickHouseClient, domainId: number, buckets: ListedBucket[], cache: BoundedCache<BucketLists>): Promise<void> {
  const starts = (span: 'day' | 'hour') => buckets.filter((b) => b.span === span).map((b) => b.start / 1000);
  const rows = await selectRows<TopsRow>(
    clickhouse,
    `SELECT span, toUnixTimestamp(bucket) AS start, toInt8(dim) AS list, built_requests AS version, keys, counts, threshold
     FROM access_tops FINAL
     WHERE domain_id = {domainId:UInt32} AND ((span = 'day' AND ${inBuckets('bucket', 'days')}) OR (span = 'hour' AND ${inBuckets('bucket', 'hours')}))`,
    { domainId, days: starts('day'), hours: starts('hour') },
  );
  const found = new Map<string, BucketLists>();
  for (const row of rows) {
    const bucket: ListedBucket = { span: row.span, start: Number(row.start) * 1000, version: Number(row.version) };
    const key = keyOf(domainId, bucket);
    const lists = found.get(key) ?? new Map();
    lists.set(Number(row.list), { keys: row.keys, counts: row.counts.map(Number), threshold: Number(row.threshold) });
    found.set(key, lists);
  }
  for (const [key, lists] of found) if (lists.size === LISTS) cache.set(key, lists);
}

/**
 * The summed short lists of the listed buckets, and which of them they cover (those whose lists
 * were found at the plan's version): at most one query, none when all are in memory.
 */
export async function shortListSums(clickhouse: ClickHouseClient, domainId: number, listed: ListedBucket[]): Promise<{ covered: ListedBucket[]; params: ShortListParams }> {
  const cache = perClient(kept, clickhouse, () => new BoundedCache<BucketLists>(KEPT_BYTES, sizeOf));
  const missing = listed.filter((b) => !cache.get(keyOf(domainId, b)));
  if (missing.length > 0) await fetchLists(clickhouse, domainId, missing, cache);
  const covered: ListedBucket[] = [];
  const sums = new Map<string, { list: number; key: string; count: number; holders: number }>();
  const add = (list: number, key: string, count: number, holders: number) => {
    const id = `${list}\u0000${key}`;
    const sum = sums.get(id) ?? { list, key, count: 0, holders: 0 };
    sum.count += count;
    sum.holders += holders;
    sums.set(id, sum);
  };
  for (const bucket of listed) {
    const lists = cache.get(keyOf(domainId, bucket));
    if (!lists) continue;
    covered.push(bucket);
    for (const [list, { keys, counts, threshold }] of lists) {
      keys.forEach((key, i) => add(list, key, counts[i]!, 1));
      add(10 + list, '', threshold, 0);
    }
  }
  const entries = [...sums.values()];
  return {
    covered,
    params: {
      shortLists: entries.map((e) => e.list),
      shortKeys: entries.map((e) => e.key),
      shortCounts: entries.map((e) => e.count),
      shortHolders: entries.map((e) => e.holders),
    },
  };
}
