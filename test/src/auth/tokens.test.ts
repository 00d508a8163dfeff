import { randomUUID } from 'node:crypto';
import { decodeJwt, SignJWT, UnsecuredJWT } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { insertApiToken, listApiTokens, revokeApiToken } from '../../../src/auth/store.js';
import { randomToken, tokenHash } from '../../../src/auth/tokens.js';
import { sql } from '../../../core/db/sql.js';
import { call, JWT_SECRET, login, type TestApp } from '../../support/app.js';
import { activityOf, appWithAdmin, expectAuthRequired, expectRefreshRefused, expectSession, expectValidation, freshUser, nextIp, refresh } from '../../support/auth.js';

let t: TestApp;
let admin: string;
beforeAll(async () => ({ t, admin } = await appWithAdmin()));
afterAll(() => t?.close());

const me = (id: number, token: string) => call(t.app, 'GET', `/api/users/${id}`, { token });
const secret = (text: string) => new TextEncoder().encode(text);

describe('POST /api/auth/refresh', () => {
  it('returns a new token pair in the login shape; the new access token works', async () => {
    const u = await freshUser(t.app, admin, 'refresh');
    const data = expectSession(await refresh(t.app, u.refreshToken), u.id);
    expect(data.user).toMatchObject({ id: u.id, email: u.email });
    expect(data.refreshToken).not.toBe(u.refreshToken);
    expect(decodeJwt(data.accessToken).sub).toBe(String(u.id));
    expect((await me(u.id, data.accessToken)).status).toBe(200);
  });

  it('rotates: the old refresh token fails once used, the new one works', async () => {
    const u = await freshUser(t.app, admin, 'rotate');
    const first = await refresh(t.app, u.refreshToken);
    expect(first.status).toBe(200);
    // Chain the new token once more: rotation keeps working along the family.
    const second = await refresh(t.app, first.body.data.refreshToken);
    expect(second.status).toBe(200);
    expect(second.body.data.refreshToken).not.toBe(first.body.data.refreshToken);
    expectRefreshRefused(await refresh(t.app, u.refreshToken));
  });

  it('reuse of a spent token revokes the whole family, but not other sessions of the user', async () => {
    const u = await freshUser(t.app, admin, 'reuse');
    const otherSession = await login(t.app, u.email, u.password);
    const rotated = await refresh(t.app, u.refreshToken);
    expect(rotated.status).toBe(200);
    const newest = rotated.body.data.refreshToken as string;

    // The spent token presented again (a thief or a replay)…
    expectRefreshRefused(await refresh(t.app, u.refreshToken));
    // …ends the family: the newest token of it fails too.
    expectRefreshRefused(await refresh(t.app, newest));
    // A separate login is another family and lives on.
    const other = await refresh(t.app, otherSession.refreshToken);
    expect(other.status).toBe(200);
  });

  it('lets only one of two concurrent refreshes with the same token succeed', async () => {
    const u = await freshUser(t.app, admin, 'race');
    const results = await Promise.all([refresh(t.app, u.refreshToken), refresh(t.app, u.refreshToken)]);
    expect(results.map((r) => r.status).sort()).toEqual([200, 401]);
  });

  it('refuses the refresh token of a deactivated user', async () => {
    const u = await freshUser(t.app, admin, 'refresh-deact');
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    expectRefreshRefused(await refresh(t.app, u.refreshToken));
    // Reactivating does not bring the old session back.
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: true } })).status).toBe(200);
    expectRefreshRefused(await refresh(t.app, u.refreshToken));
  });

  it('refuses the refresh token of a deleted user', async () => {
    const u = await freshUser(t.app, admin, 'refresh-del');
    expect((await call(t.app, 'DELETE', `/api/users/${u.id}`, { token: admin })).status).toBe(200);
    expectRefreshRefused(await refresh(t.app, u.refreshToken));
  });

  it('refuses garbage, access tokens and tokens of the right shape that were never issued', async () => {
    const u = await freshUser(t.app, admin, 'refresh-garbage');
    for (const token of ['garbage', 'x'.repeat(43), randomToken(), u.token, `${u.refreshToken}x`, "' OR 1=1 --"]) {
      expectRefreshRefused(await refresh(t.app, token));
    }
    // None of that touched the real session.
    expect((await refresh(t.app, u.refreshToken)).status).toBe(200);
  });

  it('refuses an expired refresh token', async () => {
    const u = await freshUser(t.app, admin, 'refresh-expired');
    await t.runtime.db.query(sql`update refresh_tokens set expires_at = now() - interval '1 minute' where token_hash = ${tokenHash(u.refreshToken)}`);
    expectRefreshRefused(await refresh(t.app, u.refreshToken));
  });

  it('issues refresh tokens valid for 30 days, stored only as a hash', async () => {
    const u = await freshUser(t.app, admin, 'refresh-ttl');
    const rows = await t.runtime.db.query<{ token_hash: string; expires_at: Date }>(sql`
      select token_hash, expires_at from refresh_tokens where user_id = ${u.id}`);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.token_hash).toBe(tokenHash(u.refreshToken));
    expect(rows[0]!.token_hash).not.toContain(u.refreshToken);
    const days = (new Date(rows[0]!.expires_at).getTime() - Date.now()) / 86_400_000;
    expect(days).toBeGreaterThan(29.9);
    expect(days).toBeLessThanOrEqual(30.01);
  });

  it('422 with details for a missing or unknown field, 400 for a non-JSON body', async () => {
    expectValidation(await call(t.app, 'POST', '/api/auth/refresh', { body: {} }), ['refreshToken']);
    expectValidation(await call(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: '' } }), ['refreshToken']);
    expectValidation(await call(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: 'abc', extra: 1 } }), ['extra']);
    expect((await call(t.app, 'POST', '/api/auth/refresh', { body: 'refreshToken=abc' })).status).toBe(400);
  });
});

describe('POST /api/auth/logout', () => {
  it('ends the session: its refresh token stops working; the activity records session.logout', async () => {
    const u = await freshUser(t.app, admin, 'logout');
    const ip = nextIp();
    const res = await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: u.refreshToken }, ip });
    expect(res.status).toBe(200);
    expect(res.body.success).toBe(true);
    expect(typeof res.body.message).toBe('string');
    expect(res.body.message.length).toBeGreaterThan(0);
    expect(res.body).not.toHaveProperty('data');

    expectRefreshRefused(await refresh(t.app, u.refreshToken));
    const logout = (await activityOf(t.app, admin, u.id)).filter((a) => a.action === 'session.logout');
    expect(logout).toHaveLength(1);
    expect(logout[0]).toMatchObject({ resource: `users/${u.id}`, ipAddress: ip, userAgent: 'vitest' });
  });

  it('ends the whole rotated session, not just the token presented', async () => {
    const u = await freshUser(t.app, admin, 'logout-rotated');
    const rotated = await refresh(t.app, u.refreshToken);
    expect(rotated.status).toBe(200);
    // Logging out with the spent token of the family still ends the live one.
    expect((await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: u.refreshToken } })).status).toBe(200);
    expectRefreshRefused(await refresh(t.app, rotated.body.data.refreshToken));
  });

  it('leaves the other sessions of the user alone', async () => {
    const u = await freshUser(t.app, admin, 'logout-other');
    const second = await login(t.app, u.email, u.password);
    expect((await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: u.refreshToken } })).status).toBe(200);
    expect((await refresh(t.app, second.refreshToken)).status).toBe(200);
  });

  it('answers 200 for an unknown token, and again for a token already logged out', async () => {
    const unknown = await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: randomToken() } });
    expect(unknown.status).toBe(200);
    expect(unknown.body.success).toBe(true);
    expect(typeof unknown.body.message).toBe('string');

    const u = await freshUser(t.app, admin, 'logout-twice');
    expect((await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: u.refreshToken } })).status).toBe(200);
    expect((await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: u.refreshToken } })).status).toBe(200);
  });

  it('422 for a missing refresh token', async () => {
    expectValidation(await call(t.app, 'POST', '/api/auth/logout', { body: {} }), ['refreshToken']);
  });
});

describe('access tokens', () => {
  /** A token with our issuer and claims; `ver` and `sid` as a token the service issued carries them. */
  async function sign(userId: number, session: { ver: number; sid: string }, options: { key?: string; iat?: number; exp?: number; issuer?: string } = {}) {
    const now = Math.floor(Date.now() / 1000);
    return new SignJWT(session)
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(String(userId))
      .setIssuer(options.issuer ?? 'tailhouse')
      .setIssuedAt(options.iat ?? now)
      .setExpirationTime(options.exp ?? now + 900)
      .sign(secret(options.key ?? JWT_SECRET));
  }

  /** The user's token version and the session of an access token the service issued. */
  const sessionOf = (accessToken: string) => {
    const claims = decodeJwt(accessToken);
    return { ver: claims['ver'] as number, sid: claims['sid'] as string };
  };

  it('a token signed by the harness secret is accepted (control for the forgeries below)', async () => {
    const u = await freshUser(t.app, admin, 'control');
    const res = await me(u.id, await sign(u.id, sessionOf(u.token)));
    expect(res.status).toBe(200);
    expect(res.body.data.id).toBe(u.id);
  });

  it('401 without an Authorization header', async () => {
    expectAuthRequired(await call(t.app, 'GET', '/api/users'));
    expectAuthRequired(await call(t.app, 'GET', '/api/domains'));
  });

  it('401 for malformed Authorization headers', async () => {
    const u = await freshUser(t.app, admin, 'malformed');
    for (const authorization of [
      '',
      'Bearer',
      'Bearer ',
      `Basic ${Buffer.from(`${u.email}:${u.password}`).toString('base64')}`,
      `Token ${u.token}`,
      `Bearer ${u.token} extra`,
      `${u.token}`,
      'Bearer not.a.jwt',
      'Bearer abc',
      `Bearer ${u.token.split('.').slice(0, 2).join('.')}`,
      `Bearer ${u.token}x`,
    ]) {
      const res = await call(t.app, 'GET', `/api/users/${u.id}`, { headers: { authorization } });
      expect(res.status, authorization).toBe(401);
      expectAuthRequired(res);
    }
    // The same token, well-formed, works.
    expect((await me(u.id, u.token)).status).toBe(200);
  });

  it('401 for a token signed with another secret', async () => {
    const u = await freshUser(t.app, admin, 'forged');
    expectAuthRequired(await me(u.id, await sign(u.id, sessionOf(u.token), { key: 'another-secret-that-is-also-32-bytes-long!!' })));
  });

  it('401 for an unsigned token (alg: none)', async () => {
    const u = await freshUser(t.app, admin, 'algnone');
    const now = Math.floor(Date.now() / 1000);
    const unsigned = new UnsecuredJWT(sessionOf(u.token))
      .setSubject(String(u.id))
      .setIssuer('tailhouse')
      .setIssuedAt(now)
      .setExpirationTime(now + 900)
      .encode();
    expect(unsigned.endsWith('.')).toBe(true);
    expectAuthRequired(await me(u.id, unsigned));
    // The real signature glued onto a payload with another subject does not pass either.
    const [header, , signature] = u.token.split('.');
    const payload = Buffer.from(JSON.stringify({ ...decodeJwt(u.token), sub: '1' })).toString('base64url');
    expectAuthRequired(await call(t.app, 'GET', '/api/users', { token: `${header}.${payload}.${signature}` }));
  });

  it('401 for an expired token', async () => {
    const u = await freshUser(t.app, admin, 'expired');
    const now = Math.floor(Date.now() / 1000);
    expectAuthRequired(await me(u.id, await sign(u.id, sessionOf(u.token), { iat: now - 1000, exp: now - 100 })));
  });

  it('401 for a token that worked until it expired (no verified token outlives its exp)', async () => {
    const u = await freshUser(t.app, admin, 'expiring');
    const now = Math.floor(Date.now() / 1000);
    const shortLived = await sign(u.id, sessionOf(u.token), { iat: now, exp: now + 2 });
    expect((await me(u.id, shortLived)).status).toBe(200);
    // Poll (no fixed sleep) until the token is refused; it must be within a few seconds of exp.
    const deadline = Date.now() + 8_000;
    let last = await me(u.id, shortLived);
    while (last.status === 200 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 100));
      last = await me(u.id, shortLived);
    }
    expectAuthRequired(last);
    expect(Date.now() / 1000).toBeGreaterThanOrEqual(now + 2);
  });

  it('401 for a token from another issuer or without the version claim', async () => {
    const u = await freshUser(t.app, admin, 'issuer');
    expectAuthRequired(await me(u.id, await sign(u.id, sessionOf(u.token), { issuer: 'someone-else' })));
    const now = Math.floor(Date.now() / 1000);
    const noVersion = await new SignJWT({ sid: sessionOf(u.token).sid })
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject(String(u.id))
      .setIssuer('tailhouse')
      .setIssuedAt(now)
      .setExpirationTime(now + 900)
      .sign(secret(JWT_SECRET));
    expectAuthRequired(await me(u.id, noVersion));
  });

  it('401 for a token without the session claim (as signed before sessions were named in tokens), or naming a session not its own', async () => {
    const u = await freshUser(t.app, admin, 'nosid');
    const other = await freshUser(t.app, admin, 'nosid-other');
    const { ver, sid } = sessionOf(u.token);
    expectAuthRequired(await me(u.id, await sign(u.id, { ver } as { ver: number; sid: string })));
    for (const wrong of ['', 'not-a-uuid', randomUUID(), sessionOf(other.token).sid]) expectAuthRequired(await me(u.id, await sign(u.id, { ver, sid: wrong })));
    expect((await me(u.id, await sign(u.id, { ver, sid }))).status).toBe(200);
    // Its refresh token is untouched: the client gets a token with the claim from it.
    const renewed = await refresh(t.app, u.refreshToken);
    expect(renewed.status).toBe(200);
    expect(sessionOf(renewed.body.data.accessToken).sid).toBe(sid);
  });

  it('401 for a token without an expiry (every token this service signs has one)', async () => {
    const u = await freshUser(t.app, admin, 'noexp');
    const forever = await new SignJWT(sessionOf(u.token))
      .setProtectedHeader({ alg: 'HS256', typ: 'JWT' })
      .setSubject(String(u.id))
      .setIssuer('tailhouse')
      .setIssuedAt()
      .sign(secret(JWT_SECRET));
    expectAuthRequired(await me(u.id, forever));
  });

  it('401 for a token of a deleted user', async () => {
    const u = await freshUser(t.app, admin, 'deleted');
    expect((await me(u.id, u.token)).status).toBe(200);
    expect((await call(t.app, 'DELETE', `/api/users/${u.id}`, { token: admin })).status).toBe(200);
    expectAuthRequired(await me(u.id, u.token));
    expectAuthRequired(await call(t.app, 'GET', '/api/domains', { token: u.token }));
  });

  it('401 for a validly signed token naming a user that never existed', async () => {
    expectAuthRequired(await call(t.app, 'GET', '/api/users/999999', { token: await sign(999_999, { ver: 0, sid: randomUUID() }) }));
  });

  it('401 for a token of a deactivated user', async () => {
    const u = await freshUser(t.app, admin, 'deactivated');
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    expectAuthRequired(await me(u.id, u.token));
  });
});

describe('personal access tokens', () => {
  async function createPat(userId: number, name = 'ci') {
    const token = randomToken('thk_');
    const row = await insertApiToken(t.runtime.db, { userId, name, hash: tokenHash(token) });
    return { token, row };
  }

  it('act as Bearer with the rights of their user', async () => {
    const u = await freshUser(t.app, admin, 'pat');
    const { token, row } = await createPat(u.id);
    expect(token.startsWith('thk_')).toBe(true);
    const own = await me(u.id, token);
    expect(own.status).toBe(200);
    expect(own.body.data.email).toBe(u.email);
    // A plain user may not list users, through a PAT no more than through a JWT.
    const list = await call(t.app, 'GET', '/api/users', { token });
    expect(list.status).toBe(403);
    expect(list.body).toEqual({ success: false, error: 'Insufficient permissions' });

    const [stored] = (await listApiTokens(t.runtime.db, u.id)).filter((r) => r.id === row.id);
    expect(stored!.last_used_at).not.toBeNull();
    const [raw] = await t.runtime.db.query<{ token_hash: string }>(sql`select token_hash from api_tokens where id = ${row.id}`);
    expect(raw!.token_hash).toBe(tokenHash(token));
  });

  it("of an administrator carry the administrator's rights", async () => {
    const a = await freshUser(t.app, admin, 'pat-admin', { role: 'admin' });
    const { token } = await createPat(a.id);
    const list = await call(t.app, 'GET', `/api/users?search=${encodeURIComponent(a.email)}`, { token });
    expect(list.status).toBe(200);
    expect(list.body.data.users.map((x: { id: number }) => x.id)).toEqual([a.id]);
  });

  it('401 once revoked, while another token of the same user keeps working', async () => {
    const u = await freshUser(t.app, admin, 'pat-revoke');
    const first = await createPat(u.id, 'first');
    const second = await createPat(u.id, 'second');
    expect((await me(u.id, first.token)).status).toBe(200);
    expect(await revokeApiToken(t.runtime.db, first.row.id)).toBe(true);
    expectAuthRequired(await me(u.id, first.token));
    expect((await me(u.id, second.token)).status).toBe(200);
  });

  it('401 for a token of a deactivated user', async () => {
    const u = await freshUser(t.app, admin, 'pat-deact');
    const { token } = await createPat(u.id);
    expect((await me(u.id, token)).status).toBe(200);
    expect((await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    expectAuthRequired(await me(u.id, token));
  });

  it('401 for a token of a deleted user', async () => {
    const u = await freshUser(t.app, admin, 'pat-del');
    const { token } = await createPat(u.id);
    expect((await call(t.app, 'DELETE', `/api/users/${u.id}`, { token: admin })).status).toBe(200);
    expectAuthRequired(await me(u.id, token));
  });

  it('401 for a thk_ token that was never issued', async () => {
    expectAuthRequired(await call(t.app, 'GET', '/api/users', { token: randomToken('thk_') }));
    expectAuthRequired(await call(t.app, 'GET', '/api/users', { token: 'thk_' }));
  });
});
