/**
 * The built part of a stats window kept in memory, so that a request reads only what changes: the
 * raw rows at the window's two ends and the rows counted per hour, in one query with one read of
 * access_logs. The one-query reader (window.ts) also reads the built buckets' totals and short
 * lists every time; in the embedded engine each read and each merge of states costs its planning,
 * and that was half of a 24-hour window's time and more of a 30-day one's (bench/README, "Issue 14:
 * the built part kept in memory").
 *
 * What is kept per domain and set of built buckets: the totals, the histogram of response times,
 * the exact distinct client addresses (as the 128-bit hashes ClickHouse's `uniqExact` state holds
 * for strings, read from the rollups' merged state and compared with the same hashes of the ends'
 * rows), and each top list's first keys with their exact counts and a bound for the others.
 *
 * Why it stays exact: the builder writes a bucket only where its built total differs from the
 * rows counted in it (src/rollups/builder.ts, known-plans.ts), and counts only grow. So the part
 * records each bucket's built total as the same read gave it, and a request uses the part only
 * while the rows counted in every one of its buckets equal that total; otherwise, or when the
 * lists cannot be proven from what is kept, the request reads the window the one-query way.
 */
import { selectRows, storeClient, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { BoundedCache, perClient } from '../rollups/bounded-cache.js';
import { buildStateOf, buildStateQuery, DAY_MS, planConditions, type BuildState, type BuildStateRow, type StateParts, type WindowPlan } from '../rollups/plan.js';
import { countedPerList, unionAll } from '../rollups/shared-sql.js';
import { shortListSums } from '../rollups/short-lists.js';
import { CANDIDATES, countsOverBoth, DIMENSIONS, isNumeric, topProven, windowStatsOf, type Dimension, type ListCounts, type TopEntry, type WindowStats } from './figures.js';
import { PARTIALS, percentilesOf, rawPartial, sourcePartial } from './registry.js';
import { countsOfExactRows, exactLists, listCountsOf } from './top-lists.js';

/** A window's built buckets summed, as kept. */
interface KeptPart {
  /** Hour and day starts (ms) → the requests the bucket's total row held when the part was read. */
  hourRows: Map<number, number>;
  dayRows: Map<number, number>;
  requests: number;
  serverErrors: number;
  rtSum: number;
  rtCount: number;
  bytes: number;
  /** The distinct client addresses' hashes (hex). */
  visitors: Set<string>;
  /** Response-time histogram key → rows. */
  histogram: Map<number, number>;
  lists: Map<number, ListCounts>;
}

/** Clients whose `uniqExact` state did not read as hashesOf expects: the kept path is not tried again for them. */
const refused = new WeakSet<ClickHouseClient>();

/** Per client: the kept parts by domain and buckets, bounded by their entries. */
const keptParts = new WeakMap<ClickHouseClient, BoundedCache<KeptPart>>();
/** Entries kept per client at most (addresses, list keys and buckets; some 100 bytes each, so about 50 MB): a 30-day window of the 10M-row bench holds about 4,300. */
const KEPT_ENTRIES = 500_000;
const entriesOf = (p: KeptPart) => p.visitors.size + p.hourRows.size + p.dayRows.size + [...p.lists.values()].reduce((n, l) => n + l.exact.length, 0);

const DOMAIN = 'domain_id = {domainId:UInt32}';
/** The totals a stats answer needs, as the registry defines them. */
const TOTALS = [PARTIALS.requests, PARTIALS.serverErrors, PARTIALS.rtSum, PARTIALS.rtCount, PARTIALS.bytes, PARTIALS.visitors, PARTIALS.rtHistogram];
/** A state of exact distinct strings as hex text: its serialised form (a varint count, then each string's 16-byte hash). */
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

/** A histogram's (keys, counts) as one source gives it, added into `into`. */
function addHistogram(into: Map<number, number>, [keys, counts]: [number[], (number | string)[]]): void {
  keys.forEach((k, i) => into.set(Number(k), (into.get(Number(k)) ?? 0) + Number(counts[i])));
}

interface TotalsRow {
  requests: string | number;
  server_errors: string | number;
  rt_sum: string | number;
  rt_count: string | number;
  bytes: string | number;
  visitors: string;
  rt_hist: [number[], (number | string)[]];
}

/**
 * The totals' columns of one source's rows as TotalsRow, from `from` (FROM … WHERE …); the
 * addresses as their state's hex (`hashes`), or as their count when nothing is kept to add them
 * to (a window read raw whole would otherwise send every address's hash); `withBuckets`: also each
 * bucket's requests, as (starts in seconds, requests).
 */
const totalsOf = (source: 'raw' | 'rollup', from: string, addresses: 'hashes' | 'count', withBuckets = false) => `
SELECT ${TOTALS.map((x) => (x !== PARTIALS.visitors ? `p_${x.name} AS ${x.name}` : addresses === 'hashes' ? `${stateHex(`p_${x.name}`)} AS ${x.name}` : `toString(finalizeAggregation(p_${x.name})) AS ${x.name}`)).join(', ')}${withBuckets ? ', bucket_rows' : ''}
FROM (
  SELECT ${TOTALS.map((x) => (source === 'raw' ? rawPartial(x) : sourcePartial(x, 'rollup'))).join(', ')}${withBuckets ? ', sumMap([toUInt64(toUnixTimestamp(bucket))], [toUInt64(requests)]) AS bucket_rows' : ''}
  FROM ${from}
)`;

/**
 * Reads the built part of `plan` (its days and hours) for `domainId`: the totals with each
 * bucket's built total from one read of access_rollups, then the lists (after the totals: a
 * bucket built again in between leaves lists newer than the totals say, which a later count
 * shows). Null when the totals do not match the versions the plan's short lists were chosen at.
 */
async function readKeptPart(clickhouse: ClickHouseClient, domainId: number, planned: WindowPlan): Promise<KeptPart | null> {
  const sums = planned.listed.length > 0 ? await shortListSums(clickhouse, domainId, planned.listed) : null;
  const covered = sums?.covered ?? [];
  const plan: WindowPlan = { ...planned, raw: [], listed: covered };
  const c = planConditions(plan);
  if (!c.built) return null;
  const params = { domainId, ...c.params, ...sums?.params };
  const rollupRows = `access_rollups WHERE ${DOMAIN} AND dim = 'total' AND (${c.built})`;
  const [totals] = await selectRows<TotalsRow & { bucket_rows: [(number | string)[], (number | string)[]] }>(clickhouse, totalsOf('rollup', rollupRows, 'hashes', true), params);
  const visitors = hashesOf(totals!.visitors);
  if (!visitors) {
    refused.add(storeClient(clickhouse));
    return null;
  }
  // A plan's days and hours never overlap, so a start names one bucket.
  const rowsAt = new Map(totals!.bucket_rows[0].map((start, i) => [Number(start) * 1000, Number(totals!.bucket_rows[1][i])]));
  const hourRows = new Map(plan.hours.map((h) => [h, rowsAt.get(h) ?? 0]));
  const dayRows = new Map(plan.days.map((d) => [d, rowsAt.get(d) ?? 0]));
  if (covered.some((b) => (b.span === 'day' ? dayRows : hourRows).get(b.start) !== b.version)) return null;
  const histogram = new Map<number, number>();
  addHistogram(histogram, totals!.rt_hist);
  return {
    hourRows,
    dayRows,
    requests: Number(totals!.requests),
    serverErrors: Number(totals!.server_errors),
    rtSum: Number(totals!.rt_sum),
    rtCount: Number(totals!.rt_count),
    bytes: Number(totals!.bytes),
    visitors: new Set(visitors),
    histogram,
    lists: await listCountsOf(clickhouse, domainId, c, covered, params),
  };
}

/** The built part of a window with no built bucket. */
const emptyPart = (): KeptPart => ({
  hourRows: new Map(),
  dayRows: new Map(),
  requests: 0,
  serverErrors: 0,
  rtSum: 0,
  rtCount: 0,
  bytes: 0,
  visitors: new Set(),
  histogram: new Map(),
  lists: new Map(DIMENSIONS.map((d) => [d.number, { exact: [], bound: 0 }])),
});

/** Whether the rows counted now (hour → rows) in every bucket of the part are what it was built from. */
function stillHolds(part: KeptPart, counted: Map<number, number>): boolean {
  const hours = new Map<number, number>();
  const days = new Map<number, number>();
  for (const [hour, rows] of counted) {
    const day = Math.floor(hour / DAY_MS) * DAY_MS;
    if (part.hourRows.has(hour)) hours.set(hour, rows);
    else if (part.dayRows.has(day)) days.set(day, (days.get(day) ?? 0) + rows);
  }
  const same = (kept: Map<number, number>, now: Map<number, number>) => [...kept].every(([start, rows]) => (now.get(start) ?? 0) === rows);
  return same(part.hourRows, hours) && same(part.dayRows, days);
}

/** The ends' rows: the totals as dim 0, the lists' first CANDIDATES + 1 keys as their numbers, the build state as STATE_ROW. */
const STATE_ROW = 20;
const noTotals = `0 AS server_errors, 0 AS rt_sum, 0 AS rt_count, 0 AS bytes, '' AS visitors, ${PARTIALS.rtHistogram.neutral} AS rt_hist`;
const endsQuery = (raw: string | null, state: StateParts, addresses: 'hashes' | 'count') =>
  unionAll([
    raw && `SELECT 0 AS dim, '' AS key, requests, server_errors, rt_sum, rt_count, bytes, visitors, rt_hist FROM (${totalsOf('raw', `access_logs WHERE ${DOMAIN} AND (${raw})`, addresses)})`,
    raw &&
      `SELECT list AS dim, key, requests, ${noTotals} FROM (${countedPerList(DIMENSIONS, {}, `access_logs WHERE ${DOMAIN} AND (${raw})`)})
ORDER BY requests DESC LIMIT ${CANDIDATES + 1} BY list`,
    // A state row: span as key, bucket start as requests, rows counted as rt_sum, built total as server_errors.
    `SELECT ${STATE_ROW}, span, toUInt64(bucket), toUInt64(built), toUInt64(counted), 0, 0, '', ${PARTIALS.rtHistogram.neutral} FROM (${buildStateQuery(state)})`,
  ]);

type EndsRow = TotalsRow & { dim: number | string; key: string };

/**
 * The statistics of a planned window from its kept built part (read first if none is kept for
 * these buckets; none without built buckets) and one query over the ends, with the build state's `state` parts read in the
 * same query; a list the kept counts and the ends cannot prove is summed exactly in a second
 * query. Null when the part no longer holds, or ClickHouse's state does not have the layout read
 * here (the caller reads the window the one-query way; a part that no longer holds is read again
 * by the next request).
 */
export async function keptWindowStats(
  clickhouse: ClickHouseClient,
  domainId: number,
  plan: WindowPlan,
  state: StateParts,
  params: Record<string, unknown>,
): Promise<{ answer: WindowStats; state: BuildState } | null> {
  if (refused.has(storeClient(clickhouse))) return null;
  const cache = perClient(keptParts, clickhouse, () => new BoundedCache<KeptPart>(KEPT_ENTRIES, entriesOf));
  const key = `${domainId}:${plan.days.join(',')}:${plan.hours.join(',')}`;
  // A window without built buckets (an hour, or nothing built yet) is its ends alone.
  const endsAlone = plan.days.length + plan.hours.length === 0;
  let part = endsAlone ? emptyPart() : cache.get(key);
  if (!part) {
    const read = await readKeptPart(clickhouse, domainId, plan);
    if (!read) return null;
    cache.set(key, (part = read));
  }
  const c = planConditions({ ...plan, days: [], hours: [], listed: [] });
  const rows = await selectRows<EndsRow>(clickhouse, endsQuery(c.raw, state, endsAlone ? 'count' : 'hashes'), { ...params, ...c.params, domainId });
  const stateRows: BuildStateRow[] = [];
  const listRows: { dim: number; key: string; requests: number; edge: number; listed_in: number }[] = [];
  let ends: EndsRow | undefined;
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim === 0) ends = row;
    else if (dim === STATE_ROW) stateRows.push({ span: row.key, bucket: row.requests, counted: row.rt_sum, built: row.server_errors });
    else listRows.push({ dim, key: row.key, requests: Number(row.requests), edge: 0, listed_in: 0 });
  }
  const found = buildStateOf(stateRows);
  const endVisitors = !ends || endsAlone ? [] : hashesOf(ends.visitors);
  if (!endVisitors) refused.add(storeClient(clickhouse));
  if (!stillHolds(part, found.counted) || !endVisitors) {
    cache.delete(key);
    return null;
  }
  const endLists = countsOfExactRows(listRows);
  const lists = new Map<number, TopEntry[]>();
  const unproven: Dimension[] = [];
  for (const d of DIMENSIONS) {
    const top = topProven(countsOverBoth(part.lists.get(d.number)!, endLists.get(d.number)!), isNumeric(d));
    if (top) lists.set(d.number, top);
    else unproven.push(d);
  }
  if (unproven.length > 0) {
    const whole = planConditions(plan);
    for (const [dim, top] of await exactLists(clickhouse, whole, { domainId, ...whole.params }, unproven)) lists.set(dim, top);
  }
  const histogram = new Map(part.histogram);
  if (ends) addHistogram(histogram, ends.rt_hist);
  const [p50, p95, p99] = percentilesOf(histogram, [50, 95, 99]);
  const answer = windowStatsOf(
    {
      requests: part.requests + Number(ends?.requests ?? 0),
      visitors: endsAlone ? Number(ends?.visitors ?? 0) : part.visitors.size + endVisitors.filter((h) => !part.visitors.has(h)).length,
      serverErrors: part.serverErrors + Number(ends?.server_errors ?? 0),
      rtSum: part.rtSum + Number(ends?.rt_sum ?? 0),
      rtCount: part.rtCount + Number(ends?.rt_count ?? 0),
      bytes: part.bytes + Number(ends?.bytes ?? 0),
      percentiles: { p50: p50 ?? null, p95: p95 ?? null, p99: p99 ?? null },
    },
    lists,
  );
  return { answer, state: found };
}
