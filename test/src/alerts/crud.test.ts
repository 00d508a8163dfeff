/**
 * Alert definitions (docs/reference/alerts.md): validation, defaults, per-domain visibility (BOLA), the
 * alerts:read/create/update/delete permissions, activity, and PUT (beyond the specification).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ALERTS_PER_DOMAIN } from '../../../src/alerts/limits.js';
import { createApp } from '../../../src/app.js';
import { sql } from '../../../core/db/sql.js';
import { PUBLIC_ADDRESSES, REFUSED_ADDRESSES } from '../../support/addresses.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, type TestApp } from '../../support/app.js';
import { activityOf, appWithAdmin } from '../../support/auth.js';
import { api, expectError, ISO_MS, makeActor, type Actor } from '../../support/users.js';
import { registerDomain } from '../../support/domains.js';

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

const newDomain = async (name: string, ownerId: number) => (await registerDomain(t.app, admin, { ownerId, name })).id;

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
  owner = await makeActor(t.app, admin, 'user');
  stranger = await makeActor(t.app, admin, 'user');
  domainId = await newDomain('alerts.example.com', owner.id);
  otherDomainId = await newDomain('stranger.example.com', stranger.id);
});

afterAll(() => t?.close());

describe('alert definitions', () => {
  it('creates with defaults, answers 201 with the fields of the specification (and the delivery outcome, beyond it), lists by id', async () => {
    const res = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: valid });
    expect(res.status).toBe(201);
    expect(res.body.data).toEqual({
      id: expect.any(Number),
      ...valid,
      notificationTarget: 'oncall@example.com',
      enabled: true,
      // A domain's alert is a rule whose scope is that domain (issue 30).
      domainId,
      scope: { domainIds: [domainId] },
      filters: [],
      createdBy: owner.id,
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
    // The conditions on the statistics' percentile and 4xx share.
    for (const [condition, threshold] of [['p95ResponseTime', 1500], ['clientErrorRate', 0.3]] as const) {
      const created = await api(t.app, 'POST', alertsOf(domainId), { token: owner.token, body: { ...valid, name: condition, condition, threshold } });
      expect(created.status, JSON.stringify(created.body)).toBe(201);
      expect(created.body.data).toMatchObject({ condition, threshold });
    }
  });

  it.each([
    ['no body fields', {}, ['name', 'condition', 'operator', 'threshold', 'duration', 'notificationMethod', 'notificationTarget']],
    ['an unknown condition', { condition: 'errors' }, ['condition']],
    ['an unknown operator', { operator: '>' }, ['operator']],
    ['errorRate above 1', { threshold: 1.5 }, ['threshold']],
    ['a negative threshold', { condition: 'requestCount', threshold: -1 }, ['threshold']],
    ['clientErrorRate above 1', { condition: 'clientErrorRate', threshold: 1.01 }, ['threshold']],
    ['p95ResponseTime over an hour', { condition: 'p95ResponseTime', threshold: 3_600_001 }, ['threshold']],
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

describe('abuse limits', () => {
  // A user of their own: earlier tests change the owner's permissions.
  let creator: Actor;
  let ownDomain: number;
  beforeAll(async () => {
    creator = await makeActor(t.app, admin, 'user');
    ownDomain = await newDomain(`abuse-${process.pid}.example.com`, creator.id);
  });

  it(`holds a domain to ${ALERTS_PER_DOMAIN} alerts under 60 concurrent creations (409 beyond), and has room again once one is deleted`, async () => {
    const crowded = await newDomain(`crowded-${process.pid}.example.com`, creator.id);
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) => api(t.app, 'POST', alertsOf(crowded), { token: creator.token, body: { ...valid, name: `Alert ${i}`, notificationTarget: `oncall-${i}@example.com` } })),
    );
    const created = answers.filter((a) => a.status === 201);
    expect(created).toHaveLength(ALERTS_PER_DOMAIN);
    const refused = answers.filter((a) => a.status !== 201);
    expect(refused).toHaveLength(60 - ALERTS_PER_DOMAIN);
    for (const r of refused) expectError(r, 409, `The domain already has ${ALERTS_PER_DOMAIN} alerts, the most a domain may have; delete one to add another`);
    const [row] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from alerts where domain_id = ${crowded}`);
    expect(row!.n).toBe(ALERTS_PER_DOMAIN);
    // Another domain is not held back by it.
    expect((await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: valid })).status).toBe(201);

    expect((await api(t.app, 'DELETE', `${alertsOf(crowded)}/${created[0]!.body.data.id}`, { token: creator.token })).status).toBe(200);
    expect((await api(t.app, 'POST', alertsOf(crowded), { token: creator.token, body: valid })).status).toBe(201);
    expectError(await api(t.app, 'POST', alertsOf(crowded), { token: creator.token, body: valid }), 409);
  });

  const webhook = (target: string) => ({ ...valid, notificationMethod: 'webhook', notificationTarget: target });
  const literalUrl = (address: string) => `https://${address.includes(':') ? `[${address}]` : address}:9/hook`;

  it.each(REFUSED_ADDRESSES)('refuses a webhook target on %s (%s) when the alert is created or its target changed (422)', async (address, range) => {
    const res = await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook(literalUrl(address)) });
    expectError(res, 422, 'Validation failed');
    expect(res.body.details).toEqual({ notificationTarget: `must reach a public address; ${new URL(literalUrl(address)).hostname} is not one (${range})` });

    const made = await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook('https://93.184.216.34/hook') });
    expect(made.status).toBe(201);
    const changed = await api(t.app, 'PUT', `${alertsOf(ownDomain)}/${made.body.data.id}`, { token: admin, body: { notificationTarget: literalUrl(address) } });
    expectError(changed, 422, 'Validation failed');
    expect(changed.body.details).toHaveProperty('notificationTarget');
    // An e-mail alert switched to the webhook method is checked too.
    const mail = await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: valid });
    const switched = await api(t.app, 'PUT', `${alertsOf(ownDomain)}/${mail.body.data.id}`, { token: admin, body: { notificationMethod: 'webhook', notificationTarget: literalUrl(address) } });
    expectError(switched, 422, 'Validation failed');
    for (const id of [made.body.data.id, mail.body.data.id]) expect((await api(t.app, 'DELETE', `${alertsOf(ownDomain)}/${id}`, { token: admin })).status).toBe(200);
  });

  it('WEBHOOK_ALLOW_NETWORKS: a target in a network the operator trusts is accepted, one outside it still refused', async () => {
    const trusting = createApp({ ...t.runtime, config: { ...t.runtime.config, webhookAllowNetworks: ['10.20.0.0/16', 'fd00:1::/64'] } });
    const made: number[] = [];
    for (const address of ['10.20.3.4', 'fd00:1::5', '::ffff:10.20.0.9']) {
      const res = await api(trusting, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook(literalUrl(address)) });
      expect(res.status, `${address}: ${JSON.stringify(res.body)}`).toBe(201);
      made.push(res.body.data.id);
      // The same target without the setting: refused.
      expectError(await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook(literalUrl(address)) }), 422, 'Validation failed');
    }
    for (const [address, range] of [['10.21.0.1', 'private'], ['127.0.0.1', 'loopback'], ['fd00:2::1', 'uniqueLocal']]) {
      const res = await api(trusting, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook(literalUrl(address!)) });
      expectError(res, 422, 'Validation failed');
      expect(res.body.details.notificationTarget).toContain(`(${range})`);
    }
    for (const id of made) expect((await api(t.app, 'DELETE', `${alertsOf(ownDomain)}/${id}`, { token: admin })).status).toBe(200);
  });

  it('refuses a host name that resolves to a non-public address now; accepts public addresses and names that do not resolve now', async () => {
    const local = await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook('https://localhost:8443/hook') });
    expectError(local, 422, 'Validation failed');
    expect(local.body.details.notificationTarget).toMatch(/^must reach a public address; localhost resolves to (127\.0\.0\.1 \(loopback\)|::1 \(loopback\))$/);

    const ids: number[] = [];
    for (const target of [...PUBLIC_ADDRESSES.map(literalUrl), 'https://hooks.example.com/services/T0/B0']) {
      const res = await api(t.app, 'POST', alertsOf(ownDomain), { token: creator.token, body: webhook(target) });
      expect(res.status, `${target}: ${JSON.stringify(res.body)}`).toBe(201);
      ids.push(res.body.data.id);
    }
    // A target stored before this check (or a name that resolves elsewhere since) does not stop other changes.
    await t.runtime.db.query(sql`update alerts set notification_target = 'https://127.0.0.1:9/hook' where id = ${ids[0]!}`);
    expect((await api(t.app, 'PUT', `${alertsOf(ownDomain)}/${ids[0]}`, { token: admin, body: { enabled: false } })).status).toBe(200);
    for (const id of ids) expect((await api(t.app, 'DELETE', `${alertsOf(ownDomain)}/${id}`, { token: admin })).status).toBe(200);
  });
});
