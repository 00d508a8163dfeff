import { recordActivity, listActivity, type ActivityFilter, type ClientInfo } from '../activity/store.js';
import { hashPassword, verifyPassword } from '../auth/passwords.js';
import { insertPasswordReset } from '../auth/store.js';
import { randomToken, tokenHash } from '../auth/tokens.js';
import type { Principal, Services } from '../context.js';
import { isUniqueViolation, type Db } from '../db/postgres.js';
import { ApiError, conflict, forbidden, invalidField, notFound } from '../http/errors.js';
import { ALL_PERMISSIONS, type Action, type PermissionEntry } from './permissions.js';
import {
  deleteUser as deleteUserRow,
  findUserById,
  insertUser,
  listUsers as listUserRows,
  lockActiveAdmins,
  readPermissions,
  replacePermissions,
  setPasswordHash,
  toUser,
  updateUser as updateUserRow,
  type NewUser,
  type User,
  type UserFilter,
  type UserPatch,
  type UserRow,
} from './store.js';

type Deps = Pick<Services, 'db' | 'log' | 'mailer' | 'config'>;

export const RESET_LINK_TTL_S = 3600;

const isAdmin = (principal: Principal) => principal.user.role === 'admin';

/** Own records are always open to their user; other users' records need `users:<action>`. */
function demandSelfOr(principal: Principal, userId: number, action: Action): void {
  if (principal.user.id !== userId && !principal.permissions.can('users', action)) throw forbidden();
}

/**
 * Administrator accounts are changed by administrators only (or by themselves): a user holding
 * `users:update` must not be able to redirect an admin's e-mail, nor `users:delete` remove one.
 */
function demandRightsOver(principal: Principal, target: UserRow): void {
  if (target.role === 'admin' && target.id !== principal.user.id && !isAdmin(principal)) throw forbidden();
}

function demandAdmin(principal: Principal): void {
  if (!isAdmin(principal)) throw forbidden();
}

async function existingUser(db: Db, id: number): Promise<UserRow> {
  const user = await findUserById(db, id);
  if (!user) throw notFound('User');
  return user;
}

const emailInUse = () => conflict('Email already in use');

export async function listUsers(deps: Deps, principal: Principal, filter: UserFilter) {
  if (!principal.permissions.can('users', 'read')) throw forbidden();
  return listUserRows(deps.db, filter);
}

export async function getUser(deps: Deps, principal: Principal, id: number): Promise<User> {
  demandSelfOr(principal, id, 'read');
  return toUser(await existingUser(deps.db, id));
}

/** Creates a user (used by the API and by `tailhouse users create`). */
export async function createUserRecord(db: Db, user: Omit<NewUser, 'passwordHash'> & { password: string }): Promise<UserRow> {
  const passwordHash = await hashPassword(user.password);
  try {
    return await insertUser(db, { name: user.name, email: user.email, role: user.role, active: user.active, passwordHash });
  } catch (err) {
    if (isUniqueViolation(err)) throw emailInUse();
    throw err;
  }
}

export async function createUser(
  deps: Deps,
  principal: Principal,
  body: Omit<NewUser, 'passwordHash'> & { password: string },
  client: ClientInfo,
): Promise<User> {
  if (!principal.permissions.can('users', 'create')) throw forbidden();
  if (!isAdmin(principal) && (body.role !== 'user' || !body.active)) throw forbidden();
  const row = await createUserRecord(deps.db, body);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'user.create', resource: `users/${row.id}`, details: `Created user ${row.email} (${row.role})` }, client);
  return toUser(row);
}

/** Inside a transaction: refuses to leave the system without an active administrator. */
async function guardLastAdmin(tx: Db, target: UserRow, losesAdmin: boolean): Promise<void> {
  if (!losesAdmin || target.role !== 'admin' || !target.active) return;
  const admins = await lockActiveAdmins(tx);
  if (admins.length <= 1 && admins.includes(target.id)) throw conflict('Cannot remove the last active administrator');
}

export async function updateUser(deps: Deps, principal: Principal, id: number, patch: UserPatch, client: ClientInfo): Promise<User> {
  demandSelfOr(principal, id, 'update');
  const row = await deps.db.transaction(async (tx) => {
    const target = await existingUser(tx, id);
    demandRightsOver(principal, target);
    const roleChanges = patch.role !== undefined && patch.role !== target.role;
    const activeChanges = patch.active !== undefined && patch.active !== target.active;
    if ((roleChanges || activeChanges) && !isAdmin(principal)) throw forbidden();
    await guardLastAdmin(tx, target, (roleChanges && patch.role !== 'admin') || (activeChanges && patch.active === false));
    try {
      const updated = await updateUserRow(tx, id, patch, roleChanges || (activeChanges && patch.active === false));
      const changed = (['name', 'email', 'role', 'active'] as const).filter((f) => patch[f] !== undefined && patch[f] !== target[f]);
      await recordActivity(
        tx,
        { userId: principal.user.id, action: 'user.update', resource: `users/${id}`, details: changed.length ? `Changed ${changed.join(', ')} of user ${id}` : `Saved user ${id} unchanged` },
        client,
      );
      return updated!;
    } catch (err) {
      if (isUniqueViolation(err)) throw emailInUse();
      throw err;
    }
  });
  return toUser(row);
}

export async function deleteUser(deps: Deps, principal: Principal, id: number, client: ClientInfo): Promise<void> {
  if (!principal.permissions.can('users', 'delete')) throw forbidden();
  await deps.db.transaction(async (tx) => {
    const target = await existingUser(tx, id);
    demandRightsOver(principal, target);
    await guardLastAdmin(tx, target, true);
    await deleteUserRow(tx, id);
    if (principal.user.id !== id) {
      await recordActivity(tx, { userId: principal.user.id, action: 'user.delete', resource: `users/${id}`, details: `Deleted user ${target.email}` }, client);
    }
  });
}

/** Own password with the current one; another user's only as an admin, without it. Ends the user's sessions. */
export async function changePassword(
  deps: Deps,
  principal: Principal,
  id: number,
  body: { currentPassword?: string | undefined; newPassword: string },
  client: ClientInfo,
): Promise<void> {
  const self = principal.user.id === id;
  if (!self) demandAdmin(principal);
  const target = await existingUser(deps.db, id);
  if (self) {
    if (!body.currentPassword) throw invalidField('currentPassword', 'is required');
    if (!(await verifyPassword(target.password_hash, body.currentPassword))) throw invalidField('currentPassword', 'is incorrect');
  }
  // Hashed before the transaction: argon2 takes milliseconds that a held connection need not wait.
  const passwordHash = await hashPassword(body.newPassword);
  await deps.db.transaction(async (tx) => {
    await setPasswordHash(tx, id, passwordHash);
    await recordActivity(tx, { userId: principal.user.id, action: 'password.change', resource: `users/${id}`, details: self ? 'Changed own password' : `Changed the password of user ${id}` }, client);
  });
}

/** Admin only: e-mails a single-use link, valid one hour, to the user's own address. */
export async function requestPasswordReset(deps: Deps, principal: Principal, id: number, email: string, client: ClientInfo): Promise<string> {
  demandAdmin(principal);
  const target = await existingUser(deps.db, id);
  if (target.email !== email) throw invalidField('email', "does not match the user's e-mail address");
  const token = randomToken();
  await insertPasswordReset(deps.db, { userId: id, hash: tokenHash(token), expiresAt: new Date(Date.now() + RESET_LINK_TTL_S * 1000) });
  const link = `${deps.config.baseUrl}/reset-password?token=${encodeURIComponent(token)}`;
  try {
    await deps.mailer.send({
      to: target.email,
      subject: '[tailhouse] Reset your password',
      text: [
        `Hello${target.name ? ` ${target.name}` : ''},`,
        '',
        'An administrator asked tailhouse to let you choose a new password. Open this link within one hour:',
        '',
        link,
        '',
        'The link works once. If you did not expect this message, you can ignore it; your password stays as it is.',
      ].join('\r\n'),
    });
  } catch (err) {
    deps.log.error({ err: (err as Error).message, userId: id }, 'password reset e-mail could not be sent');
    throw new ApiError(503, 'The reset e-mail could not be sent; try again later');
  }
  await recordActivity(deps.db, { userId: principal.user.id, action: 'password.reset_request', resource: `users/${id}`, details: `Sent a password reset link to ${target.email}` }, client);
  return target.email;
}

export async function getPermissions(deps: Deps, principal: Principal, id: number): Promise<PermissionEntry[]> {
  demandSelfOr(principal, id, 'read');
  const target = await existingUser(deps.db, id);
  return target.role === 'admin' ? ALL_PERMISSIONS : readPermissions(deps.db, id);
}

export async function setPermissions(deps: Deps, principal: Principal, id: number, entries: PermissionEntry[], client: ClientInfo): Promise<void> {
  demandAdmin(principal);
  await deps.db.transaction(async (tx) => {
    await existingUser(tx, id);
    await replacePermissions(tx, id, entries);
    const summary = entries.map((e) => `${e.resource}: ${e.actions.join('/') || 'none'}`).join('; ') || 'none';
    await recordActivity(tx, { userId: principal.user.id, action: 'permissions.update', resource: `users/${id}/permissions`, details: `Set permissions of user ${id} to ${summary}` }, client);
  });
}

export async function getActivity(deps: Deps, principal: Principal, id: number, filter: ActivityFilter) {
  demandSelfOr(principal, id, 'read');
  await existingUser(deps.db, id);
  return listActivity(deps.db, id, filter);
}
