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
  /** Only on a domain shared with the caller (a membership, a group): its role there. */
  role?: MemberRole;
}

/**
 * A domain as the API gives it; `role`, the caller's, is shown only when it is a member's
 * (viewer, editor), so that the answers of owners and administrators stay as the spec has them.
 */
export const toDomain = (row: DomainRow, role?: DomainRole): Domain => ({
  id: row.id,
  name: row.name,
  ownerId: row.owner_id,
  createdAt: new Date(row.created_at).toISOString(),
  updatedAt: new Date(row.updated_at).toISOString(),
  ...(role === 'viewer' || role === 'editor' ? { role } : {}),
});

/**
 * A user's standing on a domain, from least to most: `viewer` and `editor` are a member's roles,
 * `owner` is its one owner's; an administrator stands above all (`admin`). What each may do is
 * roleAllows (src/domains/access.ts).
 */
export const DOMAIN_ROLES = ['viewer', 'editor', 'owner', 'admin'] as const;
export type DomainRole = (typeof DOMAIN_ROLES)[number];
/** The roles a member can be given. */
export const MEMBER_ROLES = ['viewer', 'editor'] as const;
export type MemberRole = (typeof MEMBER_ROLES)[number];

/** A role as the rank the SQL rule compares: viewer 1, editor 2, owner 3, admin 4. */
export const rankOf = (role: DomainRole): number => DOMAIN_ROLES.indexOf(role) + 1;
export const roleOfRank = (rank: number): DomainRole => DOMAIN_ROLES[rank - 1]!;

/** Whose domains a caller sees: all (an administrator) or those a user holds a grant on. */
export type Visibility = { all: true } | { all: false; userId: number };

/**
 * THE rule of who sees what: every grant of a domain to the user whose id is `userId` (an SQL
 * expression: a bound id, or a column of the query around it), as rows (domain_id, rank): the
 * domains it owns (owner), those it is a member of (the member's role), those its groups were
 * given (the group's role; a group's grant on all domains gives every domain). A user holding
 * several grants on a domain holds the best of them (callers compare or take the max of `rank`).
 * Everything that decides whether a user sees a domain, and in which role, reads these rows:
 * visibleTo and findDomainAccess for the caller of a request, visibleToUser for the user a rule or
 * silence belongs to (evaluation, notifications), the download links (src/exports/store.ts).
 */
const grantsOf = (userId: SqlFragment): SqlFragment => sql`(
  select o.id as domain_id, 3 as rank from domains o where o.owner_id = ${userId}
  union all
  select m.domain_id, ${memberRank(sql`m.role`)} from domain_members m where m.user_id = ${userId}
  union all
  select gd.domain_id, ${memberRank(sql`gd.role`)} from group_members gm join group_domains gd on gd.group_id = gm.group_id
  where gm.user_id = ${userId} and gd.domain_id is not null
  union all
  select every_domain.id, ${memberRank(sql`gd.role`)} from group_members gm join group_domains gd on gd.group_id = gm.group_id cross join domains every_domain
  where gm.user_id = ${userId} and gd.domain_id is null)`;

/** A member's or a group's role (viewer, editor) as its rank. */
const memberRank = (role: SqlFragment) => sql`case ${role} when 'editor' then 2 else 1 end`;

/** The rank of the least role that still counts (`viewer`: seeing the domain at all). */
const leastRank = (least: DomainRole) => sql`${rankOf(least)}::int`;

/**
 * Whether the user row `user` holds at least `least` on the domain row `domain`, in SQL: an
 * administrator holds every role, a user its grants (grantsOf). For queries that judge another
 * user than the caller (a rule's creator, a silence's author) at evaluation time.
 */
export const visibleToUser = (user: SqlFragment, domain: SqlFragment, least: DomainRole = 'viewer'): SqlFragment =>
  sql`(${user}.role = 'admin' or exists (select 1 from ${grantsOf(sql`${user}.id`)} g where g.domain_id = ${domain}.id and g.rank >= ${leastRank(least)}))`;

/**
 * The ids (`domain_id`) of the domains on which the user row `user` holds at least `least`, as a
 * relation to join laterally: every domain for an administrator, else its grants. The same rule
 * as visibleToUser, read from the user's side (its grants by index) rather than a domain's: for
 * the queries that judge a user over many domains (a rule over "all", a silence).
 */
export const domainsReachedBy = (user: SqlFragment, least: DomainRole = 'viewer'): SqlFragment => sql`(
  select every_domain.id as domain_id from domains every_domain where ${user}.role = 'admin'
  union
  select g.domain_id from ${grantsOf(sql`${user}.id`)} g where ${user}.role <> 'admin' and g.rank >= ${leastRank(least)})`;

/** The domains (the unaliased table `domains`) on which the caller holds at least `least`. */
const visibleTo = (visibility: Visibility, least: DomainRole = 'viewer'): SqlFragment =>
  visibility.all ? sql`true` : sql`domains.id in (select g.domain_id from ${grantsOf(sql`${visibility.userId}::int`)} g where g.rank >= ${leastRank(least)})`;

/** The caller's rank on the domain row `domains` (null: none), from the same grants. */
const rankSql = (visibility: Visibility): SqlFragment =>
  visibility.all ? sql`4` : sql`(select max(g.rank) from ${grantsOf(sql`${visibility.userId}::int`)} g where g.domain_id = domains.id)`;

export async function findVisibleDomain(db: Db, id: number, visibility: Visibility): Promise<DomainRow | undefined> {
  const [row] = await db.query<DomainRow>(sql`select * from domains where id = ${id} and ${visibleTo(visibility)}`);
  return row;
}

/** The domain behind `id` if the caller sees it, with the caller's role on it. */
export async function findDomainAccess(db: Db, id: number, visibility: Visibility): Promise<(DomainRow & { role: DomainRole }) | undefined> {
  const [row] = await db.query<DomainRow & { rank: number | null }>(sql`select *, ${rankSql(visibility)}::int as rank from domains where id = ${id}`);
  if (!row || row.rank === null) return undefined;
  const { rank, ...domain } = row;
  return { ...domain, role: roleOfRank(Number(rank)) };
}

/** A domain's id and name. */
export interface DomainName {
  id: number;
  name: string;
}

/** The id and name of every domain the caller sees, or of those among `ids` it sees; by id. */
export async function visibleDomainNames(db: Db, visibility: Visibility, ids?: readonly number[]): Promise<DomainName[]> {
  return (await reachableDomains(db, visibility, ids)).map(({ id, name }) => ({ id, name }));
}

/** As visibleDomainNames, each with the caller's role on it. */
export async function reachableDomains(db: Db, visibility: Visibility, ids?: readonly number[]): Promise<(DomainName & { role: DomainRole })[]> {
  const among = ids ? sql`id in (select (jsonb_array_elements_text(${JSON.stringify(ids)}::text::jsonb))::int)` : sql`true`;
  const rows = await db.query<DomainName & { rank: number }>(sql`select id, name, ${rankSql(visibility)}::int as rank from domains where ${visibleTo(visibility)} and ${among} order by id`);
  return rows.map((r) => ({ id: r.id, name: r.name, role: roleOfRank(Number(r.rank)) }));
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
  const columns = sql`*, ${rankSql(visibility)}::int as rank`;
  const { rows, total } = await selectPage<DomainRow & { rank: number }>(db, { columns, table: sql`domains`, where: join(conditions, sql` and `), orderBy: sql`name collate "C"`, ...filter });
  return { domains: rows.map((row) => toDomain(row, roleOfRank(Number(row.rank)))), total };
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
