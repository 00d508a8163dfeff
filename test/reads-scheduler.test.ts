/**
 * The fair queue of request reads (src/reads/scheduler.ts), driven by hand: reads are promises a
 * test settles, so the order is what the queue decides, never what a clock does.
 */
import { describe, expect, it } from 'vitest';
import { ApiError } from '../src/http/errors.js';
import { ReadScheduler } from '../src/reads/scheduler.js';

/** A read that runs until the test ends it, and the order reads started in. */
function harness(limits: { inFlight: number; perUser: number; queuedPerUser?: number }) {
  const scheduler = new ReadScheduler({ queuedPerUser: 64, ...limits });
  const started: string[] = [];
  const ends = new Map<string, () => void>();
  const read = (userId: number, name: string) =>
    scheduler.run(userId, () => {
      started.push(name);
      return new Promise<void>((resolve) => ends.set(name, resolve));
    });
  /** Lets the queue hand out places (its promises settle in microtasks). */
  const settle = () => new Promise((resolve) => setImmediate(resolve));
  const finish = async (name: string) => {
    ends.get(name)!();
    await settle();
  };
  return { scheduler, started, read, finish, settle };
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
});
