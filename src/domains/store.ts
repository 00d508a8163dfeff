import type { Db } from '../../core/db/postgres.js';
import { selectPage } from '../../core/db/paging.js';
import { join, sql, type SqlFragment } from '../../core/db/sql.js';
import { dropPendingEvents } from '../alerts/outbox.js';

export interface DomainRow {
  id: number;
  name: string;
  owner_id: number | null;
  created_at: Date;
  updated_at: Date;
}

export interface Domain {
  id: number;
  name: string;
  ownerId: number | null;
  createdAt: string;
  updatedAt: string;
}

export const toDomain = (row: DomainRow): Domain => ({
  id: row.id,
  name: row.name,
  ownerId: row.owner_id,
  createdAt: new Date(row.created_at).toISOString(),
  updatedAt: new Date(row.updated_at).toISOString(),
});

/** Whose domains a caller sees: all (an admin) or those it owns. */
export type Visibility = { all: true } | { all: false; ownerId: number };

/**
 * Whether the user row `user` sees the domain row `domain`, in SQL: the same rule as Visibility
 * (an administrator sees every domain, a user those it owns), for queries that judge another
 * user than the caller (a rule's creator, a silence's author) at evaluation time.
 */
export const visibleToUser = (user: SqlFragment, domain: SqlFragment): SqlFragment => sql`(${user}.role = 'admin' or ${domain}.owner_id = ${user}.id)`;

const visibleTo = (visibility: Visibility): SqlFragment => (visibility.all ? sql`true` : sql`owner_id = ${visibility.ownerId}`);

export async function findVisibleDomain(db: Db, id: number, visibility: Visibility): Promise<DomainRow | undefined> {
  const [row] = await db.query<DomainRow>(sql`select * from domains where id = ${id} and ${visibleTo(visibility)}`);
  return row;
}

/** A domain's id and name. */
export interface DomainName {
  id: number;
  name: string;
}

/** The id and name of every domain the caller sees, or of those among `ids` it sees; by id. */
export async function visibleDomainNames(db: Db, visibility: Visibility, ids?: readonly number[]): Promise<DomainName[]> {
  const among = ids ? sql`id in (select (jsonb_array_elements_text(${JSON.stringify(ids)}::text::jsonb))::int)` : sql`true`;
  return db.query<DomainName>(sql`select id, name from domains where ${visibleTo(visibility)} and ${among} order by id`);
}

export async function findDomainByName(db: Db, name: string): Promise<DomainRow | undefined> {
  const [row] = await db.query<DomainRow>(sql`select * from domains where name = ${name}`);
  return row;
}

export async function listDomains(
  db: Db,
  filter: { page: number; limit: number; search?: string | undefined },
  visibility: Visibility,
): Promise<{ domains: Domain[]; total: number }> {
  const conditions = [visibleTo(visibility)];
  // Byte order (collate "C"), so the listing is the same on every server whatever its locale.
  if (filter.search) conditions.push(sql`strpos(name, lower(${filter.search})) > 0`);
  const { rows, total } = await selectPage<DomainRow>(db, { columns: sql`*`, table: sql`domains`, where: join(conditions, sql` and `), orderBy: sql`name collate "C"`, ...filter });
  return { domains: rows.map(toDomain), total };
}

/** Throws a unique violation when the name is taken. */
export async function insertDomain(db: Db, domain: { name: string; ownerId: number | null }): Promise<DomainRow> {
  const [row] = await db.query<DomainRow>(sql`insert into domains (name, owner_id) values (${domain.name}, ${domain.ownerId}) returning *`);
  return row!;
}

/**
 * Registers those of `names` (distinct) that are not taken, in the order given, in one statement;
 * returns the new ones. The conflict clause updates nothing (`where false`) but locks each row
 * already holding one of the names, as an update does: until the caller's transaction ends none of
 * them can be renamed or deleted, so it finds every name that was not inserted (domainIdsOf,
 * ingest/domain-store.ts).
 */
export async function insertNewDomains(db: Db, names: readonly string[], ownerId: number | null): Promise<DomainName[]> {
  return db.query<DomainName>(sql`
    insert into domains (name, owner_id)
    select name, ${ownerId}::int from jsonb_array_elements_text(${JSON.stringify(names)}::text::jsonb) with ordinality as given(name, position)
    order by position
    on conflict (name) do update set name = excluded.name where false
    returning id, name`);
}

export async function updateDomain(db: Db, id: number, patch: { name?: string | undefined; ownerId?: number | null | undefined }): Promise<DomainRow | undefined> {
  const sets: SqlFragment[] = [sql`updated_at = now()`];
  if (patch.name !== undefined) sets.push(sql`name = ${patch.name}`);
  if (patch.ownerId !== undefined) sets.push(sql`owner_id = ${patch.ownerId}`);
  const [row] = await db.query<DomainRow>(sql`update domains set ${join(sets, sql`, `)} where id = ${id} returning *`);
  return row;
}

/**
 * Deletes the domain (its alerts, states and history go with it: foreign keys cascade), and the
 * events about it from the alert notifications not sent yet (no foreign key reaches into those).
 */
export async function deleteDomain(db: Db, id: number): Promise<boolean> {
  return db.transaction(async (tx) => {
    const deleted = (await tx.query(sql`delete from domains where id = ${id} returning id`)).length > 0;
    if (deleted) await dropPendingEvents(tx, { domainId: id });
    return deleted;
  });
}
