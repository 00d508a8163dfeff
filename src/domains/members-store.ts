/** The members of a domain (sql/postgres/013): who besides its owner sees it, in which role. */
import type { Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { dropPendingEvents } from '../alerts/outbox.js';
import { holdEvaluatorApply } from '../alerts/store.js';
import { visibleToUser, type MemberRole } from './store.js';

export interface MemberRow {
  user_id: number;
  name: string;
  email: string;
  role: MemberRole;
  granted_by: number | null;
  created_at: Date;
  updated_at: Date;
}

export interface Member {
  userId: number;
  /** Null unless an administrator asks (toMember). */
  name: string | null;
  email: string | null;
  role: MemberRole;
  grantedBy: number | null;
  createdAt: string;
  updatedAt: string;
}

/**
 * A member as the API shows it. Name and e-mail only to administrators (`reveal`): members are
 * added by user id, and an owner who could read them could walk the ids and collect every user's
 * address.
 */
export const toMember = (row: MemberRow, reveal: boolean): Member => ({
  userId: row.user_id,
  name: reveal ? row.name : null,
  email: reveal ? row.email : null,
  role: row.role,
  grantedBy: row.granted_by,
  createdAt: new Date(row.created_at).toISOString(),
  updatedAt: new Date(row.updated_at).toISOString(),
});

const MEMBER_COLUMNS = sql`m.user_id, u.name, u.email, m.role, m.granted_by, m.created_at, m.updated_at`;

/** A domain's members, by user id. */
export async function listMembers(db: Db, domainId: number): Promise<MemberRow[]> {
  return db.query<MemberRow>(sql`select ${MEMBER_COLUMNS} from domain_members m join users u on u.id = m.user_id where m.domain_id = ${domainId} order by m.user_id`);
}

export async function findMember(db: Db, domainId: number, userId: number): Promise<MemberRow | undefined> {
  const [row] = await db.query<MemberRow>(sql`select ${MEMBER_COLUMNS} from domain_members m join users u on u.id = m.user_id where m.domain_id = ${domainId} and m.user_id = ${userId}`);
  return row;
}

/**
 * Makes the user a member in `role`, or gives a member that role; `before`: its role until now
 * (null: it was not a member). One statement, so two grants at once cannot both be "added".
 */
export async function upsertMember(db: Db, domainId: number, userId: number, role: MemberRole, grantedBy: number | null): Promise<{ before: MemberRole | null }> {
  const [row] = await db.query<{ before: MemberRole | null }>(sql`
    with old as (select role from domain_members where domain_id = ${domainId} and user_id = ${userId})
    insert into domain_members (domain_id, user_id, role, granted_by) values (${domainId}, ${userId}, ${role}, ${grantedBy})
    on conflict (domain_id, user_id) do update set role = excluded.role, granted_by = excluded.granted_by,
      updated_at = case when domain_members.role = excluded.role then domain_members.updated_at else now() end
    returning (select role from old) as before`);
  return { before: row?.before ?? null };
}

/** Ends a membership; its role until now, or null when the user was not a member. */
export async function deleteMember(db: Db, domainId: number, userId: number): Promise<MemberRole | null> {
  const [row] = await db.query<{ role: MemberRole }>(sql`delete from domain_members where domain_id = ${domainId} and user_id = ${userId} returning role`);
  return row?.role ?? null;
}

/** A group that sees a domain (src/groups): through a grant on it, or on every domain (`allDomains`). */
export interface GroupSeeing {
  groupId: number;
  name: string;
  role: MemberRole;
  allDomains: boolean;
}

/** The groups holding a grant on the domain, directly or on every domain: for its members' page. */
export async function groupsSeeing(db: Db, domainId: number): Promise<GroupSeeing[]> {
  return db.query(sql`
    select g.id as "groupId", g.name, gd.role, gd.domain_id is null as "allDomains"
    from group_domains gd join groups g on g.id = gd.group_id
    where gd.domain_id = ${domainId} or gd.domain_id is null
    order by g.name collate "C", gd.domain_id nulls first`);
}

/**
 * When `userIds` may have lost domains (a membership ended, a group lost a member or a grant, a
 * domain was handed over): the events of their rules over many domains (alerts without a domain)
 * about a domain their creator no longer sees (grantsOf; an administrator sees every domain)
 * leave the pending notifications, so that the next one no longer names it. Their rules stop
 * covering the domain at the next evaluation by themselves.
 */
export async function forgetLostDomains(tx: Db, userIds: readonly number[]): Promise<void> {
  if (userIds.length === 0) return;
  // A round being applied now finishes first (its notifications are then taken out below); the next sees the grant gone.
  await holdEvaluatorApply(tx);
  const lost = await tx.query<{ domain_id: number; alert_ids: number[] }>(sql`
    select d.id as domain_id, array_agg(distinct a.id) as alert_ids
    from alerts a
    join users u on u.id = a.created_by and u.role <> 'admin'
    join alert_notifications n on n.status = 'pending' and a.id = any(n.alert_ids)
    cross join jsonb_array_elements(n.events) event
    join domains d on d.id = (event->'domain'->>'id')::int
    where a.domain_id is null and (event->'alert'->>'id')::int = a.id
      and a.created_by in (select jsonb_array_elements_text(${JSON.stringify(userIds)}::text::jsonb)::int)
      and not ${visibleToUser(sql`u`, sql`d`)}
    group by d.id order by d.id`);
  for (const { domain_id, alert_ids } of lost) await dropPendingEvents(tx, { domainId: domain_id, alertIds: alert_ids.map(Number) });
}

/**
 * After an owner change (applyDomainPatch, in its transaction): the new owner's membership, now
 * redundant, ends (the change itself is recorded by the caller), and the previous owner loses the
 * domain as a revoked member does (forgetLostDomains).
 */
export async function afterOwnerChange(tx: Db, domainId: number, previousOwner: number | null, newOwner: number | null): Promise<void> {
  if (previousOwner === newOwner) return;
  if (newOwner !== null) await deleteMember(tx, domainId, newOwner);
  if (previousOwner !== null) await forgetLostDomains(tx, [previousOwner]);
}
