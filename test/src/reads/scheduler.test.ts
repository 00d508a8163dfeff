/**
 * The fair queue of request reads (src/reads/scheduler.ts), driven by hand: reads are promises a
 * test settles, so the order is what the queue decides, never what a clock does.
 */
import { describe, expect, it } from 'vitest';
import { ApiError } from '../../../src/http/errors.js';
import { PASSED_OVER_MAX, ReadScheduler, type ReadClass } from '../../../src/reads/scheduler.js';

/** A read that runs until the test ends it, and the order reads started in. */
function harness(limits: { inFlight: number; perUser: number; queuedPerUser?: number }) {
  const scheduler = new ReadScheduler({ queuedPerUser: 64, ...limits });
  const started: string[] = [];
  const ends = new Map<string, () => void>();
  const read = (userId: number, name: string, cls?: ReadClass) =>
    scheduler.run(
      userId,
      () => {
        started.push(name);
        return new Promise<void>((resolve) => ends.set(name, resolve));
      },
      cls,
    );
  /** Lets the queue hand out places (its promises settle in microtasks). */
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  const finish = async (name: string) => {
    ends.get(name)!();
    await settle();
  };
  /** Ends the reads in the order they started until none runs. */
  const drain = async () => {
    for (let i = 0; i < started.length; i++) await finish(started[i]!);
  };
  return { scheduler, started, read, finish, settle, drain };
}

describe('the fair queue of reads', () => {
  it("one place: a user's read waits for one read of a user already queued with six, not for all six", async () => {
    const h = harness({ inFlight: 1, perUser: 2 });
    const a = [1, 2, 3, 4, 5, 6].map((i) => h.read(1, `a${i}`));
    await h.settle();
    const b = h.read(2, 'b');
    await h.settle();
    expect(h.scheduler.counts).toEqual({ running: 1, waiting: 6 });
    await h.finish('a1');
    // b before a's five others.
    expect(h.started).toEqual(['a1', 'b']);
    await h.finish('b');
    for (const name of ['a2', 'a3', 'a4', 'a5', 'a6']) await h.finish(name);
    await Promise.all([...a, b]);
    expect(h.started).toEqual(['a1', 'b', 'a2', 'a3', 'a4', 'a5', 'a6']);
    expect(h.scheduler.counts).toEqual({ running: 0, waiting: 0 });
  });

  it('several users waiting are served in turn, least recently served first', async () => {
    const h = harness({ inFlight: 1, perUser: 2 });
    const all = [h.read(1, 'a1'), h.read(1, 'a2'), h.read(1, 'a3'), h.read(2, 'b1'), h.read(2, 'b2'), h.read(3, 'c1')];
    await h.settle();
    for (const name of ['a1', 'b1', 'c1', 'a2', 'b2', 'a3']) await h.finish(name);
    await Promise.all(all);
    expect(h.started).toEqual(['a1', 'b1', 'c1', 'a2', 'b2', 'a3']);
  });

  it('a user runs at most perUser reads at once, however many places are free', async () => {
    const h = harness({ inFlight: 8, perUser: 2 });
    const a = [1, 2, 3, 4].map((i) => h.read(1, `a${i}`));
    const b = h.read(2, 'b1');
    await h.settle();
    expect(h.started).toEqual(['a1', 'a2', 'b1']);
    expect(h.scheduler.counts).toEqual({ running: 3, waiting: 2 });
    await h.finish('a2');
    expect(h.started).toEqual(['a1', 'a2', 'b1', 'a3']);
    for (const name of ['a1', 'b1', 'a3', 'a4']) await h.finish(name);
    await Promise.all([...a, b]);
  });

  it('a read that fails gives its place back', async () => {
    const h = harness({ inFlight: 1, perUser: 1 });
    await expect(h.scheduler.run(1, () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    const next = h.read(1, 'after');
    await h.settle();
    expect(h.started).toEqual(['after']);
    await h.finish('after');
    await next;
  });

  it('past queuedPerUser reads waiting, a read of that user is refused with 429, and others still queue', async () => {
    const h = harness({ inFlight: 1, perUser: 1, queuedPerUser: 2 });
    const queued = [h.read(1, 'a1'), h.read(1, 'a2'), h.read(1, 'a3')];
    await h.settle();
    const refused = await h.scheduler.acquire(1).then(
      () => null,
      (err: unknown) => err,
    );
    expect(refused).toBeInstanceOf(ApiError);
    expect((refused as ApiError).status).toBe(429);
    expect((refused as ApiError).headers?.['Retry-After']).toBeDefined();
    const other = h.read(2, 'b1');
    for (const name of ['a1', 'b1', 'a2', 'a3']) await h.finish(name);
    await Promise.all([...queued, other]);
    expect(h.started).toEqual(['a1', 'b1', 'a2', 'a3']);
  });

  it("a dashboard read waits for one slice of other users' searches and exports, however many they queue", async () => {
    const h = harness({ inFlight: 1, perUser: 2 });
    // Three users with searches and exports queued (a slice each), one of them reading.
    const heavy = [2, 3, 4].flatMap((u) => [1, 2, 3, 4, 5].map((i) => h.read(u, `s${u}.${i}`, i % 2 ? 'search' : 'export')));
    await h.settle();
    expect(h.started).toEqual(['s2.1']);
    // A dashboard view: 14 stats reads of user 1 sent at once, and a listing.
    const view = Array.from({ length: 14 }, (_, i) => h.read(1, `d${i}`, 'stats'));
    const listing = h.read(5, 'l', 'listing');
    await h.settle();
    await h.finish('s2.1');
    // All of the view, then the listing, before the next slice.
    for (let i = 0; i < 14; i++) await h.finish(`d${i}`);
    await h.finish('l');
    expect(h.started).toEqual(['s2.1', ...Array.from({ length: 14 }, (_, i) => `d${i}`), 'l', 's3.1']);
    // The slices go round the users, least recently served first.
    for (const name of ['s3.1', 's4.1', 's2.2', 's3.2']) await h.finish(name);
    expect(h.started.slice(-4)).toEqual(['s4.1', 's2.2', 's3.2', 's4.2']);
    await h.drain();
    await Promise.all([...heavy, ...view, listing]);
    expect(h.scheduler.counts).toEqual({ running: 0, waiting: 0 });
  });

  it(`a lower tier passed over ${PASSED_OVER_MAX} times in a row goes first, then waits as many again: dashboards slow searches, never stop them`, async () => {
    const h = harness({ inFlight: 1, perUser: 1 });
    const first = h.read(9, 'first', 'stats');
    await h.settle();
    const search = [1, 2].map((i) => h.read(1, `s${i}`, 'search'));
    // More dashboard reads of many users than the tier lets pass, waiting with the search.
    const n = 2 * PASSED_OVER_MAX + 2;
    const stats = Array.from({ length: n }, (_, i) => h.read(10 + i, `d${i}`, 'stats'));
    await h.settle();
    await h.finish('first');
    for (let i = 0; i < PASSED_OVER_MAX; i++) await h.finish(`d${i}`);
    await h.finish('s1');
    for (let i = PASSED_OVER_MAX; i < 2 * PASSED_OVER_MAX; i++) await h.finish(`d${i}`);
    await h.finish('s2');
    for (let i = 2 * PASSED_OVER_MAX; i < n; i++) await h.finish(`d${i}`);
    await Promise.all([first, ...search, ...stats]);
    const d = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `d${from + i}`);
    expect(h.started).toEqual(['first', ...d(0, PASSED_OVER_MAX), 's1', ...d(PASSED_OVER_MAX, 2 * PASSED_OVER_MAX), 's2', ...d(2 * PASSED_OVER_MAX, n)]);
  });

  it('listings go before searches, and a user served in one tier waits behind other users in another', async () => {
    const h = harness({ inFlight: 1, perUser: 2 });
    const all = [h.read(1, 'a-search', 'search'), h.read(2, 'b-search', 'search'), h.read(2, 'b-listing', 'listing'), h.read(1, 'a-listing', 'listing'), h.read(3, 'c-stats')];
    await h.settle();
    for (const name of ['a-search', 'c-stats', 'b-listing', 'a-listing', 'b-search']) await h.finish(name);
    await Promise.all(all);
    // a read first (the queue was empty); then stats, the listings (a served last), the search.
    expect(h.started).toEqual(['a-search', 'c-stats', 'b-listing', 'a-listing', 'b-search']);
  });
});
