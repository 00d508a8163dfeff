import { expect } from 'vitest';
import type { App } from '../../src/app.js';
import { call, createUserAndLogin, type CallOptions, type CallResult } from './app.js';

/** Helpers shared by the test/users-*.test.ts files. */

let counter = 0;
const run = Math.random().toString(36).slice(2, 8);

/** A tag no other test of this run uses: keeps e-mails and search terms independent per test. */
export function uniqueTag(prefix = 'u'): string {
  counter += 1;
  return `${prefix}${run}${counter}`;
}

export const uniqueEmail = (prefix = 'user') => `${uniqueTag(prefix)}@example.com`;

/** Every password a test has sent; no response body may ever contain one of them. */
const secrets = new Set<string>();
export const rememberSecret = (password: string) => {
  secrets.add(password);
  return password;
};
export const uniquePassword = () => rememberSecret(`pw-${uniqueTag('secret')}-x`);

/** Fails when a response body carries a password sent earlier or a password hash column. */
export function expectNoSecrets(res: CallResult, context: string): void {
  const text = typeof res.body === 'string' ? res.body : JSON.stringify(res.body);
  expect(text, `${context}: password_hash in the body`).not.toContain('password_hash');
  expect(text, `${context}: an argon2 hash in the body`).not.toContain('$argon2');
  for (const secret of secrets) expect(text, `${context}: a password in the body`).not.toContain(secret);
}

/**
 * `call()` of the harness, checking on every response that it is never a 500 and never leaks a
 * password; all tests of these files go through it.
 */
export async function api<T = any>(app: App, method: string, url: string, options: CallOptions = {}): Promise<CallResult<T>> {
  const body = options.body as Record<string, unknown> | undefined;
  if (body && typeof body === 'object') {
    for (const key of ['password', 'currentPassword', 'newPassword', 'confirmPassword']) {
      const value = body[key];
      if (typeof value === 'string' && value.length >= 8) rememberSecret(value);
    }
  }
  const res = await call<T>(app, method, url, options);
  expect(res.status, `${method} ${url} answered 500: ${JSON.stringify(res.body)}`).not.toBe(500);
  expectNoSecrets(res, `${method} ${url}`);
  return res;
}

export type Kind = 'user' | 'admin' | 'reader' | 'updater' | 'creator' | 'deleter';

/** The `users` actions each kind of actor is granted on top of a plain user's defaults. */
const GRANTS: Record<Exclude<Kind, 'user' | 'admin'>, string> = { reader: 'read', updater: 'update', creator: 'create', deleter: 'delete' };

export interface Actor {
  id: number;
  email: string;
  password: string;
  token: string;
  refreshToken: string;
}

/** A fresh, signed-in user of the given kind, created (and granted) by `adminToken`. */
export async function makeActor(app: App, adminToken: string, kind: Kind, name = ''): Promise<Actor> {
  const email = uniqueEmail(kind);
  const password = uniquePassword();
  const actor = await createUserAndLogin(app, adminToken, { email, password, name, role: kind === 'admin' ? 'admin' : 'user' });
  if (kind !== 'user' && kind !== 'admin') {
    const res = await call(app, 'PUT', `/api/users/${actor.id}/permissions`, {
      token: adminToken,
      body: {
        permissions: [
          { resource: 'users', actions: [GRANTS[kind]] },
          { resource: 'logs', actions: ['read'] },
        ],
      },
    });
    expect(res.status).toBe(200);
  }
  return { id: actor.id, email, password, token: actor.token, refreshToken: actor.refreshToken };
}

/** A plain user created by the admin, not signed in. */
export async function makeUser(app: App, adminToken: string, fields: Record<string, unknown> = {}): Promise<{ id: number; email: string; password: string; user: any }> {
  const email = (fields.email as string | undefined) ?? uniqueEmail('target');
  const password = (fields.password as string | undefined) ?? uniquePassword();
  const res = await call(app, 'POST', '/api/users', { token: adminToken, body: { name: 'Target', ...fields, email, password } });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { id: res.body.data.id, email: res.body.data.email, password, user: res.body.data };
}

export { ISO_MS } from './auth.js';

/** The envelope of a failure (docs/reference/http.md#the-envelope). */
export function expectError(res: CallResult, status: number, error?: string): void {
  expect(res.status, JSON.stringify(res.body)).toBe(status);
  expect(res.body.success).toBe(false);
  expect(typeof res.body.error).toBe('string');
  if (error !== undefined) expect(res.body.error).toBe(error);
  expect(res.body).not.toHaveProperty('data');
}

export const expectForbidden = (res: CallResult) => expectError(res, 403, 'Insufficient permissions');
export const expectNotFound = (res: CallResult) => expectError(res, 404, 'User not found');
export const expectUnauthorized = (res: CallResult) => {
  expectError(res, 401, 'Authentication required');
  expect(res.headers.get('www-authenticate')).toBe('Bearer');
};

/** A 422 whose `details` names exactly the given field (or at least one field under a prefix ending in `.`). */
export function expectInvalid(res: CallResult, field: string): void {
  expectError(res, 422, 'Validation failed');
  const keys = Object.keys(res.body.details ?? {});
  if (field.endsWith('.')) expect(keys.some((k) => k.startsWith(field)), `details ${JSON.stringify(res.body.details)}`).toBe(true);
  else expect(keys, `details ${JSON.stringify(res.body.details)}`).toContain(field);
  for (const key of keys) expect(typeof res.body.details[key]).toBe('string');
}
