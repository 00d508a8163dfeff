import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Activity } from '../../../src/activity/store.js';
import { ADMIN_PASSWORD, type TestApp } from '../../support/app.js';
import { appWithAdmin } from '../../support/auth.js';
import {
  api,
  expectForbidden,
  expectInvalid,
  expectNotFound,
  ISO_MS,
  makeActor,
  makeUser,
  rememberSecret,
  uniquePassword,
  uniqueTag,
  type Actor,
} from '../../support/users.js';

let t: TestApp;
let admin: string;

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
  rememberSecret(ADMIN_PASSWORD);
});
afterAll(async () => {
  await t?.close();
});

const ACTIVITY_FIELDS = ['action', 'details', 'id', 'ipAddress', 'resource', 'timestamp', 'userAgent'];

/** A user's activity page as the main admin sees it. */
async function activity(userId: number, query = '', token = admin): Promise<{ activities: Activity[]; pagination: any }> {
  const res = await api(t.app, 'GET', `/api/users/${userId}/activity${query ? `?${query}` : ''}`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.success).toBe(true);
  for (const entry of res.body.data.activities) {
    expect(Object.keys(entry).sort()).toEqual(ACTIVITY_FIELDS);
    expect(Number.isInteger(entry.id)).toBe(true);
    expect(entry.timestamp).toMatch(ISO_MS);
  }
  return res.body.data;
}

const q = (params: Record<string, string | number>) => new URLSearchParams(Object.entries(params).map(([k, v]) => [k, String(v)])).toString();

let ipCounter = 0;
/** A client address and user agent no other test uses, to tell this test's entries apart. */
function client(): { ip: string; headers: Record<string, string>; userAgent: string } {
  ipCounter += 1;
  const userAgent = `TailhouseTest/${ipCounter}.0 (${uniqueTag('agent')}; "quoted" ü)`;
  return { ip: `203.0.113.${ipCounter}`, headers: { 'user-agent': userAgent }, userAgent };
}

/** The one entry of the actor's activity with this action and resource. */
async function entryFor(actorId: number, action: string, resource: string): Promise<Activity> {
  const { activities } = await activity(actorId, 'limit=100');
  const matching = activities.filter((a) => a.action === action && a.resource === resource);
  expect(matching, `${action} ${resource} in ${JSON.stringify(activities.map((a) => `${a.action} ${a.resource}`))}`).toHaveLength(1);
  return matching[0]!;
}

describe('GET /api/users/:id/activity records each change for the acting user', () => {
  let actor: Actor;
  beforeAll(async () => {
    actor = await makeActor(t.app, admin, 'admin');
  });

  it('user.create, with the client address from X-Forwarded-For and the user agent', async () => {
    const c = client();
    const before = Date.now();
    const res = await api(t.app, 'POST', '/api/users', { token: actor.token, ip: c.ip, headers: c.headers, body: { email: `${uniqueTag('act')}@example.com`, password: uniquePassword() } });
    expect(res.status).toBe(201);
    const id = res.body.data.id;
    const entry = await entryFor(actor.id, 'user.create', `users/${id}`);
    expect(entry.ipAddress).toBe(c.ip);
    expect(entry.userAgent).toBe(c.userAgent);
    expect(entry.details.length).toBeGreaterThan(0);
    expect(Date.parse(entry.timestamp)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(entry.timestamp)).toBeLessThanOrEqual(Date.now() + 1000);
    const target = await activity(id);
    expect(target.activities).toEqual([]);
    expect(target.pagination).toEqual({ page: 1, limit: 20, total: 0, pages: 0 });
  });

  it('user.update, on the actor and not on the target', async () => {
    const target = await makeActor(t.app, admin, 'user');
    const c = client();
    expect((await api(t.app, 'PUT', `/api/users/${target.id}`, { token: actor.token, ip: c.ip, headers: c.headers, body: { name: 'Updated' } })).status).toBe(200);
    const entry = await entryFor(actor.id, 'user.update', `users/${target.id}`);
    expect(entry).toMatchObject({ ipAddress: c.ip, userAgent: c.userAgent });
    const targetLog = await activity(target.id, 'limit=100');
    expect(targetLog.activities.map((a) => a.action)).not.toContain('user.update');
  });

  it('user.update of oneself, by a plain user', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const c = client();
    expect((await api(t.app, 'PUT', `/api/users/${me.id}`, { token: me.token, ip: c.ip, headers: c.headers, body: { name: 'Me Myself' } })).status).toBe(200);
    const own = await activity(me.id, '', me.token);
    expect(own.activities[0]).toMatchObject({ action: 'user.update', resource: `users/${me.id}`, ipAddress: c.ip, userAgent: c.userAgent });
  });

  it('user.delete', async () => {
    const target = await makeUser(t.app, admin);
    const c = client();
    expect((await api(t.app, 'DELETE', `/api/users/${target.id}`, { token: actor.token, ip: c.ip, headers: c.headers })).status).toBe(200);
    const entry = await entryFor(actor.id, 'user.delete', `users/${target.id}`);
    expect(entry).toMatchObject({ ipAddress: c.ip, userAgent: c.userAgent });
    expect(entry.details).toContain(target.email);
  });

  it('password.change, of oneself and by an admin for another user', async () => {
    const me = await makeActor(t.app, admin, 'user');
    const c1 = client();
    const mine = uniquePassword();
    const own = await api(t.app, 'PUT', `/api/users/${me.id}/password`, {
      token: me.token,
      ip: c1.ip,
      headers: c1.headers,
      body: { currentPassword: me.password, newPassword: mine, confirmPassword: mine },
    });
    expect(own.status).toBe(200);
    expect(await entryFor(me.id, 'password.change', `users/${me.id}`)).toMatchObject({ ipAddress: c1.ip, userAgent: c1.userAgent });

    const c2 = client();
    const theirs = uniquePassword();
    const reset = await api(t.app, 'PUT', `/api/users/${me.id}/password`, { token: actor.token, ip: c2.ip, headers: c2.headers, body: { newPassword: theirs, confirmPassword: theirs } });
    expect(reset.status).toBe(200);
    expect(await entryFor(actor.id, 'password.change', `users/${me.id}`)).toMatchObject({ ipAddress: c2.ip, userAgent: c2.userAgent });
    const meLog = await activity(me.id, 'limit=100');
    expect(meLog.activities.filter((a) => a.action === 'password.change')).toHaveLength(1);
  });

  it('permissions.update', async () => {
    const target = await makeUser(t.app, admin);
    const c = client();
    const res = await api(t.app, 'PUT', `/api/users/${target.id}/permissions`, {
      token: actor.token,
      ip: c.ip,
      headers: c.headers,
      body: { permissions: [{ resource: 'domains', actions: ['read'] }] },
    });
    expect(res.status).toBe(200);
    const entry = await entryFor(actor.id, 'permissions.update', `users/${target.id}/permissions`);
    expect(entry).toMatchObject({ ipAddress: c.ip, userAgent: c.userAgent });
    expect(entry.details).toContain('domains');
  });

  it('domain.create', async () => {
    const c = client();
    const res = await api(t.app, 'POST', '/api/domains', { token: actor.token, ip: c.ip, headers: c.headers, body: { name: `${uniqueTag('site')}.example.com` } });
    expect(res.status).toBe(201);
    const entry = await entryFor(actor.id, 'domain.create', `domains/${res.body.data.id}`);
    expect(entry).toMatchObject({ ipAddress: c.ip, userAgent: c.userAgent });
    expect(entry.details).toContain(res.body.data.name);
  });

  it('records IPv6 addresses, and the last X-Forwarded-For entry (the one the trusted proxy saw)', async () => {
    const target = await makeUser(t.app, admin);
    const c = client();
    await api(t.app, 'PUT', `/api/users/${target.id}`, { token: actor.token, ip: '2001:db8::7', headers: c.headers, body: { name: 'Six' } });
    await api(t.app, 'PUT', `/api/users/${target.id}`, { token: actor.token, headers: { ...c.headers, 'x-forwarded-for': '10.9.9.9, 192.0.2.44' }, body: { name: 'Four' } });
    const { activities } = await activity(actor.id, 'limit=2');
    expect(activities.map((a) => [a.action, a.resource, a.ipAddress])).toEqual([
      ['user.update', `users/${target.id}`, '192.0.2.44'],
      ['user.update', `users/${target.id}`, '2001:db8::7'],
    ]);
  });

  it('records nothing for refused requests', async () => {
    const plain = await makeActor(t.app, admin, 'user');
    const other = await makeUser(t.app, admin);
    const before = await activity(plain.id, 'limit=100');
    await api(t.app, 'PUT', `/api/users/${other.id}`, { token: plain.token, body: { name: 'Nope' } });
    await api(t.app, 'DELETE', `/api/users/${other.id}`, { token: plain.token });
    await api(t.app, 'PUT', `/api/users/${plain.id}`, { token: plain.token, body: { role: 'admin' } });
    await api(t.app, 'PUT', `/api/users/${plain.id}`, { token: plain.token, body: { email: 'invalid' } });
    const after = await activity(plain.id, 'limit=100');
    expect(after.activities).toEqual(before.activities);
  });
});

describe('GET /api/users/:id/activity ordering, filtering and paging', () => {
  /** An actor with a known history: its login, then `count` updates of a target, oldest first. */
  async function history(count: number): Promise<{ actor: Actor; all: Activity[] }> {
    const actor = await makeActor(t.app, admin, 'admin');
    const target = await makeUser(t.app, admin);
    for (let i = 0; i < count; i++) {
      const res = await api(t.app, 'PUT', `/api/users/${target.id}`, { token: actor.token, body: { name: `Step ${i}` } });
      expect(res.status).toBe(200);
    }
    const { activities, pagination } = await activity(actor.id, 'limit=100');
    expect(pagination.total).toBe(count + 1);
    return { actor, all: activities };
  }

  it('lists newest first, ties by higher id first', async () => {
    const actor = await makeActor(t.app, admin, 'admin');
    const target = await makeUser(t.app, admin);
    const steps: [string, string, Record<string, unknown>][] = [
      ['PUT', `/api/users/${target.id}`, { name: 'One' }],
      ['PUT', `/api/users/${target.id}/permissions`, { permissions: [] }],
      ['PUT', `/api/users/${target.id}/password`, { newPassword: 'long-enough-4', confirmPassword: 'long-enough-4' }],
      ['DELETE', `/api/users/${target.id}`, {}],
    ];
    for (const [method, url, body] of steps) {
      const res = await api(t.app, method, url, { token: actor.token, ...(method === 'DELETE' ? {} : { body }) });
      expect(res.status).toBe(200);
    }
    const { activities } = await activity(actor.id);
    expect(activities.map((a) => a.action)).toEqual(['user.delete', 'password.change', 'permissions.update', 'user.update', 'login.succeeded']);
    for (let i = 1; i < activities.length; i++) {
      expect(activities[i - 1]!.id).toBeGreaterThan(activities[i]!.id);
      expect(Date.parse(activities[i - 1]!.timestamp)).toBeGreaterThanOrEqual(Date.parse(activities[i]!.timestamp));
    }
  });

  it('pages with page and limit; a page past the end is empty with the right total', async () => {
    const { actor, all } = await history(6);
    const page = (p: number, limit: number) => activity(actor.id, q({ page: p, limit }));
    const p1 = await page(1, 3);
    expect(p1.activities).toEqual(all.slice(0, 3));
    expect(p1.pagination).toEqual({ page: 1, limit: 3, total: 7, pages: 3 });
    const p2 = await page(2, 3);
    expect(p2.activities).toEqual(all.slice(3, 6));
    const p3 = await page(3, 3);
    expect(p3.activities).toEqual(all.slice(6));
    expect(p3.pagination).toEqual({ page: 3, limit: 3, total: 7, pages: 3 });
    const p4 = await page(4, 3);
    expect(p4.activities).toEqual([]);
    expect(p4.pagination).toEqual({ page: 4, limit: 3, total: 7, pages: 3 });
    const defaults = await activity(actor.id);
    expect(defaults.pagination).toEqual({ page: 1, limit: 20, total: 7, pages: 1 });
    expect(defaults.activities).toEqual(all);
  });

  it('filters by startDate and endDate, including both ends', async () => {
    const { actor, all } = await history(5);
    const middle = all[2]!;
    const T = middle.timestamp;
    const at = (ts: string) => all.filter((a) => a.timestamp === ts);
    const exact = await activity(actor.id, q({ startDate: T, endDate: T }));
    expect(exact.activities).toEqual(at(T));
    expect(exact.activities.map((a) => a.id)).toContain(middle.id);
    expect(exact.pagination.total).toBe(at(T).length);

    const from = await activity(actor.id, q({ startDate: T, limit: 100 }));
    expect(from.activities).toEqual(all.filter((a) => Date.parse(a.timestamp) >= Date.parse(T)));
    const until = await activity(actor.id, q({ endDate: T, limit: 100 }));
    expect(until.activities).toEqual(all.filter((a) => Date.parse(a.timestamp) <= Date.parse(T)));

    const justBefore = new Date(Date.parse(T) - 1).toISOString();
    const justAfter = new Date(Date.parse(T) + 1).toISOString();
    expect((await activity(actor.id, q({ startDate: justAfter, limit: 100 }))).activities.map((a) => a.id)).not.toContain(middle.id);
    expect((await activity(actor.id, q({ endDate: justBefore, limit: 100 }))).activities.map((a) => a.id)).not.toContain(middle.id);
    expect((await activity(actor.id, q({ startDate: justBefore, endDate: justAfter }))).activities.map((a) => a.id)).toContain(middle.id);
  });

  it('accepts other ISO 8601 forms of the same instant: an offset, and no milliseconds', async () => {
    const { actor, all } = await history(2);
    const entry = all[0]!;
    const ms = Date.parse(entry.timestamp);
    const shifted = new Date(ms + 330 * 60_000).toISOString().replace('Z', '+05:30');
    const res = await activity(actor.id, q({ startDate: shifted, endDate: shifted }));
    expect(res.activities.map((a) => a.id)).toContain(entry.id);
    const seconds = new Date(Math.floor(ms / 1000) * 1000).toISOString().replace('.000Z', 'Z');
    const wide = await activity(actor.id, q({ startDate: seconds, endDate: new Date(Math.floor(ms / 1000) * 1000 + 1000).toISOString().replace('.000Z', 'Z') }));
    expect(wide.activities.map((a) => a.id)).toContain(entry.id);
  });

  it('treats a date-only endDate as the whole of that day, and a date-only startDate as its start', async () => {
    const { actor, all } = await history(3);
    const newest = all[0]!;
    const day = newest.timestamp.slice(0, 10);
    const sameDay = all.filter((a) => a.timestamp.startsWith(day));
    const byEnd = await activity(actor.id, q({ endDate: day, limit: 100 }));
    expect(byEnd.activities).toEqual(all.filter((a) => a.timestamp.slice(0, 10) <= day));
    expect(byEnd.activities.map((a) => a.id)).toContain(newest.id);
    const both = await activity(actor.id, q({ startDate: day, endDate: day, limit: 100 }));
    expect(both.activities).toEqual(sameDay);
    const dayMs = Date.parse(`${day}T00:00:00.000Z`);
    const previous = new Date(dayMs - 86_400_000).toISOString().slice(0, 10);
    const next = new Date(dayMs + 86_400_000).toISOString().slice(0, 10);
    expect((await activity(actor.id, q({ endDate: previous }))).activities.map((a) => a.id)).not.toContain(newest.id);
    const fromNext = await activity(actor.id, q({ startDate: next }));
    expect(fromNext.activities).toEqual([]);
    expect(fromNext.pagination).toEqual({ page: 1, limit: 20, total: 0, pages: 0 });
  });

  it('combines a date range with paging', async () => {
    const { actor, all } = await history(4);
    const start = all[all.length - 1]!.timestamp;
    const end = all[0]!.timestamp;
    const res = await activity(actor.id, q({ startDate: start, endDate: end, limit: 2, page: 2 }));
    expect(res.pagination).toEqual({ page: 2, limit: 2, total: 5, pages: 3 });
    expect(res.activities).toEqual(all.slice(2, 4));
  });

  it.each([
    ['startDate', 'yesterday'],
    ['startDate', '2026-13-01'],
    ['startDate', '2026-02-30'],
    ['endDate', '2026-01-01T25:00:00Z'],
    ['endDate', '21/11/2026'],
    ['endDate', ''],
    ['startDate', "2026-01-01' OR '1'='1"],
  ])('answers 422 on %s for the unparsable date %j', async (field, value) => {
    const actor = await makeUser(t.app, admin);
    expectInvalid(await api(t.app, 'GET', `/api/users/${actor.id}/activity?${q({ [field]: value })}`, { token: admin }), field);
  });

  it('answers 422 on endDate when it is before startDate', async () => {
    const actor = await makeUser(t.app, admin);
    const res = await api(t.app, 'GET', `/api/users/${actor.id}/activity?${q({ startDate: '2026-11-21T10:00:00.001Z', endDate: '2026-11-21T10:00:00.000Z' })}`, { token: admin });
    expectInvalid(res, 'endDate');
    const days = await api(t.app, 'GET', `/api/users/${actor.id}/activity?${q({ startDate: '2026-11-22', endDate: '2026-11-21' })}`, { token: admin });
    expectInvalid(days, 'endDate');
    const same = await api(t.app, 'GET', `/api/users/${actor.id}/activity?${q({ startDate: '2026-11-21', endDate: '2026-11-21' })}`, { token: admin });
    expect(same.status).toBe(200);
  });

  it.each(['limit=0', 'limit=101', 'page=0', 'page=x'])('answers 422 for %s', async (query) => {
    const actor = await makeUser(t.app, admin);
    expectInvalid(await api(t.app, 'GET', `/api/users/${actor.id}/activity?${query}`, { token: admin }), query.split('=')[0]!);
  });

  it('answers 404 to an admin for an unknown id, and 403 to a plain user for another user', async () => {
    expectNotFound(await api(t.app, 'GET', '/api/users/987654/activity', { token: admin }));
    const plain = await makeActor(t.app, admin, 'user');
    const other = await makeUser(t.app, admin);
    expectForbidden(await api(t.app, 'GET', `/api/users/${other.id}/activity`, { token: plain.token }));
    expectForbidden(await api(t.app, 'GET', '/api/users/987654/activity', { token: plain.token }));
  });
});
