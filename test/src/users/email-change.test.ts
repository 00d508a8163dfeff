import type { ParsedMail } from 'mailparser';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertApiToken } from '../../../src/auth/store.js';
import { randomToken, tokenHash } from '../../../src/auth/tokens.js';
import { sql } from '../../../core/db/sql.js';
import { call, type CallResult, type TestApp } from '../../support/app.js';
import { activityOf, appWithAdmin, expectValidation, freshEmail, freshUser, nextIp, outboxFor, tryLogin } from '../../support/auth.js';

/**
 * Hostile tests of account changes a signed-in session (or a stolen token) can make to itself:
 * the e-mail address (the login, and where reset links go) and the password.
 */

let t: TestApp;
let admin: string;
beforeAll(async () => ({ t, admin } = await appWithAdmin()));
afterAll(() => t?.close());

const CONFIRM_LINK = /http:\/\/tailhouse\.test\/confirm-email\?token=([A-Za-z0-9_%.~-]+)/;
const mails = (email: string) => outboxFor(t.dataDir, email);
const linkIn = (mail: ParsedMail) => {
  const match = CONFIRM_LINK.exec(mail.text ?? '');
  return match ? decodeURIComponent(match[1]!) : undefined;
};

const changeEmail = (id: number, token: string, body: Record<string, unknown>) => call(t.app, 'PUT', `/api/users/${id}`, { token, body });
const confirm = (token: string, ip = nextIp()) => call(t.app, 'POST', '/api/auth/confirm-email', { body: { token }, ip });
const record = async (id: number) => (await call(t.app, 'GET', `/api/users/${id}`, { token: admin })).body.data;

async function personalToken(userId: number): Promise<string> {
  const token = randomToken('thk_');
  await insertApiToken(t.runtime.db, { userId, name: 'ci', hash: tokenHash(token) });
  return token;
}

describe("changing one's own e-mail address", () => {
  it('needs the current password: 422 without it or with a wrong one; nothing changes and nothing is sent', async () => {
    const u = await freshUser(t.app, admin, 'needs-pw');
    const target = freshEmail('needs-pw-new');
    expectValidation(await changeEmail(u.id, u.token, { email: target }), ['currentPassword']);
    expectValidation(await changeEmail(u.id, u.token, { email: target, currentPassword: 'not-my-password' }), ['currentPassword']);
    expect((await record(u.id)).email).toBe(u.email);
    expect(await mails(target)).toHaveLength(0);
  });

  it('is refused to a personal access token (403), even with the right password', async () => {
    const u = await freshUser(t.app, admin, 'pat-email');
    const pat = await personalToken(u.id);
    const target = freshEmail('pat-email-new');
    const res = await changeEmail(u.id, pat, { email: target, currentPassword: u.password });
    expect(res.status).toBe(403);
    expect(res.body.success).toBe(false);
    expect(res.body.error).toMatch(/personal access token/);
    expect((await record(u.id)).email).toBe(u.email);
    expect(await mails(target)).toHaveLength(0);
    // The token still does what a machine needs, e.g. renaming.
    expect((await changeEmail(u.id, pat, { name: 'Renamed by CI' })).status).toBe(200);
  });

  it('applies only through the link mailed to the new address; the old address is told', async () => {
    const u = await freshUser(t.app, admin, 'confirm');
    const target = freshEmail('confirm-new');
    const res = await changeEmail(u.id, u.token, { email: target, name: 'Now Named', currentPassword: u.password });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    // The User as it is now: the name applied, the e-mail still the old one until confirmed.
    expect(res.body.data).toMatchObject({ id: u.id, email: u.email, name: 'Now Named' });
    expect(res.body.message).toContain(target);
    expect((await tryLogin(t.app, target, u.password)).status).toBe(401);

    const [mail] = await mails(target);
    const token = linkIn(mail!);
    expect(token).toBeDefined();
    expect(JSON.stringify(res.body)).not.toContain(token!);

    const confirmed = await confirm(token!);
    expect(confirmed.status).toBe(200);
    expect(confirmed.body.message).toContain(target);
    expect((await record(u.id)).email).toBe(target);
    expect((await tryLogin(t.app, target, u.password)).status).toBe(200);
    expect((await tryLogin(t.app, u.email, u.password)).status).toBe(401);
    // Single use.
    expectValidation(await confirm(token!), ['token']);
    // The old address is told, without a link.
    const notice = (await mails(u.email)).at(-1)!;
    expect(notice.text).toContain(target);
    expect(linkIn(notice)).toBeUndefined();
    const actions = (await activityOf(t.app, admin, u.id)).map((a) => a.action);
    expect(actions).toEqual(expect.arrayContaining(['user.email_change_request', 'user.email_change']));
  });

  it("answers the same for another user's address as for a free one (no 409), mails it no link, and changes nothing", async () => {
    const attacker = await freshUser(t.app, admin, 'prober');
    const victim = await freshUser(t.app, admin, 'probed');
    const free = freshEmail('probe-free');
    const shape = (res: CallResult, address: string) => ({
      status: res.status,
      keys: Object.keys(res.body).sort(),
      data: { ...res.body.data, updatedAt: 'x' },
      message: String(res.body.message).replace(address, 'ADDRESS'),
    });
    const taken = await changeEmail(attacker.id, attacker.token, { email: victim.email.toUpperCase(), currentPassword: attacker.password });
    const untaken = await changeEmail(attacker.id, attacker.token, { email: free, currentPassword: attacker.password });
    expect(taken.status).toBe(200);
    expect(shape(taken, victim.email)).toEqual(shape(untaken, free));
    expect((await record(attacker.id)).email).toBe(attacker.email);
    // The owner of the taken address gets a note, not a link.
    const note = (await mails(victim.email)).at(-1)!;
    expect(note).toBeDefined();
    expect(linkIn(note)).toBeUndefined();
    expect((await tryLogin(t.app, victim.email, victim.password)).status).toBe(200);
  });

  it('a newer request voids the older link; an unknown link is 422', async () => {
    const u = await freshUser(t.app, admin, 'newer');
    const first = freshEmail('newer-first');
    const second = freshEmail('newer-second');
    expect((await changeEmail(u.id, u.token, { email: first, currentPassword: u.password })).status).toBe(200);
    expect((await changeEmail(u.id, u.token, { email: second, currentPassword: u.password })).status).toBe(200);
    expectValidation(await confirm(linkIn((await mails(first))[0]!)!), ['token']);
    expectValidation(await confirm(randomToken()), ['token']);
    expect((await confirm(linkIn((await mails(second))[0]!)!)).status).toBe(200);
    expect((await record(u.id)).email).toBe(second);
  });

  it('an expired link is refused', async () => {
    const u = await freshUser(t.app, admin, 'expired');
    const target = freshEmail('expired-new');
    expect((await changeEmail(u.id, u.token, { email: target, currentPassword: u.password })).status).toBe(200);
    const token = linkIn((await mails(target))[0]!)!;
    await t.runtime.db.query(sql`update email_changes set expires_at = now() - interval '1 second' where token_hash = ${tokenHash(token)}`);
    expectValidation(await confirm(token), ['token']);
    expect((await record(u.id)).email).toBe(u.email);
  });

  it('a confirmed change voids the reset links sent to the old address', async () => {
    const u = await freshUser(t.app, admin, 'voids-reset');
    expect((await call(t.app, 'POST', `/api/users/${u.id}/reset-password`, { token: admin, body: { email: u.email } })).status).toBe(200);
    const resetToken = decodeURIComponent(/reset-password\?token=([A-Za-z0-9_%.~-]+)/.exec((await mails(u.email)).at(-1)!.text!)![1]!);
    const target = freshEmail('voids-reset-new');
    expect((await changeEmail(u.id, u.token, { email: target, currentPassword: u.password })).status).toBe(200);
    expect((await confirm(linkIn((await mails(target))[0]!)!)).status).toBe(200);
    expectValidation(await call(t.app, 'POST', '/api/auth/reset-password', { body: { token: resetToken, newPassword: 'via-old-link-1' }, ip: nextIp() }), ['token']);
  });

  it('limits e-mail change requests to 5 per user per 15 minutes (each sends a mail)', async () => {
    const u = await freshUser(t.app, admin, 'quota');
    for (let i = 1; i <= 5; i++) expect((await changeEmail(u.id, u.token, { email: freshEmail('quota-new'), currentPassword: u.password })).status).toBe(200);
    const sixth = freshEmail('quota-new');
    const res = await changeEmail(u.id, u.token, { email: sixth, currentPassword: u.password });
    expect(res.status).toBe(429);
    expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(await mails(sixth)).toHaveLength(0);
  });

  it('an unknown confirmation link is throttled per client address', async () => {
    const ip = nextIp();
    const results = await Promise.all(Array.from({ length: 14 }, () => confirm(randomToken(), ip)));
    expect(results.filter((r) => r.status === 422)).toHaveLength(10);
    expect(results.filter((r) => r.status === 429)).toHaveLength(4);
  });
});

describe("an administrator changing another user's e-mail", () => {
  it('applies at once, and answers 409 for a taken address', async () => {
    const u = await freshUser(t.app, admin, 'by-admin');
    const other = await freshUser(t.app, admin, 'by-admin-other');
    const target = freshEmail('by-admin-new');
    const res = await changeEmail(u.id, admin, { email: target });
    expect(res.status).toBe(200);
    expect(res.body.data.email).toBe(target);
    expect(res.body).not.toHaveProperty('message');
    expect((await changeEmail(u.id, admin, { email: other.email })).status).toBe(409);
  });
});

describe('current-password guesses are throttled', () => {
  const changePassword = (u: { id: number; token: string }, currentPassword: string) =>
    call(t.app, 'PUT', `/api/users/${u.id}/password`, { token: u.token, body: { currentPassword, newPassword: 'new-password-1', confirmPassword: 'new-password-1' } });

  it('of 15 concurrent wrong guesses 10 are checked (422), 5 refused (429); then the right one is refused too', async () => {
    const u = await freshUser(t.app, admin, 'guess');
    const results = await Promise.all(Array.from({ length: 15 }, (_, i) => changePassword(u, `guess-${i}-password`)));
    expect(results.filter((r) => r.status === 422)).toHaveLength(10);
    const refused = results.filter((r) => r.status === 429);
    expect(refused).toHaveLength(5);
    expect(Number(refused[0]!.headers.get('retry-after'))).toBeGreaterThan(0);
    expect((await changePassword(u, u.password)).status).toBe(429);
    // The e-mail change checks the same password and shares the limit.
    expect((await changeEmail(u.id, u.token, { email: freshEmail('guess-new'), currentPassword: u.password })).status).toBe(429);
    expect((await tryLogin(t.app, u.email, u.password)).status).toBe(200);
  });

  it('a right current password clears earlier wrong guesses', async () => {
    const u = await freshUser(t.app, admin, 'guess-clear');
    for (let i = 1; i <= 9; i++) expect((await changePassword(u, `guess-${i}-password`)).status).toBe(422);
    expect((await changeEmail(u.id, u.token, { email: freshEmail('guess-clear-new'), currentPassword: u.password })).status).toBe(200);
    for (let i = 1; i <= 10; i++) expect((await changePassword(u, `again-${i}-password`)).status).toBe(422);
    expect((await changePassword(u, 'again-11-password')).status).toBe(429);
  });
});
