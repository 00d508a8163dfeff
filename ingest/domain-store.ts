/**
 * The two reads of the domains table (sql/postgres/001_identity.sql) the ingest worker makes:
 * every name's id, and the ids of the names its sources wait for (domains.ts).
 */
import type { Db } from '../core/db/postgres.js';
import { sql } from '../core/db/sql.js';

/** The ids of those of `names` that are registered: one small indexed query, for ingest sources waiting for their domain. */
export async function domainIdsOf(db: Db, names: string[]): Promise<Map<string, number>> {
  const rows = await db.query<{ id: number; name: string }>(
    sql`select id, name from domains where name in (select jsonb_array_elements_text(${JSON.stringify(names)}::text::jsonb))`,
  );
  return new Map(rows.map((r) => [r.name, r.id]));
}

/** Every domain's id by name: the ingest worker routes lines with it. */
export async function domainIdsByName(db: Db): Promise<Map<string, number>> {
  const rows = await db.query<{ id: number; name: string }>(sql`select id, name from domains`);
  return new Map(rows.map((r) => [r.name, r.id]));
}
