/**
 * src/rollups/known-plans.ts on its own: when a request plans from a kept state, when it plans again,
 * how often at most, and how much it keeps. The end-to-end cases (late lines, buckets built between
 * two requests) are in test/src/rollups/builder.test.ts and test/src/logs/listing.test.ts.
 */
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { ClickHouseClient } from '../../../core/db/clickhouse.js';
import { readWithKnownPlan, REFRESH_MS, type PlannedRead } from '../../../src/rollups/known-plans.js';
import { emptyBuildState, type BuildState } from '../../../src/rollups/plan.js';

/** Only a key for the kept states: these reads never query. */
const client = () => ({}) as ClickHouseClient;

/** A state whose plan is `version` (hour 0 counted `version` times), with `extra` more entries. */
function stateOf(version: number, extra = 0): BuildState {
  const state = emptyBuildState();
  state.counted.set(0, version);
  for (let i = 1; i <= extra; i++) state.builtHours.set(i, 1);
  return state;
}

/** A read whose query "finds" the states of `found` in turn (the last one from then on), with call counts. */
function reader(found: BuildState[], initial = found[0]!) {
  const calls = { readState: 0, run: [] as number[] };
  let next = 0;
  const read: PlannedRead<number, string> = {
    readState: async () => {
      calls.readState++;
      return initial;
    },
    plan: (state) => state.counted.get(0)!,
    run: async (plan) => {
      calls.run.push(plan);
      const state = found[Math.min(next++, found.length - 1)]!;
      return { answer: `answer of plan ${plan}`, state };
    },
  };
  return { read, calls };
}

afterEach(() => {
  vi.useRealTimers();
});

describe('readWithKnownPlan', () => {
  it('reads the state first only for a new key; then plans from the state the last query read', async () => {
    const ch = client();
    const first = reader([stateOf(1)]);
    expect(await readWithKnownPlan(ch, 'k', first.read)).toBe('answer of plan 1');
    expect(first.calls).toEqual({ readState: 1, run: [1] });
    const second = reader([stateOf(1)]);
    expect(await readWithKnownPlan(ch, 'k', second.read)).toBe('answer of plan 1');
    expect(second.calls).toEqual({ readState: 0, run: [1] });
    // Another key, or another client, starts from a state of its own.
    const other = reader([stateOf(1)]);
    await readWithKnownPlan(ch, 'other', other.read);
    await readWithKnownPlan(client(), 'k', other.read);
    expect(other.calls.readState).toBe(2);
  });

  it('plans again when the state read beside the answer gives another plan, and answers from that plan', async () => {
    const ch = client();
    await readWithKnownPlan(ch, 'k', reader([stateOf(1)]).read);
    const changed = reader([stateOf(2), stateOf(2)]);
    expect(await readWithKnownPlan(ch, 'k', changed.read)).toBe('answer of plan 2');
    expect(changed.calls.run).toEqual([1, 2]);
    // The next request starts from the new state.
    const next = reader([stateOf(2)]);
    await readWithKnownPlan(ch, 'k', next.read);
    expect(next.calls.run).toEqual([2]);
  });

  it('plans three times at most while the state keeps changing', async () => {
    const busy = reader([stateOf(2), stateOf(3), stateOf(4), stateOf(5)], stateOf(1));
    expect(await readWithKnownPlan(client(), 'k', busy.read)).toBe('answer of plan 3');
    expect(busy.calls.run).toEqual([1, 2, 3]);
  });

  it('between refreshes a query reads the counts only; a state older than REFRESH_MS is read whole beside the figures', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const stateWith = (counted: number, built: number) => {
      const state = emptyBuildState();
      state.counted.set(0, counted);
      state.builtHours.set(0, built);
      return state;
    };
    const runs: [string, boolean][] = [];
    // The query always finds hour 0 built 9 times; a read of the counts only must not take that from it.
    const read: PlannedRead<string, string> = {
      readState: async () => stateWith(1, 1),
      plan: (state) => `${state.counted.get(0)}/${state.builtHours.get(0)}`,
      run: async (plan, whole) => {
        runs.push([plan, whole]);
        return { answer: plan, state: stateWith(1, 9) };
      },
    };
    const ch = client();
    expect(await readWithKnownPlan(ch, 'k', read)).toBe('1/1');
    expect(await readWithKnownPlan(ch, 'k', read)).toBe('1/1');
    vi.setSystemTime(Date.now() + REFRESH_MS + 1);
    expect(await readWithKnownPlan(ch, 'k', read)).toBe('1/9');
    expect(await readWithKnownPlan(ch, 'k', read)).toBe('1/9');
    expect(runs).toEqual([
      ['1/1', false],
      ['1/1', false],
      ['1/1', true],
      ['1/9', false],
      ['1/9', false],
    ]);
  });

  it('keeps about 200,000 bucket entries per client, dropping the least recently used state first', async () => {
    const ch = client();
    for (const key of ['a', 'b', 'c']) await readWithKnownPlan(ch, key, reader([stateOf(1, 80_000)]).read);
    // a, b and c hold 240,003 entries: a went. b, used again, outlives c.
    const again = (key: string) => {
      const r = reader([stateOf(1, 80_000)]);
      return readWithKnownPlan(ch, key, r.read).then(() => r.calls.readState);
    };
    expect(await again('b')).toBe(0);
    expect(await again('a')).toBe(1); // read again; now c goes
    expect(await again('b')).toBe(0);
    expect(await again('c')).toBe(1);
  });
});
