import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { createApp, type App } from '../../src/app.js';
import { loadConfig } from '../../core/config.js';
import { migratePostgres } from '../../core/db/migrate.js';
import { openPglite } from '../../core/db/postgres.js';
import { createLogger, type Logger } from '../../core/log.js';
import { openRuntime, type Runtime } from '../../src/runtime.js';

export const ADMIN_EMAIL = 'admin@example.com';
export const ADMIN_PASSWORD = 'admin-password-1';
export const JWT_SECRET = 'test-secret-that-is-at-least-32-bytes-long!';

/**
 * With a server URL (default DATABASE_URL, set in CI's second run), each test file (or a bench
 * run) gets a database of its own on that server, dropped afterwards; without it, the embedded
 * PGlite under a temporary DATA_DIR.
 */
export async function freshDatabase(serverUrl = process.env.DATABASE_URL): Promise<{ url: string | undefined; drop: () => Promise<void> }> {
  if (!serverUrl) return { url: undefined, drop: async () => {} };
  const name = `tailhouse_test_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const again = postgres(serverUrl, { max: 1, onnotice: () => {} });
      await again.unsafe(`drop database if exists ${name} with (force)`);
      await again.end();
    },
  };
}

export interface TestApp {
  app: App;
  runtime: Runtime;
  dataDir: string;
  databaseUrl: string | undefined;
  /** Opens the same stores again (a restart); the old runtime must be closed first. */
  restart(): Promise<void>;
  close(): Promise<void>;
}

const ROOT = path.resolve(import.meta.dirname, '..', '..');

/**
 * A migrated PGlite data directory that each embedded test app starts from, copied: a new PGlite
 * (initdb) and the migrations take about 1.7 s a test file, a copy of this about 0.2 s (bench/README,
 * "The test suite's start-up"). It is made by the migrations themselves, once for each content of
 * the migrations, the code that applies them and PGlite's version, by whichever test file needs it
 * first: built aside and renamed into place, so that files starting at once never see half of one.
 */
async function postgresTemplate(): Promise<string> {
  const migrations = path.join(ROOT, 'sql/postgres');
  const hash = createHash('sha256');
  for (const file of [...readdirSync(migrations).sort().map((name) => path.join(migrations, name)), path.join(ROOT, 'core/db/migrate.ts'), path.join(ROOT, 'core/db/postgres.ts')]) {
    hash.update(file).update(readFileSync(file));
  }
  hash.update(readFileSync(path.join(ROOT, 'node_modules/@electric-sql/pglite/package.json')));
  const template = path.join(os.tmpdir(), `tailhouse-pg-template-${hash.digest('hex').slice(0, 16)}`);
  if (existsSync(template)) return template;
  const building = await fs.mkdtemp(`${template}.building-`);
  const db = await openPglite(building);
  await migratePostgres(db, createLogger('silent'));
  await db.close();
  // Another file may have put one in place meanwhile (the rename of a directory over one fails): keep it.
  await fs.rename(building, template).catch(() => fs.rm(building, { recursive: true, force: true }));
  return template;
}

/** A real runtime (both stores, migrations, first admin) behind `app.request()`; `log`: where its log goes (default: TEST_LOG_LEVEL, silent). */
export async function startTestApp(env: Record<string, string> = {}, options: { log?: Logger } = {}): Promise<TestApp> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-test-'));
  const db = await freshDatabase();
  if (!db.url) await promisify(execFile)('cp', ['-R', await postgresTemplate(), path.join(dataDir, 'postgres')]);
  const config = loadConfig({
    DATA_DIR: dataDir,
    ADMIN_EMAIL,
    ADMIN_PASSWORD,
    JWT_SECRET,
    TRUST_PROXY: 'true',
    BASE_URL: 'http://tailhouse.test',
    ...(db.url ? { DATABASE_URL: db.url } : {}),
    ...env,
  });
  const log = options.log ?? createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
  const handle: TestApp = {
    runtime: await openRuntime(config, log, () => {}),
    app: undefined as unknown as App,
    dataDir,
    databaseUrl: db.url,
    async restart() {
      handle.runtime = await openRuntime(config, log, () => {});
      handle.app = createApp(handle.runtime);
    },
    async close() {
      await handle.runtime.close();
      await db.drop();
      await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
  handle.app = createApp(handle.runtime);
  return handle;
}

export interface CallOptions {
  token?: string;
  body?: unknown;
  /** Sent as X-Forwarded-For (the test app trusts the proxy). */
  ip?: string;
  headers?: Record<string, string>;
}

export interface CallResult<T = any> {
  status: number;
  headers: Headers;
  body: T;
}

/**
 * One request through the real HTTP stack; JSON bodies parsed. An event stream (a live tail) never
 * ends by itself: its body is the first chunk, and the stream is then cancelled (the client leaves).
 */
export async function call<T = any>(app: App, method: string, url: string, options: CallOptions = {}): Promise<CallResult<T>> {
  const headers: Record<string, string> = { 'user-agent': 'vitest', ...options.headers };
  if (options.token) headers.authorization = `Bearer ${options.token}`;
  if (options.ip) headers['x-forwarded-for'] = options.ip;
  let body: string | undefined;
  if (options.body !== undefined) {
    headers['content-type'] ??= 'application/json';
    body = typeof options.body === 'string' ? options.body : JSON.stringify(options.body);
  }
  const response = await app.request(url, { method, headers, body });
  const text = (response.headers.get('content-type') ?? '').startsWith('text/event-stream') ? await firstChunk(response) : await response.text();
  let parsed: unknown = text;
  if ((response.headers.get('content-type') ?? '').includes('json')) parsed = JSON.parse(text);
  return { status: response.status, headers: response.headers, body: parsed as T };
}

async function firstChunk(response: Response): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const { value } = await reader.read();
  await reader.cancel();
  return new TextDecoder().decode(value);
}

export async function login(app: App, email: string, password: string, ip?: string): Promise<{ accessToken: string; refreshToken: string; user: any }> {
  const res = await call(app, 'POST', '/api/auth/login', { body: { email, password }, ...(ip ? { ip } : {}) });
  if (res.status !== 200) throw new Error(`login of ${email} failed: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data;
}

/** Creates a user through the API as the given admin token and signs it in. */
export async function createUserAndLogin(
  app: App,
  adminToken: string,
  user: { email: string; password?: string; name?: string; role?: 'admin' | 'user' },
): Promise<{ id: number; token: string; refreshToken: string; password: string }> {
  const password = user.password ?? 'user-password-1';
  const created = await call(app, 'POST', '/api/users', { token: adminToken, body: { ...user, password } });
  if (created.status !== 201) throw new Error(`create ${user.email}: ${created.status} ${JSON.stringify(created.body)}`);
  const session = await login(app, user.email, password);
  return { id: created.body.data.id, token: session.accessToken, refreshToken: session.refreshToken, password };
}
