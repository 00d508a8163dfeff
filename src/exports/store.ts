import type { Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { visibleToUser } from '../domains/store.js';

export type ExportType = 'access' | 'error';
export type ExportFormat = 'csv' | 'json';

export interface ExportRow {
  id: number;
  domain_id: number;
  user_id: number;
  type: ExportType;
  format: ExportFormat;
  /** The request's `filters` as sent; validated when the export was created. */
  filters: Record<string, unknown>;
  start_date: Date;
  end_date: Date;
  created_at: Date;
  expires_at: Date;
}

/** An export found by its link, with what the download needs to know about its domain and creator. */
export interface DownloadRow extends ExportRow {
  domain_name: string;
  /**
   * Whether the creator may still read the domain's logs: active, and an admin or the domain's
   * owner holding `logs: read` (docs/reference/permissions.md#logs-and-alerts-of-a-domain, read now, as for every request).
   */
  allowed: boolean;
}

export interface NewExport {
  domainId: number;
  userId: number;
  type: ExportType;
  format: ExportFormat;
  filters: Record<string, unknown>;
  startDate: Date;
  endDate: Date;
  tokenHash: string;
  expiresAt: Date;
}

// PGlite returns jsonb as parsed values, the postgres driver as well; text never reaches here.
const normalize = <T extends ExportRow>(row: T): T => ({ ...row, filters: (typeof row.filters === 'string' ? JSON.parse(row.filters) : row.filters) ?? {} });

export async function insertExport(db: Db, e: NewExport): Promise<ExportRow> {
  const [row] = await db.query<ExportRow>(sql`
    insert into exports (domain_id, user_id, type, format, filters, start_date, end_date, token_hash, expires_at)
    values (${e.domainId}, ${e.userId}, ${e.type}, ${e.format}, ${JSON.stringify(e.filters)}::jsonb, ${e.startDate}, ${e.endDate}, ${e.tokenHash}, ${e.expiresAt})
    returning id, domain_id, user_id, type, format, filters, start_date, end_date, created_at, expires_at`);
  return normalize(row!);
}

export async function findDownload(db: Db, tokenHash: string): Promise<DownloadRow | undefined> {
  const [row] = await db.query<DownloadRow>(sql`
    select e.id, e.domain_id, e.user_id, e.type, e.format, e.filters, e.start_date, e.end_date, e.created_at, e.expires_at,
      d.name as domain_name,
      (u.active and ${visibleToUser(sql`u`, sql`d`)} and (u.role = 'admin' or exists (
        select 1 from user_permissions p where p.user_id = u.id and p.resource = 'logs' and p.action = 'read'
      ))) as allowed
    from exports e
    join domains d on d.id = e.domain_id
    join users u on u.id = e.user_id
    where e.token_hash = ${tokenHash}`);
  return row ? normalize(row) : undefined;
}

/**
 * The namespace of the per-user advisory lock (two-key form: namespace, user id) under which an
 * export is counted against the hourly limit and inserted; the single-key locks of migrations,
 * the bootstrap and the alert evaluator live in a separate key space.
 */
const EXPORT_QUOTA_LOCK = 74_182_309;

/**
 * Holds the user's export quota until the transaction ends: a count taken after this and an
 * insert in the same transaction see every export of that user committed before, and no other
 * creation of that user can count in between (whatever the process).
 */
export async function lockExportQuota(tx: Db, userId: number): Promise<void> {
  await tx.query(sql`select pg_advisory_xact_lock(${EXPORT_QUOTA_LOCK}::int, ${userId}::int)`);
}

/** How many exports a user created since `since`, and the oldest of them (for Retry-After). */
export async function recentExports(db: Db, userId: number, since: Date): Promise<{ count: number; oldest: Date | null }> {
  const [row] = await db.query<{ count: number; oldest: Date | null }>(sql`
    select count(*)::int as count, min(created_at) as oldest from exports where user_id = ${userId} and created_at > ${since}`);
  return { count: row?.count ?? 0, oldest: row?.oldest ? new Date(row.oldest) : null };
}

/** Deletes the exports that expired before `before`; returns how many. */
export async function deleteExpiredExports(db: Db, before: Date): Promise<number> {
  const rows = await db.query<{ id: number }>(sql`delete from exports where expires_at < ${before} returning id`);
  return rows.length;
}
