import type { ParsedMail } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomToken, tokenHash } from '../../../src/auth/tokens.js';
import { sql } from '../../../core/db/sql.js';
import { call, login, type TestApp } from '../../support/app.js';
import { activityOf, appWithAdmin, expectAuthRequired, expectRefreshRefused, expectValidation, freshUser, mailRecipients, outboxFor as outboxForDir, refresh, tryLogin } from '../../support/auth.js';

let t: TestApp;
let admin: string;
let adminId: number;
beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
  adminId = (await call(t.app, 'GET', '/api/users?role=admin', { token: admin })).body.data.users[0].id;
});
afterAll(() => t?.close());

const LINK = /http:\/\/tailhouse\.test\/reset-password\?token=([A-Za-z0-9_%.~-]+)/;

const outboxFor = (email: string) => outboxForDir(t.dataDir, email);

const requestReset = (id: number, email: string, token = admin) => call(t.app, 'POST', `/api/users/${id}/reset-password`, { token, body: { email } });

const useReset = (token: string, newPassword: string) => call(t.app, 'POST', '/api/auth/reset-password', { body: { token, newPassword } });

/** Asks for a reset as the admin and returns the token from the e-mail that arrived in the outbox. */
async function resetTokenFor(id: number, email: string): Promise<{ token: string; mail: ParsedMail }> {
  const already = (await outboxFor(email)).length;
  const res = await requestReset(id, email);
  expect(res.status).toBe(200);
  const mails = await outboxFor(email);
  expect(mails).toHaveLength(already + 1);
  const mail = mails.at(-1)!;
  const match = LINK.exec(mail.text ?? '');
  expect(match, mail.text).not.toBeNull();
  return { token: decodeURIComponent(match![1]!), mail };
}

describe('password reset through an e-mailed link', () => {
  it('runs the whole flow: request, e-mail in the outbox, new password set through the link', async () => {
    const u = await freshUser(t.app, admin, 'reset');
    const res = await requestReset(u.id, u.email);
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(res.body.message).toMatch(/e-?mail/i);
    expect(res.body.message).toContain(u.email);
    expect(res.body).not.toHaveProperty('data');

    const mails = await outboxFor(u.email);
    expect(mails).toHaveLength(1);
    const mail = mails[0]!;
    expect(mailRecipients(mail)).toEqual([u.email]);
    expect(mail.subject).toMatch(/reset/i);
    const match = LINK.exec(mail.text ?? '');
    expect(match, mail.text).not.toBeNull();
    const token = decodeURIComponent(match![1]!);
    expect(token.length).toBeGreaterThanOrEqual(32);
    // The response does not hand out the token: only the mailbox owner gets it.
    expect(JSON.stringify(res.body)).not.toContain(token);

    const used = await useReset(token, 'reset-new-password-1');
    expect(used.status).toBe(200);
    expect(used.body.success).toBe(true);
    expect(typeof used.body.message).toBe('string');

    expect((await tryLogin(t.app, u.email, 'reset-new-password-1')).status).toBe(200);
    const old = await tryLogin(t.app, u.email, u.password);
    expect(old.status).toBe(401);
    expect(old.body.error).toBe('Invalid email or password');
  });

  it('ends the sessions the user had before the reset', async () => {
    const u = await freshUser(t.app, admin, 'reset-sessions');
    const second = await login(t.app, u.email, u.password);
    const { token } = await resetTokenFor(u.id, u.email);
    // Merely requesting the reset ends nothing.
    expect((await call(t.app, 'GET', `/api/users/${u.id}`, { token: u.token })).status).toBe(200);

    expect((await useReset(token, 'after-reset-pw-1')).status).toBe(200);
    for (const access of [u.token, second.accessToken]) expectAuthRequired(await call(t.app, 'GET', `/api/users/${u.id}`, { token: access }));
    for (const refreshToken of [u.refreshToken, second.refreshToken]) expectRefreshRefused(await refresh(t.app, refreshToken));
  });

  it('records the request in the admin activity and the reset in the user activity', async () => {
    const u = await freshUser(t.app, admin, 'reset-activity');
    const { token } = await resetTokenFor(u.id, u.email);
    expect((await useReset(token, 'after-reset-pw-2')).status).toBe(200);
    const adminActivity = await activityOf(t.app, admin, adminId);
    expect(adminActivity.some((a) => a.action === 'password.reset_request' && a.resource === `users/${u.id}`)).toBe(true);
    const userActivity = await activityOf(t.app, admin, u.id);
    expect(userActivity.filter((a) => a.action === 'password.reset').map((a) => a.resource)).toEqual([`users/${u.id}`]);
    expect(JSON.stringify([adminActivity, userActivity])).not.toContain(token);
  });

  it('makes a link valid for one hour, stored only as a hash', async () => {
    const u = await freshUser(t.app, admin, 'reset-ttl');
    const { token } = await resetTokenFor(u.id, u.email);
    const rows = await t.runtime.db.query<{ token_hash: string; expires_at: Date }>(sql`select token_hash, expires_at from password_resets where user_id = ${u.id}`);
    expect(rows.map((r) => r.token_hash)).toEqual([tokenHash(token)]);
    const minutes = (new Date(rows[0]!.expires_at).getTime() - Date.now()) / 60_000;
    expect(minutes).toBeGreaterThan(59);
    expect(minutes).toBeLessThanOrEqual(60.1);
  });

  it('refuses the same link a second time with 422 on token', async () => {
    const u = await freshUser(t.app, admin, 'reset-twice');
    const { token } = await resetTokenFor(u.id, u.email);
    expect((await useReset(token, 'first-reset-pw-1')).status).toBe(200);
    expectValidation(await useReset(token, 'second-reset-pw-1'), ['token']);
    // The first new password stands.
    expect((await tryLogin(t.app, u.email, 'first-reset-pw-1')).status).toBe(200);
    expect((await tryLogin(t.app, u.email, 'second-reset-pw-1')).status).toBe(401);
  });

  it('lets only one of two concurrent uses of a link succeed', async () => {
    const u = await freshUser(t.app, admin, 'reset-race');
    const { token } = await resetTokenFor(u.id, u.email);
    const results = await Promise.all([useReset(token, 'race-winner-a1'), useReset(token, 'race-winner-b2')]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 422]);
    const winner = results[0]!.status === 200 ? 'race-winner-a1' : 'race-winner-b2';
    const loser = winner === 'race-winner-a1' ? 'race-winner-b2' : 'race-winner-a1';
    expect((await tryLogin(t.app, u.email, winner)).status).toBe(200);
    expect((await tryLogin(t.app, u.email, loser)).status).toBe(401);
  });

  it('voids an older link when a newer one is sent', async () => {
    const u = await freshUser(t.app, admin, 'reset-newer');
    const older = (await resetTokenFor(u.id, u.email)).token;
    const newer = (await resetTokenFor(u.id, u.email)).token;
    expectValidation(await useReset(older, 'older-link-pw-1'), ['token']);
    expect((await useReset(newer, 'newer-link-pw-1')).status).toBe(200);
    expect((await tryLogin(t.app, u.email, 'newer-link-pw-1')).status).toBe(200);
  });

  it('voids an outstanding link once the password is changed', async () => {
    const u = await freshUser(t.app, admin, 'reset-voided');
    const link = (await resetTokenFor(u.id, u.email)).token;
    const changed = await call(t.app, 'PUT', `/api/users/${u.id}/password`, {
      token: u.token,
      body: { currentPassword: u.password, newPassword: 'changed-pw-123', confirmPassword: 'changed-pw-123' },
    });
    expect(changed.status).toBe(200);
    expectValidation(await useReset(link, 'stale-link-pw-1'), ['token']);
    expect((await tryLogin(t.app, u.email, 'changed-pw-123')).status).toBe(200);
  });

  it('refuses an unknown token with 422 on token', async () => {
    for (const token of [randomToken(), 'not-a-token', "' OR 1=1 --"]) expectValidation(await useReset(token, 'whatever-pw-123'), ['token']);
  });

  it('refuses an expired link with 422 on token and leaves the password unchanged', async () => {
    const u = await freshUser(t.app, admin, 'reset-expired');
    const { token } = await resetTokenFor(u.id, u.email);
    await t.runtime.db.query(sql`update password_resets set expires_at = now() - interval '1 second' where token_hash = ${tokenHash(token)}`);
    expectValidation(await useReset(token, 'too-late-pw-123'), ['token']);
    expect((await tryLogin(t.app, u.email, u.password)).status).toBe(200);
    expect((await tryLogin(t.app, u.email, 'too-late-pw-123')).status).toBe(401);
  });

  it('validates the new password without spending the link', async () => {
    const u = await freshUser(t.app, admin, 'reset-short');
    const { token } = await resetTokenFor(u.id, u.email);
    expectValidation(await useReset(token, 'short'), ['newPassword']);
    expectValidation(await useReset(token, 'x'.repeat(129)), ['newPassword']);
    expectValidation(await call(t.app, 'POST', '/api/auth/reset-password', { body: { token } }), ['newPassword']);
    expectValidation(await call(t.app, 'POST', '/api/auth/reset-password', { body: { newPassword: 'long-enough-pw' } }), ['token']);
    expectValidation(await call(t.app, 'POST', '/api/auth/reset-password', { body: { token, newPassword: 'long-enough-pw', confirm: 'x' } }), ['confirm']);
    expect((await call(t.app, 'POST', '/api/auth/reset-password', { body: 'token=abc' })).status).toBe(400);
    // Still usable after all the refusals.
    expect((await useReset(token, 'exactly8')).status).toBe(200);
    expect((await tryLogin(t.app, u.email, 'exactly8')).status).toBe(200);
  });

  it("refuses a request whose e-mail is not the user's with 422 on email, and sends nothing", async () => {
    const u = await freshUser(t.app, admin, 'reset-mismatch');
    const other = await freshUser(t.app, admin, 'reset-mismatch-other');
    const res = await requestReset(u.id, other.email);
    expectValidation(res, ['email']);
    expectValidation(await requestReset(u.id, 'not-an-address'), ['email']);
    expect(await outboxFor(u.email)).toHaveLength(0);
    expect(await outboxFor(other.email)).toHaveLength(0);
  });

  it('accepts the e-mail in another letter case', async () => {
    const u = await freshUser(t.app, admin, 'reset-case');
    expect((await requestReset(u.id, u.email.toUpperCase())).status).toBe(200);
    expect(await outboxFor(u.email)).toHaveLength(1);
  });

  it('404 for an unknown user', async () => {
    const res = await requestReset(999_999, 'nobody@example.com');
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ success: false, error: 'User not found' });
  });

  it('is for administrators only: 403 for a user, even for their own account or with every users permission', async () => {
    const u = await freshUser(t.app, admin, 'reset-forbidden');
    const victim = await freshUser(t.app, admin, 'reset-forbidden-victim');
    const forbidden = { success: false, error: 'Insufficient permissions' };
    expect((await requestReset(victim.id, victim.email, u.token)).body).toEqual(forbidden);
    expect((await requestReset(u.id, u.email, u.token)).status).toBe(403);

    const granted = await call(t.app, 'PUT', `/api/users/${u.id}/permissions`, {
      token: admin,
      body: { permissions: [{ resource: 'users', actions: ['read', 'create', 'update', 'delete'] }] },
    });
    expect(granted.status).toBe(200);
    const res = await requestReset(victim.id, victim.email, u.token);
    expect(res.status).toBe(403);
    expect(res.body).toEqual(forbidden);
    expect(await outboxFor(victim.email)).toHaveLength(0);
    expect(await outboxFor(u.email)).toHaveLength(0);
  });

  it('401 without a token', async () => {
    const u = await freshUser(t.app, admin, 'reset-anon');
    expectAuthRequired(await call(t.app, 'POST', `/api/users/${u.id}/reset-password`, { body: { email: u.email } }));
    expect(await outboxFor(u.email)).toHaveLength(0);
  });
});

describe('GET /reset-password', () => {
  it('serves a self-contained HTML page whose form posts to the reset endpoint', async () => {
    const res = await call(t.app, 'GET', '/reset-password?token=abc');
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const html = res.body as string;
    expect(typeof html).toBe('string');
    expect(html).toMatch(/<form[\s>]/i);
    expect(html).toMatch(/type="password"/);
    expect(html).toContain('/api/auth/reset-password');
    expect(html).toContain('newPassword');
    // No external assets: no absolute or protocol-relative URLs, no @import.
    expect(html).not.toMatch(/https?:\/\//i);
    expect(html).not.toMatch(/(?:src|href|action)\s*=\s*["']?\s*\/\//i);
    expect(html).not.toMatch(/url\(\s*["']?\s*(?:https?:)?\/\//i);
    expect(html).not.toMatch(/@import/i);
    expect(html).not.toMatch(/<(?:script|img|iframe)[^>]*\ssrc=/i);
    expect(html).not.toMatch(/<link[^>]*\shref=/i);
  });

  it('needs no token to be served', async () => {
    const res = await call(t.app, 'GET', '/reset-password');
    expect(res.status).toBe(200);
    expect(res.body).toMatch(/<form[\s>]/i);
  });
});
