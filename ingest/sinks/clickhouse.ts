import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { chdbOf, type ChdbExtension, type ClickHouseClient } from '../../src/db/clickhouse.js';
import type { AccessEntry, ErrorEntry } from '../types.js';

/**
 * The ClickHouse writer of the ingest pipeline (schema: sql/clickhouse/002_logs.sql).
 *
 * Rows travel as one TabSeparated body per batch: with a ClickHouse server as the HTTP request
 * body of `@clickhouse/client`'s insert, with embedded chDB as a spool file that the engine reads
 * with `INSERT … FROM INFILE` (see insertThroughSpool). Every insert is synchronous (`async_insert = 0`:
 * accepted means written) and carries the caller's `insert_deduplication_token`, so a batch sent
 * again after a crash or a lost answer lands once (the tables keep `non_replicated_deduplication_window`).
 */

/** An access entry routed to its domain, with its id (ingest/ids.ts). */
export interface AccessRow extends AccessEntry {
  domainId: number;
  id: number;
}

/** An error entry routed to its domain, with its id (ingest/ids.ts). */
export interface ErrorRow extends ErrorEntry {
  domainId: number;
  id: number;
}

/** A line that could not be stored as an entry, with where it came from and why. */
export interface RejectRow {
  /** The domain the line was routed to, or null when that is what failed (unknown `$host`). */
  domainId: number | null;
  kind: 'access' | 'error';
  /** Where the line was read: a path, or a syslog listener. */
  source: string;
  identity: string;
  offset: number;
  reason: string;
  /** The line as read (for an overlong line, its head). */
  line: string;
  /** The whole line's length in bytes. */
  length: number;
}

const ACCESS_COLUMNS = [
  'domain_id',
  'id',
  'timestamp',
  'ip_address',
  'method',
  'url',
  'protocol',
  'status_code',
  'response_size',
  'referrer',
  'user_agent',
  'response_time',
] as const;
const ERROR_COLUMNS = ['domain_id', 'id', 'timestamp', 'level', 'message', 'context'] as const;
const REJECT_COLUMNS = ['domain_id', 'kind', 'source', 'identity', 'offset', 'reason', 'line', 'length'] as const;

/**
 * `insert_deduplication_token` of a batch: a batch is the byte range [startOffset, endOffset) of one
 * source, so the same range read again after a restart gets the same token. The same token serves
 * every table the batch writes to (deduplication is per table).
 */
export function dedupToken(identity: string, startOffset: number, endOffset: number): string {
  return createHash('sha256').update(`${identity}\0${startOffset}\0${endOffset}`).digest('hex');
}

export async function insertAccessBatch(client: ClickHouseClient, rows: readonly AccessRow[], token: string): Promise<void> {
  await insertTsv(client, 'access_logs', ACCESS_COLUMNS, writeAccessTsv(rows, takeBuffer()), token);
}

export async function insertErrorBatch(client: ClickHouseClient, rows: readonly ErrorRow[], token: string): Promise<void> {
  await insertTsv(client, 'error_logs', ERROR_COLUMNS, writeErrorTsv(rows, takeBuffer()), token);
}

export async function insertRejects(client: ClickHouseClient, rows: readonly RejectRow[], token: string): Promise<void> {
  await insertTsv(client, 'ingest_rejects', REJECT_COLUMNS, writeRejectTsv(rows, takeBuffer()), token);
}

/**
 * Writes one batch: its entries, then its rejects, all under the batch's token. Tables are written
 * one after the other; a batch that failed half-way is sent again whole, and the half that landed
 * deduplicates.
 */
export async function writeRows(
  client: ClickHouseClient,
  rows: { access: readonly AccessRow[]; error: readonly ErrorRow[]; rejects: readonly RejectRow[] },
  token: string,
): Promise<void> {
  if (rows.access.length > 0) await insertAccessBatch(client, rows.access, token);
  if (rows.error.length > 0) await insertErrorBatch(client, rows.error, token);
  if (rows.rejects.length > 0) await insertRejects(client, rows.rejects, token);
}

/**
 * Whether an insert that failed may succeed when sent again unchanged: network errors, timeouts,
 * a busy or full server, too many parts, a table not created yet (migrations pending) are all
 * worth a retry with back-off, and the batch's token makes the retry safe. Only errors about the
 * data itself are permanent: the same body will fail every time. The sink writes bodies that
 * parse, so such an error is a bug; the caller stops the source and reports it, because skipping
 * the batch would lose its lines. An error without a ClickHouse code counts as retryable.
 */
export function isRetryableInsertError(err: unknown): boolean {
  const code = clickhouseCode(err);
  return code === undefined || !DATA_ERRORS.has(code);
}

// ClickHouse error codes that depend on the data sent: CANNOT_PARSE_TEXT (6),
// CANNOT_PARSE_QUOTED_STRING (26), CANNOT_PARSE_INPUT_ASSERTION_FAILED (27), CANNOT_PARSE_DATE (38),
// CANNOT_PARSE_DATETIME (41), TYPE_MISMATCH (53), SYNTAX_ERROR (62), ARGUMENT_OUT_OF_BOUND (69),
// CANNOT_CONVERT_TYPE (70), CANNOT_PARSE_NUMBER (72), INCORRECT_DATA (117),
// TOO_LARGE_STRING_SIZE (131), VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE (321).
const DATA_ERRORS = new Set([6, 26, 27, 38, 41, 53, 62, 69, 70, 72, 117, 131, 321]);

/** chDB errors carry `clickhouseCode`; `@clickhouse/client`'s ClickHouseError a numeric `code` string. */
function clickhouseCode(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { clickhouseCode: chdb, code } = err as { clickhouseCode?: unknown; code?: unknown };
  if (typeof chdb === 'number') return chdb;
  if (typeof code === 'string' && /^\d+$/.test(code)) return Number(code);
  return undefined;
}

const INSERT_SETTINGS = {
  // chDB defaults to asynchronous inserts; an acknowledged batch must already be in the table.
  async_insert: 0,
  insert_deduplicate: 1,
  // Daily partitions: a batch from a sparse, old log may span many days, and a batch that fails
  // for its shape would block its file forever. Its small parts merge away.
  max_partitions_per_insert_block: '0',
} as const;

async function insertTsv(client: ClickHouseClient, table: string, columns: readonly string[], body: BodyWriter, token: string): Promise<void> {
  try {
    const bytes = body.bytes();
    if (bytes.length === 0) return;
    const chdb = chdbOf(client);
    if (chdb) await insertThroughSpool(chdb, table, columns, bytes, token);
    else {
      await client.insert({
        table,
        columns: columns as [string, ...string[]],
        values: Readable.from([bytes], { objectMode: false }),
        format: 'TabSeparated',
        clickhouse_settings: { ...INSERT_SETTINGS, insert_deduplication_token: token },
      });
    }
  } finally {
    // Only now: the body is read in place until the insert settles.
    giveBack(body);
  }
}

/**
 * Embedded chDB reads the body from a file with `INSERT … FROM INFILE`: an inline body (the
 * client's insert, or chDB's own raw insert) is copied into the SQL text first and takes about
 * twice as long to insert, with a larger peak of memory (bench/insert-path). The file lives
 * beside the chDB data, which this process alone uses (DATA_DIR lock), for the milliseconds of
 * the insert: written, read and removed, normally before the page cache writes it out.
 *
 * The file is written synchronously (a copy into the page cache) so that the engine starts on
 * its own threads before this call returns: a caller that parses its next batch meanwhile keeps
 * the event loop busy, and an asynchronous write would only start once it yields.
 */
async function insertThroughSpool(chdb: ChdbExtension, table: string, columns: readonly string[], body: Buffer, token: string): Promise<void> {
  const file = path.join(spoolDir(chdb), `${table}-${++spoolSeq}.tsv`);
  try {
    fs.writeFileSync(file, body);
    const settings = Object.entries({ ...INSERT_SETTINGS, insert_deduplication_token: token })
      .map(([name, value]) => `${name} = ${typeof value === 'number' ? value : sqlString(value)}`)
      .join(', ');
    // INFILE and SETTINGS take literals only, never bound parameters; the path and the token are
    // made here (a temporary name, a hex digest) and are quoted all the same.
    await chdb.queryAsync(`INSERT INTO ${table} (${columns.join(', ')}) FROM INFILE ${sqlString(file)} SETTINGS ${settings} FORMAT TabSeparated`);
  } finally {
    fs.rmSync(file, { force: true });
  }
}

let spoolSeq = 0;
const spoolDirs = new Set<string>();

/** `<chDB data>/ingest-spool`, emptied on first use: files left there by a crash are stale. */
function spoolDir(chdb: ChdbExtension): string {
  const dir = path.join(chdb.session.path, 'ingest-spool');
  if (!spoolDirs.has(dir)) {
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    spoolDirs.add(dir);
  }
  return dir;
}

const sqlString = (s: string) => `'${s.replace(/[\\']/g, (c) => `\\${c}`)}'`;

// ---------------------------------------------------------------------------------------------
// Bodies are written row by row into a reused Buffer. Building one large string and converting
// it at the end costs three to four times as much (bench/insert-path), and a fresh Buffer per
// batch leaves the garbage collector tens of megabytes to find each time.

const INITIAL_BYTES = 1 << 20;
// Two bodies are in use when the caller builds the next batch during an insert; a body grown
// past the cap (an unusually large batch) is left to the garbage collector.
const SPARE_BUFFERS = 2;
const MAX_SPARE_BYTES = 64 << 20;
const spare: Buffer[] = [];

class BodyWriter {
  pos = 0;
  // Rows are joined into a string of up to ROWS_PER_WRITE before being encoded: one Buffer
  // write per row costs a sixth more.
  private pending = '';
  private rows = 0;

  constructor(public buf: Buffer) {}

  row(text: string): void {
    this.pending += text;
    if (++this.rows === ROWS_PER_WRITE) this.flush();
  }

  bytes(): Buffer {
    this.flush();
    return this.buf.subarray(0, this.pos);
  }

  private flush(): void {
    // A UTF-16 code unit becomes at most 3 UTF-8 bytes.
    const room = this.pending.length * 3;
    if (this.pos + room > this.buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.pos + room));
      this.buf.copy(bigger, 0, 0, this.pos);
      this.buf = bigger;
    }
    this.pos += this.buf.write(this.pending, this.pos);
    this.pending = '';
    this.rows = 0;
  }
}

const ROWS_PER_WRITE = 256;

function takeBuffer(): BodyWriter {
  return new BodyWriter(spare.pop() ?? Buffer.allocUnsafe(INITIAL_BYTES));
}

function giveBack(body: BodyWriter): void {
  if (spare.length < SPARE_BUFFERS && body.buf.length <= MAX_SPARE_BYTES) spare.push(body.buf);
}

// ---------------------------------------------------------------------------------------------
// TabSeparated serialisation. Strings are stored byte-exact: TSV escapes backslash, tab, line
// feed, carriage return and NUL; everything else passes as UTF-8. Numbers are clamped into their
// column's range, because one unparsable value would fail the whole batch on every retry.

const TSV_SPECIAL = /[\t\n\r\\\0]/;
const TSV_SPECIAL_ALL = /[\t\n\r\\\0]/g;
// Inside a Map value ClickHouse reads strings single-quoted, with the same escapes plus \' (one
// level: the map's text is not escaped again as a TSV field).
const QUOTED_SPECIAL_ALL = /[\t\n\r\\\0']/g;
const ESCAPES: Record<string, string> = { '\t': '\\t', '\n': '\\n', '\r': '\\r', '\\': '\\\\', '\0': '\\0', "'": "\\'" };
const escapeChar = (c: string) => ESCAPES[c]!;

function tsvString(s: string): string {
  return TSV_SPECIAL.test(s) ? s.replace(TSV_SPECIAL_ALL, escapeChar) : s;
}

function tsvMap(map: Record<string, string>): string {
  const parts: string[] = [];
  for (const [key, value] of Object.entries(map)) {
    parts.push(`'${key.replace(QUOTED_SPECIAL_ALL, escapeChar)}':'${value.replace(QUOTED_SPECIAL_ALL, escapeChar)}'`);
  }
  return `{${parts.join(',')}}`;
}

const MAX_UINT16 = 0xffff;
const MAX_UINT32 = 0xffffffff;

/** A whole number in [0, max]; anything else (NaN, negative, fractional) is brought into range. */
function uint(n: number, max = Number.MAX_SAFE_INTEGER): number {
  return n > 0 ? Math.min(Math.round(n), max) : 0;
}

// DateTime64(3)'s range; times outside it (a parser bug) are held at its edges.
const MIN_TIME_MS = Date.UTC(1900, 0, 1);
const MAX_TIME_MS = Date.UTC(2299, 11, 31, 23, 59, 59, 999);

/**
 * Formats epoch milliseconds as `YYYY-MM-DD hh:mm:ss.mmm` (UTC). Log lines come in time order,
 * many to a second, so the date-and-seconds part is built once per second and reused.
 */
function timeFormatter(): (ms: number) => string {
  let second = Number.NaN;
  let prefix = '';
  return (raw) => {
    const ms = Number.isFinite(raw) ? Math.min(Math.max(Math.round(raw), MIN_TIME_MS), MAX_TIME_MS) : 0;
    const s = Math.floor(ms / 1000);
    if (s !== second) {
      second = s;
      const iso = new Date(s * 1000).toISOString();
      prefix = `${iso.slice(0, 10)} ${iso.slice(11, 19)}.`;
    }
    const frac = ms - s * 1000;
    return prefix + (frac < 10 ? `00${frac}` : frac < 100 ? `0${frac}` : frac);
  };
}

/** The TabSeparated body of access rows in ACCESS_COLUMNS order, in a Buffer of its own. */
export function accessTsv(rows: readonly AccessRow[]): Buffer {
  return writeAccessTsv(rows, new BodyWriter(Buffer.allocUnsafe(INITIAL_BYTES))).bytes();
}

function writeAccessTsv(rows: readonly AccessRow[], body: BodyWriter): BodyWriter {
  const time = timeFormatter();
  for (const r of rows) {
    const responseTime = r.responseTime === null ? '\\N' : uint(r.responseTime, MAX_UINT32);
    body.row(
      `${uint(r.domainId, MAX_UINT32)}\t${uint(r.id)}\t${time(r.timestamp)}\t${tsvString(r.ipAddress)}\t${tsvString(r.method)}\t${tsvString(r.url)}\t${tsvString(r.protocol)}\t${uint(r.statusCode, MAX_UINT16)}\t${uint(r.responseSize)}\t${tsvString(r.referrer)}\t${tsvString(r.userAgent)}\t${responseTime}\n`,
    );
  }
  return body;
}

function writeErrorTsv(rows: readonly ErrorRow[], body: BodyWriter): BodyWriter {
  const time = timeFormatter();
  for (const r of rows) {
    body.row(`${uint(r.domainId, MAX_UINT32)}\t${uint(r.id)}\t${time(r.timestamp)}\t${tsvString(r.level)}\t${tsvString(r.message)}\t${tsvMap(r.context)}\n`);
  }
  return body;
}

function writeRejectTsv(rows: readonly RejectRow[], body: BodyWriter): BodyWriter {
  for (const r of rows) {
    const domain = r.domainId === null ? 0 : uint(r.domainId, MAX_UINT32);
    body.row(`${domain}\t${r.kind}\t${tsvString(r.source)}\t${tsvString(r.identity)}\t${uint(r.offset)}\t${tsvString(r.reason)}\t${tsvString(r.line)}\t${uint(r.length)}\n`);
  }
  return body;
}
