import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openPostgres } from '../../../core/db/postgres.js';
import { createApp } from '../../../src/app.js';
import { SESSION_COOKIE, SESSION_HEADER, SESSION_PATH } from '../../../src/auth/browser-session.js';
import { call, JWT_SECRET, login, type TestApp } from '../../support/app.js';
import { appWithAdmin, expectAuthRequired, expectRefreshRefused, freshUser, refresh, tryLogin } from '../../support/auth.js';

let t: TestApp;
let admin: string;
beforeAll(async () => ({ t, admin } = await appWithAdmin()));
afterAll(() => t?.close());

const me = (id: number, token: string) => call(t.app, 'GET', `/api/users/${id}`, { token });

/** A user with two separate sessions, plus an unrelated bystander whose session must survive. */
async function twoSessions(tag: string, extra: { role?: 'admin' | 'user' } = {}) {
  const u = await freshUser(t.app, admin, tag, extra);
  const second = await login(t.app, u.email, u.password);
  const bystander = await freshUser(t.app, admin, `${tag}-bystander`);
  for (const token of [u.token, second.accessToken]) expect((await me(u.id, token)).status).toBe(200);
  return { ...u, sessions: [{ access: u.token, refresh: u.refreshToken }, { access: second.accessToken, refresh: second.refreshToken }], bystander };
}

async function expectAllSessionsEnded(user: Awaited<ReturnType<typeof twoSessions>>) {
  for (const session of user.sessions) {
    expectAuthRequired(await me(user.id, session.access));
    expectRefreshRefused(await refresh(t.app, session.refresh));
  }
  // Someone else's session is untouched.
  expect((await me(user.bystander.id, user.bystander.token)).status).toBe(200);
  expect((await refresh(t.app, user.bystander.refreshToken)).status).toBe(200);
}

describe('revocation of existing tokens', () => {
  it('changing the own password ends every session of the user at once', async () => {
    const u = await twoSessions('own-pw');
    const res = await call(t.app, 'PUT', `/api/users/${u.id}/password`, {
      token: u.token,
      body: { currentPassword: u.password, newPassword: 'brand-new-password-1', confirmPassword: 'brand-new-password-1' },
    });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(typeof res.body.message).toBe('string');
    await expectAllSessionsEnded(u);
    // The new password signs in and its token works; the old one no longer signs in.
    expect((await tryLogin(t.app, u.email, u.password)).status).toBe(401);
    const fresh = await tryLogin(t.app, u.email, 'brand-new-password-1');
    expect(fresh.status).toBe(200);
    expect((await me(u.id, fresh.body.data.accessToken)).status).toBe(200);
  });

  it('a refused own password change (wrong current password) ends nothing', async () => {
    const u = await twoSessions('own-pw-wrong');
    const res = await call(t.app, 'PUT', `/api/users/${u.id}/password`, {
      token: u.token,
      body: { currentPassword: 'not-my-password', newPassword: 'brand-new-password-1', confirmPassword: 'brand-new-password-1' },
    });
    expect(res.status).toBe(422);
    expect(res.body.details).toHaveProperty('currentPassword');
    for (const session of u.sessions) expect((await me(u.id, session.access)).status).toBe(200);
    expect((await refresh(t.app, u.sessions[0]!.refresh)).status).toBe(200);
  });

  it("an administrator setting a user's password ends every session of that user", async () => {
    const u = await twoSessions('admin-pw');
    const res = await call(t.app, 'PUT', `/api/users/${u.id}/password`, {
      token: admin,
      body: { newPassword: 'set-by-admin-pw-1', confirmPassword: 'set-by-admin-pw-1' },
    });
    expect(res.status).toBe(200);
    await expectAllSessionsEnded(u);
    expect((await tryLogin(t.app, u.email, 'set-by-admin-pw-1')).status).toBe(200);
  });

  it('deactivation ends every session; reactivation does not revive them', async () => {
    const u = await twoSessions('deactivate');
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    await expectAllSessionsEnded(u);
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: true } })).status).toBe(200);
    for (const session of u.sessions) expectAuthRequired(await me(u.id, session.access));
    // A new login after reactivation works.
    const fresh = await tryLogin(t.app, u.email, u.password);
    expect(fresh.status).toBe(200);
    expect((await me(u.id, fresh.body.data.accessToken)).status).toBe(200);
  });

  it('promotion to admin ends every session of the user', async () => {
    const u = await twoSessions('promote');
    const res = await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { role: 'admin' } });
    expect(res.status).toBe(200);
    expect(res.body.data.role).toBe('admin');
    await expectAllSessionsEnded(u);
    // Signed in again, the new role applies.
    const fresh = await tryLogin(t.app, u.email, u.password);
    expect((await call(t.app, 'GET', '/api/users', { token: fresh.body.data.accessToken })).status).toBe(200);
  });

  it('demotion from admin ends every session of the user', async () => {
    const u = await twoSessions('demote', { role: 'admin' });
    expect((await call(t.app, 'GET', '/api/users', { token: u.token })).status).toBe(200);
    const res = await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { role: 'user' } });
    expect(res.status).toBe(200);
    await expectAllSessionsEnded(u);
    const fresh = await tryLogin(t.app, u.email, u.password);
    expect((await call(t.app, 'GET', '/api/users', { token: fresh.body.data.accessToken })).status).toBe(403);
  });

  it('deletion ends every session of the user', async () => {
    const u = await twoSessions('delete');
    expect((await call(t.app, 'DELETE', `/api/users/${u.id}`, { token: admin })).status).toBe(200);
    await expectAllSessionsEnded(u);
  });

  it('an update that changes neither role nor active status leaves the sessions alone', async () => {
    const u = await twoSessions('harmless');
    const renamed = await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { name: 'Renamed', role: 'user', active: true } });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data.name).toBe('Renamed');
    const selfRenamed = await call(t.app, 'PUT', `/api/users/${u.id}`, { token: u.token, body: { name: 'Renamed Again' } });
    expect(selfRenamed.status).toBe(200);
    for (const session of u.sessions) expect((await me(u.id, session.access)).status).toBe(200);
    expect((await refresh(t.app, u.sessions[1]!.refresh)).status).toBe(200);
  });
});

describe('ending one session refuses its access tokens at once, in every process', () => {
  const logout = (refreshToken: string) => call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken } });

  it('POST /api/auth/logout: the access token of the session answers 401 from the next request', async () => {
    const u = await freshUser(t.app, admin, 'logout-access');
    expect((await me(u.id, u.token)).status).toBe(200);
    expect((await logout(u.refreshToken)).status).toBe(200);
    expectAuthRequired(await me(u.id, u.token));
    expectAuthRequired(await call(t.app, 'GET', '/api/domains', { token: u.token }));
  });

  it("POST /api/auth/session/logout (the dashboard's cookie): the same", async () => {
    const u = await freshUser(t.app, admin, 'cookie-logout');
    const signedIn = await call(t.app, 'POST', SESSION_PATH, { body: { email: u.email, password: u.password }, headers: { [SESSION_HEADER]: '1' } });
    expect(signedIn.status).toBe(200);
    const access = signedIn.body.data.accessToken as string;
    const cookie = signedIn.headers.getSetCookie().find((c) => c.startsWith(`${SESSION_COOKIE}=`))!.split(';')[0]!;
    expect((await me(u.id, access)).status).toBe(200);
    expect((await call(t.app, 'POST', `${SESSION_PATH}/logout`, { headers: { [SESSION_HEADER]: '1', cookie } })).status).toBe(200);
    expectAuthRequired(await me(u.id, access));
    // The user's other session (from freshUser's login) lives on.
    expect((await me(u.id, u.token)).status).toBe(200);
  });

  it("another session of the same user keeps working, access and refresh tokens, after one session logs out", async () => {
    const u = await twoSessions('one-of-two');
    expect((await logout(u.sessions[0]!.refresh)).status).toBe(200);
    expectAuthRequired(await me(u.id, u.sessions[0]!.access));
    expect((await me(u.id, u.sessions[1]!.access)).status).toBe(200);
    expect((await refresh(t.app, u.sessions[1]!.refresh)).status).toBe(200);
  });

  it("refresh-token reuse: every access token of the family answers 401, the user's other session lives on", async () => {
    const u = await twoSessions('reuse-access');
    const [stolen, other] = u.sessions as [(typeof u.sessions)[0], (typeof u.sessions)[0]];
    const rotated = await refresh(t.app, stolen.refresh);
    expect(rotated.status).toBe(200);
    const newest = rotated.body.data.accessToken as string;
    // Rotation alone ends nothing: both access tokens of the family work.
    for (const token of [stolen.access, newest]) expect((await me(u.id, token)).status).toBe(200);
    // The spent refresh token presented again revokes the family…
    expectRefreshRefused(await refresh(t.app, stolen.refresh));
    // …and with it every access token issued in it.
    for (const token of [stolen.access, newest]) expectAuthRequired(await me(u.id, token));
    expect((await me(u.id, other.access)).status).toBe(200);
    expect((await me(u.bystander.id, u.bystander.token)).status).toBe(200);
  });

  // Two API processes on one Postgres only exist in server mode: in embedded mode a DATA_DIR's
  // stores belong to one process (docs/reference/modes.md), so there is no second process to ask.
  it.skipIf(!process.env.DATABASE_URL)('a second app instance on the same database refuses the token at once (server mode only)', async () => {
    // What a second process has of its own: its Postgres connections and its secret's bytes, so
    // its own cache of verified tokens. It shares the ClickHouse client, which these requests
    // never use (chDB takes one data directory per process).
    const db = await openPostgres(t.databaseUrl!);
    try {
      const other = createApp({ ...t.runtime, db, jwtSecret: new TextEncoder().encode(JWT_SECRET) });
      const u = await freshUser(t.app, admin, 'two-instances');
      // Accepted by both (each has now verified, and remembered, the token's signature).
      expect((await me(u.id, u.token)).status).toBe(200);
      expect((await call(other, 'GET', `/api/users/${u.id}`, { token: u.token })).status).toBe(200);
      expect((await logout(u.refreshToken)).status).toBe(200);
      expectAuthRequired(await call(other, 'GET', `/api/users/${u.id}`, { token: u.token }));
      // And the other way round: a logout through the second instance ends the session in the first.
      const again = await login(t.app, u.email, u.password);
      expect((await call(other, 'GET', `/api/users/${u.id}`, { token: again.accessToken })).status).toBe(200);
      expect((await call(other, 'POST', '/api/auth/logout', { body: { refreshToken: again.refreshToken } })).status).toBe(200);
      expectAuthRequired(await me(u.id, again.accessToken));
    } finally {
      await db.close();
    }
  });
});

describe('permission changes take effect at once for existing tokens', () => {
  const setPermissions = (id: number, permissions: unknown) => call(t.app, 'PUT', `/api/users/${id}/permissions`, { token: admin, body: { permissions } });

  it('granting users:read opens GET /api/users to the same token; revoking closes it again', async () => {
    const u = await freshUser(t.app, admin, 'perm');
    const before = await call(t.app, 'GET', '/api/users', { token: u.token });
    expect(before.status).toBe(403);
    expect(before.body).toEqual({ success: false, error: 'Insufficient permissions' });

    const granted = await setPermissions(u.id, [
      { resource: 'users', actions: ['read'] },
      { resource: 'logs', actions: ['read'] },
    ]);
    expect(granted.status).toBe(200);
    const during = await call(t.app, 'GET', '/api/users', { token: u.token });
    expect(during.status).toBe(200);
    expect(during.body.data.pagination.total).toBeGreaterThanOrEqual(2);
    // Read, but not create: the grant is exactly what was set.
    const create = await call(t.app, 'POST', '/api/users', { token: u.token, body: { email: `x-${u.id}@example.com`, password: 'whatever-pw-1' } });
    expect(create.status).toBe(403);

    expect((await setPermissions(u.id, [{ resource: 'logs', actions: ['read'] }])).status).toBe(200);
    expect((await call(t.app, 'GET', '/api/users', { token: u.token })).status).toBe(403);
    // The token itself is still valid: a permission change ends no session.
    expect((await me(u.id, u.token)).status).toBe(200);
    expect((await refresh(t.app, u.refreshToken)).status).toBe(200);
  });

  it('granting users:create lets the same token create users at once', async () => {
    const u = await freshUser(t.app, admin, 'perm-create');
    const body = { email: `created-by-${u.id}@example.com`, password: 'created-pw-1' };
    expect((await call(t.app, 'POST', '/api/users', { token: u.token, body })).status).toBe(403);
    expect((await setPermissions(u.id, [{ resource: 'users', actions: ['create'] }])).status).toBe(200);
    const created = await call(t.app, 'POST', '/api/users', { token: u.token, body });
    expect(created.status).toBe(201);
    expect(created.body.data.email).toBe(body.email);
  });
});
