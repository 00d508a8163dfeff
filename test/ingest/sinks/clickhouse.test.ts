import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { createClient } from '@clickhouse/client';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createIdAllocator } from '../../../ingest/ids.js';
import type { ErrorLevel } from '../../../core/entries.js';
import {
  accessTsv,
  dedupToken,
  insertAccessBatch,
  insertErrorBatch,
  insertRejects,
  isRetryableInsertError,
  type AccessRow,
  type ErrorRow,
  type RejectRow,
} from '../../../ingest/sinks/clickhouse.js';
import { chdbOf, migrateClickhouse, openClickhouse, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { migratePostgres } from '../../../core/db/migrate.js';
import { openPglite, type Db } from '../../../core/db/postgres.js';
import { sql } from '../../../core/db/sql.js';
import { createLogger } from '../../../core/log.js';
import { accessRow, SINK_NOW } from '../../support/ingest.js';
import { STORED_TIME_RANGE } from '../../../core/db/time-range.js';
import { userAgentClasses } from '../../../ingest/transforms/user-agent.js';
import { DAY_MS } from '../../../core/durations.js';

let dir: string;
let ch: ClickHouseClient;
const log = createLogger('silent');

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-sink-'));
  ch = await openClickhouse({ dataDir: dir });
  await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 });
});

afterAll(async () => {
  await ch?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

beforeEach(async () => {
  for (const table of ['access_logs', 'error_logs', 'ingest_rejects']) await ch.command({ query: `TRUNCATE TABLE ${table}` });
});

async function select<T>(query: string): Promise<T[]> {
  return (await ch.query({ query, format: 'JSONEachRow' })).json<T>();
}

const count = async (table: string) => Number((await select<{ n: string }>(`SELECT count() AS n FROM ${table}`))[0]!.n);

/** Access rows as stored, in the sink's field names. */
async function storedAccess(): Promise<AccessRow[]> {
  const rows = await select<Record<string, string | number | null>>(`
    SELECT domain_id, id, toUnixTimestamp64Milli(timestamp) AS ts, ip_address, method, url, protocol, status_code,
           response_size, referrer, user_agent, response_time
    FROM access_logs ORDER BY domain_id, timestamp, id`);
  return rows.map((r) => ({
    domainId: Number(r.domain_id),
    id: Number(r.id),
    timestamp: Number(r.ts),
    ipAddress: String(r.ip_address),
    method: String(r.method),
    url: String(r.url),
    protocol: String(r.protocol),
    statusCode: Number(r.status_code),
    responseSize: Number(r.response_size),
    referrer: String(r.referrer),
    userAgent: String(r.user_agent),
    responseTime: r.response_time === null ? null : Number(r.response_time),
    host: null,
  }));
}

// Content a log can carry once nginx's \xHH escapes are decoded, and then some.
const HOSTILE = [
  `it's "quoted" and 'single'`,
  'back\\slash \\\\ double and trailing \\',
  'tab\there\tand\tthere',
  'line\nfeed and carriage\r\nreturn',
  'nul\0byte',
  '\\N',
  '\\x22 literally',
  'ünïcödé — 日本語 — emoji 😀 — combining é',
  '=HYPERLINK("http://evil.example","click")',
  '+SUM(1,2)',
  '-2+3',
  '@cmd',
  '{x:String} %_ LIKE',
  '',
];

describe('access rows', () => {
  it('stores hostile strings, numbers and times byte-exact', async () => {
    const rows = HOSTILE.map((s, i) =>
      accessRow(i, {
        url: `/search?q=${s}`,
        referrer: s,
        userAgent: s,
        method: i === 3 ? 'PROPFIND' : 'GET',
        protocol: i === 4 ? 'HTTP/2.0' : 'HTTP/1.1',
        ipAddress: i % 2 ? `2001:db8::${i}` : `198.51.100.${i}`,
      }),
    );
    rows.push(accessRow(100, { url: `/${'a'.repeat(4096)}?${'b'.repeat(100)}`, userAgent: 'x'.repeat(8000) }));
    rows.push(accessRow(101, { responseTime: null, timestamp: SINK_NOW + 1000, responseSize: 2 ** 40, statusCode: 599 }));
    rows.push(accessRow(102, { timestamp: SINK_NOW + 5, responseTime: 0 }));
    rows.push(accessRow(103, { timestamp: SINK_NOW - DAY_MS + 999, responseTime: 4_294_967_295 }));
    await insertAccessBatch(ch, rows, dedupToken('file-a', 0, 1000));
    const byId = (a: AccessRow, b: AccessRow) => a.id - b.id;
    expect((await storedAccess()).sort(byId)).toEqual([...rows].sort(byId));
  });

  it('keeps the address as text and as IPv6 for range filters', async () => {
    await insertAccessBatch(ch, [accessRow(1, { ipAddress: '10.1.2.3' }), accessRow(2, { ipAddress: '2001:db8::1' }), accessRow(3, { ipAddress: 'unix:' })], 't');
    const rows = await select<{ ip_address: string; ip_text: string; in10: number }>(
      "SELECT ip_address, toString(ip) AS ip_text, ip BETWEEN toIPv6('::ffff:10.0.0.0') AND toIPv6('::ffff:10.255.255.255') AS in10 FROM access_logs ORDER BY id",
    );
    expect(rows).toEqual([
      { ip_address: '10.1.2.3', ip_text: '::ffff:10.1.2.3', in10: 1 },
      { ip_address: '2001:db8::1', ip_text: '2001:db8::1', in10: 0 },
      { ip_address: 'unix:', ip_text: '::', in10: 0 },
    ]);
  });

  it('brings out-of-range numbers and times into their columns instead of failing the batch', async () => {
    const rows = [
      accessRow(1, { statusCode: 70_000, responseSize: -5, responseTime: -1, timestamp: Number.NaN }),
      accessRow(2, { responseTime: 12.4, responseSize: 3.6, timestamp: Date.UTC(2400, 0, 1) }),
    ];
    // A time held at 1970 is long expired: keep TTL from dropping its part before it is read.
    await ch.command({ query: 'SYSTEM STOP TTL MERGES access_logs' });
    try {
      await insertAccessBatch(ch, rows, 't');
      const [a, b] = await storedAccess();
      expect(a).toMatchObject({ statusCode: 65_535, responseSize: 0, responseTime: 0, timestamp: 0 });
      expect(b).toMatchObject({ responseTime: 12, responseSize: 4, timestamp: STORED_TIME_RANGE.last });
    } finally {
      await ch.command({ query: 'SYSTEM START TTL MERGES access_logs' });
    }
  });

  it('lands a batch sent twice with the same token once, across partitions', async () => {
    // Three days: three partitions, so three parts for one insert.
    const rows = [accessRow(1), accessRow(2, { timestamp: SINK_NOW - DAY_MS }), accessRow(3, { timestamp: SINK_NOW - 2 * DAY_MS })];
    const token = dedupToken('file-a', 0, 300);
    await insertAccessBatch(ch, rows, token);
    await insertAccessBatch(ch, rows, token);
    expect(await count('access_logs')).toBe(3);
    // The token decides, not the content: a replay that differs (it should not) still lands once.
    await insertAccessBatch(ch, rows.slice(0, 2), token);
    expect(await count('access_logs')).toBe(3);
    await insertAccessBatch(ch, rows, dedupToken('file-a', 300, 600));
    expect(await count('access_logs')).toBe(6);
  });

  it('lands a batch sent again after a crash that came between its deduplication record and its part', async () => {
    // The engine records an insert's block id, then renames its part into place: killed between
    // the two, the record stays and the part's temporary directory is deleted at the next start.
    // The state such a kill leaves is made here: the last part of each table written by the batch
    // (the second partition of access_logs, and the view's hour counts) put back to a temporary
    // directory behind a complete record. Merges stay off, so the parts are still the insert's own.
    const domainId = 4242;
    const rows = [accessRow(1, { domainId }), accessRow(2, { domainId, timestamp: SINK_NOW - DAY_MS })];
    const token = dedupToken('file-crash', 0, 200);
    const tables = ['access_logs', 'access_hour_rows'];
    for (const table of tables) await ch.command({ query: `SYSTEM STOP MERGES ${table}` });
    await insertAccessBatch(ch, rows, token);
    const lastParts = await Promise.all(
      tables.map(async (table) => (await select<{ path: string }>(`SELECT path FROM system.parts WHERE table = '${table}' AND active ORDER BY max_block_number DESC LIMIT 1`))[0]!.path),
    );
    await ch.close();
    for (const part of lastParts) await fs.rename(part, path.join(path.dirname(part), `tmp_insert_${path.basename(part)}`));
    ch = await openClickhouse({ dataDir: dir });
    expect(await count('access_logs')).toBe(1);

    await insertAccessBatch(ch, rows, token);
    expect(await count('access_logs')).toBe(2);
    // The hour counts match the rows again: the interrupted hour lands once, the other stays once.
    const [hours] = await select<{ n: string }>(`SELECT sum(rows) AS n FROM access_hour_rows WHERE domain_id = ${domainId}`);
    expect(Number(hours!.n)).toBe(2);
    // And the batch is deduplicated as before.
    await insertAccessBatch(ch, rows, token);
    expect(await count('access_logs')).toBe(2);
  });

  it('is a no-op for an empty batch', async () => {
    await insertAccessBatch(ch, [], 't');
    expect(await count('access_logs')).toBe(0);
  });

  it('stores a large batch completely', async () => {
    const rows = Array.from({ length: 50_000 }, (_, i) => accessRow(i, { userAgent: `agent ${i % 97}`, url: `/p/${i}\t${HOSTILE[i % HOSTILE.length]}` }));
    await insertAccessBatch(ch, rows, 'big');
    const [stats] = await select<{ n: string; ids: string; urls: string }>('SELECT count() AS n, uniqExact(id) AS ids, sum(length(url)) AS urls FROM access_logs');
    expect(Number(stats!.n)).toBe(rows.length);
    expect(Number(stats!.ids)).toBe(rows.length);
    expect(Number(stats!.urls)).toBe(rows.reduce((s, r) => s + Buffer.byteLength(r.url), 0));
  });
});

const LEVELS: ErrorLevel[] = ['error', 'warn', 'info', 'debug'];

describe('error rows', () => {
  it('stores message, level and context byte-exact', async () => {
    const rows = HOSTILE.map((s, i): ErrorRow => ({
      domainId: 2,
      id: 2 ** 32 + i,
      timestamp: SINK_NOW + i,
      level: LEVELS[i % LEVELS.length]!,
      message: `open() "/var/www/${s}" failed (2: No such file or directory)`,
      context: i % 3 === 0 ? ({} as Record<string, string>) : { client: '203.0.113.9', server: 'shop.example.com', request: `GET /${s} HTTP/1.1`, host: s, referrer: `'${s}'` },
    }));
    await insertErrorBatch(ch, rows, dedupToken('error-file', 0, 99));
    await insertErrorBatch(ch, rows, dedupToken('error-file', 0, 99));
    const stored = await select<{ domain_id: number; id: string; ts: string; level: string; message: string; context: Record<string, string> }>(
      'SELECT domain_id, id, toUnixTimestamp64Milli(timestamp) AS ts, level, message, context FROM error_logs ORDER BY id',
    );
    expect(stored.map((r) => ({ domainId: r.domain_id, id: Number(r.id), timestamp: Number(r.ts), level: r.level, message: r.message, context: r.context }))).toEqual(rows);
  });
});

describe('rejects', () => {
  it('land with their reason, source and position, deduplicated by token', async () => {
    const rejects: RejectRow[] = [
      { domainId: null, kind: 'access', source: '/var/log/nginx/all.access.log', identity: 'fp:abc', offset: 0, reason: 'unknown domain: nope.example', cause: 'unknown_domain', line: 'nope.example 1.2.3.4 - - [x] "GET / HTTP/1.1" 200 1', length: 51 },
      { domainId: 3, kind: 'access', source: '/var/log/nginx/shop.log', identity: 'fp:def', offset: 4096, reason: 'does not parse', cause: 'unparsed', line: HOSTILE.join('|'), length: 999 },
      { domainId: 3, kind: 'error', source: 'udp://127.0.0.1:5514', identity: 'fp:ghi', offset: 2 ** 40, reason: 'line longer than 65536 bytes', cause: 'too_long', line: 'x'.repeat(1024), length: 100_000 },
    ];
    const token = dedupToken('fp:abc', 0, 200);
    await insertRejects(ch, rejects, token);
    await insertRejects(ch, rejects, token);
    const stored = await select<{ domain_id: number; kind: string; source: string; identity: string; offset: string; reason: string; cause: string; line: string; length: string; recent: number }>(
      'SELECT domain_id, kind, source, identity, offset, reason, cause, line, length, now64(3) - time < 60 AS recent FROM ingest_rejects ORDER BY offset',
    );
    expect(stored.map((r) => ({ ...r, offset: Number(r.offset), length: Number(r.length) }))).toEqual(
      rejects.map((r) => ({ domain_id: r.domainId ?? 0, kind: r.kind, source: r.source, identity: r.identity, offset: r.offset, reason: r.reason, cause: r.cause, line: r.line, length: r.length, recent: 1 })),
    );
  });
});

describe('ids', () => {
  let db: Db;
  beforeAll(async () => {
    db = await openPglite(path.join(dir, 'postgres'));
    await migratePostgres(db, log);
    await db.query(sql`insert into domains (name) values ('a.example'), ('b.example')`);
  });
  afterAll(async () => {
    await db?.close();
  });

  it('are stored below 2^53 and unique per domain, the same when the source is ingested again', async () => {
    const ids = createIdAllocator(db);
    // Two files routed to two domains; the second file is past 4 GiB (a second segment).
    const batches = [
      { identity: 'file-1', start: 0, lines: 3000 },
      { identity: 'file-2', start: 2 ** 32 - 150_000, lines: 3000 },
    ];
    const ingest = async () => {
      for (const b of batches) {
        const idOf = await ids.forBatch(b.identity, [1, 2], b.start, b.start + b.lines * 100);
        const rows = Array.from({ length: b.lines }, (_, i) => {
          const domainId = (i % 2) + 1;
          return accessRow(i, { domainId, id: idOf(domainId, b.start + i * 100) });
        });
        await insertAccessBatch(ch, rows, dedupToken(b.identity, b.start, b.start + b.lines * 100));
      }
    };
    await ingest();
    const first = await select<{ domain_id: number; id: string }>('SELECT domain_id, id FROM access_logs ORDER BY domain_id, id');
    await ingest();
    expect(await select('SELECT domain_id, id FROM access_logs ORDER BY domain_id, id')).toEqual(first);
    const stats = await select<{ domain_id: number; n: string; ids: string; lo: string; hi: string }>(
      'SELECT domain_id, count() AS n, uniqExact(id) AS ids, min(id) AS lo, max(id) AS hi FROM access_logs GROUP BY domain_id ORDER BY domain_id',
    );
    expect(stats.map((s) => s.domain_id)).toEqual([1, 2]);
    for (const s of stats) {
      expect(Number(s.ids)).toBe(Number(s.n));
      expect(Number(s.lo)).toBeGreaterThan(0);
      expect(BigInt(s.hi)).toBeLessThan(2n ** 53n);
    }
  });
});

describe('schema', () => {
  it('partitions by day, orders by domain, time and id, expires by LOG_RETENTION_DAYS and deduplicates', async () => {
    for (const table of ['access_logs', 'error_logs']) {
      const ddl = (await (await ch.query({ query: `SHOW CREATE TABLE ${table}`, format: 'TabSeparatedRaw' })).text()).replace(/\s+/g, ' ');
      expect(ddl).toContain('PARTITION BY toDate(timestamp)');
      expect(ddl).toContain('PRIMARY KEY (domain_id, timestamp)');
      expect(ddl).toContain('ORDER BY (domain_id, timestamp, id)');
      expect(ddl).toContain('TTL toDateTime(timestamp) + toIntervalDay(90)');
      expect(ddl).toContain('non_replicated_deduplication_window = 10000');
      expect(ddl).toContain('ttl_only_drop_parts = 1');
      expect(ddl).toContain("`timestamp` DateTime64(3, 'UTC')");
    }
    const rejects = (await (await ch.query({ query: 'SHOW CREATE TABLE ingest_rejects', format: 'TabSeparatedRaw' })).text()).replace(/\s+/g, ' ');
    expect(rejects).toContain('PARTITION BY toDate(time)');
    expect(rejects).toContain('TTL toDateTime(time) + toIntervalDay(90)');
    expect(rejects).toContain('non_replicated_deduplication_window = 10000');
  });

  it('takes the retention from LOG_RETENTION_DAYS', async () => {
    // The same script again, into a scratch database, as a migration of its own with another setting.
    const folder = await fs.mkdtemp(path.join(dir, 'migrations-'));
    const script = await fs.readFile(new URL('../../../sql/clickhouse/002_logs.sql', import.meta.url), 'utf8');
    await fs.writeFile(path.join(folder, '900_retention.sql'), script.replace(/CREATE TABLE IF NOT EXISTS /g, 'CREATE TABLE IF NOT EXISTS retention.'));
    await ch.command({ query: 'CREATE DATABASE retention' });
    await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 7 }, folder);
    for (const table of ['access_logs', 'error_logs', 'ingest_rejects']) {
      const ddl = await (await ch.query({ query: `SHOW CREATE TABLE retention.${table}`, format: 'TabSeparatedRaw' })).text();
      expect(ddl).toContain('+ toIntervalDay(7)');
    }
  });
});

describe('server mode', () => {
  it('sends the same TSV body over HTTP with the token and synchronous insert', async () => {
    const requests: { url: URL; body: Buffer }[] = [];
    const server = http.createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        requests.push({ url: new URL(req.url!, 'http://x'), body: Buffer.concat(chunks) });
        res.writeHead(200, { 'X-ClickHouse-Summary': '{}' }).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const client = createClient({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` });
    try {
      expect(chdbOf(client)).toBeUndefined();
      const rows = HOSTILE.map((s, i) => accessRow(i, { url: s, userAgent: s }));
      await insertAccessBatch(client, rows, 'token-1');
      // The rows' classes first (every class the process knows, once per client), then the rows.
      expect(requests).toHaveLength(2);
      expect(requests[0]!.url.searchParams.get('query')).toMatch(/^INSERT INTO agent_classes/);
      const classes = requests[0]!.body.toString().trim().split('\n').map((line) => JSON.parse(line).id);
      expect(classes).toEqual(expect.arrayContaining(rows.map((r) => userAgentClasses.of(r.userAgent).id)));
      await insertAccessBatch(client, rows, 'token-1');
      expect(requests).toHaveLength(3);
      const { url, body } = requests[1]!;
      expect(url.searchParams.get('query')).toMatch(/^INSERT INTO access_logs \(domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time, agent_class\) FORMAT TabSeparated\s*$/);
      expect(url.searchParams.get('insert_deduplication_token')).toBe('token-1');
      expect(url.searchParams.get('async_insert')).toBe('0');
      expect(body.equals(accessTsv(rows))).toBe(true);
    } finally {
      await client.close();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('retry classification', () => {
  it('retries what may pass next time and stops on errors about the data', async () => {
    const chdb = chdbOf(ch)!;
    const parseError = await chdb.queryAsync("INSERT INTO access_logs (domain_id) FORMAT TabSeparated\nnot-a-number\n").catch((e: unknown) => e);
    expect(isRetryableInsertError(parseError)).toBe(false);
    const missingTable = await chdb.queryAsync("INSERT INTO no_such_table (x) FORMAT TabSeparated\n1\n").catch((e: unknown) => e);
    expect(isRetryableInsertError(missingTable)).toBe(true);
    // A server that is not there.
    const closed = createClient({ url: 'http://127.0.0.1:1', request_timeout: 2000 });
    const refused = await insertAccessBatch(closed, [accessRow(1)], 't').catch((e: unknown) => e);
    await closed.close();
    expect(refused).toBeInstanceOf(Error);
    expect(isRetryableInsertError(refused)).toBe(true);
    // As @clickhouse/client reports a server's refusal: the code as a string.
    expect(isRetryableInsertError(Object.assign(new Error('Too many parts'), { code: '252', type: 'TOO_MANY_PARTS' }))).toBe(true);
    expect(isRetryableInsertError(Object.assign(new Error('Cannot parse'), { code: '27', type: 'CANNOT_PARSE_INPUT_ASSERTION_FAILED' }))).toBe(false);
  });
});
