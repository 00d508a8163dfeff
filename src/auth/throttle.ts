import { isIPv6 } from 'node:net';
import type { Db } from '../db/postgres.js';
import { ApiError } from '../http/errors.js';
import { countAttempt, pruneThrottles, uncountAttempt } from './store.js';

/**
 * The auth throttles. An attempt is counted before the expensive work it guards (argon2, a token
 * check), in one atomic statement, and refused when its count passes the limit: concurrent
 * attempts cannot all slip through a check made before any of them was counted. A refused
 * attempt and a successful one are taken back, so only failures (and attempts still running)
 * use up a limit. Counters live in Postgres, shared by every API process.
 */

export const THROTTLE_WINDOW_S = 15 * 60;

/**
 * What is counted, and how many attempts a 15-minute window (starting at its first attempt)
 * allows. The order is the order counter rows are locked in, the same for every caller.
 * `onSuccess`: `refund` takes a successful attempt back (only failures use up the limit);
 * `clear` also forgets the key's earlier failures (the success proved the secret); `keep`
 * counts every attempt (a quota).
 */
export const THROTTLES = {
  /** one address guessing one account's password */
  'login-pair': { max: 10, onSuccess: 'clear' },
  /** one address trying many accounts (password spraying); room for a shared NAT */
  'login-address': { max: 30, onSuccess: 'refund' },
  /** many addresses guessing one account (distributed guessing); addresses the owner signed in from are exempt */
  'login-account': { max: 50, onSuccess: 'refund' },
  /** reset and e-mail confirmation links tried from one address */
  'link-address': { max: 10, onSuccess: 'refund' },
  /** current-password checks (password and e-mail change) of one signed-in user */
  'current-password': { max: 10, onSuccess: 'clear' },
  /** e-mail change requests of one user: each sends a mail to an address the user typed */
  'email-change': { max: 5, onSuccess: 'keep' },
} as const satisfies Record<string, { max: number; onSuccess: 'refund' | 'clear' | 'keep' }>;

export type ThrottleScope = keyof typeof THROTTLES;
const LOCK_ORDER = Object.keys(THROTTLES) as ThrottleScope[];

export interface ThrottledKey {
  scope: ThrottleScope;
  key: string;
}

export interface Attempt {
  /** The guarded work succeeded: the attempt is taken back, forgotten with the key's failures, or kept (see THROTTLES). */
  succeeded(): Promise<void>;
  /** The guarded work failed: the attempt stays counted. */
  failed(): Promise<void>;
}

export interface AttemptOptions {
  /** The 429's error text. */
  refusal: string;
  /** Per scope: whether this attempt may go on although that key is over its limit. */
  exempt?: Partial<Record<ThrottleScope, () => Promise<boolean>>>;
}

/** Counts an attempt against every key, or throws 429 with Retry-After when one is over its limit. */
export async function beginAttempt(db: Db, keys: ThrottledKey[], options: AttemptOptions): Promise<Attempt> {
  const ordered = [...keys].sort((a, b) => LOCK_ORDER.indexOf(a.scope) - LOCK_ORDER.indexOf(b.scope));
  const counts = await countAttempt(db, ordered, THROTTLE_WINDOW_S);
  let refusedFor: number | undefined;
  for (const count of counts) {
    const scope = count.scope as ThrottleScope;
    if (count.attempts <= THROTTLES[scope].max) continue;
    if (await options.exempt?.[scope]?.()) continue;
    // At most the window: window_start is stored to the millisecond, rounded, so may lie just ahead of now().
    refusedFor = Math.max(refusedFor ?? 1, Math.min(THROTTLE_WINDOW_S, Math.ceil(count.freeIn)));
  }
  if (refusedFor !== undefined) {
    for (const key of ordered) await uncountAttempt(db, key, false);
    throw new ApiError(429, options.refusal, undefined, { 'Retry-After': String(refusedFor) });
  }
  return {
    async succeeded() {
      for (const key of ordered) {
        const { onSuccess } = THROTTLES[key.scope];
        if (onSuccess !== 'keep') await uncountAttempt(db, key, onSuccess === 'clear');
      }
    },
    failed: () => pruneThrottles(db, THROTTLE_WINDOW_S),
  };
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
