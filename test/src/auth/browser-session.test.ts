/**
 * The dashboard's session (src/auth/browser-session.ts): the refresh token only in an HttpOnly,
 * SameSite=Strict cookie scoped to the session routes, rotated by /refresh, ended by /logout;
 * requests a page of another site could make are refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SESSION_COOKIE, SESSION_HEADER, SESSION_PATH } from '../../../src/auth/browser-session.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, startTestApp, type TestApp } from '../../support/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

const SAME = { [SESSION_HEADER]: '1' };
/** The cookie's value and attributes from a Set-Cookie header. */
function cookieOf(headers: Headers): { value: string; attributes: string[] } | null {
  const line = headers.getSetCookie().find((c) => c.startsWith(`${SESSION_COOKIE}=`));
  if (!line) return null;
  const [pair, ...attributes] = line.split(';').map((s) => s.trim());
  return { value: decodeURIComponent(pair!.slice(SESSION_COOKIE.length + 1)), attributes };
}
const withCookie = (value: string, extra: Record<string, string> = SAME) => ({ ...extra, cookie: `${SESSION_COOKIE}=${encodeURIComponent(value)}` });

async function signIn(): Promise<{ accessToken: string; cookie: string }> {
  const res = await call(t.app, 'POST', SESSION_PATH, { body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD }, headers: SAME });
  expect(res.status).toBe(200);
  return { accessToken: res.body.data.accessToken, cookie: cookieOf(res.headers)!.value };
}

describe('the dashboard session', () => {
  it('signs in with the refresh token in an HttpOnly, SameSite=Strict cookie of the session path only, never in the body', async () => {
    const res = await call(t.app, 'POST', SESSION_PATH, { body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD }, headers: SAME });
    expect(res.status).toBe(200);
    expect(res.body.data).toMatchObject({ tokenType: 'Bearer', user: { email: ADMIN_EMAIL } });
    expect(res.body.data).not.toHaveProperty('refreshToken');
    expect(res.headers.get('cache-control')).toBe('no-store');
    const cookie = cookieOf(res.headers)!;
    expect(cookie.value.length).toBeGreaterThan(20);
    expect(cookie.attributes).toEqual(expect.arrayContaining(['HttpOnly', 'SameSite=Strict', `Path=${SESSION_PATH}`]));
    expect(cookie.attributes.some((a) => a.startsWith('Max-Age='))).toBe(true);
    // Not Secure under an http BASE_URL (the cookie would never come back).
    expect(cookie.attributes).not.toContain('Secure');
    // The access token works as a bearer token.
    expect((await call(t.app, 'GET', '/api/users', { token: res.body.data.accessToken })).status).toBe(200);
  });

  it('refresh rotates the cookie; the old one, presented again, ends the session', async () => {
    const { cookie } = await signIn();
    const next = await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie(cookie) });
    expect(next.status).toBe(200);
    expect(next.body.data.accessToken).toEqual(expect.any(String));
    const rotated = cookieOf(next.headers)!.value;
    expect(rotated).not.toBe(cookie);
    const replay = await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie(cookie) });
    expect(replay.status).toBe(401);
    // A refused cookie is removed.
    expect(cookieOf(replay.headers)?.attributes).toEqual(expect.arrayContaining([expect.stringMatching(/^Max-Age=0$|^Expires=Thu, 01 Jan 1970/)]));
    // The reuse revoked the family: the rotated cookie is dead too.
    expect((await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie(rotated) })).status).toBe(401);
  });

  it('without a cookie, or with junk, refresh is a 401', async () => {
    expect((await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: SAME })).status).toBe(401);
    expect((await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie("x'; DROP TABLE users; --") })).status).toBe(401);
    expect((await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie('a'.repeat(5000)) })).status).toBe(401);
  });

  it('logout ends the session and removes the cookie', async () => {
    const { cookie } = await signIn();
    const out = await call(t.app, 'POST', `${SESSION_PATH}/logout`, { headers: withCookie(cookie) });
    expect(out.status).toBe(200);
    expect(cookieOf(out.headers)!.value).toBe('');
    expect((await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie(cookie) })).status).toBe(401);
  });

  it('refuses what another site could send: no session header, or a foreign Origin', async () => {
    const { cookie } = await signIn();
    const body = { email: ADMIN_EMAIL, password: ADMIN_PASSWORD };
    for (const [path, options] of [
      [SESSION_PATH, { body }],
      [SESSION_PATH, { body, headers: { ...SAME, origin: 'https://evil.example' } }],
      [`${SESSION_PATH}/refresh`, { headers: withCookie(cookie, {}) }],
      [`${SESSION_PATH}/refresh`, { headers: withCookie(cookie, { ...SAME, origin: 'https://evil.example' }) }],
      [`${SESSION_PATH}/logout`, { headers: withCookie(cookie, { origin: 'null' }) }],
    ] as const) {
      const res = await call(t.app, 'POST', path, options);
      expect(res.status, `${path} ${JSON.stringify(options)}`).toBe(403);
      expect(cookieOf(res.headers)).toBeNull();
    }
    // The session survived all of that; the server's own origin is accepted.
    const own = await call(t.app, 'POST', `${SESSION_PATH}/refresh`, { headers: withCookie(cookie, { ...SAME, origin: new URL(t.runtime.config.baseUrl).origin }) });
    expect(own.status).toBe(200);
  });

  it('the cookie is no credential for the rest of the API', async () => {
    const { cookie } = await signIn();
    expect((await call(t.app, 'GET', '/api/users', { headers: withCookie(cookie) })).status).toBe(401);
  });
});
