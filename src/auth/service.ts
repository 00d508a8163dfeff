import { randomUUID } from 'node:crypto';
import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import type { Db } from '../db/postgres.js';
import { ApiError, invalidField, unauthorized } from '../http/errors.js';
import { PermissionSet } from '../users/permissions.js';
import { findUserByEmail, findUserById, findUserWithPermissions, normaliseEmail, recordLogin, setPasswordHash, toUser, type User } from '../users/store.js';
import { hashPassword, verifyPassword } from './passwords.js';
import {
  clearLoginFailures,
  findRefreshToken,
  insertRefreshToken,
  recordLoginFailure,
  revokeFamily,
  spendPasswordReset,
  spendRefreshToken,
  throttleDelay,
  useApiToken,
} from './store.js';
import { ACCESS_TOKEN_TTL_S, PERSONAL_TOKEN_PREFIX, REFRESH_TOKEN_TTL_S, randomToken, signAccessToken, tokenHash, verifyAccessToken } from './tokens.js';

type AuthDeps = Pick<Services, 'db' | 'jwtSecret' | 'log'>;

export interface Session {
  accessToken: string;
  refreshToken: string;
  tokenType: 'Bearer';
  expiresIn: number;
  user: User;
}

const invalidLogin = () => new ApiError(401, 'Invalid email or password');
const invalidRefresh = () => new ApiError(401, 'Invalid or expired refresh token');

async function issueSession(deps: AuthDeps, user: { id: number; token_version: number }, family: string, publicUser: User): Promise<Session> {
  const refreshToken = randomToken();
  await insertRefreshToken(deps.db, {
    userId: user.id,
    family,
    hash: tokenHash(refreshToken),
    expiresAt: new Date(Date.now() + REFRESH_TOKEN_TTL_S * 1000),
  });
  const accessToken = await signAccessToken(deps.jwtSecret, { userId: user.id, version: user.token_version });
  return { accessToken, refreshToken, tokenType: 'Bearer', expiresIn: ACCESS_TOKEN_TTL_S, user: publicUser };
}

/**
 * Wrong e-mail, wrong password and inactive account answer alike, after the same argon2 work.
 * Throttled by e-mail and by client address before any password is checked.
 */
export async function login(deps: AuthDeps, credentials: { email: string; password: string }, client: ClientInfo): Promise<Session> {
  const email = normaliseEmail(credentials.email);
  const wait = await throttleDelay(deps.db, email, client.ipAddress);
  if (wait > 0) {
    deps.log.warn({ email, ip: client.ipAddress }, 'login throttled');
    throw new ApiError(429, 'Too many failed login attempts; try again later', undefined, { 'Retry-After': String(wait) });
  }
  const user = await findUserByEmail(deps.db, email);
  const passwordOk = await verifyPassword(user?.password_hash, credentials.password);
  if (!user || !passwordOk || !user.active) {
    await recordLoginFailure(deps.db, email, client.ipAddress);
    if (user) {
      const reason = passwordOk ? 'account is deactivated' : 'wrong password';
      await recordActivity(deps.db, { userId: user.id, action: 'login.failed', resource: `users/${user.id}`, details: `Failed login: ${reason}` }, client);
    }
    deps.log.info({ email, ip: client.ipAddress }, 'login failed');
    throw invalidLogin();
  }
  await clearLoginFailures(deps.db, email);
  const updated = (await recordLogin(deps.db, user.id)) ?? user;
  await recordActivity(deps.db, { userId: user.id, action: 'login.succeeded', resource: `users/${user.id}`, details: 'Logged in' }, client);
  return issueSession(deps, updated, randomUUID(), toUser(updated));
}

/** Rotates a refresh token. A spent or revoked token presented again revokes its whole family. */
export async function refresh(deps: AuthDeps, refreshToken: string): Promise<Session> {
  const hash = tokenHash(refreshToken);
  const spent = await spendRefreshToken(deps.db, hash);
  if (!spent) {
    const known = await findRefreshToken(deps.db, hash);
    if (known) {
      await revokeFamily(deps.db, known.family);
      deps.log.warn({ userId: known.user_id }, 'refresh token reused; session family revoked');
    }
    throw invalidRefresh();
  }
  if (new Date(spent.expires_at) <= new Date()) throw invalidRefresh();
  const user = await findUserById(deps.db, spent.user_id);
  if (!user || !user.active) throw invalidRefresh();
  return issueSession(deps, user, spent.family, toUser(user));
}

/** Ends the session the refresh token belongs to. Unknown tokens are accepted silently: logout is idempotent. */
export async function logout(deps: AuthDeps, refreshToken: string, client: ClientInfo): Promise<void> {
  const known = await findRefreshToken(deps.db, tokenHash(refreshToken));
  if (!known) return;
  await revokeFamily(deps.db, known.family);
  await recordActivity(deps.db, { userId: known.user_id, action: 'session.logout', resource: `users/${known.user_id}`, details: 'Logged out' }, client);
}

/** Sets a new password through a single-use reset link; ends every session of the user. */
export async function resetPasswordWithToken(deps: AuthDeps, token: string, newPassword: string, client: ClientInfo): Promise<void> {
  const passwordHash = await hashPassword(newPassword);
  await deps.db.transaction(async (tx) => {
    const userId = await spendPasswordReset(tx, tokenHash(token));
    if (userId === undefined) throw invalidField('token', 'Reset link is unknown, already used or expired');
    await setPasswordHash(tx, userId, passwordHash);
    await recordActivity(tx, { userId, action: 'password.reset', resource: `users/${userId}`, details: 'Password set through a reset link' }, client);
  });
}

/**
 * The caller behind an `Authorization` header: a JWT whose user still exists, is active and has
 * not had its sessions ended since the token was issued, or a live personal access token.
 */
export async function authenticate(deps: AuthDeps, header: string | undefined): Promise<Principal> {
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  if (!match) throw unauthorized();
  const token = match[1]!;
  let userId: number | undefined;
  let version: number | undefined;
  if (token.startsWith(PERSONAL_TOKEN_PREFIX)) {
    userId = await useApiToken(deps.db, tokenHash(token));
  } else {
    const claims = await verifyAccessToken(deps.jwtSecret, token);
    userId = claims?.userId;
    version = claims?.version;
  }
  if (userId === undefined) throw unauthorized();
  return principalFor(deps.db, userId, version);
}

async function principalFor(db: Db, userId: number, version: number | undefined): Promise<Principal> {
  const row = await findUserWithPermissions(db, userId);
  if (!row || !row.active || (version !== undefined && row.token_version !== version)) throw unauthorized();
  const { password_hash: _hash, permissions, ...user } = row;
  return { user, permissions: new PermissionSet(row.role, permissions) };
}
