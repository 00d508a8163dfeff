/**
 * Members of a domain (issue 33, parts 1, 2 and 4; docs/reference/domains.md#members): the members
 * API, then a hostile walk of every per-domain route by an owner, a viewer, an editor, a revoked
 * member, a group's member (editor through the group), a support group's member (viewer of every
 * domain), a user taken out of that group, a stranger and an administrator, each answer held to the role (404 for what one does not
 * see, 403 beyond the role or the user's own permissions, no leak in lists, the fleet, queries,
 * alerts), and a revocation taking effect at once: the next request, an open live tail, a download
 * link, a fleet rule and its pending notification.
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
import { createTailHub, type TailHub } from '../../../src/logs/tail/service.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type TestApp } from '../../support/app.js';
import { evaluatorOf } from '../../support/alerts.js';
import { activityOf, freshUser, type Person } from '../../support/auth.js';
import { commandsWith } from '../../support/child.js';
import { HOST_FORMAT, importText, timeLocal } from '../../support/ingest.js';
import { readUntilEnd } from '../../support/logs.js';
import { registerDomain } from '../../support/domains.js';
import { uniqueTag } from '../../support/users.js';

const NOT_FOUND = { success: false, error: 'Domain not found' };
const FORBIDDEN = { success: false, error: 'Insufficient permissions' };
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

/** Every permission of the catalogue but the users': what the domain roles must narrow, for everyone alike. */
const BROAD = [
  { resource: 'domains', actions: ['read'] },
  { resource: 'logs', actions: ['read'] },
  { resource: 'alerts', actions: ['read', 'create', 'update', 'delete'] },
];

type Who = 'admin' | 'owner' | 'editor' | 'viewer' | 'revoked' | 'grouped' | 'support' | 'ungrouped' | 'stranger';
let t: TestApp;
let admin: Person;
const people = {} as Record<Who, Person>;
/** The shared domain (owner's), and the stranger's own, which nobody else may learn of. */
let shared: { id: number; name: string };
let theirs: { id: number; name: string };

const person = (tag: string, permissions = BROAD): Promise<Person> => freshUser(t.app, admin.token, tag, { name: tag, permissions });

const domainOf = (owner: Person | null) => registerDomain(t.app, admin.token, { ownerId: owner?.id ?? null, tag: 'members' });

async function share(domainId: number, by: Person, userId: number, role: string, status = 201) {
  const res = await call(t.app, 'POST', `/api/domains/${domainId}/members`, { token: by.token, body: { userId, role } });
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  return res;
}

async function unshare(domainId: number, by: Person, userId: number, status = 200) {
  const res = await call(t.app, 'DELETE', `/api/domains/${domainId}/members/${userId}`, { token: by.token });
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  return res;
}

async function adminCall(method: string, path: string, body: unknown, status: number) {
  const res = await call(t.app, method, path, { token: admin.token, ...(body !== undefined ? { body } : {}) });
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  return res;
}

/** A group (its id) of `members`, given `grant`. */
async function group(tag: string, members: Person[], grant: { domains: number[] | 'all'; role: string }): Promise<number> {
  const id: number = (await adminCall('POST', '/api/groups', { name: uniqueTag(tag) }, 201)).body.data.id;
  for (const member of members) await adminCall('POST', `/api/groups/${id}/members`, { userId: member.id }, 201);
  await adminCall('POST', `/api/groups/${id}/domains`, grant, 200);
  return id;
}

/** 5xx lines a second before `at` on each domain, through the real import path ($host routes them). */
async function ingest(domains: { name: string }[], count: number, status: number, at = Date.now()): Promise<void> {
  const batch = uniqueTag('req');
  const lines = domains.flatMap((d) => Array.from({ length: count }, (_, i) => `${d.name} 10.7.0.${i} - - [${timeLocal(at - 1000)}] "GET /${batch}/${i} HTTP/1.1" ${status} 10 "-" "agent" 0.010`));
  expect(await importText(t, '', `${lines.join('\n')}\n`, { domain: null, format: HOST_FORMAT })).toMatchObject({ inserted: lines.length, rejected: 0 });
}

const alertBody = (fields: Record<string, unknown> = {}) => ({
  name: 'Members 5xx',
  condition: 'errorRate',
  operator: 'greaterThan',
  threshold: 0.05,
  duration: 60,
  notificationMethod: 'email',
  notificationTarget: `${uniqueTag('pager')}@example.com`,
  ...fields,
});

async function ownerAlert(): Promise<number> {
  const res = await call(t.app, 'POST', `/api/logs/domains/${shared.id}/alerts`, { token: people.owner.token, body: alertBody() });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.data.id;
}

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
  admin = { id: session.user.id, token: session.accessToken, email: ADMIN_EMAIL };
  for (const who of ['owner', 'editor', 'viewer', 'revoked', 'grouped', 'support', 'ungrouped', 'stranger'] as const) people[who] = await person(who);
  people.admin = admin;
  shared = await domainOf(people.owner);
  theirs = await domainOf(people.stranger);
  await share(shared.id, people.owner, people.viewer.id, 'viewer');
  await share(shared.id, people.owner, people.editor.id, 'editor');
  await share(shared.id, people.owner, people.revoked.id, 'editor');
  await unshare(shared.id, people.owner, people.revoked.id);
  // A group of developers given the shared domain as editors; the support team reads every domain.
  const developers = await group('developers', [people.grouped, people.ungrouped], { domains: [shared.id], role: 'editor' });
  await group('support', [people.support], { domains: 'all', role: 'viewer' });
  await adminCall('DELETE', `/api/groups/${developers}/members/${people.ungrouped.id}`, undefined, 200);
  await ingest([shared, theirs], 5, 200);
});

afterAll(async () => {
  await t?.close();
});

describe('the members API', () => {
  it('the owner adds a member (201), changes its role (200), lists and removes it; each grant and revocation is in its activity', async () => {
    const member = await person('member');
    const added = await share(shared.id, people.owner, member.id, 'viewer');
    // An owner learns no name or address of the user it added by id: it could walk the ids.
    expect(added.body.data).toEqual({
      userId: member.id, name: null, email: null, role: 'viewer', grantedBy: people.owner.id, createdAt: expect.any(String), updatedAt: expect.any(String),
    });
    expect((await share(shared.id, people.owner, member.id, 'viewer', 200)).body.data.role).toBe('viewer');
    expect((await share(shared.id, people.owner, member.id, 'editor', 200)).body.data.role).toBe('editor');
    const list = await call(t.app, 'GET', `/api/domains/${shared.id}/members`, { token: people.owner.token });
    expect(list.status).toBe(200);
    expect(list.body.data.members.map((m: { userId: number; role: string }) => [m.userId, m.role])).toEqual([
      [people.editor.id, 'editor'],
      [people.viewer.id, 'viewer'],
      [member.id, 'editor'],
    ]);
    expect(list.body.data.members.every((m: { name: unknown; email: unknown }) => m.name === null && m.email === null)).toBe(true);
    // The administrator's list is the same, with names and addresses.
    const adminList = await call(t.app, 'GET', `/api/domains/${shared.id}/members`, { token: admin.token });
    expect(adminList.body.data.members.map((m: { userId: number; role: string }) => [m.userId, m.role])).toEqual(list.body.data.members.map((m: { userId: number; role: string }) => [m.userId, m.role]));
    expect(adminList.body.data.members.find((m: { userId: number }) => m.userId === member.id)).toMatchObject({ name: 'member', email: member.email });
    await unshare(shared.id, people.owner, member.id);
    expect((await unshare(shared.id, people.owner, member.id, 404)).body).toEqual({ success: false, error: 'Member not found' });

    const activity = (await activityOf(t.app, admin.token, people.owner.id)).filter((a) => a.resource === `domains/${shared.id}/members/${member.id}`);
    // The owner reads its own activity: the member is named by id there too.
    expect(activity.map((a) => [a.action, a.details])).toEqual([
      ['domain.member_remove', `Removed user ${member.id} (editor) from domain ${shared.name}`],
      ['domain.member_role', `Changed the role of user ${member.id} on domain ${shared.name} from viewer to editor`],
      ['domain.member_add', `Shared domain ${shared.name} with user ${member.id} as viewer`],
    ]);
    expect(JSON.stringify(await activityOf(t.app, people.owner.token, people.owner.id))).not.toContain(member.email);
    // An administrator's grants name the member by its address.
    await share(shared.id, admin, member.id, 'viewer');
    await unshare(shared.id, admin, member.id);
    expect((await activityOf(t.app, admin.token, admin.id)).map((a) => a.details)).toContain(`Shared domain ${shared.name} with ${member.email} as viewer`);
  });

  it('refuses an unknown user, the owner, a bad role and unknown fields with 422; a member leaves by itself', async () => {
    const bad = async (body: unknown, field: string) => {
      const res = await call(t.app, 'POST', `/api/domains/${shared.id}/members`, { token: people.owner.token, body });
      expect(res.status, JSON.stringify(res.body)).toBe(422);
      expect(Object.keys(res.body.details)).toEqual([field]);
    };
    await bad({ userId: 2 ** 31 - 1, role: 'viewer' }, 'userId');
    await bad({ userId: people.owner.id, role: 'editor' }, 'userId');
    await bad({ userId: people.viewer.id, role: 'owner' }, 'role');
    await bad({ userId: people.viewer.id, role: 'admin' }, 'role');
    await bad({ userId: '7', role: 'viewer' }, 'userId');
    await bad({ userId: people.viewer.id, role: 'viewer', domainId: theirs.id }, 'domainId');

    const leaver = await person('leaver');
    await share(shared.id, people.owner, leaver.id, 'viewer');
    await unshare(shared.id, leaver, leaver.id);
    expect((await call(t.app, 'GET', `/api/domains/${shared.id}`, { token: leaver.token })).status).toBe(404);
    expect((await activityOf(t.app, admin.token, leaver.id)).map((a) => a.details)).toContain(`Left domain ${shared.name} (was viewer)`);
  });

  it('the owner hands the domain over: the new owner holds it (its membership ends), the old one no longer sees it; nobody else may', async () => {
    const first = await person('first-owner');
    const next = await person('next-owner');
    const domain = await domainOf(first);
    await share(domain.id, first, next.id, 'viewer');
    for (const [who, body] of [[first, { ownerId: null }], [first, { ownerId: first.id }], [first, { name: `${uniqueTag('renamed')}.example.com` }], [next, { ownerId: next.id }]] as const) {
      const res = await call(t.app, 'PUT', `/api/domains/${domain.id}`, { token: who.token, body });
      expect({ status: res.status, body: res.body }, JSON.stringify(body)).toEqual({ status: 403, body: FORBIDDEN });
    }
    expect((await call(t.app, 'PUT', `/api/domains/${domain.id}`, { token: people.stranger.token, body: { ownerId: people.stranger.id } })).body).toEqual(NOT_FOUND);

    const handed = await call(t.app, 'PUT', `/api/domains/${domain.id}`, { token: first.token, body: { ownerId: next.id } });
    expect(handed.status, JSON.stringify(handed.body)).toBe(200);
    expect(handed.body.data.ownerId).toBe(next.id);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: first.token })).body).toEqual(NOT_FOUND);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}/members`, { token: next.token })).body.data.members).toEqual([]);
    expect((await activityOf(t.app, admin.token, first.id)).map((a) => a.details)).toContain(`Handed domain ${domain.name} over to user ${next.id}`);
  });
});

/** One request of the walk: the least role it needs, and what a caller with that role gets. */
interface Step {
  name: string;
  least: 'viewer' | 'editor' | 'owner' | 'admin';
  /** Builds the request for one caller (fresh resources for those that change something). */
  request: (who: Who) => Promise<{ method: string; path: string; body?: unknown }>;
  ok: number;
  /** The 404 text for those who do not see the domain (default: "Domain not found"). */
  notFound?: string;
  skip?: Who;
}

const RANK = { stranger: 0, revoked: 0, ungrouped: 0, viewer: 1, support: 1, editor: 2, grouped: 2, owner: 3, admin: 4 } as const;
const sinceHour = () => new Date(Date.now() - 3_600_000).toISOString();

const STEPS: Step[] = [
  { name: 'get the domain', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/domains/${shared.id}` }) },
  { name: 'its ingest health', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/domains/${shared.id}/ingest` }) },
  { name: 'access logs', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/access` }) },
  { name: 'error logs', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/error` }) },
  { name: 'rejects', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/rejects` }) },
  { name: 'statistics', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/stats?period=1h` }) },
  { name: 'search', least: 'viewer', ok: 200, request: async () => ({ method: 'POST', path: `/api/logs/domains/${shared.id}/search`, body: { query: 'req', startDate: sinceHour() } }) },
  {
    name: 'export', least: 'viewer', ok: 201,
    request: async () => ({ method: 'POST', path: `/api/logs/domains/${shared.id}/export`, body: { type: 'access', format: 'csv', startDate: sinceHour(), endDate: new Date().toISOString() } }),
  },
  { name: 'the live tail (HEAD)', least: 'viewer', ok: 200, request: async () => ({ method: 'HEAD', path: `/api/logs/domains/${shared.id}/tail` }) },
  { name: 'query naming it', least: 'viewer', ok: 200, request: async () => ({ method: 'POST', path: '/api/logs/query', body: { metrics: ['requests'], domains: [shared.id] } }) },
  { name: 'its alerts', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/alerts` }) },
  { name: 'rules covering it', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/alerts/rules` }) },
  { name: 'its alert history', least: 'viewer', ok: 200, request: async () => ({ method: 'GET', path: `/api/logs/domains/${shared.id}/alerts/history` }) },
  { name: 'one of its alerts', least: 'viewer', ok: 200, notFound: 'Alert not found', request: async () => ({ method: 'GET', path: `/api/logs/alerts/${await ownerAlert()}` }) },
  { name: 'a rule over it', least: 'viewer', ok: 201, request: async () => ({ method: 'POST', path: '/api/logs/alerts', body: alertBody({ scope: { domainIds: [shared.id] } }) }) },
  { name: 'create an alert', least: 'editor', ok: 201, request: async () => ({ method: 'POST', path: `/api/logs/domains/${shared.id}/alerts`, body: alertBody() }) },
  { name: 'change an alert', least: 'editor', ok: 200, request: async () => ({ method: 'PUT', path: `/api/logs/domains/${shared.id}/alerts/${await ownerAlert()}`, body: { threshold: 0.5 } }) },
  { name: 'change an alert by id', least: 'editor', ok: 200, notFound: 'Alert not found', request: async () => ({ method: 'PUT', path: `/api/logs/alerts/${await ownerAlert()}`, body: { enabled: false } }) },
  { name: 'delete an alert', least: 'editor', ok: 200, request: async () => ({ method: 'DELETE', path: `/api/logs/domains/${shared.id}/alerts/${await ownerAlert()}` }) },
  { name: 'delete an alert by id', least: 'editor', ok: 200, notFound: 'Alert not found', request: async () => ({ method: 'DELETE', path: `/api/logs/alerts/${await ownerAlert()}` }) },
  {
    name: 'silence it', least: 'editor', ok: 201,
    request: async () => ({ method: 'POST', path: '/api/logs/silences', body: { domainIds: [shared.id], alertIds: [await ownerAlert()], endsAt: new Date(Date.now() + 3_600_000).toISOString(), comment: 'maintenance' } }),
  },
  { name: 'its members', least: 'owner', ok: 200, request: async () => ({ method: 'GET', path: `/api/domains/${shared.id}/members` }) },
  {
    name: 'add a member', least: 'owner', ok: 201,
    request: async () => ({ method: 'POST', path: `/api/domains/${shared.id}/members`, body: { userId: (await person('added')).id, role: 'viewer' } }),
  },
  {
    name: 'remove a member', least: 'owner', ok: 200,
    request: async () => {
      const added = await person('removed');
      await share(shared.id, people.owner, added.id, 'editor');
      return { method: 'DELETE', path: `/api/domains/${shared.id}/members/${added.id}` };
    },
  },
  { name: 'rename it', least: 'admin', ok: 200, request: async () => ({ method: 'PUT', path: `/api/domains/${shared.id}`, body: { name: shared.name } }) },
  // Not sent as the administrator, who would delete it.
  { name: 'delete it', least: 'admin', ok: 200, skip: 'admin', request: async () => ({ method: 'DELETE', path: `/api/domains/${shared.id}` }) },
];

describe('a hostile walk of the per-domain routes', () => {
  for (const step of STEPS) {
    it(`${step.name}: ${step.least} and above get ${step.ok}, the others 403, who does not see the domain 404`, async () => {
      const got: Record<string, unknown> = {};
      const want: Record<string, unknown> = {};
      for (const who of Object.keys(RANK) as Who[]) {
        if (step.skip === who) continue;
        const { method, path, body } = await step.request(who);
        // A HEAD answer has no body to parse: its status only.
        const res = method === 'HEAD' ? { status: (await t.app.request(path, { method, headers: { authorization: `Bearer ${people[who].token}` } })).status, body: null } : await call(t.app, method, path, { token: people[who].token, ...(body !== undefined ? { body } : {}) });
        got[who] = res.status >= 400 && method !== 'HEAD' ? { status: res.status, body: res.body } : res.status;
        const sees = RANK[who] > 0;
        const notFound = { success: false, error: step.notFound ?? 'Domain not found' };
        want[who] = !sees ? (method === 'HEAD' ? 404 : { status: 404, body: notFound }) : RANK[who] < RANK[step.least] ? (method === 'HEAD' ? 403 : { status: 403, body: FORBIDDEN }) : step.ok;
      }
      expect(got).toEqual(want);
      // The steps' alerts go, so that the next steps and tests stay under a domain's cap of alerts.
      await t.runtime.db.query(sql`delete from alerts where domain_id = ${shared.id}`);
    });
  }
});

describe('no leak in lists, the fleet, queries and alerts', () => {
  it('the domain list (the fleet) shows a member the shared domain and nothing of the stranger; the revoked member nothing', async () => {
    const names = async (who: Who) => {
      const res = await call(t.app, 'GET', '/api/domains?limit=100&ingest=true', { token: people[who].token });
      expect(res.status).toBe(200);
      return res.body.data.domains.map((d: { name: string }) => d.name).filter((n: string) => n === shared.name || n === theirs.name);
    };
    expect(await names('viewer')).toEqual([shared.name]);
    expect(await names('editor')).toEqual([shared.name]);
    expect(await names('owner')).toEqual([shared.name]);
    expect(await names('revoked')).toEqual([]);
    expect(await names('grouped')).toEqual([shared.name]);
    expect(await names('ungrouped')).toEqual([]);
    expect(await names('stranger')).toEqual([theirs.name]);
    expect((await names('support')).sort()).toEqual([shared.name, theirs.name].sort());
    expect((await names('admin')).sort()).toEqual([shared.name, theirs.name].sort());
  });

  it('a shared domain shows the caller its role, the best of its grants; the answers of owners and administrators have no role', async () => {
    const roleIn = async (who: Who, id: number) => {
      const listed = (await call(t.app, 'GET', '/api/domains?limit=100', { token: people[who].token })).body.data.domains.find((d: { id: number }) => d.id === id);
      const got = (await call(t.app, 'GET', `/api/domains/${id}`, { token: people[who].token })).body.data;
      expect(listed).toEqual(got);
      return 'role' in got ? got.role : 'none';
    };
    expect(await roleIn('viewer', shared.id)).toBe('viewer');
    expect(await roleIn('editor', shared.id)).toBe('editor');
    expect(await roleIn('grouped', shared.id)).toBe('editor');
    expect(await roleIn('support', theirs.id)).toBe('viewer');
    expect(await roleIn('owner', shared.id)).toBe('none');
    expect(await roleIn('admin', shared.id)).toBe('none');
    expect(await roleIn('stranger', theirs.id)).toBe('none');
    // A viewer by membership who is an editor through a group holds the better role.
    const both = await person('both');
    await share(shared.id, people.owner, both.id, 'viewer');
    await group('both', [both], { domains: [shared.id], role: 'editor' });
    expect((await call(t.app, 'GET', `/api/domains/${shared.id}`, { token: both.token })).body.data.role).toBe('editor');
    const created = await call(t.app, 'POST', `/api/logs/domains/${shared.id}/alerts`, { token: both.token, body: alertBody() });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
  });

  it("a query over every domain one sees counts the shared domain's lines for a member, never the stranger's; naming the stranger's is 404", async () => {
    const byDomain = async (who: Who) => {
      const res = await call(t.app, 'POST', '/api/logs/query', { token: people[who].token, body: { metrics: ['requests'], dimensions: ['domain'], limit: 1000 } });
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return Object.fromEntries(res.body.data.results.map((r: { dimensions: string[]; metrics: number[] }) => [r.dimensions[0], r.metrics[0]]));
    };
    expect(await byDomain('viewer')).toEqual({ [shared.name]: 5 });
    expect(await byDomain('revoked')).toEqual({});
    expect(await byDomain('grouped')).toEqual({ [shared.name]: 5 });
    expect(await byDomain('ungrouped')).toEqual({});
    expect(await byDomain('support')).toMatchObject({ [shared.name]: 5, [theirs.name]: 5 });
    expect(await byDomain('stranger')).toEqual({ [theirs.name]: 5 });
    const named = await call(t.app, 'POST', '/api/logs/query', { token: people.viewer.token, body: { metrics: ['requests'], domains: [shared.id, theirs.id] } });
    expect({ status: named.status, body: named.body }).toEqual({ status: 404, body: NOT_FOUND });
  });

  it("the alerts list shows a member the shared domain's alerts, not the stranger's; the revoked member none of them", async () => {
    const mine = await ownerAlert();
    const strangers = await call(t.app, 'POST', `/api/logs/domains/${theirs.id}/alerts`, { token: people.stranger.token, body: alertBody() });
    expect(strangers.status).toBe(201);
    const ids = async (who: Who) => {
      const res = await call(t.app, 'GET', '/api/logs/alerts', { token: people[who].token });
      expect(res.status).toBe(200);
      return res.body.data.alerts.map((a: { id: number }) => a.id);
    };
    for (const who of ['viewer', 'editor'] as const) {
      expect(await ids(who)).toContain(mine);
      expect(await ids(who)).not.toContain(strangers.body.data.id);
    }
    expect(await ids('revoked')).not.toContain(mine);
    expect(await ids('grouped')).toContain(mine);
    expect(await ids('ungrouped')).not.toContain(mine);
    expect(await ids('stranger')).not.toContain(mine);
  });
});

describe("a role stays under the user's own permissions", () => {
  it('an editor without alerts:create gets 403 creating an alert; a viewer without logs:read 403 reading logs; both still see the domain', async () => {
    const editor = await person('capped-editor', [{ resource: 'logs', actions: ['read'] }, { resource: 'alerts', actions: ['read'] }]);
    const viewer = await person('capped-viewer', [{ resource: 'alerts', actions: ['read'] }]);
    await share(shared.id, people.owner, editor.id, 'editor');
    await share(shared.id, people.owner, viewer.id, 'viewer');
    const created = await call(t.app, 'POST', `/api/logs/domains/${shared.id}/alerts`, { token: editor.token, body: alertBody() });
    expect({ status: created.status, body: created.body }).toEqual({ status: 403, body: FORBIDDEN });
    const read = await call(t.app, 'GET', `/api/logs/domains/${shared.id}/access`, { token: viewer.token });
    expect({ status: read.status, body: read.body }).toEqual({ status: 403, body: FORBIDDEN });
    expect((await call(t.app, 'GET', `/api/domains/${shared.id}`, { token: viewer.token })).status).toBe(200);
  });
});

describe('a revocation takes effect at once', () => {
  it('the open live tail ends (access-revoked), the download link stops, the next request is 404', async () => {
    // A hub that would re-check only after ten minutes: the end must come from the revocation itself.
    const hub: TailHub = createTailHub(t.runtime, { recheckMs: 600_000 });
    const app = createApp(t.runtime, { tail: hub });
    const member = await person('tailer');
    await share(shared.id, people.owner, member.id, 'viewer');
    const exported = await call(app, 'POST', `/api/logs/domains/${shared.id}/export`, { token: member.token, body: { type: 'access', format: 'csv', startDate: sinceHour(), endDate: new Date().toISOString() } });
    expect(exported.status, JSON.stringify(exported.body)).toBe(201);
    const download = new URL(exported.body.data.downloadUrl).pathname;
    const before = await app.request(download);
    expect(before.status).toBe(200);
    await before.text();

    const res = await app.request(`/api/logs/domains/${shared.id}/tail`, { headers: { authorization: `Bearer ${member.token}` } });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    try {
      const first = await reader.read();
      text += decoder.decode(first.value);
      expect(text).toContain('retry:');
      expect(hub.clients).toBe(1);

      await call(app, 'DELETE', `/api/domains/${shared.id}/members/${member.id}`, { token: people.owner.token }).then((r) => expect(r.status).toBe(200));
      text += await readUntilEnd(reader);
      expect(text).toContain('event: end\ndata: {"reason":"access-revoked"}');
    } finally {
      await reader.cancel().catch(() => {});
      await hub.close();
    }
    expect((await app.request(download)).status).toBe(404);
    expect((await call(app, 'GET', `/api/logs/domains/${shared.id}/access`, { token: member.token })).body).toEqual(NOT_FOUND);
  });

  it("a member's fleet rule covers the shared domain and notifies about it; once revoked, the pending notification no longer names it and the rule covers it no more", async () => {
    const INTERVAL = 30_000;
    let now = Math.floor(Date.now() / INTERVAL) * INTERVAL;
    const ev = evaluatorOf(t, { log, baseUrl: 'https://tailhouse.example.com', intervalMs: INTERVAL, now: () => now });
    const member = await person('on-call');
    const own = await domainOf(member);
    await share(shared.id, people.owner, member.id, 'viewer');
    const target = `${uniqueTag('member-pager')}@example.com`;
    const rule = await call(t.app, 'POST', '/api/logs/alerts', { token: member.token, body: alertBody({ notificationTarget: target, scope: { domains: 'all' } }) });
    expect(rule.status, JSON.stringify(rule.body)).toBe(201);
    const ruleId: number = rule.body.data.id;
    const covered = async () => (await call(t.app, 'GET', `/api/logs/alerts/${ruleId}`, { token: member.token })).body.data.domains.map((d: { domainId: number }) => d.domainId).sort();
    expect(await covered()).toEqual([shared.id, own.id].sort());

    const pendingDomains = async () => {
      const rows = await t.runtime.db.query<{ events: { alert: { id: number }; domain: { id: number } }[] }>(sql`select events from alert_notifications where target = ${target} and status = 'pending'`);
      return rows.flatMap((r) => r.events.filter((e) => e.alert.id === ruleId).map((e) => e.domain.id)).sort();
    };
    await ingest([shared, own], 20, 503, now);
    now += INTERVAL;
    expect((await ev.evaluateOnce()).ran).toBe(true);
    expect(await pendingDomains()).toEqual([shared.id, own.id].sort());

    await unshare(shared.id, people.owner, member.id);
    expect(await pendingDomains()).toEqual([own.id]);
    expect(await covered()).toEqual([own.id]);
    await ingest([shared, own], 20, 503, now);
    now += INTERVAL;
    expect((await ev.evaluateOnce()).ran).toBe(true);
    await ev.deliverDue(now + GROUP_WAIT_MS);
    expect(await pendingDomains()).toEqual([]);
    const sent = await t.runtime.db.query<{ events: { alert: { id: number }; domain: { id: number; name: string } }[] }>(sql`select events from alert_notifications where target = ${target}`);
    const named = sent.flatMap((r) => r.events.map((e) => e.domain.name));
    expect(named).toContain(own.name);
    expect(named).not.toContain(shared.name);
  });

  it('a round that measured before the revocation and is applied after it records no state (so no notification) about the domain', async () => {
    const { saveStates } = await import('../../../src/alerts/store.js');
    const member = await person('mid-round');
    await share(shared.id, people.owner, member.id, 'viewer');
    const rule = await call(t.app, 'POST', '/api/logs/alerts', { token: member.token, body: alertBody({ scope: { domains: 'all' } }) });
    expect(rule.status, JSON.stringify(rule.body)).toBe(201);
    const [row] = await t.runtime.db.query<{ updated_at: Date }>(sql`select updated_at from alerts where id = ${rule.body.data.id}`);
    const write = { alertId: rule.body.data.id, domainId: shared.id, version: new Date(row!.updated_at), state: 'firing' as const, stateChangedAt: new Date(), lastTriggeredAt: new Date(), notifiedState: 'firing' as const, lastNotifiedAt: new Date() };
    // The same write, rolled back, before the revocation: it would be saved.
    const before = await t.runtime.db
      .transaction(async (tx) => {
        const saved = await saveStates(tx, [write]);
        throw Object.assign(new Error('roll back'), { saved });
      })
      .catch((err: { saved?: Set<string> }) => err.saved);
    expect(before).toEqual(new Set([`${rule.body.data.id}:${shared.id}`]));
    await unshare(shared.id, people.owner, member.id);
    expect(await saveStates(t.runtime.db, [write])).toEqual(new Set());
  });

  it("an editor made a viewer no longer silences the domain's alerts; its rule still covers it", async () => {
    const member = await person('silencer');
    await share(shared.id, people.owner, member.id, 'editor');
    const silence = await call(t.app, 'POST', '/api/logs/silences', { token: member.token, body: { domainIds: 'all', endsAt: new Date(Date.now() + 3_600_000).toISOString(), comment: 'deploy' } });
    expect(silence.status, JSON.stringify(silence.body)).toBe(201);
    const { liveSilences } = await import('../../../src/alerts/silences/store.js');
    const covers = async () => (await liveSilences(t.runtime.db, new Date())).find((s) => s.id === silence.body.data.id)!.domainIds.has(shared.id);
    expect(await covers()).toBe(true);
    await share(shared.id, people.owner, member.id, 'viewer', 200);
    expect(await covers()).toBe(false);
    const again = await call(t.app, 'POST', '/api/logs/silences', { token: member.token, body: { domainIds: [shared.id], endsAt: new Date(Date.now() + 3_600_000).toISOString(), comment: 'deploy' } });
    expect({ status: again.status, body: again.body }).toEqual({ status: 403, body: FORBIDDEN });
  });
});

describe('tailhouse domains share, members, unshare', () => {
  it('gives a role, changes it, lists it and takes it back; --as records it in that administrator\'s activity; refuses the owner, a non-member, a non-admin --as and another role', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-members-cli-'));
    const vars = { DATA_DIR: dataDir };
    try {
      const { ok, fails } = commandsWith(vars);
      await ok(['users', 'create', '--email', 'boss@example.com', '--password', 'boss-password-1', '--role', 'admin']);
      await ok(['users', 'create', '--email', 'own@example.com', '--password', 'own-password-1']);
      await ok(['users', 'create', '--email', 'dev@example.com', '--password', 'dev-password-1']);
      await ok(['domains', 'add', 'cli-shared.example.com', '--owner', 'own@example.com']);

      expect(await ok(['domains', 'share', 'cli-shared.example.com', 'dev@example.com', '--role', 'viewer', '--as', 'boss@example.com'])).toBe('dev@example.com is now a viewer of cli-shared.example.com\n');
      expect(await ok(['domains', 'share', 'cli-shared.example.com', 'dev@example.com', '--role', 'editor'])).toBe('dev@example.com is from now on an editor of cli-shared.example.com\n');
      const members = JSON.parse(await ok(['domains', 'members', 'cli-shared.example.com', '--json']));
      expect(members.map((m: { email: string; role: string; grantedBy: number | null }) => [m.email, m.role, m.grantedBy])).toEqual([['dev@example.com', 'editor', null]]);

      await fails(['domains', 'share', 'cli-shared.example.com', 'own@example.com', '--role', 'viewer'], /userId is the owner of the domain/);
      await fails(['domains', 'share', 'cli-shared.example.com', 'dev@example.com', '--role', 'owner'], /--role/);
      await fails(['domains', 'share', 'cli-shared.example.com', 'dev@example.com'], /--role/);
      await fails(['domains', 'unshare', 'cli-shared.example.com', 'dev@example.com', '--as', 'own@example.com'], /own@example\.com is not an active administrator/);

      expect(await ok(['domains', 'unshare', 'cli-shared.example.com', 'dev@example.com', '--as', 'boss@example.com'])).toBe('dev@example.com is no longer a member of cli-shared.example.com\n');
      await fails(['domains', 'unshare', 'cli-shared.example.com', 'dev@example.com'], /dev@example\.com is not a member of cli-shared\.example\.com/);
      expect(JSON.parse(await ok(['domains', 'members', 'cli-shared.example.com', '--json']))).toEqual([]);

      // The stores are closed with the last command: the activity, read straight from its Postgres.
      const db = await openPglite(path.join(dataDir, 'postgres'));
      try {
        const rows = await db.query<{ action: string; details: string; ip_address: string }>(sql`
          select a.action, a.details, a.ip_address from activity a join users u on u.id = a.user_id
          where u.email = 'boss@example.com' and a.action like 'domain.member%' order by a.id`);
        expect(rows.map((r) => [r.action, r.details, r.ip_address])).toEqual([
          ['domain.member_add', 'Shared domain cli-shared.example.com with dev@example.com as viewer', 'command line'],
          ['domain.member_remove', 'Removed dev@example.com (editor) from domain cli-shared.example.com', 'command line'],
        ]);
      } finally {
        await db.close();
      }
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
