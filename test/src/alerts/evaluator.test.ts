/**
 * The alert evaluator (docs/reference/alerts.md#evaluation, issue 5): metrics from logs ingested through the real import
 * path, the state machine ok → firing → ok persisted in Postgres, e-mails into a real SMTP server,
 * reminders, the noise and flapping guards, restarts, two evaluators on one Postgres, disabled and
 * deleted alerts, and the timer started the way `serve` starts it.
 *
 * Rounds run at a virtual clock (`now`), moved by at least one interval per round so each round
 * has a slot of its own; log lines are written relative to that clock.
 */
import type { ParsedMail } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { compare, GROUP_WAIT_MS, NEW_PAIR, REPEAT_MS, startAlertEvaluator, step, type AlertEvaluator, type AlertEvaluatorOptions } from '../../../src/alerts/evaluator.js';
import { measure, measureKey, type Measure } from '../../../src/alerts/metrics.js';
import { notificationsOf } from '../../../src/alerts/outbox.js';
import { evaluationPairs, lastValues, saveStates, type EvaluationPair } from '../../../src/alerts/store.js';
import { openPostgres, type Db } from '../../../core/db/postgres.js';
import { sql } from '../../../core/db/sql.js';
import { createLogger } from '../../../core/log.js';
import { call, type TestApp } from '../../support/app.js';
import { FORMAT, importText, newDomain as registerDomain, timeLocal } from '../../support/ingest.js';
import { alertJson, evaluatorOf, postAlert } from '../../support/alerts.js';
import { startSmtpSink, type SmtpSink } from '../../support/smtp-sink.js';
import { uniqueTag } from '../../support/users.js';
import { appWithAdmin } from '../../support/auth.js';

const INTERVAL = 30_000;
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

let t: TestApp;
let sink: SmtpSink;
let admin: string;
/** The virtual clock: every round and every log line is dated by it. */
let now = Math.floor(Date.now() / INTERVAL) * INTERVAL;

beforeAll(async () => {
  sink = await startSmtpSink();
  ({ t, admin } = await appWithAdmin({ SMTP_URL: sink.url }));
});

afterAll(async () => {
  await t?.close();
  await sink?.close();
});

// ---------------------------------------------------------------------------------------------


const newDomain = () => registerDomain(t.runtime.db, 'alerting');

async function newAlert(domainId: number, fields: Record<string, unknown>): Promise<{ id: number; target: string }> {
  const target = `${uniqueTag('oncall')}@example.com`;
  const body = { name: 'Too many errors', condition: 'errorRate', operator: 'greaterThan', threshold: 0.1, duration: 300, notificationMethod: 'email', notificationTarget: target, ...fields };
  return postAlert(t, admin, domainId, body);
}

const alertOf = (domainId: number, alertId: number) => alertJson(t, admin, domainId, alertId);

interface Hit {
  /** Seconds before the virtual now. */
  ago: number;
  status: number;
  /** Response time in ms; null: the line is written in `combined`, without $request_time. */
  ms?: number | null;
}

/** Ingests access lines for `domain` through the real import path, dated relative to the virtual clock. */
async function ingest(domain: string, hits: Hit[]): Promise<void> {
  const timed = hits.every((h) => h.ms !== null);
  const batch = uniqueTag('access');
  const lines = hits.map((h, i) => {
    const base = `10.2.${i >> 8}.${i & 255} - - [${timeLocal(now - h.ago * 1000)}] "GET /${batch}/${i} HTTP/1.1" ${h.status} 100 "-" "test-agent"`;
    return timed ? `${base} ${((h.ms ?? 20) / 1000).toFixed(3)}` : base;
  });
  const summary = await importText(t, domain, `${lines.join('\n')}\n`, { format: timed ? FORMAT : 'combined' });
  expect(summary).toMatchObject({ inserted: hits.length, rejected: 0 });
}

const burst = (count: number, status: number, ago = 1): Hit[] => Array.from({ length: count }, () => ({ ago, status }));

const evaluator = (overrides: Partial<AlertEvaluatorOptions> = {}): AlertEvaluator =>
  evaluatorOf(t, { log, baseUrl: 'http://tailhouse.test', intervalMs: INTERVAL, now: () => now, ...overrides });

/** Moves the clock on (at least one interval), runs a round and delivers what it enqueued once its group wait is over. */
async function tick(ev: AlertEvaluator, advanceMs = INTERVAL) {
  now += advanceMs;
  const round = await ev.evaluateOnce();
  expect(round.ran, JSON.stringify(round)).toBe(true);
  await ev.deliverDue(now + GROUP_WAIT_MS);
  return round;
}

/** The dashboard link of a notification: the domain's dashboard on the alert's window ending at `endMs`. */
const dashboardOf = (domainId: number, durationS: number, endMs: number) =>
  `http://tailhouse.test/domains/${domainId}?${new URLSearchParams({ period: 'custom', from: new Date(endMs - durationS * 1000).toISOString(), to: new Date(endMs).toISOString() })}`;

/** The (alert, domain) pair's state row, as the evaluator writes it (none: never written, ok). */
async function stateRow(alertId: number): Promise<{ state: string; state_changed_at: Date | null; notified_state: string } | undefined> {
  const [row] = await t.runtime.db.query<{ state: string; state_changed_at: Date | null; notified_state: string }>(
    sql`select state, state_changed_at, notified_state from alert_states where alert_id = ${alertId}`,
  );
  return row;
}

const mailsTo = (to: string, kind?: 'FIRING:' | 'FIRING (reminder):' | 'RESOLVED:'): ParsedMail[] =>
  sink.messages.filter((m) => m.to && !Array.isArray(m.to) && m.to.value[0]?.address === to && (kind === undefined || m.subject?.startsWith(`[tailhouse] ${kind}`)));

// ---------------------------------------------------------------------------------------------

describe('the state machine, as a pure function', () => {
  const ok = NEW_PAIR;
  const T = 1_000_000_000_000;

  it('fires once, reminds every 4 h, holds the resolution for one duration, then resolves', () => {
    expect(REPEAT_MS).toBe(4 * 3_600_000);
    const fired = step(ok, true, false, T, 300);
    expect(fired).toMatchObject({ state: 'firing', notify: 'firing', lastTriggeredAt: new Date(T), stateChangedAt: new Date(T), notifiedState: 'firing', lastNotifiedAt: new Date(T) });
    expect(step(fired, true, false, T + 30_000, 300).notify).toBeNull();
    expect(step(fired, true, false, T + 4 * 3_600_000 - 1, 300).notify).toBeNull();
    const reminded = step(fired, true, false, T + 4 * 3_600_000, 300);
    expect(reminded).toMatchObject({ state: 'firing', notify: 'reminder', lastNotifiedAt: new Date(T + 4 * 3_600_000), lastTriggeredAt: new Date(T) });
    expect(step(fired, false, false, T + 299_999, 300)).toMatchObject({ state: 'firing', notify: null });
    expect(step(fired, false, false, T + 300_000, 300)).toMatchObject({ state: 'ok', notify: 'resolved', notifiedState: 'ok', lastTriggeredAt: new Date(T) });
    expect(step(ok, false, false, T, 300)).toMatchObject({ state: 'ok', notify: null });
    // ALERT_REPEAT_S: another repeat interval.
    expect(step(fired, true, false, T + 3_600_000, 300, 3_600_000)).toMatchObject({ notify: 'reminder' });
  });

  it('a silenced pair changes state but notifies nothing; once the silence ends, the state the target does not know is notified', () => {
    const held = step(ok, true, true, T, 300);
    expect(held).toMatchObject({ state: 'firing', notify: null, notifiedState: 'ok', lastTriggeredAt: new Date(T) });
    expect(step(held, true, true, T + 5 * 3_600_000, 300).notify).toBeNull();
    expect(step(held, true, false, T + 60_000, 300)).toMatchObject({ state: 'firing', notify: 'firing', notifiedState: 'firing', lastTriggeredAt: new Date(T) });
    // Fired and resolved within the silence: the target never hears of it.
    const quiet = step(held, false, true, T + 300_000, 300);
    expect(quiet).toMatchObject({ state: 'ok', notify: null, notifiedState: 'ok' });
    expect(step(quiet, false, false, T + 330_000, 300).notify).toBeNull();
  });

  it('compares with each operator', () => {
    expect([compare(1, 'greaterThan', 1), compare(1, 'greaterThanOrEqual', 1), compare(1, 'lessThan', 1), compare(1, 'lessThanOrEqual', 1)]).toEqual([false, true, false, true]);
  });
});

describe('windows without data', () => {
  it('have no value: a rate under its minimum of requests, a response time without any; counts need no minimum', async () => {
    const domain = await newDomain();
    const at = now;
    const measures = (['errorRate', 'clientErrorRate', 'requestCount', 'averageResponseTime', 'p95ResponseTime'] as const).map(
      (condition): Measure => ({ domainId: domain.id, duration: 300, filters: [], condition }),
    );
    const valuesAt = async (minRequests: number) => {
      const got = await measure(t.runtime.clickhouse, measures, at, minRequests);
      return Object.fromEntries(measures.map((m) => [m.condition, got.get(measureKey(m))!.value]));
    };
    // No rows at all.
    expect(await valuesAt(10)).toEqual({ errorRate: null, clientErrorRate: null, requestCount: 0, averageResponseTime: null, p95ResponseTime: null });
    // 9 requests, untimed: the rates are below their minimum, the response times absent.
    await ingest(domain.name, [...burst(5, 500), ...burst(4, 404)].map((h) => ({ ...h, ms: null })));
    expect(await valuesAt(10)).toEqual({ errorRate: null, clientErrorRate: null, requestCount: 9, averageResponseTime: null, p95ResponseTime: null });
    // A 10th, timed: rates have their value; response times and counts need no minimum.
    await ingest(domain.name, [{ ago: 1, status: 200, ms: 100 }]);
    expect(await valuesAt(10)).toEqual({ errorRate: 0.5, clientErrorRate: 0.4, requestCount: 10, averageResponseTime: 100, p95ResponseTime: 100 });
    expect(await valuesAt(11)).toMatchObject({ errorRate: null, clientErrorRate: null, averageResponseTime: 100 });
  });
});

describe('alert evaluation', () => {
  it('fires exactly once into the SMTP sink, sends nothing more while firing, and one resolved e-mail after recovery', async () => {
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { threshold: 0.1, duration: 300 });
    const ev = evaluator();
    await tick(ev);
    expect(mailsTo(alert.target)).toHaveLength(0);

    await ingest(domain.name, [...burst(10, 503, 5), ...burst(10, 200, 5)]);
    const round = await tick(ev);
    expect(round).toMatchObject({ ran: true, notifications: { firing: expect.any(Number) } });
    const firedAt = new Date(now).toISOString();
    expect(mailsTo(alert.target)).toHaveLength(1);
    const mail = mailsTo(alert.target, 'FIRING:')[0]!;
    expect(mail.subject).toBe(`[tailhouse] FIRING: alert "Too many errors" on ${domain.name}`);
    expect(mail.text).toContain('0.5000 (50.00 %');
    expect(mail.text).toContain('Threshold: 0.1');
    expect(mail.text).toContain('greaterThan');
    expect(mail.text).toContain('the last 5 min (300 s)');
    expect(mail.text).toContain(firedAt);
    expect(mail.text).toContain('Requests:  20');
    expect(mail.text).toContain(`Dashboard: ${dashboardOf(domain.id, 300, now)}`);
    expect(await alertOf(domain.id, alert.id)).toMatchObject({ state: 'firing', lastTriggeredAt: firedAt });

    // Still firing: more errors, several rounds, no second e-mail.
    await ingest(domain.name, burst(10, 500));
    for (let i = 0; i < 4; i++) await tick(ev);
    expect(mailsTo(alert.target)).toHaveLength(1);

    // The errors leave the window and healthy traffic follows: one resolved e-mail.
    now += 300_000;
    await ingest(domain.name, burst(30, 200));
    await tick(ev);
    expect(mailsTo(alert.target)).toHaveLength(2);
    const resolved = mailsTo(alert.target, 'RESOLVED:')[0]!;
    expect(resolved.subject).toBe(`[tailhouse] RESOLVED: alert "Too many errors" on ${domain.name}`);
    expect(resolved.text).toContain('0.0000');
    expect(resolved.text).toContain(`it fired from ${firedAt}`);
    expect(await alertOf(domain.id, alert.id)).toMatchObject({ state: 'ok', lastTriggeredAt: firedAt });
    await tick(ev);
    expect(mailsTo(alert.target)).toHaveLength(2);
    const rows = await notificationsOf(t.runtime.db, alert.id);
    expect(rows.map((r) => [r.events.map((e) => e.kind), r.method, r.target, r.status, r.attempts])).toEqual([
      [['firing'], 'email', alert.target, 'delivered', 1],
      [['resolved'], 'email', alert.target, 'delivered', 1],
    ]);
  });

  it('sends a reminder after 4 hours of firing, not before, and each of the other operators works', async () => {
    const domain = await newDomain();
    // An idle site: fewer than 1 request in 5 minutes.
    const alert = await newAlert(domain.id, { name: 'Site silent', condition: 'requestCount', operator: 'lessThan', threshold: 1 });
    const busy = await newAlert(domain.id, { name: 'Busy', condition: 'requestCount', operator: 'greaterThanOrEqual', threshold: 1 });
    const ev = evaluator();
    await tick(ev);
    expect(mailsTo(alert.target, 'FIRING:')).toHaveLength(1);
    expect(mailsTo(busy.target)).toHaveLength(0);
    const firedAt = now;
    await tick(ev, 3_600_000);
    await tick(ev, 2 * 3_600_000);
    expect(mailsTo(alert.target)).toHaveLength(1);
    now = firedAt + 4 * 3_600_000 - INTERVAL;
    await tick(ev);
    const reminders = mailsTo(alert.target, 'FIRING (reminder):');
    expect(reminders).toHaveLength(1);
    expect(reminders[0]!.subject).toBe(`[tailhouse] FIRING (reminder): alert "Site silent" on ${domain.name}`);
    expect(reminders[0]!.text).toContain(`STILL FIRING (since ${new Date(firedAt).toISOString()})`);
    await tick(ev);
    await tick(ev, 3_600_000);
    expect(mailsTo(alert.target)).toHaveLength(2);
    expect(await alertOf(domain.id, alert.id)).toMatchObject({ state: 'firing', lastTriggeredAt: new Date(firedAt).toISOString() });
  });

  it('p95ResponseTime and clientErrorRate fire on the values the statistics registry gives', async () => {
    const domain = await newDomain();
    const slow = await newAlert(domain.id, { name: 'Slow tail', condition: 'p95ResponseTime', operator: 'greaterThan', threshold: 1000 });
    const broken = await newAlert(domain.id, { name: 'Broken links', condition: 'clientErrorRate', operator: 'greaterThanOrEqual', threshold: 0.2 });
    const hits = (count: number, status: number, ms: number): Hit[] => Array.from({ length: count }, () => ({ ago: 5, status, ms }));
    const ev = evaluator();
    // 20 requests: the 95th percentile (rank 19) is 30 ms; 3 of 20 are 404 (0.15).
    await ingest(domain.name, [...hits(16, 200, 20), ...hits(3, 404, 30), ...hits(1, 200, 5000)]);
    await tick(ev);
    expect(mailsTo(slow.target)).toHaveLength(0);
    expect(mailsTo(broken.target)).toHaveLength(0);
    // 24 requests: rank 23 is a 5000 ms one; 5 of 24 are 404 (0.2083).
    await ingest(domain.name, [...hits(2, 200, 5000), ...hits(2, 404, 20)]);
    await tick(ev);
    const slowMail = mailsTo(slow.target, 'FIRING:');
    expect(slowMail).toHaveLength(1);
    expect(slowMail[0]!.text).toMatch(/Value: +50\d\d\.\d\d ms \(95th percentile\)|Value: +49[5-9]\d\.\d\d ms \(95th percentile\)/);
    expect(slowMail[0]!.text).toContain('Threshold: 1000 ms');
    const brokenMail = mailsTo(broken.target, 'FIRING:');
    expect(brokenMail).toHaveLength(1);
    expect(brokenMail[0]!.text).toContain('0.2083 (20.83 % of requests with status 400–499)');
    expect(await alertOf(domain.id, slow.id)).toMatchObject({ state: 'firing' });
  });

  it('an error rate needs at least 10 requests in its window before it can fire', async () => {
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { threshold: 0.5, operator: 'greaterThanOrEqual' });
    const ev = evaluator();
    await ingest(domain.name, burst(9, 500));
    await tick(ev);
    expect(mailsTo(alert.target)).toHaveLength(0);
    // The round's value of the pair: none (9 requests say nothing about a rate), and so not met.
    expect((await lastValues(t.runtime.db))[alert.id]).toEqual({ [domain.id]: null });
    expect(await stateRow(alert.id)).toBeUndefined();
    await ingest(domain.name, burst(1, 500));
    await tick(ev);
    expect(mailsTo(alert.target, 'FIRING:')).toHaveLength(1);
    expect(mailsTo(alert.target, 'FIRING:')[0]!.text).toContain('1.0000 (100.00 %');
    expect(mailsTo(alert.target, 'FIRING:')[0]!.text).toContain('Requests:  10');
  });

  it('a window without response times never fires an averageResponseTime alert, and rows without one are left out', async () => {
    const domain = await newDomain();
    const fast = await newAlert(domain.id, { name: 'Suspiciously fast', condition: 'averageResponseTime', operator: 'lessThan', threshold: 50 });
    const slow = await newAlert(domain.id, { name: 'Slow', condition: 'averageResponseTime', operator: 'greaterThan', threshold: 400 });
    const ev = evaluator();
    await tick(ev);
    await ingest(domain.name, burst(20, 200).map((h) => ({ ...h, ms: null })));
    await tick(ev);
    expect(mailsTo(fast.target)).toHaveLength(0);
    expect(mailsTo(slow.target)).toHaveLength(0);
    // 500 ms and 700 ms: a mean of 600 whatever the 20 untimed requests around them.
    await ingest(domain.name, [{ ago: 2, status: 200, ms: 500 }, { ago: 2, status: 200, ms: 700 }]);
    await tick(ev);
    expect(mailsTo(fast.target)).toHaveLength(0);
    expect(mailsTo(slow.target, 'FIRING:')).toHaveLength(1);
    expect(mailsTo(slow.target, 'FIRING:')[0]!.text).toContain('600.00 ms');
  });

  it('a flapping alert sends at most one firing/resolved pair per duration, and a new breach after it fires at once', async () => {
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { threshold: 0.5, duration: 300 });
    const ev = evaluator();
    await tick(ev);
    // Each round flips the rate over the whole 5-minute window across 0.5 and back.
    const flips: [number, number][] = [
      [10, 500], // 10/10 = 1.00 fires
      [20, 200], // 10/30 = 0.33
      [30, 500], // 40/60 = 0.67
      [40, 200], // 40/100 = 0.40
      [70, 500], // 110/170 = 0.65
      [80, 200], // 110/250 = 0.44
    ];
    let firedAt = 0;
    for (const [count, status] of flips) {
      await ingest(domain.name, burst(count, status));
      await tick(ev);
      firedAt ||= now;
      expect((await alertOf(domain.id, alert.id)).state).toBe('firing');
    }
    expect(mailsTo(alert.target)).toHaveLength(1);
    // Below the threshold and firing for a whole duration: resolved, once.
    now = firedAt + 300_000 - INTERVAL;
    await tick(ev);
    expect(mailsTo(alert.target, 'RESOLVED:')).toHaveLength(1);
    expect((await alertOf(domain.id, alert.id)).state).toBe('ok');
    // A real breach right after is not held back.
    await ingest(domain.name, burst(400, 500));
    await tick(ev);
    expect(mailsTo(alert.target, 'FIRING:')).toHaveLength(2);
    const sent = mailsTo(alert.target).map((m) => m.subject);
    expect(sent).toEqual([expect.stringContaining('FIRING:'), expect.stringContaining('RESOLVED:'), expect.stringContaining('FIRING:')]);
  });

  it('never evaluates a disabled alert', async () => {
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { condition: 'requestCount', operator: 'lessThan', threshold: 1, enabled: false });
    const ev = evaluator();
    await tick(ev);
    await tick(ev);
    expect(mailsTo(alert.target)).toHaveLength(0);
    // Not evaluated: no state, no value of the round, no notification.
    expect(await stateRow(alert.id)).toBeUndefined();
    expect((await lastValues(t.runtime.db))[alert.id]).toBeUndefined();
    expect(await notificationsOf(t.runtime.db, alert.id)).toEqual([]);
    // Enabled: the next round evaluates it.
    const res = await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${alert.id}`, { token: admin, body: { enabled: true } });
    expect(res.status).toBe(200);
    await tick(ev);
    expect(mailsTo(alert.target, 'FIRING:')).toHaveLength(1);
  });

  it('deleting an alert or its domain leaves no pending notification behind', async () => {
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { condition: 'requestCount', operator: 'lessThan', threshold: 1 });
    const other = await newAlert(domain.id, { condition: 'requestCount', operator: 'lessThan', threshold: 1 });
    // A third alert to the first one's target: its event shares that target's notification.
    const sharing = await newAlert(domain.id, { name: 'Sharing', condition: 'requestCount', operator: 'lessThan', threshold: 1, notificationTarget: alert.target });
    const ev = evaluator();
    now += INTERVAL;
    expect((await ev.evaluateOnce()).ran).toBe(true);
    const [shared] = await notificationsOf(t.runtime.db, alert.id);
    expect(shared).toMatchObject({ status: 'pending', alert_ids: [alert.id, sharing.id] });
    expect((await notificationsOf(t.runtime.db, other.id)).map((r) => r.status)).toEqual(['pending']);
    // The deleted alert's event leaves the notification; the other alert's stays in it.
    expect(await call(t.app, 'DELETE', `/api/logs/domains/${domain.id}/alerts/${alert.id}`, { token: admin })).toMatchObject({ status: 200 });
    expect(await notificationsOf(t.runtime.db, alert.id)).toEqual([]);
    const [left] = await notificationsOf(t.runtime.db, sharing.id);
    expect(left).toMatchObject({ id: shared!.id, status: 'pending', alert_ids: [sharing.id] });
    expect(left!.events.map((e) => e.alert.id)).toEqual([sharing.id]);
    expect((await notificationsOf(t.runtime.db, other.id)).map((r) => r.status)).toEqual(['pending']);
    // The domain's deletion takes every event about it, and the notifications left without one.
    expect(await call(t.app, 'DELETE', `/api/domains/${domain.id}`, { token: admin })).toMatchObject({ status: 200 });
    expect(await notificationsOf(t.runtime.db, other.id)).toEqual([]);
    expect(await notificationsOf(t.runtime.db, sharing.id)).toEqual([]);
    const [orphans] = await t.runtime.db.query<{ n: number }>(sql`
      select count(*)::int as n from alert_notifications n
      where n.status = 'pending' and exists (select 1 from unnest(n.alert_ids) as x(id) where not exists (select 1 from alerts a where a.id = x.id))`);
    expect(orphans!.n).toBe(0);
    await ev.deliverDue(now + GROUP_WAIT_MS);
    expect(mailsTo(alert.target)).toHaveLength(0);
    expect(mailsTo(other.target)).toHaveLength(0);
  });

  it('keeps its state across a restart: no second firing e-mail, a notification enqueued before it is delivered once after, then the resolution', async () => {
    const domain = await newDomain();
    const sent = await newAlert(domain.id, { threshold: 0.2 });
    const queued = await newAlert(domain.id, { name: 'Queued', threshold: 0.2 });
    await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${queued.id}`, { token: admin, body: { enabled: false } });
    let ev = evaluator();
    await ingest(domain.name, burst(20, 500));
    await tick(ev);
    expect(mailsTo(sent.target, 'FIRING:')).toHaveLength(1);
    // The second alert fires in a round whose delivery never happens before the restart.
    await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${queued.id}`, { token: admin, body: { enabled: true } });
    now += INTERVAL;
    expect((await ev.evaluateOnce()).ran).toBe(true);
    await ev.stop();
    await t.runtime.close();
    await t.restart();

    ev = evaluator({ db: t.runtime.db, clickhouse: t.runtime.clickhouse, mailer: t.runtime.mailer });
    await ev.deliverDue(now + GROUP_WAIT_MS);
    expect(mailsTo(queued.target, 'FIRING:')).toHaveLength(1);
    await tick(ev);
    await tick(ev);
    expect(mailsTo(sent.target)).toHaveLength(1);
    expect(mailsTo(queued.target)).toHaveLength(1);
    expect(await alertOf(domain.id, sent.id)).toMatchObject({ state: 'firing' });
    now += 300_000;
    await ingest(domain.name, burst(20, 200));
    await tick(ev);
    expect(mailsTo(sent.target, 'RESOLVED:')).toHaveLength(1);
    expect(mailsTo(queued.target, 'RESOLVED:')).toHaveLength(1);
  });

  it('two evaluators on one Postgres: one evaluates each interval, one e-mail per event, and the other takes over at the next interval', async () => {
    // CI's server run: a second pool of connections, as a second process would have. Embedded
    // PGlite is one process: the two evaluators share the handle and still race.
    let second: Db = t.runtime.db;
    if (t.databaseUrl) second = await openPostgres(t.databaseUrl, { max: 3 });
    try {
      const domain = await newDomain();
      const alerts = await Promise.all([1, 2, 3, 4, 5].map((i) => newAlert(domain.id, { name: `Silent ${i}`, condition: 'requestCount', operator: 'lessThan', threshold: 1 })));
      const a = evaluator({ holder: 'process-a' });
      const b = evaluator({ holder: 'process-b', db: second });
      now += INTERVAL;
      const rounds = await Promise.all([a.evaluateOnce(now), b.evaluateOnce(now)]);
      expect(rounds.filter((r) => r.ran)).toHaveLength(1);
      expect(rounds.filter((r) => !r.ran)[0]).toMatchObject({ ran: false, reason: expect.stringMatching(/^(busy|taken)$/) });
      const due = now + GROUP_WAIT_MS;
      await Promise.all([a.deliverDue(due), b.deliverDue(due), a.deliverDue(due + 1), b.deliverDue(due + 1)]);
      for (const alert of alerts) expect(mailsTo(alert.target)).toHaveLength(1);

      // Many rounds side by side: never a second e-mail.
      for (let i = 0; i < 5; i++) {
        now += INTERVAL;
        const both = await Promise.all([a.evaluateOnce(now), b.evaluateOnce(now + 5)]);
        expect(both.filter((r) => r.ran)).toHaveLength(1);
        await Promise.all([a.deliverDue(now + GROUP_WAIT_MS), b.deliverDue(now + GROUP_WAIT_MS)]);
      }
      for (const alert of alerts) expect(mailsTo(alert.target)).toHaveLength(1);

      // a stops (or dies after its claim): b evaluates the very next interval.
      await a.stop();
      now += INTERVAL;
      expect(await b.evaluateOnce(now)).toMatchObject({ ran: true });
      const [ledger] = await t.runtime.db.query<{ holder: string }>(sql`select holder from alert_evaluator`);
      expect(ledger!.holder).toBe('process-b');
      await ingest(domain.name, burst(3, 200));
      now += INTERVAL;
      expect(await b.evaluateOnce(now)).toMatchObject({ ran: true, notifications: { resolved: 0 } });
      // Resolved needs the alerts to have fired a whole duration ago; move past it. A third
      // process races b for that round: one resolved e-mail each.
      const c = evaluator({ holder: 'process-c' });
      now += 300_000;
      await ingest(domain.name, burst(3, 200));
      const last = await Promise.all([c.evaluateOnce(now), b.evaluateOnce(now)]);
      expect(last.filter((r) => r.ran)).toHaveLength(1);
      await Promise.all([c.deliverDue(now + GROUP_WAIT_MS), b.deliverDue(now + GROUP_WAIT_MS)]);
      for (const alert of alerts) expect(mailsTo(alert.target, 'RESOLVED:')).toHaveLength(1);
      for (const alert of alerts) expect(mailsTo(alert.target)).toHaveLength(2);
    } finally {
      if (second !== t.runtime.db) await second.close();
    }
  });

  it('a round measures all alerts in one ClickHouse query', async () => {
    let queries = 0;
    const clickhouse = new Proxy(t.runtime.clickhouse, {
      get(target, prop, receiver) {
        if (prop === 'query') return (...args: Parameters<typeof target.query>) => (queries++, target.query(...args));
        return Reflect.get(target, prop, receiver);
      },
    });
    const domains = await Promise.all([1, 2, 3].map(() => newDomain()));
    for (const d of domains) {
      await newAlert(d.id, { duration: 60 });
      await newAlert(d.id, { duration: 3600, condition: 'requestCount', threshold: 1e9 });
    }
    const ev = evaluator({ clickhouse });
    const round = await tick(ev);
    expect(round).toMatchObject({ ran: true });
    expect(round.ran && round.alerts).toBeGreaterThanOrEqual(6);
    expect(queries).toBe(1);
  });

  it('a round writes only the pairs whose state changes: an unchanged pair is neither updated nor row-locked, nor is its alert', async () => {
    const domain = await newDomain();
    const never = await newAlert(domain.id, { name: 'Never', condition: 'requestCount', operator: 'greaterThan', threshold: 1e9 });
    const silent = await newAlert(domain.id, { name: 'Silent', condition: 'requestCount', operator: 'lessThan', threshold: 1 });
    // xmin names the transaction that wrote a row version, xmax the one that last locked or
    // replaced it: a round that writes or locks a row changes one of them. A pair's state lives in
    // alert_states (none: ok, never written); the round's values in the one ledger row.
    const states = () =>
      t.runtime.db.query<{ alert_id: number; xmin: string; xmax: string; state: string; state_changed_at: Date | null }>(sql`
        select alert_id, xmin::text as xmin, xmax::text as xmax, state, state_changed_at from alert_states where alert_id in (${never.id}, ${silent.id}) order by alert_id`);
    const alertRows = () =>
      t.runtime.db.query<{ id: number; xmin: string; xmax: string }>(sql`select id, xmin::text as xmin, xmax::text as xmax from alerts where id in (${never.id}, ${silent.id}) order by id`);
    const valueOf = async (alertId: number) => (await lastValues(t.runtime.db))[alertId]?.[domain.id];
    const ev = evaluator();
    // The first round writes the silent pair, which fires; the never-met one stays ok and unwritten.
    const first = await tick(ev);
    const firstAt = new Date(now);
    expect(first.ran && first.written).toBeGreaterThanOrEqual(1);
    expect(mailsTo(silent.target, 'FIRING:')).toHaveLength(1);
    const settled = await states();
    expect(settled.map((r) => [r.alert_id, r.state, r.state_changed_at && new Date(r.state_changed_at).getTime()])).toEqual([[silent.id, 'firing', firstAt.getTime()]]);
    expect(await valueOf(never.id)).toBe(0);
    // (the delivery of the firing e-mail wrote the silent alert's lastDeliveredAt)
    const alertsSettled = await alertRows();

    // Rounds in which no state changes: the never-met alert stays ok, the silent one stays firing
    // (traffic is back, but its resolution is held for its duration), no reminder.
    await ingest(domain.name, burst(3, 200));
    for (let i = 0; i < 3; i++) {
      const quiet = await tick(ev);
      expect(quiet.ran && quiet.pairs).toBeGreaterThanOrEqual(2);
      expect(quiet.ran && quiet.written).toBe(0);
    }
    expect(await states()).toEqual(settled);
    expect(await alertRows()).toEqual(alertsSettled);
    expect(mailsTo(silent.target)).toHaveLength(1);
    // The values of the rounds are still there for the API.
    expect(await valueOf(never.id)).toBe(3);
    expect(await valueOf(silent.id)).toBe(3);

    // A definition changed through the API is evaluated as it is by the next round, and nothing of
    // that round touches the other pair.
    expect((await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${never.id}`, { token: admin, body: { threshold: 1e8 } })).status).toBe(200);
    await tick(ev);
    expect(await states()).toEqual(settled);
    expect(await valueOf(never.id)).toBe(3);

    // A state change is written: the silent alert resolves once it has fired for its duration.
    now = firstAt.getTime() + 300_000 - INTERVAL;
    await ingest(domain.name, burst(3, 200));
    await tick(ev);
    const [resolved] = await states();
    expect(resolved).toMatchObject({ alert_id: silent.id, state: 'ok', state_changed_at: new Date(now) });
    expect(resolved!.xmin).not.toBe(settled[0]!.xmin);
    expect(mailsTo(silent.target, 'RESOLVED:')).toHaveLength(1);
  });

  it('a state write skips an alert disabled, changed or deleted after the round read it, so no notification goes without its state', async () => {
    const domain = await newDomain();
    const alerts = await Promise.all([1, 2, 3].map((i) => newAlert(domain.id, { name: `Raced ${i}`, condition: 'requestCount', operator: 'lessThan', threshold: 1 })));
    const ids = alerts.map((a) => a.id);
    // What a round's claim reads of these alerts: one pair each, without a state yet (ok).
    const claimed = async () => (await evaluationPairs(t.runtime.db)).pairs.filter((p) => ids.includes(p.alert_id));
    const read = await claimed();
    expect(read.map((p) => [p.alert_id, p.domain_id, p.state])).toEqual([...ids].sort((a, b) => a - b).map((id) => [id, domain.id, null]));
    const [disabled, changed, deleted] = alerts;
    // Between the claim and the apply: a PUT disables one, a PUT changes another, a DELETE the third.
    expect((await call(t.app, 'PUT', `/api/logs/domains/${domain.id}/alerts/${disabled!.id}`, { token: admin, body: { enabled: false } })).status).toBe(200);
    // (updated_at moved on by a second, so the change cannot fall in the same millisecond)
    await t.runtime.db.query(sql`update alerts set updated_at = updated_at + interval '1 second' where id = ${changed!.id}`);
    expect((await call(t.app, 'DELETE', `/api/logs/domains/${domain.id}/alerts/${deleted!.id}`, { token: admin })).status).toBe(200);
    const at = new Date(now);
    const firing = (p: EvaluationPair) => ({
      alertId: p.alert_id,
      domainId: p.domain_id,
      version: new Date(p.updated_at),
      state: 'firing' as const,
      stateChangedAt: at,
      lastTriggeredAt: at,
      notifiedState: 'firing' as const,
      lastNotifiedAt: at,
    });
    expect(await saveStates(t.runtime.db, read.map(firing))).toEqual(new Set());
    expect(await stateRow(disabled!.id)).toBeUndefined();
    // The next round reads the changed alert again, and its write goes through.
    const again = await claimed();
    expect(again.map((p) => [p.alert_id, p.state])).toEqual([[changed!.id, null]]);
    expect(await saveStates(t.runtime.db, again.map(firing))).toEqual(new Set([`${changed!.id}:${domain.id}`]));
    expect((await alertOf(domain.id, changed!.id)).state).toBe('firing');

    // A rule's pair whose domain is deleted meanwhile is skipped too (its state has no domain to name).
    const doomed = await newDomain();
    const rule = await call(t.app, 'POST', '/api/logs/alerts', {
      token: admin,
      body: { name: 'Raced rule', condition: 'requestCount', operator: 'lessThan', threshold: 1, duration: 300, notificationMethod: 'email', notificationTarget: `${uniqueTag('oncall')}@example.com`, scope: { domainIds: [doomed.id] } },
    });
    expect(rule.status, JSON.stringify(rule.body)).toBe(201);
    const rulePairs = (await evaluationPairs(t.runtime.db)).pairs.filter((p) => p.alert_id === rule.body.data.id);
    expect(rulePairs.map((p) => p.domain_id)).toEqual([doomed.id]);
    expect(await call(t.app, 'DELETE', `/api/domains/${doomed.id}`, { token: admin })).toMatchObject({ status: 200 });
    expect(await saveStates(t.runtime.db, rulePairs.map(firing))).toEqual(new Set());
  });

  it('runs on its own timer the way serve starts it, and stops cleanly', async () => {
    const domain = await newDomain();
    const alert = await newAlert(domain.id, { condition: 'requestCount', operator: 'lessThan', threshold: 1 });
    // Real timers, a 200 ms interval and group wait; the virtual clock moves one interval per 250 ms.
    const ev = startAlertEvaluator({ db: t.runtime.db, clickhouse: t.runtime.clickhouse, mailer: t.runtime.mailer, log, baseUrl: 'http://tailhouse.test', intervalMs: 200, groupWaitMs: 200, now: () => now });
    try {
      for (let i = 0; i < 10 && mailsTo(alert.target).length === 0; i++) {
        now += 200;
        await new Promise((r) => setTimeout(r, 250));
      }
      await sink.waitFor((m) => mailsTo(alert.target).includes(m), 5_000);
      for (let i = 0; i < 5; i++) {
        now += 200;
        await new Promise((r) => setTimeout(r, 250));
      }
      expect(mailsTo(alert.target)).toHaveLength(1);
    } finally {
      await ev.stop();
    }
  });
});
