/**
 * The fair queue of the requests that read ClickHouse in a process: at most `inFlight` of them
 * reading at once, at most `perUser` of one user's. When a place frees, it goes
 *
 * 1. to the highest tier with a request waiting: `stats` (the dashboard), then `listing`, then
 *    `search` and `export` (one tier: the long reads); except that a tier passed over
 *    PASSED_OVER_MAX times in a row while it waited goes first (the highest such tier), so
 *    that a stream of dashboards slows the long reads but never stops them;
 * 2. within the tier, to the user served least recently (in any tier), a user's own requests in
 *    the order they came.
 *
 * So a dashboard request waits for at most one search or export of other users, however many
 * they queue: the one reading when it came, or the one whose passed-over turn is due, never both
 * (after a long read is given a place, PASSED_OVER_MAX higher ones go before the next).
 * Long reads come in slices (whole days of at most `sliceRows` rows, or one day: searchLogs in
 * src/logs/service.ts, createExport's count), each taking a place of its own, so "one" is one slice. Without the tiers six heavy requests of one
 * user put another user's 82 ms query at 19 s, and three users' searches each put a dashboard
 * behind the slices of the other two (bench/README, "bench/fair-reads").
 *
 * Background work (ingest, the rollup builder, the alert evaluator, live-tail pollers) does not
 * pass here: it is not a user's, and waits behind nobody.
 */
import { ApiError } from '../http/errors.js';

/** What a read is for; the scheduler orders by it and the limits are chosen by it. */
export type ReadClass = 'stats' | 'listing' | 'search' | 'export';

/** Each class's tier, 0 first. */
const TIER: Record<ReadClass, number> = { stats: 0, listing: 1, search: 2, export: 2 };
const TIERS = 3;

/**
 * Places given to higher tiers while a tier waits before that tier goes first. Above the 14
 * requests of a dashboard view, so that a view sent at once is not cut by a long read.
 */
export const PASSED_OVER_MAX = 16;

export interface SchedulerLimits {
  /** Requests reading at once in this process. */
  inFlight: number;
  /** Requests of one user reading at once. */
  perUser: number;
  /** Requests one user may have waiting; past it the next is refused (429). */
  queuedPerUser: number;
}

/** Seconds a user with too many requests waiting is asked to wait. */
const RETRY_AFTER_S = 5;

interface UserQueue {
  running: number;
  /** The user's waiting requests of each tier, in the order they came. */
  waiting: (() => void)[][];
  /** When the user was last given a place (a counter): the least recent goes first. */
  servedAt: number;
}

/** Gives a place back; calling it again does nothing. */
export type Release = () => void;

const waitingOf = (user: UserQueue) => user.waiting.reduce((n, tier) => n + tier.length, 0);

export class ReadScheduler {
  private readonly users = new Map<number, UserQueue>();
  private running = 0;
  private served = 0;
  /** Per tier: places given to higher tiers since it was last served, while it waited. */
  private readonly passedOver: number[] = new Array<number>(TIERS).fill(0);

  constructor(readonly limits: SchedulerLimits) {}

  /** Requests reading now, and waiting (for tests). */
  get counts(): { running: number; waiting: number } {
    let waiting = 0;
    for (const user of this.users.values()) waiting += waitingOf(user);
    return { running: this.running, waiting };
  }

  /**
   * A place for one request of `userId` of class `cls` (the first tier when none is given), once
   * its turn comes; 429 when the user already has `queuedPerUser` waiting.
   */
  acquire(userId: number, cls: ReadClass = 'stats'): Promise<Release> {
    let user = this.users.get(userId);
    if (!user) this.users.set(userId, (user = { running: 0, waiting: Array.from({ length: TIERS }, () => []), servedAt: -1 }));
    if (waitingOf(user) >= this.limits.queuedPerUser) {
      return Promise.reject(
        new ApiError(429, `Too many requests of this user waiting to read (${this.limits.queuedPerUser}); try again when earlier ones have answered`, undefined, { 'Retry-After': String(RETRY_AFTER_S) }),
      );
    }
    const queued = user;
    const turn = new Promise<void>((resolve) => queued.waiting[TIER[cls]]!.push(resolve));
    this.dispatch();
    return turn.then(() => this.releaseOf(userId, queued));
  }

  /** Runs `read` in a place of `userId`'s of class `cls`, given back when it settles. */
  async run<T>(userId: number, read: () => Promise<T>, cls: ReadClass = 'stats'): Promise<T> {
    const release = await this.acquire(userId, cls);
    try {
      return await read();
    } finally {
      release();
    }
  }

  private releaseOf(userId: number, user: UserQueue): Release {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.running--;
      user.running--;
      if (user.running === 0 && waitingOf(user) === 0) this.users.delete(userId);
      this.dispatch();
    };
  }

  /** The user a place goes to in `tier`: one with a request waiting there and room under perUser, served least recently. */
  private nextIn(tier: number): UserQueue | undefined {
    let next: UserQueue | undefined;
    for (const user of this.users.values()) {
      if (user.waiting[tier]!.length > 0 && user.running < this.limits.perUser && (!next || user.servedAt < next.servedAt)) next = user;
    }
    return next;
  }

  /** Hands free places out in the order of the header. */
  private dispatch(): void {
    while (this.running < this.limits.inFlight) {
      const ready = [...Array(TIERS).keys()].flatMap((tier) => {
        const user = this.nextIn(tier);
        return user ? [{ tier, user }] : [];
      });
      if (ready.length === 0) return;
      const next = ready.find((r) => this.passedOver[r.tier]! >= PASSED_OVER_MAX) ?? ready[0]!;
      for (const r of ready) {
        if (r.tier === next.tier) this.passedOver[r.tier] = 0;
        else if (r.tier > next.tier) this.passedOver[r.tier]!++;
      }
      this.running++;
      next.user.running++;
      next.user.servedAt = this.served++;
      next.user.waiting[next.tier]!.shift()!();
    }
  }
}
