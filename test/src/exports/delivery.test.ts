/**
 * How exports are delivered (docs/reference/logs.md#exports): the limits per user and server, download
 * slots and slow readers on a real server, the reader's pace, the streaming of a file larger than
 * memory, and the query an export sends.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import v8 from 'node:v8';
import vm from 'node:vm';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { importFiles } from '../../../ingest/import.js';
import { createApp } from '../../../src/app.js';
import { sql } from '../../../core/db/sql.js';
import { downloadsInProgress } from '../../../src/exports/service.js';
import { createExport, EXPORT_LIMITS } from '../../../src/exports/service.js';
import { exportQuery, openExportBody, PIECE_BYTES, SlowReaderError, type ExportBodyEnd } from '../../../src/exports/stream.js';
import { call } from '../../support/app.js';
import { freshUser } from '../../support/auth.js';
import { FORMAT, T0, timeLocal, until } from '../../support/ingest.js';
import { registerDomain } from '../../support/domains.js';
import { admin, app, createOk, domain, exportUrl, fetchDownload, gens, log, owner, parseCsv, t, useExportShop } from './shop.js';

useExportShop();

describe('limits', () => {
  it('holds a user to the hourly number of exports (429 with Retry-After)', async () => {
    const user = await freshUser(app, admin, 'busy');
    const made = await registerDomain(app, admin, { ownerId: user.id, tag: 'busy' });
    const body = { type: 'access', startDate: new Date(T0).toISOString() };
    for (let i = 0; i < EXPORT_LIMITS.perUserPerHour; i++) await createOk(body, user.token, made.id);
    const refused = await call(app, 'POST', exportUrl(made.id), { token: user.token, body });
    expect(refused.status).toBe(429);
    expect(refused.body.success).toBe(false);
    const retry = Number(refused.headers.get('retry-after'));
    expect(retry).toBeGreaterThan(3000);
    expect(retry).toBeLessThanOrEqual(3600);
    // Others are not held back by it.
    await createOk(body);
  });

  it('holds the hourly limit under 40 concurrent creations: exactly the limit succeeds, the rest is 429', async () => {
    const user = await freshUser(app, admin, 'racer');
    const made = await registerDomain(app, admin, { ownerId: user.id, tag: 'racer' });
    const body = { type: 'access', startDate: new Date(T0).toISOString() };
    const answers = await Promise.all(Array.from({ length: 40 }, () => call(app, 'POST', exportUrl(made.id), { token: user.token, body })));
    const statuses = answers.map((a) => a.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(EXPORT_LIMITS.perUserPerHour);
    expect(statuses.filter((s) => s === 429)).toHaveLength(40 - EXPORT_LIMITS.perUserPerHour);
    const [stored] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from exports where user_id = ${user.id}`);
    expect(stored!.n).toBe(EXPORT_LIMITS.perUserPerHour);
    // Each created export is in the creator's activity, and no refused one is.
    const [recorded] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from activity where user_id = ${user.id} and action = 'export.create'`);
    expect(recorded!.n).toBe(EXPORT_LIMITS.perUserPerHour);
  });

  it('refuses an export above the row limit with a 422 naming the range', async () => {
    const principal = { user: { id: owner.id, role: 'user' }, permissions: { can: () => true } } as never;
    const range = { type: 'access' as const, format: 'csv' as const, startDate: new Date(T0), filters: {}, selection: { type: 'access' as const, filters: {} } };
    const limits = { ...EXPORT_LIMITS, maxRows: 10 };
    await expect(createExport(t.runtime, principal, domain.id, range, { ipAddress: '', userAgent: '' }, { limits })).rejects.toMatchObject({
      status: 422,
      details: { startDate: expect.stringContaining('more than the limit of 10') },
    });
  });
});

// ---------------------------------------------------------------------------------------------
// Download slots and slow readers, over a real listening server and raw sockets
// ---------------------------------------------------------------------------------------------

interface RawDownload {
  /** The response's status line and headers, once they arrived. */
  head: Promise<{ status: number; headers: Record<string, string>; text: string }>;
  /** Reads everything left at full speed until the server closes the connection; the raw bytes after the head. */
  drain(): Promise<Buffer>;
  destroy(): void;
}

/**
 * A GET over a raw socket that reads the response head, then takes `bytesPerTick` every
 * `tickMs` (0: nothing more): a client on a slow link, or one that stopped reading. The kernel's
 * socket buffers fill first; after that the server can hand on only what this reader takes.
 */
function rawDownload(port: number, pathname: string, pace: { bytesPerTick: number; tickMs?: number }): RawDownload {
  const socket = net.connect(port, '127.0.0.1');
  socket.on('error', () => {});
  socket.write(`GET ${pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`);
  let buffered = Buffer.alloc(0);
  let headEnd = -1;
  let closed = false;
  const closing = new Promise<void>((resolve) => socket.once('close', () => ((closed = true), resolve())));
  let resolveHead!: (head: Awaited<RawDownload['head']>) => void;
  const head = new Promise<Awaited<RawDownload['head']>>((resolve) => (resolveHead = resolve));
  const take = (max: number) => {
    const size = Math.min(max, socket.readableLength);
    const chunk = size > 0 ? (socket.read(size) as Buffer | null) : (socket.read(0), null);
    if (chunk) buffered = Buffer.concat([buffered, chunk]);
  };
  const timer = setInterval(() => {
    if (headEnd < 0) {
      take(Infinity);
      headEnd = buffered.indexOf('\r\n\r\n');
      if (headEnd < 0) return;
      const text = buffered.subarray(0, headEnd).toString('latin1');
      const [statusLine, ...lines] = text.split('\r\n');
      const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]));
      resolveHead({ status: Number(statusLine!.split(' ')[1]), headers, text: buffered.subarray(headEnd + 4).toString() });
    } else if (pace.bytesPerTick > 0) take(pace.bytesPerTick);
  }, pace.tickMs ?? 20);
  return {
    head,
    async drain() {
      clearInterval(timer);
      socket.on('data', (chunk: Buffer) => (buffered = Buffer.concat([buffered, chunk])));
      if (!closed) await closing;
      return buffered.subarray(headEnd + 4);
    },
    destroy() {
      clearInterval(timer);
      socket.destroy();
    },
  };
}

/** The last chunk of a chunked HTTP body: a body cut short has none. */
const LAST_CHUNK = '0\r\n\r\n';

describe('download slots and slow readers (real server)', () => {
  const ROWS = 100_000;
  let bigDomain: { id: number; name: string };
  let bigOwner: { id: number; token: string; email: string };
  const servers: ServerType[] = [];

  async function listen(options: Parameters<typeof createApp>[1] = {}): Promise<number> {
    const server = await new Promise<ServerType>((resolve) => {
      const s = serve({ fetch: createApp(t.runtime, options).fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s));
    });
    servers.push(server);
    return (server.address() as net.AddressInfo).port;
  }

  const pathOf = (downloadUrl: string) => new URL(downloadUrl).pathname;

  beforeAll(async () => {
    bigOwner = await freshUser(app, admin, 'big-reader');
    const made = await registerDomain(app, admin, { ownerId: bigOwner.id, tag: 'readers' });
    bigDomain = made;
    // About 30 MB of CSV: far more than the sockets' kernel buffers hold, so a slow reader holds the server back.
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t:Int64} + number * 10), 'UTC'), '10.7.0.1', 'GET',
          concat('/big/', toString(number), '/', repeat('x', 200)), 'HTTP/1.1', 200, 1, '', 'agent', 1
        FROM numbers({n:UInt32})`,
      query_params: { d: bigDomain.id, t: T0, n: ROWS },
    });
  });

  afterAll(async () => {
    for (const server of servers) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ('closeAllConnections' in server) server.closeAllConnections();
      });
    }
  });

  it('gives one user at most 2 of the 4 slots: a third download of theirs is 429, others still download; a reader that goes away frees its slot', async () => {
    const port = await listen();
    const start = { type: 'access', startDate: new Date(T0).toISOString() };
    const ofOwner = pathOf((await createOk(start, bigOwner.token, bigDomain.id)).downloadUrl);
    const ofAdmin = pathOf((await createOk(start, admin, bigDomain.id)).downloadUrl);
    const ofOther = pathOf((await createOk(start)).downloadUrl);
    const held: RawDownload[] = [];
    try {
      // The owner's two readers stop reading; their downloads keep their slots.
      for (let i = 0; i < EXPORT_LIMITS.concurrentDownloadsPerUser; i++) {
        const r = rawDownload(port, ofOwner, { bytesPerTick: 0 });
        held.push(r);
        expect((await r.head).status).toBe(200);
      }
      const third = rawDownload(port, ofOwner, { bytesPerTick: 1 << 20 });
      held.push(third);
      const refused = await third.head;
      expect(refused.status).toBe(429);
      expect(Number(refused.headers['retry-after'])).toBeGreaterThan(0);
      expect(JSON.parse(refused.text)).toEqual({ success: false, error: expect.stringContaining(`at most ${EXPORT_LIMITS.concurrentDownloadsPerUser} at once`) });

      // Another user takes the process's remaining slots.
      for (let i = EXPORT_LIMITS.concurrentDownloadsPerUser; i < EXPORT_LIMITS.concurrentDownloads; i++) {
        const r = rawDownload(port, ofAdmin, { bytesPerTick: 0 });
        held.push(r);
        expect((await r.head).status).toBe(200);
      }
      expect(downloadsInProgress()).toBe(EXPORT_LIMITS.concurrentDownloads);
      const full = await fetch(`http://127.0.0.1:${port}${ofOther}`);
      expect(full.status).toBe(429);
      expect((await full.json()).error).toBe('Too many downloads in progress; try again shortly');

      // One of the owner's readers goes away: its slot is free at once, for anyone.
      held[0]!.destroy();
      await until(() => downloadsInProgress() === EXPORT_LIMITS.concurrentDownloads - 1, 'the slot of the reader that went away');
      const res = await fetch(`http://127.0.0.1:${port}${ofOther}`);
      expect(res.status).toBe(200);
      expect(parseCsv(await res.text())).toHaveLength(gens.length + 1);
    } finally {
      for (const r of held) r.destroy();
      await until(() => downloadsInProgress() === 0, 'every download to end');
    }
  });

  it('cuts a reader that trickles below the minimum pace, and one that stopped, long before 120 s; a reader at full speed gets the whole file', async () => {
    const pace = { minBytesPerS: 256 * 1024, windowMs: 400 };
    const port = await listen({ exportLimits: { ...EXPORT_LIMITS, readerPace: pace } });
    const link = pathOf((await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, bigOwner.token, bigDomain.id)).downloadUrl);

    // Full speed first, on the same pace: every row arrives.
    const whole = await fetch(`http://127.0.0.1:${port}${link}`);
    expect(whole.status).toBe(200);
    const size = (await whole.arrayBuffer()).byteLength;
    expect(size).toBeGreaterThan(25 * 1024 * 1024);
    expect(downloadsInProgress()).toBe(0);

    // 4 KiB every 50 ms is 80 KiB/s: never silent, but below 256 KiB/s.
    const trickle = rawDownload(port, link, { bytesPerTick: 4096, tickMs: 50 });
    const stopped = rawDownload(port, link, { bytesPerTick: 0 });
    try {
      expect((await trickle.head).status).toBe(200);
      expect((await stopped.head).status).toBe(200);
      await until(() => downloadsInProgress() === 0, 'both slow readers to be cut', 20_000);
      // Each connection was closed in the middle of the file.
      for (const r of [trickle, stopped]) {
        const body = await r.drain();
        expect(body.length).toBeLessThan(size);
        expect(body.subarray(-LAST_CHUNK.length).toString()).not.toBe(LAST_CHUNK);
      }
    } finally {
      trickle.destroy();
      stopped.destroy();
    }
  });
});

describe('the reader\'s pace', () => {
  const pace = { minBytesPerS: 1_000_000, windowMs: 60 };
  /** A source whose every chunk takes `delayMs` to come, like a slow query. */
  const slowSource = (chunks: Uint8Array[], delayMs: number) =>
    async function* () {
      for (const chunk of chunks) {
        await new Promise((resolve) => setTimeout(resolve, delayMs));
        yield chunk;
      }
    };

  it('does not count the time spent waiting for the query against the reader', async () => {
    const ends: ExportBodyEnd[] = [];
    // 10 bytes every 150 ms is far below the pace, but the reader takes each at once.
    const body = await openExportBody(slowSource(Array.from({ length: 5 }, () => new Uint8Array(10).fill(65)), 150), 'access', 'json', (end) => ends.push(end), pace);
    expect(await new Response(body).text()).toBe('A'.repeat(50));
    expect(ends).toEqual([{ bytes: 50 }]);
  });

  it('hands a large chunk on in pieces of at most PIECE_BYTES, and cuts the reader that stops taking them', async () => {
    const chunk = new Uint8Array(3 * PIECE_BYTES + 100).map((_, i) => i % 251);
    const ends: ExportBodyEnd[] = [];
    const body = await openExportBody(slowSource([chunk], 0), 'access', 'json', (end) => ends.push(end), pace);
    const reader = body.getReader();
    const pieces: Uint8Array[] = [];
    for (let i = 0; i < 2; i++) pieces.push((await reader.read()).value!);
    expect(pieces.map((p) => p.length)).toEqual([PIECE_BYTES, PIECE_BYTES]);
    expect(Buffer.concat(pieces)).toEqual(Buffer.from(chunk.subarray(0, 2 * PIECE_BYTES)));
    // The reader stops: a window of its time passes without its bytes.
    await until(() => ends.length === 1, 'the reader to be cut');
    expect(ends[0]!.bytes).toBe(2 * PIECE_BYTES);
    expect(ends[0]!.error).toBeInstanceOf(SlowReaderError);
    await expect(reader.read()).rejects.toBeInstanceOf(SlowReaderError);
  });
});

describe('streaming', () => {
  it('exports a million rows with the V8 heap and buffers flat (RSS printed)', { timeout: 180_000 }, async () => {
    const ROWS = 1_000_000;
    const made = await registerDomain(app, admin, { ownerId: owner.id, tag: 'big' });
    const d = made;
    const file = path.join(t.dataDir, 'big.log');
    fs.writeFileSync(file, '');
    // 20 lines a second: a million within the last day (T0 is a day ago; the export ends now).
    for (let from = 0; from < ROWS; from += 100_000) {
      let text = '';
      let time = '';
      for (let n = from; n < from + 100_000; n++) {
        if (n % 20 === 0) time = timeLocal(T0 + (n / 20) * 1000);
        text += `10.2.${(n >> 8) & 255}.${n & 255} - - [${time}] "GET /big/${n} HTTP/1.1" 200 ${n % 5000} "-" "agent/${n % 3}" 0.${String(n % 1000).padStart(3, '0')}\n`;
      }
      fs.appendFileSync(file, text);
    }
    const summary = await importFiles(
      [file],
      { domain: d.name, type: 'access', format: FORMAT, timezone: 'UTC' },
      { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, signal: new AbortController().signal, retentionDays: 90 },
    );
    expect(summary.inserted).toBe(ROWS);
    fs.rmSync(file);

    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, owner.token, d.id);
    // Live memory only: a full collection before each sample, so garbage not yet collected (which
    // depends on the collector's timing) cannot make the figure flake.
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc') as () => void;
    const mem = async () => {
      gc();
      // Buffers' memory is released by a sweeper running beside the collector: give it a turn.
      await new Promise((r) => setImmediate(r));
      const m = process.memoryUsage();
      return { rss: m.rss, js: m.heapUsed + m.arrayBuffers };
    };
    const base = await mem();
    const peak = { ...base };
    const started = performance.now();
    const res = await fetchDownload(downloadUrl);
    expect(res.status).toBe(200);
    let bytes = 0;
    let records = 0;
    // Sampled every 16 MB (a full collection each time), whatever the size of the pieces.
    let sampledAt = 0;
    for await (const chunk of res.body!) {
      bytes += chunk.length;
      for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) records++;
      if (bytes - sampledAt >= 16 * 1024 * 1024) {
        sampledAt = bytes;
        const m = await mem();
        peak.rss = Math.max(peak.rss, m.rss);
        peak.js = Math.max(peak.js, m.js);
      }
    }
    const seconds = (performance.now() - started) / 1000;
    const MB = 1024 * 1024;
    console.log(
      `export of ${ROWS} rows: ${(bytes / MB).toFixed(0)} MB in ${seconds.toFixed(2)} s (${Math.round(ROWS / seconds)} rows/s); ` +
        `peak growth: live V8 heap + buffers ${((peak.js - base.js) / MB).toFixed(1)} MB, RSS ${((peak.rss - base.rss) / MB).toFixed(1)} MB`,
    );
    expect(records).toBe(ROWS + 1);
    // The file is about 120 MB: holding it, or any sizeable part, in JavaScript would show here.
    // Streaming keeps a few chunks (about 1 MB each) alive; measured 2–19 MB, on a busy machine too.
    expect(peak.js - base.js).toBeLessThan(48 * MB);
    expect(bytes).toBeGreaterThan(100 * MB);
  });
});

describe('the query', () => {
  it('takes filter values only as bound parameters', () => {
    const hostile = "x'; DROP TABLE access_logs; --\\";
    for (const format of ['csv', 'json'] as const) {
      const q = exportQuery(7, { type: 'access', filters: { url: hostile } }, { startDate: new Date(T0), endDate: new Date() }, format);
      expect(q.sql).not.toContain('DROP');
      expect(Object.values(q.params)).toContain(hostile);
    }
  });
});
