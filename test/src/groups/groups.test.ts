/**
 * Groups (issue 33 part 2; docs/reference/groups.md): the groups API is the administrators' alone;
 * a group's grant on domains, or on every domain, makes its members see them in its role, at once
 * and no longer once the group, the grant or the membership ends (the next request, an open live
 * tail, a fleet rule's pending notification); hostile names and ids are refused or stored as text.
 * The walk of every per-domain route with group members is in test/src/domains/members.test.ts; the
 * command line (`tailhouse groups`) last.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GROUP_WAIT_MS } from '../../../src/alerts/evaluator.js';
import { createApp } from '../../../src/app.js';
import { createLogger } from '../../../core/log.js';
import { openPglite } from '../../../core/db/postgres.js';
import { sql } from '../../../core/db/sql.js';
import { createTailHub } from '../../../src/logs/tail/service.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type TestApp } from '../../support/app.js';
import { evaluatorOf } from '../../support/alerts.js';
import { activityOf, expectValidation, freshUser, type Person } from '../../support/auth.js';
import { commandsWith } from '../../support/child.js';
import { HOST_FORMAT, importText, timeLocal } from '../../support/ingest.js';
import { readUntilEnd } from '../../support/logs.js';
import { registerDomain } from '../../support/domains.js';
import { uniqueTag } from '../../support/users.js';

const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
const FORBIDDEN = { success: false, error: 'Insufficient permissions' };
const NOT_FOUND = { success: false, error: 'Domain not found' };

let t: TestApp;
let admin: Person;

const BROAD = [
  { resource: 'domains', actions: ['read', 'create'] },
  { resource: 'logs', actions: ['read'] },
  { resource: 'alerts', actions: ['read', 'create', 'update', 'delete'] },
];
const person = (tag: string, permissions = BROAD): Promise<Person> => freshUser(t.app, admin.token, tag, { name: tag, permissions });

async function as(who: Person, method: string, path: string, body?: unknown) {
  return call(t.app, method, path, { token: who.token, ...(body !== undefined ? { body } : {}) });
}

function expectStatus(res: { status: number; body: unknown }, status: number) {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  return res as { status: number; body: any };
}

const domainOf = (owner: Person | null) => registerDomain(t.app, admin.token, { ownerId: owner?.id ?? null, tag: 'groups' });

async function newGroup(tag = 'team'): Promise<{ id: number; name: string }> {
  return (expectStatus(await as(admin, 'POST', '/api/groups', { name: uniqueTag(tag) }), 201)).body.data;
}

const sees = async (who: Person, domainId: number) => (await as(who, 'GET', `/api/domains/${domainId}`)).status === 200;

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
  admin = { id: session.user.id, token: session.accessToken, email: ADMIN_EMAIL };
});

afterAll(async () => {
  await t?.close();
});

describe('the groups API', () => {
  it('an administrator creates, renames, fills, grants, revokes and deletes a group; each change is in its activity', async () => {
    const member = await person('member');
    const [a, b] = [await domainOf(null), await domainOf(null)];
    const created = await newGroup('devs');
    expect(created).toEqual({ id: expect.any(Number), name: created.name, createdAt: expect.any(String), updatedAt: expect.any(String), members: [], domains: [] });
    const renamed = `${created.name}-renamed`;
    expect((expectStatus(await as(admin, 'PUT', `/api/groups/${created.id}`, { name: renamed }), 200)).body.data.name).toBe(renamed);

    const added = expectStatus(await as(admin, 'POST', `/api/groups/${created.id}/members`, { userId: member.id }), 201);
    expect(added.body.data.members).toEqual([{ userId: member.id, name: 'member', email: member.email, addedAt: expect.any(String) }]);
    expectStatus(await as(admin, 'POST', `/api/groups/${created.id}/members`, { userId: member.id }), 200);

    const granted = expectStatus(await as(admin, 'POST', `/api/groups/${created.id}/domains`, { domains: [b.id, a.id, a.id], role: 'viewer' }), 200);
    expect(granted.body.data.domains.map((d: { domainId: number; name: string; role: string }) => [d.domainId, d.name, d.role])).toEqual([
      [a.id, a.name, 'viewer'],
      [b.id, b.name, 'viewer'],
    ]);
    const all = expectStatus(await as(admin, 'POST', `/api/groups/${created.id}/domains`, { domains: 'all', role: 'editor' }), 200);
    expect(all.body.data.domains[0]).toEqual({ domainId: null, name: null, role: 'editor', grantedAt: expect.any(String) });
    expect((expectStatus(await as(admin, 'GET', `/api/groups/${created.id}`), 200)).body.data).toEqual(all.body.data);
    expect((expectStatus(await as(admin, 'GET', '/api/groups'), 200)).body.data.groups.map((g: { id: number }) => g.id)).toContain(created.id);

    // The domain's members' page names the groups that see it.
    const page = (expectStatus(await as(admin, 'GET', `/api/domains/${a.id}/members`), 200)).body.data;
    expect(page.groups.filter((g: { groupId: number }) => g.groupId === created.id)).toEqual([
      { groupId: created.id, name: renamed, role: 'editor', allDomains: true },
      { groupId: created.id, name: renamed, role: 'viewer', allDomains: false },
    ]);

    expectStatus(await as(admin, 'DELETE', `/api/groups/${created.id}/domains/all`), 200);
    expect((expectStatus(await as(admin, 'DELETE', `/api/groups/${created.id}/domains/all`), 404)).body).toEqual({ success: false, error: 'Grant not found' });
    expectStatus(await as(admin, 'DELETE', `/api/groups/${created.id}/domains/${a.id}`), 200);
    expectStatus(await as(admin, 'DELETE', `/api/groups/${created.id}/members/${member.id}`), 200);
    expect((expectStatus(await as(admin, 'DELETE', `/api/groups/${created.id}/members/${member.id}`), 404)).body).toEqual({ success: false, error: 'Member not found' });
    expectStatus(await as(admin, 'DELETE', `/api/groups/${created.id}`), 200);
    expect((expectStatus(await as(admin, 'GET', `/api/groups/${created.id}`), 404)).body).toEqual({ success: false, error: 'Group not found' });

    const activity = (await activityOf(t.app, admin.token, admin.id)).filter((e) => e.resource.startsWith(`groups/${created.id}`));
    expect(activity.map((e) => e.action).reverse()).toEqual([
      'group.create', 'group.update', 'group.member_add', 'group.grant', 'group.grant', 'group.revoke', 'group.revoke', 'group.member_remove', 'group.delete',
    ]);
    expect(activity.map((e) => e.details)).toContain(`Gave group ${renamed} the role editor on every domain`);
    expect(activity.map((e) => e.details)).toContain(`Removed ${member.email} from group ${renamed}`);
  });

  it('anyone but an administrator gets 403 on every route, and learns nothing of the groups', async () => {
    const group = await newGroup();
    const user = await person('not-admin', [{ resource: 'users', actions: ['read', 'create', 'update', 'delete'] }, { resource: 'domains', actions: ['read', 'create', 'update', 'delete'] }]);
    const requests: [string, string, unknown?][] = [
      ['GET', '/api/groups'],
      ['POST', '/api/groups', { name: uniqueTag('mine') }],
      ['GET', `/api/groups/${group.id}`],
      ['GET', '/api/groups/2147483647'],
      ['PUT', `/api/groups/${group.id}`, { name: uniqueTag('mine') }],
      ['DELETE', `/api/groups/${group.id}`],
      ['POST', `/api/groups/${group.id}/members`, { userId: user.id }],
      ['DELETE', `/api/groups/${group.id}/members/${user.id}`],
      ['POST', `/api/groups/${group.id}/domains`, { domains: 'all', role: 'viewer' }],
      ['DELETE', `/api/groups/${group.id}/domains/all`],
    ];
    for (const [method, path, body] of requests) {
      const res = await as(user, method, path, body);
      expect({ method, path, status: res.status, body: res.body }).toEqual({ method, path, status: 403, body: FORBIDDEN });
    }
    for (const [method, path] of requests) expect((await call(t.app, method, path)).status).toBe(401);
    expect((expectStatus(await as(admin, 'GET', `/api/groups/${group.id}`), 200)).body.data.members).toEqual([]);
  });

  it('refuses bad names, taken names, unknown users and domains, and hostile values with 422/409/404, changing nothing', async () => {
    const group = await newGroup();
    expectValidation(await as(admin, 'POST', '/api/groups', {}), ['name']);
    expectValidation(await as(admin, 'POST', '/api/groups', { name: '   ' }), ['name']);
    expectValidation(await as(admin, 'POST', '/api/groups', { name: 'x'.repeat(101) }), ['name']);
    expectValidation(await as(admin, 'POST', '/api/groups', { name: 'ok', admin: true }), ['admin']);
    expect((expectStatus(await as(admin, 'POST', '/api/groups', { name: group.name }), 409)).body).toEqual({ success: false, error: 'Group already exists' });
    const other = await newGroup();
    expectStatus(await as(admin, 'PUT', `/api/groups/${other.id}`, { name: group.name }), 409);

    expectValidation(await as(admin, 'POST', `/api/groups/${group.id}/members`, { userId: 2 ** 31 - 1 }), ['userId']);
    expectValidation(await as(admin, 'POST', `/api/groups/${group.id}/members`, { userId: "1 or 1=1" }), ['userId']);
    const domain = await domainOf(null);
    const unknownDomain = await as(admin, 'POST', `/api/groups/${group.id}/domains`, { domains: [domain.id, 2 ** 31 - 1], role: 'viewer' });
    expectValidation(unknownDomain, ['domains']);
    expect(unknownDomain.body.details.domains).toContain(String(2 ** 31 - 1));
    for (const body of [{ domains: [], role: 'viewer' }, { domains: 'every', role: 'viewer' }, { domains: ["1); drop table groups; --"], role: 'viewer' }, { domains: [domain.id], role: 'owner' }, { domains: 'all', role: 'admin' }]) {
      expectValidation(await as(admin, 'POST', `/api/groups/${group.id}/domains`, body), [Object.keys(body).find((k) => k === 'role' && !['viewer', 'editor'].includes(String(body.role))) ?? 'domains']);
    }
    expect((expectStatus(await as(admin, 'GET', `/api/groups/${group.id}`), 200)).body.data.domains).toEqual([]);
    for (const path of [`/api/groups/${group.id}/domains/every`, `/api/groups/${group.id}/domains/0`, `/api/groups/0`, `/api/groups/1;drop`]) {
      expect((await as(admin, 'DELETE', path)).status, path).toBe(422);
    }
    expect((await as(admin, 'POST', '/api/groups/2147483647/members', { userId: admin.id })).body).toEqual({ success: false, error: 'Group not found' });

    // SQL metacharacters in a name are a name.
    const hostile = `support'); drop table group_members; -- ${uniqueTag('x')}`;
    const stored = expectStatus(await as(admin, 'POST', '/api/groups', { name: hostile }), 201);
    expect(stored.body.data.name).toBe(hostile);
    expect((await as(admin, 'GET', '/api/groups')).body.data.groups.map((g: { name: string }) => g.name)).toContain(hostile);
  });
});

describe("what a group's members see", () => {
  it('a grant on some domains: its members see them in its role, within their own permissions; no other domain', async () => {
    const [mine, other] = [await domainOf(null), await domainOf(null)];
    const member = await person('dev');
    const capped = await person('capped', [{ resource: 'logs', actions: ['read'] }, { resource: 'alerts', actions: ['read'] }]);
    const group = await newGroup();
    for (const who of [member, capped]) expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/members`, { userId: who.id }), 201);
    expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/domains`, { domains: [mine.id], role: 'viewer' }), 200);
    expect(await sees(member, mine.id)).toBe(true);
    expect((await as(member, 'GET', `/api/domains/${other.id}`)).body).toEqual(NOT_FOUND);
    const alert = { name: 'g', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5, duration: 60, notificationMethod: 'email', notificationTarget: 'dev@example.com' };
    expect((await as(member, 'POST', `/api/logs/domains/${mine.id}/alerts`, alert)).body).toEqual(FORBIDDEN);
    expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/domains`, { domains: [mine.id], role: 'editor' }), 200);
    expectStatus(await as(member, 'POST', `/api/logs/domains/${mine.id}/alerts`, alert), 201);
    // The role is no more than the user's own permissions allow.
    expect((await as(capped, 'POST', `/api/logs/domains/${mine.id}/alerts`, alert)).body).toEqual(FORBIDDEN);
    // Members of a domain are its owner's to manage, not a group's.
    expect((await as(member, 'GET', `/api/domains/${mine.id}/members`)).body).toEqual(FORBIDDEN);
  });

  it('the support team: a viewer of every domain, those registered later too, without any power over users, domains or members', async () => {
    const support = await person('support', [{ resource: 'domains', actions: ['read'] }, { resource: 'logs', actions: ['read'] }, { resource: 'alerts', actions: ['read'] }]);
    const customer = await person('customer');
    const before = await domainOf(customer);
    const group = await newGroup('support');
    expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/members`, { userId: support.id }), 201);
    expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/domains`, { domains: 'all', role: 'viewer' }), 200);
    const after = await domainOf(null);
    for (const d of [before, after]) {
      expect((expectStatus(await as(support, 'GET', `/api/domains/${d.id}`), 200)).body.data.role).toBe('viewer');
      expectStatus(await as(support, 'GET', `/api/logs/domains/${d.id}/access`), 200);
    }
    const listed = (await as(support, 'GET', '/api/domains?limit=100')).body.data;
    expect(listed.pagination.total).toBe((await as(admin, 'GET', '/api/domains?limit=1')).body.data.pagination.total);
    for (const [method, path, body] of [
      ['GET', '/api/users'],
      ['POST', '/api/users', { email: `${uniqueTag('x')}@example.com`, password: 'a-password-1', name: 'x' }],
      ['DELETE', `/api/users/${customer.id}`],
      ['DELETE', `/api/domains/${before.id}`],
      ['PUT', `/api/domains/${before.id}`, { name: `${uniqueTag('r')}.example.com` }],
      ['PUT', `/api/domains/${before.id}`, { ownerId: support.id }],
      ['POST', `/api/domains/${before.id}/members`, { userId: support.id, role: 'editor' }],
      ['POST', `/api/logs/domains/${before.id}/alerts`, { name: 'g', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5, duration: 60, notificationMethod: 'email', notificationTarget: 'x@example.com' }],
      ['GET', '/api/groups'],
    ] as [string, string, unknown?][]) {
      expect((await as(support, method, path, body)).status, `${method} ${path}`).toBe(403);
    }
    expect((await as(customer, 'GET', `/api/domains/${before.id}/members`)).body.data.groups).toContainEqual({ groupId: group.id, name: group.name, role: 'viewer', allDomains: true });
  });

  it('a reseller owns its customers\' domains and shares each with its customer; it sees nothing else and manages no user or group', async () => {
    const reseller = await person('reseller');
    const customer = await person('customer');
    const elsewhere = await domainOf(null);
    const shop = (expectStatus(await as(reseller, 'POST', '/api/domains', { name: `${uniqueTag('shop')}.example.com` }), 201)).body.data;
    expect(shop.ownerId).toBe(reseller.id);
    expectStatus(await as(reseller, 'POST', `/api/domains/${shop.id}/members`, { userId: customer.id, role: 'editor' }), 201);
    expect((expectStatus(await as(customer, 'GET', `/api/domains/${shop.id}`), 200)).body.data.role).toBe('editor');
    expect((await as(reseller, 'GET', `/api/domains/${elsewhere.id}`)).body).toEqual(NOT_FOUND);
    expect((await as(reseller, 'GET', '/api/users')).status).toBe(403);
    expect((await as(reseller, 'POST', '/api/groups', { name: uniqueTag('mine') })).status).toBe(403);
    expect((await as(customer, 'POST', `/api/domains/${shop.id}/members`, { userId: reseller.id, role: 'viewer' })).body).toEqual(FORBIDDEN);
  });
});

describe('a group change that takes domains away takes effect at once', () => {
  for (const [how, revoke] of [
    ['taken out of the group', (g: number, u: number) => ['DELETE', `/api/groups/${g}/members/${u}`]],
    ['the grant revoked', (g: number) => ['DELETE', `/api/groups/${g}/domains/all`]],
    ['the group deleted', (g: number) => ['DELETE', `/api/groups/${g}`]],
  ] as const) {
    it(`${how}: the next request is 404 and the open live tail ends (access-revoked)`, async () => {
      const hub = createTailHub(t.runtime, { recheckMs: 600_000 });
      const app = createApp(t.runtime, { tail: hub });
      const domain = await domainOf(null);
      const member = await person('tailer');
      const group = await newGroup();
      expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/members`, { userId: member.id }), 201);
      expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/domains`, { domains: 'all', role: 'viewer' }), 200);
      const res = await app.request(`/api/logs/domains/${domain.id}/tail`, { headers: { authorization: `Bearer ${member.token}` } });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      const decoder = new TextDecoder();
      let text = '';
      try {
        text += decoder.decode((await reader.read()).value);
        expect(text).toContain('retry:');
        const [method, path] = revoke(group.id, member.id) as [string, string];
        expect((await call(app, method, path, { token: admin.token })).status).toBe(200);
        text += await readUntilEnd(reader);
        expect(text).toContain('event: end\ndata: {"reason":"access-revoked"}');
      } finally {
        await reader.cancel().catch(() => {});
        await hub.close();
      }
      expect((await as(member, 'GET', `/api/domains/${domain.id}`)).body).toEqual(NOT_FOUND);
    });
  }

  it("a member's fleet rule covers the group's domains; once the grant ends, its pending notification no longer names them", async () => {
    const INTERVAL = 30_000;
    let now = Math.floor(Date.now() / INTERVAL) * INTERVAL;
    const ev = evaluatorOf(t, { log, baseUrl: 'https://tailhouse.example.com', intervalMs: INTERVAL, now: () => now });
    const member = await person('on-call');
    const own = await domainOf(member);
    const granted = await domainOf(null);
    const group = await newGroup();
    expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/members`, { userId: member.id }), 201);
    expectStatus(await as(admin, 'POST', `/api/groups/${group.id}/domains`, { domains: [granted.id], role: 'viewer' }), 200);
    const target = `${uniqueTag('pager')}@example.com`;
    const rule = expectStatus(
      await as(member, 'POST', '/api/logs/alerts', { name: 'fleet', condition: 'errorRate', operator: 'greaterThan', threshold: 0.05, duration: 60, notificationMethod: 'email', notificationTarget: target, scope: { domains: 'all' } }),
      201,
    );
    const ruleId: number = rule.body.data.id;
    const pendingDomains = async () => {
      const rows = await t.runtime.db.query<{ events: { alert: { id: number }; domain: { id: number } }[] }>(sql`select events from alert_notifications where target = ${target} and status = 'pending'`);
      return rows.flatMap((r) => r.events.filter((e) => e.alert.id === ruleId).map((e) => e.domain.id)).sort((a, b) => a - b);
    };
    const lines = [own, granted].flatMap((d) => Array.from({ length: 20 }, (_, i) => `${d.name} 10.9.0.${i} - - [${timeLocal(now - 1000)}] "GET /${uniqueTag('p')} HTTP/1.1" 503 10 "-" "agent" 0.010`));
    expect(await importText(t, '', `${lines.join('\n')}\n`, { domain: null, format: HOST_FORMAT })).toMatchObject({ inserted: lines.length });
    now += INTERVAL;
    expect((await ev.evaluateOnce()).ran).toBe(true);
    expect(await pendingDomains()).toEqual([own.id, granted.id].sort((a, b) => a - b));

    expectStatus(await as(admin, 'DELETE', `/api/groups/${group.id}/domains/${granted.id}`), 200);
    expect(await pendingDomains()).toEqual([own.id]);
    await ev.deliverDue(now + GROUP_WAIT_MS);
    const sent = await t.runtime.db.query<{ events: { domain: { name: string } }[] }>(sql`select events from alert_notifications where target = ${target}`);
    const named = sent.flatMap((r) => r.events.map((e) => e.domain.name));
    expect(named).toContain(own.name);
    expect(named).not.toContain(granted.name);
  });
});

describe('tailhouse groups', () => {
  it('creates a group, fills it, grants it every domain or some, lists, revokes and removes it; --as records it; refuses what is wrong with one line', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-groups-cli-'));
    const vars = { DATA_DIR: dataDir };
    try {
      const { ok, fails } = commandsWith(vars);
      await ok(['users', 'create', '--email', 'boss@example.com', '--password', 'boss-password-1', '--role', 'admin']);
      await ok(['users', 'create', '--email', 'help@example.com', '--password', 'help-password-1']);
      await ok(['domains', 'add', 'cli-group.example.com']);
      expect(await ok(['groups', 'create', 'Support', '--as', 'boss@example.com'])).toMatch(/^created group \d+ Support\n$/);
      expect(await ok(['groups', 'add-member', 'Support', 'help@example.com'])).toBe('help@example.com is now in group Support\n');
      expect(await ok(['groups', 'grant', 'Support', '--all', '--role', 'viewer', '--as', 'boss@example.com'])).toBe('group Support sees all (viewer)\n');
      expect(await ok(['groups', 'grant', 'Support', 'cli-group.example.com', '--role', 'editor'])).toBe('group Support sees all (viewer), cli-group.example.com (editor)\n');
      const [listed] = JSON.parse(await ok(['groups', 'list', '--json']));
      expect(listed).toMatchObject({ name: 'Support', members: [{ email: 'help@example.com' }], domains: [{ domainId: null, role: 'viewer' }, { name: 'cli-group.example.com', role: 'editor' }] });

      await fails(['groups', 'grant', 'Support', '--role', 'viewer'], /give either domains or --all/);
      await fails(['groups', 'grant', 'Nobody', '--all', '--role', 'viewer'], /no group has the name or id Nobody/);
      await fails(['groups', 'create', 'Support'], /Group already exists/);
      expect(await ok(['groups', 'revoke', 'Support', '--all', '--as', 'boss@example.com'])).toBe('group Support no longer holds a role on every domain\n');
      await fails(['groups', 'revoke', 'Support', '--all'], /group Support holds no role on every domain/);
      expect(await ok(['groups', 'remove-member', 'Support', 'help@example.com'])).toBe('help@example.com is no longer in group Support\n');
      await fails(['groups', 'remove-member', 'Support', 'help@example.com'], /help@example\.com is not in group Support/);
      expect(await ok(['groups', 'remove', 'Support', '--yes', '--as', 'boss@example.com'])).toMatch(/^removed group \d+ Support\n$/);
      expect(JSON.parse(await ok(['groups', 'list', '--json']))).toEqual([]);

      const db = await openPglite(path.join(dataDir, 'postgres'));
      try {
        const rows = await db.query<{ action: string; ip_address: string }>(sql`
          select a.action, a.ip_address from activity a join users u on u.id = a.user_id where u.email = 'boss@example.com' and a.action like 'group.%' order by a.id`);
        expect(rows.map((r) => [r.action, r.ip_address])).toEqual([
          ['group.create', 'command line'],
          ['group.grant', 'command line'],
          ['group.revoke', 'command line'],
          ['group.delete', 'command line'],
        ]);
      } finally {
        await db.close();
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 240_000);
});
