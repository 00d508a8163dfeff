import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_EMAIL, ADMIN_PASSWORD, login, type TestApp } from '../../support/app.js';
import { appWithAdmin } from '../../support/auth.js';
import { api, expectForbidden, expectUnauthorized, makeActor, makeUser, rememberSecret, uniqueEmail, uniquePassword, type Actor, type Kind } from '../../support/users.js';

/**
 * The authorization matrix (docs/reference/permissions.md) for the ten user operations: per operation, one row per
 * kind of caller and target (self or another user), with the status it must get and, for a
 * refusal, proof that nothing changed.
 */

let t: TestApp;
let admin: string;

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
  rememberSecret(ADMIN_PASSWORD);
});
afterAll(async () => {
  await t?.close();
});

let ips = 0;
/** A client address of its own for each login attempt, so that expected failures never throttle later tests. */
const nextIp = () => `192.0.2.${++ips}`;

type Whom = 'self' | 'other';
type Row = [Kind, Whom, number];

/** A fresh caller of `kind` and the id it acts on: itself, or a fresh plain user. */
async function setup(kind: Kind, whom: Whom): Promise<{ actor: Actor; target: { id: number; email: string; password: string; user: any } }> {
  const actor = await makeActor(t.app, admin, kind, 'Actor');
  if (whom === 'self') {
    const self = (await api(t.app, 'GET', `/api/users/${actor.id}`, { token: admin })).body.data;
    return { actor, target: { id: actor.id, email: actor.email, password: actor.password, user: self } };
  }
  return { actor, target: await makeUser(t.app, admin) };
}

const record = async (id: number) => (await api(t.app, 'GET', `/api/users/${id}`, { token: admin })).body;
const permissionsOf = async (id: number) => (await api(t.app, 'GET', `/api/users/${id}/permissions`, { token: admin })).body.data.permissions;

/** Asserts the expected status; a 403 must carry the envelope and never a user record. */
function expectStatus(res: { status: number; body: any; headers: Headers }, status: number): void {
  if (status === 403) expectForbidden(res);
  else expect(res.status, JSON.stringify(res.body)).toBe(status);
}

describe('list users: GET /api/users', () => {
  it.each<[Kind, number]>([
    ['admin', 200],
    ['reader', 200],
    ['user', 403],
    ['updater', 403],
    ['creator', 403],
    ['deleter', 403],
  ])('%s -> %i', async (kind, status) => {
    const actor = await makeActor(t.app, admin, kind);
    const res = await api(t.app, 'GET', '/api/users?limit=100', { token: actor.token });
    expectStatus(res, status);
    if (status === 200) expect(res.body.data.users.map((u: { email: string }) => u.email)).toEqual(expect.arrayContaining([ADMIN_EMAIL, actor.email]));
  });
});

describe('get user: GET /api/users/:id', () => {
  it.each<Row>([
    ['admin', 'other', 200],
    ['user', 'self', 200],
    ['user', 'other', 403],
    ['reader', 'other', 200],
    ['updater', 'self', 200],
    ['updater', 'other', 403],
    ['creator', 'other', 403],
    ['deleter', 'other', 403],
  ])('%s on %s -> %i', async (kind, whom, status) => {
    const { actor, target } = await setup(kind, whom);
    const res = await api(t.app, 'GET', `/api/users/${target.id}`, { token: actor.token });
    expectStatus(res, status);
    if (status === 200) expect(res.body.data).toEqual(target.user);
  });
});

describe('create user: POST /api/users', () => {
  it.each<[Kind, Record<string, unknown>, number]>([
    ['admin', { role: 'user' }, 201],
    ['admin', { role: 'admin' }, 201],
    ['admin', { active: false }, 201],
    ['creator', {}, 201],
    ['creator', { role: 'user', active: true }, 201],
    ['creator', { role: 'admin' }, 403],
    ['creator', { active: false }, 403],
    ['user', {}, 403],
    ['reader', {}, 403],
    ['updater', {}, 403],
    ['deleter', {}, 403],
  ])('%s creating %j -> %i', async (kind, fields, status) => {
    const actor = await makeActor(t.app, admin, kind);
    const email = uniqueEmail('made');
    const res = await api(t.app, 'POST', '/api/users', { token: actor.token, body: { email, password: uniquePassword(), ...fields } });
    expectStatus(res, status);
    const found = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(email)}`, { token: admin });
    expect(found.body.data.pagination.total).toBe(status === 201 ? 1 : 0);
    if (status === 201) expect(res.body.data).toMatchObject({ email, role: fields.role ?? 'user', active: fields.active ?? true });
  });
});

describe('update user: PUT /api/users/:id', () => {
  it.each<[Kind, Whom, Record<string, unknown>, number]>([
    ['admin', 'other', { name: 'Changed', email: 'NEW' }, 200],
    ['admin', 'other', { role: 'admin' }, 200],
    ['admin', 'other', { active: false }, 200],
    // One's own e-mail changes through a confirmation link: test/src/users/email-change.test.ts.
    ['user', 'self', { name: 'Changed' }, 200],
    ['user', 'self', { name: 'Changed', role: 'user', active: true }, 200],
    ['user', 'self', { role: 'admin' }, 403],
    ['user', 'self', { active: false }, 403],
    ['user', 'self', { name: 'Sneaky', role: 'admin' }, 403],
    ['user', 'other', { name: 'Changed' }, 403],
    ['user', 'other', { email: 'NEW' }, 403],
    ['reader', 'other', { name: 'Changed' }, 403],
    ['updater', 'other', { name: 'Changed', email: 'NEW' }, 200],
    ['updater', 'other', { role: 'admin' }, 403],
    ['updater', 'other', { active: false }, 403],
    ['updater', 'other', { name: 'Sneaky', active: false }, 403],
    ['updater', 'self', { role: 'admin' }, 403],
    ['creator', 'other', { name: 'Changed' }, 403],
    ['deleter', 'other', { name: 'Changed' }, 403],
  ])('%s on %s with %j -> %i', async (kind, whom, template, status) => {
    const { actor, target } = await setup(kind, whom);
    const newEmail = uniqueEmail('renamed');
    const body = { ...template, ...(template.email ? { email: newEmail } : {}) };
    const res = await api(t.app, 'PUT', `/api/users/${target.id}`, { token: actor.token, body });
    expectStatus(res, status);
    const after = await record(target.id);
    if (status === 200) expect(after.data).toMatchObject(body);
    else expect(after.data).toEqual(target.user);
  });
});

describe('delete user: DELETE /api/users/:id', () => {
  it.each<Row>([
    ['admin', 'other', 200],
    ['deleter', 'other', 200],
    ['user', 'other', 403],
    ['user', 'self', 403],
    ['reader', 'other', 403],
    ['updater', 'other', 403],
    ['creator', 'other', 403],
  ])('%s on %s -> %i', async (kind, whom, status) => {
    const { actor, target } = await setup(kind, whom);
    const res = await api(t.app, 'DELETE', `/api/users/${target.id}`, { token: actor.token });
    expectStatus(res, status);
    const after = await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin });
    expect(after.status).toBe(status === 200 ? 404 : 200);
  });
});

describe('change password: PUT /api/users/:id/password', () => {
  it.each<[Kind, Whom, boolean, number]>([
    ['admin', 'other', false, 200],
    ['user', 'self', true, 200],
    ['updater', 'self', true, 200],
    ['user', 'other', true, 403],
    ['reader', 'other', true, 403],
    ['updater', 'other', false, 403],
    ['updater', 'other', true, 403],
    ['creator', 'other', true, 403],
    ['deleter', 'other', true, 403],
  ])('%s on %s (currentPassword sent: %s) -> %i', async (kind, whom, withCurrent, status) => {
    const { actor, target } = await setup(kind, whom);
    const newPassword = uniquePassword();
    const body = { ...(withCurrent ? { currentPassword: target.password } : {}), newPassword, confirmPassword: newPassword };
    expectStatus(await api(t.app, 'PUT', `/api/users/${target.id}/password`, { token: actor.token, body }), status);
    const attempt = await api(t.app, 'POST', '/api/auth/login', { body: { email: target.email, password: target.password }, ip: nextIp() });
    expect(attempt.status).toBe(status === 200 ? 401 : 200);
  });
});

describe('reset password: POST /api/users/:id/reset-password', () => {
  it.each<Row>([
    ['admin', 'other', 200],
    ['user', 'self', 403],
    ['user', 'other', 403],
    ['reader', 'other', 403],
    ['updater', 'other', 403],
    ['creator', 'other', 403],
    ['deleter', 'other', 403],
  ])('%s on %s -> %i', async (kind, whom, status) => {
    const { actor, target } = await setup(kind, whom);
    const res = await api(t.app, 'POST', `/api/users/${target.id}/reset-password`, { token: actor.token, body: { email: target.email } });
    expectStatus(res, status);
    if (status === 200) expect(res.body.message).toContain(target.email);
  });
});

describe('get permissions: GET /api/users/:id/permissions', () => {
  it.each<Row>([
    ['admin', 'other', 200],
    ['user', 'self', 200],
    ['user', 'other', 403],
    ['reader', 'other', 200],
    ['updater', 'other', 403],
    ['creator', 'other', 403],
    ['deleter', 'other', 403],
  ])('%s on %s -> %i', async (kind, whom, status) => {
    const { actor, target } = await setup(kind, whom);
    const res = await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: actor.token });
    expectStatus(res, status);
    if (status === 200) expect(res.body.data.permissions).toEqual(await permissionsOf(target.id));
  });
});

describe('set permissions: PUT /api/users/:id/permissions', () => {
  it.each<Row>([
    ['admin', 'other', 200],
    ['user', 'self', 403],
    ['user', 'other', 403],
    ['reader', 'other', 403],
    ['updater', 'self', 403],
    ['updater', 'other', 403],
    ['creator', 'other', 403],
    ['deleter', 'other', 403],
  ])('%s on %s -> %i', async (kind, whom, status) => {
    const { actor, target } = await setup(kind, whom);
    const before = await permissionsOf(target.id);
    const wanted = [{ resource: 'users', actions: ['read', 'create', 'update', 'delete'] }];
    expectStatus(await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, { token: actor.token, body: { permissions: wanted } }), status);
    expect(await permissionsOf(target.id)).toEqual(status === 200 ? wanted : before);
  });
});

describe('activity: GET /api/users/:id/activity', () => {
  it.each<Row>([
    ['admin', 'other', 200],
    ['user', 'self', 200],
    ['user', 'other', 403],
    ['reader', 'other', 200],
    ['updater', 'other', 403],
    ['creator', 'other', 403],
    ['deleter', 'other', 403],
  ])('%s on %s -> %i', async (kind, whom, status) => {
    const { actor, target } = await setup(kind, whom);
    const res = await api(t.app, 'GET', `/api/users/${target.id}/activity`, { token: actor.token });
    expectStatus(res, status);
    if (status === 200) {
      const expected = (await api(t.app, 'GET', `/api/users/${target.id}/activity`, { token: admin })).body.data.activities;
      expect(res.body.data.activities).toEqual(expected);
    }
  });
});

describe('BOLA: a plain user and another user\'s id', () => {
  it('gets 403, never 200, for every operation on the other id, and nothing changes', async () => {
    const attacker = await makeActor(t.app, admin, 'user');
    const victim = await makeUser(t.app, admin, { name: 'Victim' });
    const newPassword = uniquePassword();
    const attempts: [string, string, unknown][] = [
      ['GET', `/api/users/${victim.id}`, undefined],
      ['PUT', `/api/users/${victim.id}`, { name: 'Pwned', email: uniqueEmail('pwned') }],
      ['PUT', `/api/users/${victim.id}`, { role: 'admin' }],
      ['DELETE', `/api/users/${victim.id}`, undefined],
      ['PUT', `/api/users/${victim.id}/password`, { currentPassword: victim.password, newPassword, confirmPassword: newPassword }],
      ['POST', `/api/users/${victim.id}/reset-password`, { email: victim.email }],
      ['GET', `/api/users/${victim.id}/permissions`, undefined],
      ['PUT', `/api/users/${victim.id}/permissions`, { permissions: [] }],
      ['GET', `/api/users/${victim.id}/activity`, undefined],
      ['GET', `/api/users/${victim.id}/activity?startDate=2000-01-01`, undefined],
    ];
    for (const [method, url, body] of attempts) {
      const res = await api(t.app, method, url, { token: attacker.token, ...(body === undefined ? {} : { body }) });
      expect(res.status, `${method} ${url}`).not.toBe(200);
      expectForbidden(res);
      expect(JSON.stringify(res.body)).not.toContain(victim.email);
    }
    expect((await record(victim.id)).data).toEqual(victim.user);
    expect(await permissionsOf(victim.id)).toHaveLength(2);
    expect((await api(t.app, 'POST', '/api/auth/login', { body: { email: victim.email, password: victim.password } })).status).toBe(200);
  });

  it('gets 403 for unknown ids too, so ids cannot be probed', async () => {
    const attacker = await makeActor(t.app, admin, 'user');
    for (const url of ['/api/users/987654', '/api/users/987654/permissions', '/api/users/987654/activity']) {
      expectForbidden(await api(t.app, 'GET', url, { token: attacker.token }));
    }
    expectForbidden(await api(t.app, 'PUT', '/api/users/987654', { token: attacker.token, body: { name: 'x' } }));
    expectForbidden(await api(t.app, 'DELETE', '/api/users/987654', { token: attacker.token }));
  });

  it('cannot take over an account by moving its own e-mail onto a taken one (nor learn that it is taken)', async () => {
    const attacker = await makeActor(t.app, admin, 'user');
    const victim = await makeUser(t.app, admin);
    const res = await api(t.app, 'PUT', `/api/users/${attacker.id}`, { token: attacker.token, body: { email: victim.email, currentPassword: attacker.password } });
    expect(res.status).toBe(200);
    expect(res.body.data.email).toBe(attacker.email);
    expect((await record(attacker.id)).data.email).toBe(attacker.email);
    expect((await record(victim.id)).data.email).toBe(victim.email);
  });
});

describe('administrator accounts are changed by administrators only', () => {
  it('a user with users:update cannot change an admin\'s name or e-mail, nor a user with users:delete delete one', async () => {
    const otherAdmin = await makeActor(t.app, admin, 'admin');
    const before = (await record(otherAdmin.id)).data;
    const updater = await makeActor(t.app, admin, 'updater');
    expectForbidden(await api(t.app, 'PUT', `/api/users/${otherAdmin.id}`, { token: updater.token, body: { email: uniqueEmail('hijack') } }));
    expectForbidden(await api(t.app, 'PUT', `/api/users/${otherAdmin.id}`, { token: updater.token, body: { name: 'Renamed' } }));
    const deleter = await makeActor(t.app, admin, 'deleter');
    expectForbidden(await api(t.app, 'DELETE', `/api/users/${otherAdmin.id}`, { token: deleter.token }));
    expect((await record(otherAdmin.id)).data).toEqual(before);
    // The same rights still work on plain users.
    const plain = await makeUser(t.app, admin);
    expect((await api(t.app, 'PUT', `/api/users/${plain.id}`, { token: updater.token, body: { name: 'Renamed' } })).status).toBe(200);
    expect((await api(t.app, 'DELETE', `/api/users/${plain.id}`, { token: deleter.token })).status).toBe(200);
  });
});

describe('tokens of users that are gone or disabled', () => {
  const everyOperation = (id: number): [string, string, unknown][] => [
    ['GET', '/api/users', undefined],
    ['GET', `/api/users/${id}`, undefined],
    ['PUT', `/api/users/${id}`, { name: 'Back' }],
    ['GET', `/api/users/${id}/permissions`, undefined],
    ['GET', `/api/users/${id}/activity`, undefined],
    ['PUT', `/api/users/${id}/password`, { currentPassword: 'whatever-1', newPassword: 'long-enough-5', confirmPassword: 'long-enough-5' }],
  ];

  it("answer 401 once the user is deactivated, and stay 401 after reactivation (the old token's session ended)", async () => {
    const user = await makeActor(t.app, admin, 'reader');
    expect((await api(t.app, 'GET', '/api/users', { token: user.token })).status).toBe(200);
    expect((await api(t.app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    for (const [method, url, body] of everyOperation(user.id)) {
      expectUnauthorized(await api(t.app, method, url, { token: user.token, ...(body === undefined ? {} : { body }) }));
    }
    const refresh = await api(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: user.refreshToken } });
    expect(refresh.status).toBe(401);
    expect((await api(t.app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { active: true } })).status).toBe(200);
    expectUnauthorized(await api(t.app, 'GET', `/api/users/${user.id}`, { token: user.token }));
    const again = await login(t.app, user.email, user.password);
    expect((await api(t.app, 'GET', `/api/users/${user.id}`, { token: again.accessToken })).status).toBe(200);
  });

  it('answer 401 once the user is deleted', async () => {
    const user = await makeActor(t.app, admin, 'reader');
    expect((await api(t.app, 'DELETE', `/api/users/${user.id}`, { token: admin })).status).toBe(200);
    for (const [method, url, body] of everyOperation(user.id)) {
      expectUnauthorized(await api(t.app, method, url, { token: user.token, ...(body === undefined ? {} : { body }) }));
    }
    expect((await api(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: user.refreshToken } })).status).toBe(401);
  });

  it('answer 401 once the role changes, either way; a new login works with the new role', async () => {
    const promoted = await makeActor(t.app, admin, 'user');
    expect((await api(t.app, 'PUT', `/api/users/${promoted.id}`, { token: admin, body: { role: 'admin' } })).body.data.role).toBe('admin');
    expectUnauthorized(await api(t.app, 'GET', `/api/users/${promoted.id}`, { token: promoted.token }));
    expect((await api(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: promoted.refreshToken } })).status).toBe(401);
    const promotedAgain = await login(t.app, promoted.email, promoted.password);
    expect((await api(t.app, 'GET', '/api/users', { token: promotedAgain.accessToken })).status).toBe(200);

    const demoted = await makeActor(t.app, admin, 'admin');
    expect((await api(t.app, 'GET', '/api/users', { token: demoted.token })).status).toBe(200);
    expect((await api(t.app, 'PUT', `/api/users/${demoted.id}`, { token: admin, body: { role: 'user' } })).status).toBe(200);
    expectUnauthorized(await api(t.app, 'GET', '/api/users', { token: demoted.token }));
    const demotedAgain = await login(t.app, demoted.email, demoted.password);
    expectForbidden(await api(t.app, 'GET', '/api/users', { token: demotedAgain.accessToken }));
  });

  it('keep working when only the name or e-mail changes, or the role is sent unchanged', async () => {
    const user = await makeActor(t.app, admin, 'user');
    expect((await api(t.app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { name: 'New Name', email: uniqueEmail('kept'), role: 'user', active: true } })).status).toBe(200);
    expect((await api(t.app, 'GET', `/api/users/${user.id}`, { token: user.token })).body.data.name).toBe('New Name');
  });

  it('of other users are untouched when one user is deactivated', async () => {
    const a = await makeActor(t.app, admin, 'user');
    const b = await makeActor(t.app, admin, 'user');
    await api(t.app, 'PUT', `/api/users/${a.id}`, { token: admin, body: { active: false } });
    expect((await api(t.app, 'GET', `/api/users/${b.id}`, { token: b.token })).status).toBe(200);
  });
});

describe('requests without a valid token', () => {
  it.each([
    ['GET', '/api/users'],
    ['POST', '/api/users'],
    ['GET', '/api/users/1'],
    ['PUT', '/api/users/1'],
    ['DELETE', '/api/users/1'],
    ['PUT', '/api/users/1/password'],
    ['POST', '/api/users/1/reset-password'],
    ['GET', '/api/users/1/permissions'],
    ['PUT', '/api/users/1/permissions'],
    ['GET', '/api/users/1/activity'],
  ])('%s %s -> 401', async (method, url) => {
    const body = method === 'GET' || method === 'DELETE' ? {} : { body: {} };
    expectUnauthorized(await api(t.app, method, url, body));
    expectUnauthorized(await api(t.app, method, url, { ...body, token: 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.forged' }));
    expectUnauthorized(await api(t.app, method, url, { ...body, headers: { authorization: `Basic ${Buffer.from(`${ADMIN_EMAIL}:${ADMIN_PASSWORD}`).toString('base64')}` } }));
  });
});
