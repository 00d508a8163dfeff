import { recordActivity, listActivity, type ActivityFilter, type ClientInfo } from '../activity/store.js';
import { hashPassword, verifyPassword } from '../auth/passwords.js';
import { issuePersonalToken } from '../auth/service.js';
import { cancelPasswordResets, insertPasswordReset, listApiTokens, revokeApiToken, type ApiTokenRow } from '../auth/store.js';
import { beginAttempt } from '../auth/throttle.js';
import { newLink, redeemLink } from '../auth/links.js';
import type { Principal, Services } from '../context.js';
import { isUniqueViolation, type Db } from '../../core/db/postgres.js';
import { ApiError, conflict, forbidden, invalidField, notFound } from '../http/errors.js';
import { ALL_PERMISSIONS, type Action, type PermissionEntry } from './permissions.js';
import {
  cancelEmailChanges,
  deleteUser as deleteUserRow,
  findUserByEmail,
  findUserById,
  insertEmailChange,
  isLiveEmailChange,
  insertUser,
  listUsers as listUserRows,
  lockActiveAdmins,
  readPermissions,
  replacePermissions,
  setPasswordHash,
  spendEmailChange,
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
export const EMAIL_LINK_TTL_S = 3600;

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

export interface UpdateOutcome {
  user: User;
  /** A self-service e-mail change waiting for its confirmation link (the caller is told so). */
  pendingEmail?: string;
}

/**
 * Updates a user. Someone else's e-mail changes at once (409 when taken: whoever may change
 * other users may list them). One's own e-mail needs the current password and a signed-in
 * session (not a personal access token, which must not be able to take the account over), and
 * changes only once the link e-mailed to the new address is used; the answer is the same
 * whether or not that address belongs to someone, so it cannot be used to probe addresses.
 */
export async function updateUser(
  deps: Deps,
  principal: Principal,
  id: number,
  body: UserPatch & { currentPassword?: string | undefined },
  client: ClientInfo,
): Promise<UpdateOutcome> {
  const { currentPassword, ...patch } = body;
  const newOwnEmail = principal.user.id === id && patch.email !== undefined && patch.email !== principal.user.email ? patch.email : undefined;
  if (newOwnEmail !== undefined) {
    if (principal.credential === 'personal-token') {
      throw new ApiError(403, 'A personal access token cannot change its own e-mail address; sign in with the password to do so');
    }
    await checkCurrentPassword(deps, await existingUser(deps.db, id), currentPassword);
  }
  const user = await applyUpdate(deps, principal, id, newOwnEmail === undefined ? patch : { ...patch, email: undefined }, client);
  if (newOwnEmail === undefined) return { user };
  await requestEmailChange(deps, user, newOwnEmail, client);
  return { user, pendingEmail: newOwnEmail };
}

async function applyUpdate(deps: Deps, principal: Principal, id: number, patch: UserPatch, client: ClientInfo): Promise<User> {
  demandSelfOr(principal, id, 'update');
  const row = await deps.db.transaction(async (tx) => {
    const target = await existingUser(tx, id);
    demandRightsOver(principal, target);
    const roleChanges = patch.role !== undefined && patch.role !== target.role;
    const activeChanges = patch.active !== undefined && patch.active !== target.active;
    if ((roleChanges || activeChanges) && !isAdmin(principal)) throw forbidden();
    const { updated, changed } = await applyUserPatch(tx, target, patch);
    await recordActivity(
      tx,
      { userId: principal.user.id, action: 'user.update', resource: `users/${id}`, details: changed.length ? `Changed ${changed.join(', ')} of user ${id}` : `Saved user ${id} unchanged` },
      client,
    );
    return updated;
  });
  return toUser(row);
}

/**
 * In a transaction, after the caller's rights were checked: the update of `target` under the
 * rules that hold for every caller (the API, the command line): the last active administrator
 * stays one, a new role or deactivation ends the sessions, a new e-mail voids the reset links.
 */
export async function applyUserPatch(tx: Db, target: UserRow, patch: UserPatch): Promise<{ updated: UserRow; changed: (keyof UserPatch)[] }> {
  const roleChanges = patch.role !== undefined && patch.role !== target.role;
  const activeChanges = patch.active !== undefined && patch.active !== target.active;
  await guardLastAdmin(tx, target, (roleChanges && patch.role !== 'admin') || (activeChanges && patch.active === false));
  try {
    const updated = await updateUserRow(tx, target.id, patch, roleChanges || (activeChanges && patch.active === false));
    const changed = (['name', 'email', 'role', 'active'] as const).filter((f) => patch[f] !== undefined && patch[f] !== target[f]);
    if (changed.includes('email')) await cancelPasswordResets(tx, target.id);
    return { updated: updated!, changed };
  } catch (err) {
    if (isUniqueViolation(err)) throw emailInUse();
    throw err;
  }
}

/**
 * The signed-in user's own password, checked before a password or e-mail change. Wrong guesses
 * are throttled per user (throttle.ts), so a stolen session cannot be used to find the password.
 */
async function checkCurrentPassword(deps: Deps, user: UserRow, currentPassword: string | undefined): Promise<void> {
  if (!currentPassword) throw invalidField('currentPassword', 'is required');
  const attempt = await beginAttempt(deps.db, [{ scope: 'current-password', key: String(user.id) }], { refusal: 'Too many wrong current passwords; try again later' });
  if (!(await verifyPassword(user.password_hash, currentPassword))) {
    await attempt.failed();
    throw invalidField('currentPassword', 'is incorrect');
  }
  await attempt.succeeded();
}

const mailFailed = () => new ApiError(503, 'The confirmation e-mail could not be sent; try again later');

/**
 * Mails a confirmation link to a free address, or, to an address that already belongs to an
 * account, a note that nothing changed: one mail either way, so the answer and its time do not
 * tell the two apart.
 */
async function requestEmailChange(deps: Deps, user: User, newEmail: string, client: ClientInfo): Promise<void> {
  const quota = await beginAttempt(deps.db, [{ scope: 'email-change', key: String(user.id) }], { refusal: 'Too many e-mail change requests; try again later' });
  const greeting = `Hello${user.name ? ` ${user.name}` : ''},`;
  let mail: { to: string; subject: string; text: string };
  if (await findUserByEmail(deps.db, newEmail)) {
    mail = {
      to: newEmail,
      subject: '[tailhouse] Your address was entered for another account',
      text: [
        'Hello,',
        '',
        `A tailhouse user (${deps.config.baseUrl}) asked to use this e-mail address for their account. It already`,
        'belongs to a tailhouse account, so nothing was changed.',
        '',
        'If that was you, sign in with this address instead. Otherwise you can ignore this message.',
      ].join('\r\n'),
    };
  } else {
    const link = newLink(deps.config.baseUrl, '/confirm-email', EMAIL_LINK_TTL_S);
    await deps.db.transaction(async (tx) => {
      await cancelEmailChanges(tx, user.id);
      await insertEmailChange(tx, { userId: user.id, newEmail, hash: link.hash, expiresAt: link.expiresAt });
    });
    mail = {
      to: newEmail,
      subject: '[tailhouse] Confirm your new e-mail address',
      text: [
        greeting,
        '',
        `You asked tailhouse (${deps.config.baseUrl}) to use this address for your account instead of ${user.email}.`,
        'Open this link within one hour to confirm it:',
        '',
        link.url,
        '',
        'Until then you sign in with your old address. If you did not ask for this, ignore this message.',
      ].join('\r\n'),
    };
  }
  try {
    await deps.mailer.send(mail);
  } catch (err) {
    deps.log.error({ err: (err as Error).message, userId: user.id }, 'e-mail change message could not be sent');
    throw mailFailed();
  }
  await quota.succeeded();
  await recordActivity(deps.db, { userId: user.id, action: 'user.email_change_request', resource: `users/${user.id}`, details: `Asked to change the e-mail address to ${newEmail}` }, client);
}

/** In a transaction: spends the confirmation token and moves the user to the new address; undefined for an unknown token. */
async function applyEmailChange(tx: Db, hash: string, client: ClientInfo): Promise<{ user: UserRow; newEmail: string } | undefined> {
  const change = await spendEmailChange(tx, hash);
  if (!change) return undefined;
  const before = await existingUser(tx, change.user_id);
  try {
    await updateUserRow(tx, change.user_id, { email: change.new_email }, false);
  } catch (err) {
    if (isUniqueViolation(err)) throw emailInUse();
    throw err;
  }
  await cancelPasswordResets(tx, change.user_id);
  await cancelEmailChanges(tx, change.user_id);
  await recordActivity(tx, { userId: change.user_id, action: 'user.email_change', resource: `users/${change.user_id}`, details: `Changed the e-mail address from ${before.email} to ${change.new_email}` }, client);
  return { user: before, newEmail: change.new_email };
}

/**
 * Applies a self-service e-mail change through the link mailed to the new address; voids the
 * user's reset links (sent to the old address) and tells the old address. Unknown links are
 * throttled per client address (links.ts redeemLink).
 */
export async function confirmEmailChange(deps: Deps, token: string, client: ClientInfo): Promise<string> {
  const { user, newEmail } = await redeemLink(deps.db, client, token, {
    noun: 'Confirmation link',
    find: isLiveEmailChange,
    prepare: async () => undefined,
    spend: (tx, hash) => applyEmailChange(tx, hash, client),
  });
  try {
    await deps.mailer.send({
      to: user.email,
      subject: '[tailhouse] Your e-mail address was changed',
      text: [
        `Hello${user.name ? ` ${user.name}` : ''},`,
        '',
        `The e-mail address of your tailhouse account (${deps.config.baseUrl}) is now ${newEmail}; this address no longer signs in.`,
        '',
        'If you did not do this, tell your tailhouse administrator at once.',
      ].join('\r\n'),
    });
  } catch (err) {
    // The change is made; only the courtesy note failed.
    deps.log.error({ err: (err as Error).message, userId: user.id }, 'e-mail change notice to the old address could not be sent');
  }
  return newEmail;
}

export async function deleteUser(deps: Deps, principal: Principal, id: number, client: ClientInfo): Promise<void> {
  if (!principal.permissions.can('users', 'delete')) throw forbidden();
  await deps.db.transaction(async (tx) => {
    const target = await existingUser(tx, id);
    demandRightsOver(principal, target);
    await removeUser(tx, target);
    if (principal.user.id !== id) {
      await recordActivity(tx, { userId: principal.user.id, action: 'user.delete', resource: `users/${id}`, details: `Deleted user ${target.email}` }, client);
    }
  });
}

/** In a transaction, after the caller's rights were checked: deletes `target` unless it is the last active administrator. */
export async function removeUser(tx: Db, target: UserRow): Promise<void> {
  await guardLastAdmin(tx, target, true);
  await deleteUserRow(tx, target.id);
}

/** Own password with the current one; another user's only as an admin, without it. Ends the user's sessions and voids reset links. */
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
  if (self) await checkCurrentPassword(deps, target, body.currentPassword);
  await replacePassword(deps.db, id, body.newPassword, async (tx) => {
    await recordActivity(tx, { userId: principal.user.id, action: 'password.change', resource: `users/${id}`, details: self ? 'Changed own password' : `Changed the password of user ${id}` }, client);
  });
}

/** Sets a user's password, ends their sessions and voids their reset links; `alongside` runs in the same transaction. */
export async function replacePassword(db: Db, id: number, password: string, alongside: (tx: Db) => Promise<void> = async () => {}): Promise<void> {
  // Hashed before the transaction: argon2 takes milliseconds that a held connection need not wait.
  const passwordHash = await hashPassword(password);
  await db.transaction(async (tx) => {
    await setPasswordHash(tx, id, passwordHash);
    await cancelPasswordResets(tx, id);
    await alongside(tx);
  });
}

/** Admin only: e-mails a single-use link, valid one hour, to the user's own address. */
export async function requestPasswordReset(deps: Deps, principal: Principal, id: number, email: string, client: ClientInfo): Promise<string> {
  demandAdmin(principal);
  const target = await existingUser(deps.db, id);
  if (target.email !== email) throw invalidField('email', "does not match the user's e-mail address");
  const link = newLink(deps.config.baseUrl, '/reset-password', RESET_LINK_TTL_S);
  // A newer link voids the older ones: only the latest e-mail works.
  await deps.db.transaction(async (tx) => {
    await cancelPasswordResets(tx, id);
    await insertPasswordReset(tx, { userId: id, hash: link.hash, expiresAt: link.expiresAt });
  });
  try {
    await deps.mailer.send({
      to: target.email,
      subject: '[tailhouse] Reset your password',
      text: [
        `Hello${target.name ? ` ${target.name}` : ''},`,
        '',
        'An administrator asked tailhouse to let you choose a new password. Open this link within one hour:',
        '',
        link.url,
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

// --- personal access tokens ---

export interface PersonalToken {
  id: number;
  name: string;
  createdAt: string;
  lastUsedAt: string | null;
  revokedAt: string | null;
}

const iso = (d: Date | null) => (d === null ? null : new Date(d).toISOString());
const toPersonalToken = (row: ApiTokenRow): PersonalToken => ({ id: row.id, name: row.name, createdAt: iso(row.created_at)!, lastUsedAt: iso(row.last_used_at), revokedAt: iso(row.revoked_at) });

/**
 * Tokens are made and revoked by their user only, signed in with the password: a leaked token
 * cannot mint more tokens (nor, as with the e-mail address, keep the account). An administrator may
 * list and revoke anyone's.
 */
function demandTokenRights(principal: Principal, userId: number, action: 'create' | 'revoke'): void {
  if (principal.credential === 'personal-token') throw new ApiError(403, `A personal access token cannot ${action} tokens; sign in with the password to do so`);
  if (principal.user.id !== userId && (action === 'create' || !isAdmin(principal))) throw forbidden();
}

export async function listTokens(deps: Deps, principal: Principal, userId: number): Promise<PersonalToken[]> {
  if (principal.user.id !== userId && !isAdmin(principal)) throw forbidden();
  await existingUser(deps.db, userId);
  return (await listApiTokens(deps.db, userId)).map(toPersonalToken);
}

export async function createToken(deps: Deps, principal: Principal, userId: number, name: string, client: ClientInfo): Promise<PersonalToken & { token: string }> {
  demandTokenRights(principal, userId, 'create');
  const { row, token } = await issuePersonalToken(deps.db, userId, name);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'token.create', resource: `users/${userId}/tokens/${row.id}`, details: `Created personal access token "${name}"` }, client);
  return { ...toPersonalToken(row), token };
}

export async function revokeToken(deps: Deps, principal: Principal, userId: number, tokenId: number, client: ClientInfo): Promise<void> {
  demandTokenRights(principal, userId, 'revoke');
  await existingUser(deps.db, userId);
  // Another user's token id answers as an unknown one.
  if (!(await revokeApiToken(deps.db, tokenId, userId))) throw new ApiError(404, 'Token not found');
  await recordActivity(deps.db, { userId: principal.user.id, action: 'token.revoke', resource: `users/${userId}/tokens/${tokenId}`, details: `Revoked personal access token ${tokenId}` }, client);
}
