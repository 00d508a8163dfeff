import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authenticate, issuePersonalToken } from '../../../src/auth/service.js';
import { sql } from '../../../core/db/sql.js';
import type { Principal } from '../../../src/context.js';
import { resolveDomain } from '../../../src/domains/service.js';
import { ApiError } from '../../../src/http/errors.js';
import { dedupToken, insertAccessBatch, insertErrorBatch } from '../../../ingest/sinks/clickhouse.js';
import { buildRollups } from '../../../src/rollups/builder.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';
import { accessRow } from '../../support/ingest.js';
import { activityOf, ISO_MS } from '../../support/auth.js';

let t: TestApp;
let admin: { id: number; token: string };
/** Plain users with the default permissions. */
let alice: { id: number; token: string };
let bob: { id: number; token: string };
/** A plain user that also holds `domains: create`. */
let carol: { id: number; token: string };

const NOT_FOUND = { success: false, error: 'Domain not found' };
const FORBIDDEN = { success: false, error: 'Insufficient permissions' };

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
  admin = { id: session.user.id, token: session.accessToken };
  alice = await createUserAndLogin(t.app, admin.token, { email: 'alice@example.com', name: 'Alice' });
  bob = await createUserAndLogin(t.app, admin.token, { email: 'bob@example.com', name: 'Bob' });
  carol = await createUserAndLogin(t.app, admin.token, { email: 'carol@example.com', name: 'Carol' });
  await setPermissions(carol.id, [
    { resource: 'domains', actions: ['create'] },
    { resource: 'logs', actions: ['read'] },
  ]);
});

afterAll(async () => {
  await t?.close();
});

async function setPermissions(userId: number, permissions: { resource: string; actions: string[] }[]) {
  const res = await call(t.app, 'PUT', `/api/users/${userId}/permissions`, { token: admin.token, body: { permissions } });
  expect(res.status).toBe(200);
}

/** Creates a domain as the admin; returns the Domain. */
async function adminCreates(name: string, ownerId?: number | null) {
  const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: ownerId === undefined ? { name } : { name, ownerId } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.data as { id: number; name: string; ownerId: number | null; createdAt: string; updatedAt: string };
}

async function listAll(token: string, query = '') {
  const res = await call(t.app, 'GET', `/api/domains?limit=100${query}`, { token });
  expect(res.status).toBe(200);
  return res.body.data as { domains: { id: number; name: string; ownerId: number | null }[]; pagination: { page: number; limit: number; total: number; pages: number } };
}

describe('create', () => {
  it('an admin creates a domain for an owner: 201, the Domain, name normalised', async () => {
    const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name: '  Shop.Example.COM.  ', ownerId: alice.id } });
    expect(res.status).toBe(201);
    expect(res.body.success).toBe(true);
    const domain = res.body.data;
    expect(Object.keys(domain).sort()).toEqual(['createdAt', 'id', 'name', 'ownerId', 'updatedAt']);
    expect(domain).toMatchObject({ name: 'shop.example.com', ownerId: alice.id });
    expect(Number.isInteger(domain.id) && domain.id > 0).toBe(true);
    expect(domain.createdAt).toMatch(ISO_MS);
    expect(domain.updatedAt).toMatch(ISO_MS);
    expect(Math.abs(Date.parse(domain.createdAt) - Date.now())).toBeLessThan(60_000);

    const got = await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: admin.token });
    expect(got.status).toBe(200);
    expect(got.body).toEqual({ success: true, data: domain });
  });

  it('an admin may omit ownerId, or send null: the domain has no owner', async () => {
    const omitted = await adminCreates('no-owner.example.com');
    expect(omitted.ownerId).toBeNull();
    const explicit = await adminCreates('null-owner.example.com', null);
    expect(explicit.ownerId).toBeNull();
  });

  it('accepts single-label names, digits, inner hyphens, and 63-character labels', async () => {
    const label63 = 'a'.repeat(63);
    for (const [input, stored] of [
      ['localhost', 'localhost'],
      ['xn--bcher-kva.example', 'xn--bcher-kva.example'],
      ['123.example.NET', '123.example.net'],
      [`${label63}.example.com`, `${label63}.example.com`],
    ] as const) {
      expect((await adminCreates(input)).name).toBe(stored);
    }
  });

  it.each([
    ['bad name'],
    ['-x.com'],
    ['x-.com'],
    ['a..b'],
    ['.example.com'],
    ['exa_mple.com'],
    ['shop.example.com/path'],
    ['https://shop.example.com'],
    ['shop.example.com:8080'],
    ['*.example.com'],
    ["o'brien.example.com"],
    [''],
    ['.'],
    [`${'a'.repeat(64)}.example.com`],
    ['a'.repeat(300)],
    [`${'abcdefghi.'.repeat(25)}example.com`],
  ])('rejects %j with 422 on name', async (name) => {
    const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name } });
    expect(res.status).toBe(422);
    expect(res.body.success).toBe(false);
    expect(res.body.error).toBe('Validation failed');
    expect(Object.keys(res.body.details)).toEqual(['name']);
    expect(typeof res.body.details.name).toBe('string');
  });

  it('requires a string name', async () => {
    for (const body of [{}, { name: 42 }, { name: null }, { ownerId: alice.id }]) {
      const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body });
      expect(res.status).toBe(422);
      expect(res.body.details.name).toBeTypeOf('string');
    }
  });

  it('rejects an ownerId that names no user, and one that is not an id', async () => {
    const unknown = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name: 'orphan.example.com', ownerId: 987654 } });
    expect(unknown.status).toBe(422);
    expect(unknown.body).toEqual({ success: false, error: 'Validation failed', details: { ownerId: expect.any(String) } });
    for (const ownerId of [0, -1, 1.5, '2', true, 2 ** 31, 1e20]) {
      const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name: 'orphan.example.com', ownerId } });
      expect(res.status).toBe(422);
      expect(Object.keys(res.body.details)).toEqual(['ownerId']);
    }
    const list = await listAll(admin.token, '&search=orphan');
    expect(list.domains).toEqual([]);
  });

  it('rejects unknown fields with 422 naming them', async () => {
    const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name: 'extra.example.com', owner: 'alice' } });
    expect(res.status).toBe(422);
    expect(res.body.details).toEqual({ owner: 'Unknown field' });
  });

  it('a duplicate name is 409, whatever its case or trailing dot', async () => {
    await adminCreates('dup.example.com');
    for (const name of ['dup.example.com', 'DUP.Example.com', 'dup.example.com.']) {
      const res = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name, ownerId: bob.id } });
      expect(res.status).toBe(409);
      expect(res.body).toEqual({ success: false, error: 'Domain already exists' });
    }
    const list = await listAll(admin.token, '&search=dup.example.com');
    expect(list.domains.map((d) => d.name)).toEqual(['dup.example.com']);
  });

  it('a user with domains:create creates a domain owned by itself', async () => {
    const omitted = await call(t.app, 'POST', '/api/domains', { token: carol.token, body: { name: 'carol-one.example.com' } });
    expect(omitted.status).toBe(201);
    expect(omitted.body.data).toMatchObject({ name: 'carol-one.example.com', ownerId: carol.id });
    const self = await call(t.app, 'POST', '/api/domains', { token: carol.token, body: { name: 'carol-two.example.com', ownerId: carol.id } });
    expect(self.status).toBe(201);
    expect(self.body.data).toMatchObject({ name: 'carol-two.example.com', ownerId: carol.id });

    const mine = await listAll(carol.token);
    expect(mine.domains.map((d) => d.name)).toEqual(['carol-one.example.com', 'carol-two.example.com']);
    expect(mine.pagination.total).toBe(2);
  });

  it('a user with domains:create may not give a domain to someone else (403)', async () => {
    for (const ownerId of [alice.id, admin.id, 987654]) {
      const res = await call(t.app, 'POST', '/api/domains', { token: carol.token, body: { name: 'carol-gift.example.com', ownerId } });
      expect(res.status).toBe(403);
      expect(res.body).toEqual(FORBIDDEN);
    }
    expect((await listAll(admin.token, '&search=carol-gift')).domains).toEqual([]);
  });

  it('a user without domains:create gets 403, even for itself', async () => {
    for (const body of [{ name: 'alice-own.example.com' }, { name: 'alice-own.example.com', ownerId: alice.id }]) {
      const res = await call(t.app, 'POST', '/api/domains', { token: alice.token, body });
      expect(res.status).toBe(403);
      expect(res.body).toEqual(FORBIDDEN);
    }
    expect((await listAll(admin.token, '&search=alice-own')).domains).toEqual([]);
  });

  it('needs a token', async () => {
    const res = await call(t.app, 'POST', '/api/domains', { body: { name: 'anon.example.com' } });
    expect(res.status).toBe(401);
    expect(res.body).toEqual({ success: false, error: 'Authentication required' });
    expect(res.headers.get('www-authenticate')).toBe('Bearer');
  });
});

describe('visibility', () => {
  let owned: { id: number; name: string };
  let ownerless: { id: number; name: string };
  const UNKNOWN_ID = 2_000_000_000;

  beforeAll(async () => {
    owned = await adminCreates('alice-private.example.org', alice.id);
    ownerless = await adminCreates('admins-only.example.org');
  });

  it('the owner sees its domain', async () => {
    const res = await call(t.app, 'GET', `/api/domains/${owned.id}`, { token: alice.token });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ id: owned.id, name: 'alice-private.example.org', ownerId: alice.id });
    const list = await listAll(alice.token);
    expect(list.domains.map((d) => d.name)).toContain('alice-private.example.org');
    expect(list.domains.every((d) => d.ownerId === alice.id)).toBe(true);
  });

  it('another user gets exactly the answer of an unknown id on GET, PUT and DELETE (no BOLA)', async () => {
    const requests = [
      ['GET', undefined],
      ['PUT', { name: 'stolen.example.org' }],
      ['PUT', { ownerId: bob.id }],
      ['DELETE', undefined],
    ] as const;
    for (const [method, body] of requests) {
      const hidden = await call(t.app, method, `/api/domains/${owned.id}`, { token: bob.token, ...(body ? { body } : {}) });
      const unknown = await call(t.app, method, `/api/domains/${UNKNOWN_ID}`, { token: bob.token, ...(body ? { body } : {}) });
      expect(hidden.status, `${method} hidden`).toBe(404);
      expect(hidden.body).toEqual(NOT_FOUND);
      expect(unknown.status).toBe(hidden.status);
      expect(unknown.body).toEqual(hidden.body);
      expect(hidden.headers.get('content-type')).toBe(unknown.headers.get('content-type'));
    }
    // Nothing changed.
    const after = await call(t.app, 'GET', `/api/domains/${owned.id}`, { token: admin.token });
    expect(after.body.data).toMatchObject({ name: 'alice-private.example.org', ownerId: alice.id });
  });

  it("another user holding every domains permission still gets 404 for a domain it does not own", async () => {
    await setPermissions(bob.id, [{ resource: 'domains', actions: ['read', 'create', 'update', 'delete'] }]);
    try {
      for (const method of ['GET', 'DELETE'] as const) {
        const res = await call(t.app, method, `/api/domains/${owned.id}`, { token: bob.token });
        expect(res.status).toBe(404);
        expect(res.body).toEqual(NOT_FOUND);
      }
      expect((await listAll(bob.token)).domains.map((d) => d.id)).not.toContain(owned.id);
    } finally {
      await setPermissions(bob.id, [
        { resource: 'logs', actions: ['read'] },
        { resource: 'alerts', actions: ['read', 'create', 'delete'] },
      ]);
    }
  });

  it("another user's list does not show it", async () => {
    const list = await listAll(bob.token);
    expect(list.domains).toEqual([]);
    expect(list.pagination).toEqual({ page: 1, limit: 100, total: 0, pages: 0 });
    const searched = await listAll(bob.token, '&search=alice-private');
    expect(searched.domains).toEqual([]);
  });

  it('an ownerless domain is visible to admins only', async () => {
    const adminView = await call(t.app, 'GET', `/api/domains/${ownerless.id}`, { token: admin.token });
    expect(adminView.status).toBe(200);
    expect(adminView.body.data.ownerId).toBeNull();
    for (const user of [alice, bob, carol]) {
      const res = await call(t.app, 'GET', `/api/domains/${ownerless.id}`, { token: user.token });
      expect(res.status).toBe(404);
      expect(res.body).toEqual(NOT_FOUND);
      expect((await listAll(user.token)).domains.map((d) => d.id)).not.toContain(ownerless.id);
    }
    expect((await listAll(admin.token)).domains.map((d) => d.id)).toContain(ownerless.id);
  });

  it('only an admin updates or deletes: the owner gets 403, even with domains:update and delete', async () => {
    const put = await call(t.app, 'PUT', `/api/domains/${owned.id}`, { token: alice.token, body: { name: 'renamed-by-owner.example.org' } });
    expect(put.status).toBe(403);
    expect(put.body).toEqual(FORBIDDEN);
    const del = await call(t.app, 'DELETE', `/api/domains/${owned.id}`, { token: alice.token });
    expect(del.status).toBe(403);
    expect(del.body).toEqual(FORBIDDEN);

    await setPermissions(alice.id, [
      { resource: 'domains', actions: ['read', 'create', 'update', 'delete'] },
      { resource: 'logs', actions: ['read'] },
    ]);
    try {
      expect((await call(t.app, 'PUT', `/api/domains/${owned.id}`, { token: alice.token, body: { ownerId: alice.id } })).status).toBe(403);
      expect((await call(t.app, 'DELETE', `/api/domains/${owned.id}`, { token: alice.token })).status).toBe(403);
    } finally {
      await setPermissions(alice.id, [
        { resource: 'logs', actions: ['read'] },
        { resource: 'alerts', actions: ['read', 'create', 'delete'] },
      ]);
    }
    const after = await call(t.app, 'GET', `/api/domains/${owned.id}`, { token: alice.token });
    expect(after.status).toBe(200);
    expect(after.body.data).toMatchObject({ name: 'alice-private.example.org', ownerId: alice.id });
  });

  it('a malformed domainId is 422 on domainId for everyone', async () => {
    for (const id of ['abc', '0', '-1', '1.5', '99999999999']) {
      const res = await call(t.app, 'GET', `/api/domains/${id}`, { token: bob.token });
      expect(res.status, id).toBe(422);
      expect(Object.keys(res.body.details)).toEqual(['domainId']);
    }
  });
});

describe('update and delete (admin)', () => {
  it('renames (normalised) and changes the owner; updatedAt moves', async () => {
    const created = await adminCreates('before.example.net', alice.id);
    const renamed = await call(t.app, 'PUT', `/api/domains/${created.id}`, { token: admin.token, body: { name: 'After.Example.NET.' } });
    expect(renamed.status).toBe(200);
    expect(renamed.body.data).toMatchObject({ id: created.id, name: 'after.example.net', ownerId: alice.id, createdAt: created.createdAt });
    expect(Date.parse(renamed.body.data.updatedAt)).toBeGreaterThanOrEqual(Date.parse(created.updatedAt));

    const moved = await call(t.app, 'PUT', `/api/domains/${created.id}`, { token: admin.token, body: { ownerId: bob.id } });
    expect(moved.status).toBe(200);
    expect(moved.body.data).toMatchObject({ name: 'after.example.net', ownerId: bob.id });
    expect((await call(t.app, 'GET', `/api/domains/${created.id}`, { token: bob.token })).status).toBe(200);
    expect((await call(t.app, 'GET', `/api/domains/${created.id}`, { token: alice.token })).status).toBe(404);

    const orphaned = await call(t.app, 'PUT', `/api/domains/${created.id}`, { token: admin.token, body: { ownerId: null } });
    expect(orphaned.status).toBe(200);
    expect(orphaned.body.data.ownerId).toBeNull();
    expect((await call(t.app, 'GET', `/api/domains/${created.id}`, { token: bob.token })).status).toBe(404);

    const both = await call(t.app, 'PUT', `/api/domains/${created.id}`, { token: admin.token, body: { name: 'both.example.net', ownerId: carol.id } });
    expect(both.status).toBe(200);
    expect(both.body.data).toMatchObject({ name: 'both.example.net', ownerId: carol.id });

    const nothing = await call(t.app, 'PUT', `/api/domains/${created.id}`, { token: admin.token, body: {} });
    expect(nothing.status).toBe(200);
    expect(nothing.body.data).toMatchObject({ name: 'both.example.net', ownerId: carol.id });
  });

  it('rename onto an existing name is 409 and changes nothing', async () => {
    await adminCreates('taken.example.net');
    const other = await adminCreates('free.example.net');
    for (const name of ['taken.example.net', 'TAKEN.example.net.']) {
      const res = await call(t.app, 'PUT', `/api/domains/${other.id}`, { token: admin.token, body: { name } });
      expect(res.status).toBe(409);
      expect(res.body).toEqual({ success: false, error: 'Domain already exists' });
    }
    const same = await call(t.app, 'PUT', `/api/domains/${other.id}`, { token: admin.token, body: { name: 'free.example.net' } });
    expect(same.status).toBe(200);
    expect((await call(t.app, 'GET', `/api/domains/${other.id}`, { token: admin.token })).body.data.name).toBe('free.example.net');
  });

  it('validates the update body', async () => {
    const domain = await adminCreates('validate.example.net');
    const cases: [unknown, string][] = [
      [{ name: 'bad name' }, 'name'],
      [{ name: 'a..b' }, 'name'],
      [{ ownerId: 987654 }, 'ownerId'],
      [{ ownerId: 'alice' }, 'ownerId'],
      [{ ownerId: 2 ** 31 }, 'ownerId'],
      [{ id: 5 }, 'id'],
      [{ createdAt: '2026-01-01T00:00:00Z' }, 'createdAt'],
    ];
    for (const [body, field] of cases) {
      const res = await call(t.app, 'PUT', `/api/domains/${domain.id}`, { token: admin.token, body });
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(Object.keys(res.body.details)).toEqual([field]);
    }
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: admin.token })).body.data).toMatchObject({ name: 'validate.example.net', ownerId: null });
  });

  it('an unknown id is 404 for the admin too', async () => {
    for (const [method, body] of [['GET', undefined], ['PUT', { name: 'x.example.net' }], ['DELETE', undefined]] as const) {
      const res = await call(t.app, method, '/api/domains/2000000001', { token: admin.token, ...(body ? { body } : {}) });
      expect(res.status).toBe(404);
      expect(res.body).toEqual(NOT_FOUND);
    }
  });

  it('deletes: message, then 404, gone from lists, and the name is free again', async () => {
    const domain = await adminCreates('doomed.example.net', alice.id);
    const res = await call(t.app, 'DELETE', `/api/domains/${domain.id}`, { token: admin.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, message: expect.any(String) });
    expect(res.body.message.length).toBeGreaterThan(0);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: admin.token })).body).toEqual(NOT_FOUND);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: alice.token })).status).toBe(404);
    expect((await call(t.app, 'DELETE', `/api/domains/${domain.id}`, { token: admin.token })).status).toBe(404);
    expect((await listAll(admin.token, '&search=doomed')).domains).toEqual([]);
    const again = await adminCreates('doomed.example.net');
    expect(again.id).not.toBe(domain.id);
  });

  it('deleting a domain deletes its log rows and its stats rollups in ClickHouse, and only its own', async () => {
    const doomed = await adminCreates('logs-doomed.example.net', alice.id);
    const kept = await adminCreates('logs-kept.example.net', alice.id);
    const row = (domainId: number, i: number) => accessRow(i, { domainId });
    const ch = t.runtime.clickhouse;
    await insertAccessBatch(ch, [row(doomed.id, 1), row(doomed.id, 2), row(kept.id, 3)], dedupToken('domains-test', 0, 3));
    await insertErrorBatch(ch, [{ domainId: doomed.id, id: 2 ** 32 + 9, timestamp: Date.now() - 60_000, level: 'error', message: 'm', context: {} }], dedupToken('domains-test', 3, 4));
    const count = async (table: string, domainId: number) => {
      const result = await ch.query({ query: `SELECT count() AS n FROM ${table} WHERE domain_id = {d:UInt32}`, query_params: { d: domainId }, format: 'JSONEachRow' });
      return Number((await result.json<{ n: string }>())[0]!.n);
    };
    const tables = ['access_logs', 'error_logs', 'access_hour_rows', 'access_rollups'];
    const counts = async (domainId: number) => Promise.all(tables.map((table) => count(table, domainId)));
    await buildRollups(ch, { lookbackS: null, settleS: 0, budgetMs: 60_000, retentionDays: 90 });
    // The stats tables (sql/clickhouse/005): the rows counted per hour, and the built rollups.
    const before = await counts(doomed.id);
    expect(before.slice(0, 2)).toEqual([2, 1]);
    expect(before[2]).toBeGreaterThan(0);
    expect(before[3]).toBeGreaterThan(0);
    expect((await call(t.app, 'DELETE', `/api/domains/${doomed.id}`, { token: admin.token })).status).toBe(200);
    expect(await counts(doomed.id)).toEqual([0, 0, 0, 0]);
    expect((await counts(kept.id)).slice(0, 2)).toEqual([1, 0]);
    expect((await counts(kept.id))[3]).toBeGreaterThan(0);
  });

  it('deleting the owner leaves the domain ownerless, visible to admins only', async () => {
    const dave = await createUserAndLogin(t.app, admin.token, { email: 'dave@example.com' });
    const domain = await adminCreates('dave.example.net', dave.id);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: dave.token })).status).toBe(200);
    const deleted = await call(t.app, 'DELETE', `/api/users/${dave.id}`, { token: admin.token });
    expect(deleted.status).toBe(200);
    const after = await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: admin.token });
    expect(after.status).toBe(200);
    expect(after.body.data).toMatchObject({ id: domain.id, name: 'dave.example.net', ownerId: null });
    // A new user that happens to be created next does not inherit it.
    const erin = await createUserAndLogin(t.app, admin.token, { email: 'erin@example.com' });
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: erin.token })).status).toBe(404);
  });
});

describe('list', () => {
  const names = ['list-delta.test', 'list-alpha.test', 'list-echo.test', 'list-charlie.test', 'list-bravo.test'];

  beforeAll(async () => {
    for (const name of names) await adminCreates(name, name === 'list-bravo.test' || name === 'list-echo.test' ? bob.id : null);
  });

  it('orders by name and pages', async () => {
    const sorted = [...names].sort();
    const pages = [];
    for (const page of [1, 2, 3]) {
      const res = await call(t.app, 'GET', `/api/domains?search=list-&limit=2&page=${page}`, { token: admin.token });
      expect(res.status).toBe(200);
      expect(res.body.data.pagination).toEqual({ page, limit: 2, total: 5, pages: 3 });
      pages.push(...res.body.data.domains.map((d: { name: string }) => d.name));
    }
    expect(pages).toEqual(sorted);
    const past = await call(t.app, 'GET', '/api/domains?search=list-&limit=2&page=4', { token: admin.token });
    expect(past.body.data).toEqual({ domains: [], pagination: { page: 4, limit: 2, total: 5, pages: 3 } });
  });

  it('the whole list is ordered by name', async () => {
    const all = (await listAll(admin.token)).domains.map((d) => d.name);
    expect(all.length).toBeGreaterThan(10);
    expect(all).toEqual([...all].sort());
  });

  it('defaults to page 1, limit 20', async () => {
    const res = await call(t.app, 'GET', '/api/domains', { token: admin.token });
    expect(res.status).toBe(200);
    expect(res.body.data.pagination.page).toBe(1);
    expect(res.body.data.pagination.limit).toBe(20);
    expect(res.body.data.domains.length).toBe(Math.min(20, res.body.data.pagination.total));
    expect(res.body.data.pagination.pages).toBe(Math.ceil(res.body.data.pagination.total / 20));
  });

  it('search is a case-insensitive substring of the name', async () => {
    expect((await listAll(admin.token, '&search=LIST-C')).domains.map((d) => d.name)).toEqual(['list-charlie.test']);
    expect((await listAll(admin.token, '&search=o.test')).domains.map((d) => d.name)).toEqual(['list-bravo.test', 'list-echo.test']);
    expect((await listAll(admin.token, '&search=nothing-like-this')).domains).toEqual([]);
  });

  it('a plain user lists only its own, with search and totals over those', async () => {
    const own = await listAll(bob.token, '&search=list-');
    expect(own.domains.map((d) => d.name)).toEqual(['list-bravo.test', 'list-echo.test']);
    expect(own.pagination.total).toBe(2);
    const paged = await call(t.app, 'GET', '/api/domains?search=list-&limit=1&page=2', { token: bob.token });
    expect(paged.body.data).toEqual({ domains: [expect.objectContaining({ name: 'list-echo.test' })], pagination: { page: 2, limit: 1, total: 2, pages: 2 } });
  });

  it('rejects bad paging', async () => {
    for (const query of ['page=0', 'page=-1', 'page=abc', 'page=1.5', 'limit=0', 'limit=101', 'limit=x']) {
      const res = await call(t.app, 'GET', `/api/domains?${query}`, { token: admin.token });
      expect(res.status, query).toBe(422);
      expect(Object.keys(res.body.details)).toEqual([query.split('=')[0]]);
    }
    expect((await call(t.app, 'GET', '/api/domains?limit=100', { token: admin.token })).status).toBe(200);
  });

  it('SQL metacharacters in search are literal and never a 500', async () => {
    for (const search of ['%', '_', "'", '\\', '%%', 'list_', 'list%', "' or '1'='1", "'; drop table domains; --", '\\%', '[a-z]', '.*', '$1', 'ü']) {
      const res = await call(t.app, 'GET', `/api/domains?limit=100&search=${encodeURIComponent(search)}`, { token: admin.token });
      expect(res.status, search).toBe(200);
      expect(res.body.data.domains, search).toEqual([]);
      expect(res.body.data.pagination.total).toBe(0);
    }
    // A dot is a plain character, not a wildcard.
    expect((await listAll(admin.token, `&search=${encodeURIComponent('list-alpha.test')}`)).domains.map((d) => d.name)).toEqual(['list-alpha.test']);
    expect((await listAll(admin.token)).pagination.total).toBeGreaterThan(10);
  });

  it('a search over 253 characters, or with a NUL character, is 422 on search', async () => {
    for (const search of ['a'.repeat(254), '\u0000', 'list\u0000']) {
      const res = await call(t.app, 'GET', `/api/domains?search=${encodeURIComponent(search)}`, { token: admin.token });
      expect(res.status).toBe(422);
      expect(Object.keys(res.body.details)).toEqual(['search']);
    }
    expect((await call(t.app, 'GET', `/api/domains?search=${'a'.repeat(253)}`, { token: admin.token })).status).toBe(200);
  });
});

describe('activity', () => {
  async function activityOf(userId: number) {
    const res = await call(t.app, 'GET', `/api/users/${userId}/activity?limit=100`, { token: admin.token });
    expect(res.status).toBe(200);
    return res.body.data.activities as { action: string; resource: string; details: string; ipAddress: string; userAgent: string }[];
  }

  it('records domain.create, domain.update and domain.delete for the acting admin', async () => {
    const headers = { 'user-agent': 'domains-test/1.0' };
    const created = await call(t.app, 'POST', '/api/domains', { token: admin.token, body: { name: 'audited.example.com' }, ip: '203.0.113.7', headers });
    const id = created.body.data.id as number;
    await call(t.app, 'PUT', `/api/domains/${id}`, { token: admin.token, body: { name: 'audited2.example.com' }, ip: '203.0.113.8', headers });
    await call(t.app, 'DELETE', `/api/domains/${id}`, { token: admin.token, ip: '203.0.113.9', headers });

    const entries = (await activityOf(admin.id)).filter((a) => a.resource === `domains/${id}`);
    expect(entries.map((a) => [a.action, a.ipAddress, a.userAgent])).toEqual([
      ['domain.delete', '203.0.113.9', 'domains-test/1.0'],
      ['domain.update', '203.0.113.8', 'domains-test/1.0'],
      ['domain.create', '203.0.113.7', 'domains-test/1.0'],
    ]);
    expect(entries[2]!.details).toContain('audited.example.com');
    expect(entries[0]!.details).toContain('audited2.example.com');
    for (const e of entries) expect(e.details.length).toBeGreaterThan(0);
  });

  it('records a self-service create for that user, and nothing for refused attempts', async () => {
    const created = await call(t.app, 'POST', '/api/domains', { token: carol.token, body: { name: 'carol-audited.example.com' } });
    expect(created.status).toBe(201);
    const carolEntries = (await activityOf(carol.id)).filter((a) => a.action.startsWith('domain.'));
    expect(carolEntries.map((a) => [a.action, a.resource])).toContainEqual(['domain.create', `domains/${created.body.data.id}`]);

    const before = (await activityOf(alice.id)).filter((a) => a.action.startsWith('domain.'));
    await call(t.app, 'POST', '/api/domains', { token: alice.token, body: { name: 'refused.example.com' } });
    const after = (await activityOf(alice.id)).filter((a) => a.action.startsWith('domain.'));
    expect(after).toEqual(before);
  });
});

describe('resolveDomain (the guard of per-domain routes)', () => {
  let aliceDomain: { id: number; name: string };
  let ownerless: { id: number; name: string };
  let frank: { id: number; token: string };

  const principalOf = (token: string): Promise<Principal> => authenticate(t.runtime, `Bearer ${token}`);

  async function rejection(promise: Promise<unknown>): Promise<ApiError> {
    const err = await promise.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ApiError);
    return err as ApiError;
  }

  beforeAll(async () => {
    aliceDomain = await adminCreates('guarded.example.com', alice.id);
    ownerless = await adminCreates('guarded-ownerless.example.com');
    frank = await createUserAndLogin(t.app, admin.token, { email: 'frank@example.com' });
  });

  it('an invisible domain is 404 "Domain not found", like an unknown one, whatever is asked', async () => {
    const bobP = await principalOf(bob.token);
    for (const id of [aliceDomain.id, ownerless.id, 2_000_000_000]) {
      for (const needs of [undefined, ['logs', 'read'], ['alerts', 'create'], ['domains', 'delete']] as const) {
        const err = await rejection(resolveDomain(t.runtime, bobP, id, needs ? [needs[0], needs[1]] : undefined));
        expect(err.status).toBe(404);
        expect(err.message).toBe('Domain not found');
        expect(err.details).toBeUndefined();
      }
    }
  });

  it('invisibility wins over a missing permission (404, not 403)', async () => {
    await setPermissions(frank.id, []);
    const frankP = await principalOf(frank.token);
    expect(frankP.permissions.can('logs', 'read')).toBe(false);
    const err = await rejection(resolveDomain(t.runtime, frankP, aliceDomain.id, ['logs', 'read']));
    expect(err.status).toBe(404);
  });

  it('a visible domain without the permission is 403', async () => {
    const aliceP = await principalOf(alice.token);
    for (const needs of [['logs', 'update'], ['alerts', 'update'], ['domains', 'read'], ['users', 'read']] as const) {
      const err = await rejection(resolveDomain(t.runtime, aliceP, aliceDomain.id, [needs[0], needs[1]]));
      expect(err.status).toBe(403);
      expect(err.message).toBe('Insufficient permissions');
    }
  });

  it('a visible domain with the permission (or with none asked) is the row', async () => {
    const aliceP = await principalOf(alice.token);
    for (const needs of [undefined, ['logs', 'read'], ['alerts', 'read'], ['alerts', 'create'], ['alerts', 'delete']] as const) {
      const row = await resolveDomain(t.runtime, aliceP, aliceDomain.id, needs ? [needs[0], needs[1]] : undefined);
      expect(row).toMatchObject({ id: aliceDomain.id, name: 'guarded.example.com', owner_id: alice.id });
      expect(row.created_at).toBeInstanceOf(Date);
    }
  });

  it('a permission change applies to the next principal built', async () => {
    await setPermissions(alice.id, [{ resource: 'alerts', actions: ['read'] }]);
    try {
      const aliceP = await principalOf(alice.token);
      expect((await rejection(resolveDomain(t.runtime, aliceP, aliceDomain.id, ['logs', 'read']))).status).toBe(403);
      expect((await resolveDomain(t.runtime, aliceP, aliceDomain.id, ['alerts', 'read'])).id).toBe(aliceDomain.id);
    } finally {
      await setPermissions(alice.id, [
        { resource: 'logs', actions: ['read'] },
        { resource: 'alerts', actions: ['read', 'create', 'delete'] },
      ]);
    }
  });

  it('an admin resolves any domain, owned or not, with any permission', async () => {
    const adminP = await principalOf(admin.token);
    for (const id of [aliceDomain.id, ownerless.id]) {
      for (const needs of [['logs', 'read'], ['alerts', 'update'], ['domains', 'delete']] as const) {
        expect((await resolveDomain(t.runtime, adminP, id, [needs[0], needs[1]])).id).toBe(id);
      }
    }
    expect((await rejection(resolveDomain(t.runtime, adminP, 2_000_000_000, ['logs', 'read']))).status).toBe(404);
  });

  it('a change of owner moves visibility at once', async () => {
    const moved = await call(t.app, 'PUT', `/api/domains/${aliceDomain.id}`, { token: admin.token, body: { ownerId: bob.id } });
    expect(moved.status).toBe(200);
    const aliceP = await principalOf(alice.token);
    const bobP = await principalOf(bob.token);
    expect((await rejection(resolveDomain(t.runtime, aliceP, aliceDomain.id, ['logs', 'read']))).status).toBe(404);
    expect((await resolveDomain(t.runtime, bobP, aliceDomain.id, ['logs', 'read'])).owner_id).toBe(bob.id);
  });
});

describe('bulk add (POST /api/domains/bulk)', () => {
  const bulk = (token: string | undefined, body: unknown) => call(t.app, 'POST', '/api/domains/bulk', { ...(token ? { token } : {}), body });
  const bulkActivity = async () => (await activityOf(t.app, admin.token, admin.id)).filter((a) => a.action === 'domain.bulk_create');
  const countLike = async (pattern: string) => (await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from domains where name like ${pattern}`))[0]!.n;

  it('registers the new names, reports the existing and the repeated ones, in the order given, with ids and counts', async () => {
    const old = await adminCreates('bulk-old.example.com', bob.id);
    const before = (await bulkActivity()).length;
    const names = ['Bulk-A.example.com.', 'bulk-old.example.com', '  bulk-b.example.com ', 'BULK-A.example.com', 'bulk-old.example.com'];
    const res = await bulk(admin.token, { names, ownerId: alice.id });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    const { results, counts } = res.body.data as { results: { name: string; status: string; id: number }[]; counts: Record<string, number> };
    expect(results.map((r) => [r.name, r.status])).toEqual([
      ['bulk-a.example.com', 'created'],
      ['bulk-old.example.com', 'exists'],
      ['bulk-b.example.com', 'created'],
      ['bulk-a.example.com', 'duplicate'],
      ['bulk-old.example.com', 'duplicate'],
    ]);
    expect(counts).toEqual({ created: 2, exists: 1, duplicate: 2 });
    const [a, existing, b, aAgain, oldAgain] = results.map((r) => r.id);
    expect(existing).toBe(old.id);
    expect(oldAgain).toBe(old.id);
    expect(aAgain).toBe(a);
    expect(b!).toBeGreaterThan(a!);

    // The new ones belong to the owner asked for; the one registered before keeps its owner.
    for (const id of [a, b]) expect((await call(t.app, 'GET', `/api/domains/${id}`, { token: alice.token })).body.data.ownerId).toBe(alice.id);
    expect((await call(t.app, 'GET', `/api/domains/${old.id}`, { token: admin.token })).body.data.ownerId).toBe(bob.id);

    // One activity entry for the whole request: the counts, not the names.
    const entries = await bulkActivity();
    expect(entries).toHaveLength(before + 1);
    expect(entries[0]).toMatchObject({ resource: 'domains', details: 'Registered domains at once: 2 created, 1 already registered, 2 repeated in the list' });

    // Sending the same list again changes nothing and says so.
    const again = await bulk(admin.token, { names, ownerId: alice.id });
    expect(again.body.data.counts).toEqual({ created: 0, exists: 3, duplicate: 2 });
  });

  it('without ownerId the new domains have no owner', async () => {
    const res = await bulk(admin.token, { names: ['bulk-ownerless.example.com'] });
    expect(res.status).toBe(200);
    const [result] = res.body.data.results;
    expect((await call(t.app, 'GET', `/api/domains/${result.id}`, { token: admin.token })).body.data.ownerId).toBeNull();
  });

  it('one invalid name refuses the whole list: 422 naming every invalid position, nothing written', async () => {
    const before = (await bulkActivity()).length;
    const names = ['bulk-valid.example.com', 'bad name', 'bulk-valid2.example.com', 'x..y', "o'brien.example.com"];
    const res = await bulk(admin.token, { names });
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ success: false, error: 'Validation failed', details: { names: '[1], [3], [4]: must be a host name such as shop.example.com' } });
    expect(await countLike('bulk-valid%')).toBe(0);
    expect(await bulkActivity()).toHaveLength(before);
  });

  it('SQL and JSON metacharacters are names like any other: refused as invalid, never a 500, the table intact', async () => {
    const hostile = ["a'; drop table domains; --", '"]}', '\\', '$1', "' or '1'='1", 'a%', 'a_b', '{"name":"x"}', '\u0000', '\ud800'];
    const total = async () => (await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from domains`))[0]!.n;
    const before = await total();
    for (const name of hostile) {
      const res = await bulk(admin.token, { names: ['bulk-meta.example.com', name] });
      expect(res.status, name).toBe(422);
      expect(Object.keys(res.body.details), name).toEqual(['names']);
    }
    expect(await total()).toBe(before);
  });

  it('an ownerId that names no user is refused before anything is written', async () => {
    const res = await bulk(admin.token, { names: ['bulk-orphan.example.com'], ownerId: 987654 });
    expect(res.status).toBe(422);
    expect(res.body).toEqual({ success: false, error: 'Validation failed', details: { ownerId: 'no user has this id' } });
    expect(await countLike('bulk-orphan%')).toBe(0);
  });

  it('administrators only: a plain user, a holder of domains:create and its personal access token get 403; no token 401', async () => {
    const { token: carolPersonal } = await issuePersonalToken(t.runtime.db, carol.id, 'bulk');
    for (const token of [alice.token, carol.token, carolPersonal]) {
      for (const body of [{ names: ['bulk-refused.example.com'] }, { names: ['bulk-refused.example.com'], ownerId: carol.id }]) {
        const res = await bulk(token, body);
        expect(res.status).toBe(403);
        expect(res.body).toEqual(FORBIDDEN);
      }
    }
    expect((await bulk(undefined, { names: ['bulk-refused.example.com'] })).status).toBe(401);
    expect(await countLike('bulk-refused%')).toBe(0);
  });

  it('validates the body: 1 to 10,000 strings, no unknown fields; 10,001 names or over 1 MiB is refused', async () => {
    const tooMany = Array.from({ length: 10_001 }, (_, i) => `n${i}.bulk-over.example.com`);
    const cases: [unknown, string][] = [
      [{ names: [] }, 'must hold at least one name'],
      [{ names: tooMany }, 'must hold at most 10,000 names'],
      [{}, 'must be a list of host names'],
      [{ names: 'bulk-one.example.com' }, 'must be a list of host names'],
      [{ names: ['bulk-one.example.com', 7] }, '[1]: must be a list of host names'],
    ];
    for (const [body, message] of cases) {
      const res = await bulk(admin.token, body);
      expect(res.status).toBe(422);
      expect(res.body.details).toEqual({ names: message });
    }
    expect((await bulk(admin.token, { names: ['bulk-one.example.com'], owner: 'alice' })).body.details).toEqual({ owner: 'Unknown field' });
    const huge = await bulk(admin.token, { names: Array.from({ length: 6_000 }, (_, i) => `${'a'.repeat(60)}.${'b'.repeat(60)}.${'c'.repeat(60)}.n${i}.example.com`) });
    expect(huge.status).toBe(413);
    expect(await countLike('%.bulk-over.example.com')).toBe(0);
  });

  it('10,000 names in one request and one transaction: a failure mid-way, or of the activity entry, leaves nothing', async () => {
    const names = Array.from({ length: 10_000 }, (_, i) => `n${i}.bulk-many.example.com`);
    const before = (await bulkActivity()).length;
    // Real constraint violations, added for the test (not valid: rows already there are not checked):
    // one on the 5,001st name, then one on the activity entry, written after the domains.
    const refusals = [
      { add: sql`alter table domains add constraint bulk_test_refusal check (name <> 'n5000.bulk-many.example.com') not valid`, drop: sql`alter table domains drop constraint bulk_test_refusal` },
      { add: sql`alter table activity add constraint bulk_test_refusal check (action <> 'domain.bulk_create') not valid`, drop: sql`alter table activity drop constraint bulk_test_refusal` },
    ];
    for (const refusal of refusals) {
      await t.runtime.db.query(refusal.add);
      try {
        const refused = await bulk(admin.token, { names });
        expect(refused.status).toBe(500);
        expect(await countLike('%.bulk-many.example.com')).toBe(0);
        expect(await bulkActivity()).toHaveLength(before);
      } finally {
        await t.runtime.db.query(refusal.drop);
      }
    }

    const res = await bulk(admin.token, { names });
    expect(res.status).toBe(200);
    expect(res.body.data.counts).toEqual({ created: 10_000, exists: 0, duplicate: 0 });
    const ids = (res.body.data.results as { name: string; status: string; id: number }[]).map((r, i) => {
      expect(r).toMatchObject({ name: names[i], status: 'created' });
      return r.id;
    });
    // Ids in the order given.
    expect(ids).toEqual([...ids].sort((x, y) => x - y));
    expect(await countLike('%.bulk-many.example.com')).toBe(10_000);
    expect(await bulkActivity()).toHaveLength(before + 1);
  }, 60_000);
});
