/**
 * The alert evaluator (docs/reference/alerts.md#evaluation): every interval, each enabled alert's
 * metric over its trailing `duration` on each domain it covers (its domain, or a rule's domains),
 * each (alert, domain) pair's state machine ok → firing → ok, the silences that hold its
 * notifications back, and one notification per target for the round's changes.
 *
 * ## One evaluator among several `serve` processes
 *
 * The Db interface has no reserved connection, so a session advisory lock (held by a leader for
 * its lifetime) is not available; transaction-scoped advisory locks are. A round is:
 *
 *  1. CLAIM, a short transaction: `pg_try_advisory_xact_lock` (busy: another process is in its
 *     own claim or apply this instant, so skip), then the round ledger (alert_evaluator, one row)
 *     takes this round's time only if its last round is older than the start of the current
 *     interval (floor(now / interval) × interval); the enabled alerts' (alert, domain) pairs are read
 *     with their states, and the silences in force or to come.
 *     Every process ticks just after each interval boundary, the first one wins, the others skip:
 *     one round per interval for the whole cluster, and when the winner dies, whoever ticks first
 *     in the next interval evaluates (takeover within one interval, with no lease to expire).
 *  2. MEASURE, outside any transaction: one ClickHouse query for all alerts (metrics.ts). Holding a
 *     transaction across it would, in embedded mode, block every other PGlite query meanwhile.
 *  3. APPLY, a short transaction: `pg_advisory_xact_lock` (waits, since holders are all short),
 *     check that the ledger still holds this round (else a later round was claimed while this one
 *     measured, and this round's older figures are dropped), run each pair's state machine on the
 *     state read at the claim, write the pairs whose state changes in one statement, record their
 *     history, and add their events to their targets' notifications in the outbox (outbox.ts), in
 *     the same transaction.
 *
 * The state read at the claim is still current at the apply: only applies write it, and once the
 * ledger holds this round no other round's apply passes its ledger check (see
 * evaluationPairs in store.ts). A notification is written in the transaction that changes
 * the state, and only for a pair that write reached (an alert changed through the API in between
 * waits for the next round), so neither a second process nor a restart can send a transition twice
 * or lose one. Delivery (delivery.ts) claims outbox rows in transactions of its own (FOR UPDATE
 * SKIP LOCKED) and talks to the mail server or webhook outside of any, so a slow SMTP server never
 * holds the evaluator's lock.
 *
 * ## What a round writes
 *
 * Only the pairs whose state changes (alert_states: a transition, a notification, a reminder),
 * with a history entry for each transition; a pair whose state stays is neither written nor
 * row-locked (at 3,000 alerts, rewriting every row each round cost tens of milliseconds and a dead
 * row version per alert per round). The round's value of every pair goes into one row
 * (alert_evaluator.last_values), which the API shows beside each state. A pair without a state row
 * is ok and never notified.
 *
 * ## The state machine (per pair)
 *
 * - ok, condition met → firing: last_triggered_at = state_changed_at = now.
 * - firing, not met → ok, but not before the pair has been firing for its alert's `duration` (the
 *   flapping guard): an alert that crosses its threshold back and forth changes at most twice per
 *   duration, stays `firing` meanwhile, and a real breach is never delayed (holding the
 *   resolution, not the firing).
 * - "Not met" includes a window without data: a rate below the minimum of requests
 *   (MIN_ERROR_RATE_REQUESTS, option `minErrorRateRequests`), a response-time metric without any
 *   response time, a requestChange without enough traffic a week before (metrics.ts). Such a
 *   window never fires, and lets a firing pair resolve.
 * - Notifications follow what the target was told (notified_state): unless a silence covers the
 *   pair, a state that differs from it is notified (`firing` or `resolved`), and a pair still
 *   firing gets a `reminder` every ALERT_REPEAT_S. A silenced pair is evaluated and shown but
 *   nothing is sent; when the silence ends, a state the target does not know yet is notified then.
 * - An alert changed through the API between the claim and the apply waits for the next round;
 *   a disabled alert is not evaluated at all and keeps its states until it is enabled again. The
 *   state of a domain that left a rule's scope is forgotten.
 *
 * Times (windows, state changes, reminders, retries) come from the injectable clock, so the tests
 * can move it by hours; processes sharing a database are expected to keep their clocks in sync.
 */
import { HOUR_MS, DAY_MS } from '../../core/durations.js';
import os from 'node:os';
import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Db } from '../../core/db/postgres.js';
import type { Logger } from '../../core/log.js';
import type { Mailer } from '../mail/mailer.js';
import type { Metrics } from '../metrics/registry.js';
import { createDeliverer, type DeliveryOptions, type DeliveryResult } from './delivery.js';
import { measure, measureKey, MIN_ERROR_RATE_REQUESTS, RATE_CONDITIONS, type Measure } from './metrics.js';
import { dashboardUrl, type AlertEvent, type EventKind } from './notifications.js';
import { enqueueEvents, pruneNotifications, type TargetEvents } from './outbox.js';
import { queryFiltersOf, type Operator } from './schemas.js';
import type { QueryFilter } from '../stats/query/filters.js';
import { silenceOf } from './silences/match.js';
import { liveSilences } from './silences/store.js';
import {
  claimRound,
  dropLeftStates,
  evaluationPairs,
  lockRoundForApply,
  pruneHistory,
  recordHistory,
  saveLastValues,
  saveStates,
  type AlertState,
  type EvaluationPair,
  type HistoryEntry,
  type StateWrite,
} from './store.js';

/** While firing, a reminder at most this often (ALERT_REPEAT_S's default). */
export const REPEAT_MS = 4 * HOUR_MS;

/** How long a notification waits for more events to its target (ALERT_GROUP_WAIT_S's default). */
export const GROUP_WAIT_MS = 30_000;

/** Delivered and abandoned outbox rows are kept this long. */
const KEEP_NOTIFICATIONS_MS = 30 * DAY_MS;

/** State changes are kept this long (GET …/alerts/history). */
const KEEP_HISTORY_MS = 90 * DAY_MS;

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

/** What a pair keeps between rounds (alert_states). */
export interface PairState {
  state: AlertState;
  stateChangedAt: Date | null;
  lastTriggeredAt: Date | null;
  /** What the target was last told. */
  notifiedState: AlertState;
  lastNotifiedAt: Date | null;
}

export const NEW_PAIR: PairState = { state: 'ok', stateChangedAt: null, lastTriggeredAt: null, notifiedState: 'ok', lastNotifiedAt: null };

/** Whether a step changed anything the pair's row keeps. */
export function stateChanged(before: PairState, after: PairState): boolean {
  const same = (a: Date | null, b: Date | null) => (a === null || b === null ? a === b : a.getTime() === b.getTime());
  return (
    before.state !== after.state ||
    before.notifiedState !== after.notifiedState ||
    !same(before.stateChangedAt, after.stateChangedAt) ||
    !same(before.lastNotifiedAt, after.lastNotifiedAt) ||
    !same(before.lastTriggeredAt, after.lastTriggeredAt)
  );
}

/** One step of a pair's state machine and its notification (see the module comment); pure. */
export function step(
  current: PairState,
  met: boolean,
  silenced: boolean,
  nowMs: number,
  durationS: number,
  repeatMs = REPEAT_MS,
): PairState & { notify: EventKind | null } {
  const now = new Date(nowMs);
  const since = (d: Date | null) => (d === null ? Infinity : nowMs - d.getTime());
  let next: PairState = current;
  if (current.state === 'ok' && met) next = { ...current, state: 'firing', stateChangedAt: now, lastTriggeredAt: now };
  else if (current.state === 'firing' && !met && since(current.stateChangedAt) >= durationS * 1000) next = { ...current, state: 'ok', stateChangedAt: now };
  if (silenced) return { ...next, notify: null };
  if (next.state !== next.notifiedState) return { ...next, notifiedState: next.state, lastNotifiedAt: now, notify: next.state === 'firing' ? 'firing' : 'resolved' };
  if (next.state === 'firing' && since(next.lastNotifiedAt) >= repeatMs) return { ...next, lastNotifiedAt: now, notify: 'reminder' };
  return { ...next, notify: null };
}

const stateOf = (p: EvaluationPair): PairState =>
  p.state === null
    ? NEW_PAIR
    : {
        state: p.state,
        stateChangedAt: p.state_changed_at && new Date(p.state_changed_at),
        lastTriggeredAt: p.last_triggered_at && new Date(p.last_triggered_at),
        notifiedState: p.notified_state ?? 'ok',
        lastNotifiedAt: p.last_notified_at && new Date(p.last_notified_at),
      };

/** The pairs' measures; an alert's filters are parsed once per round, whatever its number of domains. */
function measuresOf(pairs: readonly EvaluationPair[]): Measure[] {
  const parsed = new Map<number, QueryFilter[]>();
  return pairs.map((p) => {
    let filters = parsed.get(p.alert_id);
    if (!filters) parsed.set(p.alert_id, (filters = queryFiltersOf(p.filters)));
    return { domainId: p.domain_id, duration: p.duration, filters, condition: p.condition };
  });
}

export interface AlertEvaluatorOptions {
  db: Db;
  clickhouse: ClickHouseClient;
  mailer: Mailer;
  log: Logger;
  /** BASE_URL, for the dashboard links in notifications. */
  baseUrl: string;
  /** ALERT_INTERVAL_S in ms. */
  intervalMs: number;
  /** ALERT_GROUP_WAIT_S in ms: a notification waits this long for more events to its target (default GROUP_WAIT_MS). */
  groupWaitMs?: number;
  /** ALERT_REPEAT_S in ms: while firing, a reminder this often (default REPEAT_MS). */
  repeatMs?: number;
  /** The clock (epoch ms); default Date.now. */
  now?: () => number;
  /** Names this evaluator in the round ledger; default hostname:pid. */
  holder?: string;
  /** A rate (errorRate, clientErrorRate) needs at least this many requests in its window to count (default 10). */
  minErrorRateRequests?: number;
  /** How often due notifications (retries) are looked for between rounds; default min(5 s, interval). */
  deliveryPollMs?: number;
  /** Webhook transport, back-off and the like (db, mailer, log, metrics and baseUrl come from above). */
  delivery?: Omit<DeliveryOptions, 'db' | 'mailer' | 'log' | 'metrics' | 'baseUrl'>;
  /** Counts rounds and notifications (src/metrics/). */
  metrics?: Metrics;
}

export type RoundResult =
  | { ran: false; reason: 'busy' | 'taken' | 'superseded' }
  | {
      ran: true;
      at: string;
      /** Enabled alerts when the round was claimed. */
      alerts: number;
      /** Their (alert, domain) pairs: each one's state machine ran. */
      pairs: number;
      /** Pairs written: those whose state changed (less any of an alert changed through the API meanwhile). */
      written: number;
      /** Events per kind, and the notifications (targets) they went into. */
      notifications: Record<EventKind, number> & { targets: number };
      /** Pairs whose notification a silence held back this round. */
      silenced: number;
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
  const repeatMs = options.repeatMs ?? REPEAT_MS;
  const groupWaitMs = options.groupWaitMs ?? GROUP_WAIT_MS;
  const deliverer = createDeliverer({ ...options.delivery, db, mailer: options.mailer, log: options.log, metrics: options.metrics, baseUrl: options.baseUrl });
  let lastPruneMs = 0;
  // What is in flight, for stop().
  const inFlight = new Set<Promise<unknown>>();
  const track = <T>(work: Promise<T>): Promise<T> => {
    inFlight.add(work);
    void work.finally(() => inFlight.delete(work)).catch(() => {});
    return work;
  };

  /** The facts of a pair's notification, from its state after the step. */
  function eventOf(p: EvaluationPair, filters: readonly QueryFilter[], kind: EventKind, after: PairState, value: number | null, requests: number, nowMs: number): AlertEvent {
    const window = { start: new Date(nowMs - p.duration * 1000).toISOString(), end: new Date(nowMs).toISOString() };
    return {
      kind,
      alert: { id: p.alert_id, name: p.name, condition: p.condition, operator: p.operator, threshold: Number(p.threshold), duration: p.duration, filters: p.filters },
      domain: { id: p.domain_id, name: p.domain_name },
      value,
      requests,
      ...(RATE_CONDITIONS.includes(p.condition) ? { minRequests } : {}),
      window,
      startsAt: (after.lastTriggeredAt ?? new Date(nowMs)).toISOString(),
      endsAt: after.state === 'ok' ? (after.stateChangedAt ?? new Date(nowMs)).toISOString() : null,
      dashboardUrl: dashboardUrl(options.baseUrl, p.domain_id, window, filters),
      configuredBy: p.configured_by_name === null || p.configured_by_email === null ? null : { name: p.configured_by_name, email: p.configured_by_email },
    };
  }

  async function round(nowMs: number): Promise<RoundResult> {
    const started = performance.now();
    const at = new Date(nowMs);
    const intervalStart = new Date(Math.floor(nowMs / intervalMs) * intervalMs);
    const roundAt = at.toISOString();
    // 1. CLAIM
    const claim = await db.transaction(async (tx) => {
      const outcome = await claimRound(tx, { at, intervalStart, holder, staleAfterS: Math.max(60, (3 * intervalMs) / 1000) });
      if (outcome !== 'claimed') return { outcome, pairs: [], left: [], silences: [] };
      return { outcome, ...(await evaluationPairs(tx)), silences: await liveSilences(tx, at) };
    });
    if (claim.outcome !== 'claimed') {
      log.debug({ roundAt, reason: claim.outcome }, 'alert round skipped');
      return { ran: false, reason: claim.outcome };
    }
    const { pairs, left, silences } = claim;
    const claimed = performance.now();
    // 2. MEASURE
    const measures = measuresOf(pairs);
    const measured = await measure(clickhouse, measures, nowMs, minRequests);
    const measuredAt = performance.now();
    // 3. APPLY
    const notifications = { firing: 0, resolved: 0, reminder: 0, targets: 0 };
    let silencedPairs = 0;
    const applied = await db.transaction(async (tx) => {
      if (!(await lockRoundForApply(tx, { at, holder }))) return null;
      const writes: (StateWrite & { pair: EvaluationPair; measure: Measure; before: PairState; notify: EventKind | null; value: number | null; requests: number; silenceId: number | null })[] = [];
      const values: Record<string, Record<string, number | null>> = {};
      for (const [i, p] of pairs.entries()) {
        const { value, requests } = measured.get(measureKey(measures[i]!))!;
        (values[p.alert_id] ??= {})[p.domain_id] = value;
        const met = value !== null && compare(value, p.operator, Number(p.threshold));
        const before = stateOf(p);
        const silenceId = silenceOf(silences, p.alert_id, p.domain_id, nowMs);
        const next = step(before, met, silenceId !== null, nowMs, p.duration, repeatMs);
        if (silenceId !== null && next.state !== next.notifiedState) silencedPairs++;
        if (before.state === 'firing' && !met && next.state === 'firing') {
          log.debug({ alertId: p.alert_id, domainId: p.domain_id, value }, 'alert below its threshold but firing for less than its duration: resolution held');
        }
        if (!stateChanged(before, next)) continue;
        const { notify, ...state } = next;
        writes.push({ ...state, alertId: p.alert_id, domainId: p.domain_id, version: new Date(p.updated_at), pair: p, measure: measures[i]!, before, notify, value, requests, silenceId });
      }
      // A pair of an alert disabled, changed or deleted through the API since the claim is not
      // written: its notification waits for the next round, which evaluates the alert as it is then.
      const written = await saveStates(tx, writes);
      const done = writes.filter((w) => written.has(`${w.alertId}:${w.domainId}`));
      await dropLeftStates(tx, left);
      await saveLastValues(tx, values);
      const history: HistoryEntry[] = done
        .filter((w) => w.state !== w.before.state)
        .map((w) => ({ alertId: w.alertId, alertName: w.pair.name, ruleOwner: w.pair.rule_owner, domainId: w.domainId, from: w.before.state, to: w.state, at, value: w.value, notified: w.notify !== null, silenceId: w.silenceId }));
      await recordHistory(tx, history);
      const byTarget = new Map<string, TargetEvents>();
      for (const w of done) {
        if (!w.notify) continue;
        const key = `${w.pair.notification_method} ${w.pair.notification_target}`;
        const batch = byTarget.get(key) ?? { method: w.pair.notification_method, target: w.pair.notification_target, events: [] };
        batch.events.push(eventOf(w.pair, w.measure.filters, w.notify, w, w.value, w.requests, nowMs));
        byTarget.set(key, batch);
        notifications[w.notify]++;
        log.info({ alertId: w.alertId, domainId: w.domainId, event: w.notify, state: w.state, condition: w.pair.condition, value: w.value, threshold: Number(w.pair.threshold) }, `alert ${w.notify}`);
      }
      notifications.targets = byTarget.size;
      await enqueueEvents(tx, [...byTarget.values()], at, groupWaitMs);
      return done.length;
    });
    if (applied === null) {
      log.debug({ roundAt }, 'alert round superseded by a later one');
      return { ran: false, reason: 'superseded' };
    }
    const done = performance.now();
    const ms = done - started;
    const phases = { claimMs: claimed - started, measureMs: measuredAt - claimed, applyMs: done - measuredAt };
    const alerts = new Set(pairs.map((p) => p.alert_id)).size;
    log.debug({ roundAt, alerts, pairs: pairs.length, written: applied, ...notifications, silenced: silencedPairs, ms: Math.round(ms), applyMs: Math.round(phases.applyMs) }, 'alert round');
    if (ms > intervalMs) log.warn({ roundAt, ms: Math.round(ms), intervalMs }, 'an alert round took longer than ALERT_INTERVAL_S');
    return { ran: true, at: roundAt, alerts, pairs: pairs.length, written: applied, notifications, silenced: silencedPairs, ms, phases };
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
    if (nowMs - lastPruneMs > HOUR_MS) {
      lastPruneMs = nowMs;
      const pruned = await pruneNotifications(db, new Date(nowMs - KEEP_NOTIFICATIONS_MS), new Date(nowMs));
      const forgotten = await pruneHistory(db, new Date(nowMs - KEEP_HISTORY_MS));
      if (pruned + forgotten > 0) log.info({ pruned, history: forgotten }, 'old alert notifications and history pruned');
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
