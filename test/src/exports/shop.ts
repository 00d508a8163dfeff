/**
 * What the tests of log exports (src/exports) share: an app with an owner's domain whose logs are loaded
 * through the real ingest path (importFiles) from generated nginx lines, so that every expectation is
 * computed independently from those lines; the request and download helpers, and a strict CSV reader.
 */
import { afterAll, beforeAll, expect } from 'vitest';
import { type App } from '../../../src/app.js';
import { sql } from '../../../core/db/sql.js';
import { createLogger } from '../../../core/log.js';
import { call, startTestApp, type TestApp } from '../../support/app.js';
import { adminToken, freshUser } from '../../support/auth.js';
import { registerDomain } from '../../support/domains.js';
import { nginxEscape } from '../../support/logs.js';
import { errorLogTime, FORMAT, importText as importThroughIngest, T0, timeLocal } from '../../support/ingest.js';

export let t: TestApp;
export let app: App;
export let admin: string;
export let owner: { id: number; token: string; email: string };
export let domain: { id: number; name: string };
export const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

export const ACCESS_FIELDS = ['id', 'timestamp', 'ipAddress', 'method', 'url', 'protocol', 'statusCode', 'responseSize', 'referrer', 'userAgent', 'responseTime'];
export const ERROR_FIELDS = ['id', 'timestamp', 'level', 'message', 'context'];

export interface Gen {
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

export function gen(n: number, overrides: Partial<Omit<Gen, 'line'>> = {}): Gen {
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
export const TRICKY: Partial<Gen>[] = [
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

export const BULK = 3_000;
export let gens: Gen[] = [];

export async function importText(domainName: string, text: string, type: 'access' | 'error' = 'access', format = FORMAT) {
  const summary = await importThroughIngest(t, domainName, text, { type, format });
  expect(summary.rejected).toBe(0);
  return summary;
}

/** The error log: levels folded as docs/reference/logs.md#error-entries says, context from the `, client: …` tail. */
export const ERROR_LINES = [
  { n: 0, nginxLevel: 'error', level: 'error', message: 'open() "/srv/x" failed (2: No such file or directory)', tail: ', client: 203.0.113.7, server: shop, request: "GET /x HTTP/1.1", host: "shop.example.com"' },
  { n: 1, nginxLevel: 'warn', level: 'warn', message: '=cmd|\' /C calc\'!A0 an upstream response is buffered', tail: ', client: 203.0.113.8, server: shop, request: "POST /api HTTP/1.1", upstream: "http://127.0.0.1:8080/api", host: "shop.example.com"' },
  { n: 2, nginxLevel: 'crit', level: 'error', message: 'SSL_do_handshake() failed', tail: ', client: 203.0.113.9, server: 0.0.0.0:443' },
  { n: 3, nginxLevel: 'notice', level: 'info', message: 'signal process started', tail: '' },
  { n: 4, nginxLevel: 'info', level: 'info', message: 'client closed connection while waiting for request', tail: ', client: 203.0.113.10, server: shop' },
];

export const exportUrl = (domainId: number) => `/api/logs/domains/${domainId}/export`;

export async function createOk(body: Record<string, unknown>, token = owner.token, domainId = domain.id): Promise<{ downloadUrl: string; expiresAt: string }> {
  const res = await call(app, 'POST', exportUrl(domainId), { token, body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  expect(res.body.success).toBe(true);
  return res.body.data;
}

/** The download, as a client without any header would fetch it. */
export function fetchDownload(downloadUrl: string, method = 'GET'): Promise<Response> {
  const url = new URL(downloadUrl);
  expect(url.origin).toBe('http://tailhouse.test');
  return Promise.resolve(app.request(url.pathname, { method }));
}

export async function downloadText(downloadUrl: string): Promise<{ res: Response; text: string }> {
  const res = await fetchDownload(downloadUrl);
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return { res, text };
}

/** A strict RFC 4180 reader: CRLF after every record, line breaks only inside quotes. */
export function parseCsv(text: string): string[][] {
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
export const asEntry = (g: Gen) => ({
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
export const neutralised = (v: string) => (/^[=+\-@\t\r]/.test(v) ? `'${v}` : v);

/** Newest first, as the export orders (every generated line has its own second). */
export const newestFirst = (list: Gen[]) => [...list].sort((a, b) => b.ms - a.ms);

export function ipv4InCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/') as [string, string];
  const num = (a: string) => a.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
  const size = 2 ** (32 - Number(bits));
  return Math.floor(num(ip) / size) === Math.floor(num(base) / size);
}

export async function lastExportId(): Promise<number> {
  const [row] = await t.runtime.db.query<{ id: number }>(sql`select max(id) as id from exports`);
  return row!.id;
}

/** The app for the file's tests, an owner and a domain holding the generated access lines and ERROR_LINES, loaded through the real import path; closed after the file. */
export function useExportShop(): void {
  beforeAll(async () => {
    t = await startTestApp();
    app = t.app;
    admin = await adminToken(app);
    owner = await freshUser(app, admin, 'owner');
    domain = await registerDomain(app, admin, { ownerId: owner.id, tag: 'export' });

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
}
