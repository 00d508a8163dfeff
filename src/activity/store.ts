import type { Db } from '../../core/db/postgres.js';
import { selectPage } from '../../core/db/paging.js';
import { join, sql, type SqlFragment } from '../../core/db/sql.js';

/** Who acted, from where: the client address (honouring TRUST_PROXY) and user agent of the request. */
export interface ClientInfo {
  ipAddress: string;
  userAgent: string;
}

export interface ActivityEvent {
  userId: number;
  /** A dotted name, e.g. `user.update`. */
  action: string;
  /** A path, e.g. `users/7`. */
  resource: string;
  /** A short sentence; never a password, token or message body. */
  details: string;
}

export interface Activity {
  id: number;
  action: string;
  resource: string;
  details: string;
  ipAddress: string;
  userAgent: string;
  timestamp: string;
}

export async function recordActivity(db: Db, event: ActivityEvent, client: ClientInfo): Promise<void> {
  await db.query(sql`
    insert into activity (user_id, action, resource, details, ip_address, user_agent)
    values (${event.userId}, ${event.action}, ${event.resource}, ${event.details}, ${client.ipAddress}, ${client.userAgent.slice(0, 512)})`);
}

export interface ActivityFilter {
  page: number;
  limit: number;
  startDate?: Date | undefined;
  endDate?: Date | undefined;
}

interface ActivityRow {
  id: string | number;
  action: string;
  resource: string;
  details: string;
  ip_address: string;
  user_agent: string;
  created_at: Date;
}

/** Newest first, ties by higher id first (docs/reference/http.md#order-of-lists). */
export async function listActivity(db: Db, userId: number, filter: ActivityFilter): Promise<{ activities: Activity[]; total: number }> {
  const conditions: SqlFragment[] = [sql`user_id = ${userId}`];
  if (filter.startDate) conditions.push(sql`created_at >= ${filter.startDate}`);
  if (filter.endDate) conditions.push(sql`created_at <= ${filter.endDate}`);
  const { rows, total } = await selectPage<ActivityRow>(db, {
    columns: sql`*`,
    table: sql`activity`,
    where: join(conditions, sql` and `),
    orderBy: sql`created_at desc, id desc`,
    ...filter,
  });
  return {
    total,
    activities: rows.map((r) => ({
      id: Number(r.id),
      action: r.action,
      resource: r.resource,
      details: r.details,
      ipAddress: r.ip_address,
      userAgent: r.user_agent,
      timestamp: new Date(r.created_at).toISOString(),
    })),
  };
}
