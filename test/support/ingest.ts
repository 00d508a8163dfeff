import fs from 'node:fs';
import path from 'node:path';
import { importFiles, type ImportOptions, type ImportSummary } from '../../ingest/import.js';
import type { AccessRow } from '../../ingest/sinks/clickhouse.js';
import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Db } from '../../core/db/postgres.js';
import { insertDomain } from '../../src/domains/store.js';
import { createLogger, type Logger } from '../../core/log.js';
import type { IngestWorkerOptions } from '../../ingest/worker.js';
import type { TestApp } from './app.js';
import { uniqueDomainName } from './domains.js';

/** The recommended access format (combined + $request_time), and the same led by $host. */
export const FORMAT = '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';
export const HOST_FORMAT = `$host ${FORMAT}`;

/** Polls `check` until it returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function until<T>(check: () => Promise<T | undefined | false> | T | undefined | false, what: string, timeoutMs = 15_000, intervalMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await check();
      if (value !== undefined && value !== false) return value;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last ? ` (last error: ${String(last)})` : ''}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export async function select<T = Record<string, unknown>>(clickhouse: ClickHouseClient, query: string, params: Record<string, unknown> = {}): Promise<T[]> {
  return (await clickhouse.query({ query, query_params: params, format: 'JSONEachRow' })).json<T>();
}

/** Rows of `table` for one domain (0: rejects without a domain). */
export async function countRows(clickhouse: ClickHouseClient, table: 'access_logs' | 'error_logs' | 'ingest_rejects', domainId: number): Promise<number> {
  const [row] = await select<{ n: string }>(clickhouse, `SELECT count() AS n FROM ${table} WHERE domain_id = {d:UInt32}`, { d: domainId });
  return Number(row!.n);
}

/** Count and distinct ids of a domain's access rows: equal when nothing was stored twice. */
export async function accessIds(clickhouse: ClickHouseClient, domainId: number): Promise<{ rows: number; ids: number }> {
  const [row] = await select<{ rows: string; ids: string }>(clickhouse, 'SELECT count() AS rows, uniqExact(id) AS ids FROM access_logs WHERE domain_id = {d:UInt32}', { d: domainId });
  return { rows: Number(row!.rows), ids: Number(row!.ids) };
}

/** Registers a new domain straight in the store (no API call), owned by `ownerId`, with a name unique in this process. */
export async function newDomain(db: Db, tag = 'site', ownerId: number | null = null): Promise<{ id: number; name: string }> {
  const name = uniqueDomainName(tag);
  const row = await insertDomain(db, { name, ownerId });
  return { id: row.id, name };
}

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
/** `$time_local` of epoch milliseconds, in UTC. */
export function timeLocal(ms: number): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `${p(d.getUTCDate())}/${MONTHS[d.getUTCMonth()]}/${d.getUTCFullYear()}:${p(d.getUTCHours())}:${p(d.getUTCMinutes())}:${p(d.getUTCSeconds())} +0000`;
}

/**
 * The time of the first test line: a whole hour a day ago, so test rows are always within the
 * retention (LOG_RETENTION_DAYS drops older ones at once).
 */
export const T0 = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 86_400_000;

/** An error-log time (`YYYY/MM/DD hh:mm:ss`) of epoch milliseconds, as the wall time in UTC. */
export function errorLogTime(ms: number): string {
  const iso = new Date(ms).toISOString();
  return `${iso.slice(0, 10).replaceAll('-', '/')} ${iso.slice(11, 19)}`;
}

/** Kolkata keeps +05:30 all year: a zone without daylight saving makes expected times simple. */
export const KOLKATA = { zone: 'Asia/Kolkata', offsetMs: 5.5 * 3_600_000 };

/** Line `n` of a test access log in FORMAT: its url carries n, so a test can tell every line apart. At T0 + n seconds unless `at` says when. */
export function accessLine(n: number, host?: string, at = T0 + n * 1000): string {
  const line = `10.1.${(n >> 8) & 255}.${n & 255} - - [${timeLocal(at)}] "GET /item/${n}?q=${n % 7} HTTP/1.1" ${n % 10 === 0 ? 500 : 200} ${n % 5000} "-" "test-agent/${n % 3}" 0.${String(n % 1000).padStart(3, '0')}`;
  return host === undefined ? line : `${host} ${line}`;
}

/** Lines `from` … `to - 1`, each with its newline. */
export function accessLines(from: number, to: number, host?: string): string {
  let text = '';
  for (let n = from; n < to; n++) text += `${accessLine(n, host)}\n`;
  return text;
}

export function append(file: string, text: string): void {
  fs.appendFileSync(file, text);
}

let importSeq = 0;
const importLog = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

/**
 * Writes `text` to a new file under the test app's DATA_DIR and imports it through the real ingest
 * path (`tailhouse import`'s importFiles): access lines in FORMAT unless `options` say otherwise.
 */
export async function importText(t: TestApp, domain: string, text: string, options: Partial<ImportOptions> = {}): Promise<ImportSummary> {
  const dir = path.join(t.dataDir, 'imported-logs');
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${process.pid}-${++importSeq}.log`);
  fs.writeFileSync(file, text);
  return importFiles(
    [file],
    { domain, type: 'access', format: FORMAT, timezone: 'UTC', ...options },
    { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log: importLog, dataDir: t.dataDir, signal: new AbortController().signal, retentionDays: 90 },
  );
}

/** Yesterday, whole seconds: well inside the 90-day retention whenever the tests run. */
export const SINK_NOW = Math.floor(Date.now() / 1000) * 1000 - 86_400_000;

/** Access row `i` as the sink takes it (domain 1, ids 100 apart, times 7 ms apart), with `patch` over it. */
export function accessRow(i: number, patch: Partial<AccessRow> = {}): AccessRow {
  return {
    domainId: 1,
    id: 2 ** 32 + i * 100,
    timestamp: SINK_NOW + i * 7,
    ipAddress: `192.0.2.${i % 250}`,
    method: 'GET',
    url: `/page/${i}`,
    protocol: 'HTTP/1.1',
    statusCode: 200,
    responseSize: 1000 + i,
    referrer: '',
    userAgent: 'curl/8.5.0',
    responseTime: i,
    host: null,
    ...patch,
  };
}

/**
 * startIngest's options for a test worker on the test app's stores: no stats log, quick back-off,
 * quick polls and rotations; `overrides` for what a test needs otherwise.
 */
export function testWorkerOptions(t: TestApp, log: Logger, overrides: Partial<IngestWorkerOptions> = {}): IngestWorkerOptions {
  return { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, statsIntervalMs: 0, backoff: { initialMs: 20, maxMs: 200 }, pollMs: 50, rotatedIdleMs: 300, ...overrides };
}
