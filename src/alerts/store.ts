import type { Db } from '../db/postgres.js';
import { sql } from '../db/sql.js';
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

export async function insertAlert(db: Db, domainId: number, createdBy: number, d: AlertDefinition): Promise<AlertRow> {
  const [row] = await db.query<AlertRow>(sql`
    insert into alerts (domain_id, name, condition, operator, threshold, duration, notification_method, notification_target, enabled, created_by)
    values (${domainId}, ${d.name}, ${d.condition}, ${d.operator}, ${d.threshold}, ${d.duration}, ${d.notificationMethod}, ${d.notificationTarget}, ${d.enabled}, ${createdBy})
    returning *`);
  return row!;
}

export async function listAlerts(db: Db, domainId: number): Promise<AlertRow[]> {
  return db.query<AlertRow>(sql`select * from alerts where domain_id = ${domainId} order by id`);
}

/** The alert if it belongs to the domain: another domain's alert id is as unknown as a missing one. */
export async function findAlert(db: Db, domainId: number, alertId: number): Promise<AlertRow | undefined> {
  const [row] = await db.query<AlertRow>(sql`select * from alerts where id = ${alertId} and domain_id = ${domainId}`);
  return row;
}

/**
 * Replaces the definition. The figures of the last evaluation are cleared: they measured the old
 * definition, and a cleared snapshot is what makes the next round write the new one's figures
 * (a round otherwise writes only alerts whose state changes, see saveEvaluations).
 */
export async function updateAlert(db: Db, domainId: number, alertId: number, d: AlertDefinition): Promise<AlertRow | undefined> {
  const [row] = await db.query<AlertRow>(sql`
    update alerts
    set name = ${d.name}, condition = ${d.condition}, operator = ${d.operator}, threshold = ${d.threshold}, duration = ${d.duration},
        notification_method = ${d.notificationMethod}, notification_target = ${d.notificationTarget}, enabled = ${d.enabled}, updated_at = now(),
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
}

/**
 * Claims up to `limit` due notifications for delivery until `leaseUntil`: only the oldest pending
 * one of each alert (a resolved notification never overtakes its firing one), rows another process
 * is claiming are skipped (SKIP LOCKED), and the claim commits at once, so no transaction or lock
 * is held while the mail server or webhook answers. A process that dies mid-delivery leaves the
 * row to be claimed again when the lease ends.
 */
export async function claimNotifications(db: Db, at: Date, leaseUntil: Date, limit: number): Promise<ClaimedNotification[]> {
  return db.query<ClaimedNotification>(sql`
    with due as (
      select n.id from alert_notifications n
      where n.status = 'pending' and n.next_attempt_at <= ${at} and (n.claimed_until is null or n.claimed_until <= ${at})
        and not exists (select 1 from alert_notifications p where p.alert_id = n.alert_id and p.status = 'pending' and p.id < n.id)
      order by n.next_attempt_at, n.id
      limit ${limit}
      for update of n skip locked
    )
    update alert_notifications n
    set claimed_until = ${leaseUntil}, attempts = n.attempts + 1, last_attempt_at = ${at}
    from due, alerts a
    where n.id = due.id and a.id = n.alert_id
    returning n.id, n.alert_id, n.kind, n.payload, n.attempts, n.created_at, a.notification_method, a.notification_target`);
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

/** Deletes delivered and abandoned notifications older than `before` (pending ones stay). */
export async function pruneNotifications(db: Db, before: Date): Promise<number> {
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
