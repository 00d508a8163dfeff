/**
 * One light query per request for reads planned from the rollups' build state (plan.ts).
 *
 * Such a read needs the build state to choose, bucket by bucket, rollups or raw rows, and then the
 * figures: two round trips, and chDB runs queries one at a time per process, each paying several
 * milliseconds of planning per table it reads. So the state a request reads is kept (per ClickHouse
 * client and key), the next request with the same key plans from it, and its query reads beside
 * the figures only the rows counted per hour (access_hour_rows), not what is built (access_rollups,
 * access_tops). The answer stands when the plan made from the kept state with those counts is the
 * plan that was used; otherwise (late lines) the request plans again. A change that does not
 * change the plan, such as more rows in an hour that is read raw either way, costs nothing.
 *
 * Why the counts alone keep the answer exact: a plan reads a bucket from the rollups only where its
 * built total equals its count. The builder writes a bucket only where the two differ when it looks
 * (src/rollups/builder.ts), so while a bucket's count stays what the kept state says, its rollup rows
 * and short lists stay as that state found them. What the counts cannot tell is that more buckets
 * were built since: the kept state would go on reading them raw (exact, only slower). So a state
 * older than REFRESH_MS is read again whole, beside the figures of the request that finds it so.
 */
import { isDeepStrictEqual } from 'node:util';
import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import { BoundedCache, perClient } from './bounded-cache.js';
import { queryDomainsBuildState, queryDomainsHourRows, windowBuckets, type BuildState, type DomainsBuildState, type HourRows } from './plan.js';

interface Kept {
  state: BuildState;
  /** When the state's built parts were read (Date.now()). */
  readAt: number;
}

/** Per client: the states by key, bounded by their bucket entries. */
const kept = new WeakMap<ClickHouseClient, BoundedCache<Kept>>();
/**
 * Bucket entries kept per client at most (about 60 bytes each): a 30-day window's state holds about
 * 2,200 (its hours three times over), a 24-hour window's about 70.
 */
const KEPT_ENTRIES = 200_000;
/** How long what a state says is built is trusted: the builder runs every 5 s (builder.ts). */
export const REFRESH_MS = 10_000;

const entriesOf = (s: BuildState) => s.counted.size + s.builtHours.size + s.builtDays.size + s.topsHours.size + s.topsDays.size;
/** Plans per request at most: the last one's state was read by the query before it, as good as reading it first. */
const MAX_PLANS = 3;

export interface PlannedRead<Plan, Answer> {
  /** The whole state when none is kept for the key (the first request, or after eviction). */
  readState: () => Promise<BuildState>;
  plan: (state: BuildState) => Plan;
  /**
   * Runs the plan and reads the state again in the same query: whole with `whole`, else only its
   * `counted` (the other parts of the returned state are then ignored).
   */
  run: (plan: Plan, whole: boolean) => Promise<{ answer: Answer; state: BuildState }>;
}

export async function readWithKnownPlan<Plan, Answer>(clickhouse: ClickHouseClient, key: string, read: PlannedRead<Plan, Answer>): Promise<Answer> {
  const cache = perClient(kept, clickhouse, () => new BoundedCache<Kept>(KEPT_ENTRIES, (k) => entriesOf(k.state)));
  let known = cache.get(key);
  if (!known) {
    const readAt = Date.now();
    known = { state: await read.readState(), readAt };
  }
  for (let plans = 1; ; plans++) {
    const plan = read.plan(known.state);
    const whole: boolean = Date.now() - known.readAt > REFRESH_MS;
    const readAt = Date.now();
    const { answer, state: seen } = await read.run(plan, whole);
    known = whole ? { state: seen, readAt } : { state: { ...known.state, counted: seen.counted }, readAt: known.readAt };
    cache.set(key, known);
    if (plans === MAX_PLANS || isDeepStrictEqual(read.plan(known.state), plan)) return answer;
  }
}

/** Per client: the folded build states of several domains' windows (the query endpoint's), by domains and buckets. */
const keptDomains = new WeakMap<ClickHouseClient, BoundedCache<{ found: DomainsBuildState; readAt: number }>>();

/**
 * The build state of several domains' window (queryDomainsBuildState) for a query endpoint's
 * plan. The state read for the same domains and buckets less than REFRESH_MS ago is used again when
 * the rows counted per hour, summed over the domains, are what they were: a light query instead of
 * the state's join (tens of ms for a fleet's day or a domain's month; bench/README, "Figures behind the code's choices"). The sums are as good as each
 * domain's counts because counts only grow (a late line adds to one; nothing takes away inside the
 * retention), and while the counts stay, what is built stays (see above).
 *
 * Where the plans made from the kept state read the whole window raw (`dependsOnCounts` false: a
 * fleet of small domains, every hour with rows), the counts need no checking: such a plan reads
 * every row whatever was stored or built since, and the state is read again after REFRESH_MS as
 * always. (A plan that skips hours without rows, or reads built ones, does depend on them.)
 *
 * `hourRows` reads the counts (queryDomainsHourRows by default; a batch of queries passes the
 * counts it read once for all of them, src/stats/query/versions.ts).
 */
export async function knownDomainsBuildState(
  clickhouse: ClickHouseClient,
  domainIds: number[],
  start: number,
  end: number,
  span: 'hour' | 'day',
  dependsOnCounts: (found: DomainsBuildState) => boolean,
  hourRows: (domainIds: number[], start: number, end: number) => Promise<HourRows> = (...args) => queryDomainsHourRows(clickhouse, ...args),
): Promise<DomainsBuildState> {
  const cache = perClient(keptDomains, clickhouse, () => new BoundedCache(KEPT_ENTRIES, (k) => entriesOf(k.found.state) + k.found.rows.size));
  const b = windowBuckets(start, end);
  const key = `${span}:${b.hourFrom}:${b.dayFrom}:${b.dayTo}:${b.hourTo}:${domainIds.join(',')}`;
  const known = cache.get(key);
  if (known && Date.now() - known.readAt <= REFRESH_MS) {
    if (!dependsOnCounts(known.found)) return known.found;
    if (isDeepStrictEqual(await hourRows(domainIds, start, end), known.found.rows)) return known.found;
  }
  const readAt = Date.now();
  const found = await queryDomainsBuildState(clickhouse, domainIds, start, end, span);
  cache.set(key, { found, readAt });
  return found;
}
