/**
 * Delivery of the notification outbox (alert_notifications, outbox.ts): one notification per
 * target, naming every alert of its events (notifications.ts); e-mail through the mailer, webhooks
 * as a JSON POST. Runs outside the evaluation transaction, so a slow mail server or webhook never holds
 * the evaluator's lock.
 *
 * - Claiming: a short statement marks up to `batch` due rows as held until now + `leaseMs`
 *   (FOR UPDATE SKIP LOCKED, only the oldest pending row of each target, so a resolution never
 *   overtakes its firing notification); any number of processes may deliver side by side.
 * - Success marks the row delivered (and its alerts' last_delivered_at); a failure records the
 *   attempt (attempts, last_error, next_attempt_at with exponential back-off; its alerts'
 *   last_delivery_error) and logs a structured warning. After `giveUpAfterMs` without success the
 *   row is marked failed and an error is logged: nothing is dropped silently.
 * - A permanent refusal (see isPermanent) is retried on the same back-off only until the
 *   notification has had `permanentFailureAttempts` attempts, then given up the same loud way:
 *   asking a server that said "never" every half hour for a day helps nobody, while the few
 *   retries cover a receiver that refused by mistake for a moment.
 * - At most NOTIFICATIONS_PER_TARGET_PER_HOUR notifications go to one target (e-mail address or
 *   webhook URL) in any hour, whatever alerts, domains or users they come from, counted atomically
 *   by the claim (see claimNotifications); a 1,000-domain incident is one notification. One over
 *   the limit is held, never dropped: it stays pending until the target's hour has room (the next
 *   rounds' events join it meanwhile), its alerts' last_delivery_error says so, a warning
 *   is logged, and the message it finally sends says since when it was held. One held for
 *   `giveUpAfterMs` is given up like a failed one.
 * - At least once: a process that dies after the mail server accepted a message but before the row
 *   was marked leaves it to be sent again when its lease ends. Webhook receivers get the
 *   notification's id (body `id`, header X-Tailhouse-Notification) to deduplicate on.
 *
 * Logs never hold an e-mail body or a webhook URL's path or query (which often carries a secret):
 * a webhook is named by its origin.
 */
import { MINUTE_MS, HOUR_MS } from '../../core/durations.js';
import type { Db } from '../../core/db/postgres.js';
import type { Logger } from '../../core/log.js';
import type { Mailer } from '../mail/mailer.js';
import type { Metrics } from '../metrics/registry.js';
import { webhookAddressRule, type ResolveAll } from './addresses.js';
import { NOTIFICATIONS_PER_TARGET_PER_HOUR } from './limits.js';
import { emailOfGroup, groupKeyOf, webhookBodyOfGroup, type NotificationGroup } from './notifications.js';
import { claimNotifications, markDelivered, markFailed, markHeld, type ClaimedNotification, type HeldNotification } from './outbox.js';
import { postOnce, publicPost, type WebhookPost } from './webhook-post.js';

export interface DeliveryOptions {
  db: Db;
  mailer: Mailer;
  log: Logger;
  /** BASE_URL: the service a notification says it comes from. */
  baseUrl: string;
  /**
   * How a webhook is sent (tests may inject one that reaches a local receiver). The default sends
   * to public addresses only, judged by the connection's own name lookup (webhook-post.ts).
   */
  post?: WebhookPost;
  /** How the default post resolves names (tests may inject one); the system resolver otherwise. */
  resolve?: ResolveAll;
  /** The networks trusted as webhook targets besides public addresses (WEBHOOK_ALLOW_NETWORKS). */
  allowNetworks?: readonly string[];
  /** A webhook answer must arrive within this (default 10 s). */
  webhookTimeoutMs?: number;
  /** A mail must be accepted within this (default 60 s, below the lease). */
  mailTimeoutMs?: number;
  /**
   * Origins (`http://127.0.0.1:8080`) a webhook may reach over plain http. Only code passes this
   * (the tests' local receiver); targets from users must be https (schemas.ts) and are checked
   * again here.
   */
  insecureWebhookOrigins?: readonly string[];
  /** First retry after `initialMs`, doubling up to `maxMs`; given up `giveUpAfterMs` after the notification was created. */
  backoff?: Partial<Backoff>;
  /** How long a claim holds a row (must exceed a delivery's longest time; default 2 min). */
  leaseMs?: number;
  /** Rows claimed per statement (default 20). */
  batch?: number;
  /** A permanent refusal on this attempt or a later one gives the notification up (default 3). */
  permanentFailureAttempts?: number;
  /** Notifications one target may receive in any hour (default NOTIFICATIONS_PER_TARGET_PER_HOUR). */
  perTargetPerHour?: number;
  /** Counts each outcome (src/metrics/). */
  metrics?: Metrics;
}


export interface Backoff {
  initialMs: number;
  maxMs: number;
  giveUpAfterMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 30_000, maxMs: 30 * MINUTE_MS, giveUpAfterMs: 24 * HOUR_MS };

/** With the default back-off, a refused notification is given up about 1.5 minutes after it was first tried. */
export const PERMANENT_FAILURE_ATTEMPTS = 3;

export interface DeliveryResult {
  delivered: number;
  failed: number;
  gaveUp: number;
  /** Held back by the per-target limit (pending, due when the target's hour has room). */
  held: number;
}

/** The delay before retry number `attempts` + 1. */
export function retryDelay(attempts: number, backoff: Backoff): number {
  return Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.max(0, Math.min(attempts - 1, 30)));
}

/** A webhook's answer that asking again will not change (see isPermanent). */
class PermanentRefusal extends Error {}

/**
 * Whether a failed delivery is a refusal that asking again will not change:
 *
 * - E-mail: the mail server answered the recipient (RCPT TO) or the message (DATA) with a 5xx
 *   reply (unknown mailbox, relaying denied, message rejected). Other 5xx replies are about this
 *   server's own set-up, not the alert's target: authentication (535), the sender (MAIL FROM), the
 *   greeting (554, our address is refused); they hold every alert's mail until the operator fixes
 *   SMTP_URL or MAIL_FROM, so they keep the ordinary retries rather than lose notifications in a
 *   minute and a half. 4xx replies, timeouts and connection errors are transient.
 * - Webhook: a 4xx answer other than 408 (request timeout) and 429 (too many requests): the URL
 *   is gone (404, 410), its token revoked (401, 403), or the receiver rejects the body (400, 422).
 *   5xx, 408, 429, redirects (not followed), timeouts and network errors are transient, and so is
 *   the refusal of a non-public address (a name's DNS answer can change).
 */
export function isPermanent(err: unknown): boolean {
  if (err instanceof PermanentRefusal) return true;
  const e = err as { responseCode?: unknown; command?: unknown } | null;
  const code = typeof e?.responseCode === 'number' ? e.responseCode : NaN;
  return code >= 500 && code <= 599 && (e?.command === 'RCPT TO' || e?.command === 'DATA');
}

/** A webhook's HTTP status that will not change on a retry (see isPermanent). */
const permanentStatus = (status: number) => status >= 400 && status <= 499 && status !== 408 && status !== 429;

/** The origin of a URL, or a placeholder: what logs may say about a webhook target. */
export function originOf(target: string): string {
  try {
    return new URL(target).origin;
  } catch {
    return '(invalid URL)';
  }
}

/** An error as one short line, without the target's path or query. */
function describe(err: unknown, target: string): string {
  const e = err as { message?: unknown; cause?: { code?: unknown; message?: unknown }; responseCode?: unknown; code?: unknown };
  let text = typeof e?.message === 'string' ? e.message : String(err);
  const cause = e?.cause;
  if (cause && (typeof cause.code === 'string' || typeof cause.message === 'string')) text += ` (${String(cause.code ?? cause.message)})`;
  if (target) text = text.split(target).join(originOf(target));
  text = text.replace(/\s+/g, ' ').trim();
  return text.length > 500 ? `${text.slice(0, 497)}...` : text;
}

/** Settles with `work`, or fails after `ms` (the work itself cannot be cancelled). */
async function withTimeout<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(message)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

export interface Deliverer {
  /** Claims and delivers what is due at `nowMs`, until nothing due is left. */
  deliverDue(nowMs: number): Promise<DeliveryResult>;
  /** Aborts webhook requests in flight (they are recorded as failed attempts and retried later). */
  abort(): void;
}

export function createDeliverer(options: DeliveryOptions): Deliverer {
  const { db, mailer } = options;
  const log = options.log.child({ component: 'alerts' });
  const post = options.post ?? publicPost(options.resolve, webhookAddressRule(options.allowNetworks ?? []));
  const timeoutMs = options.webhookTimeoutMs ?? 10_000;
  const mailTimeoutMs = options.mailTimeoutMs ?? 60_000;
  const insecure = new Set(options.insecureWebhookOrigins ?? []);
  const backoff: Backoff = { ...DEFAULT_BACKOFF, ...options.backoff };
  const leaseMs = options.leaseMs ?? 2 * MINUTE_MS;
  const batch = options.batch ?? 20;
  const permanentAttempts = options.permanentFailureAttempts ?? PERMANENT_FAILURE_ATTEMPTS;
  const perTargetPerHour = options.perTargetPerHour ?? NOTIFICATIONS_PER_TARGET_PER_HOUR;
  const stop = new AbortController();

  async function sendWebhook(n: ClaimedNotification, group: NotificationGroup): Promise<void> {
    const url = new URL(n.target);
    const allowedInsecure = url.protocol === 'http:' && insecure.has(url.origin);
    if (url.protocol !== 'https:' && !allowedInsecure) throw new Error('webhook targets must be https URLs');
    const firing = group.events.some((e) => e.kind !== 'resolved');
    // A redirect is an answer we do not follow: a webhook is one POST to the URL the user gave.
    const status = await (allowedInsecure ? postOnce : post)(url, {
      headers: {
        'content-type': 'application/json',
        'user-agent': 'tailhouse-alerts',
        'x-tailhouse-notification': String(n.id),
        'x-tailhouse-event': firing ? 'firing' : 'resolved',
      },
      body: webhookBodyOfGroup(group),
      signal: AbortSignal.any([AbortSignal.timeout(timeoutMs), stop.signal]),
    });
    if (status < 200 || status > 299) {
      const message = `webhook answered HTTP ${status}`;
      throw permanentStatus(status) ? new PermanentRefusal(message) : new Error(message);
    }
  }

  async function deliverOne(n: ClaimedNotification, nowMs: number): Promise<'delivered' | 'failed' | 'gaveUp'> {
    const method = n.method;
    const facts = { notificationId: String(n.id), alertIds: n.alert_ids, events: n.events.length, method, attempt: n.attempts };
    const target = method === 'webhook' ? { target: originOf(n.target) } : {};
    const group: NotificationGroup = {
      id: String(n.id),
      groupKey: groupKeyOf(method, n.target),
      events: n.events,
      heldSince: n.held_since === null ? null : new Date(n.held_since).toISOString(),
      perTargetPerHour,
      service: new URL(options.baseUrl).origin,
    };
    try {
      if (method === 'email') {
        // The mailer logs the recipient and subject; the body is never logged.
        await withTimeout(mailer.send({ to: n.target, ...emailOfGroup(group) }), mailTimeoutMs, 'the mail server did not accept the message in time');
      } else {
        await sendWebhook(n, group);
      }
    } catch (err) {
      const error = describe(err, n.target);
      const permanent = isPermanent(err);
      const ageMs = nowMs - new Date(n.created_at).getTime();
      const retryAtMs = nowMs + retryDelay(n.attempts, backoff);
      const expired = ageMs + (retryAtMs - nowMs) > backoff.giveUpAfterMs;
      if (expired || (permanent && n.attempts >= permanentAttempts)) {
        // The recorded error says that retries stopped: it is what the alerts' lastDeliveryError shows.
        await markFailed(db, n.id, new Date(nowMs), `${error} (given up after ${n.attempts} attempt${n.attempts === 1 ? '' : 's'})`, null);
        log.error({ ...facts, ...target, error, permanent, reason: expired ? 'expired' : 'refused' }, 'alert notification given up after repeated failures');
        return 'gaveUp';
      }
      await markFailed(db, n.id, new Date(nowMs), error, new Date(retryAtMs));
      log.warn({ ...facts, ...target, error, permanent, nextAttemptAt: new Date(retryAtMs).toISOString() }, 'alert notification failed; will retry');
      return 'failed';
    }
    await markDelivered(db, n.id, new Date(nowMs));
    log.info({ ...facts, ...target }, 'alert notification delivered');
    return 'delivered';
  }

  /** A notification the per-target limit held back: noted on its alert and logged once, given up when held too long. */
  async function held(n: HeldNotification, nowMs: number): Promise<'held' | 'gaveUp'> {
    const facts = { notificationId: String(n.id), alertIds: n.alert_ids, method: n.method, ...(n.method === 'webhook' ? { target: originOf(n.target) } : {}) };
    const nextAttemptAt = new Date(n.next_attempt_at);
    const reason = `held back: its target received ${perTargetPerHour} notifications in the last hour, the most it may`;
    if (nextAttemptAt.getTime() - new Date(n.created_at).getTime() > backoff.giveUpAfterMs) {
      await markFailed(db, n.id, new Date(nowMs), `${reason} (given up: it would wait past the time notifications are retried for)`, null);
      log.error({ ...facts, reason: 'held too long' }, 'alert notification given up after repeated failures');
      return 'gaveUp';
    }
    if (n.newly_held) {
      await markHeld(db, n.alert_ids, new Date(nowMs), `${reason}; due again at ${nextAttemptAt.toISOString()}`);
      log.warn({ ...facts, perTargetPerHour, nextAttemptAt: nextAttemptAt.toISOString() }, 'alert notification held: its target reached the hourly limit');
    }
    return 'held';
  }

  return {
    async deliverDue(nowMs) {
      const result: DeliveryResult = { delivered: 0, failed: 0, gaveUp: 0, held: 0 };
      // Each pass claims what is due now; a claimed row is not due again until its lease ends or it
      // is marked, and a held one is due later, so the loop ends when every due row has been
      // tried or held once.
      for (;;) {
        if (stop.signal.aborted) break;
        const claim = await claimNotifications(db, new Date(nowMs), new Date(nowMs + leaseMs), batch, { perHour: perTargetPerHour });
        if (claim.claimed.length === 0 && claim.held.length === 0) break;
        // One per target in a batch, so delivering them side by side keeps each target's order.
        const count = async (method: 'email' | 'webhook', outcome: Promise<keyof DeliveryResult>) => {
          const o = await outcome;
          result[o]++;
          options.metrics?.notification(method, o);
        };
        await Promise.all([
          ...claim.claimed.map((n) => count(n.method, deliverOne(n, nowMs))),
          ...claim.held.map((n) => count(n.method, held(n, nowMs))),
        ]);
      }
      return result;
    },
    abort: () => stop.abort(),
  };
}
