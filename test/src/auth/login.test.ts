import { decodeJwt, decodeProtectedHeader } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../../core/db/sql.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, type TestApp } from '../../support/app.js';
import { activityOf, appWithAdmin, expectSession, expectValidation, freshEmail, freshUser, ISO_MS, nextIp, tryLogin, USER_FIELDS } from '../../support/auth.js';

let t: TestApp;
let admin: string;
beforeAll(async () => ({ t, admin } = await appWithAdmin()));
afterAll(() => t?.close());

const INVALID_LOGIN = { success: false, error: 'Invalid email or password' };

describe('POST /api/auth/login', () => {
  it('answers 200 with the session shape, a signed access token and the user without any password field', async () => {
    const u = await freshUser(t.app, admin, 'shape', { name: 'Shape Tester' });
    const data = expectSession(await tryLogin(t.app, u.email, u.password), u.id);
    expect(data.user).toMatchObject({ id: u.id, email: u.email, name: 'Shape Tester', role: 'user', active: true });

    expect(decodeProtectedHeader(data.accessToken).alg).toBe('HS256');
    const claims = decodeJwt(data.accessToken);
    expect(claims.sub).toBe(String(u.id));
    expect(claims.iss).toBe('tailhouse');
    expect(claims.exp! - claims.iat!).toBe(900);
    expect(Math.abs(claims.iat! - Date.now() / 1000)).toBeLessThan(60);

    // The refresh token is opaque and distinct from the access token and from other sessions.
    expect(typeof data.refreshToken).toBe('string');
    expect(data.refreshToken.length).toBeGreaterThanOrEqual(32);
    expect(data.refreshToken).not.toBe(data.accessToken);
    expect(data.refreshToken).not.toBe(u.refreshToken);

    // The access token works as a bearer token for the user's own record.
    const me = await call(t.app, 'GET', `/api/users/${u.id}`, { token: data.accessToken });
    expect(me.status).toBe(200);
    expect(me.body.data.email).toBe(u.email);
  });

  it('sets lastLoginAt on each login', async () => {
    const email = freshEmail('lastlogin');
    const created = await call(t.app, 'POST', '/api/users', { token: admin, body: { email, password: 'first-password-1' } });
    expect(created.status).toBe(201);
    expect(created.body.data.lastLoginAt).toBeNull();

    const before = Date.now();
    const first = await tryLogin(t.app, email, 'first-password-1');
    const after = Date.now();
    expect(first.status).toBe(200);
    const firstAt = first.body.data.user.lastLoginAt as string;
    expect(firstAt).toMatch(ISO_MS);
    expect(Date.parse(firstAt)).toBeGreaterThanOrEqual(before - 1000);
    expect(Date.parse(firstAt)).toBeLessThanOrEqual(after + 1000);

    const stored = await call(t.app, 'GET', `/api/users/${created.body.data.id}`, { token: admin });
    expect(stored.body.data.lastLoginAt).toBe(firstAt);

    const second = await tryLogin(t.app, email, 'first-password-1');
    expect(second.status).toBe(200);
    expect(Date.parse(second.body.data.user.lastLoginAt)).toBeGreaterThanOrEqual(Date.parse(firstAt));
  });

  it('accepts the e-mail in any letter case and with surrounding spaces', async () => {
    const u = await freshUser(t.app, admin, 'casing');
    const res = await tryLogin(t.app, `  ${u.email.toUpperCase()} `, u.password);
    expect(res.status).toBe(200);
    expect(res.body.data.user.id).toBe(u.id);
  });

  it('answers a wrong password, an unknown e-mail and an inactive account with the same 401', async () => {
    const u = await freshUser(t.app, admin, 'alike');
    const inactiveEmail = freshEmail('inactive');
    const inactive = await call(t.app, 'POST', '/api/users', { token: admin, body: { email: inactiveEmail, password: 'inactive-password-1', active: false } });
    expect(inactive.status).toBe(201);
    expect(inactive.body.data.active).toBe(false);

    const wrongPassword = await tryLogin(t.app, u.email, 'not-the-password');
    const unknownEmail = await tryLogin(t.app, freshEmail('nobody'), u.password);
    const inactiveAccount = await tryLogin(t.app, inactiveEmail, 'inactive-password-1');
    for (const res of [wrongPassword, unknownEmail, inactiveAccount]) {
      expect(res.status).toBe(401);
      expect(res.body).toEqual(INVALID_LOGIN);
    }
    // A failed login does not count as a login.
    const stored = await call(t.app, 'GET', `/api/users/${inactive.body.data.id}`, { token: admin });
    expect(stored.body.data.lastLoginAt).toBeNull();
  });

  it('spends the same password-hashing work on an unknown e-mail as on a wrong password (no enumeration by timing)', async () => {
    const u = await freshUser(t.app, admin, 'timing');
    const timed = async (email: string) => {
      const started = performance.now();
      const res = await tryLogin(t.app, email, 'timing-wrong-password');
      expect(res.status).toBe(401);
      return performance.now() - started;
    };
    const known: number[] = [];
    const unknown: number[] = [];
    // Interleaved, so both kinds run under the same load; medians, so one hiccup does not decide.
    for (let i = 0; i < 5; i++) {
      known.push(await timed(u.email));
      unknown.push(await timed(freshEmail('timing-nobody')));
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    // Without the dummy hash an unknown e-mail answers in about a millisecond, a small fraction of an argon2id verify.
    expect(median(unknown)).toBeGreaterThan(median(known) * 0.4);
  });

  it("records a failed login in that account's activity as login.failed, with the client address", async () => {
    const u = await freshUser(t.app, admin, 'failed');
    const ip = nextIp();
    expect((await tryLogin(t.app, u.email, 'wrong-password-1', ip)).status).toBe(401);
    expect((await tryLogin(t.app, u.email, 'wrong-password-2', ip)).status).toBe(401);

    const failed = (await activityOf(t.app, admin, u.id)).filter((a) => a.action === 'login.failed');
    expect(failed).toHaveLength(2);
    for (const entry of failed) {
      expect(entry).toMatchObject({ resource: `users/${u.id}`, ipAddress: ip, userAgent: 'vitest' });
      expect(entry.details).not.toContain('wrong-password');
    }
  });

  it('records a refused login of a deactivated account as login.failed too', async () => {
    const u = await freshUser(t.app, admin, 'deact-failed');
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    const ip = nextIp();
    const res = await tryLogin(t.app, u.email, u.password, ip);
    expect(res.status).toBe(401);
    expect(res.body).toEqual(INVALID_LOGIN);
    const failed = (await activityOf(t.app, admin, u.id)).filter((a) => a.action === 'login.failed');
    expect(failed).toHaveLength(1);
    expect(failed[0]!.ipAddress).toBe(ip);
  });

  describe('validation', () => {
    const post = (body: unknown) => call(t.app, 'POST', '/api/auth/login', { body, ip: nextIp() });

    it('422 with details.email for a missing e-mail', async () => {
      const res = await post({ password: 'some-password' });
      expectValidation(res, ['email']);
      expect(res.body.details).not.toHaveProperty('password');
    });

    it('422 with details.password for a missing or empty password', async () => {
      const missing = await post({ email: ADMIN_EMAIL });
      expectValidation(missing, ['password']);
      expect(missing.body.details).not.toHaveProperty('email');
      expectValidation(await post({ email: ADMIN_EMAIL, password: '' }), ['password']);
    });

    it('422 naming both fields when both are missing', async () => {
      const res = await post({});
      expectValidation(res, ['email', 'password']);
    });

    it('422 with details naming an unknown field', async () => {
      const res = await post({ email: ADMIN_EMAIL, password: ADMIN_PASSWORD, rememberMe: true });
      expectValidation(res, ['rememberMe']);
    });

    it('422 for an e-mail that is not an address or not a string', async () => {
      expectValidation(await post({ email: 'not-an-email', password: 'some-password' }), ['email']);
      expectValidation(await post({ email: 42, password: 'some-password' }), ['email']);
      expectValidation(await post({ email: ADMIN_EMAIL, password: 12345678 }), ['password']);
    });

    it('400 for a body that is not JSON', async () => {
      for (const body of ['{"email": "admin@example.com", "password":', 'email=admin@example.com&password=x', '']) {
        const res = await post(body);
        expect(res.status, JSON.stringify(body)).toBe(400);
        expect(res.body.success).toBe(false);
        expect(typeof res.body.error).toBe('string');
        expect(res.body).not.toHaveProperty('data');
      }
    });

    it('400 for a body sent with another content type', async () => {
      const res = await call(t.app, 'POST', '/api/auth/login', {
        body: JSON.stringify({ email: ADMIN_EMAIL, password: ADMIN_PASSWORD }),
        headers: { 'content-type': 'text/plain' },
        ip: nextIp(),
      });
      expect(res.status).toBe(400);
      expect(res.body.success).toBe(false);
    });
  });
});

// Throttling: test/src/auth/throttle.test.ts.

describe('hostile input', () => {
  const HOSTILE = [
    "' OR 1=1 --",
    "admin@example.com' --",
    "' OR '1'='1",
    '"; drop table users; --',
    "'); delete from users; --",
    '\\',
    'a\\b@example.com',
    '%',
    '%@example.com',
    '_dmin@example.com',
    '%@%',
    'admin@example.com%',
    'ädmïn@exämple.com',
    '管理者@例え.jp',
    '🔥🔥🔥🔥🔥🔥🔥🔥',
    "' UNION SELECT password_hash FROM users --",
  ];

  it('answers SQL metacharacters and unicode in e-mail and password with 401 or 422, never 500, and leaves the users table intact', async () => {
    const victim = await freshUser(t.app, admin, 'hostile-victim');
    const before = await call(t.app, 'GET', '/api/users?limit=100', { token: admin });
    expect(before.status).toBe(200);
    const ip = nextIp();
    const statuses: number[] = [];
    for (const value of HOSTILE) {
      for (const body of [
        { email: value, password: value },
        { email: value, password: victim.password },
        { email: victim.email, password: value },
      ]) {
        // A fresh address each time, and every count forgotten: the point is the answer, not the throttle.
        await t.runtime.db.query(sql`delete from auth_throttles`);
        const res = await call(t.app, 'POST', '/api/auth/login', { body, ip: nextIp() });
        statuses.push(res.status);
        expect([401, 422], `${JSON.stringify(body)} -> ${res.status} ${JSON.stringify(res.body)}`).toContain(res.status);
        if (res.status === 401) expect(res.body).toEqual(INVALID_LOGIN);
        if (res.status === 422) expect(res.body.error).toBe('Validation failed');
        expect(JSON.stringify(res.body)).not.toMatch(/argon2|password_hash|syntax error|stack/i);
      }
    }
    // The wildcard-looking addresses are valid e-mail syntax: they must reach the lookup and miss (no LIKE).
    expect(statuses).toContain(401);
    expect((await tryLogin(t.app, '%@example.com', ADMIN_PASSWORD, ip)).status).toBe(401);
    expect((await tryLogin(t.app, '_dmin@example.com', ADMIN_PASSWORD, ip)).status).toBe(401);

    const after = await call(t.app, 'GET', '/api/users?limit=100', { token: admin });
    expect(after.body.data).toEqual(before.body.data);
    const [count] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from users`);
    expect(count!.n).toBe(before.body.data.pagination.total);
    expect((await tryLogin(t.app, victim.email, victim.password)).status).toBe(200);
    expect((await tryLogin(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).status).toBe(200);
  });

  it('lets a user whose password is full of SQL metacharacters and unicode sign in with exactly that password', async () => {
    const password = `' OR 1=1 -- "; drop table users; \\ % _ ünï 🔥`;
    const u = await freshUser(t.app, admin, 'meta-pw', { password });
    expect((await tryLogin(t.app, u.email, password)).status).toBe(200);
    expect((await tryLogin(t.app, u.email, "' OR 1=1 --")).status).toBe(401);
    // One character short (the emoji is two UTF-16 units: cutting one would leave a lone surrogate, a 422).
    expect((await tryLogin(t.app, u.email, password.slice(0, -2))).status).toBe(401);
  });
});

describe('passwords never appear in responses', () => {
  const leaks = (body: unknown, password: string) => {
    const text = JSON.stringify(body);
    expect(text).not.toContain(password);
    expect(text).not.toContain('password_hash');
    expect(text).not.toContain('passwordHash');
    expect(text).not.toContain('$argon2');
  };

  it('in login, user create, user get, user list and user update', async () => {
    const password = 'very-secret-password-7';
    const email = freshEmail('noleak');
    const created = await call(t.app, 'POST', '/api/users', { token: admin, body: { email, password, name: 'No Leak' } });
    expect(created.status).toBe(201);
    expect(Object.keys(created.body.data).sort()).toEqual(USER_FIELDS);
    leaks(created.body, password);

    const session = await tryLogin(t.app, email, password);
    expect(session.status).toBe(200);
    leaks(session.body, password);

    const id = created.body.data.id;
    const got = await call(t.app, 'GET', `/api/users/${id}`, { token: admin });
    expect(got.status).toBe(200);
    expect(Object.keys(got.body.data).sort()).toEqual(USER_FIELDS);
    leaks(got.body, password);

    const own = await call(t.app, 'GET', `/api/users/${id}`, { token: session.body.data.accessToken });
    expect(own.status).toBe(200);
    leaks(own.body, password);

    const list = await call(t.app, 'GET', `/api/users?search=${encodeURIComponent(email)}`, { token: admin });
    expect(list.body.data.users).toHaveLength(1);
    leaks(list.body, password);

    const updated = await call(t.app, 'PUT', `/api/users/${id}`, { token: admin, body: { name: 'Still No Leak' } });
    expect(updated.status).toBe(200);
    leaks(updated.body, password);
  });

  it('in the activity of a failed login', async () => {
    const u = await freshUser(t.app, admin, 'noleak-activity');
    expect((await tryLogin(t.app, u.email, 'mistyped-secret-9')).status).toBe(401);
    const activity = await activityOf(t.app, admin, u.id);
    expect(activity.some((a) => a.action === 'login.failed')).toBe(true);
    leaks(activity, 'mistyped-secret-9');
    leaks(activity, u.password);
  });
});
