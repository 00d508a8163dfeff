import type { Db } from '../../core/db/postgres.js';
import { selectPage } from '../../core/db/paging.js';
import { join, sql, type SqlFragment } from '../../core/db/sql.js';
import { DEFAULT_USER_PERMISSIONS, toEntries, toPairs, type PermissionEntry, type Role } from './permissions.js';

export interface UserRow {
  id: number;
  name: string;
  email: string;
  role: Role;
  active: boolean;
  password_hash: string;
  token_version: number;
  last_login_at: Date | null;
  created_at: Date;
  updated_at: Date;
}

/** The User of the specification; the password hash never leaves this module's callers. */
export interface User {
  id: number;
  name: string;
  email: string;
  role: Role;
  active: boolean;
  lastLoginAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** The columns a User is made of: lists never load password hashes. */
const USER_COLUMNS = sql`id, name, email, role, active, last_login_at, created_at, updated_at`;
type PublicUserRow = Omit<UserRow, 'password_hash' | 'token_version'>;

export const toUser = (row: PublicUserRow): User => ({
  id: row.id,
  name: row.name,
  email: row.email,
  role: row.role,
  active: row.active,
  lastLoginAt: row.last_login_at ? new Date(row.last_login_at).toISOString() : null,
  createdAt: new Date(row.created_at).toISOString(),
  updatedAt: new Date(row.updated_at).toISOString(),
});

export const normaliseEmail = (email: string) => email.trim().toLowerCase();

export async function findUserById(db: Db, id: number): Promise<UserRow | undefined> {
  const [row] = await db.query<UserRow>(sql`select * from users where id = ${id}`);
  return row;
}

export async function findUserByEmail(db: Db, email: string): Promise<UserRow | undefined> {
  const [row] = await db.query<UserRow>(sql`select * from users where email = ${normaliseEmail(email)}`);
  return row;
}

export interface UserWithPermissions extends UserRow {
  permissions: { resource: string; action: string }[];
  /** Whether the session asked about is live: a refresh token of its family not revoked. Null when none was asked about. */
  session_live: boolean | null;
}

/**
 * A user with their permission pairs and, given a session (a refresh-token family), whether it is
 * live, in one round trip: the per-request identity lookup. A session of another user, or one
 * whose tokens are gone, is not live.
 */
export async function findUserWithPermissions(db: Db, id: number, session: string | null): Promise<UserWithPermissions | undefined> {
  const live =
    session === null
      ? sql`null::boolean`
      : sql`exists (select 1 from refresh_tokens r where r.family = ${session}::uuid and r.user_id = u.id and r.revoked_at is null)`;
  const [row] = await db.query<Omit<UserWithPermissions, 'permissions'> & { permissions: UserWithPermissions['permissions'] | string }>(sql`
    select u.*, coalesce(
      (select json_agg(json_build_object('resource', p.resource, 'action', p.action)) from user_permissions p where p.user_id = u.id),
      '[]'::json) as permissions, ${live} as session_live
    from users u where u.id = ${id}`);
  if (!row) return undefined;
  return { ...row, permissions: typeof row.permissions === 'string' ? JSON.parse(row.permissions) : row.permissions };
}

export interface UserFilter {
  page: number;
  limit: number;
  search?: string | undefined;
  role?: Role | undefined;
}

export async function listUsers(db: Db, filter: UserFilter): Promise<{ users: User[]; total: number }> {
  const conditions: SqlFragment[] = [sql`true`];
  // strpos, not LIKE: `%` and `_` in a search are literal characters.
  if (filter.search) conditions.push(sql`(strpos(lower(name), lower(${filter.search})) > 0 or strpos(email, lower(${filter.search})) > 0)`);
  if (filter.role) conditions.push(sql`role = ${filter.role}`);
  const { rows, total } = await selectPage<PublicUserRow>(db, { columns: USER_COLUMNS, table: sql`users`, where: join(conditions, sql` and `), orderBy: sql`id`, ...filter });
  return { users: rows.map(toUser), total };
}

export interface NewUser {
  name: string;
  email: string;
  passwordHash: string;
  role: Role;
  active: boolean;
}

/** Creates the user with the default permissions of a new `user`. Throws a unique violation for a taken e-mail. */
export async function insertUser(db: Db, user: NewUser): Promise<UserRow> {
  return db.transaction(async (tx) => {
    const [row] = await tx.query<UserRow>(sql`
      insert into users (name, email, password_hash, role, active)
      values (${user.name}, ${normaliseEmail(user.email)}, ${user.passwordHash}, ${user.role}, ${user.active})
      returning *`);
    await replacePermissions(tx, row!.id, DEFAULT_USER_PERMISSIONS);
    return row!;
  });
}

export interface UserPatch {
  name?: string | undefined;
  email?: string | undefined;
  role?: Role | undefined;
  active?: boolean | undefined;
}

/** Applies a partial update; ends the user's sessions when the role changes or the user is deactivated. */
export async function updateUser(db: Db, id: number, patch: UserPatch, endSessions: boolean): Promise<UserRow | undefined> {
  const sets: SqlFragment[] = [sql`updated_at = now()`];
  if (patch.name !== undefined) sets.push(sql`name = ${patch.name}`);
  if (patch.email !== undefined) sets.push(sql`email = ${normaliseEmail(patch.email)}`);
  if (patch.role !== undefined) sets.push(sql`role = ${patch.role}`);
  if (patch.active !== undefined) sets.push(sql`active = ${patch.active}`);
  if (endSessions) sets.push(sql`token_version = token_version + 1`);
  const [row] = await db.query<UserRow>(sql`update users set ${join(sets, sql`, `)} where id = ${id} returning *`);
  if (row && endSessions) await revokeRefreshTokens(db, id);
  return row;
}

export async function deleteUser(db: Db, id: number): Promise<boolean> {
  const rows = await db.query(sql`delete from users where id = ${id} returning id`);
  return rows.length > 0;
}

/** Sets a new password hash and ends every session of the user. */
export async function setPasswordHash(db: Db, id: number, passwordHash: string): Promise<void> {
  await db.query(sql`update users set password_hash = ${passwordHash}, token_version = token_version + 1, updated_at = now() where id = ${id}`);
  await revokeRefreshTokens(db, id);
}

export async function revokeRefreshTokens(db: Db, userId: number): Promise<void> {
  await db.query(sql`update refresh_tokens set revoked_at = now() where user_id = ${userId} and revoked_at is null`);
}

/**
 * Sets last_login_at and remembers the client address (IPv6 by /64) the user signed in from
 * (login_known_addresses, read by the login throttle), in one statement.
 */
export async function recordLogin(db: Db, id: number, address: string): Promise<UserRow | undefined> {
  const [row] = await db.query<UserRow>(sql`
    with known as (
      insert into login_known_addresses (user_id, address) values (${id}, ${address})
      on conflict (user_id, address) do update set last_login_at = now()
    )
    update users set last_login_at = now() where id = ${id} returning *`);
  return row;
}

/**
 * Locks the active administrators' rows for the rest of the transaction and counts them, so two
 * concurrent demotions cannot both pass the last-admin check.
 */
export async function lockActiveAdmins(tx: Db): Promise<number[]> {
  const rows = await tx.query<{ id: number }>(sql`select id from users where role = 'admin' and active order by id for update`);
  return rows.map((r) => r.id);
}

export async function readPermissions(db: Db, userId: number): Promise<PermissionEntry[]> {
  return toEntries(await db.query<{ resource: string; action: string }>(sql`select resource, action from user_permissions where user_id = ${userId}`));
}

export async function replacePermissions(db: Db, userId: number, entries: PermissionEntry[]): Promise<void> {
  await db.query(sql`delete from user_permissions where user_id = ${userId}`);
  const pairs = toPairs(entries);
  if (pairs.length === 0) return;
  // One statement whatever the count: the pairs travel as one JSON text parameter (text, so that
  // the postgres driver does not JSON-encode the string a second time).
  await db.query(sql`
    insert into user_permissions (user_id, resource, action)
    select ${userId}, p->>'resource', p->>'action' from jsonb_array_elements(${JSON.stringify(pairs)}::text::jsonb) p`);
}

// --- self-service e-mail changes, confirmed through a link sent to the new address ---

export async function insertEmailChange(db: Db, change: { userId: number; newEmail: string; hash: string; expiresAt: Date }): Promise<void> {
  await db.query(sql`
    insert into email_changes (user_id, new_email, token_hash, expires_at)
    values (${change.userId}, ${normaliseEmail(change.newEmail)}, ${change.hash}, ${change.expiresAt})`);
}

/** Voids the user's pending e-mail changes (a newer request, or one confirmed). */
export async function cancelEmailChanges(db: Db, userId: number): Promise<void> {
  await db.query(sql`delete from email_changes where user_id = ${userId} and used_at is null`);
}

/** Whether a confirmation token is live (a lookup, nothing spent): true, or undefined for an unknown, used or expired one. */
export async function isLiveEmailChange(db: Db, hash: string): Promise<true | undefined> {
  const rows = await db.query(sql`select 1 from email_changes where token_hash = ${hash} and used_at is null and expires_at > now()`);
  return rows.length > 0 || undefined;
}

/** Spends a live confirmation token once; undefined for an unknown, used or expired one. */
export async function spendEmailChange(db: Db, hash: string): Promise<{ user_id: number; new_email: string } | undefined> {
  const [row] = await db.query<{ user_id: number; new_email: string }>(sql`
    update email_changes set used_at = now()
    where token_hash = ${hash} and used_at is null and expires_at > now() returning user_id, new_email`);
  return row;
}
