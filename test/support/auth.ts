import fs from 'node:fs/promises';
import path from 'node:path';
import { simpleParser, type ParsedMail } from 'mailparser';
import { expect } from 'vitest';
import type { Activity } from '../../src/activity/store.js';
import type { App } from '../../src/app.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type CallResult, type TestApp } from './app.js';

/**
 * Helpers shared by the test/auth*.test.ts files. Failed logins are throttled per client address,
 * and every request without an `ip` shares one (empty) address, so anything that may fail a login
 * sends a fresh address from `nextIp()`.
 */

let ipCounter = 0;
/** A client address no other call in this test file has used (TEST-NET and 10/8 ranges). */
export function nextIp(): string {
  ipCounter++;
  return `10.${(ipCounter >> 16) & 255}.${(ipCounter >> 8) & 255}.${ipCounter & 255}`;
}

let emailCounter = 0;
/** A fresh, lower-case e-mail address, unique within the test file. */
export function freshEmail(tag: string): string {
  emailCounter++;
  return `${tag}-${emailCounter}-${Math.random().toString(36).slice(2, 8)}@example.com`;
}

export async function adminToken(app: App): Promise<string> {
  return (await login(app, ADMIN_EMAIL, ADMIN_PASSWORD, nextIp())).accessToken;
}

/** A signed-in user as the tests pass it around. */
export interface Person {
  id: number;
  token: string;
  email: string;
}

/** A test app, its administrator's token and id, for a file's beforeAll: `({ t, admin } = await appWithAdmin())`. */
export async function appWithAdmin(...args: Parameters<typeof startTestApp>): Promise<{ t: TestApp; admin: string; adminId: number }> {
  const t = await startTestApp(...args);
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD, nextIp());
  return { t, admin: session.accessToken, adminId: session.user.id };
}

/** A new `user` through the API, signed in once; with `permissions`, those instead of the default ones. */
export async function freshUser(
  app: App,
  admin: string,
  tag = 'user',
  { permissions, ...extra }: { password?: string; name?: string; role?: 'admin' | 'user'; permissions?: { resource: string; actions: string[] }[] } = {},
) {
  const email = freshEmail(tag);
  const created = await createUserAndLogin(app, admin, { email, ...extra });
  if (permissions) {
    const res = await call(app, 'PUT', `/api/users/${created.id}/permissions`, { token: admin, body: { permissions } });
    if (res.status !== 200) throw new Error(`set permissions: ${res.status} ${JSON.stringify(res.body)}`);
  }
  return { ...created, email };
}

export function tryLogin(app: App, email: string, password: string, ip = nextIp()): Promise<CallResult> {
  return call(app, 'POST', '/api/auth/login', { body: { email, password }, ip });
}

export function refresh(app: App, refreshToken: string): Promise<CallResult> {
  return call(app, 'POST', '/api/auth/refresh', { body: { refreshToken }, ip: nextIp() });
}

/** The 401 (docs/reference/http.md#status-codes) for a missing, malformed, expired or revoked bearer token. */
export function expectAuthRequired(res: CallResult): void {
  expect({ status: res.status, body: res.body, challenge: res.headers.get('www-authenticate') }).toEqual({
    status: 401,
    body: { success: false, error: 'Authentication required' },
    challenge: 'Bearer',
  });
}

/** The 401 of a refused refresh token. */
export function expectRefreshRefused(res: CallResult): void {
  expect(res.status).toBe(401);
  expect(res.body.success).toBe(false);
  expect(res.body).not.toHaveProperty('data');
  expect(typeof res.body.error).toBe('string');
}

export function expectValidation(res: CallResult, fields: string[]): void {
  expect(res.status).toBe(422);
  expect(res.body.success).toBe(false);
  expect(res.body.error).toBe('Validation failed');
  for (const field of fields) {
    expect(res.body.details, `details.${field}`).toHaveProperty([field]);
    expect(typeof res.body.details[field]).toBe('string');
    expect(res.body.details[field].length).toBeGreaterThan(0);
  }
}

export async function activityOf(app: App, admin: string, userId: number): Promise<Activity[]> {
  const res = await call(app, 'GET', `/api/users/${userId}/activity?limit=100`, { token: admin });
  expect(res.status).toBe(200);
  return res.body.data.activities;
}

/** The exact set of fields a User has (the specification's User record); nothing about passwords. */
export const USER_FIELDS = ['active', 'createdAt', 'email', 'id', 'lastLoginAt', 'name', 'role', 'updatedAt'];

/** A 200 answer of login or refresh: the specification's session for the user `id`; its data returned. */
export function expectSession(res: CallResult, id: number) {
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  expect(res.body.success).toBe(true);
  const data = res.body.data;
  expect(Object.keys(data).sort()).toEqual(['accessToken', 'expiresIn', 'refreshToken', 'tokenType', 'user']);
  expect(data.tokenType).toBe('Bearer');
  expect(data.expiresIn).toBe(900);
  expect(Object.keys(data.user).sort()).toEqual(USER_FIELDS);
  expect(data.user.id).toBe(id);
  return data as { accessToken: string; refreshToken: string; expiresIn: number; tokenType: string; user: Record<string, unknown> };
}

export const ISO_MS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Every message in DATA_DIR/outbox (the embedded mailer) addressed to `email`, parsed, oldest first. */
export async function outboxFor(dataDir: string, email: string): Promise<ParsedMail[]> {
  const dir = path.join(dataDir, 'outbox');
  const files = (await fs.readdir(dir).catch(() => [] as string[])).filter((f) => f.endsWith('.eml')).sort();
  const mails = await Promise.all(files.map(async (f) => simpleParser(await fs.readFile(path.join(dir, f)))));
  return mails.filter((m) => mailRecipients(m).includes(email));
}

export const mailRecipients = (mail: ParsedMail) => [mail.to ?? []].flat().flatMap((a) => a.value.map((v) => v.address));
