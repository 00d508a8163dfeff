/**
 * One query per request for reads planned from the rollups' build state (stats.ts, hour-counts.ts).
 *
 * Such a read needs the build state to choose, bucket by bucket, rollups or raw rows, and then the
 * figures: two round trips, and chDB runs parameterised queries one at a time per process. So the
 * state a request reads is kept (per ClickHouse client and key), the next request with the same key
 * plans from it, and its query reads the state again beside the figures. The answer stands when the
 * plan made from the state just read is the plan that was used; otherwise (late lines, a bucket
 * built meanwhile) the request plans again from that state. A change that does not change the
 * plan, such as more rows in an hour that is read raw either way, costs nothing.
 */
import { isDeepStrictEqual } from 'node:util';
import type { ClickHouseClient } from '../db/clickhouse.js';
import type { BuildState } from './stats.js';

/** Per client: the states by key, least recently used first, and how many bucket entries they hold. */
const kept = new WeakMap<ClickHouseClient, { states: Map<string, BuildState>; entries: number }>();
/**
 * Bucket entries kept per client at most (about 60 bytes each): a 30-day window's state holds about
 * 2,200 (its hours three times over), a 24-hour window's about 70.
 */
const KEPT_ENTRIES = 200_000;

const entriesOf = (s: BuildState) => s.counted.size + s.builtHours.size + s.builtDays.size + s.topsHours.size + s.topsDays.size;
/** Plans per request at most: the last one's state was read by the query before it, as good as reading it first. */
const MAX_PLANS = 3;

export interface PlannedRead<Plan, Answer> {
  /** The state when none is kept for the key (the first request, or after eviction). */
  readState: () => Promise<BuildState>;
  plan: (state: BuildState) => Plan;
  /** Runs the plan and reads the state again in the same query. */
  run: (plan: Plan) => Promise<{ answer: Answer; state: BuildState }>;
}

export async function readWithKnownPlan<Plan, Answer>(clickhouse: ClickHouseClient, key: string, read: PlannedRead<Plan, Answer>): Promise<Answer> {
  let cache = kept.get(clickhouse);
  if (!cache) kept.set(clickhouse, (cache = { states: new Map(), entries: 0 }));
  let state = cache.states.get(key) ?? (await read.readState());
  for (let plans = 1; ; plans++) {
    const plan = read.plan(state);
    const { answer, state: current } = await read.run(plan);
    keep(cache, key, current);
    if (plans === MAX_PLANS || isDeepStrictEqual(read.plan(current), plan)) return answer;
    state = current;
  }
}

function keep(cache: { states: Map<string, BuildState>; entries: number }, key: string, state: BuildState): void {
  const old = cache.states.get(key);
  if (old) {
    cache.states.delete(key);
    cache.entries -= entriesOf(old);
  }
  cache.states.set(key, state);
  cache.entries += entriesOf(state);
  for (const [oldest, s] of cache.states) {
    if (cache.entries <= KEPT_ENTRIES || oldest === key) break;
    cache.states.delete(oldest);
    cache.entries -= entriesOf(s);
  }
}
