/**
 * The bounds of what the logs API takes (issue 13, points 2 and 4), over a real listening server
 * where the size of a request matters:
 *
 * - a URL as long as nginx logs it (8 KB with its default buffers, up to the 64 KiB the ingest
 *   stores with larger ones) is found by the listing's `url` filter, the export and the search;
 * - dates are bounded to what the stores hold (1970-01-01 to 2106-02-06): outside, a 422 naming
 *   the range, on every path a date takes (a status filter alone, a referrer search, the export);
 *   the widest range allowed answers exactly what a narrow one does;
 * - pages reach at most MAX_PAGE_DEPTH entries deep: beyond, a 422 on `page`;
 * - NUL and unpaired surrogates in any input are a 422 on the top-level field that holds them.
 */
import type { AddressInfo } from 'node:net';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../../src/app.js';
import { NODE_SERVER_OPTIONS } from '../../../src/http/node-server.js';
import { MAX_PAGE_DEPTH } from '../../../src/http/query.js';
import { buildRollups } from '../../../src/rollups/builder.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';
import { generateAccess, generateErrors, seedLogs, type SeededLogs } from '../../support/logs.js';

let t: TestApp;
let server: ServerType;
let base: string;
let owner: { id: number; token: string };
let seeded: SeededLogs;
/** What nginx logs with its default 8 KB buffers, and what it logs with larger ones up to the ingest's 64 KiB line limit. */
let urls: { default: string; large: string };

const RANGE_MESSAGE = 'must be within 1970-01-01T00:00:00.000Z to 2106-02-06T23:59:59.999Z';
const WIDEST = { startDate: '1970-01-01T00:00:00.000Z', endDate: '2106-02-06T23:59:59.999Z' };

/** A request target full of characters that percent-encode (`%`, `&`, `=`, `+`, UTF-8 escapes), of about `length` characters. */
const longUrl = (tag: string, length: number) => `/${tag}?q=${'caf%C3%A9+x&y=1%25_/'.repeat(Math.ceil(length / 20))}`.slice(0, length);

beforeAll(async () => {
  t = await startTestApp();
  const admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  owner = await createUserAndLogin(t.app, admin, { email: 'bounds-owner@example.com' });
  urls = { default: longUrl('default', 8_000), large: longUrl('large', 60_000) };
  const access = generateAccess(400, { seed: 5 });
  access[10]!.url = urls.default;
  access[20]!.url = urls.large;
  access[30]!.referrer = 'https://referrer.example/rare';
  seeded = await seedLogs(t, { access, errors: generateErrors(50, { seed: 5 }), ownerId: owner.id, tag: 'bounds' });
  // Rollups built: a referrer search asks them before it reads rows (search-fields.ts).
  await buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
  const app = createApp(t.runtime);
  server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: NODE_SERVER_OPTIONS }, () => resolve(s));
  });
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}, 120_000);

afterAll(async () => {
  if (server) {
    await new Promise<void>((resolve) => {
      server.close(() => resolve());
      if ('closeAllConnections' in server) server.closeAllConnections();
    });
  }
  await t?.close();
});

async function request(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(base + path, {
    method,
    headers: { authorization: `Bearer ${owner.token}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: (res.headers.get('content-type') ?? '').includes('json') ? JSON.parse(text) : text };
}

const logsPath = (what: string) => `/api/logs/domains/${seeded.domain.id}/${what}`;
const listing = (query: Record<string, string | number>) => request('GET', `${logsPath('access')}?${new URLSearchParams(Object.entries(query).map(([k, v]) => [k, String(v)]))}`);
const search = (body: Record<string, unknown>) => request('POST', logsPath('search'), { fields: ['url', 'message', 'userAgent', 'referrer', 'ipAddress'], startDate: WIDEST.startDate, ...body });

function expect422(res: { status: number; body: any }, details: Record<string, string>) {
  expect(res.status, JSON.stringify(res.body)).toBe(422);
  expect(res.body).toEqual({ success: false, error: 'Validation failed', details });
}

describe('a URL as long as nginx logs it', () => {
  it.each(['default', 'large'] as const)('is found by the listing filter, in a GET over a real server (%s buffers)', async (size) => {
    const res = await listing({ url: urls[size], limit: 5 });
    expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
    expect(res.body.data.logs.map((e: { url: string }) => e.url)).toEqual([urls[size]]);
  });

  it('is exported, and searched by any part of it (a search query holds up to 500 characters)', async () => {
    const exported = await request('POST', logsPath('export'), { type: 'access', format: 'json', startDate: WIDEST.startDate, filters: { url: urls.large } });
    expect(exported.status, JSON.stringify(exported.body)).toBe(201);
    const file = await fetch(exported.body.data.downloadUrl.replace('http://tailhouse.test', base));
    const lines = (await file.text()).trim().split('\n').map((l) => JSON.parse(l) as { url: string });
    expect(lines.map((l) => l.url)).toEqual([urls.large]);
    const found = await search({ query: urls.large.slice(0, 500), fields: ['url'] });
    expect(found.status).toBe(200);
    expect(found.body.data.logs.map((e: { url: string }) => e.url)).toEqual([urls.large]);
  });

  it('is refused beyond 64 KiB with a 422 naming the limit', async () => {
    expect422(await listing({ url: 'x'.repeat(65_537) }), { url: 'must be at most 65536 characters' });
    expect422(await search({ query: 'x'.repeat(501) }), { query: 'must be at most 500 characters' });
  });
});

describe('dates', () => {
  it('outside what the stores hold are a 422 naming the range, on every path a date takes; the widest range allowed answers as a narrow one', async () => {
    for (const startDate of ['1969-12-31', '1969-12-31T23:59:59.999Z', '1970-01-01T00:30:00+01:00']) {
      expect422(await listing({ startDate, statusCode: '5xx' }), { startDate: RANGE_MESSAGE });
      expect422(await listing({ startDate }), { startDate: RANGE_MESSAGE });
      expect422(await search({ query: 'rare', fields: ['referrer'], startDate }), { startDate: RANGE_MESSAGE });
      expect422(await request('POST', logsPath('export'), { type: 'access', startDate, filters: { statusCode: [500] } }), { startDate: RANGE_MESSAGE });
    }
    for (const endDate of ['9999-12-31', '2106-02-07', '2106-02-07T00:00:00.000Z']) {
      expect422(await search({ query: 'rare', endDate }), { endDate: RANGE_MESSAGE });
      expect422(await listing({ endDate, statusCode: '4xx' }), { endDate: RANGE_MESSAGE });
    }
    // The activity listing shares the schema.
    const activity = await request('GET', `/api/users/${owner.id}/activity?startDate=1960-01-01`);
    expect422(activity, { startDate: RANGE_MESSAGE });

    // The widest range allowed answers what a narrow range does.
    const narrow = { startDate: new Date(seeded.access[0]!.timestamp - 60_000).toISOString() };
    for (const query of [{ statusCode: '5xx' }, { url: '/item' }, {}] as Record<string, string>[]) {
      const wide = await listing({ ...query, ...WIDEST, limit: 1000 });
      const near = await listing({ ...query, ...narrow, limit: 1000 });
      expect(wide.status, JSON.stringify(wide.body)).toBe(200);
      expect(wide.body.data).toEqual(near.body.data);
    }
    for (const [query, fields] of [['rare', ['referrer']], ['curl', ['userAgent']], ['item', ['url', 'message', 'userAgent', 'referrer', 'ipAddress']]] as const) {
      const wide = await search({ query, fields, ...WIDEST, limit: 1000 });
      const near = await search({ query, fields, ...narrow, limit: 1000 });
      expect(wide.status, JSON.stringify(wide.body)).toBe(200);
      expect(wide.body.data.pagination.total).toBeGreaterThan(0);
      expect(wide.body.data).toEqual(near.body.data);
    }
  });
});

describe('page depth', () => {
  it(`is at most ${MAX_PAGE_DEPTH} entries: beyond, a 422 on page naming the deepest page`, async () => {
    const tooDeep = (limit: number) => `must be at most ${MAX_PAGE_DEPTH / limit} with limit ${limit}: pages reach ${MAX_PAGE_DEPTH} entries deep at most; for older entries set endDate to the oldest timestamp seen`;
    expect422(await search({ query: 'item', page: 20_000, limit: 1000 }), { page: tooDeep(1000) });
    expect422(await search({ query: 'item', page: 2 ** 31 }), { page: `must be a whole number from 1 to ${MAX_PAGE_DEPTH}` });
    expect422(await listing({ page: 1001, limit: 1000, statusCode: '5xx' }), { page: tooDeep(1000) });
    expect422(await listing({ page: 50_001 }), { page: tooDeep(20) });
    expect422(await request('GET', `/api/domains?page=10001&limit=100`), { page: tooDeep(100) });
    // The deepest page itself is answered (empty here), with the exact total.
    for (const res of [await search({ query: 'item', page: 1000, limit: 1000 }), await listing({ page: 1000, limit: 1000, statusCode: '5xx' }), await listing({ page: 50_000 })]) {
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      expect(res.body.data.logs).toEqual([]);
      expect(res.body.data.pagination.total).toBeGreaterThan(0);
    }
  });
});

describe('text the stores cannot hold', () => {
  it('is a 422 on the top-level field that holds it, wherever it is', async () => {
    const message = 'must not contain NUL characters or unpaired UTF-16 surrogates';
    expect422(await request('POST', logsPath('export'), { type: 'access', startDate: WIDEST.startDate, filters: { url: '/a\u0000b' } }), { filters: message });
    expect422(await request('POST', logsPath('export'), { type: 'access', startDate: WIDEST.startDate, filters: { url: '/a\ud800' } }), { filters: message });
    expect422(await search({ query: 'item\udc00' }), { query: message });
    expect422(await listing({ url: '/item\u0000' }), { url: message });
    const alert = { name: 'nul', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5, duration: 300, notificationMethod: 'webhook' };
    expect422(await request('POST', logsPath('alerts'), { ...alert, notificationTarget: 'https://93.184.215.14/hook\u0000' }), { notificationTarget: message });
    expect422(await request('POST', logsPath('alerts'), { ...alert, name: 'a\ud83d', notificationTarget: 'https://93.184.215.14/hook' }), { name: message });
    // A surrogate pair is a character like any other.
    expect((await search({ query: 'item \ud83d\ude00' })).status).toBe(200);
  });
});
