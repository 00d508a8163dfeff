/**
 * The notification outbox (sql/postgres/005, 009, 011): one row per notification to one target
 * (e-mail address or webhook URL), holding the events of the alerts that changed for that target
 * (AlertEvent, notifications.ts). Written by the evaluator's apply in the transaction that changes
 * the states, claimed and marked by delivery.ts.
 *
 * Grouping: a round's events for a target join the target's open notification, one written less
 * than the group wait ago and not yet tried (its `next_attempt_at`, the end of its group wait, is
 * still ahead); otherwise they open a new one, due when its group wait ends. So all the alerts of
 * an incident that reach a target within a round (plus the wait) are one notification, and the
 * per-target limit counts notifications, not alerts.
 */
import type { Db } from '../../core/db/postgres.js';
import { intArray, sql } from '../../core/db/sql.js';
import type { AlertEvent } from './notifications.js';
import type { NotificationMethod } from './schemas.js';
import { HOUR_MS } from '../../core/durations.js';


/** One target's events of a round. */
export interface TargetEvents {
  method: NotificationMethod;
  target: string;
  events: AlertEvent[];
}

const alertIdsOf = (events: readonly AlertEvent[]) => [...new Set(events.map((e) => e.alert.id))];

/**
 * Adds a round's events to their targets' open notifications, or opens new ones due at
 * `at + groupWaitMs`. Runs in the apply transaction; an open notification is row-locked while its
 * events grow, so a deliverer claiming it meanwhile waits, and one it claimed first is no longer
 * open (attempts > 0) and a new one is opened instead.
 */
export async function enqueueEvents(tx: Db, batches: readonly TargetEvents[], at: Date, groupWaitMs: number): Promise<void> {
  if (batches.length === 0) return;
  const keys = JSON.stringify(batches.map((b) => ({ method: b.method, target: b.target })));
  const open = await tx.query<{ id: string | number; method: NotificationMethod; target: string }>(sql`
    select n.id, n.method, n.target
    from alert_notifications n
    join jsonb_to_recordset(${keys}::text::jsonb) as k(method text, target text) on k.method = n.method and k.target = n.target
    where n.status = 'pending' and n.attempts = 0 and n.claimed_until is null and n.next_attempt_at > ${at}
    order by n.id
    for update of n`);
  const openId = new Map(open.map((o) => [`${o.method} ${o.target}`, String(o.id)]));
  const joining = batches.filter((b) => openId.has(`${b.method} ${b.target}`));
  const opening = batches.filter((b) => !openId.has(`${b.method} ${b.target}`));
  if (joining.length > 0) {
    const json = JSON.stringify(joining.map((b) => ({ id: openId.get(`${b.method} ${b.target}`), events: b.events, alert_ids: alertIdsOf(b.events) })));
    await tx.query(sql`
      update alert_notifications n
      set events = n.events || j.events,
          alert_ids = array(select distinct x from unnest(n.alert_ids || array(select jsonb_array_elements_text(j.alert_ids)::int)) as x order by x)
      from jsonb_to_recordset(${json}::text::jsonb) as j(id bigint, events jsonb, alert_ids jsonb)
      where n.id = j.id`);
    // A notification the per-target limit holds: the alerts joining it are held too, and say so
    // as its first alert does (delivery.ts wrote that alert's note when it held it).
    await tx.query(sql`
      update alerts a
      set last_delivery_error = first.last_delivery_error, last_delivery_error_at = first.last_delivery_error_at
      from alert_notifications n
      join alerts first on first.id = n.alert_ids[1]
      where n.id in (select jsonb_array_elements_text(${JSON.stringify(joining.map((b) => openId.get(`${b.method} ${b.target}`)))}::text::jsonb)::bigint)
        and n.held_since is not null and a.id = any(n.alert_ids) and a.id <> first.id`);
  }
  if (opening.length > 0) {
    const json = JSON.stringify(opening.map((b) => ({ method: b.method, target: b.target, events: b.events, alert_ids: alertIdsOf(b.events) })));
    await tx.query(sql`
      insert into alert_notifications (method, target, events, alert_ids, created_at, next_attempt_at)
      select o.method, o.target, o.events, array(select jsonb_array_elements_text(o.alert_ids)::int), ${at}, ${new Date(at.getTime() + groupWaitMs)}
      from jsonb_to_recordset(${json}::text::jsonb) as o(method text, target text, events jsonb, alert_ids jsonb)`);
  }
}

/**
 * Takes the events of a deleted alert, or of every alert on a deleted domain, or of some alerts
 * (`alertIds`: the rules of a user whose membership of the domain ended) on a domain, out of the
 * pending notifications, and deletes a notification left without any: what was deleted, or is no
 * longer seen by the rule's creator, is not sent, as when each notification was its alert's own
 * row and went with it. Called in the transaction of the delete or revocation (store.ts
 * deleteAlert, domains/store.ts deleteDomain, domains/members.ts); a notification being delivered
 * this very moment still goes.
 */
export async function dropPendingEvents(tx: Db, gone: { alertId: number } | { domainId: number; alertIds?: readonly number[] }): Promise<void> {
  if ('alertIds' in gone && gone.alertIds?.length === 0) return;
  const naming =
    'alertId' in gone
      ? sql`${gone.alertId} = any(alert_ids)`
      : sql`events @> ${JSON.stringify([{ domain: { id: gone.domainId } }])}::text::jsonb`;
  const rows = await tx.query<{ id: string | number; events: AlertEvent[] }>(sql`
    select id, events from alert_notifications where status = 'pending' and ${naming} order by id for update`);
  if (rows.length === 0) return;
  const among = 'alertIds' in gone && gone.alertIds ? new Set(gone.alertIds) : null;
  const keeps = (e: AlertEvent) => ('alertId' in gone ? e.alert.id !== gone.alertId : e.domain.id !== gone.domainId || (among !== null && !among.has(e.alert.id)));
  const left = rows.map((r) => ({ id: String(r.id), events: r.events.filter(keeps) }));
  const emptied = left.filter((r) => r.events.length === 0).map((r) => r.id);
  const kept = left.filter((r) => r.events.length > 0).map((r) => ({ ...r, alert_ids: alertIdsOf(r.events) }));
  if (emptied.length > 0) {
    await tx.query(sql`delete from alert_notifications where id in (select jsonb_array_elements_text(${JSON.stringify(emptied)}::text::jsonb)::bigint)`);
  }
  if (kept.length > 0) {
    await tx.query(sql`
      update alert_notifications n
      set events = k.events, alert_ids = array(select jsonb_array_elements_text(k.alert_ids)::int)
      from jsonb_to_recordset(${JSON.stringify(kept)}::text::jsonb) as k(id bigint, events jsonb, alert_ids jsonb)
      where n.id = k.id`);
  }
}

export interface ClaimedNotification {
  id: string | number;
  method: NotificationMethod;
  target: string;
  events: AlertEvent[];
  alert_ids: number[];
  attempts: number;
  created_at: Date;
  /** When the per-target limit first held it back; null: never. */
  held_since: Date | null;
}

/** A due notification the per-target limit holds back: pending again at `next_attempt_at`. */
export interface HeldNotification {
  id: string | number;
  method: NotificationMethod;
  target: string;
  alert_ids: number[];
  created_at: Date;
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

/**
 * Claims up to `limit` due notifications for delivery until `leaseUntil`: only the oldest pending
 * one of each target (a later notification never overtakes an earlier one, so an alert's resolution
 * never arrives before its firing), rows another process is claiming are skipped (SKIP LOCKED),
 * and the claim commits at once, so no transaction or lock is held while the mail server or
 * webhook answers. A process that dies mid-delivery leaves the row to be claimed again when the
 * lease ends.
 *
 * The per-target limit: a notification may go only if fewer than `target.perHour` notifications
 * went to its target in the hour before `at` (a retry of one already counted there goes again).
 * The count and the record of the new sends (alert_target_sends) happen under each target's
 * advisory lock, taken in a fixed order, so deliverers in several processes never overshoot the
 * limit together. A notification over it is held, not dropped: it stays pending, due again when
 * the oldest send of its target's hour turns an hour old, and keeps its attempts (a hold is not an
 * attempt); the next round's events for the target join it meanwhile.
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
      select n.id, n.target
      from alert_notifications n
      where n.status = 'pending' and n.next_attempt_at <= ${at} and (n.claimed_until is null or n.claimed_until <= ${at})
        and not exists (select 1 from alert_notifications p where p.method = n.method and p.target = n.target and p.status = 'pending' and p.id < n.id)
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
      where n.id in (select jsonb_array_elements_text(${JSON.stringify(go.map((g) => g.id))}::text::jsonb)::bigint)
      returning n.id, n.method, n.target, n.events, n.alert_ids, n.attempts, n.created_at, n.held_since`);
    const held =
      wait.length === 0
        ? []
        : await tx.query<HeldNotification>(sql`
      update alert_notifications n
      set next_attempt_at = w.next_attempt_at, held_since = coalesce(n.held_since, ${at})
      from jsonb_to_recordset(${JSON.stringify(wait)}::text::jsonb) as w(id bigint, next_attempt_at timestamptz)
      where n.id = w.id
      returning n.id, n.method, n.target, n.alert_ids, n.created_at, n.next_attempt_at, n.held_since = ${at} as newly_held`);
    return { claimed, held };
  });
}

/**
 * Marks a notification delivered, and its alerts' delivery outcome: delivered at `at` (greatest:
 * never moved back by a late writer), the last error cleared.
 */
export async function markDelivered(db: Db, id: string | number, at: Date): Promise<void> {
  await db.query(sql`
    with n as (
      update alert_notifications set status = 'delivered', delivered_at = ${at}, claimed_until = null
      where id = ${String(id)}::bigint returning alert_ids
    )
    update alerts a set last_delivered_at = greatest(a.last_delivered_at, ${at}::timestamptz), last_delivery_error = null, last_delivery_error_at = null
    from n where a.id = any(n.alert_ids)`);
}

/** Records a failed attempt: retried at `retryAt`, or, with null, given up (status failed). */
export async function markFailed(db: Db, id: string | number, at: Date, error: string, retryAt: Date | null): Promise<void> {
  await db.query(sql`
    with n as (
      update alert_notifications
      set last_error = ${error}, claimed_until = null,
          status = ${retryAt === null ? 'failed' : 'pending'}, next_attempt_at = coalesce(${retryAt}::timestamptz, next_attempt_at)
      where id = ${String(id)}::bigint returning alert_ids
    )
    update alerts a set last_delivery_error = ${error}, last_delivery_error_at = ${at}
    from n where a.id = any(n.alert_ids)`);
}

/** Shows a hold on the notification's alerts (the API's lastDeliveryError) until the next delivery clears it. */
export async function markHeld(db: Db, alertIds: readonly number[], at: Date, note: string): Promise<void> {
  await db.query(sql`
    update alerts set last_delivery_error = ${note}, last_delivery_error_at = ${at}
    where id = any(${intArray(alertIds)})`);
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

/** The outbox rows naming an alert, oldest first (tests, and an operator's look). */
export interface NotificationRow {
  id: string | number;
  method: NotificationMethod;
  target: string;
  events: AlertEvent[];
  alert_ids: number[];
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  created_at: Date;
  next_attempt_at: Date;
  last_error: string | null;
  delivered_at: Date | null;
}

export async function notificationsOf(db: Db, alertId: number): Promise<NotificationRow[]> {
  return db.query<NotificationRow>(sql`
    select id, method, target, events, alert_ids, status, attempts, created_at, next_attempt_at, last_error, delivered_at
    from alert_notifications where ${alertId} = any(alert_ids) order by id`);
}
