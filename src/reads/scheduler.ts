/**
 * The fair queue of the requests that read ClickHouse in a process: at most `inFlight` of them
 * reading at once, at most `perUser` of one user's, and when a place frees, the waiting user served
 * least recently goes first (a user's own requests in the order they came). So one user's many
 * heavy requests delay another user's request by at most one of them, however many they queue:
 * without it the embedded engine ran statements in arrival order, and six heavy requests of one
 * user put another user's 82 ms query at 19 s (bench/README, "bench/fair-reads").
 *
 * Background work (ingest, the rollup builder, the alert evaluator, live-tail pollers) does not
 * pass here: it is not a user's, and waits behind nobody.
 */
import { ApiError } from '../http/errors.js';

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
  waiting: (() => void)[];
  /** When the user was last given a place (a counter): the least recent goes first. */
  servedAt: number;
}

/** Gives a place back; calling it again does nothing. */
export type Release = () => void;

export class ReadScheduler {
  private readonly users = new Map<number, UserQueue>();
  private running = 0;
  private served = 0;

  constructor(readonly limits: SchedulerLimits) {}

  /** Requests reading now, and waiting (for tests). */
  get counts(): { running: number; waiting: number } {
    let waiting = 0;
    for (const user of this.users.values()) waiting += user.waiting.length;
    return { running: this.running, waiting };
  }

  /** A place for one request of `userId`, once its turn comes; 429 when the user already has `queuedPerUser` waiting. */
  acquire(userId: number): Promise<Release> {
    let user = this.users.get(userId);
    if (!user) this.users.set(userId, (user = { running: 0, waiting: [], servedAt: -1 }));
    if (user.waiting.length >= this.limits.queuedPerUser) {
      return Promise.reject(
        new ApiError(429, `Too many requests of this user waiting to read (${this.limits.queuedPerUser}); try again when earlier ones have answered`, undefined, { 'Retry-After': String(RETRY_AFTER_S) }),
      );
    }
    const queued = user;
    const turn = new Promise<void>((resolve) => queued.waiting.push(resolve));
    this.dispatch();
    return turn.then(() => this.releaseOf(userId, queued));
  }

  /** Runs `read` in a place of `userId`'s, given back when it settles. */
  async run<T>(userId: number, read: () => Promise<T>): Promise<T> {
    const release = await this.acquire(userId);
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
      if (user.running === 0 && user.waiting.length === 0) this.users.delete(userId);
      this.dispatch();
    };
  }

  /** Hands free places to waiting users, least recently served first. */
  private dispatch(): void {
    while (this.running < this.limits.inFlight) {
      let next: UserQueue | undefined;
      for (const user of this.users.values()) {
        if (user.waiting.length > 0 && user.running < this.limits.perUser && (!next || user.servedAt < next.servedAt)) next = user;
      }
      if (!next) return;
      this.running++;
      next.running++;
      next.servedAt = this.served++;
      next.waiting.shift()!();
    }
  }
}
