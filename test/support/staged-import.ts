/**
 * The import parsed by ClickHouse against the JavaScript parser (ingest/staged-chunks.ts, issue
 * 32), for test/ingest/staged-import*.test.ts: the same file imported both ways into two domains
 * must give the same rows, column by column (ids and agent classes included), the same rejects and
 * the same summary. The lines are the hard ones: escapes, spaces in $remote_user, garbage,
 * impossible times, the edges of the stored range and the retention, numbers too long for the SQL,
 * carriage returns, tabs, other control bytes, raw UTF-8 and invalid bytes, SQL metacharacters.
 * Small chunks make some go through the engine whole and others fall back.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Writable } from 'node:stream';
import { expect } from 'vitest';
import { checkpointDir } from '../../ingest/checkpoints.js';
import { importFiles, type ImportOptions } from '../../ingest/import.js';
import { createLogger } from '../../core/log.js';
import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Db } from '../../core/db/postgres.js';
import { accessLine, FORMAT, newDomain, select, T0, timeLocal } from './ingest.js';

export const SHOP_FORMAT = `${FORMAT} $upstream_response_time`;

const at = (n: number) => timeLocal(T0 + n * 1000);
/** T0's day at 08:00 in a zone `offset` from UTC (`+0530`): inside the retention, unlike most edge dates. */
const zoned = (offset: string) => `${timeLocal(T0).slice(0, 11)}:08:00:00 ${offset}`;
const line = (request: string, tail = `200 12 "-" "agent/1" 0.010`, time = at(1), user = '-') => `10.2.3.4 - ${user} [${time}] "${request}" ${tail}`;

/** The hard lines, as bytes (some are not UTF-8). */
function hardLines(): Buffer[] {
  const text = [
    accessLine(1),
    line(`GET /a?x='); DROP TABLE access_logs; -- HTTP/1.1`, `200 5 "https://r.example/';--" "ua'); SELECT 1; --" 0.002`),
    line('GET /q HTTP/1.1', `200 5 "-" "Mozilla \\x22quoted\\x22 \\xC3\\xA9" 0.003`),
    line('GET /user HTTP/1.1', undefined, undefined, 'bob smith'),
    'garbage line',
    line('-', `400 0 "-" "-" 0.000`),
    line('GET /old'),
    line('GET  HTTP/1.1'),
    line('\\x16\\x03\\x01\\x02\\x00', `400 157 "-" "-" 0.001`),
    line('get /lower HTTP/1.1'),
    line('GET /rt HTTP/1.1', `200 1 "-" "a" -`),
    line('GET /rt HTTP/1.1', `200 1 "-" "a" 1`),
    line('GET /rt HTTP/1.1', `200 1 "-" "a" 12.3456`),
    line('GET /rt HTTP/1.1', `200 1 "-" "a" 4294967.296`),
    line('GET /rt HTTP/1.1', `200 1 "-" "a" 0.0005`),
    line('GET /size HTTP/1.1', `200 - "-" "a" 0.001`),
    line('GET /size HTTP/1.1', `200 99999999999999999999 "-" "a" 0.001`),
    line('GET /size HTTP/1.1', `200 123456789012345 "-" "a" 0.001`),
    line('GET /t HTTP/1.1', undefined, '31/Dec/2026:23:59:60 +0000'),
    line('GET /t HTTP/1.1', undefined, '29/Feb/2028:12:00:00 +0000'),
    line('GET /t HTTP/1.1', undefined, '29/Feb/2027:12:00:00 +0000'),
    line('GET /t HTTP/1.1', undefined, '31/Apr/2026:12:00:00 +0000'),
    line('GET /t HTTP/1.1', undefined, '01/Jan/1970:00:00:00 +0000'),
    line('GET /t HTTP/1.1', undefined, '01/Jan/1970:00:30:00 +0100'),
    line('GET /t HTTP/1.1', undefined, '06/Feb/2106:23:59:59 +0000'),
    line('GET /t HTTP/1.1', undefined, '07/Feb/2106:00:00:00 +0000'),
    line('GET /t HTTP/1.1', undefined, '15/Jun/2026:08:00:00 +0530'),
    line('GET /t HTTP/1.1', undefined, zoned('+0530')),
    line('GET /t HTTP/1.1', undefined, zoned('-1200')),
    line('GET /t HTTP/1.1', undefined, zoned('+0000')),
    line('GET /t HTTP/1.1', undefined, '15/Foo/2026:08:00:00 +0000'),
    line('GET /t HTTP/1.1', undefined, '15/Jun/2026:24:00:00 +0000'),
    `${line('GET /cr HTTP/1.1')}\r`,
    line('GET /utf8 HTTP/1.1', `200 1 "-" "Mozilla é ✓" 0.001`),
    line('GET /tab HTTP/1.1', `200 1 "-" "a\tb" 0.001`),
    line('GET /control HTTP/1.1', `200 1 "-" "a\x01\x1b[31m\x7fb" 0.001`),
    line('GET /empty HTTP/1.1', `200 1 "" "" 0.001`),
    line('GET /long HTTP/1.1', `200 1 "-" "${'L'.repeat(600)}" 0.001`),
    line(`GET /overlong?${'o'.repeat(5_000)} HTTP/1.1`),
  ].map((l) => Buffer.from(`${l}\n`));
  // An invalid UTF-8 byte in the agent (read as U+FFFD by the parser).
  text.push(Buffer.concat([Buffer.from(line('GET /bytes HTTP/1.1', `200 1 "-" "a`)), Buffer.from([0xff]), Buffer.from(`b" 0.001\n`)]));
  return text;
}

/** Plain lines in runs, so that some chunks hold nothing the engine refuses. */
function fileText(hard: Buffer[], format: string): Buffer {
  const parts: Buffer[] = [];
  const extra = format === SHOP_FORMAT ? [' -', ' 0.004', ' 0.001, 0.002 : 0.003'] : [''];
  let n = 100;
  for (const h of hard) {
    for (let i = 0; i < 5; i++, n++) parts.push(Buffer.from(`${accessLine(n)}${extra[n % extra.length]}\n`));
    parts.push(format === SHOP_FORMAT && h.at(-2) !== 13 && !h.includes('garbage') ? Buffer.concat([h.subarray(0, h.length - 1), Buffer.from(`${extra[n % extra.length]}\n`)]) : h);
  }
  return Buffer.concat(parts);
}

interface Imported {
  domain: { id: number; name: string };
  summary: Awaited<ReturnType<typeof importFiles>>;
  rows: unknown[];
  rejects: unknown[];
  /** Lines ClickHouse parsed and inserted, and chunks it refused (read by the parser instead). */
  engineLines: number;
  fallbacks: number;
}

async function importWith(db: Db, clickhouse: ClickHouseClient, dataDir: string, file: string, format: string, parseInEngine: boolean, into?: Imported['domain']): Promise<Imported> {
  const domain = into ?? (await newDomain(db, parseInEngine ? 'engine' : 'parser'));
  const messages: { msg: string; lines?: number }[] = [];
  const capture = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const l of chunk.toString().split('\n')) if (l) messages.push(JSON.parse(l) as { msg: string });
      done();
    },
  });
  const options: ImportOptions = { domain: domain.name, type: 'access', format, timezone: 'UTC', parseInEngine, limits: { maxLineBytes: 4_096, chunkMaxLines: 8, chunkMaxBytes: 1 << 20 } };
  const summary = await importFiles([file], options, { db, clickhouse, log: createLogger('debug', capture), dataDir, signal: new AbortController().signal, retentionDays: 90 });
  const rows = await select(
    clickhouse,
    `SELECT id, toString(timestamp) AS timestamp, ip_address, method, url, protocol, status_code, toString(response_size) AS size, referrer, user_agent, response_time, toString(agent_class) AS agent_class
     FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY id`,
    { d: domain.id },
  );
  const rejects = await select(clickhouse, `SELECT offset, cause, reason, line, length FROM ingest_rejects WHERE domain_id IN (0, {d:UInt32}) AND identity IN (SELECT identity FROM ingest_rejects WHERE domain_id = {d:UInt32}) ORDER BY offset`, { d: domain.id });
  return {
    domain,
    summary,
    rows,
    rejects,
    engineLines: messages.filter((m) => m.msg === 'lines parsed and inserted by ClickHouse').reduce((n, m) => n + (m.lines ?? 0), 0),
    fallbacks: messages.filter((m) => m.msg.startsWith("a chunk's lines are not all read in SQL")).length,
  };
}

/** A new file of the hard lines and runs of plain ones, in `format`. */
function hardFile(dataDir: string, format: string): string {
  const dir = path.join(dataDir, 'staged-import');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${format === FORMAT ? 'combined' : 'shop'}-${++files}.log`);
  fs.writeFileSync(file, fileText(hardLines(), format));
  return file;
}
let files = 0;

export async function compareImports(db: Db, clickhouse: ClickHouseClient, dataDir: string, format: string): Promise<void> {
  const file = hardFile(dataDir, format);
  const parser = await importWith(db, clickhouse, dataDir, file, format, false);
  const engine = await importWith(db, clickhouse, dataDir, file, format, true);

  expect(parser.engineLines).toBe(0);
  // Some chunks went through the engine whole, others were refused and read by the parser.
  expect(engine.engineLines).toBeGreaterThan(50);
  expect(engine.fallbacks).toBeGreaterThan(3);
  expect(engine.rows.length).toBeGreaterThan(200);
  expect(engine.rows).toEqual(parser.rows);
  expect(engine.rejects.length).toBeGreaterThan(5);
  expect(engine.rejects).toEqual(parser.rejects);
  const counts = (s: Imported['summary']) => ({ lines: s.lines, inserted: s.inserted, rejected: s.rejected, expired: s.files[0]!.expired });
  expect(counts(engine.summary)).toEqual(counts(parser.summary));
}


/**
 * A crash after every insert and before any checkpoint, replayed: the checkpoints are removed after
 * an import, and the same file imported again into the same domain reads every line again and
 * stores nothing twice (each chunk's tokens, the engine's and the parser's, are the same again).
 */
export async function replayStoresNothingTwice(db: Db, clickhouse: ClickHouseClient, dataDir: string): Promise<void> {
  const file = hardFile(dataDir, FORMAT);
  const first = await importWith(db, clickhouse, dataDir, file, FORMAT, true);
  fs.rmSync(path.join(checkpointDir(dataDir), 'checkpoints.json'));
  const again = await importWith(db, clickhouse, dataDir, file, FORMAT, true, first.domain);
  expect(again.summary.lines).toBe(first.summary.lines);
  expect(again.engineLines).toBe(first.engineLines);
  expect(first.engineLines).toBeGreaterThan(50);
  expect(again.rows).toEqual(first.rows);
  expect(again.rejects).toEqual(first.rejects);
}
