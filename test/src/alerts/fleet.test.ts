/**
 * On-call at a fleet's scale (issue 30): a rule over every domain a user sees, one notification
 * per target per incident (e-mail and webhook), silences (fixed and weekly), history, any metric
 * with filters, requestChange, and the hostile side: other users' domains, bad bodies, caps.
 * Logs go through the real import path; the evaluator runs on a virtual clock.
 */
import http from 'node:http';
import type net from 'node:net';
import type { ParsedMail } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GROUP_WAIT_MS, type AlertEvaluator, type AlertEvaluatorOptions } from '../../../src/alerts/evaluator.js';
import { RULES_PER_USER, SILENCES_PER_USER } from '../../../src/alerts/limits.js';
import { postOnce, type WebhookPost } from '../../../src/alerts/webhook-post.js';
import { createLogger } from '../../../core/log.js';
import { call, createUserAndLogin, login, type TestApp } from '../../support/app.js';
import { evaluatorOf } from '../../support/alerts.js';
import { HOST_FORMAT, importText, newDomain, timeLocal } from '../../support/ingest.js';
import { startSmtpSink, type SmtpSink } from '../../support/smtp-sink.js';
import { uniqueTag } from '../../support/users.js';
import { appWithAdmin } from '../../support/auth.js';

const INTERVAL = 30_000;
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

let t: TestApp;
let sink: SmtpSink;
let admin: string;
let now = Math.floor(Date.now() / INTERVAL) * INTERVAL;

beforeAll(async () => {
  sink = await startSmtpSink();
  ({ t, admin } = await appWithAdmin({ SMTP_URL: sink.url }));
});

afterAll(async () => {
  await t?.close();
  await sink?.close();
});

/** A user with the default permissions (alerts among them) and `count` domains of its own. */
async function userWithDomains(count: number): Promise<{ id: number; token: string; domains: { id: number; name: string }[] }> {
  const email = `${uniqueTag('oncall-user')}@example.com`;
  const user = await createUserAndLogin(t.app, admin, { email });
  // On-call staff: the default permissions plus alerts:update, which silences need.
  const granted = await call(t.app, 'PUT', `/api/users/${user.id}/permissions`, {
    token: admin,
    body: { permissions: [{ resource: 'logs', actions: ['read'] }, { resource: 'alerts', actions: ['read', 'create', 'update', 'delete'] }] },
  });
  expect(granted.status, JSON.stringify(granted.body)).toBe(200);
  user.token = (await login(t.app, email, user.password)).accessToken;
  const domains = [];
  for (let i = 0; i < count; i++) domains.push(await newDomain(t.runtime.db, 'fleet', user.id));
  return { ...user, domains };
}

/** `count` lines per domain, `ago` seconds before the virtual clock, in one file with $host (one import). */
async function ingest(domains: { name: string }[], count: number, status: number, options: { ago?: number; path?: string } = {}): Promise<void> {
  const at = now - (options.ago ?? 1) * 1000;
  const batch = uniqueTag('req');
  const lines = domains.flatMap((d) =>
    Array.from({ length: count }, (_, i) => `${d.name} 10.9.${i >> 8}.${i & 255} - - [${timeLocal(at)}] "GET ${options.path ?? `/${batch}`}/${i} HTTP/1.1" ${status} 10 "-" "agent" 0.010`),
  );
  const summary = await importText(t, '', `${lines.join('\n')}\n`, { domain: null, format: HOST_FORMAT });
  expect(summary).toMatchObject({ inserted: lines.length, rejected: 0 });
}

const evaluator = (options: Partial<AlertEvaluatorOptions> = {}): AlertEvaluator =>
  evaluatorOf(t, { log, baseUrl: 'https://tailhouse.example.com', intervalMs: INTERVAL, now: () => now, ...options });

/** A round one interval on, then the deliveries due once the group wait is over. */
async function round(ev: AlertEvaluator) {
  now += INTERVAL;
  const result = await ev.evaluateOnce();
  expect(result.ran, JSON.stringify(result)).toBe(true);
  await ev.deliverDue(now + GROUP_WAIT_MS);
  return result;
}

const mailsTo = (to: string): ParsedMail[] => sink.messages.filter((m) => m.to && !Array.isArray(m.to) && m.to.value[0]?.address === to);

async function postRule(token: string, body: Record<string, unknown>): Promise<number> {
  const res = await call(t.app, 'POST', '/api/logs/alerts', { token, body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body.data.id;
}

const errorRule = (target: string, fields: Record<string, unknown> = {}) => ({
  name: 'Fleet 5xx',
  condition: 'errorRate',
  operator: 'greaterThan',
  threshold: 0.05,
  duration: 60,
  notificationMethod: 'email',
  notificationTarget: target,
  scope: { domains: 'all' },
  ...fields,
});

describe('an incident over 60 domains under one rule', () => {
  it('one firing e-mail naming all 60, one resolved e-mail; with 20 silenced, one e-mail naming the other 40; nothing about domains the rule\'s creator does not see', async () => {
    const owner = await userWithDomains(60);
    const stranger = await newDomain(t.runtime.db, 'not-theirs');
    const target = `${uniqueTag('pager')}@example.com`;
    const ruleId = await postRule(owner.token, errorRule(target));
    const ev = evaluator();

    await ingest([...owner.domains, stranger], 20, 503);
    const fired = await round(ev);
    expect(fired).toMatchObject({ notifications: { firing: 60, targets: 1 } });
    let mails = mailsTo(target);
    expect(mails).toHaveLength(1);
    for (const d of owner.domains) expect(mails[0]!.text).toContain(d.name);
    expect(mails[0]!.text).not.toContain(stranger.name);
    expect(mails[0]!.subject).toMatch(/FIRING/);

    // The rule's answer: every covered domain firing, with its value.
    const rule = await call(t.app, 'GET', `/api/logs/alerts/${ruleId}`, { token: owner.token });
    expect(rule.status).toBe(200);
    expect(rule.body.data.domains).toHaveLength(60);
    expect(rule.body.data.domains.every((d: { state: string; value: number }) => d.state === 'firing' && d.value === 1)).toBe(true);
    const firing = await call(t.app, 'GET', '/api/logs/alerts/firing', { token: owner.token });
    expect(firing.body.data.alerts.filter((a: { alertId: number }) => a.alertId === ruleId)).toHaveLength(60);

    // The 5xx leave the window; the rule resolves after its duration, in one e-mail.
    now += 120_000;
    await round(ev);
    mails = mailsTo(target);
    expect(mails).toHaveLength(2);
    expect(mails[1]!.subject).toMatch(/RESOLVED/);
    for (const d of owner.domains) expect(mails[1]!.text).toContain(d.name);

    // Twenty domains in maintenance: the next incident names the other forty.
    const silenced = owner.domains.slice(0, 20);
    const silence = await call(t.app, 'POST', '/api/logs/silences', {
      token: owner.token,
      body: { domainIds: silenced.map((d) => d.id), startsAt: new Date(Math.min(now, Date.now()) - 60_000).toISOString(), endsAt: new Date(now + 3_600_000).toISOString(), comment: 'PHP upgrade' },
    });
    expect(silence.status, JSON.stringify(silence.body)).toBe(201);
    await ingest(owner.domains, 20, 500);
    const again = await round(ev);
    expect(again).toMatchObject({ notifications: { firing: 40, targets: 1 }, silenced: 20 });
    mails = mailsTo(target);
    expect(mails).toHaveLength(3);
    for (const d of owner.domains.slice(20)) expect(mails[2]!.text).toContain(d.name);
    for (const d of silenced) expect(mails[2]!.text).not.toContain(d.name);

    // Evaluation goes on under the silence: the state shows, with the silence's id.
    const state = await call(t.app, 'GET', `/api/logs/alerts/${ruleId}`, { token: owner.token });
    const first = state.body.data.domains.find((d: { domainId: number }) => d.domainId === silenced[0]!.id);
    expect(first).toMatchObject({ state: 'firing', silencedBy: silence.body.data.id });

    // History: the domain's changes, newest first, the silenced one marked.
    const history = await call(t.app, 'GET', `/api/logs/domains/${silenced[0]!.id}/alerts/history`, { token: owner.token });
    expect(history.status).toBe(200);
    expect(history.body.data.entries.map((e: { from: string; to: string; notified: boolean; silencedBy: number | null }) => [e.from, e.to, e.notified, e.silencedBy])).toEqual([
      ['ok', 'firing', false, silence.body.data.id],
      ['firing', 'ok', true, null],
      ['ok', 'firing', true, null],
    ]);

    // The silence ends while the 20 still fire: one notification names them now.
    await ingest(silenced, 20, 500);
    expect((await call(t.app, 'DELETE', `/api/logs/silences/${silence.body.data.id}`, { token: owner.token })).status).toBe(200);
    const after = await round(ev);
    expect(after).toMatchObject({ notifications: { firing: 20, targets: 1 } });
    mails = mailsTo(target);
    expect(mails).toHaveLength(4);
    for (const d of silenced) expect(mails[3]!.text).toContain(d.name);
    expect((await call(t.app, 'DELETE', `/api/logs/alerts/${ruleId}`, { token: owner.token })).status).toBe(200);
  });

  it('the same incident to a webhook: one POST whose alerts name every domain, with a text summary; with 20 silenced, the other 40', async () => {
    const received: { headers: http.IncomingHttpHeaders; body: any }[] = [];
    const server = http.createServer((req, res) => {
      let text = '';
      req.on('data', (c: Buffer) => (text += c.toString()));
      req.on('end', () => {
        received.push({ headers: req.headers, body: JSON.parse(text) });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const origin = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    const viaLocal: WebhookPost = (url, request) => postOnce(new URL(`${origin}${url.pathname}${url.search}`), request);
    try {
      const owner = await userWithDomains(60);
      const ruleId = await postRule(owner.token, errorRule('https://chat.example.test/hooks/abc', { notificationMethod: 'webhook' }));
      const ev = evaluator({ delivery: { post: viaLocal } });
      await ingest(owner.domains, 20, 502);
      await round(ev);
      expect(received).toHaveLength(1);
      const body = received[0]!.body;
      expect(body).toMatchObject({ status: 'firing', groupKey: expect.any(String), text: expect.any(String) });
      expect(body.alerts).toHaveLength(60);
      expect(new Set(body.alerts.map((a: { domain: string }) => a.domain))).toEqual(new Set(owner.domains.map((d) => d.name)));
      expect(body.alerts[0]).toMatchObject({ status: 'firing', alertId: ruleId, name: 'Fleet 5xx', condition: 'errorRate', value: 1, threshold: 0.05, endsAt: null });
      expect(body.alerts[0].dashboardUrl).toMatch(/^https:\/\/tailhouse\.example\.com\/domains\/\d+\?/);
      expect(received[0]!.headers['x-tailhouse-event']).toBe('firing');
      now += 120_000;
      await round(ev);
      expect(received).toHaveLength(2);
      expect(received[1]!.body).toMatchObject({ status: 'resolved', groupKey: body.groupKey });
      expect(received[1]!.body.alerts.every((a: { status: string; endsAt: string | null }) => a.status === 'resolved' && a.endsAt !== null)).toBe(true);
      const silenced = owner.domains.slice(0, 20);
      const silence = await call(t.app, 'POST', '/api/logs/silences', {
        token: owner.token,
        body: { domainIds: silenced.map((d) => d.id), startsAt: new Date(Math.min(now, Date.now()) - 60_000).toISOString(), endsAt: new Date(now + 3_600_000).toISOString(), comment: 'maintenance' },
      });
      expect(silence.status).toBe(201);
      await ingest(owner.domains, 20, 502);
      await round(ev);
      expect(received).toHaveLength(3);
      expect(received[2]!.body.alerts.map((a: { domain: string }) => a.domain).sort()).toEqual(owner.domains.slice(20).map((d) => d.name).sort());
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('scope', () => {
  it('a domain handed to another owner leaves the rule at the next round: its state is forgotten and later notifications do not name it', async () => {
    const owner = await userWithDomains(2);
    const [kept, handed] = owner.domains as [{ id: number; name: string }, { id: number; name: string }];
    const target = `${uniqueTag('handover')}@example.com`;
    const ruleId = await postRule(owner.token, errorRule(target));
    const ev = evaluator();
    await ingest(owner.domains, 20, 500);
    await round(ev);
    expect(mailsTo(target)).toHaveLength(1);
    const other = await userWithDomains(0);
    expect((await call(t.app, 'PUT', `/api/domains/${handed.id}`, { token: admin, body: { ownerId: other.id } })).status).toBe(200);
    now += 120_000;
    await round(ev);
    // Only the domain still covered resolves; the handed-over one is no longer the rule's.
    const mails = mailsTo(target);
    expect(mails).toHaveLength(2);
    expect(mails[1]!.text).toContain(kept.name);
    expect(mails[1]!.text).not.toContain(handed.name);
    const rule = await call(t.app, 'GET', `/api/logs/alerts/${ruleId}`, { token: admin });
    expect(rule.body.data.domains.map((d: { domainId: number }) => d.domainId)).toEqual([kept.id]);
    const firing = await call(t.app, 'GET', '/api/logs/alerts/firing', { token: admin });
    expect(firing.body.data.alerts.filter((a: { alertId: number }) => a.alertId === ruleId)).toEqual([]);
  });
});

describe('conditions', () => {
  it('requestChange: traffic a week ago and none now fires "dropped by more than 70 %"; the same traffic does not', async () => {
    const owner = await userWithDomains(2);
    const [quiet, steady] = owner.domains as [{ id: number; name: string }, { id: number; name: string }];
    const target = `${uniqueTag('drop')}@example.com`;
    const ruleId = await postRule(owner.token, errorRule(target, { name: 'Traffic gone', condition: 'requestChange', operator: 'lessThan', threshold: -0.7, duration: 300 }));
    await ingest([quiet, steady], 30, 200, { ago: 7 * 86_400 + 60 });
    await ingest([steady], 30, 200, { ago: 60 });
    const ev = evaluator();
    await round(ev);
    const rule = await call(t.app, 'GET', `/api/logs/alerts/${ruleId}`, { token: owner.token });
    expect(rule.body.data.domains).toEqual([
      expect.objectContaining({ domainId: quiet.id, state: 'firing', value: -1 }),
      expect.objectContaining({ domainId: steady.id, state: 'ok', value: 0 }),
    ]);
    const mails = mailsTo(target);
    expect(mails).toHaveLength(1);
    expect(mails[0]!.text).toContain(quiet.name);
    expect(mails[0]!.text).not.toContain(steady.name);
  });

  it('a path filter: 5xx on /checkout fires the rule, 5xx elsewhere does not', async () => {
    const owner = await userWithDomains(2);
    const [shop, blog] = owner.domains as [{ id: number; name: string }, { id: number; name: string }];
    const target = `${uniqueTag('checkout')}@example.com`;
    const ruleId = await postRule(owner.token, errorRule(target, { name: 'Checkout failing', filters: [['glob', 'path', ['/checkout*']]] }));
    await ingest([shop], 20, 500, { path: '/checkout/pay' });
    await ingest([shop, blog], 500, 200, { path: '/img' });
    await ingest([blog], 20, 500, { path: '/wp-admin' });
    const ev = evaluator();
    await round(ev);
    const rule = await call(t.app, 'GET', `/api/logs/alerts/${ruleId}`, { token: owner.token });
    expect(rule.body.data.filters).toEqual([['glob', 'path', ['/checkout*']]]);
    expect(rule.body.data.domains.map((d: { domainId: number; state: string }) => [d.domainId, d.state])).toEqual([
      [shop.id, 'firing'],
      [blog.id, 'ok'],
    ]);
  });

  it('a weekly silence in force now holds the notification back', async () => {
    const owner = await userWithDomains(1);
    const target = `${uniqueTag('weekly')}@example.com`;
    await postRule(owner.token, errorRule(target));
    // The API answers the state on the wall clock, the evaluator on the virtual one, minutes ahead:
    // the window runs from the earlier one's hour to the hour after the later one (midnight allowed).
    const from = new Date(Math.min(Date.now(), now));
    const to = new Date(Math.max(Date.now(), now + INTERVAL) + 3_600_000);
    const weekday = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'][from.getUTCDay()]!;
    const hourOf = (d: Date) => `${String(d.getUTCHours()).padStart(2, '0')}:00`;
    const silence = await call(t.app, 'POST', '/api/logs/silences', {
      token: owner.token,
      body: { domainIds: 'all', recurrence: { weekdays: [weekday], start: hourOf(from), end: hourOf(to), timezone: 'UTC' }, comment: 'weekly backups' },
    });
    expect(silence.status, JSON.stringify(silence.body)).toBe(201);
    expect(silence.body.data).toMatchObject({ state: 'active', domainIds: 'all' });
    await ingest(owner.domains, 20, 500);
    const result = await round(evaluator());
    expect(result).toMatchObject({ silenced: 1, notifications: { firing: 0 } });
    expect(mailsTo(target)).toHaveLength(0);
  });
});

describe('hostile', () => {
  it("a user's rule and silence never name or reach another user's domain", async () => {
    const alice = await userWithDomains(1);
    const bob = await userWithDomains(1);
    const aliceDomain = alice.domains[0]!;
    const scoped = await call(t.app, 'POST', '/api/logs/alerts', { token: bob.token, body: errorRule('b@example.com', { scope: { domainIds: [bob.domains[0]!.id, aliceDomain.id] } }) });
    expect(scoped.status).toBe(404);
    const silence = await call(t.app, 'POST', '/api/logs/silences', { token: bob.token, body: { domainIds: [aliceDomain.id], endsAt: new Date(Date.now() + 60_000).toISOString(), comment: 'x' } });
    expect(silence.status).toBe(404);
    const bobTarget = `${uniqueTag('bob')}@example.com`;
    const bobRule = await postRule(bob.token, errorRule(bobTarget));
    const aliceRule = await postRule(alice.token, errorRule(`${uniqueTag('alice')}@example.com`));
    const bobSilence = await call(t.app, 'POST', '/api/logs/silences', { token: bob.token, body: { domainIds: 'all', startsAt: new Date(Math.min(now, Date.now()) - 60_000).toISOString(), endsAt: new Date(now + 3_600_000).toISOString(), comment: 'all of mine' } });
    expect(bobSilence.status).toBe(201);
    await ingest([aliceDomain, bob.domains[0]!], 20, 500);
    await round(evaluator());
    // Bob's "all" covers his domain only, which his own "all" silence holds: nothing reaches him.
    expect(mailsTo(bobTarget)).toHaveLength(0);
    // His "all" silence does not silence Alice's rule on her domain.
    const seen = await call(t.app, 'GET', `/api/logs/alerts/${bobRule}`, { token: bob.token });
    expect(seen.body.data.domains.map((d: { domainId: number }) => d.domainId)).toEqual([bob.domains[0]!.id]);
    const hers = await call(t.app, 'GET', `/api/logs/alerts/${aliceRule}`, { token: alice.token });
    expect(hers.body.data.domains).toEqual([expect.objectContaining({ domainId: aliceDomain.id, state: 'firing', silencedBy: null })]);
    // Another user's rule, silence and history are as unknown as missing ones.
    expect((await call(t.app, 'GET', `/api/logs/alerts/${aliceRule}`, { token: bob.token })).status).toBe(404);
    expect((await call(t.app, 'PUT', `/api/logs/alerts/${aliceRule}`, { token: bob.token, body: { enabled: false } })).status).toBe(404);
    expect((await call(t.app, 'DELETE', `/api/logs/alerts/${aliceRule}`, { token: bob.token })).status).toBe(404);
    expect((await call(t.app, 'DELETE', `/api/logs/silences/${bobSilence.body.data.id}`, { token: alice.token })).status).toBe(404);
    expect((await call(t.app, 'GET', `/api/logs/domains/${aliceDomain.id}/alerts/history`, { token: bob.token })).status).toBe(404);
    const list = await call(t.app, 'GET', '/api/logs/alerts', { token: bob.token });
    expect(list.body.data.alerts.map((a: { id: number }) => a.id)).toEqual([bobRule]);
    const firing = await call(t.app, 'GET', '/api/logs/alerts/firing', { token: bob.token });
    expect(firing.body.data.alerts.map((a: { domainId: number }) => a.domainId)).toEqual([bob.domains[0]!.id]);
    const history = await call(t.app, 'GET', '/api/logs/alerts/history', { token: bob.token });
    expect(history.body.data.entries.every((e: { domainId: number }) => e.domainId === bob.domains[0]!.id)).toBe(true);
  });

  it('invalid bodies are 422 with details on each field', async () => {
    const cases: [Record<string, unknown>, string[]][] = [
      [errorRule('x@example.com', { scope: { domains: 'some' } }), ['scope']],
      [errorRule('x@example.com', { scope: { domainIds: [] } }), ['scope']],
      [errorRule('x@example.com', { scope: { domainIds: ['1 or 1=1'] } }), ['scope']],
      [errorRule('x@example.com', { filters: [['glob', 'nope', ['x']]] }), ['filters']],
      [errorRule('x@example.com', { filters: [['is', 'domain', ['a.example.com']]] }), ['filters']],
      [errorRule('x@example.com', { filters: [['glob', 'path', ["'); DROP TABLE access_logs; --", ...Array.from({ length: 100 }, () => '*a*')]]] }), ['filters']],
      [errorRule('x@example.com', { filters: "'; drop table alerts; --" }), ['filters']],
      [errorRule('x@example.com', { condition: 'requestChange', threshold: -2 }), ['threshold']],
      [errorRule('x@example.com', { condition: 'bogus' }), ['condition']],
    ];
    for (const [body, fields] of cases) {
      const res = await call(t.app, 'POST', '/api/logs/alerts', { token: admin, body });
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(Object.keys(res.body.details).sort(), JSON.stringify(res.body)).toEqual(fields);
    }
    const domainFilter = await call(t.app, 'POST', '/api/logs/alerts', { token: admin, body: cases[4]![0] });
    expect(domainFilter.body.details.filters).toBe("[0][1]: takes no filter in an alert: the alert's domain or its scope chooses the domains");
    const silences: [Record<string, unknown>, string[]][] = [
      [{ domainIds: 'all', comment: 'no end' }, ['endsAt']],
      [{ domainIds: 'all', startsAt: '2026-12-02T10:00:00Z', endsAt: '2026-12-02T09:00:00Z', comment: 'backwards' }, ['endsAt']],
      [{ domainIds: 'all', endsAt: '2099-01-01T00:00:00Z', recurrence: { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'UTC' }, comment: 'both' }, ['recurrence']],
      [{ domainIds: 'all', recurrence: { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Mars/Olympus' }, comment: 'zone' }, ['recurrence']],
      [{ domainIds: 'all', endsAt: new Date(Date.now() + 3_600_000).toISOString(), comment: '' }, ['comment']],
      [{ domainIds: 'all', endsAt: '2099-01-01T00:00:00Z', comment: 'a century' }, ['endsAt']],
      [{ domainIds: ['1; delete from alert_silences'], endsAt: '2099-01-01T00:00:00Z', comment: 'ids' }, ['domainIds']],
    ];
    for (const [body, fields] of silences) {
      const res = await call(t.app, 'POST', '/api/logs/silences', { token: admin, body });
      expect(res.status, JSON.stringify(body)).toBe(422);
      expect(Object.keys(res.body.details).sort(), JSON.stringify(res.body)).toEqual(fields);
    }
  });

  it(`the ${RULES_PER_USER + 1}st rule and the ${SILENCES_PER_USER + 1}st silence of a user are refused with 409`, async () => {
    const user = await userWithDomains(1);
    for (let i = 0; i < RULES_PER_USER; i++) await postRule(user.token, errorRule(`cap-${i}@example.com`, { enabled: false }));
    const rule = await call(t.app, 'POST', '/api/logs/alerts', { token: user.token, body: errorRule('one-more@example.com') });
    expect(rule.status).toBe(409);
    expect(rule.body.error).toContain(`${RULES_PER_USER} rules`);
    const endsAt = new Date(Date.now() + 3_600_000).toISOString();
    for (let i = 0; i < SILENCES_PER_USER; i++) {
      const res = await call(t.app, 'POST', '/api/logs/silences', { token: user.token, body: { domainIds: 'all', endsAt, comment: `s${i}` } });
      expect(res.status).toBe(201);
    }
    const silence = await call(t.app, 'POST', '/api/logs/silences', { token: user.token, body: { domainIds: 'all', endsAt, comment: 'one more' } });
    expect(silence.status).toBe(409);
    expect(silence.body.error).toContain(`${SILENCES_PER_USER} silences`);
  });
});
