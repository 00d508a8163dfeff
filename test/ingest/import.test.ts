/**
 * `tailhouse import` in-process (importFiles): plain and gzip files, idempotence across both,
 * routing by $host, error logs, interruption, and what a file ending without a newline gives.
 */
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImportError, importFiles, type ImportOptions } from '../../ingest/import.js';
import { createLogger } from '../../core/log.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { accessIds, accessLines, countRows, errorLogTime, FORMAT, HOST_FORMAT, KOLKATA, newDomain, select, T0 } from '../support/ingest.js';

let t: TestApp;
let dir: string;
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

beforeAll(async () => {
  t = await startTestApp();
  dir = path.join(t.dataDir, 'old-logs');
  fs.mkdirSync(dir);
});

afterAll(async () => {
  await t?.close();
});

let seq = 0;
function write(text: string, gzip = false): string {
  const file = path.join(dir, `access-${++seq}.log${gzip ? '.gz' : ''}`);
  fs.writeFileSync(file, gzip ? zlib.gzipSync(text) : text);
  return file;
}

function run(files: string[], options: Partial<ImportOptions> & { domain: string | null }, signal = new AbortController().signal, onProgress?: (bytes: number, lines: number) => void) {
  return importFiles(
    files,
    { type: 'access', format: FORMAT, timezone: 'UTC', limits: { maxLineBytes: 64 * 1024, chunkMaxLines: 1_000, chunkMaxBytes: 1 << 20 }, ...options },
    { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, signal, retentionDays: 90, backoff: { initialMs: 10, maxMs: 100 }, ...(onProgress ? { onProgress } : {}) },
  );
}

describe('tailhouse import', () => {
  it('imports plain and gzip files; a second run, or the other form of the same file, adds nothing', async () => {
    const domain = await newDomain(t.runtime.db);
    const text = `${accessLines(0, 5_000)}garbage\n`;
    const plain = write(text);
    const gz = write(text, true);
    let progressCalls = 0;
    const first = await run([plain], { domain: domain.name }, undefined, () => progressCalls++);
    expect(first).toMatchObject({ lines: 5_001, inserted: 5_000, rejected: 1, interrupted: false });
    expect(first.files[0]).toMatchObject({ path: plain, compressed: false, skippedBytes: 0, trailingBytes: 0 });
    expect(progressCalls).toBeGreaterThan(1);

    const again = await run([plain, gz], { domain: domain.name });
    expect(again.files.map((f) => [f.compressed, f.lines, f.skippedBytes])).toEqual([
      [false, 0, Buffer.byteLength(text)],
      [true, 0, Buffer.byteLength(text)],
    ]);
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 5_000, ids: 5_000 });
    expect(await countRows(t.runtime.clickhouse, 'ingest_rejects', domain.id)).toBe(1);
  });

  it('the same file into another domain is another import', async () => {
    const a = await newDomain(t.runtime.db);
    const b = await newDomain(t.runtime.db);
    const file = write(accessLines(0, 300));
    await run([file], { domain: a.name });
    expect((await run([file], { domain: b.name })).inserted).toBe(300);
    expect(await countRows(t.runtime.clickhouse, 'access_logs', b.id)).toBe(300);
  });

  it('a gzip file grown by a later member continues after what was imported', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = write(accessLines(0, 2_000), true);
    await run([file], { domain: domain.name });
    fs.appendFileSync(file, zlib.gzipSync(accessLines(2_000, 2_500)));
    const second = await run([file], { domain: domain.name });
    expect(second).toMatchObject({ lines: 500, inserted: 500 });
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 2_500, ids: 2_500 });
  });

  it('an interrupted import continues where it stopped', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = write(accessLines(0, 20_000));
    const abort = new AbortController();
    const first = await run([file], { domain: domain.name }, abort.signal, (_bytes, lines) => {
      if (lines >= 3_000) abort.abort();
    });
    expect(first.interrupted).toBe(true);
    expect(first.lines).toBeLessThan(20_000);
    const second = await run([file], { domain: domain.name });
    expect(second.files[0]!.skippedBytes).toBeGreaterThan(0);
    expect(first.lines + second.lines).toBe(20_000);
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 20_000, ids: 20_000 });
  });

  it('a last line without its newline is reported, not imported', async () => {
    const domain = await newDomain(t.runtime.db);
    const partial = accessLines(10, 11).trimEnd();
    const file = write(`${accessLines(0, 10)}${partial}`);
    const summary = await run([file], { domain: domain.name });
    expect(summary.files[0]).toMatchObject({ lines: 10, trailingBytes: Buffer.byteLength(partial) });
  });

  it('routes by $host without --domain; unknown hosts are rejected', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = write(accessLines(0, 100, domain.name) + accessLines(100, 110, 'nobody.example.net'));
    const summary = await run([file], { domain: null, format: HOST_FORMAT });
    expect(summary).toMatchObject({ inserted: 100, rejected: 10 });
    const [reject] = await select<{ reason: string }>(t.runtime.clickhouse, 'SELECT reason FROM ingest_rejects WHERE source = {s:String} LIMIT 1', { s: file });
    expect(reject!.reason).toBe('unknown domain "nobody.example.net": not registered');
  });

  it('imports error logs in their time zone', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = write(`${errorLogTime(T0)} [emerg] 1#1: bind() failed\n${errorLogTime(T0 + 1000)} [info] 1#1: *3 client closed connection, client: 1.2.3.4, server: s\n`);
    const summary = await run([file], { domain: domain.name, type: 'error', timezone: KOLKATA.zone });
    expect(summary.inserted).toBe(2);
    const rows = await select<{ ts: string | number; level: string }>(
      t.runtime.clickhouse,
      'SELECT toUnixTimestamp64Milli(timestamp) AS ts, level FROM error_logs WHERE domain_id = {d:UInt32} ORDER BY timestamp',
      { d: domain.id },
    );
    expect(rows.map((r) => [Number(r.ts), r.level])).toEqual([
      [T0 - KOLKATA.offsetMs, 'error'],
      [T0 + 1000 - KOLKATA.offsetMs, 'info'],
    ]);
  });

  it('counts entries older than the retention, which the TTL drops at once', async () => {
    const domain = await newDomain(t.runtime.db);
    const old = accessLines(0, 3).replace(/\[[^\]]+\]/g, '[01/Jan/2020:00:00:00 +0000]');
    const summary = await run([write(old + accessLines(3, 5))], { domain: domain.name });
    expect(summary.files[0]).toMatchObject({ inserted: 5, expired: 3 });
  });

  it('keeps lines dated outside what the store holds (1970 to 2106) as rejects, access and error alike', async () => {
    const domain = await newDomain(t.runtime.db);
    const at = (time: string) => accessLines(0, 1).replace(/\[[^\]]+\]/, `[${time}]`);
    const access = write(at('31/Dec/1969:23:59:59 +0000') + at('07/Feb/2106:00:00:00 +0000') + at('01/Jan/1970:00:30:00 +0100') + accessLines(1, 3));
    const summary = await run([access], { domain: domain.name });
    expect(summary.files[0]).toMatchObject({ inserted: 2, rejected: 3 });
    const error = path.join(dir, `error-${++seq}.log`);
    fs.writeFileSync(error, `2200/01/01 00:00:00 [error] 1#1: far future\n${errorLogTime(T0)} [error] 1#1: now\n`);
    expect((await run([error], { domain: domain.name, type: 'error' })).files[0]).toMatchObject({ inserted: 1, rejected: 1 });
    const reasons = await select<{ reason: string; n: string }>(t.runtime.clickhouse, 'SELECT reason, count() AS n FROM ingest_rejects WHERE domain_id = {d:UInt32} GROUP BY reason', { d: domain.id });
    expect(reasons.map((r) => [r.reason, Number(r.n)])).toEqual([['time outside 1970-01-01T00:00:00.000Z to 2106-02-06T23:59:59.999Z', 4]]);
  });

  it('refuses an unregistered domain, and a format without $host when no domain is given', async () => {
    const file = write(accessLines(0, 1));
    await expect(run([file], { domain: 'unregistered.example.com' })).rejects.toThrow(
      new ImportError('domain unregistered.example.com is not registered: add it first (tailhouse domains add unregistered.example.com)'),
    );
    await expect(run([file], { domain: null })).rejects.toThrow(/no \$host or \$server_name/);
  });
});
