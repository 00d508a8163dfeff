import { isIPv6 } from 'node:net';
import type { Db } from '../../core/db/postgres.js';
import { ApiError } from '../http/errors.js';
import { countFailure, pruneThrottles, readThrottles, reserveAttempt, settleAttempt } from './store.js';

/**
 * The auth throttles. An attempt is counted before the expensive work it guards (argon2, a token
 * check), in one atomic statement, and leaves the count when it ends, adding a failure if it
 * failed. A key refuses attempts (429) once its failures reach the limit, and makes an attempt
 * wait while failures plus attempts under way would pass it: whatever the concurrency, no more
 * attempts than the limit can fail in a window, yet concurrent attempts that succeed (many
 * logins of one account from one host) only wait for a free place instead of being refused.
 * Counters live in Postgres, shared by every API process.
 */

export const THROTTLE_WINDOW_S = 15 * 60;
/** How long an attempt waits for a place while a key is busy with attempts under way. */
export const BUSY_WAIT_MS = 10_000;
/** A place freed by another process wakes no one here: waiters look again this often. */
const BUSY_POLL_MS = 100;

/**
 * What is counted, and how many failures a 15-minute window (starting at its first attempt)
 * allows. The order is the order counter rows are locked in, the same for every caller.
 * `onSuccess`: `none` leaves the failures as they are (a success is not a failure); `clear`
 * forgets them (the success proved the secret); `count` counts a success too (a quota).
 */
export const THROTTLES = {
  /** one address guessing one account's password */
  'login-pair': { max: 10, onSuccess: 'clear' },
  /** one address trying many accounts (password spraying); room for a shared NAT */
  'login-address': { max: 30, onSuccess: 'none' },
  /** many addresses guessing one account (distributed guessing); addresses the owner signed in from are exempt */
  'login-account': { max: 50, onSuccess: 'none' },
  /** unknown reset, e-mail confirmation and invitation links tried from one address (counted after the lookup: see checkLink) */
  'link-address': { max: 10, onSuccess: 'none' },
  /** current-password checks (password and e-mail change) of one signed-in user */
  'current-password': { max: 10, onSuccess: 'clear' },
  /** e-mail change requests of one user: each sends a mail to an address the user typed */
  'email-change': { max: 5, onSuccess: 'count' },
  /** invitations to domains by one user: each sends a mail to an address the user typed */
  invitation: { max: 20, onSuccess: 'count' },
} as const satisfies Record<string, { max: number; onSuccess: 'none' | 'clear' | 'count' }>;

export type ThrottleScope = keyof typeof THROTTLES;
const LOCK_ORDER = Object.keys(THROTTLES) as ThrottleScope[];

export interface ThrottledKey {
  scope: ThrottleScope;
  key: string;
}

export interface Attempt {
  /** The guarded work succeeded (see THROTTLES' `onSuccess`). */
  succeeded(): Promise<void>;
  /** The guarded work failed: one more failure for every key. */
  failed(): Promise<void>;
}

export interface AttemptOptions {
  /** The 429's error text. */
  refusal: string;
  /** Per scope: whether this attempt may go on although that key is over its limit. */
  exempt?: Partial<Record<ThrottleScope, () => Promise<boolean>>>;
}

/**
 * Counts an attempt against every key, waiting up to BUSY_WAIT_MS while attempts under way fill a
 * key's remaining failures; throws 429 with Retry-After when a key's failures reached its limit
 * (until its window ends) or the wait ran out (1 s).
 */
export async function beginAttempt(db: Db, keys: ThrottledKey[], options: AttemptOptions): Promise<Attempt> {
  const ordered = [...keys].sort((a, b) => LOCK_ORDER.indexOf(a.scope) - LOCK_ORDER.indexOf(b.scope));
  const exemptions = new Map<ThrottleScope, Promise<boolean>>();
  const isExempt = (scope: ThrottleScope) => {
    const check = options.exempt?.[scope];
    if (!check) return Promise.resolve(false);
    if (!exemptions.has(scope)) exemptions.set(scope, check());
    return exemptions.get(scope)!;
  };
  /** `admitted`: the attempt did its work, so its place frees for a waiter (a withdrawn one held none). */
  const settle = async (failures: (scope: ThrottleScope) => 'count' | 'clear' | 'none', admitted: boolean) => {
    await settleAttempt(db, ordered.map((key) => ({ ...key, failures: failures(key.scope) })));
    if (admitted) for (const key of ordered) placeFreed(key);
  };
  const deadline = performance.now() + BUSY_WAIT_MS;
  for (;;) {
    const counts = await reserveAttempt(db, ordered, THROTTLE_WINDOW_S);
    let refusedFor: number | undefined;
    const busy: ThrottledKey[] = [];
    for (const count of counts) {
      const scope = count.scope as ThrottleScope;
      const { max } = THROTTLES[scope];
      if (count.failures + count.inFlight <= max || (await isExempt(scope))) continue;
      if (count.failures >= max) refusedFor = Math.max(refusedFor ?? 1, retryAfter(count.freeIn));
      else busy.push({ scope, key: count.key });
    }
    if (refusedFor === undefined && busy.length === 0) {
      return {
        succeeded: () => settle((scope) => THROTTLES[scope].onSuccess, true),
        async failed() {
          await settle(() => 'count', true);
          await pruneNowAndThen(db);
        },
      };
    }
    await settle(() => 'none', false);
    if (refusedFor !== undefined) throw tooMany(options.refusal, refusedFor);
    // Wait, looking (reads only: a waiter writes nothing) until one more attempt fits.
    let stillBusy = busy;
    while (stillBusy.length > 0) {
      const left = deadline - performance.now();
      if (left <= 0) throw tooMany(options.refusal, 1);
      await placeFreedOrTimeout(stillBusy, Math.min(left, BUSY_POLL_MS));
      const counts = await readThrottles(db, stillBusy, THROTTLE_WINDOW_S);
      stillBusy = stillBusy.filter((key) => {
        const count = counts.find((c) => c.scope === key.scope && c.key === key.key);
        const { max } = THROTTLES[key.scope];
        return count !== undefined && count.failures < max && count.failures + count.inFlight >= max;
      });
    }
  }
}

// At most the window: window_start is stored to the millisecond, rounded, so may lie just ahead of now().
const retryAfter = (freeIn: number) => Math.min(THROTTLE_WINDOW_S, Math.max(1, Math.ceil(freeIn)));
const tooMany = (refusal: string, seconds: number) => new ApiError(429, refusal, undefined, { 'Retry-After': String(seconds) });

/** Link checks under way in this process at once, and how many more may wait for their turn. */
const LINK_CHECKS_AT_ONCE = 2;
const LINK_CHECKS_WAITING_MAX = 256;
/** How long an unknown link keeps its place after its answer is known: at most 20 a second per process. */
const UNKNOWN_LINK_HOLD_MS = 100;
let linkChecksRunning = 0;
const linkChecksWaiting: (() => void)[] = [];

/**
 * Checks a token from an e-mailed link (reset, e-mail confirmation, invitation; links.ts): `check` looks it up (and
 * may spend it), returning undefined for an unknown token, which is then counted against the
 * client address; from the address's 11th unknown token in a window on, 429. The lookup costs
 * no more than counting it, so it is counted after (one statement) rather than guarded before,
 * and a junk token never costs an argon2 hash. At most LINK_CHECKS_AT_ONCE checks run at a time
 * in a process, the others wait their turn, and an unknown link keeps its place a further
 * UNKNOWN_LINK_HOLD_MS: a flood of junk tokens from many addresses, which no per-address count
 * stops, gets 20 answers a second per process instead of the whole database and (in embedded
 * mode, where the database runs on the API's own thread) the whole process, so logins keep
 * their pace. A real link waits behind at most the flood's queue; when that queue is full, 429.
 */
export async function checkLink<T>(db: Db, ipAddress: string, check: () => Promise<T | undefined>): Promise<T | undefined> {
  if (linkChecksRunning < LINK_CHECKS_AT_ONCE) linkChecksRunning++;
  else if (linkChecksWaiting.length >= LINK_CHECKS_WAITING_MAX) throw tooMany('Too many link checks at once; try again shortly', 1);
  else await new Promise<void>((resolve) => linkChecksWaiting.push(resolve));
  let hold = 0;
  try {
    const found = await check();
    if (found === undefined) {
      hold = UNKNOWN_LINK_HOLD_MS;
      const { failures, freeIn } = await countFailure(db, { scope: 'link-address', key: addressKey(ipAddress) }, THROTTLE_WINDOW_S, THROTTLES['link-address'].max);
      await pruneNowAndThen(db);
      if (failures > THROTTLES['link-address'].max) throw tooMany('Too many unknown links from this address; try again later', retryAfter(freeIn));
    }
    return found;
  } finally {
    if (hold > 0) await new Promise((resolve) => setTimeout(resolve, hold));
    // The place passes to the first waiter, if any.
    const next = linkChecksWaiting.shift();
    if (next) next();
    else linkChecksRunning--;
  }
}

/** Counters of windows that are over are deleted at most once a minute per process. */
let prunedAt = 0;
async function pruneNowAndThen(db: Db): Promise<void> {
  if (performance.now() - prunedAt < 60_000) return;
  prunedAt = performance.now();
  await pruneThrottles(db, THROTTLE_WINDOW_S);
}

/** Attempts of this process waiting for a place, per key, first come first woken. */
const waiting = new Map<string, (() => void)[]>();
const waitKey = (key: ThrottledKey) => `${key.scope}\n${key.key}`;

/** An attempt on the key ended here: the first waiter looks again (one place, one waiter). */
function placeFreed(key: ThrottledKey): void {
  waiting.get(waitKey(key))?.shift()?.();
}

function placeFreedOrTimeout(keys: ThrottledKey[], ms: number): Promise<void> {
  return new Promise((resolve) => {
    const wake = () => {
      clearTimeout(timer);
      for (const key of keys) {
        const queue = waiting.get(waitKey(key));
        const at = queue?.indexOf(wake) ?? -1;
        if (at >= 0) queue!.splice(at, 1);
        if (queue?.length === 0) waiting.delete(waitKey(key));
      }
      resolve();
    };
    const timer = setTimeout(wake, ms);
    for (const key of keys) {
      const queue = waiting.get(waitKey(key)) ?? [];
      queue.push(wake);
      waiting.set(waitKey(key), queue);
    }
  });
}

/**
 * The client as the throttles count it: an IPv4 address as it is, an IPv6 address by its /64
 * (one subscriber's network, whose 2^64 addresses would otherwise each get a fresh limit).
 */
export function addressKey(ip: string): string {
  if (!isIPv6(ip)) return ip;
  const groups = ipv6Groups(ip);
  if (groups.slice(0, 5).every((g) => g === 0) && groups[5] === 0xffff) {
    return [groups[6]! >> 8, groups[6]! & 255, groups[7]! >> 8, groups[7]! & 255].join('.');
  }
  return `${groups.slice(0, 4).map((g) => g.toString(16)).join(':')}::/64`;
}

/** The eight 16-bit groups of a valid IPv6 address (`::` expanded, a dotted IPv4 tail converted). */
function ipv6Groups(ip: string): number[] {
  let text = ip.replace(/%.*$/, '');
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    text = `${text.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const parts = (s: string) => (s ? s.split(':') : []);
  const groups = tail === undefined ? parts(head) : [...parts(head), ...Array<string>(8 - parts(head).length - parts(tail).length).fill('0'), ...parts(tail)];
  return groups.map((g) => parseInt(g, 16));
}
