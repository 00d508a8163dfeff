/**
 * The built part of a stats window kept in memory, so that a request reads only what changes: the
 * raw rows at the window's two ends and the rows counted per hour, in one query with one read of
 * access_logs. The one-query reader (window.ts) also reads the built buckets' totals and short
 * lists every time; in the embedded engine each read and each merge of states costs its planning,
 * and that was half of a 24-hour window's time and more of a 30-day one's (bench/README, "Issue 14:
 * the built part kept in memory").
 *
 * What is kept per domain and set of built buckets: the state of each partial the answer's metrics
 * need (src/stats/figures.ts), merged with the ends' as the registry merges it in JavaScript
 * (src/stats/registry.ts, JsMerge: sums added, histograms' counts added per key, exact distinct
 * sets as the 128-bit hashes ClickHouse's `uniqExact` state holds for strings, united), and each
 * top list's first keys with their exact counts and a bound for the others.
 *
 * Why it stays exact: the builder writes a bucket only where its built total differs from the
 * rows counted in it (src/rollups/builder.ts, known-plans.ts), and counts only grow. So the part
 * records each bucket's built total as the same read gave it, and a request uses the part only
 * while the rows counted in every one of its buckets equal that total; otherwise, or when the
 * lists cannot be proven from what is kept, the request reads the window the one-query way.
 */
import { selectRows, storeClient, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { BoundedCache, perClient } from '../rollups/bounded-cache.js';
import { DAY_MS } from '../../core/durations.js';
import { buildStateOf, buildStateQuery, planConditions, type BuildState, type BuildStateRow, type StateParts, type WindowPlan } from '../rollups/plan.js';
import { countedPerList, unionAll } from '../rollups/shared-sql.js';
import { shortListSums } from '../rollups/short-lists.js';
import { CANDIDATES, countsOverBoth, DIMENSIONS, FIGURE_PARTIALS, isNumeric, topProven, windowStatsOf, type Dimension, type ListCounts, type TopEntry, type WindowStats } from './figures.js';
import { mergedStates, metricValues, sentNeutral, sentPartial, sourcePartial, statesOf, type PartialStates } from './registry.js';
import { countsOfExactRows, exactLists, listCountsOf } from './top-lists.js';

/** A window's built buckets summed, as kept. */
interface KeptPart {
  /** Hour and day starts (ms) → the requests the bucket's total row held when the part was read. */
  hourRows: Map<number, number>;
  dayRows: Map<number, number>;
  /** The states of FIGURE_PARTIALS over the built buckets. */
  states: PartialStates;
  lists: Map<number, ListCounts>;
}

/** Clients whose partial states did not read as the registry expects (JsMerge.read): the kept path is not tried again for them. */
const refused = new WeakSet<ClickHouseClient>();

/** Per client: the kept parts by domain and buckets, bounded by their entries. */
const keptParts = new WeakMap<ClickHouseClient, BoundedCache<KeptPart>>();
/** Entries kept per client at most (addresses, list keys and buckets; some 100 bytes each, so about 50 MB): a 30-day window of the 10M-row bench holds about 4,300. */
const KEPT_ENTRIES = 500_000;
const entriesOf = (p: KeptPart) =>
  [...p.states].reduce((n, [x, state]) => n + x.js.size(state), 0) + p.hourRows.size + p.dayRows.size + [...p.lists.values()].reduce((n, l) => n + l.exact.length, 0);

const DOMAIN = 'domain_id = {domainId:UInt32}';

/** The ClickHouse state of exact distinct strings, read here as its hashes (tests read it from here). */
export { hashesOf } from './registry.js';

/**
 * The states of FIGURE_PARTIALS over one source's rows, from `from` (FROM … WHERE …), as the
 * registry sends them to be merged in JavaScript (sentPartial); `withBuckets`: also each bucket's
 * requests, as (starts in seconds, requests).
 */
const statesSql = (source: 'raw' | 'rollup', from: string, withBuckets = false) => `
SELECT ${FIGURE_PARTIALS.map(sentPartial).join(', ')}${withBuckets ? ', bucket_rows' : ''}
FROM (
  SELECT ${FIGURE_PARTIALS.map((x) => sourcePartial(x, source)).join(', ')}${withBuckets ? ', sumMap([toUInt64(toUnixTimestamp(bucket))], [toUInt64(requests)]) AS bucket_rows' : ''}
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
  const [totals] = await selectRows<Record<string, unknown> & { bucket_rows: [(number | string)[], (number | string)[]] }>(clickhouse, statesSql('rollup', rollupRows, true), params);
  const states = statesOf(FIGURE_PARTIALS, totals!);
  if (!states) {
    refused.add(storeClient(clickhouse));
    return null;
  }
  // A plan's days and hours never overlap, so a start names one bucket.
  const rowsAt = new Map(totals!.bucket_rows[0].map((start, i) => [Number(start) * 1000, Number(totals!.bucket_rows[1][i])]));
  const hourRows = new Map(plan.hours.map((h) => [h, rowsAt.get(h) ?? 0]));
  const dayRows = new Map(plan.days.map((d) => [d, rowsAt.get(d) ?? 0]));
  if (covered.some((b) => (b.span === 'day' ? dayRows : hourRows).get(b.start) !== b.version)) return null;
  return {
    hourRows,
    dayRows,
    states,
    lists: await listCountsOf(clickhouse, domainId, c, covered, params),
  };
}

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

/**
 * The ends' rows: the partials' states as dim 0, the lists' first CANDIDATES + 1 keys as their
 * numbers, the build state as STATE_ROW (span as key, bucket start as requests).
 */
const STATE_ROW = 20;
const noStates = FIGURE_PARTIALS.map(sentNeutral).join(', ');
const endsQuery = (raw: string | null, state: StateParts) =>
  unionAll([
    raw && `SELECT 0 AS dim, '' AS key, toUInt64(0) AS requests, toUInt64(0) AS counted, toUInt64(0) AS built, ${FIGURE_PARTIALS.map((x) => `s_${x.name}`).join(', ')}
FROM (${statesSql('raw', `access_logs WHERE ${DOMAIN} AND (${raw})`)})`,
    raw &&
      `SELECT list AS dim, key, requests, toUInt64(0) AS counted, toUInt64(0) AS built, ${noStates} FROM (${countedPerList(DIMENSIONS, {}, `access_logs WHERE ${DOMAIN} AND (${raw})`)})
ORDER BY requests DESC LIMIT ${CANDIDATES + 1} BY list`,
    `SELECT ${STATE_ROW} AS dim, span AS key, toUInt64(bucket) AS requests, toUInt64(counted) AS counted, toUInt64(built) AS built, ${noStates} FROM (${buildStateQuery(state)})`,
  ]);

interface EndsRow {
  dim: number | string;
  key: string;
  requests: number | string;
  counted: number | string;
  built: number | string;
  /** The partials' states (sentPartial), in the states row. */
  [state: string]: unknown;
}

/**
 * The statistics of a planned window from its kept built part (read first if none is kept for
 * these buckets) and one query over the ends, with the build state's `state` parts read in the
 * same query; a list the kept counts and the ends cannot prove is summed exactly in a second
 * query. Null when the window has no built bucket, when the part no longer holds, or when
 * ClickHouse's states do not have the layout read here (the caller reads the window the one-query
 * way; a part that no longer holds is read again by the next request).
 */
export async function keptWindowStats(
  clickhouse: ClickHouseClient,
  domainId: number,
  plan: WindowPlan,
  state: StateParts,
  params: Record<string, unknown>,
): Promise<{ answer: WindowStats; state: BuildState } | null> {
  // A window without built buckets (an hour, or nothing built yet) has nothing to keep: the
  // one-query reader reads it whole, in one query too.
  if (refused.has(storeClient(clickhouse)) || plan.days.length + plan.hours.length === 0) return null;
  const cache = perClient(keptParts, clickhouse, () => new BoundedCache<KeptPart>(KEPT_ENTRIES, entriesOf));
  const key = `${domainId}:${plan.days.join(',')}:${plan.hours.join(',')}`;
  let part = cache.get(key);
  if (!part) {
    const read = await readKeptPart(clickhouse, domainId, plan);
    if (!read) return null;
    cache.set(key, (part = read));
  }
  const c = planConditions({ ...plan, days: [], hours: [], listed: [] });
  const rows = await selectRows<EndsRow>(clickhouse, endsQuery(c.raw, state), { ...params, ...c.params, domainId });
  const stateRows: BuildStateRow[] = [];
  const listRows: { dim: number; key: string; requests: number; edge: number; listed_in: number }[] = [];
  let ends: EndsRow | undefined;
  for (const row of rows) {
    const dim = Number(row.dim);
    if (dim === 0) ends = row;
    else if (dim === STATE_ROW) stateRows.push({ span: row.key, bucket: row.requests, counted: row.counted, built: row.built });
    else listRows.push({ dim, key: row.key, requests: Number(row.requests), edge: 0, listed_in: 0 });
  }
  const found = buildStateOf(stateRows);
  const endStates = ends ? statesOf(FIGURE_PARTIALS, ends) : null;
  if (ends && !endStates) refused.add(storeClient(clickhouse));
  if (!stillHolds(part, found.counted) || (ends && !endStates)) {
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
  const answer = windowStatsOf(metricValues(endStates ? mergedStates(part.states, endStates) : part.states), lists);
  return { answer, state: found };
}
