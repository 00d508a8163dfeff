import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN_EMAIL, ADMIN_PASSWORD, login, type TestApp } from '../../support/app.js';
import {
  api,
  expectError,
  expectInvalid,
  expectNotFound,
  expectUnauthorized,
  ISO_MS,
  makeUser,
  rememberSecret,
  uniqueEmail,
  uniquePassword,
  uniqueTag,
} from '../../support/users.js';
import { appWithAdmin, USER_FIELDS } from '../../support/auth.js';

let t: TestApp;
let admin: string;
let adminId: number;

beforeAll(async () => {
  rememberSecret(ADMIN_PASSWORD);
  ({ t, admin, adminId } = await appWithAdmin());
});
afterAll(() => t?.close());


function expectUserShape(user: any): void {
  expect(Object.keys(user).sort()).toEqual(USER_FIELDS);
  expect(Number.isInteger(user.id)).toBe(true);
  expect(typeof user.name).toBe('string');
  expect(['admin', 'user']).toContain(user.role);
  expect(typeof user.active).toBe('boolean');
  expect(user.createdAt).toMatch(ISO_MS);
  expect(user.updatedAt).toMatch(ISO_MS);
  if (user.lastLoginAt !== null) expect(user.lastLoginAt).toMatch(ISO_MS);
}

/** Creates `count` users whose names carry `tag`, in order; returns their ids. */
async function createTagged(tag: string, count: number, role: 'admin' | 'user' = 'user'): Promise<number[]> {
  const ids: number[] = [];
  for (let i = 0; i < count; i++) {
    const res = await api(t.app, 'POST', '/api/users', {
      token: admin,
      body: { name: `${tag} member ${i}`, email: uniqueEmail('member'), password: uniquePassword(), role },
    });
    expect(res.status).toBe(201);
    ids.push(res.body.data.id);
  }
  return ids;
}

describe('GET /api/users (list)', () => {
  it('answers the first page of 20 by default, ordered by id ascending', async () => {
    await createTagged(uniqueTag('bulk'), 22);
    const res = await api(t.app, 'GET', '/api/users', { token: admin });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    const { users, pagination } = res.body.data;
    expect(users).toHaveLength(20);
    expect(pagination.page).toBe(1);
    expect(pagination.limit).toBe(20);
    expect(pagination.total).toBeGreaterThanOrEqual(23);
    expect(pagination.pages).toBe(Math.ceil(pagination.total / 20));
    const ids = users.map((u: { id: number }) => u.id);
    expect(ids).toEqual([...ids].sort((a, b) => a - b));
    expect(new Set(ids).size).toBe(20);
    expect(users[0].id).toBe(adminId);
    expect(users[0].email).toBe(ADMIN_EMAIL);
    users.forEach(expectUserShape);
  });

  it('pages with page and limit; pages = ceil(total / limit); a page past the end is empty with the right total', async () => {
    const tag = uniqueTag('page');
    const ids = await createTagged(tag, 5);
    const page = async (p: number, limit: number) => {
      const res = await api(t.app, 'GET', `/api/users?search=${tag}&page=${p}&limit=${limit}`, { token: admin });
      expect(res.status).toBe(200);
      return res.body.data;
    };
    const first = await page(1, 2);
    expect(first.users.map((u: { id: number }) => u.id)).toEqual(ids.slice(0, 2));
    expect(first.pagination).toEqual({ page: 1, limit: 2, total: 5, pages: 3 });
    const second = await page(2, 2);
    expect(second.users.map((u: { id: number }) => u.id)).toEqual(ids.slice(2, 4));
    expect(second.pagination).toEqual({ page: 2, limit: 2, total: 5, pages: 3 });
    const last = await page(3, 2);
    expect(last.users.map((u: { id: number }) => u.id)).toEqual(ids.slice(4));
    expect(last.pagination).toEqual({ page: 3, limit: 2, total: 5, pages: 3 });
    const past = await page(4, 2);
    expect(past.users).toEqual([]);
    expect(past.pagination).toEqual({ page: 4, limit: 2, total: 5, pages: 3 });
    const farPast = await page(50, 2);
    expect(farPast.users).toEqual([]);
    expect(farPast.pagination.total).toBe(5);
    expect((await page(1, 5)).pagination).toEqual({ page: 1, limit: 5, total: 5, pages: 1 });
    expect((await page(1, 4)).pagination).toEqual({ page: 1, limit: 4, total: 5, pages: 2 });
    expect((await page(1, 1)).pagination).toEqual({ page: 1, limit: 1, total: 5, pages: 5 });
    expect((await page(1, 100)).users).toHaveLength(5);
  });

  it('answers total 0 and pages 0 when nothing matches', async () => {
    const res = await api(t.app, 'GET', `/api/users?search=${uniqueTag('nothing')}`, { token: admin });
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ users: [], pagination: { page: 1, limit: 20, total: 0, pages: 0 } });
  });

  it('searches name or e-mail, case-insensitively', async () => {
    const tag = uniqueTag('srch');
    const byName = await makeUser(t.app, admin, { name: `Ada ${tag.toUpperCase()} Lovelace` });
    const byEmail = await makeUser(t.app, admin, { name: 'Someone Else', email: `${tag}.mail@example.com` });
    await makeUser(t.app, admin, { name: 'Unrelated' });
    for (const term of [tag, tag.toUpperCase(), tag.slice(0, 1).toUpperCase() + tag.slice(1)]) {
      const res = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(term)}`, { token: admin });
      expect(res.status).toBe(200);
      expect(res.body.data.users.map((u: { id: number }) => u.id)).toEqual([byName.id, byEmail.id]);
      expect(res.body.data.pagination.total).toBe(2);
    }
    const mail = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(`${tag.toUpperCase()}.MAIL@EXAMPLE`)}`, { token: admin });
    expect(mail.body.data.users.map((u: { id: number }) => u.id)).toEqual([byEmail.id]);
    const name = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(`ada ${tag} lovelace`)}`, { token: admin });
    expect(name.body.data.users.map((u: { id: number }) => u.id)).toEqual([byName.id]);
  });

  it('filters by role, alone and together with search', async () => {
    const tag = uniqueTag('role');
    const [adminMember] = await createTagged(tag, 1, 'admin');
    const userMembers = await createTagged(tag, 2, 'user');
    const admins = await api(t.app, 'GET', '/api/users?role=admin&limit=100', { token: admin });
    expect(admins.status).toBe(200);
    expect(admins.body.data.users.every((u: { role: string }) => u.role === 'admin')).toBe(true);
    expect(admins.body.data.users.map((u: { id: number }) => u.id)).toEqual(expect.arrayContaining([adminId, adminMember]));
    const users = await api(t.app, 'GET', '/api/users?role=user&limit=100', { token: admin });
    expect(users.body.data.users.length).toBeGreaterThanOrEqual(2);
    expect(users.body.data.users.every((u: { role: string }) => u.role === 'user')).toBe(true);
    expect(users.body.data.users.map((u: { id: number }) => u.id)).not.toContain(adminId);
    const taggedAdmins = await api(t.app, 'GET', `/api/users?role=admin&search=${tag}`, { token: admin });
    expect(taggedAdmins.body.data.users.map((u: { id: number }) => u.id)).toEqual([adminMember]);
    const taggedUsers = await api(t.app, 'GET', `/api/users?role=user&search=${tag}`, { token: admin });
    expect(taggedUsers.body.data.users.map((u: { id: number }) => u.id)).toEqual(userMembers);
    expect(taggedUsers.body.data.pagination).toEqual({ page: 1, limit: 20, total: 2, pages: 1 });
  });

  it.each([
    ['limit=0', 'limit'],
    ['limit=101', 'limit'],
    ['limit=-5', 'limit'],
    ['limit=1.5', 'limit'],
    ['limit=ten', 'limit'],
    ['page=abc', 'page'],
    ['page=0', 'page'],
    ['page=-1', 'page'],
    ['page=2.5', 'page'],
    ['page=1e1', 'page'],
    ['limit=0x10', 'limit'],
    ['limit=%2010', 'limit'],
    ['limit=', 'limit'],
    ['role=root', 'role'],
    ['role=ADMIN', 'role'],
    [`role=${encodeURIComponent("admin' OR '1'='1")}`, 'role'],
  ])('answers 422 for %s', async (query, field) => {
    const res = await api(t.app, 'GET', `/api/users?${query}`, { token: admin });
    expectInvalid(res, field);
  });

  it('accepts the limit bounds 1 and 100', async () => {
    const one = await api(t.app, 'GET', '/api/users?limit=1', { token: admin });
    expect(one.status).toBe(200);
    expect(one.body.data.users).toHaveLength(1);
    expect(one.body.data.pagination.pages).toBe(one.body.data.pagination.total);
    const hundred = await api(t.app, 'GET', '/api/users?limit=100', { token: admin });
    expect(hundred.status).toBe(200);
    expect(hundred.body.data.pagination.limit).toBe(100);
    expect(hundred.body.data.users.length).toBe(Math.min(100, hundred.body.data.pagination.total));
  });

  it('needs a token', async () => {
    expectUnauthorized(await api(t.app, 'GET', '/api/users'));
    expectUnauthorized(await api(t.app, 'GET', '/api/users', { token: 'not-a-jwt' }));
  });
});

describe('GET /api/users/:id', () => {
  it('answers the user record and nothing else', async () => {
    const email = uniqueEmail('get');
    const created = await makeUser(t.app, admin, { name: 'Grace Hopper', email, role: 'user' });
    const res = await api(t.app, 'GET', `/api/users/${created.id}`, { token: admin });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expectUserShape(res.body.data);
    expect(res.body.data).toEqual(created.user);
    expect(res.body.data).toMatchObject({ id: created.id, name: 'Grace Hopper', email, role: 'user', active: true, lastLoginAt: null });
  });

  it('shows lastLoginAt once the user has signed in', async () => {
    const created = await makeUser(t.app, admin);
    const before = Date.now();
    await login(t.app, created.email, created.password);
    const res = await api(t.app, 'GET', `/api/users/${created.id}`, { token: admin });
    expect(res.body.data.lastLoginAt).toMatch(ISO_MS);
    expect(Date.parse(res.body.data.lastLoginAt)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(res.body.data.lastLoginAt)).toBeLessThanOrEqual(Date.now() + 1000);
  });

  it('answers 404 "User not found" for an unknown id', async () => {
    expectNotFound(await api(t.app, 'GET', '/api/users/987654', { token: admin }));
    expectNotFound(await api(t.app, 'GET', `/api/users/${2 ** 31 - 1}`, { token: admin }));
  });

  it.each(['abc', '0', '-1', '1.5', '1%20OR%201%3D1', `${2 ** 31}`])('answers 422 for the id %s', async (id) => {
    expectInvalid(await api(t.app, 'GET', `/api/users/${id}`, { token: admin }), 'id');
  });
});

describe('POST /api/users (create)', () => {
  it('answers 201 with the new user; defaults role user, active true, name ""; lastLoginAt null', async () => {
    const email = uniqueEmail('new');
    const before = Date.now();
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password: uniquePassword() } });
    expect(res.status).toBe(201);
    expect(res.body.success).toBe(true);
    expectUserShape(res.body.data);
    expect(res.body.data).toMatchObject({ email, name: '', role: 'user', active: true, lastLoginAt: null });
    expect(Date.parse(res.body.data.createdAt)).toBeGreaterThanOrEqual(before - 1000);
    const again = await api(t.app, 'GET', `/api/users/${res.body.data.id}`, { token: admin });
    expect(again.body.data).toEqual(res.body.data);
  });

  it('stores the given name, role and active flag; the password works for login', async () => {
    const email = uniqueEmail('full');
    const password = uniquePassword();
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { name: '  Alan Turing  ', email, password, role: 'admin', active: true } });
    expect(res.status).toBe(201);
    expect(res.body.data).toMatchObject({ name: 'Alan Turing', email, role: 'admin', active: true });
    const session = await login(t.app, email, password);
    expect(session.user.id).toBe(res.body.data.id);
  });

  it('creates an inactive user who cannot sign in', async () => {
    const email = uniqueEmail('inactive');
    const password = uniquePassword();
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password, active: false } });
    expect(res.status).toBe(201);
    expect(res.body.data.active).toBe(false);
    const attempt = await api(t.app, 'POST', '/api/auth/login', { body: { email, password }, ip: '198.51.100.201' });
    expectError(attempt, 401, 'Invalid email or password');
  });

  it('trims and lower-cases the e-mail', async () => {
    const tag = uniqueTag('Case');
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { email: `  ${tag.toUpperCase()}@Example.COM  `, password: uniquePassword() } });
    expect(res.status).toBe(201);
    expect(res.body.data.email).toBe(`${tag.toLowerCase()}@example.com`);
  });

  it('answers 409 for an e-mail already in use, in any case and with spaces', async () => {
    const existing = await makeUser(t.app, admin);
    for (const email of [existing.email, existing.email.toUpperCase(), ` ${existing.email} `]) {
      const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password: uniquePassword() } });
      expectError(res, 409);
      expect(res.body.error).toMatch(/e-?mail/i);
    }
    const list = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(existing.email)}`, { token: admin });
    expect(list.body.data.pagination.total).toBe(1);
  });

  it.each([
    ['a missing e-mail', { password: 'long-enough-1' }, 'email'],
    ['an empty e-mail', { email: '', password: 'long-enough-1' }, 'email'],
    ['an e-mail without @', { email: 'not-an-address', password: 'long-enough-1' }, 'email'],
    ['an e-mail that is a number', { email: 42, password: 'long-enough-1' }, 'email'],
    ['an e-mail over 254 characters', { email: `${'a'.repeat(250)}@example.com`, password: 'long-enough-1' }, 'email'],
    ['a missing password', { email: 'x@example.com' }, 'password'],
    ['a password of 7 characters', { email: 'x@example.com', password: '1234567' }, 'password'],
    ['a password of 129 characters', { email: 'x@example.com', password: 'p'.repeat(129) }, 'password'],
    ['a password that is a number', { email: 'x@example.com', password: 12345678 }, 'password'],
    ['the role root', { email: 'x@example.com', password: 'long-enough-1', role: 'root' }, 'role'],
    ['active as a string', { email: 'x@example.com', password: 'long-enough-1', active: 'true' }, 'active'],
    ['a name that is an object', { email: 'x@example.com', password: 'long-enough-1', name: { first: 'A' } }, 'name'],
    ['a name over 200 characters', { email: 'x@example.com', password: 'long-enough-1', name: 'n'.repeat(201) }, 'name'],
    ['an unknown field', { email: 'x@example.com', password: 'long-enough-1', isAdmin: true }, 'isAdmin'],
    ['a passwordHash field', { email: 'x@example.com', password: 'long-enough-1', passwordHash: 'x' }, 'passwordHash'],
  ])('answers 422 for %s', async (_label, body, field) => {
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body });
    expectInvalid(res, field);
    const check = await api(t.app, 'GET', '/api/users?search=x%40example.com', { token: admin });
    expect(check.body.data.pagination.total).toBe(0);
  });

  it('names every offending field at once', async () => {
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { password: 'short' } });
    expectInvalid(res, 'email');
    expectInvalid(res, 'password');
  });

  it('accepts a password of exactly 8 and of 128 characters', async () => {
    for (const password of [rememberSecret('Eight#8!'), rememberSecret(uniqueTag('p').padEnd(128, 'y'))]) {
      const email = uniqueEmail('len');
      const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password } });
      expect(res.status).toBe(201);
      expect((await login(t.app, email, password)).user.email).toBe(email);
    }
  });

  it('accepts and ignores the read-only fields id, createdAt, updatedAt and lastLoginAt', async () => {
    const email = uniqueEmail('ro');
    const before = Date.now();
    const res = await api(t.app, 'POST', '/api/users', {
      token: admin,
      body: {
        id: 1,
        createdAt: '2001-01-01T00:00:00.000Z',
        updatedAt: '2001-01-01T00:00:00.000Z',
        lastLoginAt: '2001-01-01T00:00:00.000Z',
        email,
        password: uniquePassword(),
      },
    });
    expect(res.status).toBe(201);
    expect(res.body.data.id).not.toBe(1);
    expect(res.body.data.lastLoginAt).toBeNull();
    expect(Date.parse(res.body.data.createdAt)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(res.body.data.updatedAt)).toBeGreaterThanOrEqual(before - 1000);
    const first = await api(t.app, 'GET', '/api/users/1', { token: admin });
    expect(first.body.data.email).toBe(ADMIN_EMAIL);
  });

  it('answers 400 for a body that is not JSON', async () => {
    const res = await api(t.app, 'POST', '/api/users', { token: admin, body: '{"email": "x@example.com", ' });
    expectError(res, 400);
  });
});

describe('PUT /api/users/:id (partial update)', () => {
  const subsets: [string, Record<string, unknown>][] = [
    ['name', { name: 'Renamed Person' }],
    ['email', { email: 'EMAIL' }],
    ['role', { role: 'admin' }],
    ['active', { active: false }],
    ['name and email', { name: 'Both Changed', email: 'EMAIL' }],
    ['role and active', { role: 'admin', active: false }],
    ['all four', { name: 'All Four', email: 'EMAIL', role: 'admin', active: false }],
    ['nothing', {}],
  ];

  it.each(subsets)('changes only %s', async (_label, template) => {
    const target = await makeUser(t.app, admin, { name: 'Original Name' });
    const newEmail = uniqueEmail('changed');
    const body = { ...template, ...(template.email ? { email: `  ${newEmail.toUpperCase()} ` } : {}) };
    const res = await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expectUserShape(res.body.data);
    const expected = {
      ...target.user,
      ...template,
      ...(template.email ? { email: newEmail } : {}),
      updatedAt: expect.stringMatching(ISO_MS),
    };
    expect(res.body.data).toEqual(expected);
    expect(Date.parse(res.body.data.updatedAt)).toBeGreaterThanOrEqual(Date.parse(target.user.updatedAt));
    const stored = await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin });
    expect(stored.body.data).toEqual(res.body.data);
  });

  it('signs in with the new e-mail after an e-mail change, not with the old one', async () => {
    const target = await makeUser(t.app, admin);
    const newEmail = uniqueEmail('moved');
    expect((await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body: { email: newEmail } })).status).toBe(200);
    expect((await login(t.app, newEmail, target.password)).user.id).toBe(target.id);
    const old = await api(t.app, 'POST', '/api/auth/login', { body: { email: target.email, password: target.password }, ip: '198.51.100.202' });
    expectError(old, 401);
  });

  it('answers 409 when the e-mail belongs to another user, in any case', async () => {
    const taken = await makeUser(t.app, admin);
    const target = await makeUser(t.app, admin);
    const res = await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body: { name: 'Should Not Stick', email: taken.email.toUpperCase() } });
    expectError(res, 409);
    expect(res.body.error).toMatch(/e-?mail/i);
    const stored = await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin });
    expect(stored.body.data).toEqual(target.user);
  });

  it('keeps the user\'s own e-mail when sent again', async () => {
    const target = await makeUser(t.app, admin);
    const res = await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body: { email: target.email.toUpperCase(), name: 'Same Mail' } });
    expect(res.status).toBe(200);
    expect(res.body.data.email).toBe(target.email);
    expect(res.body.data.name).toBe('Same Mail');
  });

  it('accepts and ignores the read-only fields', async () => {
    const target = await makeUser(t.app, admin);
    const res = await api(t.app, 'PUT', `/api/users/${target.id}`, {
      token: admin,
      body: { ...target.user, id: adminId, createdAt: '2001-01-01T00:00:00.000Z', lastLoginAt: '2001-01-01T00:00:00.000Z', name: 'Round Trip' },
    });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ id: target.id, name: 'Round Trip', createdAt: target.user.createdAt, lastLoginAt: null });
    const adminRecord = await api(t.app, 'GET', `/api/users/${adminId}`, { token: admin });
    expect(adminRecord.body.data.name).not.toBe('Round Trip');
  });

  it('answers 404 for an unknown id', async () => {
    expectNotFound(await api(t.app, 'PUT', '/api/users/987654', { token: admin, body: { name: 'Nobody' } }));
  });

  it.each([
    ['an unknown field', { nickname: 'x' }, 'nickname'],
    ['a password field', { password: 'long-enough-2' }, 'password'],
    ['an invalid e-mail', { email: 'nope' }, 'email'],
    ['an invalid role', { role: 'superuser' }, 'role'],
    ['active as a number', { active: 0 }, 'active'],
    ['a null name', { name: null }, 'name'],
  ])('answers 422 for %s and changes nothing', async (_label, body, field) => {
    const target = await makeUser(t.app, admin);
    expectInvalid(await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body }), field);
    expect((await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin })).body.data).toEqual(target.user);
  });
});

describe('DELETE /api/users/:id', () => {
  it('answers a message, then 404 for every operation on that id; the user cannot sign in', async () => {
    const target = await makeUser(t.app, admin);
    const res = await api(t.app, 'DELETE', `/api/users/${target.id}`, { token: admin });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, message: expect.any(String) });
    expect(res.body.message.length).toBeGreaterThan(0);
    expectNotFound(await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin }));
    expectNotFound(await api(t.app, 'DELETE', `/api/users/${target.id}`, { token: admin }));
    expectNotFound(await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body: { name: 'Ghost' } }));
    expectNotFound(await api(t.app, 'GET', `/api/users/${target.id}/permissions`, { token: admin }));
    expectNotFound(await api(t.app, 'GET', `/api/users/${target.id}/activity`, { token: admin }));
    const list = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(target.email)}`, { token: admin });
    expect(list.body.data.pagination.total).toBe(0);
    const attempt = await api(t.app, 'POST', '/api/auth/login', { body: { email: target.email, password: target.password }, ip: '198.51.100.203' });
    expectError(attempt, 401, 'Invalid email or password');
  });

  it('frees the e-mail for a new user', async () => {
    const target = await makeUser(t.app, admin);
    expect((await api(t.app, 'DELETE', `/api/users/${target.id}`, { token: admin })).status).toBe(200);
    const again = await makeUser(t.app, admin, { email: target.email });
    expect(again.id).not.toBe(target.id);
  });

  it('answers 404 for an unknown id', async () => {
    expectNotFound(await api(t.app, 'DELETE', '/api/users/987654', { token: admin }));
  });
});

describe('hostile input', () => {
  const HOSTILE = [
    "' OR '1'='1",
    "'; --",
    '"; drop table users; --',
    '%',
    '_',
    '\\',
    '\\%',
    '%_%',
    '$1',
    '$$',
    ':name',
    '?',
    '*',
    '(',
    'Zoë 日本語 🙂',
    'ＡＢＣ',
    '\u202e',
  ];

  it.each(HOSTILE)('searches for %j without error and finds only users that contain it', async (term) => {
    const res = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(term)}&limit=100`, { token: admin });
    expect(res.status).toBe(200);
    for (const user of res.body.data.users as { name: string; email: string }[]) {
      expect(`${user.name}\n${user.email}`.toLowerCase()).toContain(term.toLowerCase());
    }
    expect(res.body.data.pagination.total).toBe(res.body.data.users.length);
  });

  it('stores SQL metacharacters and unicode in names verbatim and finds them literally', async () => {
    const tag = uniqueTag('hostile');
    const names = HOSTILE.map((h) => `${tag} ${h} end`);
    const ids: number[] = [];
    for (const name of names) {
      const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { name, email: uniqueEmail('hostile'), password: uniquePassword() } });
      expect(res.status).toBe(201);
      expect(res.body.data.name).toBe(name);
      ids.push(res.body.data.id);
    }
    for (const [i, name] of names.entries()) {
      const got = await api(t.app, 'GET', `/api/users/${ids[i]}`, { token: admin });
      expect(got.body.data.name).toBe(name);
      const found = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(`${tag} ${HOSTILE[i]} end`)}`, { token: admin });
      expect(found.body.data.users.map((u: { id: number }) => u.id)).toEqual([ids[i]]);
    }
    const all = await api(t.app, 'GET', `/api/users?search=${tag}&limit=100`, { token: admin });
    expect(all.body.data.users.map((u: { id: number }) => u.id)).toEqual(ids);
  });

  it('treats % and _ in a search literally, not as LIKE wildcards', async () => {
    const tag = uniqueTag('wild');
    const percent = await makeUser(t.app, admin, { name: `${tag} 100% pure` });
    const plain = await makeUser(t.app, admin, { name: `${tag} 100 pure` });
    const underscore = await makeUser(t.app, admin, { name: `${tag} snake_case` });
    const spaced = await makeUser(t.app, admin, { name: `${tag} snakeXcase` });
    const backslash = await makeUser(t.app, admin, { name: `${tag} back\\slash` });
    const search = async (term: string) => {
      const res = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(term)}&limit=100`, { token: admin });
      expect(res.status).toBe(200);
      return res.body.data.users.map((u: { id: number }) => u.id);
    };
    expect(await search(`${tag} 100%`)).toEqual([percent.id]);
    expect(await search(`${tag} 100% pure`)).toEqual([percent.id]);
    expect(await search(`${tag} snake_case`)).toEqual([underscore.id]);
    expect(await search(`${tag} back\\slash`)).toEqual([backslash.id]);
    expect(await search(`${tag}%`)).toEqual([]);
    expect(await search(`${tag} 1_0`)).toEqual([]);
    expect(await search(`${tag} snake%`)).toEqual([]);
    expect(await search(tag)).toEqual([percent.id, plain.id, underscore.id, spaced.id, backslash.id]);
    const everyPercent = await search('%');
    expect(everyPercent).toContain(percent.id);
    expect(everyPercent).not.toContain(plain.id);
    expect(everyPercent).not.toContain(underscore.id);
    const everyUnderscore = await search('_');
    expect(everyUnderscore).toContain(underscore.id);
    expect(everyUnderscore).not.toContain(spaced.id);
    expect(everyUnderscore).not.toContain(plain.id);
  });

  it('accepts SQL metacharacters in e-mail local parts and finds them literally', async () => {
    const tag = uniqueTag('mail');
    const emails = [`o'brien.${tag}@example.com`, `100%.${tag}@example.com`, `a_b.${tag}@example.com`, `x$1.${tag}@example.com`, `'or'1'='1.${tag}@example.com`];
    const ids: number[] = [];
    for (const email of emails) {
      const res = await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password: uniquePassword() } });
      expect(res.status).toBe(201);
      expect(res.body.data.email).toBe(email);
      ids.push(res.body.data.id);
    }
    for (const [i, email] of emails.entries()) {
      const found = await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(email.toUpperCase())}`, { token: admin });
      expect(found.body.data.users.map((u: { id: number }) => u.id)).toEqual([ids[i]]);
    }
    const dup = await api(t.app, 'POST', '/api/users', { token: admin, body: { email: emails[0]!.toUpperCase(), password: uniquePassword() } });
    expectError(dup, 409);
  });

  it.each([
    ['an e-mail with a quote and SQL', "x' OR '1'='1@example.com"],
    ['an e-mail with a statement', '"; drop table users; --@example.com'],
    ['an e-mail with a backslash', 'back\\slash@example.com'],
    ['an e-mail with unicode', 'zoë@example.com'],
  ])('answers 422 (not 500) for %s', async (_label, email) => {
    expectInvalid(await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password: uniquePassword() } }), 'email');
  });

  it('updates names with hostile text verbatim', async () => {
    const target = await makeUser(t.app, admin);
    for (const name of ['"; drop table users; --', "' OR '1'='1", '%_\\$1', 'Zoë 日本語 🙂']) {
      const res = await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body: { name } });
      expect(res.status).toBe(200);
      expect(res.body.data.name).toBe(name);
      expect((await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin })).body.data.name).toBe(name);
    }
  });

  it('answers 422, not 500, for NUL characters in a name or a search', async () => {
    const target = await makeUser(t.app, admin);
    expectInvalid(await api(t.app, 'PUT', `/api/users/${target.id}`, { token: admin, body: { name: 'nul\u0000byte' } }), 'name');
    expectInvalid(await api(t.app, 'POST', '/api/users', { token: admin, body: { name: '\u0000', email: uniqueEmail('nul'), password: uniquePassword() } }), 'name');
    expectInvalid(await api(t.app, 'GET', `/api/users?search=${encodeURIComponent('a\u0000b')}`, { token: admin }), 'search');
    expect((await api(t.app, 'GET', `/api/users/${target.id}`, { token: admin })).body.data.name).toBe('Target');
  });

  it('answers 422 for a search over 254 characters', async () => {
    expectInvalid(await api(t.app, 'GET', `/api/users?search=${'s'.repeat(255)}`, { token: admin }), 'search');
    expect((await api(t.app, 'GET', `/api/users?search=${'s'.repeat(254)}`, { token: admin })).status).toBe(200);
  });

  it('leaves the users table intact', async () => {
    const res = await api(t.app, 'GET', '/api/users?limit=100', { token: admin });
    expect(res.status).toBe(200);
    expect(res.body.data.users[0]).toMatchObject({ id: adminId, email: ADMIN_EMAIL, role: 'admin', active: true });
    expect(res.body.data.pagination.total).toBeGreaterThan(50);
    const ids = res.body.data.users.map((u: { id: number }) => u.id);
    expect(ids).toEqual([...ids].sort((a: number, b: number) => a - b));
    expect((await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).user.id).toBe(adminId);
  });
});

describe('the password never appears in a response', () => {
  it('is absent from create, get, update, list, login and error bodies', async () => {
    const email = uniqueEmail('secret');
    const password = uniquePassword();
    const bodies: unknown[] = [];
    const created = await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password, name: 'Secretive' } });
    bodies.push(created.body);
    const id = created.body.data.id;
    bodies.push((await api(t.app, 'GET', `/api/users/${id}`, { token: admin })).body);
    bodies.push((await api(t.app, 'PUT', `/api/users/${id}`, { token: admin, body: { name: 'Still Secretive' } })).body);
    bodies.push((await api(t.app, 'GET', `/api/users?search=${encodeURIComponent(email)}`, { token: admin })).body);
    bodies.push((await api(t.app, 'GET', '/api/users?limit=100', { token: admin })).body);
    bodies.push((await api(t.app, 'POST', '/api/auth/login', { body: { email, password } })).body);
    bodies.push((await api(t.app, 'POST', '/api/users', { token: admin, body: { email, password } })).body);
    bodies.push((await api(t.app, 'POST', '/api/users', { token: admin, body: { email: 'bad', password } })).body);
    bodies.push((await api(t.app, 'PUT', `/api/users/${id}`, { token: admin, body: { password } })).body);
    bodies.push((await api(t.app, 'GET', `/api/users/${id}/activity`, { token: admin })).body);
    bodies.push((await api(t.app, 'GET', `/api/users/${adminId}/activity?limit=100`, { token: admin })).body);
    expect(bodies).toHaveLength(11);
    for (const body of bodies) {
      const text = JSON.stringify(body);
      expect(text).not.toContain(password);
      expect(text).not.toContain('password_hash');
      expect(text).not.toContain('passwordHash');
      expect(text).not.toMatch(/\$argon2/);
    }
    expect(JSON.stringify(bodies[0])).toContain(email);
  });
});
