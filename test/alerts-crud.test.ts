/**
 * Alert definitions (CONTRACT §5): validation, defaults, per-domain visibility (BOLA), the
 * alerts:read/create/update/delete permissions, activity, and PUT (beyond the specification).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../src/db/sql.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type TestApp } from './support/app.js';
import { activityOf } from './support/auth.js';
import { api, expectError, ISO_MS, makeActor, type Actor } from './support/users.js';

let t: TestApp;
let admin: string;
let owner: Actor;
let stranger: Actor;
let domainId: number;
let otherDomainId: number;

const valid = {
  name: 'Too many errors',
  condition: 'errorRate',
  operator: 'greaterThan',
  threshold: 0.05,
  duration: 300,
  notificationMethod: 'email',
  notificationTarget: 'OnCall@Example.com',
};

const alertsOf = (domain: number) => `/api/logs/domains/${domain}/alerts`;

async function newDomain(name: string, ownerId: number): Promise<number> {
  const res = await call(t.app, 'POST', '/api/domains', { token: admin, body: { name, ownerId } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.data.id;
}

beforeAll(async () => {
  t = await startTestApp();
  admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  owner = await makeActor(t.app, admin, 'user');
  stranger = await makeActor(t.app, admin, 'user');
  domainId = await newDomain('alerts.example.com', owner.id);
  otherDomainId = await newDomain('stranger.example.com', stranger.id);
});

afterAll(async () => {
  await t?.close();
});

describe('alert definitions', () => {
  it('creates with defaults, answers 201 with the fields of the specification (and the delivery outcome, beyond it), lists by id', async () => {
    const res = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: valid });
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual({
      id: expect.any(Number),
      ...valid,
      notificationTarget: 'oncall@example.com',
      enabled: true,
      state: 'ok',
      lastTriggeredAt: null,
      lastDeliveryError: null,
      lastDeliveredAt: null,
      createdAt: expect.stringMatching(ISO_MS),
    });
    const second = await api(t.app, 'POST', alertsOf(domainId), {
      token: owner.token,
      body: { ...valid, name: 'Slow', condition: 'averageResponseTime', threshold: 800, operator: 'greaterThanOrEqual', enabled: false, notificationMethod: 'webhook', notificationTarget: 'https://hooks.example.com/tailhouse?k=1' },
    });
    expect(second.status).toBe(201);
    const list = await api(t.app, 'GET', alertsOf(domainId), { token: owner.token });
    expect(list.status).toBe(200);
    expect(list.body.data.alerts.map((a: { id: number }) => a.id)).toEqual([res.body.data.id, second.body.data.id]);
    expect(list.body.data.alerts[1]).toMatchObject({ enabled: false, notificationMethod: 'webhook', threshold: 800 });
  });

  it.each([
    ['no body fields', {}, ['name', 'condition', 'operator', 'threshold', 'duration', 'notificationMethod', 'notificationTarget']],
    ['an unknown condition', { condition: 'errors' }, ['condition']],
    ['an unknown operator', { operator: '>' }, ['operator']],
    ['errorRate above 1', { threshold: 1.5 }, ['threshold']],
    ['a negative threshold', { condition: 'requestCount', threshold: -1 }, ['threshold']],
    ['a threshold that is a string', { threshold: '0.5' }, ['threshold']],
    ['a duration under 60 s', { duration: 59 }, ['duration']],
    ['a duration over a day', { duration: 86_401 }, ['duration']],
    ['a fractional duration', { duration: 90.5 }, ['duration']],
    ['an e-mail target that is no address', { notificationTarget: 'on call' }, ['notificationTarget']],
    ['a webhook over http', { notificationMethod: 'webhook', notificationTarget: 'http://hooks.example.com/x' }, ['notificationTarget']],
    ['a webhook with credentials', { notificationMethod: 'webhook', notificationTarget: 'https://u:p@hooks.example.com/x' }, ['notificationTarget']],
    ['an unknown method', { notificationMethod: 'sms' }, ['notificationMethod']],
    ['an empty name', { name: '   ' }, ['name']],
    ['a name with NUL', { name: 'a\u0000b' }, ['name']],
    ['enabled as a string', { enabled: 'yes' }, ['enabled']],
    ['an unknown field', { severity: 'high' }, ['severity']],
  ])('422 for %s', async (_, change, fields) => {
    const body = Object.keys(change).length === 0 ? {} : { ...valid, ...change };
    const res = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body });
    expectError(res, 422, 'Validation failed');
    expect(Object.keys(res.body.details).sort()).toEqual([...fields].sort());
  });

  it('the OpenAPI Alert schema lists the delivery outcome fields, marked as beyond the specification', async () => {
    const res = await call(t.app, 'GET', '/api/openapi.json');
    expect(res.status).toBe(200);
    const alert = res.body.components.schemas.Alert;
    for (const field of ['lastDeliveryError', 'lastDeliveredAt']) {
      expect(alert.required).toContain(field);
      expect(alert.properties[field].type).toEqual(['string', 'null']);
      expect(alert.properties[field].description).toMatch(/^Beyond the specification/);
    }
  });

  it('stores SQL metacharacters in names as text', async () => {
    const name = "x'); drop table alerts; --\\";
    const res = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: { ...valid, name } });
    expect(res.status).toBe(201);
    expect(res.body.data.name).toBe(name);
  });

  it('PUT changes any fields, checks the merged definition, and disables', async () => {
    const created = await api(t.app, 'POST', alertsOf(domainId), { token: admin, body: valid });
    const url = `${alertsOf(domainId)}/${created.body.data.id}`;
    const changed = await api(t.app, 'PUT', url, { token: admin, body: { enabled: false, duration: 600 } });
    expect(changed.status).toBe(200);
    expect(changed.body.data).toMatchObject({ enabled: false, duration: 600, name: valid.name, threshold: 0.05 });
    // Switching to webhook without a new target leaves an e-mail address as the webhook URL.
    const bad = await api(t.app, 'PUT', url, { token: admin, body: { notificationMethod: 'webhook' } });
    expectError(bad, 422, 'Validation failed');
    expect(Object.keys(bad.body.details)).toEqual(['notificationTarget']);
    // errorRate's range applies to a threshold changed alone.
    expectError(await api(t.app, 'PUT', url, { token: admin, body: { threshold: 2 } }), 422);
    const switched = await api(t.app, 'PUT', url, { token: admin, body: { condition: 'requestCount', threshold: 5000 } });
    expect(switched.body.data).toMatchObject({ condition: 'requestCount', threshold: 5000 });
    expectError(await api(t.app, 'PUT', url, { token: admin, body: { state: 'firing' } }), 422);
  });

  it('DELETE removes it; the id is then unknown', async () => {
    const created = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: valid });
    const url = `${alertsOf(domainId)}/${created.body.data.id}`;
    const res = await api(t.app, 'DELETE', url, { token: owner.token });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ success: true, message: 'Alert deleted' });
    expectError(await api(t.app, 'DELETE', url, { token: owner.token }), 404, 'Alert not found');
    expectError(await api(t.app, 'PUT', url, { token: admin, body: { enabled: true } }), 404, 'Alert not found');
  });

  it('records create, update and delete in the actor\'s activity', async () => {
    const created = await api(t.app, 'POST', alertsOf(domainId), { token: admin, body: { ...valid, name: 'Audited' } });
    const id = created.body.data.id;
    await api(t.app, 'PUT', `${alertsOf(domainId)}/${id}`, { token: admin, body: { enabled: false } });
    await api(t.app, 'DELETE', `${alertsOf(domainId)}/${id}`, { token: admin });
    const adminId = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).user.id;
    const mine = (await activityOf(t.app, admin, adminId)).filter((a) => a.resource === `domains/${domainId}/alerts/${id}`);
    expect(mine.map((a) => a.action).sort()).toEqual(['alert.create', 'alert.delete', 'alert.update']);
  });
});

describe('who may do what', () => {
  it('another owner\'s domain is 404 on every route, like an unknown one', async () => {
    const theirs = await api(t.app, 'POST', alertsOf(otherDomainId), { token: stranger.token, body: valid });
    const theirAlert = `${alertsOf(otherDomainId)}/${theirs.body.data.id}`;
    for (const [method, url, body] of [
      ['GET', alertsOf(otherDomainId), undefined],
      ['POST', alertsOf(otherDomainId), valid],
      ['PUT', theirAlert, { enabled: false }],
      ['DELETE', theirAlert, undefined],
      ['GET', alertsOf(999_999), undefined],
    ] as const) {
      expectError(await api(t.app, method, url, { token: owner.token, ...(body ? { body } : {}) }), 404, 'Domain not found');
    }
    // Their alert id under my domain is an unknown alert, not theirs.
    expectError(await api(t.app, 'DELETE', `${alertsOf(domainId)}/${theirs.body.data.id}`, { token: owner.token }), 404, 'Alert not found');
    const still = await api(t.app, 'GET', alertsOf(otherDomainId), { token: stranger.token });
    expect(still.body.data.alerts.map((a: { id: number }) => a.id)).toContain(theirs.body.data.id);
  });

  it('needs alerts:read, create, update and delete respectively (a new user has read, create, delete)', async () => {
    const created = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: valid });
    const url = `${alertsOf(domainId)}/${created.body.data.id}`;
    expectError(await api(t.app, 'PUT', url, { token: owner.token, body: { enabled: false } }), 403, 'Insufficient permissions');
    const revoke = await call(t.app, 'PUT', `/api/users/${owner.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'logs', actions: ['read'] }] } });
    expect(revoke.status).toBe(200);
    expectError(await api(t.app, 'GET', alertsOf(domainId), { token: owner.token }), 403);
    expectError(await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: valid }), 403);
    expectError(await api(t.app, 'DELETE', url, { token: owner.token }), 403);
    const grant = await call(t.app, 'PUT', `/api/users/${owner.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'alerts', actions: ['read', 'update'] }] } });
    expect(grant.status).toBe(200);
    expect((await api(t.app, 'PUT', url, { token: owner.token, body: { enabled: false } })).status).toBe(200);
  });

  it('401 without a token, before anything else', async () => {
    expectError(await api(t.app, 'GET', alertsOf(domainId)), 401, 'Authentication required');
    expectError(await api(t.app, 'POST', alertsOf(0), { body: {} }), 401);
  });

  it('422 for ids that are not positive whole numbers', async () => {
    expectError(await api(t.app, 'GET', '/api/logs/domains/abc/alerts', { token: admin }), 422);
    expectError(await api(t.app, 'DELETE', `${alertsOf(domainId)}/1.5`, { token: admin }), 422);
  });

  it('deleting the domain deletes its alerts', async () => {
    const doomed = await newDomain('doomed-alerts.example.com', owner.id);
    const created = await api(t.app, 'POST', alertsOf(doomed), { token: admin, body: valid });
    expect(created.status).toBe(201);
    expect((await api(t.app, 'DELETE', `/api/domains/${doomed}`, { token: admin })).status).toBe(200);
    const [row] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from alerts where domain_id = ${doomed}`);
    expect(row!.n).toBe(0);
  });
});
