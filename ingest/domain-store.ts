/**
 * What the ingest worker asks of the domains table (sql/postgres/001_identity.sql): every name's
 * id, the ids of the names its sources wait for (domains.ts), and the registration of a name a
 * file's path gives (a source's `register`).
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

/** The id of the user with this e-mail address (normalised by the config), or undefined. */
export async function userIdByEmail(db: Db, email: string): Promise<number | undefined> {
  const [row] = await db.query<{ id: number }>(sql`select id from users where email = ${email}`);
  return row?.id;
}

/**
 * Registers `name` owned by user `ownerId` unless it is registered already (by anyone: the first
 * registration stays, whoever made it); the name's id either way.
 */
export async function registerDomain(db: Db, name: string, ownerId: number): Promise<{ id: number; created: boolean }> {
  const [created] = await db.query<{ id: number }>(sql`insert into domains (name, owner_id) values (${name}, ${ownerId}) on conflict (name) do nothing returning id`);
  if (created) return { id: created.id, created: true };
  const [existing] = await db.query<{ id: number }>(sql`select id from domains where name = ${name}`);
  if (!existing) throw new Error(`domain ${name} was neither registered nor found: deleted at the same moment?`);
  return { id: existing.id, created: false };
}
