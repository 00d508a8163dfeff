import type { Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import type { AlertDefinition, Condition, NotificationMethod, Operator } from './schemas.js';

export interface AlertRow {
  id: number;
  domain_id: number;
  name: string;
  condition: Condition;
  operator: Operator;
  threshold: number;
  duration: number;
  notification_method: NotificationMethod;
  notification_target: string;
  enabled: boolean;
  state: 'ok' | 'firing';
  last_triggered_at: Date | null;
  last_delivery_error: string | null;
  last_delivered_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

export interface Alert extends AlertDefinition {
  id: number;
  state: 'ok' | 'firing';
  lastTriggeredAt: string | null;
  /** Beyond the specification: the last failed delivery's error, cleared by the next success. */
  lastDeliveryError: string | null;
  /** Beyond the specification: when a notification was last delivered. */
  lastDeliveredAt: string | null;
  createdAt: string;
}

const isoOrNull = (d: Date | null) => (d === null ? null : new Date(d).toISOString());

export const toAlert = (row: AlertRow): Alert => ({
  id: row.id,
  name: row.name,
  condition: row.condition,
  operator: row.operator,
  threshold: Number(row.threshold),
  duration: row.duration,
  notificationMethod: row.notification_method,
  notificationTarget: row.notification_target,
  enabled: row.enabled,
  state: row.state,
  lastTriggeredAt: isoOrNull(row.last_triggered_at),
  lastDeliveryError: row.last_delivery_error,
  lastDeliveredAt: isoOrNull(row.last_delivered_at),
  createdAt: new Date(row.created_at).toISOString(),
});

export const definitionOf = (row: AlertRow): AlertDefinition => {
  const { id: _id, state: _state, lastTriggeredAt: _last, lastDeliveryError: _error, lastDeliveredAt: _delivered, createdAt: _created, ...definition } = toAlert(row);
  return definition;
};

/** The user who sets an alert's definition, as named when they do: what its notifications say. */
export interface Configurer {
  id: number;
  name: string;
  email: string;
}

/**
 * The namespace of the per-domain advisory lock (two-key form: namespace, domain id) under which
 * a domain's alerts are counted and one is added; the single-key locks (migrations, bootstrap,
 * evaluator) live in a separate key space.
 */
const DOMAIN_ALERTS_LOCK = 74_182_310;

/**
 * Adds an alert unless the domain already holds `maxPerDomain`: null then. The count and the
 * insert run in one transaction under the domain's advisory lock, so concurrent creations (any
 * process) are counted one after the other and never overshoot.
 */
export async function insertAlertWithinCap(db: Db, domainId: number, by: Configurer, d: AlertDefinition, maxPerDomain: number): Promise<AlertRow | null> {
  return db.transaction(async (tx) => {
    await tx.query(sql`select pg_advisory_xact_lock(${DOMAIN_ALERTS_LOCK}::int, ${domainId}::int)`);
    const [held] = await tx.query<{ n: number }>(sql`select count(*)::int as n from alerts where domain_id = ${domainId}`);
    if ((held?.n ?? 0) >= maxPerDomain) return null;
    const [row] = await tx.query<AlertRow>(sql`
      insert into alerts (domain_id, name, condition, operator, threshold, duration, notification_method, notification_target, enabled,
                          created_by, configured_by, configured_by_name, configured_by_email)
      values (${domainId}, ${d.name}, ${d.condition}, ${d.operator}, ${d.threshold}, ${d.duration}, ${d.notificationMethod}, ${d.notificationTarget}, ${d.enabled},
              ${by.id}, ${by.id}, ${by.name}, ${by.email})
      returning *`);
    return row!;
  });
}

export async function listAlerts(db: Db, domainId: number): Promise<AlertRow[]> {
  return db.query<AlertRow>(sql`select * from alerts where domain_id = ${domainId} order by id`);
}

/** The enabled alerts firing now among those of `domainIds`, by domain and id. */
export async function listFiringAlerts(db: Db, domainIds: readonly number[]): Promise<AlertRow[]> {
  return db.query<AlertRow>(sql`
    select * from alerts
    where state = 'firing' and enabled and domain_id in (select (jsonb_array_elements_text(${JSON.stringify(domainIds)}::text::jsonb))::int)
    order by domain_id, id`);
}

/** The alert if it belongs to the domain: another domain's alert id is as unknown as a missing one. */
export async function findAlert(db: Db, domainId: number, alertId: number): Promise<AlertRow | undefined> {
  const [row] = await db.query<AlertRow>(sql`select * from alerts where id = ${alertId} and domain_id = ${domainId}`);
  return row;
}

/**
 * Replaces the definition; `by` becomes the alert's configurer (what its notifications name).
 * The figures of the last evaluation are cleared: they measured the old
 * definition, and a cleared snapshot is what makes the next round write the new one's figures
 * (a round otherwise writes only alerts whose state changes, see saveEvaluations).
 */
export async function updateAlert(db: Db, domainId: number, alertId: number, d: AlertDefinition, by: Configurer): Promise<AlertRow | undefined> {
  const [row] = await db.query<AlertRow>(sql`
    update alerts
    set name = ${d.name}, condition = ${d.condition}, operator = ${d.operator}, threshold = ${d.threshold}, duration = ${d.duration},
        notification_method = ${d.notificationMethod}, notification_target = ${d.notificationTarget}, enabled = ${d.enabled}, updated_at = now(),
        configured_by = ${by.id}, configured_by_name = ${by.name}, configured_by_email = ${by.email},
        last_value = null, last_requests = null, last_evaluated_at = null
    where id = ${alertId} and domain_id = ${domainId}
    returning *`);
  return row;
}

export async function deleteAlert(db: Db, domainId: number, alertId: number): Promise<boolean> {
  const rows = await db.query(sql`delete from alerts where id = ${alertId} and domain_id = ${domainId} returning id`);
  return rows.length > 0;
}

// ---------------------------------------------------------------------------------------------
// Evaluation (src/alerts/evaluator.ts, sql/postgres/005_alert_evaluation.sql)
// ---------------------------------------------------------------------------------------------

/** The advisory lock of the evaluator's transactions (migrations hold …0001, the bootstrap …0002). */
const EVALUATOR_LOCK = 7418230005;

/**
 * The first transaction of a round: the advisory lock if free (else another process is claiming or
 * applying a round this instant: skip), then the claim of the round ledger, which succeeds only if
 * the last claimed round is older than `intervalStart` (the start of the interval `at` falls in):
 * one round per interval whichever process ticks first. A ledger nobody claimed for `staleAfterS`
 * seconds of the database's own clock is taken whatever it says, so a process whose clock once ran
 * far ahead cannot stop evaluation until real time catches up.
 */
export async function claimRound(tx: Db, round: { at: Date; intervalStart: Date; holder: string; staleAfterS: number }): Promise<'claimed' | 'busy' | 'taken'> {
  const [lock] = await tx.query<{ locked: boolean }>(sql`select pg_try_advisory_xact_lock(${EVALUATOR_LOCK}) as locked`);
  if (!lock?.locked) return 'busy';
  const rows = await tx.query(sql`
    update alert_evaluator set round_at = ${round.at}, holder = ${round.holder}, claimed_db_at = now()
    where id = 1 and (round_at is null or round_at < ${round.intervalStart} or claimed_db_at < now() - make_interval(secs => ${round.staleAfterS}))
    returning id`);
  return rows.length > 0 ? 'claimed' : 'taken';
}

/**
 * The second transaction of a round: waits for the advisory lock (held only by short transactions,
 * never across ClickHouse or delivery), then checks that the ledger still holds this round; false:
 * another round was claimed while this one measured, and its newer figures apply instead.
 */
export async function lockRoundForApply(tx: Db, round: { at: Date; holder: string }): Promise<boolean> {
  await tx.query(sql`set local lock_timeout = '10s'`);
  await tx.query(sql`select pg_advisory_xact_lock(${EVALUATOR_LOCK})`);
  const [row] = await tx.query<{ current: boolean }>(sql`
    select round_at = ${round.at} and holder = ${round.holder} as current from alert_evaluator where id = 1`);
  return row?.current === true;
}

/**
 * What a round needs of an enabled alert: its definition, its domain's name, its version
 * (updated_at), and its state machine's fields.
 *
 * Read once, in the claim transaction, under the evaluator's advisory lock. Only a round's apply
 * writes the state fields, and an apply goes ahead only if the ledger still holds its own round;
 * after this claim, that is this round alone (an older round's apply finds the ledger moved on,
 * and one that was applying at the claim held the lock, so the claim found it busy). So the state
 * read here is still the current one when this round applies, without re-reading or row-locking
 * every alert (FOR UPDATE writes a lock into each row: per round, the very cost the apply avoids
 * for alerts that do not change). A PUT or DELETE in between is caught by saveEvaluations.
 */
export interface EvaluationDefinition {
  id: number;
  domain_id: number;
  domain_name: string;
  name: string;
  condition: Condition;
  operator: Operator;
  threshold: number;
  duration: number;
  updated_at: Date;
  state: 'ok' | 'firing';
  state_changed_at: Date | null;
  last_notified_at: Date | null;
  last_triggered_at: Date | null;
  /** Null: no round has written this definition's figures yet (a new or changed alert). */
  last_evaluated_at: Date | null;
}

export async function enabledAlertDefinitions(db: Db): Promise<EvaluationDefinition[]> {
  return db.query<EvaluationDefinition>(sql`
    select a.id, a.domain_id, d.name as domain_name, a.name, a.condition, a.operator, a.threshold, a.duration, a.updated_at,
           a.state, a.state_changed_at, a.last_notified_at, a.last_triggered_at, a.last_evaluated_at
    from alerts a join domains d on d.id = a.domain_id
    where a.enabled
    order by a.id`);
}

/** One alert's outcome of a round that is to be persisted: its metric and its state fields. */
export interface EvaluationWrite {
  id: number;
  /** The alert's updated_at as the round read it: a row changed since (PUT) is left alone. */
  version: Date;
  value: number | null;
  requests: number;
  evaluatedAt: Date;
  state: 'ok' | 'firing';
  stateChangedAt: Date | null;
  lastNotifiedAt: Date | null;
  lastTriggeredAt: Date | null;
}

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/**
 * Writes a round's changed alerts in one statement and returns the ids written. A row whose
 * definition changed (updated_at) or that was disabled or deleted after the states were read is
 * skipped: the caller enqueues notifications only for the ids returned, so a state change is never
 * notified without being recorded. The written rows stay locked until the transaction ends.
 */
export async function saveEvaluations(tx: Db, writes: EvaluationWrite[]): Promise<Set<number>> {
  if (writes.length === 0) return new Set();
  const json = JSON.stringify(
    writes.map((w) => ({
      id: w.id,
      version: iso(w.version),
      value: w.value,
      requests: w.requests,
      evaluated_at: iso(w.evaluatedAt),
      state: w.state,
      state_changed_at: iso(w.stateChangedAt),
      last_notified_at: iso(w.lastNotifiedAt),
      last_triggered_at: iso(w.lastTriggeredAt),
    })),
  );
  const rows = await tx.query<{ id: number }>(sql`
    update alerts a
    set last_value = w.value, last_requests = w.requests, last_evaluated_at = w.evaluated_at, state = w.state,
        state_changed_at = w.state_changed_at, last_notified_at = w.last_notified_at, last_triggered_at = w.last_triggered_at
    from jsonb_to_recordset(${json}::text::jsonb) as w(
      id int, version timestamptz, value double precision, requests bigint, evaluated_at timestamptz, state text,
      state_changed_at timestamptz, last_notified_at timestamptz, last_triggered_at timestamptz)
    where a.id = w.id and a.updated_at = w.version and a.enabled
    returning a.id`);
  return new Set(rows.map((r) => Number(r.id)));
}

// ---------------------------------------------------------------------------------------------
// The notification outbox (src/alerts/delivery.ts)
// ---------------------------------------------------------------------------------------------

export type NotificationKind = 'firing' | 'resolved' | 'reminder';

export interface NewNotification {
  alertId: number;
  kind: NotificationKind;
  payload: unknown;
}

/** Enqueues a round's notifications in one statement, due at once. */
export async function enqueueNotifications(tx: Db, notifications: NewNotification[], at: Date): Promise<void> {
  if (notifications.length === 0) return;
  const json = JSON.stringify(notifications.map((n) => ({ alert_id: n.alertId, kind: n.kind, payload: n.payload })));
  await tx.query(sql`
    insert into alert_notifications (alert_id, kind, payload, created_at, next_attempt_at)
    select n.alert_id, n.kind, n.payload, ${at}, ${at}
    from jsonb_to_recordset(${json}::text::jsonb) as n(alert_id int, kind text, payload jsonb)
    order by n.alert_id`);
}

export interface ClaimedNotification {
  id: string | number;
  alert_id: number;
  kind: NotificationKind;
  payload: unknown;
  attempts: number;
  created_at: Date;
  notification_method: NotificationMethod;
  notification_target: string;
  /** Who set the alert's current definition, as named then (null: an alert older than that record). */
  configured_by_name: string | null;
  configured_by_email: string | null;
  /** When the per-target limit first held it back; null: never. */
  held_since: Date | null;
}

/** A due notification the per-target limit holds back: pending again at `next_attempt_at`. */
export interface HeldNotification {
  id: string | number;
  alert_id: number;
  kind: NotificationKind;
  created_at: Date;
  notification_method: NotificationMethod;
  notification_target: string;
  /** When its target's hour has room again. */
  next_attempt_at: Date;
  /** Held for the first time in this claim (else it was held before). */
  newly_held: boolean;
}

/** The per-target limit: at most `perHour` notifications to one target in any hour. */
export interface TargetLimit {
  perHour: number;
}

/**
 * The namespace of the per-target advisory lock (two-key form: namespace, hashtext(target)) under
 * which a target's sends of the last hour are counted and one is added.
 */
const TARGET_SENDS_LOCK = 74_182_311;

const HOUR_MS = 3_600_000;

/**
 * Claims up to `limit` due notifications for delivery until `leaseUntil`: only the oldest pending
 * one of each alert (a resolved notification never overtakes its firing one), rows another process
 * is claiming are skipped (SKIP LOCKED), and the claim commits at once, so no transaction or lock
 * is held while the mail server or webhook answers. A process that dies mid-delivery leaves the
 * row to be claimed again when the lease ends.
 *
 * The per-target limit: a notification may go to its alert's current target only if fewer than
 * `target.perHour` notifications went to that target in the hour before `at` (a retry of one
 * already counted there goes again). The count and the record of the new sends
 * (alert_target_sends) happen under each target's advisory lock, taken in a fixed order, so
 * deliverers in several processes never overshoot the limit together. A notification over it is
 * held, not dropped: it stays pending, due again when the oldest send of its target's hour turns
 * an hour old, and keeps its attempts (a hold is not an attempt).
 */
export async function claimNotifications(
  db: Db,
  at: Date,
  leaseUntil: Date,
  limit: number,
  target: TargetLimit,
): Promise<{ claimed: ClaimedNotification[]; held: HeldNotification[] }> {
  return db.transaction(async (tx) => {
    const due = await tx.query<{ id: string | number; target: string }>(sql`
      select n.id, a.notification_target as target
      from alert_notifications n join alerts a on a.id = n.alert_id
      where n.status = 'pending' and n.next_attempt_at <= ${at} and (n.claimed_until is null or n.claimed_until <= ${at})
        and not exists (select 1 from alert_notifications p where p.alert_id = n.alert_id and p.status = 'pending' and p.id < n.id)
      order by n.next_attempt_at, n.id
      limit ${limit}
      for update of n skip locked`);
    if (due.length === 0) return { claimed: [], held: [] };

    const targets = [...new Set(due.map((d) => d.target))].sort();
    for (const t of targets) await tx.query(sql`select pg_advisory_xact_lock(${TARGET_SENDS_LOCK}::int, hashtext(${t}))`);
    const sends = await tx.query<{ target: string; notification_id: string | number; sent_at: Date }>(sql`
      select s.target, s.notification_id, s.sent_at from alert_target_sends s
      where s.target in (select jsonb_array_elements_text(${JSON.stringify(targets)}::text::jsonb)) and s.sent_at > ${new Date(at.getTime() - HOUR_MS)}
      order by s.sent_at`);

    const sentTo = new Map<string, { ids: Set<string>; times: number[] }>(targets.map((t) => [t, { ids: new Set(), times: [] }]));
    for (const s of sends) {
      const entry = sentTo.get(s.target)!;
      entry.ids.add(String(s.notification_id));
      entry.times.push(new Date(s.sent_at).getTime());
    }
    const go: { id: string; target: string; first: boolean }[] = [];
    const wait: { id: string; next_attempt_at: string }[] = [];
    const heldPerTarget = new Map<string, number>();
    for (const d of due) {
      const entry = sentTo.get(d.target)!;
      const id = String(d.id);
      if (entry.ids.has(id)) go.push({ id, target: d.target, first: false });
      else if (entry.ids.size < target.perHour) {
        entry.ids.add(id);
        go.push({ id, target: d.target, first: true });
      } else {
        // The k-th notification held for a target is due when the k-th oldest send of its hour ages out.
        const k = heldPerTarget.get(d.target) ?? 0;
        heldPerTarget.set(d.target, k + 1);
        const freeAt = (entry.times[Math.min(k, entry.times.length - 1)] ?? at.getTime()) + HOUR_MS;
        wait.push({ id, next_attempt_at: new Date(freeAt).toISOString() });
      }
    }

    const fresh = go.filter((g) => g.first).map((g) => ({ target: g.target, notification_id: g.id }));
    if (fresh.length > 0) {
      await tx.query(sql`
        insert into alert_target_sends (target, notification_id, sent_at)
        select s.target, s.notification_id, ${at} from jsonb_to_recordset(${JSON.stringify(fresh)}::text::jsonb) as s(target text, notification_id bigint)
        on conflict (target, notification_id) do update set sent_at = excluded.sent_at`);
    }
    const claimed =
      go.length === 0
        ? []
        : await tx.query<ClaimedNotification>(sql`
      update alert_notifications n
      set claimed_until = ${leaseUntil}, attempts = n.attempts + 1, last_attempt_at = ${at}
      from alerts a
      where n.id in (select jsonb_array_elements_text(${JSON.stringify(go.map((g) => g.id))}::text::jsonb)::bigint) and a.id = n.alert_id
      returning n.id, n.alert_id, n.kind, n.payload, n.attempts, n.created_at, n.held_since, a.notification_method, a.notification_target,
                a.configured_by_name, a.configured_by_email`);
    const held =
      wait.length === 0
        ? []
        : await tx.query<HeldNotification>(sql`
      update alert_notifications n
      set next_attempt_at = w.next_attempt_at, held_since = coalesce(n.held_since, ${at})
      from jsonb_to_recordset(${JSON.stringify(wait)}::text::jsonb) as w(id bigint, next_attempt_at timestamptz), alerts a
      where n.id = w.id and a.id = n.alert_id
      returning n.id, n.alert_id, n.kind, n.created_at, n.next_attempt_at, n.held_since = ${at} as newly_held, a.notification_method, a.notification_target`);
    return { claimed, held };
  });
}

/**
 * Marks a notification delivered, and its alert's delivery outcome: delivered at `at` (greatest:
 * never moved back by a late writer), the last error cleared. One alert row write per delivered
 * notification, and notifications are rare (transitions and 4-hourly reminders).
 */
export async function markDelivered(db: Db, id: string | number, at: Date): Promise<void> {
  await db.query(sql`
    with n as (
      update alert_notifications set status = 'delivered', delivered_at = ${at}, claimed_until = null
      where id = ${String(id)}::bigint returning alert_id
    )
    update alerts a set last_delivered_at = greatest(a.last_delivered_at, ${at}::timestamptz), last_delivery_error = null, last_delivery_error_at = null
    from n where a.id = n.alert_id`);
}

/** Records a failed attempt: retried at `retryAt`, or, with null, given up (status failed). */
export async function markFailed(db: Db, id: string | number, at: Date, error: string, retryAt: Date | null): Promise<void> {
  await db.query(sql`
    with n as (
      update alert_notifications
      set last_error = ${error}, claimed_until = null,
          status = ${retryAt === null ? 'failed' : 'pending'}, next_attempt_at = coalesce(${retryAt}::timestamptz, next_attempt_at)
      where id = ${String(id)}::bigint returning alert_id
    )
    update alerts a set last_delivery_error = ${error}, last_delivery_error_at = ${at}
    from n where a.id = n.alert_id`);
}

/** Shows a hold on the alert (the API's lastDeliveryError) until the next delivery clears it. */
export async function markHeld(db: Db, alertId: number, at: Date, note: string): Promise<void> {
  await db.query(sql`update alerts set last_delivery_error = ${note}, last_delivery_error_at = ${at} where id = ${alertId}`);
}

/**
 * Deletes delivered and abandoned notifications older than `before` (pending ones stay), and the
 * per-target sends older than an hour before `at` (they no longer count); returns how many
 * notifications went.
 */
export async function pruneNotifications(db: Db, before: Date, at: Date): Promise<number> {
  await db.query(sql`delete from alert_target_sends where sent_at <= ${new Date(at.getTime() - HOUR_MS)}`);
  const rows = await db.query(sql`delete from alert_notifications where status <> 'pending' and created_at < ${before} returning id`);
  return rows.length;
}

/** The outbox rows of an alert, oldest first (tests, and an operator's look). */
export interface NotificationRow {
  id: string | number;
  alert_id: number;
  kind: NotificationKind;
  payload: unknown;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  created_at: Date;
  next_attempt_at: Date;
  last_error: string | null;
  delivered_at: Date | null;
}

export async function notificationsOf(db: Db, alertId: number): Promise<NotificationRow[]> {
  return db.query<NotificationRow>(sql`
    select id, alert_id, kind, payload, status, attempts, created_at, next_attempt_at, last_error, delivered_at
    from alert_notifications where alert_id = ${alertId} order by id`);
}
