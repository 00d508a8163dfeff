/**
 * The alert evaluator (docs/reference/alerts.md#evaluation): every interval, each enabled alert's
 * metric over its trailing `duration`, its state machine ok → firing → ok, and the notifications
 * that follow.
 *
 * ## One evaluator among several `serve` processes
 *
 * The Db interface has no reserved connection, so a session advisory lock (held by a leader for
 * its lifetime) is not available; transaction-scoped advisory locks are. A round is:
 *
 *  1. CLAIM, a short transaction: `pg_try_advisory_xact_lock` (busy: another process is in its
 *     own claim or apply this instant, so skip), then the round ledger (alert_evaluator, one row)
 *     takes this round's time only if its last round is older than the start of the current
 *     interval (floor(now / interval) × interval); the enabled alerts are read with their state.
 *     Every process ticks just after each interval boundary, the first one wins, the others skip:
 *     one round per interval for the whole cluster, and when the winner dies, whoever ticks first
 *     in the next interval evaluates (takeover within one interval, with no lease to expire).
 *  2. MEASURE, outside any transaction: one ClickHouse query for all alerts (metrics.ts). Holding a
 *     transaction across it would, in embedded mode, block every other PGlite query meanwhile.
 *  3. APPLY, a short transaction: `pg_advisory_xact_lock` (waits, since holders are all short),
 *     check that the ledger still holds this round (else a later round was claimed while this one
 *     measured, and this round's older figures are dropped), run each state machine on the state
 *     read at the claim, write the alerts whose persisted fields change in one statement, and
 *     enqueue the notifications of the rows written in the outbox in the same transaction.
 *
 * The state read at the claim is still current at the apply: only applies write it, and once the
 * ledger holds this round no other round's apply passes its ledger check (see
 * enabledAlertDefinitions in store.ts). A notification is written in the transaction that changes
 * the state, and only for a row that write reached (an alert changed through the API in between
 * waits for the next round), so neither a second process nor a restart can send a transition twice
 * or lose one. Delivery (delivery.ts) claims outbox rows in transactions of its own (FOR UPDATE
 * SKIP LOCKED) and talks to the mail server or webhook outside of any, so a slow SMTP server never
 * holds the evaluator's lock.
 *
 * ## What a round writes
 *
 * Only the alerts whose persisted fields change: a transition or a reminder (state,
 * state_changed_at, last_notified_at, last_triggered_at), plus the first round after an alert was
 * created or changed through the API (its figures, so an operator sees what a new definition
 * measures). An alert whose state stays is neither written nor row-locked: at 3,000 alerts,
 * rewriting every row each round cost tens of milliseconds and a dead row version per alert per
 * round, for figures nobody reads. So last_value, last_requests and last_evaluated_at are the
 * figures of the last round that wrote the row; the API shows none of them, and each
 * notification's payload keeps its own.
 *
 * ## The state machine (per alert)
 *
 * - ok, condition met → firing: notification `firing`, last_triggered_at = state_changed_at = now.
 * - firing, met → stays; a `reminder` when the last notification is 4 hours old (REMINDER_MS).
 * - firing, not met → ok with a `resolved` notification, but not before the alert has been
 *   firing for its own `duration` (the flapping guard): an alert that crosses its threshold back
 *   and forth sends at most one firing/resolved pair per duration, stays `firing` meanwhile, and a
 *   real breach is never delayed (holding the resolution, not the firing).
 * - "Not met" includes a window without data: a rate below the minimum of requests
 *   (MIN_ERROR_RATE_REQUESTS, option `minErrorRateRequests`), a response-time metric without any
 *   response time (metrics.ts). Such a window never fires, and lets a firing alert resolve.
 * - An alert changed through the API between the claim and the apply waits for the next round;
 *   a disabled alert is not evaluated at all and keeps its state until it is enabled again.
 *
 * Times (windows, state changes, reminders, retries) come from the injectable clock, so the tests
 * can move it by hours; processes sharing a database are expected to keep their clocks in sync.
 */
import os from 'node:os';
import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Db } from '../../core/db/postgres.js';
import type { Logger } from '../../core/log.js';
import type { Mailer } from '../mail/mailer.js';
import type { Metrics } from '../metrics/registry.js';
import { createDeliverer, type DeliveryOptions, type DeliveryResult } from './delivery.js';
import { metricOf, MIN_ERROR_RATE_REQUESTS, RATE_CONDITIONS, windowFigures, windowKey } from './metrics.js';
import { statsUrl, type NotificationPayload } from './notifications.js';
import type { Operator } from './schemas.js';
import {
  claimRound,
  enabledAlertDefinitions,
  enqueueNotifications,
  lockRoundForApply,
  pruneNotifications,
  saveEvaluations,
  type EvaluationDefinition,
  type EvaluationWrite,
  type NewNotification,
  type NotificationKind,
} from './store.js';

/** While firing, a reminder at most this often. */
export const REMINDER_MS = 4 * 3_600_000;

/** Delivered and abandoned outbox rows are kept this long. */
const KEEP_NOTIFICATIONS_MS = 30 * 86_400_000;

export function compare(value: number, operator: Operator, threshold: number): boolean {
  switch (operator) {
    case 'greaterThan':
      return value > threshold;
    case 'greaterThanOrEqual':
      return value >= threshold;
    case 'lessThan':
      return value < threshold;
    case 'lessThanOrEqual':
      return value <= threshold;
  }
}

export interface StateFields {
  state: 'ok' | 'firing';
  stateChangedAt: Date | null;
  lastNotifiedAt: Date | null;
  lastTriggeredAt: Date | null;
}

/** Whether a step changed anything the alert's row keeps. */
export function stateChanged(before: StateFields, after: StateFields): boolean {
  const same = (a: Date | null, b: Date | null) => (a === null || b === null ? a === b : a.getTime() === b.getTime());
  return (
    before.state !== after.state ||
    !same(before.stateChangedAt, after.stateChangedAt) ||
    !same(before.lastNotifiedAt, after.lastNotifiedAt) ||
    !same(before.lastTriggeredAt, after.lastTriggeredAt)
  );
}

/** One step of the state machine (see the module comment); pure. */
export function step(current: StateFields, met: boolean, nowMs: number, durationS: number, reminderMs = REMINDER_MS): StateFields & { notify: NotificationKind | null } {
  const now = new Date(nowMs);
  const since = (d: Date | null) => (d === null ? Infinity : nowMs - d.getTime());
  if (current.state === 'ok') {
    if (!met) return { ...current, notify: null };
    return { state: 'firing', stateChangedAt: now, lastNotifiedAt: now, lastTriggeredAt: now, notify: 'firing' };
  }
  if (met) {
    if (since(current.lastNotifiedAt) >= reminderMs) return { ...current, lastNotifiedAt: now, notify: 'reminder' };
    return { ...current, notify: null };
  }
  if (since(current.stateChangedAt) >= durationS * 1000) return { ...current, state: 'ok', stateChangedAt: now, lastNotifiedAt: now, notify: 'resolved' };
  return { ...current, notify: null };
}

export interface AlertEvaluatorOptions {
  db: Db;
  clickhouse: ClickHouseClient;
  mailer: Mailer;
  log: Logger;
  /** BASE_URL, for the statistics link in notifications. */
  baseUrl: string;
  /** ALERT_INTERVAL_S in ms. */
  intervalMs: number;
  /** The clock (epoch ms); default Date.now. */
  now?: () => number;
  /** Names this evaluator in the round ledger; default hostname:pid. */
  holder?: string;
  /** A rate (errorRate, clientErrorRate) needs at least this many requests in its window to count (default 10). */
  minErrorRateRequests?: number;
  reminderMs?: number;
  /** How often due notifications (retries) are looked for between rounds; default min(5 s, interval). */
  deliveryPollMs?: number;
  /** Webhook transport, back-off and the like (db, mailer, log and metrics come from above). */
  delivery?: Omit<DeliveryOptions, 'db' | 'mailer' | 'log' | 'metrics'>;
  /** Counts rounds and notifications (src/metrics/). */
  metrics?: Metrics;
}

export type RoundResult =
  | { ran: false; reason: 'busy' | 'taken' | 'superseded' }
  | {
      ran: true;
      at: string;
      /** Enabled alerts when the round was claimed: each one's state machine ran. */
      alerts: number;
      /** Alert rows written: those whose persisted fields changed (less any changed through the API meanwhile). */
      written: number;
      notifications: Record<NotificationKind, number>;
      ms: number;
      /** Where the time went: the claim transaction, the ClickHouse query, the apply transaction. */
      phases: { claimMs: number; measureMs: number; applyMs: number };
    };

export interface AlertEvaluator {
  /** One round at `nowMs` (default: the clock), if this process is the first to claim its interval. */
  evaluateOnce(nowMs?: number): Promise<RoundResult>;
  /** Delivers the notifications due at `nowMs` (default: the clock). */
  deliverDue(nowMs?: number): Promise<DeliveryResult>;
  /** Stops the timers and waits for the round and deliveries in flight. */
  stop(): Promise<void>;
}

/** An evaluator without timers: rounds and deliveries run when called (tests, `startAlertEvaluator`). */
export function createAlertEvaluator(options: AlertEvaluatorOptions): AlertEvaluator {
  const { db, clickhouse, intervalMs } = options;
  const log = options.log.child({ component: 'alerts' });
  const clock = options.now ?? Date.now;
  const holder = options.holder ?? `${os.hostname()}:${process.pid}`;
  const minRequests = options.minErrorRateRequests ?? MIN_ERROR_RATE_REQUESTS;
  const reminderMs = options.reminderMs ?? REMINDER_MS;
  const deliverer = createDeliverer({ ...options.delivery, db, mailer: options.mailer, log: options.log, metrics: options.metrics });
  let lastPruneMs = 0;
  // What is in flight, for stop().
  const inFlight = new Set<Promise<unknown>>();
  const track = <T>(work: Promise<T>): Promise<T> => {
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work)).catch(() => {});
    return work;
  };

  /** The facts of a notification; `a` holds the state before the step, `state` the one after. */
  function payloadOf(a: EvaluationDefinition, kind: NotificationKind, state: StateFields, value: number | null, requests: number, nowMs: number): NotificationPayload {
    const firingSince = kind === 'firing' ? state.stateChangedAt : a.state_changed_at;
    return {
      kind,
      state: state.state,
      alert: { id: a.id, name: a.name, condition: a.condition, operator: a.operator, threshold: Number(a.threshold), duration: a.duration },
      domain: { id: a.domain_id, name: a.domain_name },
      value,
      requests,
      ...(RATE_CONDITIONS.includes(a.condition) ? { minRequests } : {}),
      window: { start: new Date(nowMs - a.duration * 1000).toISOString(), end: new Date(nowMs).toISOString() },
      firingSince: firingSince === null ? null : new Date(firingSince).toISOString(),
      statsUrl: statsUrl(options.baseUrl, a.domain_id, a.duration),
    };
  }

  async function round(nowMs: number): Promise<RoundResult> {
    const started = performance.now();
    const at = new Date(nowMs);
    const intervalStart = new Date(Math.floor(nowMs / intervalMs) * intervalMs);
    const roundAt = at.toISOString();
    // 1. CLAIM
    const { outcome, definitions } = await db.transaction(async (tx) => {
      const claim = await claimRound(tx, { at, intervalStart, holder, staleAfterS: Math.max(60, (3 * intervalMs) / 1000) });
      return { outcome: claim, definitions: claim === 'claimed' ? await enabledAlertDefinitions(tx) : [] };
    });
    if (outcome !== 'claimed') {
      log.debug({ roundAt, reason: outcome }, 'alert round skipped');
      return { ran: false, reason: outcome };
    }
    const claimed = performance.now();
    // 2. MEASURE
    const windows = definitions.map((a) => ({ domainId: a.domain_id, duration: a.duration }));
    const figures = await windowFigures(clickhouse, windows, nowMs, definitions.map((a) => a.condition));
    const measured = performance.now();
    // 3. APPLY
    const notifications: Record<NotificationKind, number> = { firing: 0, resolved: 0, reminder: 0 };
    const applied = await db.transaction(async (tx) => {
      if (!(await lockRoundForApply(tx, { at, holder }))) return null;
      const writes: EvaluationWrite[] = [];
      const outbox: (NewNotification & { facts: Record<string, unknown> })[] = [];
      for (const a of definitions) {
        const f = figures.get(windowKey({ domainId: a.domain_id, duration: a.duration }))!;
        const value = metricOf(a.condition, f, minRequests);
        const met = value !== null && compare(value, a.operator, Number(a.threshold));
        const before: StateFields = {
          state: a.state,
          stateChangedAt: a.state_changed_at && new Date(a.state_changed_at),
          lastNotifiedAt: a.last_notified_at && new Date(a.last_notified_at),
          lastTriggeredAt: a.last_triggered_at && new Date(a.last_triggered_at),
        };
        const next = step(before, met, nowMs, a.duration, reminderMs);
        if (before.state === 'firing' && !met && next.state === 'firing') {
          log.debug({ alertId: a.id, value }, 'alert below its threshold but firing for less than its duration: resolution held');
        }
        // Nothing the row keeps changes, and this definition's figures were written before: the
        // row is left alone (see "What a round writes").
        if (!stateChanged(before, next) && a.last_evaluated_at !== null) continue;
        writes.push({ id: a.id, version: new Date(a.updated_at), value, requests: f.requests, evaluatedAt: at, ...next });
        if (next.notify) {
          outbox.push({
            alertId: a.id,
            kind: next.notify,
            payload: payloadOf(a, next.notify, next, value, f.requests, nowMs),
            facts: { alertId: a.id, domainId: a.domain_id, event: next.notify, state: next.state, condition: a.condition, value, threshold: Number(a.threshold), requests: f.requests },
          });
        }
      }
      // A row disabled, changed or deleted through the API since the claim is not written: its
      // notification waits for the next round, which evaluates the alert as it is then.
      const written = await saveEvaluations(tx, writes);
      const queued = outbox.filter((n) => written.has(n.alertId));
      await enqueueNotifications(tx, queued.map(({ facts: _facts, ...n }) => n), at);
      for (const n of queued) {
        notifications[n.kind]++;
        log.info(n.facts, `alert ${n.kind}`);
      }
      return written.size;
    });
    if (applied === null) {
      log.debug({ roundAt }, 'alert round superseded by a later one');
      return { ran: false, reason: 'superseded' };
    }
    const done = performance.now();
    const ms = done - started;
    const phases = { claimMs: claimed - started, measureMs: measured - claimed, applyMs: done - measured };
    log.debug({ roundAt, alerts: definitions.length, written: applied, ...notifications, ms: Math.round(ms), applyMs: Math.round(phases.applyMs) }, 'alert round');
    if (ms > intervalMs) log.warn({ roundAt, ms: Math.round(ms), intervalMs }, 'an alert round took longer than ALERT_INTERVAL_S');
    return { ran: true, at: roundAt, alerts: definitions.length, written: applied, notifications, ms, phases };
  }

  const counted = (work: Promise<RoundResult>) =>
    work.then(
      (result) => {
        options.metrics?.alertRound(result.ran ? 'ran' : result.reason);
        return result;
      },
      (err: unknown) => {
        options.metrics?.alertRound('failed');
        throw err;
      },
    );

  let delivering: Promise<DeliveryResult> | null = null;
  async function deliver(nowMs: number): Promise<DeliveryResult> {
    if (nowMs - lastPruneMs > 3_600_000) {
      lastPruneMs = nowMs;
      const pruned = await pruneNotifications(db, new Date(nowMs - KEEP_NOTIFICATIONS_MS), new Date(nowMs));
      if (pruned > 0) log.info({ pruned }, 'old alert notifications pruned');
    }
    return deliverer.deliverDue(nowMs);
  }

  return {
    evaluateOnce: (nowMs?: number) => track(counted(round(nowMs ?? clock()))),
    // One delivery pass at a time per evaluator: a call while one runs joins it.
    deliverDue: (nowMs?: number) => (delivering ??= track(deliver(nowMs ?? clock())).finally(() => (delivering = null))),
    async stop() {
      deliverer.abort();
      await Promise.allSettled([...inFlight]);
    },
  };
}

/**
 * Starts the evaluator of `serve`: a round just after each interval boundary of the clock (every
 * process ticks at the same moments and the first claims the round), a delivery pass after each round and
 * every `deliveryPollMs` for retries. Failures are logged and the next tick tries again. `stop()`
 * clears the timers and waits for the work in flight; call it before the stores close.
 */
export function startAlertEvaluator(options: AlertEvaluatorOptions): AlertEvaluator {
  const evaluator = createAlertEvaluator(options);
  const log = options.log.child({ component: 'alerts' });
  const clock = options.now ?? Date.now;
  const { intervalMs } = options;
  const pollMs = options.deliveryPollMs ?? Math.min(5_000, intervalMs);
  let stopped = false;
  let roundTimer: NodeJS.Timeout | undefined;

  const deliver = () =>
    evaluator.deliverDue().catch((err: unknown) => {
      if (!stopped) log.error({ err }, 'alert notification delivery failed');
    });

  // 'busy' means another process held the lock for an instant (its claim, or the apply of a round
  // that ran late): try again shortly rather than leave the interval to nobody.
  const claimWithRetry = async () => {
    for (let attempt = 1; ; attempt++) {
      const result = await evaluator.evaluateOnce();
      if (result.ran || result.reason !== 'busy' || attempt === 3) return result;
      await new Promise((resolve) => setTimeout(resolve, 100 * attempt));
      if (stopped) return result;
    }
  };

  const scheduleRound = () => {
    if (stopped) return;
    const now = clock();
    // Just past the next boundary, so the round falls in the new interval.
    const delay = (Math.floor(now / intervalMs) + 1) * intervalMs - now + 20;
    roundTimer = setTimeout(() => {
      if (stopped) return;
      claimWithRetry()
        .then(
          // Delivery runs beside the next round's wait, never delaying it.
          (result) => {
            if (result.ran && !stopped) void deliver();
          },
          (err: unknown) => {
            if (!stopped) log.error({ err }, 'alert round failed');
          },
        )
        .finally(scheduleRound);
    }, delay);
  };
  scheduleRound();
  const pollTimer = setInterval(() => {
    if (!stopped) void deliver();
  }, pollMs);
  log.info({ intervalMs, holder: options.holder ?? `${os.hostname()}:${process.pid}` }, 'alert evaluator started');

  return {
    evaluateOnce: evaluator.evaluateOnce,
    deliverDue: evaluator.deliverDue,
    async stop() {
      stopped = true;
      clearTimeout(roundTimer);
      clearInterval(pollTimer);
      await evaluator.stop();
    },
  };
}
