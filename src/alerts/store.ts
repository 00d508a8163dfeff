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
  created_at: Date;
  updated_at: Date;
}

export interface Alert extends AlertDefinition {
  id: number;
  state: 'ok' | 'firing';
  lastTriggeredAt: string | null;
  createdAt: string;
}

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
  lastTriggeredAt: row.last_triggered_at === null ? null : new Date(row.last_triggered_at).toISOString(),
  createdAt: new Date(row.created_at).toISOString(),
});

export const definitionOf = (row: AlertRow): AlertDefinition => {
  const { id: _id, state: _state, lastTriggeredAt: _last, createdAt: _created, ...definition } = toAlert(row);
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

export async function updateAlert(db: Db, domainId: number, alertId: number, d: AlertDefinition): Promise<AlertRow | undefined> {
  const [row] = await db.query<AlertRow>(sql`
    update alerts
    set name = ${d.name}, condition = ${d.condition}, operator = ${d.operator}, threshold = ${d.threshold}, duration = ${d.duration},
        notification_method = ${d.notificationMethod}, notification_target = ${d.notificationTarget}, enabled = ${d.enabled}, updated_at = now()
    where id = ${alertId} and domain_id = ${domainId}
    returning *`);
  return row;
}

export async function deleteAlert(db: Db, domainId: number, alertId: number): Promise<boolean> {
  const rows = await db.query(sql`delete from alerts where id = ${alertId} and domain_id = ${domainId} returning id`);
  return rows.length > 0;
}
