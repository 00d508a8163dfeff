import fs from 'node:fs/promises';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, type TestApp } from '../../support/app.js';
import { startSmtpSink, type SmtpSink } from '../../support/smtp-sink.js';
import { appWithAdmin, freshUser, tryLogin } from '../../support/auth.js';

// The password reset e-mail through a real SMTP server (SMTP_URL), in a file of its own: only one
// test app may be open per process.
let sink: SmtpSink;
let t: TestApp;
let admin: string;
let sinkOpen = false;
beforeAll(async () => {
  sink = await startSmtpSink();
  sinkOpen = true;
  ({ t, admin } = await appWithAdmin({ SMTP_URL: sink.url, MAIL_FROM: 'tailhouse <noreply@tailhouse.test>' }));
});
afterAll(async () => {
  await t?.close();
  if (sinkOpen) await sink?.close();
});

const LINK = /http:\/\/tailhouse\.test\/reset-password\?token=([A-Za-z0-9_%.~-]+)/;
const recipients = (m: SmtpSink['messages'][number]) => [m.to ?? []].flat().flatMap((a) => a.value.map((v) => v.address));

describe('password reset e-mail over SMTP', () => {
  it('delivers the link to the user through SMTP_URL, and the link sets the password', async () => {
    const u = await freshUser(t.app, admin, 'smtp', { name: 'Mail Reader' });
    const res = await call(t.app, 'POST', `/api/users/${u.id}/reset-password`, { token: admin, body: { email: u.email } });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.message).toContain(u.email);

    const mail = await sink.waitFor((m) => recipients(m).includes(u.email));
    expect(recipients(mail)).toEqual([u.email]);
    expect(mail.subject).toBe('[tailhouse] Reset your password');
    expect(mail.from?.value.map((v) => v.address)).toEqual(['noreply@tailhouse.test']);
    expect(mail.text).toContain('Mail Reader');
    const match = LINK.exec(mail.text ?? '');
    expect(match, mail.text).not.toBeNull();
    const token = decodeURIComponent(match![1]!);

    // SMTP mode writes nothing to the outbox folder.
    const outbox = await fs.readdir(path.join(t.dataDir, 'outbox')).catch(() => [] as string[]);
    expect(outbox.filter((f) => f.endsWith('.eml'))).toEqual([]);

    const used = await call(t.app, 'POST', '/api/auth/reset-password', { body: { token, newPassword: 'via-smtp-pw-1' } });
    expect(used.status).toBe(200);
    expect((await tryLogin(t.app, u.email, 'via-smtp-pw-1')).status).toBe(200);
    expect((await tryLogin(t.app, u.email, u.password)).status).toBe(401);
  });

  it('sends one message per request, each with its own working link', async () => {
    const u = await freshUser(t.app, admin, 'smtp-twice');
    for (let i = 0; i < 2; i++) {
      expect((await call(t.app, 'POST', `/api/users/${u.id}/reset-password`, { token: admin, body: { email: u.email } })).status).toBe(200);
    }
    const deadline = Date.now() + 10_000;
    while (sink.messages.filter((m) => recipients(m).includes(u.email)).length < 2 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 25));
    }
    const mails = sink.messages.filter((m) => recipients(m).includes(u.email));
    expect(mails).toHaveLength(2);
    const tokens = mails.map((m) => decodeURIComponent(LINK.exec(m.text ?? '')![1]!));
    expect(new Set(tokens).size).toBe(2);
  });

  // Last in the file: it stops the sink.
  it('answers 503, not 500, when the SMTP server cannot be reached', async () => {
    const u = await freshUser(t.app, admin, 'smtp-down');
    await sink.close();
    sinkOpen = false;
    const res = await call(t.app, 'POST', `/api/users/${u.id}/reset-password`, { token: admin, body: { email: u.email } });
    expect(res.status).toBe(503);
    expect(res.body.success).toBe(false);
    expect(typeof res.body.error).toBe('string');
    expect(res.body.error).not.toMatch(/ECONNREFUSED|at \w+ \(/);
  });
});
