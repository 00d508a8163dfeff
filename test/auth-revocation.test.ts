import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, login, startTestApp, type TestApp } from './support/app.js';
import { adminToken, expectAuthRequired, expectRefreshRefused, freshUser, refresh, tryLogin } from './support/auth.js';

let t: TestApp;
let admin: string;
beforeAll(async () => {
  t = await startTestApp();
  admin = await adminToken(t.app);
});
afterAll(async () => {
  await t?.close();
});

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
