/**
 * Log exports in server mode (CLICKHOUSE_URL): the download streams the body of a ClickHouse HTTP
 * response (`exec`) instead of chDB's cursor. The server is test/support/clickhouse-http.ts, a real
 * ClickHouse HTTP interface over chDB; chDB binds one data directory per process, so this file
 * has no embedded ClickHouse of its own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { chdbOf } from '../../../core/db/clickhouse.js';
import { call, startTestApp, type TestApp } from '../../support/app.js';
import { adminToken, freshUser, ISO_MS } from '../../support/auth.js';
import { startClickhouseHttp, type ClickhouseHttp } from '../../support/clickhouse-http.js';
import { accessLines, importText, T0 } from '../../support/ingest.js';
import { abandonDownload } from '../../support/logs.js';
import { registerDomain } from '../../support/domains.js';
import { DAY_MS } from '../../../core/durations.js';

let dir: string;
let server: ClickhouseHttp;
let t: TestApp;

/** A fresh user and a domain of theirs, created by the administrator. */
async function ownedDomain(user: string, domainPrefix: string) {
  const admin = await adminToken(t.app);
  const owner = await freshUser(t.app, admin, user);
  return { owner, domain: await registerDomain(t.app, admin, { ownerId: owner.id, tag: domainPrefix }) };
}

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
    const { owner, domain } = await ownedDomain('owner', 'server');

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

  it('runs one request per UTC day and writes the days as one file, in the listing order', async () => {
    const { owner, domain } = await ownedDomain('days', 'days');
    const midnight = (k: number) => Math.floor(Date.now() / DAY_MS) * DAY_MS - k * DAY_MS;
    // Days 3 and 1 before today, none on day 2; ties at midnight and at the last millisecond.
    const rows = [
      { id: 5, ms: midnight(3) },
      { id: 4, ms: midnight(3) },
      { id: 3, ms: midnight(2) - 1 },
      { id: 9, ms: midnight(1) },
      { id: 2, ms: midnight(1) + 5 },
      { id: 1, ms: midnight(0) - 1 },
      { id: 7, ms: midnight(0) - 1 },
    ];
    await t.runtime.clickhouse.insert({
      table: 'access_logs',
      format: 'JSONEachRow',
      values: rows.map((r) => ({
        domain_id: domain.id,
        id: r.id,
        timestamp: new Date(r.ms).toISOString().replace('T', ' ').replace('Z', ''),
        ip_address: '10.3.0.1',
        method: 'GET',
        url: `/day/${r.id}`,
        protocol: 'HTTP/1.1',
        status_code: 200,
        response_size: r.id,
        referrer: '',
        user_agent: 'agent',
        response_time: null,
      })),
    });
    const range = { startDate: new Date(midnight(3)).toISOString(), endDate: new Date(midnight(0) - 1).toISOString() };
    const listing = await call(t.app, 'GET', `/api/logs/domains/${domain.id}/access?startDate=${range.startDate}&endDate=${range.endDate}&limit=100`, { token: owner.token });
    expect(listing.status).toBe(200);
    expect(listing.body.data.logs.map((e: { id: number }) => e.id)).toEqual([7, 1, 2, 9, 3, 5, 4]);

    const download = async (format: 'csv' | 'json') => {
      const res = await call(t.app, 'POST', `/api/logs/domains/${domain.id}/export`, { token: owner.token, body: { type: 'access', format, ...range } });
      expect(res.status, JSON.stringify(res.body)).toBe(201);
      const body = await t.app.request(new URL(res.body.data.downloadUrl).pathname);
      expect(body.status).toBe(200);
      return body.text();
    };
    const exec = vi.spyOn(t.runtime.clickhouse, 'exec');
    try {
      const ndjson = await download('json');
      expect(ndjson.trim().split('\n').map((l) => JSON.parse(l))).toEqual(listing.body.data.logs);
      expect(exec.mock.calls.map(([p]) => [Number(p.query_params!.f1), Number(p.query_params!.f2)])).toEqual([
        [midnight(1), midnight(0) - 1],
        [midnight(3), midnight(2) - 1],
      ]);
      const csv = await download('csv');
      const lines = csv.split('\r\n');
      expect(lines[0]).toBe('id,timestamp,ipAddress,method,url,protocol,statusCode,responseSize,referrer,userAgent,responseTime');
      expect(lines.filter((l) => l.startsWith('id,'))).toHaveLength(1);
      expect(lines.slice(1, -1).map((l) => Number(l.split(',')[0]))).toEqual([7, 1, 2, 9, 3, 5, 4]);
    } finally {
      exec.mockRestore();
    }
  });

  it('stops the request under way when the reader goes away, and sends no request for a later day', async () => {
    const { owner, domain } = await ownedDomain('cancel', 'cancel');
    const yesterday = Math.floor(Date.now() / DAY_MS) * DAY_MS - DAY_MS;
    // Yesterday's rows make a response of many chunks; one row the day before.
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t:Int64} + number), 'UTC'), '10.0.0.1', 'GET', concat('/n/', toString(number)), 'HTTP/1.1', 200, 1, '', 'agent', 1
        FROM numbers(30000)`,
      query_params: { d: domain.id, t: yesterday },
    });
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        VALUES ({d:UInt32}, 999999, fromUnixTimestamp64Milli({t:Int64}, 'UTC'), '10.0.0.2', 'GET', '/older', 'HTTP/1.1', 200, 1, '', 'agent', 1)`,
      query_params: { d: domain.id, t: yesterday - DAY_MS },
    });
    const created = await call(t.app, 'POST', `/api/logs/domains/${domain.id}/export`, {
      token: owner.token,
      body: { type: 'access', startDate: new Date(yesterday - DAY_MS).toISOString(), endDate: new Date(yesterday + DAY_MS - 1).toISOString() },
    });
    expect(created.status, JSON.stringify(created.body)).toBe(201);
    const path = new URL(created.body.data.downloadUrl).pathname;

    const exec = vi.spyOn(t.runtime.clickhouse, 'exec');
    try {
      const res = await t.app.request(path);
      expect(res.status).toBe(200);
      await abandonDownload(res);
      expect(exec).toHaveBeenCalledTimes(1);
    } finally {
      exec.mockRestore();
    }
    const whole = await (await t.app.request(path)).text();
    expect(whole.split('\r\n')).toHaveLength(30_003);
    expect(whole).toContain('"/older"');
  });
});
