import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomToken } from '../../../src/auth/tokens.js';
import { sql } from '../../../core/db/sql.js';
import { call, type CallResult, type TestApp } from '../../support/app.js';
import { appWithAdmin, freshEmail, freshUser, nextIp, tryLogin } from '../../support/auth.js';

/**
 * Hostile tests of the auth throttles: every burst is fired truly concurrently against the real
 * app and store (Promise.all over app.request), so a check-then-count race shows as too many 401s.
 */

let t: TestApp;
let admin: string;
beforeAll(async () => ({ t, admin } = await appWithAdmin()));
afterAll(() => t?.close());

const statuses = (results: CallResult[]) => {
  const counts: Record<number, number> = {};
  for (const r of results) counts[r.status] = (counts[r.status] ?? 0) + 1;
  return counts;
};

function expectThrottled(res: CallResult): void {
  expect(res.status, JSON.stringify(res.body)).toBe(429);
  expect(res.body.success).toBe(false);
  expect(typeof res.body.error).toBe('string');
  const retryAfter = Number(res.headers.get('retry-after'));
  expect(retryAfter).toBeGreaterThan(0);
  expect(retryAfter).toBeLessThanOrEqual(900);
}

const together = <T>(n: number, fn: (i: number) => Promise<T>) => Promise.all(Array.from({ length: n }, (_, i) => fn(i)));

describe('login throttles hold under concurrency', () => {
  it('one address guessing one account: of 25 concurrent wrong passwords exactly 10 are checked, 15 answer 429', async () => {
    const u = await freshUser(t.app, admin, 'pair-burst');
    const ip = nextIp();
    const results = await together(25, (i) => tryLogin(t.app, u.email, `wrong-password-${i}`, ip));
    expect(statuses(results)).toEqual({ 401: 10, 429: 15 });
    for (const r of results.filter((r) => r.status === 429)) expectThrottled(r);
    // The right password from that address is refused too; from another address it works.
    expectThrottled(await tryLogin(t.app, u.email, u.password, ip));
    expect((await tryLogin(t.app, u.email, u.password, nextIp())).status).toBe(200);
  });

  it('concurrent right-password logins of one account from one address all succeed: attempts under way wait for a place, they are not refused', async () => {
    const u = await freshUser(t.app, admin, 'pair-busy');
    const ip = nextIp();
    const results = await together(40, () => tryLogin(t.app, u.email, u.password, ip));
    expect(statuses(results)).toEqual({ 200: 40 });
  });

  it('one address spraying many accounts: of 40 concurrent attempts exactly 30 are checked', async () => {
    const ip = nextIp();
    const results = await together(40, () => tryLogin(t.app, freshEmail('spray'), 'Password123', ip));
    expect(statuses(results)).toEqual({ 401: 30, 429: 10 });
    const bystander = await freshUser(t.app, admin, 'spray-bystander');
    expectThrottled(await tryLogin(t.app, bystander.email, bystander.password, ip));
    expect((await tryLogin(t.app, bystander.email, bystander.password, nextIp())).status).toBe(200);
  });

  it('many addresses guessing one account: of 60 concurrent wrong passwords from 60 addresses exactly 50 are checked', async () => {
    const u = await freshUser(t.app, admin, 'distributed');
    const results = await together(60, (i) => tryLogin(t.app, u.email, `wrong-password-${i}`, nextIp()));
    expect(statuses(results)).toEqual({ 401: 50, 429: 10 });
    // A further guess from a fresh address is refused unchecked…
    expectThrottled(await tryLogin(t.app, u.email, u.password, nextIp()));
  });

  it('answers an unknown e-mail exactly as a known one (the throttle does not reveal accounts)', async () => {
    const known = await freshUser(t.app, admin, 'reveal-known');
    const unknown = freshEmail('reveal-unknown');
    for (const email of [known.email, unknown]) {
      const ip = nextIp();
      const results = await together(12, (i) => tryLogin(t.app, email, `wrong-password-${i}`, ip));
      expect(statuses(results), email).toEqual({ 401: 10, 429: 2 });
    }
  });
});

describe('the account owner is not locked out by an attacker', () => {
  it('ten wrong passwords from one address lock that address out of the account, not the owner', async () => {
    const u = await freshUser(t.app, admin, 'owner');
    const attacker = nextIp();
    for (let i = 1; i <= 10; i++) expect((await tryLogin(t.app, u.email, `wrong-${i}-password`, attacker)).status).toBe(401);
    expectThrottled(await tryLogin(t.app, u.email, u.password, attacker));
    // The owner, from any other address, signs in.
    expect((await tryLogin(t.app, u.email, u.password, nextIp())).status).toBe(200);
    expect((await tryLogin(t.app, u.email, u.password, nextIp())).status).toBe(200);
  });

  it('distributed guessing past the account limit refuses new addresses but not one the owner signed in from', async () => {
    const home = nextIp();
    const u = await freshUser(t.app, admin, 'owner-home');
    expect((await tryLogin(t.app, u.email, u.password, home)).status).toBe(200);
    const results = await together(55, (i) => tryLogin(t.app, u.email, `wrong-password-${i}`, nextIp()));
    expect(statuses(results)).toEqual({ 401: 50, 429: 5 });
    // The owner from the address they signed in from before: in.
    expect((await tryLogin(t.app, u.email, u.password, home)).status).toBe(200);
    // Anyone from an address never seen for this account: refused unchecked, with the right password too.
    expectThrottled(await tryLogin(t.app, u.email, u.password, nextIp()));
  });

  it('counts an IPv6 client by its /64, so rotating addresses inside one network does not help', async () => {
    const u = await freshUser(t.app, admin, 'v6');
    const net = `2001:db8:${((Math.random() * 0xffff) | 0).toString(16)}:7`;
    const results = await together(14, (i) => tryLogin(t.app, u.email, `wrong-password-${i}`, `${net}::${(i + 1).toString(16)}`));
    expect(statuses(results)).toEqual({ 401: 10, 429: 4 });
    expectThrottled(await tryLogin(t.app, u.email, u.password, `${net}:0:0:0:beef`));
    expect((await tryLogin(t.app, u.email, u.password, `${net.replace(/:7$/, ':8')}::1`)).status).toBe(200);
  });

  it('a successful login clears its address\'s failures on that account, but not the address\'s count across accounts', async () => {
    const u = await freshUser(t.app, admin, 'clears');
    const ip = nextIp();
    for (let i = 1; i <= 9; i++) expect((await tryLogin(t.app, u.email, `wrong-${i}-password`, ip)).status).toBe(401);
    expect((await tryLogin(t.app, u.email, u.password, ip)).status).toBe(200);
    for (let i = 1; i <= 10; i++) expect((await tryLogin(t.app, u.email, `again-${i}-password`, ip)).status, `after success ${i}`).toBe(401);
    expectThrottled(await tryLogin(t.app, u.email, u.password, ip));
    // 19 failures from the address so far: 11 more on other accounts reach its limit of 30.
    for (let i = 1; i <= 11; i++) expect((await tryLogin(t.app, freshEmail('clears-other'), 'some-password', ip)).status).toBe(401);
    expectThrottled(await tryLogin(t.app, freshEmail('clears-other'), 'some-password', ip));
  });

  it('counts the address the trusted proxy saw, not ones the client prepends to X-Forwarded-For', async () => {
    const u = await freshUser(t.app, admin, 'spoof');
    const ip = nextIp();
    await together(10, (i) => tryLogin(t.app, u.email, `wrong-password-${i}`, ip));
    const spoofed = await call(t.app, 'POST', '/api/auth/login', {
      body: { email: u.email, password: u.password },
      headers: { 'x-forwarded-for': `${nextIp()}, ${nextIp()}, ${ip}` },
    });
    expectThrottled(spoofed);
  });

  it('forgets the failures once their 15-minute window has passed', async () => {
    const u = await freshUser(t.app, admin, 'window');
    const ip = nextIp();
    await together(12, (i) => tryLogin(t.app, u.email, `wrong-password-${i}`, ip));
    const refused = await tryLogin(t.app, u.email, u.password, ip);
    expectThrottled(refused);
    // Arrange: the window began ten minutes ago, so about five minutes remain…
    await t.runtime.db.query(sql`update auth_throttles set window_start = now() - interval '10 minutes' where key like ${`%${u.email}%`}`);
    const later = await tryLogin(t.app, u.email, u.password, ip);
    expectThrottled(later);
    expect(Number(later.headers.get('retry-after'))).toBeGreaterThan(240);
    expect(Number(later.headers.get('retry-after'))).toBeLessThanOrEqual(300);
    // …and once it is over, the address may try again.
    await t.runtime.db.query(sql`update auth_throttles set window_start = now() - interval '16 minutes' where key like ${`%${u.email}%`}`);
    expect((await tryLogin(t.app, u.email, u.password, ip)).status).toBe(200);
  });
});

describe('POST /api/auth/reset-password throttling', () => {
  const junk = (ip: string) => call(t.app, 'POST', '/api/auth/reset-password', { body: { token: randomToken(), newPassword: 'junk-password-1' }, ip });

  it('refuses an address after 10 unknown tokens, concurrently too; other addresses are unaffected', async () => {
    const ip = nextIp();
    const results = await together(16, () => junk(ip));
    expect(statuses(results)).toEqual({ 422: 10, 429: 6 });
    for (const r of results.filter((r) => r.status === 429)) expectThrottled(r);
    expect((await junk(nextIp())).status).toBe(422);
  });
});
