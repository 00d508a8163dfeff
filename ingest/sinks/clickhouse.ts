import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Readable } from 'node:stream';
import { chdbOf, clickhouseCode, type ChdbExtension, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { STORED_TIME_RANGE } from '../../core/db/time-range.js';
import type { IdOf } from '../ids.js';
import { knownClasses, userAgentClasses, type UserAgentClasses } from '../transforms/user-agent.js';
import type { AccessEntry, ErrorEntry } from '../../core/entries.js';
import { DAY_MS } from '../../core/durations.js';

/**
 * The ClickHouse writer of the ingest pipeline (schema: sql/clickhouse/002_logs.sql).
 *
 * Rows travel as one TabSeparated body per batch: with a ClickHouse server as the HTTP request
 * body of `@clickhouse/client`'s insert, with embedded chDB as a spool file that the engine reads
 * with `INSERT … FROM INFILE` (see insertThroughSpool). Every insert is synchronous (`async_insert = 0`:
 * accepted means written) and carries the caller's `insert_deduplication_token`, so a batch sent
 * again after a crash or a lost answer lands once (the tables keep `non_replicated_deduplication_window`).
 *
 * Access rows of the pipeline are serialised while they are parsed (AccessBatch) and become a
 * ready body once their ids are known (AccessTsv): no object per row is kept for a batch.
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
  /** Why, in a few fixed words (RejectCause of transforms/rows.ts): what the rejects are counted by. */
  cause: string;
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
  // The user agent's class (ingest/transforms/user-agent.ts, sql/clickhouse/010).
  'agent_class',
] as const;
const ERROR_COLUMNS = ['domain_id', 'id', 'timestamp', 'level', 'message', 'context'] as const;
const REJECT_COLUMNS = ['domain_id', 'kind', 'source', 'identity', 'offset', 'reason', 'cause', 'line', 'length'] as const;

/**
 * `insert_deduplication_token` of a batch: a batch is the byte range [startOffset, endOffset) of one
 * source, so the same range read again after a restart gets the same token. The same token serves
 * every table the batch writes to (deduplication is per table).
 */
export function dedupToken(identity: string, startOffset: number, endOffset: number): string {
  return createHash('sha256').update(`${identity}\0${startOffset}\0${endOffset}`).digest('hex');
}

/** Per client: the classes written to its agent_classes (numbers of knownClasses). */
const storedClasses = new WeakMap<ClickHouseClient, Set<number>>();

/**
 * Writes to agent_classes (sql/clickhouse/010) every class this process knows and has not written
 * through `client` yet: before the rows that carry them, so that no stored row's class is unknown
 * to a query. Usually nothing (a class is written once per process); a class written again by
 * another process changes nothing (the Join table keeps a key's first row).
 */
export async function storeAgentClasses(client: ClickHouseClient): Promise<void> {
  let stored = storedClasses.get(client);
  if (stored === undefined) storedClasses.set(client, (stored = new Set()));
  if (stored.size === knownClasses.size) return;
  const fresh = [...knownClasses.values()].filter((c) => !stored.has(c.id));
  await client.insert({
    table: 'agent_classes',
    values: fresh.map((c) => ({ id: c.id, browser: c.browser, os: c.os, device: c.device, bot_name: c.botName, bot_kind: c.botKind })),
    format: 'JSONEachRow',
  });
  for (const c of fresh) stored.add(c.id);
}

export async function insertAccessBatch(client: ClickHouseClient, rows: readonly AccessRow[] | AccessTsv, token: string): Promise<void> {
  // Rows are classified as they are serialised (AccessBatch, writeAccessTsv): once the body is
  // written, its classes are known and can go first.
  const written = rows instanceof AccessTsv ? null : writeAccessTsv(rows, takeBuffer());
  try {
    await storeAgentClasses(client);
    await insertTsv(client, 'access_logs', ACCESS_COLUMNS, rows instanceof AccessTsv ? rows.bytes : written!.bytes(), token);
  } finally {
    if (written) giveBack(written);
  }
}

export async function insertErrorBatch(client: ClickHouseClient, rows: readonly ErrorRow[], token: string): Promise<void> {
  await insertWritten(client, 'error_logs', ERROR_COLUMNS, writeErrorTsv(rows, takeBuffer()), token);
}

export async function insertRejects(client: ClickHouseClient, rows: readonly RejectRow[], token: string): Promise<void> {
  await insertWritten(client, 'ingest_rejects', REJECT_COLUMNS, writeRejectTsv(rows, takeBuffer()), token);
}

/** Inserts a body written into a pooled buffer, which goes back to the pool only once the insert settled (it is read in place). */
async function insertWritten(client: ClickHouseClient, table: string, columns: readonly string[], body: BodyWriter, token: string): Promise<void> {
  try {
    await insertTsv(client, table, columns, body.bytes(), token);
  } finally {
    giveBack(body);
  }
}

/**
 * Writes one batch: its entries, then its rejects, all under the batch's token. Tables are written
 * one after the other; a batch that failed half-way is sent again whole, and the half that landed
 * deduplicates.
 */
export async function writeRows(
  client: ClickHouseClient,
  rows: { access: readonly AccessRow[] | AccessTsv; error: readonly ErrorRow[]; rejects: readonly RejectRow[] },
  token: string,
): Promise<void> {
  if (rows.access.length > 0) await insertAccessBatch(client, rows.access, token);
  if (rows.error.length > 0) await insertErrorBatch(client, rows.error, token);
  if (rows.rejects.length > 0) await insertRejects(client, rows.rejects, token);
  // Written: a ready body is not needed again (until now a retry could send it again).
  if (rows.access instanceof AccessTsv) rows.access.release();
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
// TOO_LARGE_STRING_SIZE (131), VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE (321), and VIOLATED_CONSTRAINT
// (469: a CHECK constraint an operator added refuses these rows, every time they are sent).
const DATA_ERRORS = new Set([6, 26, 27, 38, 41, 53, 62, 69, 70, 72, 117, 131, 321, 469]);


export const INSERT_SETTINGS = {
  // chDB defaults to asynchronous inserts; an acknowledged batch must already be in the table.
  async_insert: 0,
  insert_deduplicate: 1,
  // access_hour_rows (sql/clickhouse/005) is filled by a materialized view: a batch deduplicated in
  // access_logs must be deduplicated there too, or a retry would count its rows twice and the
  // stats rollups of those hours would never match their count again.
  deduplicate_blocks_in_dependent_materialized_views: 1,
  // Daily partitions: a batch from a sparse, old log may span many days, and a batch that fails
  // for its shape would block its file forever. Its small parts merge away.
  max_partitions_per_insert_block: '0',
} as const;

async function insertTsv(client: ClickHouseClient, table: string, columns: readonly string[], bytes: Buffer, token: string): Promise<void> {
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
  const settings = settingList({ ...INSERT_SETTINGS, insert_deduplication_token: token });
  await spooled(chdb, body, (file) => chdb.queryAsync(`INSERT INTO ${table} (${columns.join(', ')}) FROM INFILE ${file} SETTINGS ${settings} FORMAT TabSeparated`));
}

/**
 * Runs `statement` with `body` in a spool file (see insertThroughSpool), given the file's path as
 * a quoted literal: INFILE, file() and SETTINGS take literals only, never bound parameters. The
 * path is made here (a temporary name), and setting values by the callers (digests, the compiled
 * log_format's expression), quoted all the same.
 */
export async function spooled(chdb: ChdbExtension, body: Buffer, statement: (file: string) => Promise<unknown>): Promise<void> {
  const file = path.join(spoolDir(chdb), `insert-${++spoolSeq}`);
  try {
    fs.writeFileSync(file, body);
    await statement(sqlString(file));
  } finally {
    fs.rmSync(file, { force: true });
  }
  await purgeNowAndThen(chdb, body.length);
}

/** `name = literal, …` of a SETTINGS clause. */
export const settingList = (settings: Record<string, string | number>): string =>
  Object.entries(settings)
    .map(([name, value]) => `${name} = ${typeof value === 'number' ? value : sqlString(value)}`)
    .join(', ');

// The engine's allocator (jemalloc) keeps freed pages for 5 seconds before it returns them, so a
// bulk import holds tens of megabytes it no longer uses; returning them every PURGE_BYTES of bodies
// took the peak of a million-line import about 30 MB lower for about 3 ms a time (bench/insert-path).
const PURGE_BYTES = 16 << 20;
let insertedSincePurge = 0;

async function purgeNowAndThen(chdb: ChdbExtension, bytes: number): Promise<void> {
  insertedSincePurge += bytes;
  if (insertedSincePurge < PURGE_BYTES) return;
  insertedSincePurge = 0;
  // Only an optimisation: the insert has succeeded whatever happens here.
  await chdb.queryAsync('SYSTEM JEMALLOC PURGE').catch(() => {});
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

export const sqlString = (s: string): string => `'${s.replace(/[\\']/g, (c) => `\\${c}`)}'`;

// ---------------------------------------------------------------------------------------------
// Bodies are written row by row into a reused Buffer. Building one large string and converting
// it at the end costs three to four times as much (bench/insert-path), and a fresh Buffer per
// batch leaves the garbage collector tens of megabytes to find each time.

const INITIAL_BYTES = 1 << 20;
// Buffers of row text in use at once: the access rows of the batch being parsed, the body of the
// batch being given its ids, the body being inserted, a body of errors or rejects. A buffer grown
// past the cap (an unusually large batch) is left to the garbage collector.
const SPARE_BUFFERS = 4;
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

// A body started without a spare begins this small and doubles as it fills: a thousand quiet
// files' chunks are prepared at once, and a megabyte each would be a gigabyte for a few lines.
const FIRST_BYTES = 16 << 10;

function takeBuffer(): BodyWriter {
  return new BodyWriter(spare.pop() ?? Buffer.allocUnsafe(FIRST_BYTES));
}

function giveBack(body: BodyWriter): void {
  giveBackBytes(body.buf);
}

// A body this small gets a buffer of its own size: the chunks of a thousand quiet files each wait
// in a shared batch for up to a second, and a pooled megabyte each would be a gigabyte.
const SMALL_BODY = 64 << 10;

/** A spare buffer of at least `size` bytes, or a new one. */
function takeBytes(size: number): Buffer {
  if (size <= SMALL_BODY) return Buffer.allocUnsafe(size);
  const i = spare.findIndex((b) => b.length >= size);
  return i === -1 ? Buffer.allocUnsafe(Math.max(size, INITIAL_BYTES)) : spare.splice(i, 1)[0]!;
}

function giveBackBytes(buf: Buffer): void {
  if (buf.length < INITIAL_BYTES || buf.length > MAX_SPARE_BYTES) return;
  if (spare.length < SPARE_BUFFERS) spare.push(buf);
  else {
    // Keep the largest: a smaller one would be outgrown again.
    const smallest = spare.reduce((k, b, i) => (b.length < spare[k]!.length ? i : k), 0);
    if (spare[smallest]!.length < buf.length) spare[smallest] = buf;
  }
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

// The transform rejects times outside what is stored; one that got here anyway (a caller's bug) is
// held at the range's edges rather than failing the whole batch on every retry.
const { first: MIN_TIME_MS, last: MAX_TIME_MS } = STORED_TIME_RANGE;

const TWO_DIGITS = Array.from({ length: 100 }, (_, i) => String(i).padStart(2, '0'));
const THREE_DIGITS = Array.from({ length: 1000 }, (_, i) => String(i).padStart(3, '0'));

/**
 * Formats epoch milliseconds as `YYYY-MM-DD hh:mm:ss.mmm` (UTC). Log lines come in time order, so
 * the date is made once per day and reused; the time of day is put together from table lookups.
 */
function timeFormatter(): (ms: number) => string {
  let day = Number.NaN;
  let date = '';
  return (raw) => {
    const ms = Number.isFinite(raw) ? Math.min(Math.max(Math.round(raw), MIN_TIME_MS), MAX_TIME_MS) : 0;
    const d = Math.floor(ms / DAY_MS);
    if (d !== day) {
      day = d;
      date = `${new Date(d * DAY_MS).toISOString().slice(0, 10)} `;
    }
    let rest = ms - d * DAY_MS;
    const frac = rest % 1000;
    rest = (rest - frac) / 1000;
    const second = rest % 60;
    rest = (rest - second) / 60;
    const minute = rest % 60;
    return `${date}${TWO_DIGITS[(rest - minute) / 60]}:${TWO_DIGITS[minute]}:${TWO_DIGITS[second]}.${THREE_DIGITS[frac]}`;
  };
}

/** The TabSeparated body of access rows in ACCESS_COLUMNS order, in a Buffer of its own. */
export function accessTsv(rows: readonly AccessRow[]): Buffer {
  return writeAccessTsv(rows, new BodyWriter(Buffer.allocUnsafe(INITIAL_BYTES))).bytes();
}

/** The columns of an access row after domain_id and id, ending with its newline. */
function accessTail(r: AccessEntry, plain: boolean, time: (ms: number) => string, classes: UserAgentClasses): string {
  const responseTime = r.responseTime === null ? '\\N' : uint(r.responseTime, MAX_UINT32);
  const cls = `\t${classes.of(r.userAgent).id}`;
  return plain
    ? `${time(r.timestamp)}\t${r.ipAddress}\t${r.method}\t${r.url}\t${r.protocol}\t${uint(r.statusCode, MAX_UINT16)}\t${uint(r.responseSize)}\t${r.referrer}\t${r.userAgent}\t${responseTime}${cls}\n`
    : `${time(r.timestamp)}\t${tsvString(r.ipAddress)}\t${tsvString(r.method)}\t${tsvString(r.url)}\t${tsvString(r.protocol)}\t${uint(r.statusCode, MAX_UINT16)}\t${uint(r.responseSize)}\t${tsvString(r.referrer)}\t${tsvString(r.userAgent)}\t${responseTime}${cls}\n`;
}

/**
 * The access rows of a batch, serialised as they are parsed, before they have ids: each row's
 * columns after domain_id and id go into one buffer (no object per row stays behind for the
 * garbage collector), its domain and byte offset beside. `withIds` then makes the body.
 */
export class AccessBatch {
  length = 0;
  /** The domains rows were added for. */
  readonly domains = new Set<number>();
  private readonly domainIds: number[] = [];
  private readonly offsets: number[] = [];
  private readonly timestamps: number[] = [];
  private tails: BodyWriter | null = null;
  private readonly time = timeFormatter();

  constructor(private readonly classes: UserAgentClasses = userAgentClasses) {}

  /**
   * Adds one row. `plain` (see AccessFields in the access-log parser): its strings hold no
   * backslash, tab, line feed, carriage return or NUL, so they need no escaping.
   */
  add(entry: AccessEntry, plain: boolean, domainId: number, offset: number): void {
    (this.tails ??= takeBuffer()).row(accessTail(entry, plain, this.time, this.classes));
    if (domainId !== this.domainIds[this.length - 1]) this.domains.add(domainId);
    this.domainIds.push(domainId);
    this.offsets.push(offset);
    this.timestamps.push(entry.timestamp);
    this.length++;
  }

  /**
   * The TabSeparated body in ACCESS_COLUMNS order, each row given its domain and its id. The
   * batch's buffer goes back to the pool: the batch cannot be used afterwards.
   */
  withIds(idOf: IdOf): AccessTsv {
    if (this.tails === null) return new AccessTsv(Buffer.alloc(0), 0, this.timestamps, this.domains);
    const tails = this.tails.bytes();
    // domain_id (at most 10 digits), id (at most 16: below 2^53) and their tabs.
    const out = takeBytes(tails.length + this.length * 28);
    let pos = 0;
    let from = 0;
    for (let i = 0; i < this.length; i++) {
      const domainId = this.domainIds[i]!;
      pos = writeUint(out, pos, uint(domainId, MAX_UINT32));
      out[pos++] = TAB;
      pos = writeUint(out, pos, uint(idOf(domainId, this.offsets[i]!)));
      out[pos++] = TAB;
      const end = tails.indexOf(NEWLINE, from) + 1;
      pos += tails.copy(out, pos, from, end);
      from = end;
    }
    giveBack(this.tails);
    this.tails = null;
    return new AccessTsv(out, pos, this.timestamps, this.domains);
  }
}

/**
 * A ready TabSeparated body of access rows (AccessBatch.withIds): sent as is, again on a retry,
 * until `writeRows` has written it; its buffer then goes back to the pool.
 */
export class AccessTsv {
  private buf: Buffer | null;

  constructor(
    buf: Buffer,
    private readonly size: number,
    /** The rows' times (epoch ms), in the order of the body. */
    readonly timestamps: readonly number[],
    /** The domains of its rows. */
    readonly domains: ReadonlySet<number>,
  ) {
    this.buf = buf;
  }

  /** One body of several, in order (a shared batch's, shared-batches.ts); the parts stay as they are. */
  static concat(parts: readonly AccessTsv[]): AccessTsv {
    const size = parts.reduce((n, p) => n + p.size, 0);
    const buf = takeBytes(size);
    const timestamps: number[] = [];
    const domains = new Set<number>();
    let pos = 0;
    for (const p of parts) {
      pos += p.bytes.copy(buf, pos);
      for (const t of p.timestamps) timestamps.push(t);
      for (const d of p.domains) domains.add(d);
    }
    return new AccessTsv(buf, size, timestamps, domains);
  }

  get length(): number {
    return this.timestamps.length;
  }

  get bytes(): Buffer {
    if (this.buf === null) throw new Error('these access rows were written already: their body is gone');
    return this.buf.subarray(0, this.size);
  }

  release(): void {
    if (this.buf !== null) giveBackBytes(this.buf);
    this.buf = null;
  }
}

const TAB = 0x09;
const NEWLINE = 0x0a;

/** Writes the decimal digits of a whole number in [0, 2^53) at `pos`; returns the position after them. */
export function writeUint(buf: Buffer, pos: number, n: number): number {
  if (n >= 1e8) {
    const high = Math.floor(n / 1e8);
    pos = writeUint(buf, pos, high);
    let low = n - high * 1e8;
    for (let at = pos + 7; at >= pos; at--) {
      const digit = low % 10;
      buf[at] = 48 + digit;
      low = (low - digit) / 10;
    }
    return pos + 8;
  }
  let digits = 1;
  for (let x = n; x >= 10; x = (x - (x % 10)) / 10) digits++;
  for (let at = pos + digits - 1; at >= pos; at--) {
    const digit = n % 10;
    buf[at] = 48 + digit;
    n = (n - digit) / 10;
  }
  return pos + digits;
}

function writeAccessTsv(rows: readonly AccessRow[], body: BodyWriter): BodyWriter {
  const time = timeFormatter();
  for (const r of rows) body.row(`${uint(r.domainId, MAX_UINT32)}\t${uint(r.id)}\t${accessTail(r, false, time, userAgentClasses)}`);
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
    body.row(`${domain}\t${r.kind}\t${tsvString(r.source)}\t${tsvString(r.identity)}\t${uint(r.offset)}\t${tsvString(r.reason)}\t${tsvString(r.cause)}\t${tsvString(r.line)}\t${uint(r.length)}\n`);
  }
  return body;
}
