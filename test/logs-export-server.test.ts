/**
 * Log exports in server mode (CLICKHOUSE_URL): the download streams the body of a ClickHouse HTTP
 * response (`exec`) instead of chDB's cursor. The server is test/support/clickhouse-http.ts, a real
 * ClickHouse HTTP interface over chDB; chDB binds one data directory per process, so this file
 * has no embedded ClickHouse of its own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chdbOf } from '../src/db/clickhouse.js';
import { call, startTestApp, type TestApp } from './support/app.js';
import { adminToken, freshUser, ISO_MS } from './support/auth.js';
import { startClickhouseHttp, type ClickhouseHttp } from './support/clickhouse-http.js';
import { accessLines, importText, T0 } from './support/ingest.js';

let dir: string;
let server: ClickhouseHttp;
let t: TestApp;
const LINES = 2_500;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-export-server-'));
  server = await startClickhouseHttp({ dataDir: path.join(dir, 'clickhouse') });
  t = await startTestApp({ CLICKHOUSE_URL: server.url });
});

afterAll(async () => {
  await t?.close();
  await server?.close();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('export in server mode', () => {
  it('streams the same rows as the lines ingested, in CSV and NDJSON', async () => {
    expect(chdbOf(t.runtime.clickhouse)).toBeUndefined();
    const admin = await adminToken(t.app);
    const owner = await freshUser(t.app, admin, 'owner');
    const made = await call(t.app, 'POST', '/api/domains', { token: admin, body: { name: `server-${process.pid}.example.com`, ownerId: owner.id } });
    expect(made.status).toBe(201);
    const domain = made.body.data;

    const summary = await importText(t, domain.name, accessLines(0, LINES));
    expect(summary).toMatchObject({ inserted: LINES, rejected: 0 });

    const create = async (body: Record<string, unknown>) => {
      const res = await call(t.app, 'POST', `/api/logs/domains/${domain.id}/export`, { token: owner.token, body });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      const download = await t.app.request(new URL(res.body.data.downloadUrl).pathname);
      expect(download.status).toBe(200);
      return download.text();
    };
    const start = new Date(T0).toISOString();

    const ndjson = (await create({ type: 'access', format: 'json', startDate: start, filters: { statusCode: ['5xx'] } })).trim().split('\n').map((l) => JSON.parse(l));
    const expected = Array.from({ length: LINES }, (_, n) => n).filter((n) => n % 10 === 0).reverse();
    expect(ndjson.map((e) => e.url)).toEqual(expected.map((n) => `/item/${n}?q=${n % 7}`));
    for (const [i, e] of ndjson.entries()) {
      const n = expected[i]!;
      expect(e).toMatchObject({ timestamp: new Date(T0 + n * 1000).toISOString(), statusCode: 500, responseSize: n % 5000, referrer: '', userAgent: `test-agent/${n % 3}`, responseTime: n % 1000 });
      expect(e.timestamp).toMatch(ISO_MS);
    }

    const csv = await create({ type: 'access', startDate: start });
    const lines = csv.split('\r\n');
    expect(lines[0]).toBe('id,timestamp,ipAddress,method,url,protocol,statusCode,responseSize,referrer,userAgent,responseTime');
    expect(lines.at(-1)).toBe('');
    expect(lines).toHaveLength(LINES + 2);
    expect(lines[1]).toMatch(new RegExp(`^\\d+,"${new Date(T0 + (LINES - 1) * 1000).toISOString()}","10\\.1\\.\\d+\\.\\d+","GET","/item/${LINES - 1}\\?q=\\d","HTTP/1\\.1",200,\\d+,"","test-agent/\\d",\\d+$`));
  });
});
