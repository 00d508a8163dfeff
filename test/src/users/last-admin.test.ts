import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_EMAIL, ADMIN_PASSWORD, login, startTestApp, type TestApp } from '../../support/app.js';
import { api, expectError, expectUnauthorized, makeActor, makeUser, rememberSecret, uniqueEmail, uniquePassword } from '../../support/users.js';

/**
 * The last active administrator (docs/reference/permissions.md#what-only-admins-may-do). The set of administrators is global, so every test
 * starts from, and returns to, one active administrator: the first one (`ADMIN_EMAIL`).
 */

let t: TestApp;
let firstAdminId: number;

beforeAll(async () => {
  t = await startTestApp();
  rememberSecret(ADMIN_PASSWORD);
  firstAdminId = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).user.id;
});
afterAll(async () => {
  await t?.close();
});

/** A fresh token of the first admin (earlier ones may have been ended by a role change). */
const firstAdmin = async () => (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;

/** Ids of the active administrators, read through the API. */
async function activeAdmins(): Promise<number[]> {
  const res = await api(t.app, 'GET', '/api/users?role=admin&limit=100', { token: await firstAdmin() });
  expect(res.status).toBe(200);
  return res.body.data.users.filter((u: { active: boolean }) => u.active).map((u: { id: number }) => u.id);
}

/** Demotes, deactivates or deletes every other admin, active or not, so the next test starts clean. */
afterEach(async () => {
  const token = await firstAdmin();
  const admins = await api(t.app, 'GET', '/api/users?role=admin&limit=100', { token });
  for (const user of admins.body.data.users as { id: number }[]) {
    if (user.id !== firstAdminId) expect((await api(t.app, 'DELETE', `/api/users/${user.id}`, { token })).status).toBe(200);
  }
  expect(await activeAdmins()).toEqual([firstAdminId]);
});

const LOSING_ADMIN: [string, string, Record<string, unknown> | undefined][] = [
  ['deleted', 'DELETE', undefined],
  ['demoted', 'PUT', { role: 'user' }],
  ['deactivated', 'PUT', { active: false }],
  ['demoted and deactivated', 'PUT', { role: 'user', active: false }],
];

describe('the last active administrator', () => {
  it.each(LOSING_ADMIN)('cannot be %s (409), and keeps its role, state and session', async (_label, method, body) => {
    const token = await firstAdmin();
    expect(await activeAdmins()).toEqual([firstAdminId]);
    const res = await api(t.app, method, `/api/users/${firstAdminId}`, { token, ...(body ? { body } : {}) });
    expectError(res, 409);
    expect(res.body.error).toMatch(/admin/i);
    const after = await api(t.app, 'GET', `/api/users/${firstAdminId}`, { token });
    expect(after.status).toBe(200);
    expect(after.body.data).toMatchObject({ role: 'admin', active: true });
  });

  it('may still change its own name and e-mail, and send role admin and active true unchanged', async () => {
    const token = await firstAdmin();
    const res = await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token, body: { name: 'Chief', role: 'admin', active: true } });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ name: 'Chief', role: 'admin', active: true });
  });

  it.each(LOSING_ADMIN)('can be %s while a second active admin exists', async (_label, method, body) => {
    const second = await makeActor(t.app, await firstAdmin(), 'admin');
    const res = await api(t.app, method, `/api/users/${second.id}`, { token: await firstAdmin(), ...(body ? { body } : {}) });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expectUnauthorized(await api(t.app, 'GET', `/api/users/${second.id}`, { token: second.token }));
    expect(await activeAdmins()).toEqual([firstAdminId]);
  });

  it('can lose the first admin to a second admin, and the second then becomes the last one', async () => {
    const second = await makeActor(t.app, await firstAdmin(), 'admin');
    const demote = await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: second.token, body: { role: 'user' } });
    expect(demote.status).toBe(200);
    expect(await adminsAs(second.token)).toEqual([second.id]);
    for (const [, method, body] of LOSING_ADMIN) {
      expectError(await api(t.app, method, `/api/users/${second.id}`, { token: second.token, ...(body ? { body } : {}) }), 409);
    }
    expect((await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: second.token, body: { role: 'admin' } })).status).toBe(200);
    const deleteSelf = await api(t.app, 'DELETE', `/api/users/${second.id}`, { token: second.token });
    expect(deleteSelf.status).toBe(200);
    expect(await activeAdmins()).toEqual([firstAdminId]);
  });

  it('does not count deactivated admins', async () => {
    const token = await firstAdmin();
    const dormant = await makeUser(t.app, token, { role: 'admin', active: false, email: uniqueEmail('dormant') });
    const deactivated = await makeActor(t.app, token, 'admin');
    expect((await api(t.app, 'PUT', `/api/users/${deactivated.id}`, { token, body: { active: false } })).status).toBe(200);
    const admins = await api(t.app, 'GET', '/api/users?role=admin', { token });
    expect(admins.body.data.users.map((u: { id: number }) => u.id)).toEqual([firstAdminId, dormant.id, deactivated.id]);
    expect(await activeAdmins()).toEqual([firstAdminId]);
    for (const [, method, body] of LOSING_ADMIN) {
      expectError(await api(t.app, method, `/api/users/${firstAdminId}`, { token, ...(body ? { body } : {}) }), 409);
    }
    // Inactive admins themselves are no obstacle: they may be demoted or deleted.
    expect((await api(t.app, 'PUT', `/api/users/${dormant.id}`, { token, body: { role: 'user' } })).status).toBe(200);
    expect((await api(t.app, 'DELETE', `/api/users/${deactivated.id}`, { token })).status).toBe(200);
    // Reactivating one makes the first admin removable again.
    const revived = await makeUser(t.app, token, { role: 'admin', active: false });
    expect((await api(t.app, 'PUT', `/api/users/${revived.id}`, { token, body: { active: true } })).status).toBe(200);
    expect(await activeAdmins()).toEqual([firstAdminId, revived.id]);
    const revivedSession = await login(t.app, revived.email, revived.password);
    expect((await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token, body: { active: false } })).status).toBe(200);
    expect((await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: revivedSession.accessToken, body: { active: true } })).status).toBe(200);
  });

  it('survives two admins demoting each other at the same time: at least one stays', async () => {
    const token = await firstAdmin();
    const second = await makeActor(t.app, token, 'admin');
    const [a, b] = await Promise.all([
      api(t.app, 'PUT', `/api/users/${second.id}`, { token, body: { role: 'user' } }),
      api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: second.token, body: { role: 'user' } }),
    ]);
    const statuses = [a.status, b.status].sort();
    expect(statuses[0]).toBe(200);
    expect([401, 409]).toContain(statuses[1]);
    const remaining = await adminsAs(a.status === 200 ? token : (await login(t.app, second.email, second.password)).accessToken);
    expect(remaining).toHaveLength(1);
    if (remaining[0] !== firstAdminId) {
      const survivor = (await login(t.app, second.email, second.password)).accessToken;
      expect((await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: survivor, body: { role: 'admin' } })).status).toBe(200);
    }
  });

  it('cannot be bypassed by a non-admin with every users permission', async () => {
    const token = await firstAdmin();
    const email = uniqueEmail('power');
    const password = uniquePassword();
    const created = await api(t.app, 'POST', '/api/users', { token, body: { email, password } });
    const all = ['read', 'create', 'update', 'delete'];
    await api(t.app, 'PUT', `/api/users/${created.body.data.id}/permissions`, { token, body: { permissions: [{ resource: 'users', actions: all }] } });
    const power = (await login(t.app, email, password)).accessToken;
    expectError(await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: power, body: { role: 'user' } }), 403);
    expectError(await api(t.app, 'PUT', `/api/users/${firstAdminId}`, { token: power, body: { active: false } }), 403);
    // Administrator accounts are deleted by administrators only, last or not.
    expectError(await api(t.app, 'DELETE', `/api/users/${firstAdminId}`, { token: power }), 403);
    expect(await activeAdmins()).toEqual([firstAdminId]);
  });
});

/** Active admin ids as seen by the given admin token. */
async function adminsAs(token: string): Promise<number[]> {
  const res = await api(t.app, 'GET', '/api/users?role=admin&limit=100', { token });
  expect(res.status).toBe(200);
  return res.body.data.users.filter((u: { active: boolean }) => u.active).map((u: { id: number }) => u.id);
}
