/** Groups, their members and their grants on domains (sql/postgres/015_groups.sql). */
import type { Db } from '../../core/db/postgres.js';
import { sql, type SqlFragment } from '../../core/db/sql.js';
import type { MemberRole } from '../domains/store.js';

export interface Group {
  id: number;
  name: string;
  createdAt: string;
  updatedAt: string;
  members: { userId: number; name: string; email: string; addedAt: string }[];
  /** `domainId` null: the grant on every domain. */
  domains: { domainId: number | null; name: string | null; role: MemberRole; grantedAt: string }[];
}

interface GroupRow {
  id: number;
  name: string;
  created_at: Date;
  updated_at: Date;
  members: { userId: number; name: string; email: string; addedAt: string }[];
  domains: { domainId: number | null; name: string | null; role: MemberRole; grantedAt: string }[];
}

const iso = (at: Date | string) => new Date(at).toISOString();

const toGroup = (row: GroupRow): Group => ({
  id: row.id,
  name: row.name,
  createdAt: iso(row.created_at),
  updatedAt: iso(row.updated_at),
  members: row.members.map((m) => ({ ...m, addedAt: iso(m.addedAt) })),
  domains: row.domains.map((d) => ({ ...d, grantedAt: iso(d.grantedAt) })),
});

/** Groups (`where` on the alias g) with their members and grants, by name (byte order, as domains). */
async function selectGroups(db: Db, where: SqlFragment): Promise<Group[]> {
  const rows = await db.query<GroupRow>(sql`
    select g.id, g.name, g.created_at, g.updated_at,
      coalesce((select jsonb_agg(jsonb_build_object('userId', u.id, 'name', u.name, 'email', u.email, 'addedAt', gm.added_at) order by u.id)
        from group_members gm join users u on u.id = gm.user_id where gm.group_id = g.id), '[]') as members,
      coalesce((select jsonb_agg(jsonb_build_object('domainId', gd.domain_id, 'name', d.name, 'role', gd.role, 'grantedAt', gd.granted_at) order by gd.domain_id nulls first)
        from group_domains gd left join domains d on d.id = gd.domain_id where gd.group_id = g.id), '[]') as domains
    from groups g where ${where} order by g.name collate "C"`);
  return rows.map(toGroup);
}

export const listGroups = (db: Db): Promise<Group[]> => selectGroups(db, sql`true`);

export async function findGroup(db: Db, id: number): Promise<Group | undefined> {
  return (await selectGroups(db, sql`g.id = ${id}`))[0];
}

export async function findGroupByName(db: Db, name: string): Promise<Group | undefined> {
  return (await selectGroups(db, sql`g.name = ${name}`))[0];
}

/** Throws a unique violation when the name is taken. */
export async function insertGroup(db: Db, name: string): Promise<number> {
  const [row] = await db.query<{ id: number }>(sql`insert into groups (name) values (${name}) returning id`);
  return row!.id;
}

/** Throws a unique violation when the name is taken; false: no such group. */
export async function renameGroup(db: Db, id: number, name: string): Promise<boolean> {
  return (await db.query(sql`update groups set name = ${name}, updated_at = now() where id = ${id} returning id`)).length > 0;
}

/** Deletes the group with its memberships and grants; its members' ids, or null when there was no such group. */
export async function deleteGroup(db: Db, id: number): Promise<number[] | null> {
  const members = await groupMemberIds(db, id);
  const deleted = (await db.query(sql`delete from groups where id = ${id} returning id`)).length > 0;
  return deleted ? members : null;
}

export async function groupMemberIds(db: Db, groupId: number): Promise<number[]> {
  return (await db.query<{ user_id: number }>(sql`select user_id from group_members where group_id = ${groupId} order by user_id`)).map((r) => r.user_id);
}

/** The domains a group's grants reach: their ids, or `all` when it holds the grant on every domain. */
export const reachOf = (group: Group): number[] | 'all' =>
  group.domains.some((d) => d.domainId === null) ? 'all' : group.domains.map((d) => d.domainId!);

/** Whether the user became a member (false: it was one). */
export async function addGroupMember(db: Db, groupId: number, userId: number): Promise<boolean> {
  return (await db.query(sql`insert into group_members (group_id, user_id) values (${groupId}, ${userId}) on conflict do nothing returning user_id`)).length > 0;
}

/** Whether the user was a member. */
export async function removeGroupMember(db: Db, groupId: number, userId: number): Promise<boolean> {
  return (await db.query(sql`delete from group_members where group_id = ${groupId} and user_id = ${userId} returning user_id`)).length > 0;
}

/**
 * Gives the group `role` on each of `domainIds` (null: on every domain), or changes the role of a
 * grant it holds; the ids among them that name no domain are returned and nothing is granted then
 * (the caller refuses the request).
 */
export async function grantGroup(db: Db, groupId: number, domainIds: readonly number[] | null, role: MemberRole): Promise<{ unknown: number[]; changed: number }> {
  if (domainIds !== null) {
    const unknown = await db.query<{ id: number }>(sql`
      select given.id from (select distinct jsonb_array_elements_text(${JSON.stringify(domainIds)}::text::jsonb)::int as id) given
      where not exists (select 1 from domains d where d.id = given.id) order by given.id`);
    if (unknown.length > 0) return { unknown: unknown.map((r) => r.id), changed: 0 };
  }
  const targets = domainIds === null ? sql`select null::int as id` : sql`select distinct jsonb_array_elements_text(${JSON.stringify(domainIds)}::text::jsonb)::int as id`;
  const changed = await db.query(sql`
    insert into group_domains (group_id, domain_id, role) select ${groupId}::int, t.id, ${role} from (${targets}) t
    on conflict (group_id, coalesce(domain_id, 0)) do update set role = excluded.role, updated_at = now()
      where group_domains.role <> excluded.role
    returning domain_id`);
  return { unknown: [], changed: changed.length };
}

/** Ends the group's grant on `domainId` (null: on every domain); whether it held one. */
export async function revokeGroup(db: Db, groupId: number, domainId: number | null): Promise<boolean> {
  const which = domainId === null ? sql`domain_id is null` : sql`domain_id = ${domainId}`;
  return (await db.query(sql`delete from group_domains where group_id = ${groupId} and ${which} returning group_id`)).length > 0;
}
