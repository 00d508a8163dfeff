/**
 * Log exports (docs/reference/logs.md#exports): POST /api/logs/domains/:domainId/export and the bearer-less download
 * at /api/downloads/<file name>. Logs are loaded through the real ingest path (importFiles) from
 * generated nginx lines, so every expectation is computed independently from those lines.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { Session } from 'chdb';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { importFiles } from '../../../ingest/import.js';
import { createApp, type App } from '../../../src/app.js';
import { sql } from '../../../core/db/sql.js';
import { downloadsInProgress, sweepExpiredExports } from '../../../src/exports/service.js';
import { createExport, EXPORT_LIMITS } from '../../../src/exports/service.js';
import { concatenated, daySlices, exportQuery, openExportBody, PIECE_BYTES, SlowReaderError, type ClickhouseQuery, type ExportBodyEnd, type QueryBytes } from '../../../src/exports/stream.js';
import { createLogger } from '../../../core/log.js';
import { call, startTestApp, type TestApp } from '../../support/app.js';
import { abandonDownload } from '../../support/logs.js';
import { activityOf, adminToken, expectAuthRequired, expectValidation, freshUser, ISO_MS } from '../../support/auth.js';
import { errorLogTime, FORMAT, importText as importThroughIngest, T0, timeLocal, until } from '../../support/ingest.js';
import { DAY_MS } from '../../../core/durations.js';

let t: TestApp;
let app: App;
let admin: string;
let owner: { id: number; token: string; email: string };
let domain: { id: number; name: string };
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

const ACCESS_FIELDS = ['id', 'timestamp', 'ipAddress', 'method', 'url', 'protocol', 'statusCode', 'responseSize', 'referrer', 'userAgent', 'responseTime'];
const ERROR_FIELDS = ['id', 'timestamp', 'level', 'message', 'context'];

// ---------------------------------------------------------------------------------------------
// Generated logs: what was written, and what each line must come back as
// ---------------------------------------------------------------------------------------------

interface Gen {
  ms: number;
  ipAddress: string;
  method: string;
  url: string;
  statusCode: number;
  responseSize: number;
  referrer: string;
  userAgent: string;
  responseTime: number;
  /** The line as nginx would log it. */
  line: string;
}

const METHODS = ['GET', 'POST', 'PUT', 'DELETE'];
const STATUSES = [200, 301, 404, 500, 503];

/** nginx's escape=default for a value: `"`, `\`, control characters and non-ASCII bytes as \xHH. */
function nginxEscape(value: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    out += byte === 0x22 || byte === 0x5c || byte < 0x20 || byte >= 0x7f ? `\\x${byte.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(byte);
  }
  return out;
}

function gen(n: number, overrides: Partial<Omit<Gen, 'line'>> = {}): Gen {
  const g = {
    ms: T0 + n * 1000,
    ipAddress: n % 4 === 0 ? `192.168.${(n >> 8) & 255}.${n & 255}` : `10.1.${(n >> 8) & 255}.${n & 255}`,
    method: METHODS[n % 4]!,
    url: `/item/${n}?q=${n % 7}`,
    statusCode: STATUSES[n % 5]!,
    responseSize: n % 5000,
    referrer: n % 3 === 0 ? '' : `https://ref.example/${n % 11}`,
    userAgent: `agent/${n % 3}`,
    responseTime: n % 1000,
    ...overrides,
  };
  const logged = (v: string) => (v === '' ? '-' : nginxEscape(v));
  const line = `${g.ipAddress} - - [${timeLocal(g.ms)}] "${g.method} ${g.url} HTTP/1.1" ${g.statusCode} ${g.responseSize} "${logged(g.referrer)}" "${logged(g.userAgent)}" ${(g.responseTime / 1000).toFixed(3)}`;
  return { ...g, line };
}

/** The values a spreadsheet must not run, and values that need CSV quoting. */
const TRICKY: Partial<Gen>[] = [
  { userAgent: '=HYPERLINK("http://evil.example","x")' },
  { userAgent: '+1+2', referrer: 'https://a.example/?a=1,b=2' },
  { userAgent: '-2+3' },
  { userAgent: '@SUM(A1:A9)' },
  { userAgent: '\tstarts with a tab' },
  { userAgent: '\rstarts with a carriage return' },
  { userAgent: 'two\nlines, "quoted"' },
  { userAgent: 'crlf\r\ninside' },
  { userAgent: 'ünïcødé 😀 ok' },
  { userAgent: 'ends with a quote"', referrer: '"' },
  { url: "/q?name=O'Brien\\x" },
];

const BULK = 3_000;
let gens: Gen[] = [];

async function importText(domainName: string, text: string, type: 'access' | 'error' = 'access', format = FORMAT) {
  const summary = await importThroughIngest(t, domainName, text, { type, format });
  expect(summary.rejected).toBe(0);
  return summary;
}

/** The error log: levels folded as docs/reference/logs.md#error-entries says, context from the `, client: …` tail. */
const ERROR_LINES = [
  { n: 0, nginxLevel: 'error', level: 'error', message: 'open() "/srv/x" failed (2: No such file or directory)', tail: ', client: 203.0.113.7, server: shop, request: "GET /x HTTP/1.1", host: "shop.example.com"' },
  { n: 1, nginxLevel: 'warn', level: 'warn', message: '=cmd|\' /C calc\'!A0 an upstream response is buffered', tail: ', client: 203.0.113.8, server: shop, request: "POST /api HTTP/1.1", upstream: "http://127.0.0.1:8080/api", host: "shop.example.com"' },
  { n: 2, nginxLevel: 'crit', level: 'error', message: 'SSL_do_handshake() failed', tail: ', client: 203.0.113.9, server: 0.0.0.0:443' },
  { n: 3, nginxLevel: 'notice', level: 'info', message: 'signal process started', tail: '' },
  { n: 4, nginxLevel: 'info', level: 'info', message: 'client closed connection while waiting for request', tail: ', client: 203.0.113.10, server: shop' },
];

beforeAll(async () => {
  t = await startTestApp();
  app = t.app;
  admin = await adminToken(app);
  owner = await freshUser(app, admin, 'owner');
  const created = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `export-${process.pid}.example.com`, ownerId: owner.id } });
  expect(created.status).toBe(201);
  domain = created.body.data;

  gens = Array.from({ length: BULK }, (_, n) => gen(n));
  TRICKY.forEach((overrides, i) => gens.push(gen(BULK + i, overrides)));
  await importText(domain.name, gens.map((g) => `${g.line}\n`).join(''));
  await importText(
    domain.name,
    ERROR_LINES.map((e) => `${errorLogTime(T0 + e.n * 60_000)} [${e.nginxLevel}] 100#100: *${e.n} ${e.message}${e.tail}\n`).join(''),
    'error',
  );
});

afterAll(async () => {
  await t?.close();
});

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

const exportUrl = (domainId: number) => `/api/logs/domains/${domainId}/export`;

async function createOk(body: Record<string, unknown>, token = owner.token, domainId = domain.id): Promise<{ downloadUrl: string; expiresAt: string }> {
  const res = await call(app, 'POST', exportUrl(domainId), { token, body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  expect(res.body.success).toBe(true);
  return res.body.data;
}

/** The download, as a client without any header would fetch it. */
function fetchDownload(downloadUrl: string, method = 'GET'): Promise<Response> {
  const url = new URL(downloadUrl);
  expect(url.origin).toBe('http://tailhouse.test');
  return Promise.resolve(app.request(url.pathname, { method }));
}

async function downloadText(downloadUrl: string): Promise<{ res: Response; text: string }> {
  const res = await fetchDownload(downloadUrl);
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return { res, text };
}

/** A strict RFC 4180 reader: CRLF after every record, line breaks only inside quotes. */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let record: string[] = [];
  let field = '';
  let quoted = false;
  let wasQuoted = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i]!;
    if (quoted) {
      if (c !== '"') field += c;
      else if (text[i + 1] === '"') {
        field += '"';
        i++;
      } else quoted = false;
      continue;
    }
    if (c === '"') {
      if (field !== '' || wasQuoted) throw new Error(`quote inside an unquoted field at ${i}`);
      quoted = wasQuoted = true;
    } else if (c === ',') {
      record.push(field);
      field = '';
      wasQuoted = false;
    } else if (c === '\r' && text[i + 1] === '\n') {
      record.push(field);
      records.push(record);
      record = [];
      field = '';
      wasQuoted = false;
      i++;
    } else if (c === '\r' || c === '\n') throw new Error(`bare line break outside quotes at ${i}`);
    else {
      if (wasQuoted) throw new Error(`text after a closing quote at ${i}`);
      field += c;
    }
  }
  if (quoted || field !== '' || record.length > 0) throw new Error('the last record does not end with CRLF');
  return records;
}

/** A generated line as the listing shows it (id aside, which comes from the line's position). */
const asEntry = (g: Gen) => ({
  timestamp: new Date(g.ms).toISOString(),
  ipAddress: g.ipAddress,
  method: g.method,
  url: g.url,
  protocol: 'HTTP/1.1',
  statusCode: g.statusCode,
  responseSize: g.responseSize,
  referrer: g.referrer,
  userAgent: g.userAgent,
  responseTime: g.responseTime,
});

/** The spreadsheet-safe text of a cell, computed independently of src/exports/stream.ts. */
const neutralised = (v: string) => (/^[=+\-@\t\r]/.test(v) ? `'${v}` : v);

/** Newest first, as the export orders (every generated line has its own second). */
const newestFirst = (list: Gen[]) => [...list].sort((a, b) => b.ms - a.ms);

function ipv4InCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/') as [string, string];
  const num = (a: string) => a.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const size = 2 ** (32 - Number(bits));
  return Math.floor(num(ip) / size) === Math.floor(num(base) / size);
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

describe('POST /api/logs/domains/:domainId/export', () => {
  it('answers 201 with a download link under BASE_URL and an expiry EXPORT_TTL_S ahead', async () => {
    const before = Date.now();
    const data = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    expect(Object.keys(data).sort()).toEqual(['downloadUrl', 'expiresAt']);
    expect(data.downloadUrl).toMatch(/^http:\/\/tailhouse\.test\/api\/downloads\/[A-Za-z0-9_-]{43}\.csv$/);
    expect(data.expiresAt).toMatch(ISO_MS);
    const expires = Date.parse(data.expiresAt);
    expect(expires).toBeGreaterThanOrEqual(before + 86_400_000 - 1000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 86_400_000 + 1000);
    const other = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString() });
    expect(other.downloadUrl).toMatch(/\/api\/downloads\/[A-Za-z0-9_-]{43}\.ndjson$/);
    expect(other.downloadUrl).not.toBe(data.downloadUrl);
  });

  it('records export.create in the activity of the user who exported', async () => {
    await createOk({ type: 'error', format: 'json', startDate: new Date(T0).toISOString() });
    const activity = await activityOf(app, admin, owner.id);
    const entry = activity.find((a) => a.action === 'export.create');
    expect(entry).toBeDefined();
    expect(entry!.resource).toMatch(new RegExp(`^domains/${domain.id}/exports/\\d+$`));
    expect(entry!.details).toContain(domain.name);
    expect(entry!.userAgent).toBe('vitest');
  });

  it('needs a bearer token (401), logs: read (403), and a domain the caller may see (404, also for another owner)', async () => {
    const body = { type: 'access', startDate: new Date(T0).toISOString() };
    expectAuthRequired(await call(app, 'POST', exportUrl(domain.id), { body }));
    expectAuthRequired(await call(app, 'POST', exportUrl(domain.id), { body, token: 'not-a-token' }));

    const stranger = await freshUser(app, admin, 'stranger');
    const bola = await call(app, 'POST', exportUrl(domain.id), { token: stranger.token, body });
    expect(bola.status).toBe(404);
    expect(bola.body).toEqual({ success: false, error: 'Domain not found' });
    const unknown = await call(app, 'POST', exportUrl(999_999), { token: owner.token, body });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ success: false, error: 'Domain not found' });

    // The stranger's own domain, without logs: read.
    const own = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `stranger-${process.pid}.example.com`, ownerId: stranger.id } });
    expect(own.status).toBe(201);
    const revoked = await call(app, 'PUT', `/api/users/${stranger.id}/permissions`, { token: admin, body: { permissions: [] } });
    expect(revoked.status).toBe(200);
    const forbidden = await call(app, 'POST', exportUrl(own.body.data.id), { token: stranger.token, body });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body).toEqual({ success: false, error: 'Insufficient permissions' });
  });

  it('answers 422 for bad bodies, naming each offending field', async () => {
    const start = new Date(T0).toISOString();
    // details maps top-level fields; an issue inside `filters` is led by where in it (`method[1]: …`).
    const bad = async (body: unknown, fields: string[], lead = '') => {
      const res = await call(app, 'POST', exportUrl(domain.id), { token: owner.token, body });
      expectValidation(res, fields);
      expect(Object.keys(res.body.details), JSON.stringify(res.body.details)).toEqual(fields);
      expect(res.body.details[fields[0]!].startsWith(lead), res.body.details[fields[0]!]).toBe(true);
    };
    await bad({ type: 'access', startDate: start, extra: 1 }, ['extra']);
    await bad({ type: 'access' }, ['startDate']);
    await bad({ startDate: start }, ['type']);
    await bad({ type: 'syslog', startDate: start }, ['type']);
    await bad({ type: 'access', format: 'xlsx', startDate: start }, ['format']);
    await bad({ type: 'access', startDate: 'yesterday' }, ['startDate']);
    await bad({ type: 'access', startDate: '2026-02-30' }, ['startDate']);
    await bad({ type: 'access', startDate: 1_700_000_000 }, ['startDate']);
    await bad({ type: 'access', startDate: start, endDate: 'soon' }, ['endDate']);
    await bad({ type: 'access', startDate: start, endDate: new Date(T0 - 1000).toISOString() }, ['endDate']);
    await bad({ type: 'access', startDate: new Date(Date.now() + 3_600_000).toISOString() }, ['startDate']);
    await bad({ type: 'access', startDate: start, filters: 'status=500' }, ['filters']);
    await bad({ type: 'access', startDate: start, filters: { statusCode: [404, '6xx'] } }, ['filters'], 'statusCode[1]: ');
    await bad({ type: 'access', startDate: start, filters: { statusCode: [] } }, ['filters'], 'statusCode: ');
    await bad({ type: 'access', startDate: start, filters: { method: ['GET', 'NOT A METHOD'] } }, ['filters'], 'method');
    await bad({ type: 'access', startDate: start, filters: { ipAddress: '10.0.0.0/33' } }, ['filters'], 'ipAddress: ');
    await bad({ type: 'access', startDate: start, filters: { colour: 'red' } }, ['filters'], 'Unknown field colour');
    // Filters are those of the type: an access filter on an error export is unknown there.
    await bad({ type: 'error', startDate: start, filters: { statusCode: [500] } }, ['filters'], 'Unknown field statusCode');
    await bad({ type: 'error', startDate: start, filters: { level: ['fatal'] } }, ['filters'], 'level');

    const notJson = await call(app, 'POST', exportUrl(domain.id), { token: owner.token, body: '{"type": ' });
    expect(notJson.status).toBe(400);
  });
});

describe('GET /api/downloads/:file', () => {
  it('streams CSV without a bearer header: RFC 4180, the header row of the spec, every row newest first', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    const { res, text } = await downloadText(downloadUrl);
    expect(res.headers.get('content-type')).toMatch(/^text\/csv; charset=utf-8/);
    expect(res.headers.get('content-disposition')).toMatch(new RegExp(`^attachment; filename="${domain.name.replaceAll('.', '\\.')}-access-\\d{8}T\\d{6}Z\\.csv"$`));
    expect(res.headers.get('cache-control')).toBe('no-store');

    const records = parseCsv(text);
    expect(records[0]).toEqual(ACCESS_FIELDS);
    const rows = records.slice(1);
    expect(rows).toHaveLength(gens.length);
    const expected = newestFirst(gens);
    const ids = new Set<string>();
    rows.forEach((row, i) => {
      const e = asEntry(expected[i]!);
      const [id, ...rest] = row;
      expect(id).toMatch(/^[1-9]\d*$/);
      ids.add(id!);
      expect(rest).toEqual([
        e.timestamp,
        e.ipAddress,
        e.method,
        e.url,
        e.protocol,
        String(e.statusCode),
        String(e.responseSize),
        neutralised(e.referrer),
        neutralised(e.userAgent),
        String(e.responseTime),
      ]);
    });
    expect(ids.size).toBe(rows.length);
  });

  it('neutralises formula cells and quotes commas, quotes and line breaks in CSV', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0 + BULK * 1000).toISOString() });
    const { text } = await downloadText(downloadUrl);
    // Raw text checks, independent of the reader above: every string is quoted, quotes doubled.
    expect(text.startsWith(`${ACCESS_FIELDS.join(',')}\r\n`)).toBe(true);
    expect(text).toContain(`,"'=HYPERLINK(""http://evil.example"",""x"")",`);
    expect(text).toContain(`,"https://a.example/?a=1,b=2","'+1+2",`);
    expect(text).toContain(`,"'-2+3",`);
    expect(text).toContain(`,"'@SUM(A1:A9)",`);
    expect(text).toContain(`,"'\tstarts with a tab",`);
    expect(text).toContain(`,"'\rstarts with a carriage return",`);
    expect(text).toContain(`,"two\nlines, ""quoted""",`);
    expect(text).toContain(`,"crlf\r\ninside",`);
    expect(text).toContain(`,"ünïcødé 😀 ok",`);
    expect(text).toContain(`,"""","ends with a quote""",`);
    expect(text).toContain(`,"/q?name=O'Brien\\x",`);
    const rows = parseCsv(text).slice(1);
    expect(rows.map((r) => r[9])).toEqual(newestFirst(gens.slice(BULK)).map((g) => neutralised(g.userAgent)));
  });

  it('streams NDJSON: one entry a line, the listing fields and formats, values raw', async () => {
    const { downloadUrl } = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString() });
    const { res, text } = await downloadText(downloadUrl);
    expect(res.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename=".+-access-\d{8}T\d{6}Z\.ndjson"$/);
    expect(text.endsWith('\n')).toBe(true);
    const lines = text.slice(0, -1).split('\n');
    expect(lines).toHaveLength(gens.length);
    const expected = newestFirst(gens);
    lines.forEach((line, i) => {
      const entry = JSON.parse(line);
      expect(Object.keys(entry)).toEqual(ACCESS_FIELDS);
      expect(Number.isSafeInteger(entry.id) && entry.id > 0).toBe(true);
      expect(entry.timestamp).toMatch(ISO_MS);
      const { id: _id, ...rest } = entry;
      expect(rest).toEqual(asEntry(expected[i]!));
    });
    // Formulas are not touched in NDJSON.
    expect(lines.some((l) => JSON.parse(l).userAgent === '=HYPERLINK("http://evil.example","x")')).toBe(true);

    // The listing's first page, entry for entry (ids included).
    const listing = await call(app, 'GET', `/api/logs/domains/${domain.id}/access?startDate=${new Date(T0).toISOString()}&limit=1000`, { token: owner.token });
    expect(listing.status).toBe(200);
    expect(listing.body.data.pagination.total).toBe(gens.length);
    expect(lines.slice(0, 1000).map((l) => JSON.parse(l))).toEqual(listing.body.data.logs);
  });

  it('exports error entries with their context object (NDJSON) or its JSON text (CSV), filtered by level', async () => {
    const start = new Date(T0).toISOString();
    const ndjson = await downloadText((await createOk({ type: 'error', format: 'json', startDate: start })).downloadUrl);
    const entries = ndjson.text.trim().split('\n').map((l) => JSON.parse(l));
    expect(entries.map((e) => Object.keys(e))).toEqual(ERROR_LINES.map(() => ERROR_FIELDS));
    const expected = [...ERROR_LINES].reverse();
    expect(entries.map((e) => [e.timestamp, e.level, e.message])).toEqual(expected.map((e) => [new Date(T0 + e.n * 60_000).toISOString(), e.level, e.message]));
    expect(entries[3].context).toEqual({ client: '203.0.113.8', server: 'shop', request: 'POST /api HTTP/1.1', upstream: 'http://127.0.0.1:8080/api', host: 'shop.example.com' });
    expect(entries[1].context).toEqual({});
    const listing = await call(app, 'GET', `/api/logs/domains/${domain.id}/error?startDate=${start}`, { token: owner.token });
    expect(listing.status).toBe(200);
    expect(entries).toEqual(listing.body.data.logs);

    const csv = await downloadText((await createOk({ type: 'error', startDate: start, filters: { level: ['warn', 'info'] } })).downloadUrl);
    const records = parseCsv(csv.text);
    expect(records[0]).toEqual(ERROR_FIELDS);
    expect(records.slice(1).map((r) => r[2])).toEqual(['info', 'info', 'warn']);
    const warn = records[3]!;
    expect(warn[3]).toBe(`'=cmd|' /C calc'!A0 an upstream response is buffered`);
    expect(JSON.parse(warn[4]!)).toEqual(entries[3].context);

    const one = await downloadText((await createOk({ type: 'error', startDate: start, filters: { level: 'error' } })).downloadUrl);
    expect(parseCsv(one.text).slice(1).map((r) => r[2])).toEqual(['error', 'error']);
  });

  it('counts equal the independent computation over the generated lines and the listing totals, for each filter', async () => {
    const start = T0 + 100_000;
    const end = T0 + (BULK + TRICKY.length) * 1000;
    const inRange = gens.filter((g) => g.ms >= start && g.ms <= end);
    const cases: { filters: Record<string, unknown>; query: string | null; keep: (g: Gen) => boolean }[] = [
      { filters: {}, query: '', keep: () => true },
      { filters: { statusCode: [404] }, query: 'statusCode=404', keep: (g) => g.statusCode === 404 },
      { filters: { statusCode: ['5xx'] }, query: 'statusCode=5xx', keep: (g) => g.statusCode >= 500 },
      { filters: { statusCode: [301, '5xx'] }, query: null, keep: (g) => g.statusCode === 301 || g.statusCode >= 500 },
      { filters: { method: ['post'] }, query: 'method=post', keep: (g) => g.method === 'POST' },
      { filters: { method: ['GET', 'delete'] }, query: null, keep: (g) => g.method === 'GET' || g.method === 'DELETE' },
      { filters: { ipAddress: '192.168.0.0/16' }, query: 'ipAddress=192.168.0.0%2F16', keep: (g) => ipv4InCidr(g.ipAddress, '192.168.0.0/16') },
      { filters: { ipAddress: '10.1.2.3' }, query: 'ipAddress=10.1.2.3', keep: (g) => g.ipAddress === '10.1.2.3' },
      { filters: { url: '/item/12' }, query: 'url=%2Fitem%2F12', keep: (g) => g.url.includes('/item/12') },
      { filters: { url: '/item/*?q=3' }, query: 'url=%2Fitem%2F*%3Fq%3D3', keep: (g) => /^\/item\/.*\?q=3$/.test(g.url) },
      { filters: { url: "O'Brien\\" }, query: null, keep: (g) => g.url.includes("O'Brien\\") },
      {
        filters: { statusCode: ['2xx', 404], method: ['GET', 'PUT'], url: '?q=1' },
        query: null,
        keep: (g) => (g.statusCode < 300 || g.statusCode === 404) && (g.method === 'GET' || g.method === 'PUT') && g.url.includes('?q=1'),
      },
    ];
    for (const c of cases) {
      const expected = inRange.filter(c.keep);
      const { downloadUrl } = await createOk({
        type: 'access',
        format: 'json',
        startDate: new Date(start).toISOString(),
        endDate: new Date(end).toISOString(),
        filters: c.filters,
      });
      const { text } = await downloadText(downloadUrl);
      const urls = text.split('\n').filter(Boolean).map((l) => JSON.parse(l).url);
      expect(urls, JSON.stringify(c.filters)).toEqual(newestFirst(expected).map((g) => g.url));
      expect(expected.length, JSON.stringify(c.filters)).toBeGreaterThan(0);

      if (c.query !== null) {
        const sep = c.query ? '&' : '';
        const listing = await call(app, 'GET', `/api/logs/domains/${domain.id}/access?${c.query}${sep}startDate=${new Date(start).toISOString()}&endDate=${new Date(end).toISOString()}&limit=1`, { token: owner.token });
        expect(listing.status, JSON.stringify(listing.body)).toBe(200);
        expect(listing.body.data.pagination.total, c.query).toBe(expected.length);
      }
    }
  });

  it('gives responseTime null (NDJSON) or an empty field (CSV) where the log format has no $request_time', async () => {
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `combined-${process.pid}.example.com`, ownerId: owner.id } });
    const d = made.body.data;
    const line = gen(1).line.replace(/ [0-9.]+$/, '');
    await importText(d.name, `${line}\n`, 'access', 'combined');
    const start = new Date(T0).toISOString();
    const ndjson = await downloadText((await createOk({ type: 'access', format: 'json', startDate: start }, owner.token, d.id)).downloadUrl);
    expect(JSON.parse(ndjson.text)).toMatchObject({ ...asEntry(gen(1)), responseTime: null });
    const csv = await downloadText((await createOk({ type: 'access', startDate: start }, owner.token, d.id)).downloadUrl);
    const rows = parseCsv(csv.text);
    expect(rows).toHaveLength(2);
    expect(rows[1]![10]).toBe('');
    expect(csv.text.endsWith(',\r\n')).toBe(true);
  });

  it('fixes endDate at creation: entries logged later with later times are not in the file', async () => {
    const { downloadUrl } = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString() });
    // A line from after the export was created, through the real ingest path.
    await importText(domain.name, `${gen(0, { ms: Date.now() + 60_000, url: '/after-the-export' }).line}\n`);
    const { text } = await downloadText(downloadUrl);
    expect(text).not.toContain('/after-the-export');
    expect(text.trim().split('\n')).toHaveLength(gens.length);
    const again = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString(), endDate: new Date(Date.now() + 3_600_000).toISOString() });
    expect((await downloadText(again.downloadUrl)).text).toContain('/after-the-export');
  });

  it('answers 404 for unknown or malformed file names and for the other format, and HEAD runs no query', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    const file = new URL(downloadUrl).pathname.split('/').pop()!;
    const token = file.slice(0, -4);
    for (const name of [`${'A'.repeat(43)}.csv`, `${token}.ndjson`, token, `${token}.csv.gz`, 'x.csv', `..%2F${token}.csv`]) {
      const res = await app.request(`/api/downloads/${name}`);
      expect(res.status, name).toBe(404);
      expect(await res.json()).toEqual({ success: false, error: 'Download not found' });
    }
    const head = await fetchDownload(downloadUrl, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers.get('content-disposition')).toMatch(/^attachment;/);
    expect(downloadsInProgress()).toBe(0);
  });

  it('answers 410 once expired; the sweep removes records a week past expiry, after which the link is unknown', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    const id = await lastExportId();
    await t.runtime.db.query(sql`update exports set expires_at = now() - interval '1 second' where id = ${id}`);
    const expired = await fetchDownload(downloadUrl);
    expect(expired.status).toBe(410);
    expect(await expired.json()).toEqual({ success: false, error: 'Download link expired' });

    // Still within the week kept after expiry: the sweep leaves it.
    await sweepExpiredExports(t.runtime.db);
    expect((await fetchDownload(downloadUrl)).status).toBe(410);
    const removed = await sweepExpiredExports(t.runtime.db, new Date(Date.now() + EXPORT_LIMITS.keepExpiredMs + 60_000));
    expect(removed).toBeGreaterThanOrEqual(1);
    expect((await fetchDownload(downloadUrl)).status).toBe(404);
  });

  it('stops working when the creator may no longer read the logs, and when the domain is deleted', async () => {
    const user = await freshUser(app, admin, 'leaver');
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `leaver-${process.pid}.example.com`, ownerId: user.id } });
    const d = made.body.data;
    await importText(d.name, `${gen(5).line}\n${gen(6).line}\n`);
    const first = await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, user.token, d.id);
    expect(parseCsv((await downloadText(first.downloadUrl)).text)).toHaveLength(3);
    // Deactivated: the link dies with the account's sessions.
    expect((await call(app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    expect((await fetchDownload(first.downloadUrl)).status).toBe(404);
    expect((await call(app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { active: true } })).status).toBe(200);
    await downloadText(first.downloadUrl);

    // An admin's export of the same domain; deleting the domain removes both records (FK cascade).
    const byAdmin = await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, admin, d.id);
    const [before] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from exports where domain_id = ${d.id}`);
    expect(before!.n).toBe(2);
    expect((await call(app, 'DELETE', `/api/domains/${d.id}`, { token: admin })).status).toBe(200);
    const [after] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from exports where domain_id = ${d.id}`);
    expect(after!.n).toBe(0);
    expect((await fetchDownload(first.downloadUrl)).status).toBe(404);
    expect((await fetchDownload(byAdmin.downloadUrl)).status).toBe(404);
  });
});

describe('limits', () => {
  it('holds a user to the hourly number of exports (429 with Retry-After)', async () => {
    const user = await freshUser(app, admin, 'busy');
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `busy-${process.pid}.example.com`, ownerId: user.id } });
    const body = { type: 'access', startDate: new Date(T0).toISOString() };
    for (let i = 0; i < EXPORT_LIMITS.perUserPerHour; i++) await createOk(body, user.token, made.body.data.id);
    const refused = await call(app, 'POST', exportUrl(made.body.data.id), { token: user.token, body });
    expect(refused.status).toBe(429);
    expect(refused.body.success).toBe(false);
    const retry = Number(refused.headers.get('retry-after'));
    expect(retry).toBeGreaterThan(3000);
    expect(retry).toBeLessThanOrEqual(3600);
    // Others are not held back by it.
    await createOk(body);
  });

  it('holds the hourly limit under 40 concurrent creations: exactly the limit succeeds, the rest is 429', async () => {
    const user = await freshUser(app, admin, 'racer');
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `racer-${process.pid}.example.com`, ownerId: user.id } });
    const body = { type: 'access', startDate: new Date(T0).toISOString() };
    const answers = await Promise.all(Array.from({ length: 40 }, () => call(app, 'POST', exportUrl(made.body.data.id), { token: user.token, body })));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(EXPORT_LIMITS.perUserPerHour);
    expect(statuses.filter((s) => s === 429)).toHaveLength(40 - EXPORT_LIMITS.perUserPerHour);
    const [stored] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from exports where user_id = ${user.id}`);
    expect(stored!.n).toBe(EXPORT_LIMITS.perUserPerHour);
    // Each created export is in the creator's activity, and no refused one is.
    const [recorded] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from activity where user_id = ${user.id} and action = 'export.create'`);
    expect(recorded!.n).toBe(EXPORT_LIMITS.perUserPerHour);
  });

  it('refuses an export above the row limit with a 422 naming the range', async () => {
    const principal = { user: { id: owner.id, role: 'user' }, permissions: { can: () => true } } as never;
    const range = { type: 'access' as const, format: 'csv' as const, startDate: new Date(T0), filters: {}, selection: { type: 'access' as const, filters: {} } };
    const limits = { ...EXPORT_LIMITS, maxRows: 10 };
    await expect(createExport(t.runtime, principal, domain.id, range, { ipAddress: '', userAgent: '' }, { limits })).rejects.toMatchObject({
      status: 422,
      details: { startDate: expect.stringContaining('more than the limit of 10') },
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Download slots and slow readers, over a real listening server and raw sockets
// ---------------------------------------------------------------------------------------------

interface RawDownload {
  /** The response's status line and headers, once they arrived. */
  head: Promise<{ status: number; headers: Record<string, string>; text: string }>;
  /** Reads everything left at full speed until the server closes the connection; the raw bytes after the head. */
  drain(): Promise<Buffer>;
  destroy(): void;
}

/**
 * A GET over a raw socket that reads the response head, then takes `bytesPerTick` every
 * `tickMs` (0: nothing more): a client on a slow link, or one that stopped reading. The kernel's
 * socket buffers fill first; after that the server can hand on only what this reader takes.
 */
function rawDownload(port: number, pathname: string, pace: { bytesPerTick: number; tickMs?: number }): RawDownload {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  socket.write(`GET ${pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
  let buffered = Buffer.alloc(0);
  let headEnd = -1;
  let closed = false;
  const closing = new Promise<void>((resolve) => socket.once('close', () => ((closed = true), resolve())));
  let resolveHead!: (head: Awaited<RawDownload['head']>) => void;
  const head = new Promise<Awaited<RawDownload['head']>>((resolve) => (resolveHead = resolve));
  const take = (max: number) => {
    const size = Math.min(max, socket.readableLength);
    const chunk = size > 0 ? (socket.read(size) as Buffer | null) : (socket.read(0), null);
    if (chunk) buffered = Buffer.concat([buffered, chunk]);
  };
  const timer = setInterval(() => {
    if (headEnd < 0) {
      take(Infinity);
      headEnd = buffered.indexOf('\r\n\r\n');
      if (headEnd < 0) return;
      const text = buffered.subarray(0, headEnd).toString('latin1');
      const [statusLine, ...lines] = text.split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      resolveHead({ status: Number(statusLine!.split(' ')[1]), headers, text: buffered.subarray(headEnd + 4).toString() });
    } else if (pace.bytesPerTick > 0) take(pace.bytesPerTick);
  }, pace.tickMs ?? 20);
  return {
    head,
    async drain() {
      clearInterval(timer);
      socket.on('data', (chunk: Buffer) => (buffered = Buffer.concat([buffered, chunk])));
      if (!closed) await closing;
      return buffered.subarray(headEnd + 4);
    },
    destroy() {
      clearInterval(timer);
      socket.destroy();
    },
  };
}

/** The last chunk of a chunked HTTP body: a body cut short has none. */
const LAST_CHUNK = '0\r\n\r\n';

describe('download slots and slow readers (real server)', () => {
  const ROWS = 100_000;
  let bigDomain: { id: number; name: string };
  let bigOwner: { id: number; token: string; email: string };
  const servers: ServerType[] = [];

  async function listen(options: Parameters<typeof createApp>[1] = {}): Promise<number> {
    const server = await new Promise<ServerType>((resolve) => {
      const s = serve({ fetch: createApp(t.runtime, options).fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    servers.push(server);
    return (server.address() as net.AddressInfo).port;
  }

  const pathOf = (downloadUrl: string) => new URL(downloadUrl).pathname;

  beforeAll(async () => {
    bigOwner = await freshUser(app, admin, 'big-reader');
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `readers-${process.pid}.example.com`, ownerId: bigOwner.id } });
    bigDomain = made.body.data;
    // About 30 MB of CSV: far more than the sockets' kernel buffers hold, so a slow reader holds the server back.
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t:Int64} + number * 10), 'UTC'), '10.7.0.1', 'GET',
          concat('/big/', toString(number), '/', repeat('x', 200)), 'HTTP/1.1', 200, 1, '', 'agent', 1
        FROM numbers({n:UInt32})`,
      query_params: { d: bigDomain.id, t: T0, n: ROWS },
    });
  });

  afterAll(async () => {
    for (const server of servers) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ('closeAllConnections' in server) server.closeAllConnections();
      });
    }
  });

  it('gives one user at most 2 of the 4 slots: a third download of theirs is 429, others still download; a reader that goes away frees its slot', async () => {
    const port = await listen();
    const start = { type: 'access', startDate: new Date(T0).toISOString() };
    const ofOwner = pathOf((await createOk(start, bigOwner.token, bigDomain.id)).downloadUrl);
    const ofAdmin = pathOf((await createOk(start, admin, bigDomain.id)).downloadUrl);
    const ofOther = pathOf((await createOk(start)).downloadUrl);
    const held: RawDownload[] = [];
    try {
      // The owner's two readers stop reading; their downloads keep their slots.
      for (let i = 0; i < EXPORT_LIMITS.concurrentDownloadsPerUser; i++) {
        const r = rawDownload(port, ofOwner, { bytesPerTick: 0 });
        held.push(r);
        expect((await r.head).status).toBe(200);
      }
      const third = rawDownload(port, ofOwner, { bytesPerTick: 1 << 20 });
      held.push(third);
      const refused = await third.head;
      expect(refused.status).toBe(429);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
      expect(JSON.parse(refused.text)).toEqual({ success: false, error: expect.stringContaining(`at most ${EXPORT_LIMITS.concurrentDownloadsPerUser} at once`) });

      // Another user takes the process's remaining slots.
      for (let i = EXPORT_LIMITS.concurrentDownloadsPerUser; i < EXPORT_LIMITS.concurrentDownloads; i++) {
        const r = rawDownload(port, ofAdmin, { bytesPerTick: 0 });
        held.push(r);
        expect((await r.head).status).toBe(200);
      }
      expect(downloadsInProgress()).toBe(EXPORT_LIMITS.concurrentDownloads);
      const full = await fetch(`http://127.0.0.1:${port}${ofOther}`);
      expect(full.status).toBe(429);
      expect((await full.json()).error).toBe('Too many downloads in progress; try again shortly');

      // One of the owner's readers goes away: its slot is free at once, for anyone.
      held[0]!.destroy();
      await until(() => downloadsInProgress() === EXPORT_LIMITS.concurrentDownloads - 1, 'the slot of the reader that went away');
      const res = await fetch(`http://127.0.0.1:${port}${ofOther}`);
      expect(res.status).toBe(200);
      expect(parseCsv(await res.text())).toHaveLength(gens.length + 1);
    } finally {
      for (const r of held) r.destroy();
      await until(() => downloadsInProgress() === 0, 'every download to end');
    }
  });

  it('cuts a reader that trickles below the minimum pace, and one that stopped, long before 120 s; a reader at full speed gets the whole file', async () => {
    const pace = { minBytesPerS: 256 * 1024, windowMs: 400 };
    const port = await listen({ exportLimits: { ...EXPORT_LIMITS, readerPace: pace } });
    const link = pathOf((await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, bigOwner.token, bigDomain.id)).downloadUrl);

    // Full speed first, on the same pace: every row arrives.
    const whole = await fetch(`http://127.0.0.1:${port}${link}`);
    expect(whole.status).toBe(200);
    const size = (await whole.arrayBuffer()).byteLength;
    expect(size).toBeGreaterThan(25 * 1024 * 1024);
    expect(downloadsInProgress()).toBe(0);

    // 4 KiB every 50 ms is 80 KiB/s: never silent, but below 256 KiB/s.
    const trickle = rawDownload(port, link, { bytesPerTick: 4096, tickMs: 50 });
    const stopped = rawDownload(port, link, { bytesPerTick: 0 });
    try {
      expect((await trickle.head).status).toBe(200);
      expect((await stopped.head).status).toBe(200);
      await until(() => downloadsInProgress() === 0, 'both slow readers to be cut', 20_000);
      // Each connection was closed in the middle of the file.
      for (const r of [trickle, stopped]) {
        const body = await r.drain();
        expect(body.length).toBeLessThan(size);
        expect(body.subarray(-LAST_CHUNK.length).toString()).not.toBe(LAST_CHUNK);
      }
    } finally {
      trickle.destroy();
      stopped.destroy();
    }
  });
});

describe('the reader\'s pace', () => {
  const pace = { minBytesPerS: 1_000_000, windowMs: 60 };
  /** A source whose every chunk takes `delayMs` to come, like a slow query. */
  const slowSource = (chunks: Uint8Array[], delayMs: number) =>
    async function* () {
      for (const chunk of chunks) {
        await new Promise((resolve) => setTimeout(resolve, delayMs));
        yield chunk;
      }
    };

  it('does not count the time spent waiting for the query against the reader', async () => {
    const ends: ExportBodyEnd[] = [];
    // 10 bytes every 150 ms is far below the pace, but the reader takes each at once.
    const body = await openExportBody(slowSource(Array.from({ length: 5 }, () => new Uint8Array(10).fill(65)), 150), 'access', 'json', (end) => ends.push(end), pace);
    expect(await new Response(body).text()).toBe('A'.repeat(50));
    expect(ends).toEqual([{ bytes: 50 }]);
  });

  it('hands a large chunk on in pieces of at most PIECE_BYTES, and cuts the reader that stops taking them', async () => {
    const chunk = new Uint8Array(3 * PIECE_BYTES + 100).map((_, i) => i % 251);
    const ends: ExportBodyEnd[] = [];
    const body = await openExportBody(slowSource([chunk], 0), 'access', 'json', (end) => ends.push(end), pace);
    const reader = body.getReader();
    const pieces: Uint8Array[] = [];
    for (let i = 0; i < 2; i++) pieces.push((await reader.read()).value!);
    expect(pieces.map((p) => p.length)).toEqual([PIECE_BYTES, PIECE_BYTES]);
    expect(Buffer.concat(pieces)).toEqual(Buffer.from(chunk.subarray(0, 2 * PIECE_BYTES)));
    // The reader stops: a window of its time passes without its bytes.
    await until(() => ends.length === 1, 'the reader to be cut');
    expect(ends[0]!.bytes).toBe(2 * PIECE_BYTES);
    expect(ends[0]!.error).toBeInstanceOf(SlowReaderError);
    await expect(reader.read()).rejects.toBeInstanceOf(SlowReaderError);
  });
});

describe('streaming', () => {
  it('exports a million rows with the V8 heap and buffers flat (RSS printed)', { timeout: 180_000 }, async () => {
    const ROWS = 1_000_000;
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `big-${process.pid}.example.com`, ownerId: owner.id } });
    const d = made.body.data;
    const file = path.join(t.dataDir, 'big.log');
    fs.writeFileSync(file, '');
    // 20 lines a second: a million within the last day (T0 is a day ago; the export ends now).
    for (let from = 0; from < ROWS; from += 100_000) {
      let text = '';
      let time = '';
      for (let n = from; n < from + 100_000; n++) {
        if (n % 20 === 0) time = timeLocal(T0 + (n / 20) * 1000);
        text += `10.2.${(n >> 8) & 255}.${n & 255} - - [${time}] "GET /big/${n} HTTP/1.1" 200 ${n % 5000} "-" "agent/${n % 3}" 0.${String(n % 1000).padStart(3, '0')}\n`;
      }
      fs.appendFileSync(file, text);
    }
    const summary = await importFiles(
      [file],
      { domain: d.name, type: 'access', format: FORMAT, timezone: 'UTC' },
      { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, signal: new AbortController().signal, retentionDays: 90 },
    );
    expect(summary.inserted).toBe(ROWS);
    fs.rmSync(file);

    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, owner.token, d.id);
    // Live memory only: a full collection before each sample, so garbage not yet collected (which
    // depends on the collector's timing) cannot make the figure flake.
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const mem = async () => {
      gc();
      // Buffers' memory is released by a sweeper running beside the collector: give it a turn.
      await new Promise((r) => setImmediate(r));
      const m = process.memoryUsage();
      return { rss: m.rss, js: m.heapUsed + m.arrayBuffers };
    };
    const base = await mem();
    const peak = { ...base };
    const started = performance.now();
    const res = await fetchDownload(downloadUrl);
    expect(res.status).toBe(200);
    let bytes = 0;
    let records = 0;
    // Sampled every 16 MB (a full collection each time), whatever the size of the pieces.
    let sampledAt = 0;
    for await (const chunk of res.body!) {
      bytes += chunk.length;
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) records++;
      if (bytes - sampledAt >= 16 * 1024 * 1024) {
        sampledAt = bytes;
        const m = await mem();
        peak.rss = Math.max(peak.rss, m.rss);
        peak.js = Math.max(peak.js, m.js);
      }
    }
    const seconds = (performance.now() - started) / 1000;
    const MB = 1024 * 1024;
    console.log(
      `export of ${ROWS} rows: ${(bytes / MB).toFixed(0)} MB in ${seconds.toFixed(2)} s (${Math.round(ROWS / seconds)} rows/s); ` +
        `peak growth: live V8 heap + buffers ${((peak.js - base.js) / MB).toFixed(1)} MB, RSS ${((peak.rss - base.rss) / MB).toFixed(1)} MB`,
    );
    expect(records).toBe(ROWS + 1);
    // The file is about 120 MB: holding it, or any sizeable part, in JavaScript would show here.
    // Streaming keeps a few chunks (about 1 MB each) alive; measured 2–19 MB, on a busy machine too.
    expect(peak.js - base.js).toBeLessThan(48 * MB);
    expect(bytes).toBeGreaterThan(100 * MB);
  });
});

// ---------------------------------------------------------------------------------------------
// Day slices: one query per UTC day, concatenated
// ---------------------------------------------------------------------------------------------

/** UTC midnight `k` days before today's. */
const dayStart = (k: number) => Math.floor(Date.now() / DAY_MS) * DAY_MS - k * DAY_MS;

interface SliceRow {
  id: number;
  ms: number;
  statusCode: number;
}

/** Access rows with exact millisecond times (nginx logs whole seconds), straight into the table. */
async function insertAccessRows(domainId: number, rows: SliceRow[]): Promise<void> {
  await t.runtime.clickhouse.insert({
    table: 'access_logs',
    format: 'JSONEachRow',
    values: rows.map((r) => ({
      domain_id: domainId,
      id: r.id,
      timestamp: new Date(r.ms).toISOString().replace('T', ' ').replace('Z', ''),
      ip_address: `10.9.${r.id >> 8}.${r.id & 255}`,
      method: 'GET',
      url: `/slice/${r.id}`,
      protocol: 'HTTP/1.1',
      status_code: r.statusCode,
      response_size: r.id * 10,
      referrer: '',
      user_agent: r.id % 2 ? '=odd agent' : 'even agent',
      response_time: r.id,
    })),
  });
}

/**
 * Rows on UTC days 4, 2 and 1 before today, none on day 3 (another domain has rows there, so its
 * partition exists): ties at the first and the last millisecond of a day, ids that do not follow
 * time, a row exactly at each end of the range and one just outside each. Day 2 has no 5xx.
 */
function sliceFixture() {
  const start = dayStart(4);
  const end = dayStart(1) + 12 * 3_600_000;
  const rows: SliceRow[] = [
    { id: 1, ms: start - 1, statusCode: 500 }, // last millisecond of day 5: before the range
    { id: 3, ms: start, statusCode: 500 }, // midnight, exactly startDate
    { id: 2, ms: start, statusCode: 200 },
    { id: 40, ms: start + 12 * 3_600_000, statusCode: 503 },
    { id: 6, ms: dayStart(3) - 1, statusCode: 200 }, // last millisecond of day 4
    { id: 5, ms: dayStart(3) - 1, statusCode: 502 },
    { id: 70, ms: dayStart(2), statusCode: 200 }, // midnight after the empty day 3
    { id: 8, ms: dayStart(2) + 1, statusCode: 404 },
    { id: 9, ms: dayStart(1) - 1, statusCode: 200 },
    { id: 11, ms: dayStart(1), statusCode: 500 },
    { id: 10, ms: dayStart(1), statusCode: 200 },
    { id: 12, ms: end, statusCode: 500 }, // exactly endDate
    { id: 13, ms: end + 1, statusCode: 200 }, // after the range
  ];
  const expected = (keep: (r: SliceRow) => boolean = () => true) =>
    rows.filter((r) => r.ms >= start && r.ms <= end && keep(r)).sort((a, b) => b.ms - a.ms || b.id - a.id);
  return { start, end, rows, expected };
}

describe('export by UTC day', () => {
  // A user of its own: the other tests use up much of the owner's hourly number of exports.
  let user: { id: number; token: string };
  beforeAll(async () => {
    user = await freshUser(app, admin, 'days');
  });

  it('cuts a range at UTC midnights, newest first, both ends of each slice included', () => {
    const range = { startDate: new Date(dayStart(4) + 5), endDate: new Date(dayStart(1) + 7) };
    const days = [1, 2, 4].map((k) => dayStart(k) / DAY_MS);
    // Unordered input, and a day outside the range, give the same slices.
    expect(daySlices([days[2]!, days[0]!, dayStart(9) / DAY_MS, days[1]!], range)).toEqual([
      { startDate: new Date(dayStart(1)), endDate: new Date(dayStart(1) + 7) },
      { startDate: new Date(dayStart(2)), endDate: new Date(dayStart(1) - 1) },
      { startDate: new Date(dayStart(4) + 5), endDate: new Date(dayStart(3) - 1) },
    ]);
    // A range within one day is one slice, the range itself.
    const inDay = { startDate: new Date(dayStart(2) + 1), endDate: new Date(dayStart(2) + 2) };
    expect(daySlices([dayStart(2) / DAY_MS], inDay)).toEqual([inDay]);
    expect(daySlices([], range)).toEqual([]);
  });

  it('runs the queries one after another and starts none after the reader went away or the signal was aborted', async () => {
    const events: string[] = [];
    const bytes: QueryBytes = async function* (query) {
      events.push(`start ${query.sql}`);
      try {
        yield new TextEncoder().encode(`${query.sql}1`);
        yield new TextEncoder().encode(`${query.sql}2`);
      } finally {
        events.push(`end ${query.sql}`);
      }
    };
    const queries: ClickhouseQuery[] = ['a', 'b', 'c'].map((sql) => ({ sql, params: {}, format: 'CSV' }));
    const text = async (source: AsyncIterable<Uint8Array>) => {
      let out = '';
      for await (const chunk of source) out += new TextDecoder().decode(chunk);
      return out;
    };

    expect(await text(concatenated(queries, bytes, new AbortController().signal))).toBe('a1a2b1b2c1c2');
    expect(events).toEqual(['start a', 'end a', 'start b', 'end b', 'start c', 'end c']);

    // A reader that takes one chunk and leaves: the query under way ends, no other starts.
    events.length = 0;
    const early = concatenated(queries, bytes, new AbortController().signal);
    expect((await early.next()).done).toBe(false);
    await early.return(undefined);
    expect(events).toEqual(['start a', 'end a']);

    // Aborted in the middle of a query: it is read out, the next does not start.
    events.length = 0;
    const abort = new AbortController();
    const stopped = concatenated(queries, bytes, abort.signal);
    await stopped.next();
    abort.abort();
    expect(await text(stopped)).toBe('a2');
    expect(events).toEqual(['start a', 'end a']);
  });

  it('equals the listing across day boundaries, in the same order, with one CSV header and one query per day', async () => {
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `days-${process.pid}.example.com`, ownerId: user.id } });
    expect(made.status).toBe(201);
    const d = made.body.data;
    const other = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `days-other-${process.pid}.example.com`, ownerId: user.id } });
    const { start, end, rows, expected } = sliceFixture();
    await insertAccessRows(d.id, rows);
    await insertAccessRows(other.body.data.id, [{ id: 1, ms: dayStart(3) + 1000, statusCode: 500 }]);
    const range = { startDate: new Date(start).toISOString(), endDate: new Date(end).toISOString() };

    const listing = await call(app, 'GET', `/api/logs/domains/${d.id}/access?startDate=${range.startDate}&endDate=${range.endDate}&limit=1000`, { token: user.token });
    expect(listing.status).toBe(200);
    const logs = listing.body.data.logs as Record<string, unknown>[];
    expect(logs.map((e) => e.id)).toEqual(expected().map((r) => r.id));

    const streams = vi.spyOn(Session.prototype, 'queryStreamBind');
    try {
      const ndjson = await downloadText((await createOk({ type: 'access', format: 'json', ...range }, user.token, d.id)).downloadUrl);
      expect(ndjson.text.trim().split('\n').map((l) => JSON.parse(l))).toEqual(logs);
      // One query per UTC day holding rows (4, 2, 1: none for the empty day 3), newest first, each within its day.
      const bounds = streams.mock.calls.map(([, params]) => {
        const p = params as Record<string, number>;
        return [Number(p.f1), Number(p.f2)];
      });
      expect(bounds).toEqual([
        [dayStart(1), end],
        [dayStart(2), dayStart(1) - 1],
        [start, dayStart(3) - 1],
      ]);

      const csv = await downloadText((await createOk({ type: 'access', ...range }, user.token, d.id)).downloadUrl);
      const header = `${ACCESS_FIELDS.join(',')}\r\n`;
      expect(csv.text.startsWith(header)).toBe(true);
      expect(csv.text.split(header)).toHaveLength(2);
      const records = parseCsv(csv.text);
      expect(records.slice(1)).toEqual(
        logs.map((e) => ACCESS_FIELDS.map((f) => (typeof e[f] === 'string' ? neutralised(e[f] as string) : String(e[f] ?? '')))),
      );

      // A filter that leaves a day in the middle without rows (no 5xx on day 2).
      const fivexx = await downloadText((await createOk({ type: 'access', format: 'json', ...range, filters: { statusCode: ['5xx'] } }, user.token, d.id)).downloadUrl);
      expect(fivexx.text.trim().split('\n').map((l) => JSON.parse(l).id)).toEqual(expected((r) => r.statusCode >= 500).map((r) => r.id));
    } finally {
      streams.mockRestore();
    }
  });

  it('stops the day under way when the reader goes away, and starts no later day', async () => {
    const made = await call(app, 'POST', '/api/domains', { token: admin, body: { name: `days-cancel-${process.pid}.example.com`, ownerId: user.id } });
    const d = made.body.data;
    // The newest day holds several of the engine's chunks (a granule of 8,192 rows each), so the
    // reader leaves in the middle of it, read-ahead included.
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t:Int64} + number), 'UTC'), '10.0.0.1', 'GET', concat('/n/', toString(number)), 'HTTP/1.1', 200, 1, '', 'agent', 1
        FROM numbers(40000)`,
      query_params: { d: d.id, t: dayStart(1) },
    });
    await insertAccessRows(d.id, [{ id: 1_000_000, ms: dayStart(2), statusCode: 200 }]);
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(dayStart(2)).toISOString(), endDate: new Date(dayStart(0) - 1).toISOString() }, user.token, d.id);

    const streams = vi.spyOn(Session.prototype, 'queryStreamBind');
    try {
      const res = await fetchDownload(downloadUrl);
      expect(res.status).toBe(200);
      await abandonDownload(res);
      expect(streams).toHaveBeenCalledTimes(1);
      const stream = streams.mock.results[0]!.value as { closed: boolean };
      await until(() => stream.closed, 'the query to be cancelled');
    } finally {
      streams.mockRestore();
    }
    // The next download of the same link runs to the end.
    const { text } = await downloadText(downloadUrl);
    expect(parseCsv(text)).toHaveLength(40_002);
  });
});

describe('the OpenAPI document', () => {
  it('describes the export and the download', async () => {
    const res = await call(app, 'GET', '/api/openapi.json');
    expect(res.status).toBe(200);
    const create = res.body.paths['/api/logs/domains/{domainId}/export'].post;
    expect(create.security).toEqual([{ bearerAuth: [] }]);
    expect(Object.keys(create.responses)).toEqual(expect.arrayContaining(['201', '401', '403', '404', '422', '429']));
    expect(res.body.components.schemas.ExportRequest.properties).toHaveProperty('filters');
    const download = res.body.paths['/api/downloads/{file}'].get;
    expect(download.security).toBeUndefined();
    expect(Object.keys(download.responses)).toEqual(expect.arrayContaining(['200', '404', '410']));
  });
});

describe('the query', () => {
  it('takes filter values only as bound parameters', () => {
    const hostile = "x'; DROP TABLE access_logs; --\\";
    for (const format of ['csv', 'json'] as const) {
      const q = exportQuery(7, { type: 'access', filters: { url: hostile } }, { startDate: new Date(T0), endDate: new Date() }, format);
      expect(q.sql).not.toContain('DROP');
      expect(Object.values(q.params)).toContain(hostile);
    }
  });
});

async function lastExportId(): Promise<number> {
  const [row] = await t.runtime.db.query<{ id: number }>(sql`select max(id) as id from exports`);
  return row!.id;
}
