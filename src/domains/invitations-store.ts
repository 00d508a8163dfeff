/** Invitations to a domain by e-mail address (sql/postgres/014): one-use links, src/auth/links.ts. */
import type { Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { visibleToUser, type MemberRole } from './store.js';

export interface InvitationRow {
  id: number;
  domain_id: number;
  email: string;
  role: MemberRole;
  invited_by: number | null;
  expires_at: Date;
  created_at: Date;
}

export interface Invitation {
  id: number;
  email: string;
  role: MemberRole;
  invitedBy: number | null;
  expiresAt: string;
  createdAt: string;
}

export const toInvitation = (row: InvitationRow): Invitation => ({
  id: row.id,
  email: row.email,
  role: row.role,
  invitedBy: row.invited_by,
  expiresAt: new Date(row.expires_at).toISOString(),
  createdAt: new Date(row.created_at).toISOString(),
});

const COLUMNS = sql`id, domain_id, email, role, invited_by, expires_at, created_at`;
const LIVE = sql`used_at is null and expires_at > now()`;

/**
 * Stores the domain's invitation of `email`, replacing a pending one of the same address (whose
 * link then stops working), in one statement; drops the domain's spent and expired ones.
 */
export async function upsertInvitation(
  db: Db,
  invitation: { domainId: number; email: string; role: MemberRole; hash: string; invitedBy: number; expiresAt: Date },
): Promise<InvitationRow> {
  return db.transaction(async (tx) => {
    await tx.query(sql`delete from domain_invitations where domain_id = ${invitation.domainId} and not (${LIVE})`);
    const [row] = await tx.query<InvitationRow>(sql`
      insert into domain_invitations (domain_id, email, role, token_hash, invited_by, expires_at)
      values (${invitation.domainId}, ${invitation.email}, ${invitation.role}, ${invitation.hash}, ${invitation.invitedBy}, ${invitation.expiresAt})
      on conflict (domain_id, email) where used_at is null do update set
        role = excluded.role, token_hash = excluded.token_hash, invited_by = excluded.invited_by,
        expires_at = excluded.expires_at, created_at = now()
      returning ${COLUMNS}`);
    return row!;
  });
}

/** A domain's pending invitations (neither used nor expired), by id. */
export async function listInvitations(db: Db, domainId: number): Promise<InvitationRow[]> {
  return db.query<InvitationRow>(sql`select ${COLUMNS} from domain_invitations where domain_id = ${domainId} and ${LIVE} order by id`);
}

/** Withdraws a pending invitation of the domain (its link stops working); the row, or undefined when there is none. */
export async function deleteInvitation(db: Db, domainId: number, id: number): Promise<InvitationRow | undefined> {
  const [row] = await db.query<InvitationRow>(sql`delete from domain_invitations where id = ${id} and domain_id = ${domainId} and ${LIVE} returning ${COLUMNS}`);
  return row;
}

/** The live invitation with this token hash (nothing spent), or undefined. */
export async function findLiveInvitation(db: Db, hash: string): Promise<InvitationRow | undefined> {
  const [row] = await db.query<InvitationRow>(sql`select ${COLUMNS} from domain_invitations where token_hash = ${hash} and ${LIVE}`);
  return row;
}

/**
 * Spends a live invitation once, if its inviter still manages its domain (an active user who owns
 * it or is an administrator, by the one rule, store.ts visibleToUser): undefined otherwise, and
 * for an unknown, used or expired one.
 */
export async function spendInvitation(db: Db, hash: string): Promise<InvitationRow | undefined> {
  const [row] = await db.query<InvitationRow>(sql`
    update domain_invitations i set used_at = now()
    where i.token_hash = ${hash} and i.used_at is null and i.expires_at > now()
      and exists (
        select 1 from users u join domains d on d.id = i.domain_id
        where u.id = i.invited_by and u.active and ${visibleToUser(sql`u`, sql`d`, 'owner')})
    returning i.id, i.domain_id, i.email, i.role, i.invited_by, i.expires_at, i.created_at`);
  return row;
}
