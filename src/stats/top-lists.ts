/**
 * The stats' four top lists (URLs, status codes, user agents, referrers) over a planned window:
 * their SQL, and the exact counts of their candidates where the built buckets' short lists
 * propose them. Shared by the one-query reader (window.ts) and the kept built part (kept-window.ts).
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import type { PlanConditions } from '../rollups/plan.js';
import { countedPerList, unionAll } from '../rollups/shared-sql.js';
import { listedCounts, type ListedBucket } from '../rollups/short-lists.js';
import { compareBytes } from '../../core/byte-order.js';
import { CANDIDATES, candidateCounts, DIMENSIONS, TOP_LIMIT, type Candidates, type Dimension, type ListCounts, type TopEntry } from './figures.js';

const DOMAIN = 'domain_id = {domainId:UInt32}';
/** The lists' names as an SQL tuple (the registry's constants, not input). */
const dimNames = (dims: readonly Dimension[]) => `(${dims.map((d) => `'${d.dim}'`).join(', ')})`;

/**
 * The top lists, all four in one GROUP BY over up to three reads (each read of a MergeTree costs
 * about 8–10 ms here whatever it reads, so a query per list and source cost more than the data):
 *
 * - with `short`, the listed buckets' short lists, summed per list and key in memory
 *   (src/rollups/short-lists.ts) and passed as array parameters: their counts as `in_short`, the buckets
 *   holding the key as `holders`, and each list's threshold sum as an entry of list 10 + list;
 * - access_rollups: the other built buckets (all of them without `short`), as `in_edge`;
 * - access_logs over the raw ranges, each row once per list (referrers without ''), as `in_edge`.
 *
 * Rows (dim, key, requests, edge, listed_in), per list and key: `requests` = in_short + in_edge,
 * `edge` = in_edge (the exact count outside the short lists), `listed_in` = the buckets whose
 * short list holds the key, the first `limit` by requests (tie-break: status codes as numbers, the
 * others by their bytes). Without `short` that is the exact top list; with it, the candidates.
 */
export const listsQuery = (c: PlanConditions, short: boolean, limit: number, dims: readonly Dimension[] = DIMENSIONS) => `
SELECT list AS dim, key, sum(in_short) + sum(in_edge) AS requests, sum(in_edge) AS edge, sum(holders) AS listed_in
FROM (
  ${unionAll([
    short &&
      c.listed &&
      `SELECT e.1 AS list, e.2 AS key, e.3 AS in_short, toUInt64(0) AS in_edge, e.4 AS holders
  FROM (SELECT arrayJoin(arrayZip({shortLists:Array(Int8)}, {shortKeys:Array(String)}, {shortCounts:Array(UInt64)}, {shortHolders:Array(UInt64)})) AS e)`,
    (short ? c.unlisted : c.built) &&
      `SELECT CAST(dim, 'Int8') AS list, key, toUInt64(0) AS in_short, requests AS in_edge, toUInt64(0) AS holders FROM access_rollups
  WHERE ${DOMAIN} AND dim IN ${dimNames(dims)} AND (${short ? c.unlisted : c.built})`,
    c.raw &&
      `SELECT list, key, toUInt64(0) AS in_short, requests AS in_edge, toUInt64(0) AS holders FROM (${countedPerList(dims, {}, `access_logs WHERE ${DOMAIN} AND (${c.raw})`)})`,
  ])}
)
GROUP BY list, key
ORDER BY requests DESC, if(list = 2, toUInt32OrZero(key), 0), key
LIMIT ${limit} BY list`;

/** A row of listsQuery. */
export interface ListRow {
  dim: number | string;
  key: string;
  requests: number | string;
  edge: number | string;
  listed_in: number | string;
}

/** The candidates of each list from listsQuery's rows with `short` (the threshold sums as lists 10 + list). */
export function candidatesOf(rows: ListRow[]): Map<number, Candidates> {
  const candidates = new Map<number, Candidates>(DIMENSIONS.map((d) => [d.number, { proposed: [], threshold: 0 }]));
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim > 10) candidates.get(dim - 10)!.threshold = Number(row.requests);
    else candidates.get(dim)?.proposed.push({ key: row.key, proposed: Number(row.requests), edge: Number(row.edge), listedIn: Number(row.listed_in) });
  }
  // ClickHouse returns the candidates in its order; the bound needs them by proposed count.
  for (const c of candidates.values()) c.proposed.sort((a, b) => b.proposed - a.proposed || compareBytes(a.key, b.key));
  return candidates;
}

/**
 * Each list's first CANDIDATES candidates with their exact counts, and its bound (candidateCounts).
 * A candidate in every covered bucket's short list has its exact count there already (its
 * short-list sum); only the others are looked up in those buckets' full rows (src/rollups/short-lists.ts),
 * and usually there are none: no query then.
 */
export async function countsOfCandidates(clickhouse: ClickHouseClient, domainId: number, covered: ListedBucket[], candidates: Map<number, Candidates>): Promise<Map<number, ListCounts>> {
  const inListed = new Map<number, Map<string, number>>(DIMENSIONS.map((d) => [d.number, new Map()]));
  const lookups = new Map<number, string[]>(DIMENSIONS.map((d) => [d.number, []]));
  for (const [dim, c] of candidates) {
    for (const k of c.proposed.slice(0, CANDIDATES)) {
      if (k.listedIn === covered.length) inListed.get(dim)!.set(k.key, k.proposed - k.edge);
      else lookups.get(dim)!.push(k.key);
    }
  }
  for (const [dim, counts] of await listedCounts(clickhouse, domainId, covered, lookups)) for (const [key, n] of counts) inListed.get(dim)!.set(key, n);
  return new Map([...candidates].map(([dim, c]) => [dim, candidateCounts(c, inListed.get(dim)!)]));
}

/** Exact lists read with a limit of CANDIDATES + 1 (listsQuery without `short`): the first CANDIDATES, and the next one's count as the bound. */
export function countsOfExactRows(rows: ListRow[]): Map<number, ListCounts> {
  const counts = new Map<number, ListCounts>(DIMENSIONS.map((d) => [d.number, { exact: [], bound: 0 }]));
  const sorted = [...rows].sort((a, b) => Number(b.requests) - Number(a.requests));
  for (const row of sorted) {
    const list = counts.get(Number(row.dim));
    if (!list) continue;
    if (list.exact.length < CANDIDATES) list.exact.push({ key: row.key, count: Number(row.requests) });
    else list.bound = Math.max(list.bound, Number(row.requests));
  }
  return counts;
}

/** The lists' counts of a plan's conditions (`covered`: the listed buckets whose short lists are summed into the parameters), by list number. */
export async function listCountsOf(clickhouse: ClickHouseClient, domainId: number, c: PlanConditions, covered: ListedBucket[], params: Record<string, unknown>): Promise<Map<number, ListCounts>> {
  const short = covered.length > 0;
  const rows = await selectRows<ListRow>(clickhouse, listsQuery(c, short, CANDIDATES + 1), params);
  return short ? countsOfCandidates(clickhouse, domainId, covered, candidatesOf(rows)) : countsOfExactRows(rows);
}

/**
 * The exact top lists of `dims` over a plan's conditions, summing the built buckets' full rows
 * (listsQuery without `short`): what a reader falls back to for the lists its candidates or kept
 * counts cannot prove (rare: a flat distribution).
 */
export async function exactLists(clickhouse: ClickHouseClient, c: PlanConditions, params: Record<string, unknown>, dims: readonly Dimension[]): Promise<Map<number, TopEntry[]>> {
  const lists = new Map<number, TopEntry[]>(dims.map((d) => [d.number, []]));
  for (const row of await selectRows<ListRow>(clickhouse, listsQuery(c, false, TOP_LIMIT, dims), params)) lists.get(Number(row.dim))?.push({ key: row.key, count: Number(row.requests) });
  return lists;
}
