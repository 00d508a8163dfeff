/**
 * Error-log entries that span lines: nginx writes the raw CR LF (or LF) a message holds, so the
 * line after it continues the entry instead of being one. The cutter joins them for both file
 * readers (the follower and the import), the same way whatever the reads, chunk limits or cuts;
 * the stores get each entry once with its whole message. Syslog has one message per datagram.
 */
import dgram from 'node:dgram';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { checkpointDir, CheckpointStore } from '../../ingest/checkpoints.js';
import { parseIngestConfig } from '../../ingest/config.js';
import { importFiles } from '../../ingest/import.js';
import { parseErrorLine } from '../../ingest/parsers/error-log.js';
import { FileTail } from '../../ingest/sources/file-tail.js';
import { LineCutter, type CutLimits, type OverlongScan } from '../../ingest/sources/line-cutter.js';
import type { LineChunk } from '../../ingest/types.js';
import { startIngest, type IngestWorker } from '../../ingest/worker.js';
import { createLogger } from '../../core/log.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { countRows, errorLogTime, newDomain, select, T0, until } from '../support/ingest.js';

const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

/** An entry's first line as nginx writes it. */
const head = (n: number, level = 'error') => `${errorLogTime(T0 + n * 1000)} [${level}] 4242#4242: *${n} `;
/** The entry of a request for `/a%0d%0aSet-Cookie:x=1`: the decoded CR LF splits its message. */
const injected = (n: number, server: string) =>
  `${head(n)}open() "/srv/www/a${n}\r\nSet-Cookie:x=${n}" failed (2: No such file or directory), client: 203.0.113.7, server: ${server}, request: "GET /a${n}%0d%0aSet-Cookie:x=${n} HTTP/1.1", host: "${server}"`;

// ---- the cutter ---------------------------------------------------------------------------------

interface Cutting {
  chunks: { start: number; end: number; entries: [offset: number, text: string][]; overlong: [offset: number, length: number][] }[];
}

/**
 * All of `content` cut with error-log framing the way the follower reads (each chunk read again
 * from its start, `readBytes` at a time) or the way the import streams it (fed on, `next` between
 * chunks); `cuts` are recorded cuts. The data ends with `content`.
 */
function cutAll(content: Buffer, limits: CutLimits, readBytes: number, style: 'follower' | 'stream', cuts: number[] = []): Cutting {
  const cutter = new LineCutter(limits, 'error-log');
  const chunks: Cutting['chunks'] = [];
  const cutAfter = (start: number) => cuts.find((c) => c > start) ?? Infinity;
  const record = (start: number) => {
    const cut = cutter.cut();
    if (cut.lines.length + cut.overlong.length > 0) {
      chunks.push({ start, end: cut.lineStart, entries: cut.lines.map((l) => [l.offset, l.text]), overlong: cut.overlong.map((o) => [o.offset, o.length]) });
    }
    return cut.lineStart;
  };
  if (style === 'follower') {
    let start = 0;
    let pending: OverlongScan | null = null;
    for (;;) {
      cutter.begin(start, cutAfter(start), pending);
      let pos: number = pending?.scanned ?? start;
      let end: number;
      for (;;) {
        const view = content.subarray(pos, pos + readBytes);
        if (view.length === 0) {
          end = record(start);
          pending = cutter.pendingOverlong(pos);
          break;
        }
        if (cutter.feed(view, pos) !== -1) {
          end = record(start);
          pending = null;
          break;
        }
        pos += view.length;
      }
      if (end === start && pending === null) return { chunks };
      start = end;
    }
  }
  let start = 0;
  cutter.begin(0, cutAfter(0));
  for (let pos = 0; pos < content.length; pos += readBytes) {
    let view = content.subarray(pos, pos + readBytes);
    let at = pos;
    while (view.length > 0) {
      const used = cutter.feed(view, at);
      if (used === -1) break;
      start = record(start);
      cutter.next(cutAfter(start));
      view = view.subarray(used);
      at += used;
    }
  }
  record(start);
  return { chunks };
}

/**
 * The follower over a file that grows by whole entries (nginx's writes) ending at `writeEnds`: it
 * reads after each write, so the data often ends between entries; a chunk ending where the data
 * ends records its end as a cut, as FileTail does. Returns the chunks and the cuts.
 */
function followGrowing(content: Buffer, limits: CutLimits, readBytes: number, writeEnds: number[]): Cutting & { cuts: number[] } {
  const cutter = new LineCutter(limits, 'error-log');
  const chunks: Cutting['chunks'] = [];
  const cuts: number[] = [];
  let start = 0;
  let pending: OverlongScan | null = null;
  for (const available of writeEnds) {
    for (;;) {
      cutter.begin(start, cuts.find((c) => c > start) ?? Infinity, pending);
      let pos: number = pending?.scanned ?? start;
      let eof = false;
      for (;;) {
        const view = content.subarray(pos, Math.min(available, pos + readBytes));
        if (view.length === 0) {
          eof = true;
          break;
        }
        if (cutter.feed(view, pos) !== -1) break;
        pos += view.length;
      }
      const cut = cutter.cut();
      pending = eof ? cutter.pendingOverlong(pos) : null;
      if (cut.lines.length + cut.overlong.length === 0) break;
      if (eof && !cuts.includes(cut.lineStart)) cuts.push(cut.lineStart);
      chunks.push({ start, end: cut.lineStart, entries: cut.lines.map((l) => [l.offset, l.text]), overlong: cut.overlong.map((o) => [o.offset, o.length]) });
      start = cut.lineStart;
    }
  }
  return { chunks, cuts: cuts.sort((a, b) => a - b) };
}

const ENTRY_START = /^\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d \[[a-z]+\] \d+#\d+: /;

/** The entries of `text` (whole lines), written out independently of the cutter: [offset, text]. */
function entriesOf(text: string): [number, string][] {
  const entries: [number, string][] = [];
  let offset = 0;
  for (const line of text.split('\n').slice(0, -1)) {
    const last = entries.at(-1);
    if (last !== undefined && ENTRY_START.test(last[1]) && !ENTRY_START.test(line)) last[1] += `\n${line}`;
    else entries.push([offset, line]);
    offset += Buffer.byteLength(line) + 1;
  }
  return entries;
}

const LIMITS: CutLimits = { maxLineBytes: 64 * 1024, chunkMaxLines: 20_000, chunkMaxBytes: 4 << 20 };

describe('the cutter, error-log framing', () => {
  const server = 'shop.example.com';

  it('a CR LF inside a message continues its entry, also when a read ends right after it', () => {
    const text = `${head(1)}first\n${injected(2, server)}\n${head(3)}third\n`;
    const content = Buffer.from(text);
    const split = text.indexOf('\r\n') + 2;
    for (const style of ['follower', 'stream'] as const) {
      const { chunks } = cutAll(content, LIMITS, split, style);
      expect(chunks.flatMap((c) => c.entries)).toEqual(entriesOf(text));
      expect(chunks.flatMap((c) => c.entries)[1]![1]).toBe(injected(2, server));
    }
    // Lines that continue no entry stand alone: a file that is no error log keeps one reject per line.
    const orphans = `not an entry\nnor this\n\n${head(4)}x\ny\n`;
    expect(cutAll(Buffer.from(orphans), LIMITS, 4096, 'stream').chunks.flatMap((c) => c.entries)).toEqual([[0, 'not an entry'], [13, 'nor this'], [22, ''], [23, `${head(4)}x\ny`]]);
    const entry = parseErrorLine(injected(2, server));
    expect(entry).toMatchObject({ ok: true, entry: { message: 'open() "/srv/www/a2\r\nSet-Cookie:x=2" failed (2: No such file or directory)', context: { server, host: server } } });
  });

  it('the data ending: after a newline the entry is complete; before a continuation is whole it waits; a new entry completes it', () => {
    const first = `${head(1)}open() "/srv/www/a\r\nSet-Cookie:x=1" failed`;
    const cut = (text: string) => {
      const cutter = new LineCutter(LIMITS, 'error-log');
      cutter.begin(0);
      expect(cutter.feed(Buffer.from(text), 0)).toBe(-1);
      const c = cutter.cut();
      return { entries: c.lines.map((l) => l.text), end: c.lineStart, pending: cutter.pendingOverlong(Buffer.byteLength(text)) };
    };
    expect(cut(`${first}\n`)).toEqual({ entries: [first], end: Buffer.byteLength(first) + 1, pending: null });
    // A continuation still being written: its entry waits, and is read again from its start.
    expect(cut(`${head(1)}open() "/srv/www/a\r\nSet-Coo`)).toEqual({ entries: [], end: 0, pending: null });
    // nginx writes an entry in one write(): data ending right after a newline ends the entry.
    const cr = `${head(1)}open() "/srv/www/a\r`;
    expect(cut(`${cr}\n`)).toEqual({ entries: [cr], end: Buffer.byteLength(cr) + 1, pending: null });
    expect(cut(`${first}\n2026/11/2`)).toEqual({ entries: [], end: 0, pending: null });
    // The next entry has begun: the one before is complete.
    expect(cut(`${first}\n${head(2)}open`)).toEqual({ entries: [first], end: Buffer.byteLength(first) + 1, pending: null });
  });

  it('an entry longer than maxLineBytes is overlong as a whole, whatever its lines', () => {
    const limits = { ...LIMITS, maxLineBytes: 100 };
    const long = `${head(1)}x\r\n${'y'.repeat(60)}\r\n${'z'.repeat(60)}`;
    const text = `${long}\n${head(2)}short\n`;
    for (const style of ['follower', 'stream'] as const) {
      const { chunks } = cutAll(Buffer.from(text), limits, 7, style);
      expect(chunks.flatMap((c) => c.overlong)).toEqual([[0, Buffer.byteLength(long)]]);
      expect(chunks.flatMap((c) => c.entries)).toEqual([[Buffer.byteLength(long) + 1, `${head(2)}short`]]);
    }
  });

  it('a recorded cut ends the entry there, as when it was made', () => {
    const text = `${head(1)}a\nlate continuation\n${head(2)}b\n`;
    const cutAt = Buffer.byteLength(`${head(1)}a\n`);
    for (const style of ['follower', 'stream'] as const) {
      const { chunks } = cutAll(Buffer.from(text), LIMITS, 5, style, [cutAt]);
      expect(chunks.map((c) => [c.start, c.end])).toEqual([[0, cutAt], [cutAt, Buffer.byteLength(text)]]);
      expect(chunks.flatMap((c) => c.entries).map(([, t]) => t)).toEqual([`${head(1)}a`, 'late continuation', `${head(2)}b`]);
    }
  });

  /** A message line: text, sometimes with what looks like the start of an entry, never a whole one. */
  const messageLine = fc.oneof(
    fc.string({ unit: fc.constantFrom('a', ' ', '"', '\r', '\\', 'é', ',', ':'), maxLength: 30 }),
    fc.constantFrom('', '\r', 'Set-Cookie:x=1" failed (2: No such file or directory)', '2026/11/21 08:15:30 [error]', '2026/11/21 08:15:30 [error] x', ' 2026/11/21 08:15:30 [error] 1#1: x'),
  );
  const errorLog = fc.tuple(
    fc.array(messageLine, { maxLength: 2 }),
    fc.array(fc.tuple(fc.constantFrom('error', 'warn', 'debug', 'notice'), fc.array(messageLine, { minLength: 1, maxLength: 4 })), { minLength: 1, maxLength: 25 }),
  ).map(([orphans, entries]) => [...orphans, ...entries.map(([level, lines], n) => head(n, level) + lines.join('\n'))].join('\n') + '\n');

  it('property: any reads, limits and cuts give the same chunks, between entries, holding every entry once', () => {
    fc.assert(
      fc.property(
        errorLog,
        fc.record({ chunkMaxLines: fc.integer({ min: 1, max: 6 }), chunkMaxBytes: fc.integer({ min: 1, max: 600 }), maxLineBytes: fc.constantFrom(64 * 1024, 120) }),
        fc.integer({ min: 1, max: 200 }),
        fc.integer({ min: 1, max: 200 }),
        fc.array(fc.boolean(), { minLength: 30, maxLength: 30 }),
        (text, limits, readA, readB, writes) => {
          const content = Buffer.from(text);
          const reference = cutAll(content, limits, content.length + 1, 'follower');
          const expected = entriesOf(text);
          // Every entry once, in order, each in one chunk; the chunks tile the file.
          const units = reference.chunks.flatMap((c) => [...c.entries.map(([o]) => o), ...c.overlong.map(([o]) => o)]).sort((a, b) => a - b);
          expect(units).toEqual(expected.map(([o]) => o));
          for (const [offset, entryText] of reference.chunks.flatMap((c) => c.entries)) expect(entryText).toBe(expected.find(([o]) => o === offset)![1]);
          expect(reference.chunks.map((c) => c.start)).toEqual([0, ...reference.chunks.slice(0, -1).map((c) => c.end)]);
          expect(reference.chunks.at(-1)?.end).toBe(content.length);
          // Read in other pieces, either way, or replayed with the chunk ends recorded as cuts: the same chunks.
          for (const style of ['follower', 'stream'] as const) {
            expect(cutAll(content, limits, readA, style)).toEqual(reference);
            expect(cutAll(content, limits, readB, style, reference.chunks.map((c) => c.end))).toEqual(reference);
          }
          // Followed while nginx writes it, entry by entry: every entry whole and once; a replay
          // from the start with the cuts recorded on the way cuts the same chunks.
          const ends = expected.map(([o, t]) => o + Buffer.byteLength(t) + 1).filter((_, i) => writes[i % writes.length]);
          const growing = followGrowing(content, limits, readA, [...ends, content.length]);
          expect(growing.chunks.flatMap((c) => c.entries)).toEqual(reference.chunks.flatMap((c) => c.entries));
          expect(growing.chunks.flatMap((c) => c.overlong)).toEqual(reference.chunks.flatMap((c) => c.overlong));
          expect(cutAll(content, limits, readB, 'follower', growing.cuts).chunks).toEqual(growing.chunks);
          expect(cutAll(content, limits, readA, 'stream', growing.cuts).chunks).toEqual(growing.chunks);
        },
      ),
      { numRuns: 300 },
    );
  });
});

// ---- the follower, the import and the worker, into the stores ---------------------------------------

describe('into the stores', () => {
  let t: TestApp;
  let dir: string;
  const workers: IngestWorker[] = [];
  const tails: FileTail[] = [];

  beforeAll(async () => {
    t = await startTestApp();
    dir = path.join(t.dataDir, 'error-logs');
    fs.mkdirSync(dir);
  });
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.close();
    for (const f of tails.splice(0)) await f.close();
  });
  afterAll(async () => {
    await t?.close();
  });

  let seq = 0;
  const newFile = (text = '') => {
    const file = path.join(dir, `error-${++seq}.log`);
    fs.writeFileSync(file, text);
    return file;
  };

  interface Stored {
    id: string;
    message: string;
    context: Record<string, string>;
  }
  const storedOf = (domainId: number) =>
    select<Stored>(t.runtime.clickhouse, 'SELECT toString(id) AS id, message, context FROM error_logs WHERE domain_id = {d:UInt32} ORDER BY timestamp, id', { d: domainId });

  it('the follower joins a continuation read past its 256 KiB read buffer, and one written after a pause', async () => {
    const file = newFile();
    const tail = new FileTail({ path: file, checkpoints: await CheckpointStore.open(checkpointDir(path.join(dir, `cp-${seq}`)), log), log, pollMs: 20, framing: 'error-log' });
    tails.push(tail);
    // Entries up to 256 KiB, the follower's read buffer, exactly where the injected entry's CR LF ends.
    const entry = injected(9999, 'shop.example.com');
    const beforeBreak = Buffer.byteLength(entry.slice(0, entry.indexOf('\r\n') + 2));
    let text = '';
    let n = 0;
    for (; 256 * 1024 - Buffer.byteLength(text) - beforeBreak > 200; n++) text += `${head(n, 'notice')}filler ${n}\n`;
    text += `${head(n, 'notice')}${'x'.repeat(256 * 1024 - Buffer.byteLength(text) - beforeBreak - Buffer.byteLength(head(n, 'notice')) - 1)}\n${entry}\n`;
    expect(Buffer.byteLength(text.slice(0, text.indexOf('\r\n') + 2))).toBe(256 * 1024);
    fs.appendFileSync(file, text);
    const entries: string[] = [];
    const iterator = tail[Symbol.asyncIterator]();
    const take = async (done: () => boolean, next = iterator.next()) => {
      for (let pending = next; ; pending = iterator.next()) {
        const chunk = (await pending).value as LineChunk;
        entries.push(...chunk.lines.map((l) => l.text));
        await tail.ack(chunk);
        if (done()) return;
      }
    };
    await take(() => entries.includes(entry));
    expect(entries).toHaveLength(n + 2);
    expect(entries.filter((e) => !ENTRY_START.test(e))).toEqual([]);
    // A continuation still being written: its entry waits for the newline, then comes whole.
    const late = injected(10_000, 'shop.example.com');
    const readBefore = tail.stats().readBytes;
    fs.appendFileSync(file, late.slice(0, late.indexOf('\r\n') + 6));
    let delivered = false;
    const next = iterator.next();
    void next.then(() => (delivered = true));
    await until(() => tail.stats().readBytes > readBefore + 10, 'the partial entry read');
    const looks = tail.stats().refreshes;
    await until(() => tail.stats().refreshes >= looks + 3, 'three more looks at the file');
    expect(delivered).toBe(false);
    fs.appendFileSync(file, `${late.slice(late.indexOf('\r\n') + 6)}\n`);
    await take(() => entries.includes(late), next);
    expect(entries).toHaveLength(n + 3);
  });

  it('the worker stores each entry once with its whole message, none rejected; syslog keeps a CR LF too', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = newFile();
    const config = parseIngestConfig(
      `sources:\n  - domain: ${domain.name}\n    error: ${JSON.stringify(file)}\nsyslog:\n  udp: 127.0.0.1:0\n  tags:\n    nginx_err: { domain: ${domain.name}, type: error }\n`,
      path.join(dir, 'ingest.yaml'),
    );
    const worker = await startIngest(config, { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, statsIntervalMs: 0, backoff: { initialMs: 20, maxMs: 200 }, pollMs: 20, rotatedIdleMs: 300 });
    workers.push(worker);
    // One write per entry, as nginx writes them.
    for (let n = 0; n < 40; n++) fs.appendFileSync(file, `${n % 4 === 0 ? injected(n, domain.name) : `${head(n, 'warn')}upstream slow ${n}`}\n`);
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve, reject) => socket.send(`<187>Nov 20 08:00:02 web1 nginx_err: ${injected(100, domain.name)}`, worker.syslog!.udpAddress!.port, '127.0.0.1', (err) => (err ? reject(err) : resolve())));
    socket.close();
    await until(async () => (await countRows(t.runtime.clickhouse, 'error_logs', domain.id)) === 41, '41 error entries');
    const stored = await storedOf(domain.id);
    expect(stored.filter((e) => e.message.includes('Set-Cookie')).map((e) => e.message)).toEqual(
      [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 100].map((n) => `open() "/srv/www/a${n}\r\nSet-Cookie:x=${n}" failed (2: No such file or directory)`),
    );
    expect(stored.find((e) => e.message.includes('x=8"'))!.context).toMatchObject({ client: '203.0.113.7', server: domain.name, host: domain.name });
    expect(await countRows(t.runtime.clickhouse, 'ingest_rejects', domain.id)).toBe(0);
    expect(new Set(stored.map((e) => e.id)).size).toBe(41);
  });

  it('the import stores the same entries, plain or gzip, once, whatever its chunk limits', async () => {
    const domain = await newDomain(t.runtime.db);
    const entries = Array.from({ length: 300 }, (_, n) => (n % 3 === 0 ? injected(n, domain.name) : `${head(n, 'notice')}signal ${n}`));
    const text = `${entries.join('\n')}\n`;
    const plain = newFile(text);
    const gz = `${newFile()}.gz`;
    fs.writeFileSync(gz, zlib.gzipSync(text));
    const run = (files: string[], limits: CutLimits) =>
      importFiles(files, { domain: domain.name, type: 'error', format: 'combined', timezone: 'UTC', limits }, { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, signal: new AbortController().signal, retentionDays: 90 });
    const first = await run([plain], { maxLineBytes: 64 * 1024, chunkMaxLines: 7, chunkMaxBytes: 1000 });
    expect(first).toMatchObject({ lines: 300, inserted: 300, rejected: 0 });
    expect((await run([gz, plain], LIMITS)).inserted).toBe(0);
    const stored = await storedOf(domain.id);
    expect(stored.map((e) => e.message)).toEqual(entries.map((e) => (parseErrorLine(e) as { entry: { message: string } }).entry.message));
    expect(stored.filter((e) => e.message.includes('\r\nSet-Cookie'))).toHaveLength(100);
  });
});
