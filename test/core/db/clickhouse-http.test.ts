import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { ClickHouseError, ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dedupToken, insertAccessBatch, isRetryableInsertError, writeRows, type ErrorRow, type RejectRow } from '../../../ingest/sinks/clickhouse.js';
import { chdbOf, migrateClickhouse, openClickhouse } from '../../../core/db/clickhouse.js';
import { SQL_DIR } from '../../../core/db/migrate.js';
import { createLogger } from '../../../core/log.js';
import { startClickhouseHttp, type ClickhouseHttp } from '../../support/clickhouse-http.js';
import { accessRow, SINK_NOW } from '../../support/ingest.js';
import { DAY_MS } from '../../../core/durations.js';

// chDB is one engine per process: in this file it lives only inside the test server.
let dir: string;
let server: ClickhouseHttp;
let client: ClickHouseClient;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-chhttp-'));
  server = await startClickhouseHttp({ dataDir: path.join(dir, 'server') });
  // Failures are what these tests provoke: keep the client's error log quiet.
  client = createClient({ url: server.url, request_timeout: 10_000, log: { level: ClickHouseLogLevel.OFF } });
});

afterAll(async () => {
  await client?.close();
  await server?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

async function rows<T>(query: string, query_params?: Record<string, unknown>): Promise<T[]> {
  return (await client.query({ query, query_params, format: 'JSONEachRow' })).json<T>();
}

const count = async (table: string) => Number((await rows<{ n: string }>(`SELECT count() AS n FROM ${table}`))[0]!.n);

// A value that breaks naive quoting at every level: SQL quotes, TSV escapes, URL encoding.
const TRICKY = `it's "quoted" \\ back\\slash \\' tab\there\nnewline \\N {x:String} %27 & = + ünï 😀`;

describe('@clickhouse/client against the test server', () => {
  it('answers ping, both as /ping and as a SELECT', async () => {
    expect(await client.ping()).toEqual({ success: true });
    expect(await client.ping({ select: true })).toEqual({ success: true });
  });

  it('creates a table and deduplicates a TabSeparated insert sent twice with one token', async () => {
    await client.command({
      query: 'CREATE TABLE t (id UInt32, name String) ENGINE = MergeTree ORDER BY id SETTINGS non_replicated_deduplication_window = 100',
    });
    const insert = (token: string, body: string) =>
      client.insert({
        table: 't',
        columns: ['id', 'name'],
        values: Readable.from([Buffer.from(body)], { objectMode: false }),
        format: 'TabSeparated',
        clickhouse_settings: { insert_deduplication_token: token, async_insert: 0, insert_deduplicate: 1, max_partitions_per_insert_block: '0' },
      });
    const first = await insert('token-1', '1\tplain\n2\ttab\\there\n');
    expect(first.summary?.written_rows).toBe('2');
    await insert('token-1', '1\tplain\n2\ttab\\there\n');
    expect(await count('t')).toBe(2);
    await insert('token-2', '3\tthird\n');
    expect(await count('t')).toBe(3);
    expect(await rows('SELECT name FROM t WHERE id = 2')).toEqual([{ name: 'tab\there' }]);
  });

  it('inserts JSONEachRow and binds {name:Type} parameters byte-exact', async () => {
    await client.insert({ table: 't', values: [{ id: 10, name: TRICKY }], format: 'JSONEachRow' });
    expect(await rows('SELECT id FROM t WHERE name = {name:String}', { name: TRICKY })).toEqual([{ id: 10 }]);
    const echoed = await rows('SELECT {s:String} AS s, {n:UInt64} AS n, {a:Array(String)} AS a, {m:Map(String, String)} AS m, {z:Nullable(String)} AS z', {
      s: TRICKY,
      n: 2 ** 40,
      a: [TRICKY, ''],
      m: { [TRICKY]: TRICKY },
      z: null,
    });
    expect(echoed).toEqual([{ s: TRICKY, n: 2 ** 40, a: [TRICKY, ''], m: { [TRICKY]: TRICKY }, z: null }]);
  });

  it('answers in the requested format', async () => {
    const json = await (await client.query({ query: 'SELECT id, name FROM t WHERE id <= {max:UInt32} ORDER BY id', query_params: { max: 2 }, format: 'JSON' })).json<{ id: number; name: string }>();
    expect(json.meta?.map((c) => c.name)).toEqual(['id', 'name']);
    expect(json.data).toEqual([
      { id: 1, name: 'plain' },
      { id: 2, name: 'tab\there' },
    ]);
    expect(json.rows).toBe(2);
    const csv = await client.query({ query: 'SELECT id FROM t WHERE id < 3 ORDER BY id', format: 'CSV' });
    expect(csv.response_headers['x-clickhouse-format']).toBe('CSV');
    expect(await csv.text()).toBe('1\n2\n');
    // exec: the caller's SQL as is, the result in the server's default format (TabSeparated).
    const exec = await client.exec({ query: 'SELECT name FROM t WHERE id = 2' });
    expect(await new Response(Readable.toWeb(exec.stream) as ReadableStream).text()).toBe('tab\\there\n');
  });

  it('applies URL settings and the database to their request only', async () => {
    const maxThreads = async (clickhouse_settings?: { max_threads: number }) =>
      (await (await client.query({ query: "SELECT getSetting('max_threads') AS v", format: 'JSONEachRow', clickhouse_settings })).json<{ v: number }>())[0]!.v;
    const usual = await maxThreads();
    expect(await maxThreads({ max_threads: usual + 1 })).toBe(usual + 1);
    expect(await maxThreads()).toBe(usual);
    await client.command({ query: 'CREATE DATABASE other' });
    const other = createClient({ url: server.url, database: 'other', log: { level: ClickHouseLogLevel.OFF } });
    try {
      await other.command({ query: 'CREATE TABLE o (x UInt8) ENGINE = Memory' });
      expect(await rows("SELECT database FROM system.tables WHERE name = 'o'")).toEqual([{ database: 'other' }]);
      expect(await rows('SELECT currentDatabase() AS db')).toEqual([{ db: 'default' }]);
    } finally {
      await other.close();
    }
  });

  it('reports an error as a ClickHouseError with its numeric code', async () => {
    const syntax = await client.query({ query: 'SELEC 1' }).catch((e: unknown) => e);
    expect(syntax).toBeInstanceOf(ClickHouseError);
    expect(syntax).toMatchObject({ code: '62', type: 'SYNTAX_ERROR' });
    const missing = await client.command({ query: 'DROP TABLE no_such_table' }).catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: '60', type: 'UNKNOWN_TABLE' });
    // Data that does not parse: permanent for the sink, unlike a missing table.
    const bad = await client
      .insert({ table: 't', columns: ['id', 'name'], values: Readable.from([Buffer.from('x\ty\n')], { objectMode: false }), format: 'TabSeparated' })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(ClickHouseError);
    expect(isRetryableInsertError(bad)).toBe(false);
    expect(isRetryableInsertError(missing)).toBe(true);
  });

  it('refuses connections while stopped and keeps its data across stop() and start()', async () => {
    const { url } = server;
    await server.stop();
    const down = await client.query({ query: 'SELECT 1' }).catch((e: unknown) => e);
    expect(down).toMatchObject({ code: 'ECONNREFUSED' });
    expect(isRetryableInsertError(down)).toBe(true);
    expect((await client.ping()).success).toBe(false);
    await server.start();
    expect(server.url).toBe(url);
    expect(await count('t')).toBe(4);
  });

  it('fails the next requests on demand without running them', async () => {
    const before = server.requests;
    server.failNext(2, 503);
    for (let i = 0; i < 2; i++) {
      const err = await client.command({ query: 'INSERT INTO t VALUES (99, \'never\')' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect(err).not.toBeInstanceOf(ClickHouseError);
      expect(String(err)).toContain('Service Unavailable');
      expect(isRetryableInsertError(err)).toBe(true);
    }
    expect(await count('t')).toBe(4);
    expect(server.requests - before).toBe(3);
  });

  it('serves a client with request and response compression', async () => {
    const gzip = createClient({ url: server.url, compression: { request: true, response: true }, log: { level: ClickHouseLogLevel.OFF } });
    try {
      await gzip.insert({ table: 't', values: [{ id: 20, name: TRICKY }], format: 'JSONEachRow' });
      expect(await (await gzip.query({ query: 'SELECT name FROM t WHERE id = 20', format: 'JSONEachRow' })).json()).toEqual([{ name: TRICKY }]);
    } finally {
      await gzip.close();
    }
  });
});

// ---------------------------------------------------------------------------------------------
// tailhouse's own server-mode paths: openClickhouse with a URL, the migrations, the sink.

const log = createLogger('silent');

describe('tailhouse in server mode against the test server', () => {
  it('migrates and writes rows through the sink, deduplicated, across an outage', async () => {
    const ch = await openClickhouse({ clickhouseUrl: server.url, dataDir: dir });
    try {
      expect(chdbOf(ch)).toBeUndefined();
      // Every migration in sql/clickhouse applies through the HTTP interface, then none is left.
      expect(await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 })).toBe((await fs.readdir(path.join(SQL_DIR, 'clickhouse'))).filter((f) => f.endsWith('.sql')).length);
      expect(await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 })).toBe(0);

      const accessRows = [accessRow(1, { url: `/q?${TRICKY}`, userAgent: TRICKY }), accessRow(2, { timestamp: SINK_NOW - DAY_MS, responseTime: null })];
      const errorRows: ErrorRow[] = [{ domainId: 1, id: 7, timestamp: SINK_NOW, level: 'warn', message: TRICKY, context: { client: '203.0.113.9', host: TRICKY } }];
      const rejects: RejectRow[] = [{ domainId: null, kind: 'access', source: '/var/log/nginx/x.log', identity: 'fp:1', offset: 0, reason: 'unknown domain', cause: 'unknown_domain', line: TRICKY, length: 99 }];
      const token = dedupToken('fp:1', 0, 500);
      await writeRows(ch, { access: accessRows, error: errorRows, rejects }, token);
      await writeRows(ch, { access: accessRows, error: errorRows, rejects }, token);
      const counts = async () => Promise.all(['access_logs', 'error_logs', 'ingest_rejects'].map(count));
      expect(await counts()).toEqual([2, 1, 1]);
      expect(await rows('SELECT url, user_agent, response_time FROM access_logs ORDER BY id')).toEqual([
        { url: `/q?${TRICKY}`, user_agent: TRICKY, response_time: 1 },
        { url: '/page/2', user_agent: 'curl/8.5.0', response_time: null },
      ]);
      expect(await rows('SELECT message, context FROM error_logs')).toEqual([{ message: TRICKY, context: { client: '203.0.113.9', host: TRICKY } }]);
      expect(await rows('SELECT line FROM ingest_rejects')).toEqual([{ line: TRICKY }]);

      // Down, then back: the failed insert is retryable, and its replay lands once.
      const next = [accessRow(3), accessRow(4)];
      const nextToken = dedupToken('fp:1', 500, 700);
      await server.stop();
      const refused = await insertAccessBatch(ch, next, nextToken).catch((e: unknown) => e);
      expect(isRetryableInsertError(refused)).toBe(true);
      await server.start();
      server.failNext(1, 503);
      const unavailable = await insertAccessBatch(ch, next, nextToken).catch((e: unknown) => e);
      expect(isRetryableInsertError(unavailable)).toBe(true);
      await insertAccessBatch(ch, next, nextToken);
      await insertAccessBatch(ch, next, nextToken);
      expect(await count('access_logs')).toBe(4);
    } finally {
      await ch.close();
    }
  });
});
