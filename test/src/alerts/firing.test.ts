/**
 * GET /api/logs/alerts/firing: the enabled alerts in state firing on every domain the caller
 * sees (the fleet page's column), never another owner's; alerts:read required.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../core/db/sql.js';
import { insertDomain } from '../../../src/domains/store.js';
import { call, createUserAndLogin, type TestApp } from '../../support/app.js';
import { appWithAdmin } from '../../support/auth.js';

let t: TestApp;
let admin: string;

beforeAll(async () => ({ t, admin } = await appWithAdmin()));
afterAll(() => t?.close());

const definition = (name: string, enabled = true) => ({ name, condition: 'errorRate', operator: 'greaterThan', threshold: 0.1, duration: 300, notificationMethod: 'email', notificationTarget: 'oncall@example.com', enabled });

describe('GET /api/logs/alerts/firing', () => {
  it("lists the firing enabled alerts of the caller's domains only, with their domain", async () => {
    const alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com' });
    const bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com' });
    const shop = await insertDomain(t.runtime.db, { name: 'shop.alice.example', ownerId: alice.id });
    const blog = await insertDomain(t.runtime.db, { name: 'blog.alice.example', ownerId: alice.id });
    const bobs = await insertDomain(t.runtime.db, { name: 'bob.example', ownerId: bob.id });
    const made: Record<string, number> = {};
    for (const [token, domain, name, enabled] of [
      [alice.token, shop.id, 'shop firing', true],
      [alice.token, shop.id, 'shop quiet', true],
      [alice.token, blog.id, 'blog firing but disabled', false],
      [bob.token, bobs.id, 'bob firing', true],
    ] as const) {
      const res = await call(t.app, 'POST', `/api/logs/domains/${domain}/alerts`, { token, body: definition(name, enabled) });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      made[name] = res.body.data.id;
    }
    // The evaluator's verdict, written as it writes it (a state per alert and domain).
    for (const [name, domain] of [['shop firing', shop.id], ['blog firing but disabled', blog.id], ['bob firing', bobs.id]] as const) {
      await t.runtime.db.query(sql`
        insert into alert_states (alert_id, domain_id, state, state_changed_at, last_triggered_at, notified_state, last_notified_at)
        values (${made[name]!}, ${domain}, 'firing', now(), now(), 'firing', now())`);
    }

    const mine = await call(t.app, 'GET', '/api/logs/alerts/firing', { token: alice.token });
    expect(mine.status).toBe(200);
    expect(mine.body.data.alerts).toEqual([expect.objectContaining({ id: made['shop firing'], alertId: made['shop firing'], name: 'shop firing', state: 'firing', domainId: shop.id, domain: shop.name })]);
    const all = await call(t.app, 'GET', '/api/logs/alerts/firing', { token: admin });
    expect(all.body.data.alerts.map((a: any) => a.name)).toEqual(['shop firing', 'bob firing']);

    // Without alerts:read: 403; without a token: 401.
    const nora = await createUserAndLogin(t.app, admin, { email: 'nora@example.com' });
    expect((await call(t.app, 'PUT', `/api/users/${nora.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'logs', actions: ['read'] }] } })).status).toBe(200);
    expect((await call(t.app, 'GET', '/api/logs/alerts/firing', { token: nora.token })).status).toBe(403);
    expect((await call(t.app, 'GET', '/api/logs/alerts/firing', {})).status).toBe(401);
  });
});
