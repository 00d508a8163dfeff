import fs from 'node:fs/promises';
import path from 'node:path';
import { simpleParser } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_PASSWORD, type TestApp } from '../../support/app.js';
import {
  api,
  expectError,
  expectForbidden,
  expectInvalid,
  expectNotFound,
  expectUnauthorized,
  makeActor,
  makeUser,
  rememberSecret,
  uniquePassword,
} from '../../support/users.js';
import { appWithAdmin } from '../../support/auth.js';

let t: TestApp;
let admin: string;
let adminId: number;

beforeAll(async () => {
  rememberSecret(ADMIN_PASSWORD);
  ({ t, admin, adminId } = await appWithAdmin());
});
afterAll(() => t?.close());

const ALL = ['read', 'create', 'update', 'delete'];
const sortEntries = (entries: { resource: string; actions: string[] }[]) =>
  entries.map((e) => ({ resource: e.resource, actions: [...e.actions].sort() })).sort((a, b) => a.resource.localeCompare(b.resource));

/** True when the password signs the user in; failures use their own client address so they never throttle each other. */
let loginAttempts = 0;
async function canLogin(email: string, password: string): Promise<boolean> {
  loginAttempts += 1;
  const ip = `198.51.${Math.floor(loginAttempts / 250)}.${(loginAttempts % 250) + 1}`;
  const res = await api(t.app, 'POST', '/api/auth/login', { body: { email, password }, ip });
  if (res.status !== 200 && res.status !== 401) throw new Error(`login answered ${res.status}`);
  return res.status === 200;
}

describe('PUT /api/users/:id/password', () => {
  it('changes the own password with the right currentPassword; answers a message; old password and old sessions stop working', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const newPassword = uniquePassword();
    const res = await api(t.app, 'PUT', `/api/users/${me.id}/password`, {
      token: me.token,
      body: { currentPassword: me.password, newPassword, confirmPassword: newPassword },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, message: expect.any(String) });
    expect(res.body.message.length).toBeGreaterThan(0);
    expect(await canLogin(me.email, newPassword)).toBe(true);
    expect(await canLogin(me.email, me.password)).toBe(false);
    expectUnauthorized(await api(t.app, 'GET', `/api/users/${me.id}`, { token: me.token }));
    const refreshed = await api(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: me.refreshToken } });
    expectError(refreshed, 401);
  });

  it('answers 422 on currentPassword for a wrong current password, and keeps the old one', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const newPassword = uniquePassword();
    const res = await api(t.app, 'PUT', `/api/users/${me.id}/password`, {
      token: me.token,
      body: { currentPassword: `${me.password}-wrong`, newPassword, confirmPassword: newPassword },
    });
    expectInvalid(res, 'currentPassword');
    expect(Object.keys(res.body.details)).toEqual(['currentPassword']);
    expect(await canLogin(me.email, me.password)).toBe(true);
    expect(await canLogin(me.email, newPassword)).toBe(false);
    expect((await api(t.app, 'GET', `/api/users/${me.id}`, { token: me.token })).status).toBe(200);
  });

  it('answers 422 on currentPassword when changing the own password without it', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const newPassword = uniquePassword();
    expectInvalid(await api(t.app, 'PUT', `/api/users/${me.id}/password`, { token: me.token, body: { newPassword, confirmPassword: newPassword } }), 'currentPassword');
    expect(await canLogin(me.email, me.password)).toBe(true);
  });

  it('asks an admin for the current password of their own account too', async () => {
    const me = await makeActor(t.app, admin, 'admin');
    const newPassword = uniquePassword();
    expectInvalid(await api(t.app, 'PUT', `/api/users/${me.id}/password`, { token: me.token, body: { newPassword, confirmPassword: newPassword } }), 'currentPassword');
    expectInvalid(
      await api(t.app, 'PUT', `/api/users/${me.id}/password`, { token: me.token, body: { currentPassword: 'wrong-password', newPassword, confirmPassword: newPassword } }),
      'currentPassword',
    );
    const ok = await api(t.app, 'PUT', `/api/users/${me.id}/password`, { token: me.token, body: { currentPassword: me.password, newPassword, confirmPassword: newPassword } });
    expect(ok.status).toBe(200);
    expect(await canLogin(me.email, newPassword)).toBe(true);
  });

  it('answers 422 on confirmPassword when it differs from newPassword', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const newPassword = uniquePassword();
    const res = await api(t.app, 'PUT', `/api/users/${me.id}/password`, {
      token: me.token,
      body: { currentPassword: me.password, newPassword, confirmPassword: `${newPassword}x` },
    });
    expectInvalid(res, 'confirmPassword');
    expect(await canLogin(me.email, me.password)).toBe(true);
  });

  it.each([
    ['a newPassword of 7 characters', { newPassword: '1234567', confirmPassword: '1234567' }, 'newPassword'],
    ['a missing newPassword', { confirmPassword: 'long-enough-3' }, 'newPassword'],
    ['a missing confirmPassword', { newPassword: 'long-enough-3' }, 'confirmPassword'],
    ['an unknown field', { newPassword: 'long-enough-3', confirmPassword: 'long-enough-3', force: true }, 'force'],
  ])('answers 422 for %s', async (_label, body, field) => {
    const me = await makeActor(t.app, admin, 'user');
    expectInvalid(await api(t.app, 'PUT', `/api/users/${me.id}/password`, { token: me.token, body: { currentPassword: me.password, ...body } }), field);
    expect(await canLogin(me.email, me.password)).toBe(true);
  });

  it("lets an admin set another user's password without currentPassword; that user's sessions end", async () => {
    const target = await makeActor(t.app, admin, 'user');
    const newPassword = uniquePassword();
    const res = await api(t.app, 'PUT', `/api/users/${target.id}/password`, { token: admin, body: { newPassword, confirmPassword: newPassword } });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(typeof res.body.message).toBe('string');
    expect(await canLogin(target.email, newPassword)).toBe(true);
    expect(await canLogin(target.email, target.password)).toBe(false);
    expectUnauthorized(await api(t.app, 'GET', `/api/users/${target.id}`, { token: target.token }));
    expect((await api(t.app, 'GET', '/api/users', { token: admin })).status).toBe(200);
  });

  it("forbids a non-admin to change another user's password, even with users:update", async () => {
    const target = await makeUser(t.app, admin);
    const newPassword = uniquePassword();
    for (const kind of ['user', 'reader', 'updater', 'creator', 'deleter'] as const) {
      const actor = await makeActor(t.app, admin, kind);
      const res = await api(t.app, 'PUT', `/api/users/${target.id}/password`, {
        token: actor.token,
        body: { currentPassword: target.password, newPassword, confirmPassword: newPassword },
      });
      expectForbidden(res);
    }
    expect(await canLogin(target.email, target.password)).toBe(true);
  });

  it('answers 404 to an admin for an unknown id', async () => {
    const newPassword = uniquePassword();
    expectNotFound(await api(t.app, 'PUT', '/api/users/987654/password', { token: admin, body: { newPassword, confirmPassword: newPassword } }));
  });
});

describe('POST /api/users/:id/reset-password', () => {
  it('lets an admin send a reset e-mail whose single-use link sets a new password', async () => {
    const target = await makeUser(t.app, admin, { name: 'Forgetful' });
    const res = await api(t.app, 'POST', `/api/users/${target.id}/reset-password`, { token: admin, body: { email: target.email.toUpperCase() } });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.message).toMatch(/e-?mail/i);
    expect(res.body.message).toMatch(/sent/i);
    expect(res.body).not.toHaveProperty('data');
    const outbox = path.join(t.dataDir, 'outbox');
    const files = await fs.readdir(outbox);
    const mails = await Promise.all(files.map(async (f) => simpleParser(await fs.readFile(path.join(outbox, f)))));
    const mail = mails.find((m) => m.text?.includes('reset-password') && JSON.stringify(m.to).includes(target.email));
    expect(mail, 'a mail to the user in the outbox').toBeDefined();
    const token = /http:\/\/tailhouse\.test\/reset-password\?token=(\S+)/.exec(mail!.text ?? '')?.[1];
    expect(token).toMatch(/^[\w%.~-]{16,}$/);
    const newPassword = uniquePassword();
    const reset = await api(t.app, 'POST', '/api/auth/reset-password', { body: { token: decodeURIComponent(token!), newPassword } });
    expect(reset.status).toBe(200);
    expect(await canLogin(target.email, newPassword)).toBe(true);
  });

  it("answers 422 on email when it is not the user's e-mail address", async () => {
    const target = await makeUser(t.app, admin);
    const other = await makeUser(t.app, admin);
    expectInvalid(await api(t.app, 'POST', `/api/users/${target.id}/reset-password`, { token: admin, body: { email: other.email } }), 'email');
    expectInvalid(await api(t.app, 'POST', `/api/users/${target.id}/reset-password`, { token: admin, body: {} }), 'email');
  });

  it('forbids everyone but an admin, including for their own account', async () => {
    const target = await makeUser(t.app, admin);
    for (const kind of ['user', 'reader', 'updater', 'creator', 'deleter'] as const) {
      const actor = await makeActor(t.app, admin, kind);
      expectForbidden(await api(t.app, 'POST', `/api/users/${target.id}/reset-password`, { token: actor.token, body: { email: target.email } }));
      expectForbidden(await api(t.app, 'POST', `/api/users/${actor.id}/reset-password`, { token: actor.token, body: { email: actor.email } }));
    }
  });

  it('answers 404 to an admin for an unknown id', async () => {
    expectNotFound(await api(t.app, 'POST', '/api/users/987654/reset-password', { token: admin, body: { email: 'nobody@example.com' } }));
  });
});

describe('GET /api/users/:id/permissions', () => {
  it('gives a new user exactly logs: [read] and alerts: [read, create, delete]', async () => {
    const target = await makeUser(t.app, admin);
    const res = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(Object.keys(res.body.data)).toEqual(['permissions']);
    expect(sortEntries(res.body.data.permissions)).toEqual([
      { resource: 'alerts', actions: ['create', 'delete', 'read'] },
      { resource: 'logs', actions: ['read'] },
    ]);
  });

  it('gives an admin every resource with every action', async () => {
    for (const id of [adminId, (await makeUser(t.app, admin, { role: 'admin' })).id]) {
      const res = await api(t.app, 'GET', `/api/users/${id}/permissions`, { token: admin });
      expect(res.status).toBe(200);
      expect(sortEntries(res.body.data.permissions)).toEqual(
        ['alerts', 'domains', 'logs', 'users'].map((resource) => ({ resource, actions: [...ALL].sort() })),
      );
    }
  });

  it('lets a user read their own permissions', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const res = await api(t.app, 'GET', `/api/users/${me.id}/permissions`, { token: me.token });
    expect(res.status).toBe(200);
    expect(sortEntries(res.body.data.permissions)).toEqual([
      { resource: 'alerts', actions: ['create', 'delete', 'read'] },
      { resource: 'logs', actions: ['read'] },
    ]);
  });

  it('answers 404 to an admin for an unknown id', async () => {
    expectNotFound(await api(t.app, 'GET', '/api/users/987654/permissions', { token: admin }));
  });
});

describe('PUT /api/users/:id/permissions', () => {
  it('replaces the whole list and answers a message', async () => {
    const target = await makeUser(t.app, admin);
    const res = await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, {
      token: admin,
      body: { permissions: [{ resource: 'domains', actions: ['update', 'read'] }, { resource: 'users', actions: ['read'] }] },
    });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, message: expect.any(String) });
    const got = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin });
    expect(sortEntries(got.body.data.permissions)).toEqual([
      { resource: 'domains', actions: ['read', 'update'] },
      { resource: 'users', actions: ['read'] },
    ]);
    const again = await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'logs', actions: ['read'] }] } });
    expect(again.status).toBe(200);
    const after = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin });
    expect(after.body.data.permissions).toEqual([{ resource: 'logs', actions: ['read'] }]);
  });

  it('accepts an empty list, leaving no permissions', async () => {
    const target = await makeUser(t.app, admin);
    expect((await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, { token: admin, body: { permissions: [] } })).status).toBe(200);
    const got = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin });
    expect(got.body.data.permissions).toEqual([]);
  });

  it('takes effect at once for tokens already issued', async () => {
    const actor = await makeActor(t.app, admin, 'user');
    const other = await makeUser(t.app, admin);
    expectForbidden(await api(t.app, 'GET', `/api/users/${other.id}`, { token: actor.token }));
    await api(t.app, 'PUT', `/api/users/${actor.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'users', actions: ['read'] }] } });
    expect((await api(t.app, 'GET', `/api/users/${other.id}`, { token: actor.token })).body.data.id).toBe(other.id);
    await api(t.app, 'PUT', `/api/users/${actor.id}/permissions`, { token: admin, body: { permissions: [] } });
    expectForbidden(await api(t.app, 'GET', `/api/users/${other.id}`, { token: actor.token }));
  });

  it.each([
    ['an unknown resource', [{ resource: 'billing', actions: ['read'] }], '[0].resource: '],
    ['an unknown action', [{ resource: 'logs', actions: ['read', 'purge'] }], '[0].actions[1]: '],
    ['an upper-case action', [{ resource: 'logs', actions: ['READ'] }], '[0].actions[0]: '],
    ['a duplicate resource', [{ resource: 'logs', actions: ['read'] }, { resource: 'logs', actions: ['delete'] }], '[1].resource: '],
    ['an entry without actions', [{ resource: 'logs' }], '[0].actions: '],
    ['an entry with an unknown field', [{ resource: 'logs', actions: ['read'], scope: 'all' }], '[0]: Unknown field scope'],
    ['actions that are a string', [{ resource: 'logs', actions: 'read' }], '[0].actions: '],
    ['a list that is an object', { logs: ['read'] }, ''],
    ['no list at all', undefined, ''],
  ])('answers 422 for %s, on the top-level field with where in it, and changes nothing', async (_label, permissions, place) => {
    const target = await makeUser(t.app, admin);
    const body = permissions === undefined ? {} : { permissions };
    const res = await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, { token: admin, body });
    expectInvalid(res, 'permissions');
    expect(Object.keys(res.body.details)).toEqual(['permissions']);
    expect(res.body.details.permissions.startsWith(place), res.body.details.permissions).toBe(true);
    const got = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin });
    expect(sortEntries(got.body.data.permissions)).toEqual([
      { resource: 'alerts', actions: ['create', 'delete', 'read'] },
      { resource: 'logs', actions: ['read'] },
    ]);
  });

  it('forbids every non-admin, also for their own permissions', async () => {
    const target = await makeUser(t.app, admin);
    const grab = { permissions: ['users', 'domains', 'logs', 'alerts'].map((resource) => ({ resource, actions: ALL })) };
    for (const kind of ['user', 'reader', 'updater', 'creator', 'deleter'] as const) {
      const actor = await makeActor(t.app, admin, kind);
      expectForbidden(await api(t.app, 'PUT', `/api/users/${actor.id}/permissions`, { token: actor.token, body: grab }));
      expectForbidden(await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, { token: actor.token, body: grab }));
      const own = await api(t.app, 'GET', `/api/users/${actor.id}/permissions`, { token: actor.token });
      expect(own.body.data.permissions.find((e: { resource: string }) => e.resource === 'domains')).toBeUndefined();
    }
    const got = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin });
    expect(got.body.data.permissions.map((e: { resource: string }) => e.resource).sort()).toEqual(['alerts', 'logs']);
  });

  it('answers 404 to an admin for an unknown id', async () => {
    expectNotFound(await api(t.app, 'PUT', '/api/users/987654/permissions', { token: admin, body: { permissions: [] } }));
  });
});
