/**
 * bench/export: rows per second and memory of a log export download (constant memory whatever the
 * number of rows, docs/reference/logs.md#exports; the issue: ≥ 300,000 rows/s, peak RSS growth ≤ 100 MB), in embedded
 * mode, over real HTTP, measured on the serving process.
 *
 *   npx tsx bench/export.ts                                  # 1,000,000 rows over 31 days
 *   BENCH_ROWS=10000000 npx tsx bench/export.ts              # 10,000,000 rows over 31 days
 *   BENCH_DAYS=0.1 npx tsx bench/export.ts                   # all in a few hours (one partition)
 *
 * 1. Fill, in this process: a fresh DATA_DIR opened with the real runtime (migrations, first
 *    administrator), one domain, and BENCH_ROWS generated access rows whose times run evenly over
 *    the BENCH_DAYS days ending an hour ago (daily partitions: 31 days are 31 or 32 of them),
 *    inserted in time order in batches of BENCH_BATCH rows, as the ingest writes them (a batch
 *    makes one part per day it covers, which the engine then merges). INSERT … SELECT FROM
 *    numbers(): the ingest path has its own bench. The runtime is closed after.
 * 2. Per format, a fresh `node bin/tailhouse.js serve` child on the same DATA_DIR (so that every
 *    format's first download is the first of a process: the engine keeps memory it took for the
 *    first one), waited for until idle (merges done). Then BENCH_REPEAT exports of all the rows,
 *    one after the other: POST …/export, and the download GET with node:http, timed from the
 *    request to the last byte, rows counted by line feeds. Meanwhile the server's VmRSS and
 *    RssAnon are sampled from /proc/PID/status every 10 ms, and its VmHWM is reset through
 *    /proc/PID/clear_refs just before the download and read after. Growth = peak less the RSS
 *    just before.
 *
 * Figures are printed, never asserted; the rows are counted and must equal BENCH_ROWS (a mismatch
 * is printed). Exit status 0 unless the bench itself could not run.
 *
 * Environment (optional): BENCH_ROWS (default 1000000), BENCH_DAYS (default 31), BENCH_BATCH
 * (rows per insert, default 100000), BENCH_FORMATS (default csv,json), BENCH_REPEAT (downloads
 * per format and server, default 2), BENCH_KEEP=1 (keep the DATA_DIR, printed).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../core/config.js';
import { insertDomain } from '../src/domains/store.js';
import { createLogger } from '../core/log.js';
import { openRuntime } from '../src/runtime.js';
import { api, childEnv, download, login, startServer, statusMb, stopServer, waitIdle } from './lib/serve-child.js';
import { fmt, load } from './lib/util.js';
import { DAY_MS } from '../core/durations.js';

const positive = (name: string, fallback: number) => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isFinite(v) || v <= 0) throw new Error(`${name} must be a positive number`);
  return v;
};
const ROWS = Math.round(positive('BENCH_ROWS', 1_000_000));
const DAYS = positive('BENCH_DAYS', 31);
const BATCH = Math.round(positive('BENCH_BATCH', 100_000));
const REPEAT = Math.round(positive('BENCH_REPEAT', 2));
const FORMATS = (process.env.BENCH_FORMATS ?? 'csv,json').split(',').map((s) => s.trim()).filter(Boolean) as ('csv' | 'json')[];
for (const f of FORMATS) if (f !== 'csv' && f !== 'json') throw new Error(`BENCH_FORMATS: unknown format ${f}`);
const KEEP = process.env.BENCH_KEEP === '1';

const ADMIN = { ADMIN_EMAIL: 'admin@example.com', ADMIN_PASSWORD: 'bench-password-1', JWT_SECRET: 'bench-secret-that-is-at-least-32-bytes!!' };
const MB = 1024 * 1024;
/** The rows' times: row i at T0 + ⌊i × SPAN / ROWS⌋ ms, the last an hour before the bench started (within any retention). */
const SPAN = Math.round(DAYS * DAY_MS);
const T_END = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 3_600_000;
const T0 = T_END - SPAN;

// --- 1. the data ---------------------------------------------------------------------------------

async function fill(dataDir: string): Promise<number> {
  const config = loadConfig({ DATA_DIR: dataDir, ...ADMIN, LOG_LEVEL: 'warn', PORT: '0' });
  const runtime = await openRuntime(config, createLogger('warn'), () => {});
  try {
    const domain = await insertDomain(runtime.db, { name: 'bench.example.com', ownerId: null });
    const started = performance.now();
    for (let from = 0; from < ROWS; from += BATCH) {
      await runtime.clickhouse.command({
        query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
          SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t0:Int64} + intDiv(number * {span:UInt64}, {rows:UInt64})), 'UTC'),
            concat('10.', toString(number % 256), '.', toString(intDiv(number, 256) % 256), '.', toString(intDiv(number, 65536) % 256)),
            ['GET', 'POST', 'PUT', 'DELETE'][number % 4 + 1], concat('/item/', toString(number), '?q=', toString(number % 7)), 'HTTP/1.1',
            [200, 301, 404, 500][number % 4 + 1], number % 50000, if(number % 3 = 0, '', concat('https://ref.example/', toString(number % 11))),
            if(number % 1000 = 0, '=HYPERLINK("x", "y"), with a comma', 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36'),
            if(number % 5 = 0, NULL, toUInt32(number % 3000))
          FROM numbers({from:UInt64}, {n:UInt64})`,
        query_params: { d: domain.id, t0: T0, span: SPAN, rows: ROWS, from, n: Math.min(BATCH, ROWS - from) },
        clickhouse_settings: { max_partitions_per_insert_block: '0' },
      });
    }
    const result = await runtime.clickhouse.query({
      query: "SELECT count() AS parts, uniqExact(partition) AS partitions FROM system.parts WHERE database = currentDatabase() AND table = 'access_logs' AND active",
      format: 'JSONEachRow',
    });
    const [parts] = await result.json<{ parts: number; partitions: number }>();
    console.log(
      `filled ${fmt(ROWS)} rows over ${DAYS} days (${new Date(T0).toISOString()} to ${new Date(T_END).toISOString()}) in ${((performance.now() - started) / 1000).toFixed(1)} s, ` +
        `batches of ${fmt(BATCH)}: ${parts?.parts} parts in ${parts?.partitions} partitions right after the inserts`,
    );
    return domain.id;
  } finally {
    await runtime.close();
  }
}

// --- 2. the server -------------------------------------------------------------------------------

/**
 * A first server on the new data, run until idle and stopped: what a server does once with new
 * rows (the engine merges the inserted parts, background work catches up) must not be counted in
 * the first download's growth, nor lift the RSS it starts from.
 */
async function settle(dataDir: string): Promise<void> {
  const s = await startServer(childEnv(dataDir, ADMIN));
  try {
    const { waitedMs } = await waitIdle(s.pid, 300_000);
    console.log(`settled: a first server idle after ${(waitedMs / 1000).toFixed(1)} s, RSS ${fmt(statusMb(s.pid, 'VmRSS'))} MB, peak ${fmt(statusMb(s.pid, 'VmHWM'))} MB`);
  } finally {
    await stopServer(s);
  }
}

async function exportsOf(dataDir: string, domainId: number, format: 'csv' | 'json'): Promise<void> {
  const s = await startServer(childEnv(dataDir, ADMIN));
  try {
    const { waitedMs } = await waitIdle(s.pid, 180_000);
    const token = await login(s.base, ADMIN);
    console.log(`${format}: serve pid ${s.pid} idle after ${(waitedMs / 1000).toFixed(1)} s, RSS ${fmt(statusMb(s.pid, 'VmRSS'))} MB, load average ${load()}`);
    for (let nth = 1; nth <= REPEAT; nth++) {
      const body = { type: 'access', format, startDate: new Date(T0).toISOString(), endDate: new Date(T_END).toISOString() };
      const created = await api(s.base, 'POST', `/api/logs/domains/${domainId}/export`, token, body);
      if (created.status !== 201) throw new Error(`export: ${created.status} ${JSON.stringify(created.json)}`);
      const url = `${s.base}${new URL(created.json.data.downloadUrl as string).pathname}`;
      const r = await download(url, format, s.pid, 600_000);
      const sec = r.ms / 1000;
      const growth = Math.max(r.rssPeakSampledMb, Number.isNaN(r.hwmMb) ? 0 : r.hwmMb) - r.rssBeforeMb;
      console.log(
        `  ${format.padEnd(4)} #${nth}: ${fmt(r.rows)} rows${r.rows === ROWS ? '' : ` (EXPECTED ${fmt(ROWS)})`}, ${fmt(r.bytes / MB)} MB in ${sec.toFixed(2)} s: ` +
          `**${fmt(r.rows / sec)} rows/s**, first byte ${fmt(r.firstByteMs)} ms; server RSS ${fmt(r.rssBeforeMb)} MB before, ` +
          `peak growth **${growth.toFixed(1)} MB** (sampled ${(r.rssPeakSampledMb - r.rssBeforeMb).toFixed(1)}, VmHWM ${(r.hwmMb - r.rssBeforeMb).toFixed(1)}), ` +
          `RssAnon ${(r.anonPeakMb - r.anonBeforeMb).toFixed(1)} MB, ${fmt(r.rssAfterMb)} MB after; load average ${load()}`,
      );
    }
  } catch (err) {
    console.error(`server output: ${s.output()}`);
    throw err;
  } finally {
    await stopServer(s);
  }
}

const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-export-'));
try {
  const domainId = await fill(dataDir);
  await settle(dataDir);
  for (const format of FORMATS) await exportsOf(dataDir, domainId, format);
} finally {
  if (KEEP) console.log(`DATA_DIR kept: ${dataDir}`);
  else fs.rmSync(dataDir, { recursive: true, force: true });
}
