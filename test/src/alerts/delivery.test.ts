/**
 * Delivery of alert notifications (docs/reference/alerts.md#evaluation, issue 5): the outbox survives a mail server that is
 * down (retried with back-off, recorded, logged, then delivered in order when it is back, or given
 * up loudly), permanent refusals (a 5xx for the recipient or message, a webhook's 4xx) are given
 * up after a few attempts, the outcome shows in the alert's lastDeliveryError and lastDeliveredAt,
 * and webhooks: JSON POST with the facts, retries on errors, timeouts and redirects, https only
 * unless code allows a local origin, and logs that never show a target's path or query.
 */
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nonPublicAddressOf, nonPublicRange } from '../../../src/alerts/addresses.js';
import { postOnce, type WebhookPost } from '../../../src/alerts/webhook-post.js';
import { PUBLIC_ADDRESSES, REFUSED_ADDRESSES } from '../../support/addresses.js';
import { NOTIFICATIONS_PER_TARGET_PER_HOUR } from '../../../src/alerts/limits.js';
import type { AlertEvaluator, AlertEvaluatorOptions } from '../../../src/alerts/evaluator.js';
import { groupKeyOf } from '../../../src/alerts/notifications.js';
import { notificationsOf } from '../../../src/alerts/outbox.js';
import { sql } from '../../../core/db/sql.js';
import { createLogger } from '../../../core/log.js';
import { createMailer } from '../../../src/mail/mailer.js';
import { ADMIN_EMAIL, call, createUserAndLogin, type TestApp } from '../../support/app.js';
import { importText, newDomain as domainInStore, timeLocal } from '../../support/ingest.js';
import { registerDomain } from '../../support/domains.js';
import { freePort } from '../../support/ports.js';
import { alertJson, evaluatorOf, postAlert } from '../../support/alerts.js';
import { appWithAdmin, ISO_MS } from '../../support/auth.js';
import { startSmtpSink, type SmtpStage } from '../../support/smtp-sink.js';
import { uniqueTag } from '../../support/users.js';

const INTERVAL = 30_000;

let t: TestApp;
let admin: string;
let now = Math.floor(Date.now() / INTERVAL) * INTERVAL;
/** Every line the evaluators of these tests log (level debug). */
const logLines: Record<string, any>[] = [];
const log = createLogger('debug', { write: (line: string) => void logLines.push(JSON.parse(line)) });

beforeAll(async () => ({ t, admin } = await appWithAdmin()));

afterAll(() => t?.close());

// ---------------------------------------------------------------------------------------------


const newDomain = () => domainInStore(t.runtime.db, 'delivery');

/** An alert that fires on an idle domain (fewer than 1 request in 5 minutes) unless told otherwise. */
async function newAlert(domainId: number, fields: Record<string, unknown> = {}): Promise<{ id: number; target: string }> {
  const body = {
    name: 'Site silent',
    condition: 'requestCount',
    operator: 'lessThan',
    threshold: 1,
    duration: 300,
    notificationMethod: 'email',
    notificationTarget: `${uniqueTag('oncall')}@example.com`,
    ...fields,
  };
  return postAlert(t, admin, domainId, body);
}

const deleteAlert = (domainId: number, alertId: number) => call(t.app, 'DELETE', `/api/logs/domains/${domainId}/alerts/${alertId}`, { token: admin });

/** Ingests `count` lines of `status`, a second before the virtual clock, through the real import path. */
async function ingest(domain: string, count: number, status: number): Promise<void> {
  const batch = uniqueTag('access');
  const lines = Array.from({ length: count }, (_, i) => `10.3.0.${i & 255} - - [${timeLocal(now - 1000)}] "GET /${batch}/${i} HTTP/1.1" ${status} 10 "-" "agent" 0.010`);
  const summary = await importText(t, domain, `${lines.join('\n')}\n`);
  expect(summary.inserted).toBe(count);
}

/**
 * An evaluator whose notifications are due at once (no group wait): these tests are about
 * delivery, and each round's notification to a target is its own (test/src/alerts/fleet.test.ts and
 * test/src/alerts/evaluator.test.ts run with the group wait).
 */
const evaluator = (overrides: Partial<AlertEvaluatorOptions> = {}): AlertEvaluator =>
  evaluatorOf(t, { log, baseUrl: 'https://tailhouse.example.com', intervalMs: INTERVAL, now: () => now, groupWaitMs: 0, ...overrides });

async function round(ev: AlertEvaluator, advanceMs = INTERVAL) {
  now += advanceMs;
  expect((await ev.evaluateOnce()).ran).toBe(true);
}

interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: any;
}

/** A local HTTP receiver: `answer` decides each response (a status, or 'hang' to never answer). */
/** A server on 127.0.0.1 that hangs up on every connection, counting them: what the server's own network holds, for the webhook address checks. */
async function hangingUpServer(): Promise<{ port: number; connections: () => number; close: () => Promise<void> }> {
  let connections = 0;
  const server = net.createServer((socket) => {
    connections++;
    socket.destroy();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { port: (server.address() as net.AddressInfo).port, connections: () => connections, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

async function webhookReceiver(answer: (n: number) => number | 'hang') {
  const received: Received[] = [];
  const hanging: http.ServerResponse[] = [];
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => (text += c.toString()));
    req.on('end', () => {
      received.push({ method: req.method!, url: req.url!, headers: req.headers, body: JSON.parse(text) });
      const a = answer(received.length);
      if (a === 'hang') return void hanging.push(res);
      res.writeHead(a, a >= 300 && a < 400 ? { location: 'http://127.0.0.1:1/elsewhere' } : {}).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  return {
    origin,
    received,
    close: async () => {
      for (const res of hanging) res.destroy();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The log lines about an alert: the evaluator's (alertId), and the deliveries of notifications naming it (alertIds). */
const linesOf = (alertId: number) => logLines.filter((l) => l.alertId === alertId || (Array.isArray(l.alertIds) && l.alertIds.includes(alertId)));

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

// ---------------------------------------------------------------------------------------------

describe('e-mail delivery', () => {
  it('a mail server that is down: each failure is recorded and logged, retried with back-off, and the notifications arrive in order once it is up', async () => {
    const port = await freePort();
    const mailer = createMailer({ smtpUrl: `smtp://127.0.0.1:${port}`, from: 'tailhouse <tailhouse@localhost>', outboxDir: path.join(t.dataDir, 'unused'), log });
    const ev = evaluator({ mailer });
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { name: 'Errors', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5 });
    try {
      await ingest(domain.name, 20, 502);
      await round(ev);
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 1, gaveUp: 0, held: 0 });
      const firedAt = now;
      let [firing] = await notificationsOf(t.runtime.db, alert.id);
      expect(firing).toMatchObject({ method: 'email', target: alert.target, status: 'pending', attempts: 1, last_error: expect.stringMatching(/ECONNREFUSED/) });
      expect(firing!.events.map((e) => e.kind)).toEqual(['firing']);
      expect(new Date(firing!.next_attempt_at).getTime()).toBe(firedAt + 30_000);
      const [onAlert] = await t.runtime.db.query<{ last_delivery_error: string | null }>(sql`select last_delivery_error from alerts where id = ${alert.id}`);
      expect(onAlert!.last_delivery_error).toMatch(/ECONNREFUSED/);
      // The API shows it (beyond the specification).
      expect(await alertJson(t, admin, domain.id, alert.id)).toMatchObject({ lastDeliveryError: expect.stringMatching(/ECONNREFUSED/), lastDeliveredAt: null });
      const warning = linesOf(alert.id).find((l) => l.msg === 'alert notification failed; will retry');
      expect(warning).toMatchObject({ level: 'warn', component: 'alerts', alertIds: [alert.id], events: 1, method: 'email', attempt: 1, notificationId: String(firing!.id), nextAttemptAt: new Date(firedAt + 30_000).toISOString(), error: expect.stringMatching(/ECONNREFUSED/) });

      // Not due yet: nothing is tried.
      now += 10_000;
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 0, gaveUp: 0, held: 0 });

      // Recovery while the firing e-mail still waits: the resolution queues behind it.
      now = firedAt + 300_000;
      await ingest(domain.name, 20, 200);
      await round(ev);
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 1, gaveUp: 0, held: 0 });
      const rows = await notificationsOf(t.runtime.db, alert.id);
      expect(rows.map((r) => [r.events.map((e) => e.kind), r.status, r.attempts])).toEqual([
        [['firing'], 'pending', 2],
        [['resolved'], 'pending', 0],
      ]);
      // The second retry waits twice as long.
      expect(new Date(rows[0]!.next_attempt_at).getTime()).toBe(now + 60_000);

      const smtp = await startSmtpSink(port);
      try {
        now += 60_000;
        expect(await ev.deliverDue()).toEqual({ delivered: 2, failed: 0, gaveUp: 0, held: 0 });
        expect(smtp.messages.map((m) => m.subject)).toEqual([`[tailhouse] FIRING: alert "Errors" on ${domain.name}`, `[tailhouse] RESOLVED: alert "Errors" on ${domain.name}`]);
        expect(smtp.messages[0]!.text).toContain(`https://tailhouse.example.com/domains/${domain.id}?period=custom&`);
        firing = (await notificationsOf(t.runtime.db, alert.id))[0];
        expect(firing).toMatchObject({ status: 'delivered', attempts: 3 });
        const [cleared] = await t.runtime.db.query<{ last_delivery_error: string | null }>(sql`select last_delivery_error from alerts where id = ${alert.id}`);
        expect(cleared!.last_delivery_error).toBeNull();
        expect(await alertJson(t, admin, domain.id, alert.id)).toMatchObject({ lastDeliveryError: null, lastDeliveredAt: new Date(now).toISOString() });
        expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 0, gaveUp: 0, held: 0 });
        expect(smtp.messages).toHaveLength(2);
      } finally {
        await smtp.close();
      }
      // The bodies never reach the log.
      expect(logLines.some((l) => JSON.stringify(l).includes('Statistics:'))).toBe(false);
      expect(linesOf(alert.id).filter((l) => l.msg === 'alert notification delivered')).toHaveLength(2);
    } finally {
      mailer.close();
      await deleteAlert(domain.id, alert.id);
    }
  });

  it('gives up after giveUpAfterMs, loudly (status failed, an error line), and the next notification of the alert is not blocked by it', async () => {
    const port = await freePort();
    const mailer = createMailer({ smtpUrl: `smtp://127.0.0.1:${port}`, from: 'tailhouse <tailhouse@localhost>', outboxDir: path.join(t.dataDir, 'unused'), log });
    const ev = evaluator({ mailer, delivery: { backoff: { initialMs: 1_000, maxMs: 2_000, giveUpAfterMs: 5_000 } } });
    const domain = await newDomain();
    const alert = await newAlert(domain.id);
    try {
      await round(ev);
      const results = [];
      for (let i = 0; i < 4; i++) {
        results.push(await ev.deliverDue());
        now += 2_000;
      }
      expect(results.map((r) => r.failed + r.gaveUp * 10)).toEqual([1, 1, 10, 0]);
      const [row] = await notificationsOf(t.runtime.db, alert.id);
      expect(row).toMatchObject({ status: 'failed', attempts: 3, last_error: expect.stringMatching(/ECONNREFUSED/) });
      expect(linesOf(alert.id).find((l) => l.msg === 'alert notification given up after repeated failures')).toMatchObject({ level: 'error', attempt: 3 });
      // Resolution, once the site is busy again: delivered although its firing notification was given up.
      const smtp = await startSmtpSink(port);
      try {
        now += 300_000;
        await ingest(domain.name, 3, 200);
        await round(ev);
        expect(await ev.deliverDue()).toMatchObject({ delivered: 1 });
        expect(smtp.messages.map((m) => m.subject)).toEqual([`[tailhouse] RESOLVED: alert "Site silent" on ${domain.name}`]);
      } finally {
        await smtp.close();
      }
    } finally {
      mailer.close();
      await deleteAlert(domain.id, alert.id);
    }
  });
});

describe('abuse limits', () => {
  it(`sends at most ${NOTIFICATIONS_PER_TARGET_PER_HOUR} notifications an hour to one target, counted atomically by concurrent deliverers; the rest is held, not lost, and sent when the hour has room`, async () => {
    const smtp = await startSmtpSink();
    const mailer = createMailer({ smtpUrl: smtp.url, from: 'tailhouse <tailhouse@localhost>', outboxDir: path.join(t.dataDir, 'unused'), log });
    const victim = `${uniqueTag('victim')}@example.com`;
    const bystander = `${uniqueTag('bystander')}@example.com`;
    const to = (address: string) => smtp.messages.filter((m) => !Array.isArray(m.to) && m.to?.value[0]?.address === address);
    const OVER = 5;
    const domain = await newDomain();
    const other = await newDomain();
    const alerts: { id: number }[] = [];
    // Another target is not held back by the victim's limit.
    const unrelated = await newAlert(other.id, { notificationTarget: bystander });
    // Four deliverers side by side, claiming three rows at a time: with a Postgres server their
    // claims run in parallel transactions.
    const deliverers = Array.from({ length: 4 }, () => evaluator({ mailer, delivery: { batch: 3 } }));
    const deliverAll = async () => {
      const results = await Promise.all(deliverers.map((d) => d.deliverDue()));
      const total = (key: 'delivered' | 'held' | 'failed' | 'gaveUp') => results.reduce((sum, r) => sum + r[key], 0);
      return { delivered: total('delivered'), held: total('held'), failed: total('failed'), gaveUp: total('gaveUp') };
    };
    try {
      // The alerts of one round to one target are one notification (the group); so each of these
      // alerts is made to fire in a round of its own, a notification each, delivered as it comes.
      let sentAt = 0;
      const outcomes: Awaited<ReturnType<typeof deliverAll>>[] = [];
      for (let i = 0; i < NOTIFICATIONS_PER_TARGET_PER_HOUR + OVER; i++) {
        alerts.push(await newAlert(domain.id, { name: `Silent ${i}`, notificationTarget: victim }));
        await round(deliverers[0]!);
        sentAt ||= now;
        outcomes.push(await deliverAll());
      }
      const heldAt = sentAt + NOTIFICATIONS_PER_TARGET_PER_HOUR * INTERVAL;
      const sum = (key: 'delivered' | 'held' | 'failed' | 'gaveUp') => outcomes.reduce((n, o) => n + o[key], 0);
      // The victim's first 20 and the bystander's one go; the 21st is held (once: a hold is
      // logged and counted when it starts), and the next rounds' events to the victim join it.
      expect({ delivered: sum('delivered'), held: sum('held'), failed: sum('failed'), gaveUp: sum('gaveUp') }).toEqual({
        delivered: NOTIFICATIONS_PER_TARGET_PER_HOUR + 1,
        held: 1,
        failed: 0,
        gaveUp: 0,
      });
      expect(outcomes[NOTIFICATIONS_PER_TARGET_PER_HOUR]).toMatchObject({ delivered: 0, held: 1 });
      expect(to(victim)).toHaveLength(NOTIFICATIONS_PER_TARGET_PER_HOUR);
      expect(to(bystander)).toHaveLength(1);

      // The held one waits, pending, for the hour's oldest send to age out; a hold is not an attempt.
      const overLimit = alerts.slice(NOTIFICATIONS_PER_TARGET_PER_HOUR).map((a) => a.id);
      const rows = (await Promise.all(alerts.map((a) => notificationsOf(t.runtime.db, a.id)))).flat();
      const held = [...new Map(rows.filter((r) => r.status === 'pending').map((r) => [String(r.id), r])).values()];
      expect(held).toHaveLength(1);
      expect(held[0]).toMatchObject({ attempts: 0, next_attempt_at: new Date(sentAt + 3_600_000), alert_ids: overLimit });
      expect(held[0]!.events.map((e) => e.alert.id)).toEqual(overLimit);
      const [heldSince] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from alert_notifications where held_since = ${new Date(heldAt)}`);
      expect(heldSince!.n).toBe(1);
      const heldAlert = overLimit[0]!;
      // The alert held first and those whose events joined it since all say why they wait.
      for (const id of overLimit) {
        expect((await alertJson(t, admin, domain.id, id)).lastDeliveryError, `alert ${id}`).toBe(
          `held back: its target received ${NOTIFICATIONS_PER_TARGET_PER_HOUR} notifications in the last hour, the most it may; due again at ${new Date(sentAt + 3_600_000).toISOString()}`,
        );
      }
      expect(linesOf(heldAlert).filter((l) => l.msg === 'alert notification held: its target reached the hourly limit')).toEqual([
        expect.objectContaining({ level: 'warn', perTargetPerHour: NOTIFICATIONS_PER_TARGET_PER_HOUR, nextAttemptAt: new Date(sentAt + 3_600_000).toISOString() }),
      ]);

      // Later in the same hour nothing more goes to the victim.
      now += 30 * 60_000;
      expect(await deliverers[1]!.deliverDue()).toEqual({ delivered: 0, failed: 0, gaveUp: 0, held: 0 });
      expect(to(victim)).toHaveLength(NOTIFICATIONS_PER_TARGET_PER_HOUR);

      // An hour after the first send the target has room: the held notification goes, naming all
      // the alerts it gathered meanwhile, and saying since when it waited.
      now = sentAt + 3_600_000;
      expect(await deliverers[2]!.deliverDue()).toMatchObject({ delivered: 1, held: 0 });
      const late = to(victim).slice(NOTIFICATIONS_PER_TARGET_PER_HOUR);
      expect(late).toHaveLength(1);
      expect(late[0]!.subject).toBe(`[tailhouse] FIRING: ${OVER} alerts (requestCount < 1 on 1 domain)`);
      for (let i = NOTIFICATIONS_PER_TARGET_PER_HOUR; i < alerts.length; i++) expect(late[0]!.text).toContain(`alert "Silent ${i}"`);
      expect(late[0]!.text).toContain(
        `Sent late: this notification was held back from ${new Date(heldAt).toISOString()}, because this address had received ${NOTIFICATIONS_PER_TARGET_PER_HOUR} notifications from this service in the hour before, the most it may.`,
      );
      expect((await alertJson(t, admin, domain.id, heldAlert)).lastDeliveryError).toBeNull();
    } finally {
      mailer.close();
      await smtp.close();
      for (const a of [...alerts, unrelated]) await deleteAlert(a === unrelated ? other.id : domain.id, a.id);
    }
  });

  it('the e-mail names who configured the alert and for which domain, and quotes the alert name as that user\'s text', async () => {
    const smtp = await startSmtpSink();
    const mailer = createMailer({ smtpUrl: smtp.url, from: 'tailhouse <tailhouse@localhost>', outboxDir: path.join(t.dataDir, 'unused'), log });
    const ev = evaluator({ mailer });
    const malloryEmail = `${uniqueTag('mallory')}@example.com`;
    const mallory = await createUserAndLogin(t.app, admin, { email: malloryEmail, name: 'Mallory Example' });
    const domain = await registerDomain(t.app, admin, { ownerId: mallory.id, tag: 'relay' });
    // A name written to pass for a message of the operator: a quote, line breaks, a link, a right-to-left override.
    const name = 'Your password expired"\n\nLog in at https://evil.example/login to keep your account \u202egnp.exe';
    const shown = '"Your password expired\\"\\n\\nLog in at https://evil.example/login to keep your account \\u202egnp.exe"';
    const victim = `${uniqueTag('victim')}@example.com`;
    const alert = await postAlert(t, mallory.token, domain.id, { name, condition: 'requestCount', operator: 'lessThan', threshold: 1, duration: 300, notificationMethod: 'email', notificationTarget: victim });
    try {
      await round(ev);
      expect(await ev.deliverDue()).toMatchObject({ delivered: 1 });
      const [mail] = smtp.messages;
      expect(mail!.subject).toBe(`[tailhouse] FIRING: alert ${shown} on ${domain.name}`);
      expect(mail!.text).toContain(`The alert ${shown} on ${domain.name} is FIRING.`);
      expect(mail!.text).toContain(
        `This alert was configured on https://tailhouse.example.com by "Mallory Example" <${malloryEmail}>, for the domain ${domain.name}, with this address as the recipient of its notifications.`,
      );
      expect(mail!.text).toContain(`The alert's name, ${shown}, is text that user chose; this service did not write or check it.`);
      expect(mail!.text).toContain(`If you do not want these messages, ask "Mallory Example" <${malloryEmail}> to remove this address from the alert, or write to the operator of https://tailhouse.example.com.`);
      // The name makes no line of its own and hides nothing.
      expect(mail!.text!.split('\n').some((l) => l.startsWith('Log in'))).toBe(false);
      expect(mail!.text).not.toContain('\u202e');

      // Whoever changes the alert last is named from then on.
      const put = await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${alert.id}`, { token: admin, body: { name: 'Site silent' } });
      expect(put.status).toBe(200);
      now += 300_000;
      await ingest(domain.name, 3, 200);
      await round(ev);
      expect(await ev.deliverDue()).toMatchObject({ delivered: 1 });
      expect(smtp.messages[1]!.subject).toBe(`[tailhouse] RESOLVED: alert "Site silent" on ${domain.name}`);
      expect(smtp.messages[1]!.text).toContain(`This alert was configured on https://tailhouse.example.com by "Administrator" <${ADMIN_EMAIL}>, for the domain ${domain.name}`);
    } finally {
      mailer.close();
      await smtp.close();
      await deleteAlert(domain.id, alert.id);
    }
  });
});

describe('the delivery outcome in the alert API (beyond the specification)', () => {
  it('GET, POST and PUT show lastDeliveryError and lastDeliveredAt (ISO 8601 UTC with ms)', async () => {
    const smtp = await startSmtpSink();
    const mailer = createMailer({ smtpUrl: smtp.url, from: 'tailhouse <tailhouse@localhost>', outboxDir: path.join(t.dataDir, 'unused'), log });
    const ev = evaluator({ mailer });
    const domain = await newDomain();
    const created = await call(t.app, 'POST', `/api/logs/domains/${domain.id}/alerts`, {
      token: admin,
      body: { name: 'Silent', condition: 'requestCount', operator: 'lessThan', threshold: 1, duration: 300, notificationMethod: 'email', notificationTarget: `${uniqueTag('oncall')}@example.com` },
    });
    expect(created.status).toBe(201);
    expect(created.body.data).toMatchObject({ lastDeliveryError: null, lastDeliveredAt: null });
    const alertId: number = created.body.data.id;
    try {
      await round(ev);
      expect(await ev.deliverDue()).toMatchObject({ delivered: 1 });
      const deliveredAt = new Date(now).toISOString();
      const listed = await alertJson(t, admin, domain.id, alertId);
      expect(listed).toMatchObject({ state: 'firing', lastDeliveryError: null, lastDeliveredAt: deliveredAt });
      expect(listed.lastDeliveredAt).toMatch(ISO_MS);
      const put = await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${alertId}`, { token: admin, body: { name: 'Silent site' } });
      expect(put.status).toBe(200);
      expect(put.body.data).toMatchObject({ name: 'Silent site', lastDeliveryError: null, lastDeliveredAt: deliveredAt });
    } finally {
      mailer.close();
      await smtp.close();
      await deleteAlert(domain.id, alertId);
    }
  });
});

describe('permanent refusals', () => {
  /** An alert that fires at the next round, an evaluator mailing to `smtp`, and a clean-up. */
  async function firingByMail(smtpUrl: string) {
    const mailer = createMailer({ smtpUrl, from: 'tailhouse <tailhouse@localhost>', outboxDir: path.join(t.dataDir, 'unused'), log });
    const ev = evaluator({ mailer });
    const domain = await newDomain();
    const alert = await newAlert(domain.id);
    await round(ev);
    return { ev, domain, alert, close: async () => (mailer.close(), await deleteAlert(domain.id, alert.id)) };
  }

  it.each([
    ['RCPT TO', 550, '5.1.1 mailbox unavailable'],
    ['DATA', 554, '5.7.1 message refused as spam'],
  ] as const)('a %s answered %i is tried 3 times on the back-off, then given up loudly and shown as lastDeliveryError', async (stage, code, text) => {
    const smtp = await startSmtpSink();
    const { ev, domain, alert, close } = await firingByMail(smtp.url);
    smtp.refuse = (at, address) => (at === stage && address === alert.target ? { code, message: text } : undefined);
    try {
      const firstTry = now;
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 1, gaveUp: 0, held: 0 });
      // The back-off still spaces the attempts: nothing before the 30 s are up.
      now += 29_000;
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 0, gaveUp: 0, held: 0 });
      now = firstTry + 30_000;
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 1, gaveUp: 0, held: 0 });
      now += 60_000;
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 0, gaveUp: 1, held: 0 });
      expect(smtp.refusals.filter((r) => r.address === alert.target).map((r) => [r.stage, r.code])).toEqual([
        [stage, code],
        [stage, code],
        [stage, code],
      ]);
      const [row] = await notificationsOf(t.runtime.db, alert.id);
      expect(row).toMatchObject({ status: 'failed', attempts: 3 });
      expect(row!.last_error).toContain(`${code} ${text}`);
      expect(row!.last_error).toMatch(/\(given up after 3 attempts\)$/);
      const warnings = linesOf(alert.id).filter((l) => l.msg === 'alert notification failed; will retry');
      expect(warnings.map((l) => [l.level, l.attempt, l.permanent])).toEqual([
        ['warn', 1, true],
        ['warn', 2, true],
      ]);
      expect(linesOf(alert.id).find((l) => l.msg === 'alert notification given up after repeated failures')).toMatchObject({
        level: 'error',
        component: 'alerts',
        alertIds: [alert.id],
        events: 1,
        method: 'email',
        attempt: 3,
        permanent: true,
        reason: 'refused',
        error: expect.stringContaining(`${code} ${text}`),
      });
      expect(await alertJson(t, admin, domain.id, alert.id)).toMatchObject({
        lastDeliveryError: expect.stringMatching(new RegExp(`${code} ${text}.*\\(given up after 3 attempts\\)$`)),
        lastDeliveredAt: null,
      });
      // Given up: never tried again.
      now += 3_600_000;
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 0, gaveUp: 0, held: 0 });
      expect(smtp.refusals.filter((r) => r.address === alert.target)).toHaveLength(3);
      expect(smtp.messages).toHaveLength(0);
    } finally {
      await close();
      await smtp.close();
    }
  });

  it.each([
    ['RCPT TO', 451, '4.2.0 mailbox busy, try later'],
    ['MAIL FROM', 553, '5.7.1 sender not allowed'],
  ] as const)('a %s answered %i is not about the message for good: retried past 3 attempts, delivered once accepted', async (stage: SmtpStage, code, text) => {
    const smtp = await startSmtpSink();
    const { ev, domain, alert, close } = await firingByMail(smtp.url);
    smtp.refuse = (at) => (at === stage ? { code, message: text } : undefined);
    try {
      const outcomes = [];
      for (let attempt = 1; attempt <= 5; attempt++) {
        outcomes.push(await ev.deliverDue());
        now += 30 * 60_000;
      }
      expect(outcomes.map((o) => o.failed)).toEqual([1, 1, 1, 1, 1]);
      expect(outcomes.some((o) => o.gaveUp > 0)).toBe(false);
      expect((await notificationsOf(t.runtime.db, alert.id))[0]).toMatchObject({ status: 'pending', attempts: 5 });
      expect(linesOf(alert.id).filter((l) => l.msg === 'alert notification failed; will retry').every((l) => l.permanent === false)).toBe(true);
      expect((await alertJson(t, admin, domain.id, alert.id)).lastDeliveryError).toContain(`${code} ${text}`);
      // The operator fixes the mail set-up (or the mailbox frees up): delivered, the error cleared.
      smtp.refuse = undefined;
      expect(await ev.deliverDue()).toEqual({ delivered: 1, failed: 0, gaveUp: 0, held: 0 });
      expect(smtp.messages.map((m) => m.subject)).toEqual([`[tailhouse] FIRING: alert "Site silent" on ${domain.name}`]);
      expect(await alertJson(t, admin, domain.id, alert.id)).toMatchObject({ lastDeliveryError: null, lastDeliveredAt: new Date(now).toISOString() });
    } finally {
      await close();
      await smtp.close();
    }
  });

  it('a webhook answering 404 is given up after 3 attempts; 429 and 503 keep being retried', async () => {
    const gone = await webhookReceiver(() => 404);
    const busy = await webhookReceiver((n) => (n <= 4 ? (n % 2 === 0 ? 429 : 503) : 204));
    const targets: Record<string, string> = { 'gone.example.test': gone.origin, 'busy.example.test': busy.origin };
    const viaLocal: WebhookPost = (url, request) => postOnce(new URL(`${targets[url.hostname]}${url.pathname}${url.search}`), request);
    const ev = evaluator({ delivery: { post: viaLocal } });
    const domain = await newDomain();
    const dead = await newAlert(domain.id, { name: 'Dead hook', notificationMethod: 'webhook', notificationTarget: 'https://gone.example.test/hook?token=s3cret' });
    const live = await newAlert(domain.id, { name: 'Busy hook', notificationMethod: 'webhook', notificationTarget: 'https://busy.example.test/hook' });
    try {
      await round(ev);
      const outcomes = [];
      for (let i = 0; i < 5; i++) {
        outcomes.push(await ev.deliverDue());
        now += 30 * 60_000;
      }
      expect(outcomes).toEqual([
        { delivered: 0, failed: 2, gaveUp: 0, held: 0 },
        { delivered: 0, failed: 2, gaveUp: 0, held: 0 },
        { delivered: 0, failed: 1, gaveUp: 1, held: 0 },
        { delivered: 0, failed: 1, gaveUp: 0, held: 0 },
        { delivered: 1, failed: 0, gaveUp: 0, held: 0 },
      ]);
      expect(gone.received).toHaveLength(3);
      expect(busy.received).toHaveLength(5);
      expect((await notificationsOf(t.runtime.db, dead.id))[0]).toMatchObject({ status: 'failed', attempts: 3, last_error: 'webhook answered HTTP 404 (given up after 3 attempts)' });
      expect((await notificationsOf(t.runtime.db, live.id))[0]).toMatchObject({ status: 'delivered', attempts: 5 });
      expect(linesOf(dead.id).find((l) => l.msg === 'alert notification given up after repeated failures')).toMatchObject({ level: 'error', method: 'webhook', target: 'https://gone.example.test', permanent: true, reason: 'refused', attempt: 3 });
      expect(await alertJson(t, admin, domain.id, dead.id)).toMatchObject({ lastDeliveryError: 'webhook answered HTTP 404 (given up after 3 attempts)', lastDeliveredAt: null });
      expect(await alertJson(t, admin, domain.id, live.id)).toMatchObject({ lastDeliveryError: null, lastDeliveredAt: expect.stringMatching(ISO_MS) });
      expect(logLines.some((l) => JSON.stringify(l).includes('s3cret'))).toBe(false);
    } finally {
      await gone.close();
      await busy.close();
      await deleteAlert(domain.id, dead.id);
      await deleteAlert(domain.id, live.id);
    }
  });
});

describe('webhook delivery', () => {
  it('POSTs the facts as JSON, retries an error answer, and logs the target by its origin only', async () => {
    const receiver = await webhookReceiver((n) => (n === 1 ? 503 : 204));
    const secretTarget = 'https://hooks.example.test/services/T000/B000?token=s3cret-webhook-token';
    // The https target of the alert, reached at the local receiver (tests only: an injected post).
    const viaLocal: WebhookPost = (url, request) => postOnce(new URL(url.href.replace('https://hooks.example.test', receiver.origin)), request);
    const ev = evaluator({ delivery: { post: viaLocal } });
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { name: 'Silent', notificationMethod: 'webhook', notificationTarget: secretTarget });
    try {
      await round(ev);
      const firedAt = new Date(now).toISOString();
      expect(await ev.deliverDue()).toEqual({ delivered: 0, failed: 1, gaveUp: 0, held: 0 });
      expect((await notificationsOf(t.runtime.db, alert.id))[0]).toMatchObject({ status: 'pending', last_error: 'webhook answered HTTP 503' });
      now += 30_000;
      expect(await ev.deliverDue()).toEqual({ delivered: 1, failed: 0, gaveUp: 0, held: 0 });
      expect(receiver.received).toHaveLength(2);
      const [, hit] = receiver.received;
      expect(hit!.method).toBe('POST');
      expect(hit!.url).toBe('/services/T000/B000?token=s3cret-webhook-token');
      expect(hit!.headers['content-type']).toBe('application/json');
      const [row] = await notificationsOf(t.runtime.db, alert.id);
      expect(hit!.headers['x-tailhouse-notification']).toBe(String(row!.id));
      expect(hit!.headers['x-tailhouse-event']).toBe('firing');
      // One notification to the target (a group of one alert here): its facts per alert, and a text for chats.
      const start = new Date(Date.parse(firedAt) - 300_000).toISOString();
      const dashboardUrl = `https://tailhouse.example.com/domains/${domain.id}?${new URLSearchParams({ period: 'custom', from: start, to: firedAt })}`;
      expect(hit!.body).toEqual({
        id: String(row!.id),
        groupKey: groupKeyOf('webhook', secretTarget),
        status: 'firing',
        heldSince: null,
        configuredBy: [{ name: 'Administrator', email: ADMIN_EMAIL }],
        text: [
          `[tailhouse] FIRING: alert "Silent" on ${domain.name}`,
          'FIRING: 1 alert',
          `FIRING ${domain.name}: alert "Silent", requestCount < 1, value 0 requests, since ${firedAt} ${dashboardUrl}`,
        ].join('\n'),
        alerts: [
          {
            status: 'firing',
            event: 'firing',
            domain: domain.name,
            domainId: domain.id,
            alertId: alert.id,
            name: 'Silent',
            condition: 'requestCount',
            operator: 'lessThan',
            value: 0,
            threshold: 1,
            requests: 0,
            window: { start, end: firedAt },
            startsAt: firedAt,
            endsAt: null,
            dashboardUrl,
            filters: [],
          },
        ],
      });
      // The target's key never shows the target (its token) itself.
      expect(JSON.stringify(hit!.body)).not.toContain('s3cret');
      // The first attempt carried the same notification.
      expect(receiver.received[0]!.body).toEqual(hit!.body);
      const lines = linesOf(alert.id);
      expect(lines.find((l) => l.msg === 'alert notification failed; will retry')).toMatchObject({ method: 'webhook', target: 'https://hooks.example.test', error: 'webhook answered HTTP 503' });
      expect(lines.find((l) => l.msg === 'alert notification delivered')).toMatchObject({ method: 'webhook', target: 'https://hooks.example.test', attempt: 2 });
      expect(logLines.some((l) => JSON.stringify(l).includes('s3cret') || JSON.stringify(l).includes('/services/T000'))).toBe(false);
    } finally {
      await receiver.close();
      await deleteAlert(domain.id, alert.id);
    }
  });

  it('plain http reaches only origins the code allows; a timeout and a redirect are failed attempts', async () => {
    const receiver = await webhookReceiver((n) => (n === 1 ? 'hang' : n === 2 ? 302 : 200));
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { notificationMethod: 'webhook', notificationTarget: 'https://placeholder.example.com/hook' });
    // Users can only store https targets; a local http one is written by code, as tests do.
    await t.runtime.db.query(sql`update alerts set notification_target = ${`${receiver.origin}/hook`} where id = ${alert.id}`);
    try {
      const strict = evaluator();
      await round(strict);
      expect(await strict.deliverDue()).toMatchObject({ failed: 1 });
      expect((await notificationsOf(t.runtime.db, alert.id))[0]).toMatchObject({ last_error: 'webhook targets must be https URLs' });
      expect(receiver.received).toHaveLength(0);

      const local = evaluator({ delivery: { insecureWebhookOrigins: [receiver.origin], webhookTimeoutMs: 300, backoff: { initialMs: 1_000 } } });
      now += 60_000;
      const started = Date.now();
      expect(await local.deliverDue()).toMatchObject({ failed: 1 });
      expect(Date.now() - started).toBeLessThan(5_000);
      expect((await notificationsOf(t.runtime.db, alert.id))[0]!.last_error).toMatch(/timeout|aborted/i);
      now += 60_000;
      expect(await local.deliverDue()).toMatchObject({ failed: 1 });
      expect((await notificationsOf(t.runtime.db, alert.id))[0]!.last_error).toBe('webhook answered HTTP 302');
      now += 60_000;
      expect(await local.deliverDue()).toMatchObject({ delivered: 1 });
      expect(receiver.received.map((r) => r.url)).toEqual(['/hook', '/hook', '/hook']);
      expect((await notificationsOf(t.runtime.db, alert.id))[0]).toMatchObject({ status: 'delivered', attempts: 4 });
    } finally {
      await receiver.close();
      await deleteAlert(domain.id, alert.id);
    }
  });

  it('a target on a non-public address is refused before any connection (no SSRF), every address of REFUSED_ADDRESSES, and the refusal is a recorded attempt', async () => {
    const domain = await newDomain();
    // Such targets are refused when an alert is saved (test/src/alerts/crud.test.ts); one stored
    // before that check, or a name whose addresses changed since, meets this check at delivery.
    const alerts: { id: number; url: URL; range: string }[] = [];
    for (const [address, range] of REFUSED_ADDRESSES) {
      const alert = await newAlert(domain.id, { notificationMethod: 'webhook', notificationTarget: 'https://placeholder.example.com/hook' });
      const url = new URL(`https://${address.includes(':') ? `[${address}]` : address}:9/hook`);
      await t.runtime.db.query(sql`update alerts set notification_target = ${url.href} where id = ${alert.id}`);
      alerts.push({ id: alert.id, url, range });
    }
    try {
      const strict = evaluator();
      await round(strict);
      expect(await strict.deliverDue()).toMatchObject({ delivered: 0, failed: REFUSED_ADDRESSES.length });
      for (const a of alerts) {
        const [row] = await notificationsOf(t.runtime.db, a.id);
        expect(row!.last_error).toMatch(new RegExp(`^webhook host ${escapeRegExp(a.url.hostname)} is a non-public address \\(\\S+: ${escapeRegExp(a.range)}\\): refused$`));
      }
    } finally {
      for (const a of alerts) await deleteAlert(domain.id, a.id);
    }
  });
  it('WEBHOOK_ALLOW_NETWORKS: an address in a trusted network is connected to, as the connection\'s own lookup judges it; outside it, refused before any connection', async () => {
    const chat = await hangingUpServer();
    const port = chat.port;
    const resolve = async () => ['127.0.0.1'];
    /** A new alert to the chat server, its firing notification delivered by an evaluator trusting `allowNetworks`. */
    const deliverWith = async (allowNetworks: string[]) => {
      const domain = await newDomain();
      const alert = await newAlert(domain.id, { notificationMethod: 'webhook', notificationTarget: 'https://placeholder.example.com/hook' });
      await t.runtime.db.query(sql`update alerts set notification_target = ${`https://chat.provider.test:${port}/hook`} where id = ${alert.id}`);
      try {
        const ev = evaluator({ delivery: { resolve, allowNetworks, webhookTimeoutMs: 300 } });
        await round(ev);
        expect(await ev.deliverDue()).toMatchObject({ delivered: 0, failed: 1 });
        return (await notificationsOf(t.runtime.db, alert.id))[0]!.last_error;
      } finally {
        await deleteAlert(domain.id, alert.id);
      }
    };
    try {
      expect(await deliverWith(['10.0.0.0/8'])).toBe('webhook host chat.provider.test is a non-public address (127.0.0.1: loopback): refused');
      expect(chat.connections()).toBe(0);
      // Trusted: the connection goes to the address (the test's server hangs up: a failed attempt of another kind).
      expect(await deliverWith(['127.0.0.0/8'])).not.toMatch(/non-public/);
      expect(chat.connections()).toBe(1);
    } finally {
      await chat.close();
    }
  });

  it('a name is judged by the lookup the connection itself uses: refused when it resolves to a non-public address, and never resolved a second time (no DNS rebinding)', async () => {
    // What listens on the server's own network, on the port of the targets.
    const internal = await hangingUpServer();
    const port = internal.port;
    const domain = await newDomain();
    const loopback = await newAlert(domain.id, { notificationMethod: 'webhook', notificationTarget: 'https://placeholder.example.com/hook' });
    const rebinding = await newAlert(domain.id, { notificationMethod: 'webhook', notificationTarget: 'https://placeholder.example.com/hook' });
    await t.runtime.db.query(sql`update alerts set notification_target = ${`https://loopback.example.test:${port}/hook`} where id = ${loopback.id}`);
    await t.runtime.db.query(sql`update alerts set notification_target = ${`https://rebinding.example.test:${port}/hook`} where id = ${rebinding.id}`);
    // The rebinding name answers a public address once, then the loopback address.
    const lookups: string[] = [];
    const resolve = async (name: string) => {
      lookups.push(name);
      if (name === 'loopback.example.test') return ['127.0.0.1'];
      return lookups.filter((n) => n === name).length === 1 ? ['93.184.216.34'] : ['127.0.0.1'];
    };
    try {
      const ev = evaluator({ delivery: { resolve, webhookTimeoutMs: 300 } });
      await round(ev);
      expect(await ev.deliverDue()).toMatchObject({ delivered: 0, failed: 2 });
      expect((await notificationsOf(t.runtime.db, loopback.id))[0]!.last_error).toBe('webhook host loopback.example.test is a non-public address (127.0.0.1: loopback): refused');
      // The public address was the one connected to (here unreachable: a timeout or a refusal), and
      // the name was looked up once: nothing reached the server's own network.
      expect((await notificationsOf(t.runtime.db, rebinding.id))[0]!.last_error).not.toMatch(/non-public/);
      expect(lookups.filter((n) => n === 'rebinding.example.test')).toHaveLength(1);
      expect(internal.connections()).toBe(0);
    } finally {
      await internal.close();
      await deleteAlert(domain.id, loopback.id);
      await deleteAlert(domain.id, rebinding.id);
    }
  });
});

describe('webhook target addresses', () => {
  const resolvingTo = (...addresses: string[]) => async () => addresses;
  const literal = (address: string) => (address.includes(':') ? `[${address}]` : address);

  it.each(REFUSED_ADDRESSES)('refuses %s (%s), as a literal and as what a name resolves to', async (address, range) => {
    expect(nonPublicRange(address)).toBe(range);
    expect(await nonPublicAddressOf(literal(address))).toEqual({ address, range });
    expect(await nonPublicAddressOf('hooks.example.com', resolvingTo('93.184.216.34', address))).toEqual({ address, range });
  });

  it.each(PUBLIC_ADDRESSES)('accepts the public address %s', async (address) => {
    expect(nonPublicRange(address)).toBeNull();
    expect(await nonPublicAddressOf(literal(address))).toBeNull();
    expect(await nonPublicAddressOf('hooks.example.com', resolvingTo('2606:2800:220:1:248:1893:25c8:1946', address))).toBeNull();
  });
});
