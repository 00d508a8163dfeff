/**
 * bench/insert-path: ways to get 1,000,000 parsed nginx access lines into embedded chDB, side by
 * side, to choose the insert path of ingest/sinks/clickhouse.ts.
 *
 *   npx tsx bench/insert-path.ts
 *
 * It writes a realistic access log (combined format plus $request_time, 1,000,000 lines by
 * default) to a temporary directory, then runs each variant in a child process of its own (a
 * fresh chDB data directory each), so that each peak RSS is that variant's alone. Every variant
 * reads the file in 4 MiB blocks, parses the lines with a plain regex (the same for all), builds
 * its body and inserts it into the real access_logs table (migration 002); the count is checked
 * afterwards. Figures are printed, never asserted.
 *
 * Environment (optional):
 *   BENCH_LINES      lines to generate (default 1000000)
 *   BENCH_VARIANTS   comma list of variant names to run (default all; names in the table)
 *   BENCH_NODE_ARGS  extra node flags for the variant processes, e.g. `--max-semi-space-size=2`
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { chdbOf, migrateClickhouse, openClickhouse, type ChdbExtension, type ClickHouseClient } from '../core/db/clickhouse.js';
import { createLogger } from '../core/log.js';
import { compileAccessFormat } from '../ingest/parsers/access-format.js';
import { accessTsv, insertAccessBatch, writeRows, type AccessRow } from '../ingest/sinks/clickhouse.js';
import { accessDecoder, decodeLines, emptyDecoded, toRows, type Rows } from '../ingest/transforms/rows.js';
import { prng } from '../test/support/random.js';

const LINES = Number(process.env.BENCH_LINES ?? 1_000_000);
const SEGMENT = 2 ** 32; // ids as ingest/ids.ts makes them: segment number 1, plus the byte offset

// --- the log -----------------------------------------------------------------------------------

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

function writeLog(file: string, lines: number): void {
  const rnd = prng(42);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
  const weighted = <T>(xs: readonly (readonly [T, number])[]): T => {
    let r = rnd() * xs.reduce((s, [, w]) => s + w, 0);
    for (const [x, w] of xs) if ((r -= w) < 0) return x;
    return xs[0]![0];
  };
  const ips = Array.from({ length: 20_000 }, (_, i) =>
    i % 10 === 9
      ? `2001:db8:${(i * 7919).toString(16)}::${(i % 251).toString(16)}`
      : `${1 + Math.floor(rnd() * 222)}.${Math.floor(rnd() * 256)}.${Math.floor(rnd() * 256)}.${1 + Math.floor(rnd() * 254)}`,
  );
  const browsers = ['Chrome', 'Firefox', 'Safari', 'Edg'];
  const systems = ['Windows NT 10.0; Win64; x64', 'Macintosh; Intel Mac OS X 10_15_7', 'X11; Linux x86_64', 'iPhone; CPU iPhone OS 17_4 like Mac OS X', 'Linux; Android 14; Pixel 8'];
  const agents = [
    ...Array.from({ length: 400 }, () => `Mozilla/5.0 (${pick(systems)}) AppleWebKit/537.36 (KHTML, like Gecko) ${pick(browsers)}/${100 + Math.floor(rnd() * 30)}.0.${Math.floor(rnd() * 7000)}.${Math.floor(rnd() * 200)} Safari/537.36`),
    'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
    'Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)',
    'curl/8.5.0',
    'python-requests/2.31.0',
    'Go-http-client/1.1',
  ];
  const paths = ['/', '/index.html', '/products', '/products/{id}', '/api/v1/items/{id}', '/api/v1/search', '/static/js/app.{id}.js', '/static/css/main.{id}.css', '/images/{id}.jpg', '/blog/{id}-a-post-title', '/cart', '/checkout', '/login', '/favicon.ico', '/robots.txt', '/wp-login.php'];
  const referrers = ['-', '-', '-', 'https://www.google.com/', 'https://shop.example.com/', 'https://shop.example.com/products', 'https://www.bing.com/search?q=shoes', 'https://t.co/abc123'];
  const statuses = [[200, 80], [304, 6], [301, 3], [302, 2], [404, 6], [403, 1], [500, 1], [502, 0.5], [503, 0.5]] as const;
  const methods = [['GET', 90], ['POST', 8], ['HEAD', 1], ['PUT', 0.5], ['DELETE', 0.5]] as const;
  const fd = fs.openSync(file, 'w');
  const start = Date.now() - 20 * 3600 * 1000;
  const step = (20 * 3600 * 1000) / lines;
  let out = '';
  for (let i = 0; i < lines; i++) {
    const t = new Date(Math.floor(start + i * step));
    const time = `${String(t.getUTCDate()).padStart(2, '0')}/${MONTHS[t.getUTCMonth()]}/${t.getUTCFullYear()}:${String(t.getUTCHours()).padStart(2, '0')}:${String(t.getUTCMinutes()).padStart(2, '0')}:${String(t.getUTCSeconds()).padStart(2, '0')} +0000`;
    let url = pick(paths).replace('{id}', String(Math.floor(rnd() * 100_000)));
    if (rnd() < 0.3) url += `?page=${Math.floor(rnd() * 50)}&utm_source=${pick(['news', 'ads', 'mail'])}&q=${Math.floor(rnd() * 1e9).toString(36)}`;
    const status = weighted(statuses);
    const size = status === 304 ? 0 : Math.floor(rnd() * rnd() * 200_000);
    const rt = (rnd() * rnd() * 2).toFixed(3);
    out += `${pick(ips)} - - [${time}] "${weighted(methods)} ${url} HTTP/${rnd() < 0.7 ? '2.0' : '1.1'}" ${status} ${size} "${pick(referrers)}" "${pick(agents)}" ${rt}\n`;
    if (out.length > 1 << 22) {
      fs.writeSync(fd, out);
      out = '';
    }
  }
  fs.writeSync(fd, out);
  fs.closeSync(fd);
}

// --- reading and parsing (the same for every variant) --------------------------------------------

interface Line {
  text: string;
  offset: number;
}

/** Complete lines of the file with their byte offsets, `size` at a time, read in 4 MiB blocks. */
function* lineBatches(file: string, size: number): Generator<Line[]> {
  const fd = fs.openSync(file, 'r');
  const block = Buffer.alloc(4 << 20);
  let carry = Buffer.alloc(0);
  let base = 0; // file offset of carry[0]
  let batch: Line[] = [];
  for (;;) {
    const n = fs.readSync(fd, block, 0, block.length, null);
    if (n === 0) break;
    const buf = carry.length ? Buffer.concat([carry, block.subarray(0, n)]) : block.subarray(0, n);
    let pos = 0;
    for (let nl = buf.indexOf(10, pos); nl !== -1; nl = buf.indexOf(10, pos)) {
      batch.push({ text: buf.toString('latin1', pos, nl), offset: base + pos });
      pos = nl + 1;
      if (batch.length === size) {
        yield batch;
        batch = [];
      }
    }
    carry = Buffer.from(buf.subarray(pos));
    base += pos;
  }
  fs.closeSync(fd);
  if (batch.length) yield batch;
}

const LINE = /^(\S+) - (\S+) \[([^\]]+)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" (\S+)$/;
const MONTH_INDEX = new Map(MONTHS.map((m, i) => [m, i]));

function parseTime(s: string): number {
  // 21/Nov/2026:08:25:41 +0000
  const offset = (s[21] === '-' ? -1 : 1) * (Number(s.slice(22, 24)) * 60 + Number(s.slice(24, 26))) * 60_000;
  return Date.UTC(Number(s.slice(7, 11)), MONTH_INDEX.get(s.slice(3, 6))!, Number(s.slice(0, 2)), Number(s.slice(12, 14)), Number(s.slice(15, 17)), Number(s.slice(18, 20))) - offset;
}

function parse(lines: Line[]): AccessRow[] {
  const rows: AccessRow[] = [];
  for (const { text, offset } of lines) {
    const m = LINE.exec(text);
    if (!m) throw new Error(`bench line does not parse: ${text}`);
    rows.push({
      domainId: 1,
      id: SEGMENT + offset,
      timestamp: parseTime(m[3]!),
      ipAddress: m[1]!,
      method: m[4]!,
      url: m[5]!,
      protocol: m[6]!,
      statusCode: Number(m[7]),
      responseSize: Number(m[8]),
      referrer: m[9] === '-' ? '' : m[9]!,
      userAgent: m[10] === '-' ? '' : m[10]!,
      responseTime: Math.round(Number(m[11]) * 1000),
      host: null,
    });
  }
  return rows;
}

// --- the variants ----------------------------------------------------------------------------------

const COLUMNS = ['domain_id', 'id', 'timestamp', 'ip_address', 'method', 'url', 'protocol', 'status_code', 'response_size', 'referrer', 'user_agent', 'response_time'] as const;
const STRUCTURE =
  "domain_id UInt32, id UInt64, timestamp DateTime64(3, \\'UTC\\'), ip_address String, method String, url String, protocol String, status_code UInt16, response_size UInt64, referrer String, user_agent String, response_time Nullable(UInt32)";
const SETTINGS = { async_insert: 0 } as const;

interface Ctx {
  client: ClickHouseClient;
  chdb: ChdbExtension;
  file: string;
}

interface Timing {
  parseMs: number;
  buildMs: number;
  insertMs: number;
}

const isoTime = (ms: number) => new Date(ms).toISOString().replace('T', ' ').slice(0, 23);

function jsonEachRow(rows: AccessRow[]): string {
  let out = '';
  for (const r of rows) {
    out += `${JSON.stringify({
      domain_id: r.domainId,
      id: r.id,
      timestamp: isoTime(r.timestamp),
      ip_address: r.ipAddress,
      method: r.method,
      url: r.url,
      protocol: r.protocol,
      status_code: r.statusCode,
      response_size: r.responseSize,
      referrer: r.referrer,
      user_agent: r.userAgent,
      response_time: r.responseTime,
    })}\n`;
  }
  return out;
}

function jsonCompactEachRow(rows: AccessRow[]): string {
  let out = '';
  for (const r of rows) {
    out += `${JSON.stringify([r.domainId, r.id, isoTime(r.timestamp), r.ipAddress, r.method, r.url, r.protocol, r.statusCode, r.responseSize, r.referrer, r.userAgent, r.responseTime])}\n`;
  }
  return out;
}

const csvField = (s: string) => (/[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s);

function csv(rows: AccessRow[]): string {
  let out = '';
  for (const r of rows) {
    out += `${r.domainId},${r.id},${isoTime(r.timestamp)},${csvField(r.ipAddress)},${csvField(r.method)},${csvField(r.url)},${csvField(r.protocol)},${r.statusCode},${r.responseSize},${csvField(r.referrer)},${csvField(r.userAgent)},${r.responseTime ?? '\\N'}\n`;
  }
  return out;
}

/** RowBinary: little-endian numbers, strings as LEB128 length plus UTF-8 bytes. */
function rowBinary(rows: AccessRow[]): Buffer {
  let buf = Buffer.allocUnsafe(rows.length * 400);
  let pos = 0;
  const ensure = (n: number) => {
    if (pos + n > buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(buf.length * 2, pos + n));
      buf.copy(bigger, 0, 0, pos);
      buf = bigger;
    }
  };
  const str = (s: string) => {
    let len = Buffer.byteLength(s);
    ensure(len + 5);
    while (len >= 0x80) {
      buf[pos++] = (len & 0x7f) | 0x80;
      len >>>= 7;
    }
    buf[pos++] = len;
    pos += buf.write(s, pos);
  };
  for (const r of rows) {
    ensure(4 + 8 + 8);
    pos = buf.writeUInt32LE(r.domainId, pos);
    pos = buf.writeBigUInt64LE(BigInt(r.id), pos);
    pos = buf.writeBigInt64LE(BigInt(r.timestamp), pos);
    str(r.ipAddress);
    str(r.method);
    str(r.url);
    str(r.protocol);
    ensure(2 + 8 + 1 + 4);
    pos = buf.writeUInt16LE(r.statusCode, pos);
    pos = buf.writeBigUInt64LE(BigInt(r.responseSize), pos);
    str(r.referrer);
    str(r.userAgent);
    ensure(5);
    if (r.responseTime === null) buf[pos++] = 1;
    else {
      buf[pos++] = 0;
      pos = buf.writeUInt32LE(r.responseTime, pos);
    }
  }
  return buf.subarray(0, pos);
}

type Insert = (rows: AccessRow[], ctx: Ctx, t: Timing, batch: number) => Promise<void>;

const timed = <T>(t: Timing, key: keyof Timing, f: () => T): T => {
  const s = performance.now();
  const v = f();
  t[key] += performance.now() - s;
  return v;
};
/** The whole file as one Readable of TSV, parsed and built 10,000 lines at a time. */
function tsvStream(file: string, t: Timing): Readable {
  return Readable.from(
    (function* () {
      for (const lines of lineBatches(file, 10_000)) {
        const rows = timed(t, 'parseMs', () => parse(lines));
        yield timed(t, 'buildMs', () => accessTsv(rows));
      }
    })(),
    { objectMode: false },
  );
}

const timedAsync = async (t: Timing, key: keyof Timing, f: () => Promise<unknown>) => {
  const s = performance.now();
  await f();
  t[key] += performance.now() - s;
};

/** A variant that builds one body per batch and awaits its insert before parsing the next batch. */
const perBatch = (build: (rows: AccessRow[]) => string | Buffer, send: (body: string | Buffer, ctx: Ctx, batch: number) => Promise<unknown>): Insert => async (rows, ctx, t, batch) => {
  const body = timed(t, 'buildMs', () => build(rows));
  await timedAsync(t, 'insertMs', () => send(body, ctx, batch));
};

// clickhouse-js takes a JSON body only as objects; a ready JSONEachRow text goes through exec().
const clientInsert = (format: 'JSONEachRow' | 'TabSeparated' | 'CSV') => async (body: string | Buffer, ctx: Ctx) => {
  const values = Readable.from([body], { objectMode: false });
  if (format === 'JSONEachRow') {
    const result = await ctx.client.exec({ query: `INSERT INTO access_logs (${COLUMNS.join(', ')}) FORMAT JSONEachRow`, values, clickhouse_settings: SETTINGS });
    result.stream.destroy();
  } else await ctx.client.insert({ table: 'access_logs', columns: [...COLUMNS], values, format, clickhouse_settings: SETTINGS });
};

const rawInsert = (format: 'JSONEachRow' | 'TabSeparated' | 'CSV' | 'JSONCompactEachRow') => (body: string | Buffer, ctx: Ctx) =>
  ctx.chdb.rawInsert({ table: 'access_logs', columns: COLUMNS, values: typeof body === 'string' ? Buffer.from(body) : body, format, settings: SETTINGS });

/** Through a file on tmpfs: INSERT … SELECT FROM file(), or INSERT … FROM INFILE. */
const viaFile = (format: 'RowBinary' | 'TabSeparated', how: 'file' | 'infile') => async (body: string | Buffer, ctx: Ctx, batch: number) => {
  const file = path.join(SHM, `tailhouse-insert-path-${process.pid}-${batch}`);
  fs.writeFileSync(file, body);
  try {
    await ctx.chdb.queryAsync(
      how === 'file'
        ? `INSERT INTO access_logs (${COLUMNS.join(', ')}) SELECT * FROM file('${file}', '${format}', '${STRUCTURE}') SETTINGS async_insert = 0`
        : `INSERT INTO access_logs (${COLUMNS.join(', ')}) FROM INFILE '${file}' SETTINGS async_insert = 0 FORMAT ${format}`,
    );
  } finally {
    fs.rmSync(file);
  }
};
const SHM = fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir();

/** The sink itself; with `pipelined`, the next batch is read and parsed while the insert runs. */
const sink =
  (size: number, pipelined: boolean) =>
  async (ctx: Ctx, t: Timing): Promise<void> => {
    let pending: Promise<void> | undefined;
    let batch = 0;
    for (const lines of lineBatches(ctx.file, size)) {
      const rows = timed(t, 'parseMs', () => parse(lines));
      if (pending) await timedAsync(t, 'insertMs', () => pending!);
      // insertAccessBatch serialises before its first await: that is the build time.
      const s = performance.now();
      pending = insertAccessBatch(ctx.client, rows, `bench-${batch++}`);
      t.buildMs += performance.now() - s;
      if (!pipelined) await timedAsync(t, 'insertMs', () => pending!);
    }
    if (pending) await timedAsync(t, 'insertMs', () => pending!);
  };

/**
 * The import's own path (ingest/transforms/rows.ts): the compiled log_format parser fills one reused
 * object per line, each row is serialised to TSV as it is parsed (AccessBatch), the body gets its ids
 * (toRows) and goes through writeRows; the next batch is parsed while the insert runs. Parse and
 * build are one step here: *parse s* holds both.
 */
const direct =
  (size: number) =>
  async (ctx: Ctx, t: Timing): Promise<void> => {
    const decoder = accessDecoder(compileAccessFormat(`${NAMED_COMBINED} $request_time`));
    let pending: Promise<void> | undefined;
    let batch = 0;
    for (const lines of lineBatches(ctx.file, size)) {
      let s = performance.now();
      const decoded = emptyDecoded();
      await decodeLines(decoded, lines, [], decoder, { domainId: 1 }, { source: 'bench', identity: 'bench' }, Infinity);
      if (decoded.rejects.length > 0) throw new Error(`bench line does not parse: ${decoded.rejects[0]!.reason}`);
      t.parseMs += performance.now() - s;
      s = performance.now();
      const rows: Rows = toRows(decoded, (_domain, offset) => SEGMENT + offset);
      t.buildMs += performance.now() - s;
      if (pending) await timedAsync(t, 'insertMs', () => pending!);
      pending = writeRows(ctx.client, rows, `bench-${batch++}`);
    }
    if (pending) await timedAsync(t, 'insertMs', () => pending!);
  };
const NAMED_COMBINED = '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"';

interface Variant {
  name: string;
  what: string;
  /** Rows per insert; 0 for variants that do not go through JS rows. */
  batch: number;
  run?: Insert;
  /** Variants that take over the whole run (streams, pipelining, ClickHouse-side parsing). */
  whole?: (ctx: Ctx, t: Timing) => Promise<void>;
}

const VARIANTS: Variant[] = [
  {
    name: 'client-objects-100k',
    what: '@clickhouse/client insert(), array of row objects, JSONEachRow',
    batch: 100_000,
    run: async (rows, ctx, t) => {
      const values = timed(t, 'buildMs', () =>
        rows.map((r) => ({ domain_id: r.domainId, id: r.id, timestamp: isoTime(r.timestamp), ip_address: r.ipAddress, method: r.method, url: r.url, protocol: r.protocol, status_code: r.statusCode, response_size: r.responseSize, referrer: r.referrer, user_agent: r.userAgent, response_time: r.responseTime })),
      );
      await timedAsync(t, 'insertMs', () => ctx.client.insert({ table: 'access_logs', values, format: 'JSONEachRow', clickhouse_settings: SETTINGS }));
    },
  },
  { name: 'client-json-100k', what: '@clickhouse/client exec(), JSONEachRow string body', batch: 100_000, run: perBatch(jsonEachRow, clientInsert('JSONEachRow')) },
  { name: 'client-tsv-100k', what: '@clickhouse/client insert(), TabSeparated string body', batch: 100_000, run: perBatch((r) => accessTsv(r).toString(), clientInsert('TabSeparated')) },
  { name: 'client-tsv-1m', what: '@clickhouse/client insert(), TabSeparated string body', batch: 1_000_000, run: perBatch((r) => accessTsv(r).toString(), clientInsert('TabSeparated')) },
  { name: 'client-csv-100k', what: '@clickhouse/client insert(), CSV string body', batch: 100_000, run: perBatch(csv, clientInsert('CSV')) },
  {
    name: 'client-tsv-stream',
    what: '@clickhouse/client insert(), one Readable of TSV for the whole file',
    batch: 0,
    whole: async (ctx, t) => {
      const source = tsvStream(ctx.file, t);
      await timedAsync(t, 'insertMs', () => ctx.client.insert({ table: 'access_logs', columns: [...COLUMNS], values: source, format: 'TabSeparated', clickhouse_settings: SETTINGS }));
    },
  },
  { name: 'raw-json-100k', what: 'chdb rawInsert(), JSONEachRow Buffer', batch: 100_000, run: perBatch(jsonEachRow, rawInsert('JSONEachRow')) },
  { name: 'raw-jsoncompact-100k', what: 'chdb rawInsert(), JSONCompactEachRow Buffer', batch: 100_000, run: perBatch(jsonCompactEachRow, rawInsert('JSONCompactEachRow')) },
  { name: 'raw-csv-100k', what: 'chdb rawInsert(), CSV Buffer', batch: 100_000, run: perBatch(csv, rawInsert('CSV')) },
  { name: 'raw-tsv-10k', what: 'chdb rawInsert(), TabSeparated Buffer', batch: 10_000, run: perBatch(accessTsv, rawInsert('TabSeparated')) },
  { name: 'raw-tsv-100k', what: 'chdb rawInsert(), TabSeparated Buffer', batch: 100_000, run: perBatch(accessTsv, rawInsert('TabSeparated')) },
  { name: 'raw-tsv-1m', what: 'chdb rawInsert(), TabSeparated Buffer', batch: 1_000_000, run: perBatch(accessTsv, rawInsert('TabSeparated')) },
  {
    name: 'raw-tsv-stream',
    what: 'chdb streamInsert(), Readable of TSV (8 MiB chunks)',
    batch: 0,
    whole: async (ctx, t) => {
      const source = tsvStream(ctx.file, t);
      await timedAsync(t, 'insertMs', () => ctx.chdb.streamInsert({ table: 'access_logs', columns: COLUMNS, values: source, format: 'TabSeparated', settings: SETTINGS }));
    },
  },
  { name: 'file-tsv-100k', what: 'TSV on tmpfs, INSERT … SELECT FROM file()', batch: 100_000, run: perBatch(accessTsv, viaFile('TabSeparated', 'file')) },
  { name: 'file-rowbinary-100k', what: 'RowBinary built in JS, on tmpfs, INSERT … SELECT FROM file()', batch: 100_000, run: perBatch(rowBinary, viaFile('RowBinary', 'file')) },
  { name: 'infile-tsv-shm-100k', what: 'TSV on tmpfs, INSERT … FROM INFILE', batch: 100_000, run: perBatch(accessTsv, viaFile('TabSeparated', 'infile')) },
  { name: 'sink-10k', what: 'the sink: insertAccessBatch (TSV spool file beside the chDB data, FROM INFILE, dedup token)', batch: 10_000, whole: sink(10_000, false) },
  { name: 'sink-100k', what: 'the sink', batch: 100_000, whole: sink(100_000, false) },
  { name: 'sink-1m', what: 'the sink', batch: 1_000_000, whole: sink(1_000_000, false) },
  { name: 'sink-10k-pipelined', what: 'the sink, next batch parsed during the insert', batch: 10_000, whole: sink(10_000, true) },
  { name: 'sink-20k-pipelined', what: 'the sink, next batch parsed during the insert', batch: 20_000, whole: sink(20_000, true) },
  { name: 'sink-100k-pipelined', what: 'the sink, next batch parsed during the insert', batch: 100_000, whole: sink(100_000, true) },
  { name: 'direct-20k-pipelined', what: "the import's path: log_format parser straight to TSV rows (AccessBatch), ids, writeRows; next batch parsed during the insert", batch: 20_000, whole: direct(20_000) },
  { name: 'direct-100k-pipelined', what: 'same', batch: 100_000, whole: direct(100_000) },
  {
    name: 'clickhouse-regexp-file',
    what: "no JS: INSERT … SELECT … FROM file(log, 'Regexp') (the engine's limit)",
    batch: 0,
    whole: async (ctx, t) => {
      const regexp = String.raw`^(\S+) - (\S+) \[([^\]]+)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" (\S+)$`;
      const structure = 'ip String, user String, time String, method String, url String, protocol String, status UInt16, size UInt64, referrer String, agent String, rt Float64';
      await timedAsync(t, 'insertMs', () =>
        ctx.chdb.queryAsync(
          `INSERT INTO access_logs (${COLUMNS.join(', ')})
           SELECT 1, ${SEGMENT} + rowNumberInAllBlocks(), parseDateTime64BestEffort(replaceOne(time, ':', ' '), 3, 'UTC'), ip, method, url, protocol, status, size,
                  if(referrer = '-', '', referrer), if(agent = '-', '', agent), toUInt32(round(rt * 1000))
           FROM file('${ctx.file}', 'Regexp', '${structure}')
           SETTINGS format_regexp = '${regexp.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}', format_regexp_escaping_rule = 'Raw', async_insert = 0`,
        ),
      );
    },
  },
];

// --- running ---------------------------------------------------------------------------------------

function peakRssMb(): number {
  const status = fs.readFileSync('/proc/self/status', 'utf8');
  return Number(/VmHWM:\s+(\d+)/.exec(status)![1]) / 1024;
}

interface Result extends Timing {
  rows: number;
  wallMs: number;
  /** CPU time of the whole process (JS and chDB's threads): less sensitive to a busy machine than wall time. */
  cpuMs: number;
  peakRssMb: number;
  baseRssMb: number;
}

async function runVariant(variant: Variant, file: string): Promise<Result> {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-insert-path-db-'));
  const client = await openClickhouse({ dataDir: tmp });
  try {
    await migrateClickhouse(client, createLogger('silent'), { LOG_RETENTION_DAYS: 90 });
    const ctx: Ctx = { client, chdb: chdbOf(client)!, file };
    const baseRssMb = peakRssMb();
    const t: Timing = { parseMs: 0, buildMs: 0, insertMs: 0 };
    const cpu = process.cpuUsage();
    const start = performance.now();
    if (variant.whole) await variant.whole(ctx, t);
    else {
      let batch = 0;
      for (const lines of lineBatches(file, variant.batch)) {
        const rows = timed(t, 'parseMs', () => parse(lines));
        await variant.run!(rows, ctx, t, batch++);
      }
    }
    const wallMs = performance.now() - start;
    const used = process.cpuUsage(cpu);
    const cpuMs = (used.user + used.system) / 1000;
    const [count] = await (await client.query({ query: 'SELECT count() AS n FROM access_logs', format: 'JSONEachRow' })).json<{ n: string }>();
    return { ...t, rows: Number(count!.n), wallMs, cpuMs, peakRssMb: peakRssMb(), baseRssMb };
  } finally {
    await client.close();
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

function child(variant: string, file: string): Promise<Result | string> {
  return new Promise((resolve) => {
    const nodeArgs = (process.env.BENCH_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);
    const proc = spawn(process.execPath, [...nodeArgs, ...process.execArgv, fileURLToPath(import.meta.url), '--variant', variant, file], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    proc.stdout.on('data', (d) => (out += d));
    proc.stderr.on('data', (d) => (err += d));
    proc.on('close', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('RESULT '));
      resolve(code === 0 && line ? (JSON.parse(line.slice(7)) as Result) : `failed (exit ${code}): ${(err || out).trim().split('\n').slice(-3).join(' | ')}`);
    });
  });
}

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');

async function main(): Promise<void> {
  const at = process.argv.indexOf('--variant');
  if (at !== -1) {
    const variant = VARIANTS.find((v) => v.name === process.argv[at + 1]);
    if (!variant) throw new Error(`unknown variant ${process.argv[at + 1]}`);
    process.stdout.write(`RESULT ${JSON.stringify(await runVariant(variant, process.argv[at + 2]!))}\n`);
    return;
  }
  const wanted = process.env.BENCH_VARIANTS?.split(',').map((s) => s.trim());
  const variants = wanted ? VARIANTS.filter((v) => wanted.includes(v.name)) : VARIANTS;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-insert-path-log-'));
  const file = path.join(dir, 'access.log');
  try {
    let s = performance.now();
    writeLog(file, LINES);
    const size = fs.statSync(file).size;
    console.log(`bench/insert-path: ${fmt(LINES)} lines, ${(size / 2 ** 20).toFixed(0)} MiB (written in ${fmt(performance.now() - s)} ms), Node ${process.version}, ${os.cpus().length} CPUs${process.env.BENCH_NODE_ARGS ? `, node flags ${process.env.BENCH_NODE_ARGS}` : ''}`);
    s = performance.now();
    let parsed = 0;
    for (const lines of lineBatches(file, 100_000)) parsed += parse(lines).length;
    console.log(`reading + regex parse alone: ${fmt(performance.now() - s)} ms for ${fmt(parsed)} lines\n`);
    const load = () => os.loadavg().map((l) => l.toFixed(1)).join(' ');
    console.log(`load average before: ${load()}\n`);
    console.log('| variant | how | rows/insert | lines/s | wall s | CPU s | parse s | build s | insert wait s | peak RSS MB | RSS before data MB |');
    console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    for (const v of variants) {
      const r = await child(v.name, file);
      if (typeof r === 'string') {
        console.log(`| ${v.name} | ${v.what} | | ${r} |`);
        continue;
      }
      const bad = r.rows === LINES ? '' : ` (**${fmt(r.rows)} rows landed**)`;
      const cells = [v.name, v.what, v.batch ? fmt(v.batch) : '–', fmt((LINES / r.wallMs) * 1000) + bad, (r.wallMs / 1000).toFixed(2), (r.cpuMs / 1000).toFixed(2), (r.parseMs / 1000).toFixed(2), (r.buildMs / 1000).toFixed(2), (r.insertMs / 1000).toFixed(2), fmt(r.peakRssMb), fmt(r.baseRssMb)];
      console.log(`| ${cells.join(' | ')} |`);
    }
    console.log(`\nload average after: ${load()}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

await main();
