/**
 * bench/export: rows per second and memory of a log export download (CONTRACT §5: 10 million rows
 * must not raise memory), in embedded mode, over real HTTP.
 *
 *   npx tsx bench/export.ts                       # 2,000,000 rows
 *   BENCH_ROWS=10000000 npx tsx bench/export.ts
 *
 * One process: a fresh DATA_DIR, the real runtime and app behind @hono/node-server on 127.0.0.1,
 * one domain whose access_logs get BENCH_ROWS generated rows (INSERT … SELECT FROM numbers(): the
 * ingest path has its own bench), then for each format an export is created with POST and its
 * downloadUrl fetched with fetch(), the body read and thrown away chunk by chunk. While the
 * download runs, this process's RSS, RssAnon (heap and stacks, not libchdb's mapped code) and V8
 * heap are sampled; the figures are the peaks above the values just before the download.
 * Figures are printed, never asserted; rows are counted and must equal BENCH_ROWS.
 *
 * Environment (optional): BENCH_ROWS (default 2000000), BENCH_FORMATS (default csv,json),
 * BENCH_BUFFERED=1 to also show, for contrast, the same query read whole through
 * `@clickhouse/client` over chDB (what the download must not do).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { serve } from '@hono/node-server';
import type { AddressInfo } from 'node:net';
import { createApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { insertDomain } from '../src/domains/store.js';
import { createLogger } from '../src/log.js';
import { openRuntime } from '../src/runtime.js';

const ROWS = Number(process.env.BENCH_ROWS ?? 2_000_000);
const FORMATS = (process.env.BENCH_FORMATS ?? 'csv,json').split(',').map((s) => s.trim()) as ('csv' | 'json')[];
const BUFFERED = process.env.BENCH_BUFFERED === '1';
const MB = 1024 * 1024;
/** Within the retention (LOG_RETENTION_DAYS drops older rows at once): rows every 10 ms up to about now. */
const T0 = Math.floor(Date.now() / 3_600_000) * 3_600_000 - ROWS * 10 - 3_600_000;

function rssAnonMb(): number {
  try {
    const m = /RssAnon:\s+(\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) / 1024 : 0;
  } catch {
    return 0;
  }
}

interface Sample {
  rss: number;
  anon: number;
  heap: number;
}
const sample = (): Sample => {
  const m = process.memoryUsage();
  return { rss: m.rss / MB, anon: rssAnonMb(), heap: m.heapUsed / MB };
};

/** Peaks of the samples taken while `work` runs (every 50 ms and whenever `tick` is called). */
async function measured<T>(work: (tick: () => void) => Promise<T>): Promise<{ result: T; base: Sample; peak: Sample; ms: number }> {
  global.gc?.();
  const base = sample();
  const peak = { ...base };
  const tick = () => {
    const s = sample();
    peak.rss = Math.max(peak.rss, s.rss);
    peak.anon = Math.max(peak.anon, s.anon);
    peak.heap = Math.max(peak.heap, s.heap);
  };
  const timer = setInterval(tick, 50);
  const started = performance.now();
  try {
    const result = await work(tick);
    tick();
    return { result, base, peak, ms: performance.now() - started };
  } finally {
    clearInterval(timer);
  }
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-export-'));
const config = loadConfig({ DATA_DIR: dataDir, ADMIN_EMAIL: 'admin@example.com', ADMIN_PASSWORD: 'bench-password-1', JWT_SECRET: 'bench-secret-that-is-at-least-32-bytes!!', LOG_LEVEL: 'warn', PORT: '0' });
const log = createLogger('warn');
const runtime = await openRuntime(config, log, () => {});
try {
  const app = createApp(runtime);
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
  await new Promise((r) => server.once('listening', r));
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  const domain = await insertDomain(runtime.db, { name: 'bench.example.com', ownerId: null });
  const fillStarted = performance.now();
  for (let from = 0; from < ROWS; from += 1_000_000) {
    const n = Math.min(1_000_000, ROWS - from);
    await runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t0:Int64} + number * 10), 'UTC'),
          concat('10.', toString(number % 256), '.', toString(intDiv(number, 256) % 256), '.', toString(intDiv(number, 65536) % 256)),
          ['GET', 'POST', 'PUT', 'DELETE'][number % 4 + 1], concat('/item/', toString(number), '?q=', toString(number % 7)), 'HTTP/1.1',
          [200, 301, 404, 500][number % 4 + 1], number % 50000, if(number % 3 = 0, '', concat('https://ref.example/', toString(number % 11))),
          if(number % 1000 = 0, '=HYPERLINK("x", "y"), with a comma', 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36'),
          if(number % 5 = 0, NULL, toUInt32(number % 3000))
        FROM numbers({from:UInt64}, {n:UInt64})`,
      query_params: { d: domain.id, t0: T0, from, n },
      clickhouse_settings: { max_partitions_per_insert_block: '0' },
    });
  }
  console.log(`filled ${ROWS} rows in ${((performance.now() - fillStarted) / 1000).toFixed(1)} s`);

  const login = await fetch(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'admin@example.com', password: 'bench-password-1' }) });
  const token = ((await login.json()) as { data: { accessToken: string } }).data.accessToken;

  for (const format of FORMATS) {
    const created = await fetch(`${base}/api/logs/domains/${domain.id}/export`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ type: 'access', format, startDate: new Date(T0).toISOString(), endDate: new Date(T0 + ROWS * 10).toISOString() }),
    });
    if (created.status !== 201) throw new Error(`export: ${created.status} ${await created.text()}`);
    const { downloadUrl } = ((await created.json()) as { data: { downloadUrl: string } }).data;
    const url = `${base}${new URL(downloadUrl).pathname}`;

    const run = await measured(async (tick) => {
      const res = await fetch(url);
      if (res.status !== 200 || !res.body) throw new Error(`download: ${res.status}`);
      let bytes = 0;
      let lines = 0;
      let chunks = 0;
      // RSS at each tenth of the rows: flat when memory does not grow with the export.
      const tenths: number[] = [];
      for await (const chunk of res.body) {
        bytes += chunk.length;
        // Records end with a line feed (CSV: CRLF); values with line breaks are few, none here.
        for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
        if (++chunks % 16 === 0) tick();
        if (lines >= ((tenths.length + 1) * ROWS) / 10 && tenths.length < 9) tenths.push(Math.round(process.memoryUsage().rss / MB));
      }
      return { bytes, rows: format === 'csv' ? lines - 1 : lines, tenths };
    });
    const { rows, bytes } = run.result;
    const s = run.ms / 1000;
    console.log(
      `${format.padEnd(4)} ${rows} rows${rows === ROWS ? '' : ` (EXPECTED ${ROWS})`}, ${(bytes / MB).toFixed(0)} MB in ${s.toFixed(2)} s: ` +
        `${Math.round(rows / s).toLocaleString('en')} rows/s, ${(bytes / MB / s).toFixed(0)} MB/s; ` +
        `peak growth RSS ${(run.peak.rss - run.base.rss).toFixed(1)} MB, RssAnon ${(run.peak.anon - run.base.anon).toFixed(1)} MB, V8 heap ${(run.peak.heap - run.base.heap).toFixed(1)} MB ` +
        `(before: RSS ${run.base.rss.toFixed(0)} MB; RSS at each tenth of the rows: ${run.result.tenths.join(', ')} MB)`,
    );
  }

  if (BUFFERED) {
    const run = await measured(async () => {
      const result = await runtime.clickhouse.query({
        query: 'SELECT * FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY timestamp DESC, id DESC',
        query_params: { d: domain.id },
        format: 'CSVWithNames',
      });
      return (await result.text()).length;
    });
    console.log(
      `buffered @clickhouse/client query (contrast): ${(run.result / MB).toFixed(0)} MB of text; peak growth RSS ${(run.peak.rss - run.base.rss).toFixed(1)} MB, ` +
        `RssAnon ${(run.peak.anon - run.base.anon).toFixed(1)} MB, V8 heap ${(run.peak.heap - run.base.heap).toFixed(1)} MB`,
    );
  }
  await new Promise((r) => server.close(r));
} finally {
  await runtime.close();
  fs.rmSync(dataDir, { recursive: true, force: true });
}
