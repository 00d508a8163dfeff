import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomToken } from '../../../src/auth/tokens.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, startTestApp, type TestApp } from '../../support/app.js';
import { nextIp } from '../../support/auth.js';

/** Headers of the pages a browser renders (API reference, e-mailed link pages) and of answers carrying secrets. */

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

/** The directives of a Content-Security-Policy header, by name. */
function directives(header: string | null): Map<string, string[]> {
  expect(header, 'Content-Security-Policy').toBeTruthy();
  return new Map(
    header!
      .split(';')
      .map((d) => d.trim().split(/\s+/))
      .filter((d) => d[0])
      .map(([name, ...values]) => [name!.toLowerCase(), values]),
  );
}

const sha256 = (text: string) => `'sha256-${createHash('sha256').update(text).digest('base64')}'`;

describe('GET /api/docs (Swagger UI)', () => {
  it('has a strict CSP: scripts and styles from this origin only, nothing inline, no framing', async () => {
    const res = await t.app.request('/api/docs');
    expect(res.status).toBe(200);
    const csp = directives(res.headers.get('content-security-policy'));
    expect(csp.get('default-src')).toEqual(["'none'"]);
    expect(csp.get('script-src')).toEqual(["'self'"]);
    expect(csp.get('style-src')).toEqual(["'self'"]);
    expect(csp.get('connect-src')).toEqual(["'self'"]);
    expect(csp.get('frame-ancestors')).toEqual(["'none'"]);
    expect(csp.get('base-uri')).toEqual(["'none'"]);
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');

    // The page works under it: every script is an external same-origin file, every asset is
    // served, and there is no inline script or event handler the policy would block.
    const html = await res.text();
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)];
    expect(scripts.length).toBeGreaterThanOrEqual(2);
    for (const [, attributes, body] of scripts) {
      expect(attributes).toMatch(/\ssrc="\/(?!\/)[^"]+"/);
      expect(body!.trim()).toBe('');
    }
    expect(html).not.toMatch(/<style[\s>]/i);
    expect(html).not.toMatch(/\son[a-z]+\s*=/i);
    expect(html).not.toMatch(/\sstyle\s*=/i);
    const urls = [...html.matchAll(/\s(?:src|href)="([^"]+)"/gi)].map((m) => m[1]!);
    for (const url of urls) {
      expect(url, url).toMatch(/^\/(?!\/)/);
      expect((await t.app.request(url)).status, url).toBe(200);
    }
  });

  it('keeps the bearer token out of localStorage and loads nothing from outside', async () => {
    const init = await (await t.app.request('/api/docs/init.js')).text();
    expect(init).toMatch(/persistAuthorization:\s*false/);
    expect(init).toMatch(/validatorUrl:\s*null/);
  });
});

describe('the e-mailed link pages', () => {
  it.each(['/reset-password', '/confirm-email', '/accept-invitation'])('%s allows exactly its own inline script and style, keeps the token out of Referer and caches', async (path) => {
    const res = await t.app.request(`${path}?token=${randomToken()}`);
    expect(res.status).toBe(200);
    const html = await res.text();
    const csp = directives(res.headers.get('content-security-policy'));
    expect(csp.get('default-src')).toEqual(["'none'"]);
    expect(csp.get('connect-src')).toEqual(["'self'"]);
    expect(csp.get('frame-ancestors')).toEqual(["'none'"]);
    const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]!);
    const styles = [...html.matchAll(/<style>([\s\S]*?)<\/style>/g)].map((m) => m[1]!);
    expect(scripts).toHaveLength(1);
    expect(styles).toHaveLength(1);
    expect(csp.get('script-src')).toEqual([sha256(scripts[0]!)]);
    expect(csp.get('style-src')).toEqual([sha256(styles[0]!)]);
    expect(html).not.toMatch(/\son[a-z]+\s*=/i);
    expect(res.headers.get('referrer-policy')).toBe('no-referrer');
    expect(res.headers.get('cache-control')).toBe('no-store');
    expect(res.headers.get('x-content-type-options')).toBe('nosniff');
  });
});

describe('answers carrying tokens or secrets are not cached', () => {
  it('login (200 and 401), refresh, reset, e-mail confirmation and invitation links answer with Cache-Control: no-store', async () => {
    const login = await call(t.app, 'POST', '/api/auth/login', { body: { email: ADMIN_EMAIL, password: ADMIN_PASSWORD }, ip: nextIp() });
    expect(login.status).toBe(200);
    const refreshed = await call(t.app, 'POST', '/api/auth/refresh', { body: { refreshToken: login.body.data.refreshToken }, ip: nextIp() });
    expect(refreshed.status).toBe(200);
    const answers = [
      login,
      refreshed,
      await call(t.app, 'POST', '/api/auth/login', { body: { email: ADMIN_EMAIL, password: 'wrong-password' }, ip: nextIp() }),
      await call(t.app, 'POST', '/api/auth/reset-password', { body: { token: randomToken(), newPassword: 'some-password-1' }, ip: nextIp() }),
      await call(t.app, 'POST', '/api/auth/confirm-email', { body: { token: randomToken() }, ip: nextIp() }),
      await call(t.app, 'POST', '/api/invitations/accept', { body: { token: randomToken(), password: 'some-password-1' }, ip: nextIp() }),
      await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: refreshed.body.data.refreshToken }, ip: nextIp() }),
    ];
    for (const res of answers) expect(res.headers.get('cache-control'), `${res.status} ${JSON.stringify(res.body)}`).toBe('no-store');
  });

  it('API answers are not sniffed, framed or allowed to load anything', async () => {
    for (const path of ['/api/users', '/api/nowhere', '/healthz']) {
      const res = await t.app.request(path);
      expect(res.headers.get('x-content-type-options'), path).toBe('nosniff');
      const csp = directives(res.headers.get('content-security-policy'));
      expect(csp.get('default-src'), path).toEqual(["'none'"]);
      expect(csp.get('frame-ancestors'), path).toEqual(["'none'"]);
    }
  });
});
