/**
 * Invitations to a domain by e-mail address (issue 33 part 3; docs/reference/domains.md#invitations):
 * the mail through a real SMTP server and its link creating the account and the membership; the
 * same answer, and the same traces for the inviter, whether or not the address has an account;
 * links that are used, expired, forged, withdrawn or void refused alike; who may invite, list and
 * withdraw; an invitation reaching no other domain than its own.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../../core/log.js';
import { sql } from '../../../core/db/sql.js';
import { randomToken, tokenHash } from '../../../src/auth/tokens.js';
import { DEFAULT_USER_PERMISSIONS } from '../../../src/users/permissions.js';
import { call, type CallResult, type TestApp } from '../../support/app.js';
import { activityOf, appWithAdmin, freshEmail, freshUser, mailRecipients, nextIp, tryLogin } from '../../support/auth.js';
import { startSmtpSink, type SmtpSink } from '../../support/smtp-sink.js';
import { registerDomain } from '../../support/domains.js';

let sink: SmtpSink;
let t: TestApp;
let admin: string;
/** Every line the server logged, at debug level: the last test holds them to no token and no mail body. */
const logLines: string[] = [];
beforeAll(async () => {
  sink = await startSmtpSink();
  const log = createLogger('debug', { write: (line: string) => void logLines.push(line) });
  ({ t, admin } = await appWithAdmin({ SMTP_URL: sink.url, MAIL_FROM: 'tailhouse <noreply@tailhouse.test>' }, { log }));
});
afterAll(async () => {
  await t?.close();
  await sink?.close();
});

const NOT_FOUND = { success: false, error: 'Domain not found' };
const FORBIDDEN = { success: false, error: 'Insufficient permissions' };
const SENT = { status: 202, body: { success: true, message: 'Invitation sent' } };
const INVALID_LINK = { success: false, error: 'Validation failed', details: { token: 'Invitation link is unknown, already used or expired' } };
const LINK = /http:\/\/tailhouse\.test\/accept-invitation\?token=([A-Za-z0-9_%.~-]+)(&account=existing)?/;

type Person = Awaited<ReturnType<typeof freshUser>>;

const domainOf = (owner: Person) => registerDomain(t.app, admin, { ownerId: owner.id, tag: 'invite' });

const invite = (domainId: number, token: string, body: Record<string, unknown>) => call(t.app, 'POST', `/api/domains/${domainId}/members`, { token, body });
const pending = async (domainId: number, token: string) => {
  const res = await call(t.app, 'GET', `/api/domains/${domainId}/invitations`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.data.invitations as { id: number; email: string; role: string; invitedBy: number; expiresAt: string; createdAt: string }[];
};
const membersOf = async (domainId: number, token: string) => {
  const res = await call(t.app, 'GET', `/api/domains/${domainId}/members`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return res.body.data.members as { userId: number; role: string }[];
};
const accept = (body: Record<string, unknown>) => call(t.app, 'POST', '/api/invitations/accept', { body, ip: nextIp() });

/** The link of the latest invitation mailed to `email` (waiting for it), and whether it is for an existing account. */
async function linkFor(email: string, nth = 1): Promise<{ token: string; existing: boolean; text: string }> {
  const deadline = Date.now() + 10_000;
  let mails = sink.messages.filter((m) => mailRecipients(m).includes(email));
  while (mails.length < nth && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 25));
    mails = sink.messages.filter((m) => mailRecipients(m).includes(email));
  }
  expect(mails.length, `mails to ${email}`).toBeGreaterThanOrEqual(nth);
  const text = mails[nth - 1]!.text ?? '';
  const match = LINK.exec(text);
  expect(match, text).not.toBeNull();
  return { token: decodeURIComponent(match![1]!), existing: match![2] !== undefined, text };
}

/** Invites `email` to the owner's new domain and returns the domain and the link's token. */
async function invited(owner: Person, email: string, role = 'viewer') {
  const domain = await domainOf(owner);
  const res = await invite(domain.id, owner.token, { email, role });
  expect({ status: res.status, body: res.body }).toEqual(SENT);
  return { domain, ...(await linkFor(email)) };
}

const expectInvalidLink = (res: CallResult) => expect({ status: res.status, body: res.body }).toEqual({ status: 422, body: INVALID_LINK });

describe('inviting an address without an account', () => {
  it('mails a link through SMTP that creates the account (a plain user, default permissions) and the membership, once', async () => {
    const owner = await freshUser(t.app, admin, 'inv-owner', { name: 'Olga Owner' });
    const email = freshEmail('newcomer');
    const domain = await domainOf(owner);
    const sent = await invite(domain.id, owner.token, { email, role: 'editor' });
    expect({ status: sent.status, body: sent.body }).toEqual(SENT);

    const [listed, ...more] = await pending(domain.id, owner.token);
    expect(more).toEqual([]);
    expect(listed).toMatchObject({ email, role: 'editor', invitedBy: owner.id });
    const week = Date.parse(listed!.expiresAt) - Date.now();
    expect(week).toBeGreaterThan(7 * 86_400_000 - 60_000);
    expect(week).toBeLessThanOrEqual(7 * 86_400_000);

    const { token, existing, text } = await linkFor(email);
    expect(existing).toBe(false);
    expect(text).toContain(domain.name);
    expect(text).toContain('Olga Owner');
    const mail = sink.messages.find((m) => mailRecipients(m).includes(email))!;
    expect(mail.subject).toBe(`[tailhouse] You are invited to ${domain.name}`);
    expect(mail.from?.value.map((v) => v.address)).toEqual(['noreply@tailhouse.test']);

    // The page the link opens.
    const page = await call(t.app, 'GET', `/accept-invitation?token=${encodeURIComponent(token)}`);
    expect(page.status).toBe(200);
    expect(page.headers.get('cache-control')).toBe('no-store');

    // Without a password no account can be made; the link is not spent by the refusal.
    const bare = await accept({ token });
    expect(bare.status).toBe(422);
    expect(Object.keys(bare.body.details)).toEqual(['password']);

    const used = await accept({ token, name: 'Nina Newcomer', password: 'newcomer-pw-1' });
    expect(used.status, JSON.stringify(used.body)).toBe(200);
    expect(used.body.message).toContain(email);

    const signedIn = await tryLogin(t.app, email, 'newcomer-pw-1');
    expect(signedIn.status).toBe(200);
    const user = signedIn.body.data.user;
    expect(user).toMatchObject({ email, name: 'Nina Newcomer', role: 'user', active: true });
    const permissions = await call(t.app, 'GET', `/api/users/${user.id}/permissions`, { token: admin });
    expect(permissions.body.data.permissions).toEqual(DEFAULT_USER_PERMISSIONS);

    // The membership, in the invitation's role; the invitation is no longer pending.
    expect((await membersOf(domain.id, owner.token)).map((m) => [m.userId, m.role])).toEqual([[user.id, 'editor']]);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: signedIn.body.data.accessToken })).status).toBe(200);
    expect(await pending(domain.id, owner.token)).toEqual([]);

    // Recorded: the invitee's account and joining, the inviter's invitation.
    const theirs = (await activityOf(t.app, admin, user.id)).map((a) => a.action);
    expect(theirs).toEqual(expect.arrayContaining(['user.create', 'domain.invitation_accept']));
    const ours = (await activityOf(t.app, admin, owner.id)).filter((a) => a.action === 'domain.member_invite');
    expect(ours.map((a) => a.details)).toEqual([`Invited ${email} to domain ${domain.name} as editor`]);

    // Once.
    expectInvalidLink(await accept({ token, name: 'Again', password: 'another-pw-2' }));
    expect((await tryLogin(t.app, email, 'another-pw-2')).status).toBe(401);
  });
});

describe('the same answer whether or not the address has an account', () => {
  it('answers, lists and records alike; the link of a registered address adds the domain to its account, password untouched', async () => {
    const owner = await freshUser(t.app, admin, 'inv-alike');
    const registered = await freshUser(t.app, admin, 'registered');
    const unregistered = freshEmail('unregistered');
    const domain = await domainOf(owner);
    const before = await membersOf(domain.id, owner.token);

    const a = await invite(domain.id, owner.token, { email: registered.email, role: 'viewer' });
    const b = await invite(domain.id, owner.token, { email: unregistered, role: 'viewer' });
    expect({ status: a.status, body: a.body }).toEqual(SENT);
    expect({ status: b.status, body: b.body }).toEqual({ status: a.status, body: a.body });
    expect([...a.headers.keys()].sort()).toEqual([...b.headers.keys()].sort());

    // Nothing the inviter sees afterwards tells them apart: no member yet, both pending alike.
    expect(await membersOf(domain.id, owner.token)).toEqual(before);
    const listed = await pending(domain.id, owner.token);
    const shape = (email: string) => {
      const { id: _id, createdAt: _c, expiresAt: _e, ...rest } = listed.find((i) => i.email === email)!;
      return { ...rest, email: 'x' };
    };
    expect(shape(registered.email)).toEqual(shape(unregistered));
    const records = (await activityOf(t.app, admin, owner.id)).filter((r) => r.action === 'domain.member_invite');
    expect(records.map((r) => r.details.replace(registered.email, 'X').replace(unregistered, 'X'))).toEqual([
      `Invited X to domain ${domain.name} as viewer`,
      `Invited X to domain ${domain.name} as viewer`,
    ]);

    // The registered address's link: the domain goes to its account; a password given is not used.
    const link = await linkFor(registered.email);
    expect(link.existing).toBe(true);
    const used = await accept({ token: link.token, password: 'not-my-password-9' });
    expect(used.status, JSON.stringify(used.body)).toBe(200);
    expect((await tryLogin(t.app, registered.email, 'not-my-password-9')).status).toBe(401);
    expect((await tryLogin(t.app, registered.email, registered.password)).status).toBe(200);
    expect((await call(t.app, 'GET', `/api/domains/${domain.id}`, { token: registered.token })).status).toBe(200);
    expect((await membersOf(domain.id, owner.token)).map((m) => [m.userId, m.role])).toEqual([[registered.id, 'viewer']]);
  });
});

describe('the mail is sent after the answer', () => {
  it('answers alike when the mail server refuses the message; the failure is only logged', async () => {
    const owner = await freshUser(t.app, admin, 'inv-refused');
    const domain = await domainOf(owner);
    const refused = freshEmail('refused');
    sink.refuse = (stage, address) => (stage === 'RCPT TO' && address === refused ? { code: 550, message: '5.1.1 mailbox unavailable' } : undefined);
    try {
      const res = await invite(domain.id, owner.token, { email: refused, role: 'viewer' });
      expect({ status: res.status, body: res.body }).toEqual(SENT);
      const deadline = Date.now() + 10_000;
      while (!sink.refusals.some((r) => r.address === refused) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 25));
      expect(sink.refusals.map((r) => r.address)).toContain(refused);
    } finally {
      sink.refuse = undefined;
    }
    expect((await pending(domain.id, owner.token)).map((i) => i.email)).toEqual([refused]);
  });
});

describe('links that do not work', () => {
  it('refuses an expired link like an unknown one, and creates nothing', async () => {
    const owner = await freshUser(t.app, admin, 'inv-expired');
    const email = freshEmail('late');
    const { domain, token } = await invited(owner, email);
    await t.runtime.db.query(sql`update domain_invitations set expires_at = now() - interval '1 second' where token_hash = ${tokenHash(token)}`);
    expectInvalidLink(await accept({ token, password: 'late-comer-pw-1' }));
    expect((await tryLogin(t.app, email, 'late-comer-pw-1')).status).toBe(401);
    expect(await membersOf(domain.id, owner.token)).toEqual([]);
    expect(await pending(domain.id, owner.token)).toEqual([]);
  });

  it('is used once: of two concurrent uses one wins, and the link is dead after', async () => {
    const owner = await freshUser(t.app, admin, 'inv-once');
    const email = freshEmail('once');
    const { domain, token } = await invited(owner, email);
    const both = await Promise.all([accept({ token, password: 'first-pw-123' }), accept({ token, password: 'second-pw-123' })]);
    expect(both.map((r) => r.status).sort()).toEqual([200, 422]);
    expectInvalidLink(both.find((r) => r.status === 422)!);
    const winner = both[0]!.status === 200 ? 'first-pw-123' : 'second-pw-123';
    const loser = winner === 'first-pw-123' ? 'second-pw-123' : 'first-pw-123';
    expect((await tryLogin(t.app, email, winner)).status).toBe(200);
    expect((await tryLogin(t.app, email, loser)).status).toBe(401);
    expect((await membersOf(domain.id, owner.token)).length).toBe(1);
    // Used, the link no longer works, even for the account it made.
    expectInvalidLink(await accept({ token }));
  });

  it('refuses forged tokens alike', async () => {
    const owner = await freshUser(t.app, admin, 'inv-forged');
    const { domain } = await invited(owner, freshEmail('forged-target'));
    for (const token of [randomToken(), 'x', `${randomToken()}A`]) expectInvalidLink(await accept({ token, password: 'forger-pw-123' }));
    expect(await membersOf(domain.id, owner.token)).toEqual([]);
  });

  it('counts unknown links against the client address: the 11th in a window is refused (429)', async () => {
    const ip = nextIp();
    for (let i = 0; i < 10; i++) {
      const res = await call(t.app, 'POST', '/api/invitations/accept', { body: { token: randomToken(), password: 'guesser-pw-1' }, ip });
      expectInvalidLink(res);
    }
    const refused = await call(t.app, 'POST', '/api/invitations/accept', { body: { token: randomToken(), password: 'guesser-pw-1' }, ip });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
  });

  it('a withdrawn invitation stops its link; a newer one for the same address voids the older', async () => {
    const owner = await freshUser(t.app, admin, 'inv-withdraw');
    const email = freshEmail('withdrawn');
    const { domain, token } = await invited(owner, email);
    const [listed] = await pending(domain.id, owner.token);
    const gone = await call(t.app, 'DELETE', `/api/domains/${domain.id}/invitations/${listed!.id}`, { token: owner.token });
    expect({ status: gone.status, body: gone.body }).toEqual({ status: 200, body: { success: true, message: 'Invitation withdrawn' } });
    expect(await pending(domain.id, owner.token)).toEqual([]);
    expectInvalidLink(await accept({ token, password: 'withdrawn-pw-1' }));
    expect((await tryLogin(t.app, email, 'withdrawn-pw-1')).status).toBe(401);
    const again = await call(t.app, 'DELETE', `/api/domains/${domain.id}/invitations/${listed!.id}`, { token: owner.token });
    expect({ status: again.status, body: again.body }).toEqual({ status: 404, body: { success: false, error: 'Invitation not found' } });
    expect((await activityOf(t.app, admin, owner.id)).map((a) => a.action)).toContain('domain.invitation_withdraw');

    // Invited twice: only the latest mail's link works.
    const other = freshEmail('twice');
    for (const role of ['viewer', 'editor']) expect((await invite(domain.id, owner.token, { email: other, role })).status).toBe(202);
    const first = await linkFor(other, 1);
    const second = await linkFor(other, 2);
    expect((await pending(domain.id, owner.token)).map((i) => [i.email, i.role])).toEqual([[other, 'editor']]);
    expectInvalidLink(await accept({ token: first.token, password: 'twice-pw-123' }));
    expect((await accept({ token: second.token, password: 'twice-pw-123' })).status).toBe(200);
  });

  it('is void once the inviter no longer manages the domain (handed over)', async () => {
    const owner = await freshUser(t.app, admin, 'inv-handover');
    const heir = await freshUser(t.app, admin, 'inv-heir');
    const email = freshEmail('orphan');
    const { domain, token } = await invited(owner, email);
    expect((await call(t.app, 'PUT', `/api/domains/${domain.id}`, { token: owner.token, body: { ownerId: heir.id } })).status).toBe(200);
    expectInvalidLink(await accept({ token, password: 'orphan-pw-123' }));
    expect(await membersOf(domain.id, heir.token)).toEqual([]);
  });
});

describe('who may invite', () => {
  it('a stranger gets 404 and a member 403, on inviting, listing and withdrawing; nothing is stored or sent', async () => {
    const owner = await freshUser(t.app, admin, 'inv-guard');
    const viewer = await freshUser(t.app, admin, 'inv-viewer');
    const editor = await freshUser(t.app, admin, 'inv-editor');
    const stranger = await freshUser(t.app, admin, 'inv-stranger');
    const domain = await domainOf(owner);
    for (const [who, role] of [[viewer, 'viewer'], [editor, 'editor']] as const) {
      expect((await invite(domain.id, owner.token, { userId: who.id, role })).status).toBe(201);
    }
    expect((await invite(domain.id, owner.token, { email: freshEmail('kept'), role: 'viewer' })).status).toBe(202);
    const [invitation] = await pending(domain.id, owner.token);
    const target = freshEmail('never');
    const cases: [Person, unknown][] = [[stranger, NOT_FOUND], [viewer, FORBIDDEN], [editor, FORBIDDEN]];
    for (const [who, refusal] of cases) {
      const status = refusal === NOT_FOUND ? 404 : 403;
      for (const res of [
        await invite(domain.id, who.token, { email: target, role: 'viewer' }),
        await call(t.app, 'GET', `/api/domains/${domain.id}/invitations`, { token: who.token }),
        await call(t.app, 'DELETE', `/api/domains/${domain.id}/invitations/${invitation!.id}`, { token: who.token }),
      ]) expect({ status: res.status, body: res.body }).toEqual({ status, body: refusal });
    }
    expect((await pending(domain.id, owner.token)).map((i) => i.id)).toEqual([invitation!.id]);
    // An administrator may: list, and invite.
    expect((await pending(domain.id, admin)).map((i) => i.id)).toEqual([invitation!.id]);
    const byAdmin = freshEmail('by-admin');
    expect((await invite(domain.id, admin, { email: byAdmin, role: 'viewer' })).status).toBe(202);
    // Mails leave in the order they were asked for: once the administrator's is in, a refused one would be too.
    await linkFor(byAdmin);
    expect(sink.messages.filter((m) => mailRecipients(m).includes(target))).toEqual([]);
  });

  it('takes exactly one of userId and email (422 otherwise)', async () => {
    const owner = await freshUser(t.app, admin, 'inv-shape');
    const domain = await domainOf(owner);
    const both = await invite(domain.id, owner.token, { userId: owner.id, email: freshEmail('both'), role: 'viewer' });
    expect(both.status).toBe(422);
    expect(Object.keys(both.body.details)).toEqual(['email']);
    const neither = await invite(domain.id, owner.token, { role: 'viewer' });
    expect(neither.status).toBe(422);
    expect(Object.keys(neither.body.details)).toEqual(['userId']);
    for (const email of ['not-an-address', '', 42]) expect((await invite(domain.id, owner.token, { email, role: 'viewer' })).status).toBe(422);
    expect((await invite(domain.id, owner.token, { email: freshEmail('role'), role: 'owner' })).status).toBe(422);
    expect(await pending(domain.id, owner.token)).toEqual([]);
  });

  it('limits an inviter to 20 invitations per 15 minutes (each sends a mail)', async () => {
    const owner = await freshUser(t.app, admin, 'inv-quota');
    const domain = await domainOf(owner);
    for (let i = 0; i < 20; i++) expect((await invite(domain.id, owner.token, { email: freshEmail('quota'), role: 'viewer' })).status).toBe(202);
    const refused = await invite(domain.id, owner.token, { email: freshEmail('quota'), role: 'viewer' });
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toMatch(/^\d+$/);
  });
});

describe('an invitation reaches its own domain only', () => {
  it('cannot be accepted into, listed in or withdrawn through another domain', async () => {
    const owner = await freshUser(t.app, admin, 'inv-cross');
    const rival = await freshUser(t.app, admin, 'inv-rival');
    const email = freshEmail('crossing');
    const { domain: mine, token } = await invited(owner, email);
    const theirs = await domainOf(rival);
    const ownSecond = await domainOf(owner);
    const [invitation] = await pending(mine.id, owner.token);

    // Another domain's path, even of the same owner, neither lists nor withdraws it.
    expect(await pending(theirs.id, rival.token)).toEqual([]);
    expect(await pending(ownSecond.id, owner.token)).toEqual([]);
    for (const [domainId, who] of [[theirs.id, rival], [ownSecond.id, owner]] as const) {
      const res = await call(t.app, 'DELETE', `/api/domains/${domainId}/invitations/${invitation!.id}`, { token: who.token });
      expect({ status: res.status, body: res.body }).toEqual({ status: 404, body: { success: false, error: 'Invitation not found' } });
    }
    // The accepting request cannot name a domain.
    for (const domainId of [theirs.id, ownSecond.id]) {
      const res = await accept({ token, password: 'crossing-pw-1', domainId });
      expect(res.status).toBe(422);
      expect(res.body.details).toEqual({ domainId: 'Unknown field' });
    }
    const used = await accept({ token, password: 'crossing-pw-1' });
    expect(used.status, JSON.stringify(used.body)).toBe(200);
    const session = (await tryLogin(t.app, email, 'crossing-pw-1')).body.data;
    expect((await call(t.app, 'GET', `/api/domains/${mine.id}`, { token: session.accessToken })).status).toBe(200);
    for (const other of [theirs, ownSecond]) {
      const res = await call(t.app, 'GET', `/api/domains/${other.id}`, { token: session.accessToken });
      expect({ status: res.status, body: res.body }).toEqual({ status: 404, body: NOT_FOUND });
      expect(await membersOf(other.id, admin)).toEqual([]);
    }
  });
});

describe('the logs', () => {
  // Last in the file: it reads what every test above had logged.
  it('hold no invitation token and no mail body, though they name the mails sent', async () => {
    const texts = sink.messages.map((m) => m.text ?? '').filter((text) => LINK.test(text));
    expect(texts.length).toBeGreaterThan(20);
    const tokens = texts.map((text) => decodeURIComponent(LINK.exec(text)![1]!));
    const logged = logLines.join('\n');
    expect(logLines.filter((line) => line.includes('"mail sent"')).length).toBeGreaterThan(20);
    expect(logLines.some((line) => line.includes('invitation e-mail could not be sent'))).toBe(true);
    for (const token of tokens) {
      expect(logged).not.toContain(token);
      expect(logged).not.toContain(encodeURIComponent(token));
      expect(logged).not.toContain(tokenHash(token));
    }
    expect(logged).not.toContain('invited you to the domain');
    expect(logged).not.toContain('accept-invitation?token');
  });
});
