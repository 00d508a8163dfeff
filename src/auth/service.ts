import { randomUUID } from 'node:crypto';
import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import type { Db } from '../../core/db/postgres.js';
import { ApiError, unauthorized } from '../http/errors.js';
import { PermissionSet } from '../users/permissions.js';
import { findUserByEmail, findUserById, findUserWithPermissions, normaliseEmail, recordLogin, setPasswordHash, toUser, type User } from '../users/store.js';
import { hashPassword, verifyPassword } from './passwords.js';
import {
  cancelPasswordResets,
  findRefreshToken,
  insertRefreshToken,
  isKnownLoginAddress,
  isLivePasswordReset,
  revokeFamily,
  spendPasswordReset,
  spendRefreshToken,
  useApiToken,
  insertApiToken,
  type ApiTokenRow,
} from './store.js';
import { redeemLink } from './links.js';
import { addressKey, beginAttempt } from './throttle.js';
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
  const accessToken = await signAccessToken(deps.jwtSecret, { userId: user.id, version: user.token_version, session: family });
  return { accessToken, refreshToken, tokenType: 'Bearer', expiresIn: ACCESS_TOKEN_TTL_S, user: publicUser };
}

/**
 * Wrong e-mail, wrong password and inactive account answer alike, after the same argon2 work.
 * Counted before any password is checked (throttle.ts): per e-mail and address, per address, and
 * per e-mail from addresses the account never signed in from; an unknown e-mail is counted
 * exactly like a known one, so a 429 reveals nothing either.
 */
export async function login(deps: AuthDeps, credentials: { email: string; password: string }, client: ClientInfo): Promise<Session> {
  const email = normaliseEmail(credentials.email);
  const address = addressKey(client.ipAddress);
  const keys = [
    { scope: 'login-pair', key: JSON.stringify([email, address]) },
    { scope: 'login-address', key: address },
    { scope: 'login-account', key: email },
  ] as const;
  const attempt = await beginAttempt(deps.db, [...keys], {
    refusal: 'Too many failed login attempts; try again later',
    exempt: { 'login-account': () => isKnownLoginAddress(deps.db, email, address) },
  }).catch((err: unknown) => {
    if (err instanceof ApiError && err.status === 429) deps.log.warn({ email, ip: client.ipAddress }, 'login throttled');
    throw err;
  });
  const user = await findUserByEmail(deps.db, email);
  const passwordOk = await verifyPassword(user?.password_hash, credentials.password);
  if (!user || !passwordOk || !user.active) {
    await attempt.failed();
    if (user) {
      const reason = passwordOk ? 'account is deactivated' : 'wrong password';
      await recordActivity(deps.db, { userId: user.id, action: 'login.failed', resource: `users/${user.id}`, details: `Failed login: ${reason}` }, client);
    }
    deps.log.info({ email, ip: client.ipAddress }, 'login failed');
    throw invalidLogin();
  }
  await attempt.succeeded();
  const updated = (await recordLogin(deps.db, user.id, address)) ?? user;
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

/**
 * Sets a new password through a single-use reset link (links.ts); ends every session of the user
 * and voids its other links. The token is looked up before the new password is hashed, so junk
 * tokens cost no argon2 work.
 */
export async function resetPasswordWithToken(deps: AuthDeps, token: string, newPassword: string, client: ClientInfo): Promise<void> {
  await redeemLink(deps.db, client, token, {
    noun: 'Reset link',
    find: async (db, hash) => (await isLivePasswordReset(db, hash)) || undefined,
    prepare: () => hashPassword(newPassword),
    spend: async (tx, hash, passwordHash) => {
      const userId = await spendPasswordReset(tx, hash);
      if (userId === undefined) return undefined;
      await setPasswordHash(tx, userId, passwordHash);
      await cancelPasswordResets(tx, userId);
      await recordActivity(tx, { userId, action: 'password.reset', resource: `users/${userId}`, details: 'Password set through a reset link' }, client);
      return userId;
    },
  });
}

/**
 * The caller behind an `Authorization` header: a JWT whose user still exists, is active and has
 * not had its sessions ended since the token was issued, and whose own session (its refresh-token
 * family) is not revoked; or a live personal access token. Both are read with the user's row, in
 * the same query, so a session ended in any process is refused by every process at its next request.
 */
export async function authenticate(deps: AuthDeps, header: string | undefined): Promise<Principal> {
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  if (!match) throw unauthorized();
  const token = match[1]!;
  const credential = token.startsWith(PERSONAL_TOKEN_PREFIX) ? 'personal-token' : 'session';
  let userId: number | undefined;
  let session: { version: number; id: string } | null = null;
  let expiresAt: Date | null = null;
  if (credential === 'personal-token') {
    userId = await useApiToken(deps.db, tokenHash(token));
  } else {
    const claims = await verifyAccessToken(deps.jwtSecret, token);
    userId = claims?.userId;
    if (claims) session = { version: claims.version, id: claims.session };
    expiresAt = claims?.expiresAt ?? null;
  }
  if (userId === undefined) throw unauthorized();
  return principalFor(deps.db, userId, session, credential, expiresAt);
}

/** `session`: an access token's user version and session, both to be still current; null for a personal access token. */
async function principalFor(db: Db, userId: number, session: { version: number; id: string } | null, credential: Principal['credential'], expiresAt: Date | null): Promise<Principal> {
  const row = await findUserWithPermissions(db, userId, session?.id ?? null);
  if (!row || !row.active) throw unauthorized();
  if (session && (row.token_version !== session.version || !row.session_live)) throw unauthorized();
  const { password_hash: _hash, permissions, session_live: _live, ...user } = row;
  return { user, permissions: new PermissionSet(row.role, permissions), credential, expiresAt };
}

/** A new personal access token for a user: its row, and the secret (shown once, stored hashed). */
export async function issuePersonalToken(db: Db, userId: number, name: string): Promise<{ row: ApiTokenRow; token: string }> {
  const token = randomToken(PERSONAL_TOKEN_PREFIX);
  return { row: await insertApiToken(db, { userId, name, hash: tokenHash(token) }), token };
}
