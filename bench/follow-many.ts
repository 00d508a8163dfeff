/**
 * bench/follow-many: issue 17's figure for live ingest at a hosting provider's scale. One
 * `tailhouse ingest` worker follows BENCH_FILES access logs (one domain each) while this process
 * appends nginx `combined` lines to them at BENCH_RATE lines/s in total; measured: the inserts per
 * second into `access_logs`, the lag, the worker's RSS; then every line checked in ClickHouse.
 *
 *   npm run bench:follow                              # 1,000 files, 10,000 lines/s, 60 s, then the peer
 *   BENCH_FILES=50 BENCH_SECONDS=10 npm run bench:follow
 *
 * Server mode, as issue 17 asks: DATABASE_URL a scratch database on a PostgreSQL server,
 * CLICKHOUSE_URL bench/lib/clickhouse-http-server.ts in a process of its own (chDB behind a
 * JavaScript HTTP front, standing in for a ClickHouse server), so the worker holds neither engine.
 * The shim reports each INSERT statement it runs (CLICKHOUSE_HTTP_REPORT_INSERTS): those into
 * access_logs are the inserts counted. For each run:
 *   1. a scratch database and the shim; `tailhouse migrate`; the domains `site-N.example.com`
 *      registered through the domain store's insertDomain (the CLI's `domains add` is one process
 *      per domain, seconds each);
 *   2. an ingest config with one source per domain (`access: DIR/logs/site-N.access.log`, format
 *      combined), all files in one directory as nginx keeps them; `tailhouse ingest --config`
 *      with INGEST_STATS_INTERVAL_MS=250, waited for until a stats line shows every source running;
 *   3. the writer: every BENCH_TICK_MS, the lines due by then (BENCH_RATE × elapsed) are handed to
 *      the files in turn (round-robin, so evenly) and each file's share appended in one write of
 *      whole lines, with `$time_local` the time of writing; for BENCH_SECONDS;
 *   4. at each stats line (every 250 ms): the lag, the age of the oldest line written and not yet
 *      inserted in any file (each source's `inserted` against the times its file's lines were
 *      written); every second the worker's and the shim's RSS; once the writer stops, the wait
 *      until the stats show every line inserted;
 *   5. the worker stopped (SIGTERM); the rows checked in ClickHouse: count, sum of status and of
 *      size per domain against what was written, distinct ids, no rejects.
 * The peer (BENCH_PEER=1, default): the same run with INGEST_BATCH_MS=0, a batch as soon as the
 * previous insert is done: what the shared deadline saves.
 *
 * Figures are printed, never asserted: exit 0 unless the bench itself could not run.
 *
 * Environment (optional):
 *   BENCH_FILES    followed files, one domain each (default 1000)
 *   BENCH_RATE     lines/s written over all files (default 10000)
 *   BENCH_SECONDS  how long the writer writes (default 60)
 *   BENCH_TICK_MS  how often each file gets its share (default 100)
 *   BENCH_PEER     0: skip the INGEST_BATCH_MS=0 run (default 1)
 *   BENCH_PATTERN  1: one source with the path pattern `DIR/logs/{domain}.access.log` and `register`
 *                  instead of a source per file: the worker finds the files and registers the domains
 *   BENCH_TIMELINE_MS  the step of the printed timeline (default 10000)
 *   BENCH_STATS_MS the worker's INGEST_STATS_INTERVAL_MS (default 250; each stats line lists every source)
 *   BENCH_WORKER_NODE_ARGS  node arguments for the worker only (e.g. --cpu-prof --cpu-prof-dir=DIR)
 *   BENCH_DATABASE_URL  the PostgreSQL server (default postgres://postgres@127.0.0.1:5432/test)
 *   BENCH_KEEP     1: keep the temporary directory (logs, config, data) and the scratch databases
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { openClickhouse } from '../core/db/clickhouse.js';
import { openPostgres } from '../core/db/postgres.js';
import { sql } from '../core/db/sql.js';
import type { SourceStats } from '../ingest/pipeline.js';
import { insertDomain } from '../src/domains/store.js';
import { freshDatabase } from '../test/support/app.js';
import { accessLogBlocks, timeLocal } from './lib/access-log.js';
import { median } from './lib/baseline.js';
import { spawnClickhouseHttp } from './lib/clickhouse-http-child.js';
import { benchDirectory, killAll, machineBusyTicks, spawnMeasured, stopMeasured, type Measured, type MeasuredChild } from './lib/measure.js';
import { BIN, ROOT, childEnv, cpuTicks, statusMb } from './lib/serve-child.js';
import { fmt, load, sleep, tail } from './lib/util.js';

const FILES = Number(process.env.BENCH_FILES ?? 1000);
const RATE = Number(process.env.BENCH_RATE ?? 10_000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 60);
const TICK_MS = Number(process.env.BENCH_TICK_MS ?? 100);
const PEER = process.env.BENCH_PEER !== '0';
const PATTERN = process.env.BENCH_PATTERN === '1';
/** The user who owns the domains a pattern's `register` registers. */
const PATTERN_OWNER = 'bench-hosting@example.com';
const KEEP = process.env.BENCH_KEEP === '1';
const DATABASE_URL = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

/** How often the worker reports its counters: the resolution of the lag (each line lists every source). */
const STATS_INTERVAL_MS = Number(process.env.BENCH_STATS_MS ?? 250);
const TIMELINE_MS = Number(process.env.BENCH_TIMELINE_MS ?? 10_000);
/** Extra node arguments for the worker alone, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to see where its time goes. */
const WORKER_NODE_ARGS = (process.env.BENCH_WORKER_NODE_ARGS ?? '').split(/\s+/).filter(Boolean);
/** The first seconds of writing are left out of the steady insert rate (the worker's first batches). */
const WARMUP_MS = Math.min(5_000, (SECONDS * 1000) / 5);
/** Give up waiting for the worker (start, drain) after this long without progress. */
const STALL_MS = 120_000;
/** Generated lines reused in turn (with the time of writing): the shapes of bench/lib/access-log.ts. */
const POOL_LINES = 20_000;

/** How the shared run's INGEST_BATCH_MS is shown: not set, so ingest/worker.ts's default. */
const DEFAULT_BATCH = 'default, 1000';

const ADMIN = { ADMIN_EMAIL: 'bench-admin@example.com', ADMIN_PASSWORD: 'bench-admin-password-1', JWT_SECRET: randomBytes(48).toString('base64url') };
const domainOf = (i: number) => `site-${i + 1}.example.com`;
const fileOf = (logs: string, i: number) => path.join(logs, `${domainOf(i)}.access.log`);

// --- the lines ---------------------------------------------------------------------------------

interface PoolLine {
  /** The line up to and including `[`, and from `]` to its end (newline included). */
  head: string;
  rest: string;
  status: number;
  size: number;
}

/**
 * bench/lib/access-log.ts's lines in nginx `combined` (its trailing `$request_time` cut off),
 * split around `$time_local` so that each is written with the time of writing.
 */
function linePool(): PoolLine[] {
  const pool: PoolLine[] = [];
  for (const block of accessLogBlocks(POOL_LINES)) {
    for (const line of block.split('\n')) {
      if (!line) continue;
      const open = line.indexOf('[');
      const close = line.indexOf(']', open);
      const combined = line.slice(0, line.lastIndexOf(' '));
      const m = /" (\d{3}) (\d+) "/.exec(combined.slice(close));
      if (open < 0 || close < 0 || !m) throw new Error(`unexpected generated line: ${line}`);
      pool.push({ head: combined.slice(0, open + 1), rest: `${combined.slice(close)}\n`, status: Number(m[1]), size: Number(m[2]) });
    }
  }
  return pool;
}

/** What was written to one file: its lines' totals for the check, and when its lines were written. */
interface Written {
  lines: number;
  statuses: number;
  bytes: number;
  /** performance.now() of each write and the file's line count after it. */
  at: number[];
  upTo: number[];
}

/**
 * Appends RATE lines/s over `fds` for SECONDS: every TICK_MS the lines due by then go to the files
 * in turn, each file's share in one write. Returns when done; `written` fills as it goes.
 */
async function writeLines(fds: number[], pool: PoolLine[], written: Written[]): Promise<{ startedAt: number; stoppedAt: number; startedEpoch: number; lines: number; lateTicks: number; worstTickMs: number }> {
  const startedAt = performance.now();
  const startedEpoch = Date.now();
  const total = Math.round(RATE * SECONDS);
  let lines = 0;
  let nextFile = 0;
  let nextLine = 0;
  let lateTicks = 0;
  let worstTickMs = 0;
  let stamp = '';
  let stampSecond = -1;
  for (let tick = 0; lines < total; tick++) {
    const tickAt = performance.now();
    const due = Math.min(total, Math.floor((RATE * (tickAt - startedAt)) / 1000));
    const shares = new Map<number, string>();
    for (; lines < due; lines++) {
      const second = Math.floor(Date.now() / 1000);
      if (second !== stampSecond) {
        stampSecond = second;
        stamp = timeLocal(second * 1000);
      }
      const line = pool[nextLine]!;
      nextLine = (nextLine + 1) % pool.length;
      const f = nextFile;
      nextFile = (nextFile + 1) % fds.length;
      shares.set(f, (shares.get(f) ?? '') + line.head + stamp + line.rest);
      const w = written[f]!;
      w.lines++;
      w.statuses += line.status;
      w.bytes += line.size;
    }
    for (const [f, text] of shares) {
      fs.writeSync(fds[f]!, text);
      const w = written[f]!;
      // The write's start: the lines are there from some moment of this tick's writes on.
      w.at.push(tickAt);
      w.upTo.push(w.lines);
    }
    const spent = performance.now() - tickAt;
    worstTickMs = Math.max(worstTickMs, spent);
    const nextAt = startedAt + (tick + 1) * TICK_MS;
    if (performance.now() > nextAt + TICK_MS) lateTicks++;
    await sleep(Math.max(0, nextAt - performance.now()));
  }
  return { startedAt, stoppedAt: performance.now(), startedEpoch, lines, lateTicks, worstTickMs };
}

/** The age at `now` of file `w`'s oldest line not among its first `inserted`, 0 when all are in. */
function oldestPending(w: Written, inserted: number, now: number): number {
  if (inserted >= w.lines) return 0;
  // The first write after which the file held more than `inserted` lines.
  let lo = 0;
  let hi = w.upTo.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (w.upTo[mid]! > inserted) hi = mid;
    else lo = mid + 1;
  }
  return now - w.at[lo]!;
}

// --- one run -----------------------------------------------------------------------------------

interface InsertReport {
  table: string;
  rows: number;
  ms: number;
  at: number;
}

interface Sample {
  at: number;
  inserted: number;
  /** Max over the files of the oldest pending line's age, ms. */
  lagMs: number;
  running: number;
  retries: number;
  lagBytes: number;
}

interface RunResult {
  label: string;
  batchMs: string;
  writer: Awaited<ReturnType<typeof writeLines>>;
  /** performance.now() of the first stats line showing every line inserted. */
  allInAt: number;
  samples: Sample[];
  inserts: InsertReport[];
  worker: Measured;
  shim: Measured;
  /** VmRSS / RssAnon of the worker and the shim every second, MB, from its start. */
  rss: { at: number; worker: number; workerAnon: number; shim: number }[];
  workerCpuWritingS: number;
  shimCpuWritingS: number;
  /** This process's: the writer, and the stats lines read. */
  benchCpuWritingS: number;
  /** Cores the rest of the machine used while the writer wrote (the worker, the shim and this process excluded). */
  otherCores: number;
  loadBefore: string;
  loadAfter: string;
  statsLineBytes: number;
  setupMs: number;
  startMs: number;
  check: { rows: number; ids: number; domainsWrong: string[]; rejects: number; errors: number; spot: string };
  /** Worker log lines at warn or above, by message, with a count and the first one. */
  warnings: Map<string, { count: number; first: string }>;
  /** Output lines of the worker and the shim that are not JSON log lines or insert reports. */
  otherOutput: string[];
}

async function runOnce(label: string, batchMs: string, dir: string, pool: PoolLine[]): Promise<RunResult> {
  const runDir = path.join(dir, label.replace(/\W+/g, '-'));
  const logs = path.join(runDir, 'logs');
  const dataDir = path.join(runDir, 'data');
  fs.mkdirSync(logs, { recursive: true });
  const loadBefore = load();
  const setupStarted = performance.now();

  const database = await freshDatabase(DATABASE_URL);
  const inserts: InsertReport[] = [];
  const otherOutput: string[] = [];
  const keepOther = (who: string, line: string) => {
    if (line.trim() && otherOutput.length < 40) otherOutput.push(`${who}: ${line.slice(0, 300)}`);
  };
  let clickhouse: { url: string; server: MeasuredChild } | undefined;
  let worker: MeasuredChild | undefined;
  const fds: number[] = [];
  try {
    clickhouse = await spawnClickhouseHttp(path.join(runDir, 'clickhouse'), {
      env: { ...process.env, CLICKHOUSE_HTTP_REPORT_INSERTS: '1' },
      onLine: (line) => {
        if (line.startsWith('INSERT ')) inserts.push(JSON.parse(line.slice(7)) as InsertReport);
        else if (!line.startsWith('URL ')) keepOther('shim', line);
      },
    });
    const env = childEnv(dataDir, ADMIN, { DATABASE_URL: database.url!, CLICKHOUSE_URL: clickhouse.url });
    const migrate = await spawnMeasured(process.execPath, [BIN, 'migrate'], { cwd: ROOT, env }).done;
    if (migrate.code !== 0) throw new Error(`tailhouse migrate failed (exit ${migrate.code}): ${tail(migrate.stderr || migrate.stdout)}`);

    if (PATTERN) {
      // The owner of the domains the worker registers (`migrate` creates no user).
      const owner = await spawnMeasured(process.execPath, [BIN, 'users', 'create', '--email', PATTERN_OWNER, '--password', ADMIN.ADMIN_PASSWORD], { cwd: ROOT, env }).done;
      if (owner.code !== 0) throw new Error(`tailhouse users create failed (exit ${owner.code}): ${tail(owner.stderr || owner.stdout)}`);
    }
    // The domain store's own insert, as `domains add` does it, without a process per domain; with a
    // pattern, the worker registers them.
    const db = await openPostgres(database.url!, { max: 4 });
    try {
      if (!PATTERN) for (let i = 0; i < FILES; i++) await insertDomain(db, { name: domainOf(i), ownerId: null });
    } finally {
      await db.close();
    }
    const written: Written[] = [];
    for (let i = 0; i < FILES; i++) {
      fds.push(fs.openSync(fileOf(logs, i), 'a'));
      written.push({ lines: 0, statuses: 0, bytes: 0, at: [], upTo: [] });
    }
    const config = path.join(runDir, 'ingest.yaml');
    fs.writeFileSync(
      config,
      PATTERN
        ? `sources:\n  - access: ${JSON.stringify(path.join(logs, '{domain}.access.log'))}\n    format: combined\n    register: { owner: ${PATTERN_OWNER} }\n`
        : `sources:\n${Array.from({ length: FILES }, (_, i) => `  - domain: ${domainOf(i)}\n    access: ${JSON.stringify(fileOf(logs, i))}\n    format: combined\n    startAt: beginning\n`).join('')}`,
    );
    const setupMs = performance.now() - setupStarted;

    // The worker, its stats read as they come.
    const samples: Sample[] = [];
    const warnings = new Map<string, { count: number; first: string }>();
    let statsLineBytes = 0;
    const latestSources = new Map<string, SourceStats>();
    let lastProgress = performance.now();
    let lastInserted = -1;
    const fileIndex = (name: string) => Number(/site-(\d+)\.example\.com\.access\.log$/.exec(name)?.[1]) - 1;
    const onWorkerLine = (line: string) => {
      let entry: { msg?: unknown; level?: unknown; sources?: SourceStats[] };
      try {
        entry = JSON.parse(line) as typeof entry;
      } catch {
        keepOther('worker', line);
        return;
      }
      const now = performance.now();
      // Levels are labels (core/log.ts); numbers should pino's default come back.
      if (['warn', 'error', 'fatal'].includes(String(entry.level)) || (typeof entry.level === 'number' && entry.level >= 40)) {
        const key = String(entry.msg);
        const seen = warnings.get(key);
        if (seen) seen.count++;
        else warnings.set(key, { count: 1, first: line.slice(0, 600) });
      }
      if (entry.msg !== 'ingest stats' || !Array.isArray(entry.sources)) return;
      statsLineBytes = Math.max(statsLineBytes, line.length);
      // A line lists the sources that changed since the one before (ingest/worker.ts, statsLineWriter).
      for (const s of entry.sources) latestSources.set(s.name, s);
      let inserted = 0;
      let lagMs = 0;
      let running = 0;
      let retries = 0;
      let lagBytes = 0;
      for (const s of latestSources.values()) {
        inserted += s.inserted;
        retries += s.retries;
        lagBytes += s.lagBytes;
        if (s.state === 'running') running++;
        const w = written[fileIndex(s.name)];
        if (w) lagMs = Math.max(lagMs, oldestPending(w, s.inserted, now));
      }
      if (inserted !== lastInserted) lastProgress = now;
      lastInserted = inserted;
      samples.push({ at: now, inserted, lagMs, running, retries, lagBytes });
    };
    const workerStarted = performance.now();
    worker = spawnMeasured(process.execPath, [...WORKER_NODE_ARGS, BIN, 'ingest', '--config', config], {
      cwd: ROOT,
      // The shared run leaves INGEST_BATCH_MS unset: the default is what is measured.
      env: {
        ...env,
        INGEST_STATS_INTERVAL_MS: String(STATS_INTERVAL_MS),
        ...(batchMs === DEFAULT_BATCH ? {} : { INGEST_BATCH_MS: batchMs }),
      },
      onLine: onWorkerLine,
    });
    let exited = false;
    void worker.done.then(() => (exited = true));
    const w = worker;
    const waitFor = async (what: string, done: () => boolean) => {
      while (!done()) {
        if (exited) throw new Error(`tailhouse ingest exited while waiting for ${what}: ${tail((await w.done).stderr)}`);
        if (performance.now() - lastProgress > STALL_MS) throw new Error(`no progress for ${STALL_MS / 1000} s waiting for ${what} (inserted ${lastInserted})`);
        await sleep(20);
      }
    };
    await waitFor(`a stats line with all ${FILES} sources running`, () => (samples.at(-1)?.running ?? 0) === FILES);
    const startMs = performance.now() - workerStarted;

    // RSS every second, from now to the end.
    const workerPid = worker.child.pid!;
    const shimPid = clickhouse.server.child.pid!;
    const rss: RunResult['rss'] = [];
    const sampleRss = () => rss.push({ at: performance.now(), worker: statusMb(workerPid, 'VmRSS'), workerAnon: statusMb(workerPid, 'RssAnon'), shim: statusMb(shimPid, 'VmRSS') });
    sampleRss();
    const rssTimer = setInterval(sampleRss, 1000);
    try {
      const busy0 = machineBusyTicks();
      const worker0 = cpuTicks(workerPid);
      const shim0 = cpuTicks(shimPid);
      const self0 = process.cpuUsage();
      const writer = await writeLines(fds, pool, written);
      const writingS = (writer.stoppedAt - writer.startedAt) / 1000;
      const workerCpuWritingS = (cpuTicks(workerPid) - worker0) / 100;
      const shimCpuWritingS = (cpuTicks(shimPid) - shim0) / 100;
      const self = process.cpuUsage(self0);
      const benchCpuWritingS = (self.user + self.system) / 1e6;
      const otherCores = Math.max(0, (machineBusyTicks() - busy0) / 100 - workerCpuWritingS - shimCpuWritingS - benchCpuWritingS) / writingS;

      lastProgress = performance.now();
      await waitFor(`${fmt(writer.lines)} inserted lines`, () => (samples.at(-1)?.inserted ?? 0) >= writer.lines);
      const allInAt = samples.at(-1)!.at;
      sampleRss();
      clearInterval(rssTimer);
      const workerM = await stopMeasured(worker);
      const check = await checkRows(clickhouse.url, dataDir, database.url!, written);
      const shim = await stopMeasured(clickhouse.server);
      return {
        label,
        batchMs,
        writer,
        allInAt,
        samples,
        inserts,
        worker: workerM,
        shim,
        rss,
        workerCpuWritingS,
        shimCpuWritingS,
        benchCpuWritingS,
        otherCores,
        loadBefore,
        loadAfter: load(),
        statsLineBytes,
        setupMs,
        startMs,
        check,
        warnings,
        otherOutput,
      };
    } finally {
      clearInterval(rssTimer);
    }
  } finally {
    for (const fd of fds) fs.closeSync(fd);
    killAll();
    if (!KEEP) await database.drop();
    else console.log(`${label}: kept the scratch database ${database.url}`);
  }
}

/** The rows in ClickHouse against what was written: per domain count, sum of status, sum of size. */
async function checkRows(clickhouseUrl: string, dataDir: string, databaseUrl: string, written: Written[]): Promise<RunResult['check']> {
  const db = await openPostgres(databaseUrl, { max: 1 });
  const ids = new Map<number, number>(); // domain id → file index
  try {
    const rows = await db.query<{ id: number; name: string }>(sql`select id, name from domains`);
    for (const r of rows) ids.set(Number(r.id), Number(/^site-(\d+)\./.exec(r.name)?.[1]) - 1);
  } finally {
    await db.close();
  }
  const client = await openClickhouse({ clickhouseUrl, dataDir });
  try {
    const query = async <T>(q: string) => (await client.query({ query: q, format: 'JSONEachRow' })).json<T>();
    const perDomain = await query<{ domain_id: number; rows: string; statuses: string; bytes: string }>(
      'SELECT domain_id, count() AS rows, toString(sum(status_code)) AS statuses, toString(sum(response_size)) AS bytes FROM access_logs GROUP BY domain_id',
    );
    const [totals] = await query<{ rows: string; ids: string }>('SELECT count() AS rows, uniqExact(domain_id, id) AS ids FROM access_logs');
    const [rejects] = await query<{ n: string }>('SELECT count() AS n FROM ingest_rejects');
    const [errors] = await query<{ n: string }>('SELECT count() AS n FROM error_logs');
    const found = new Map(perDomain.map((r) => [ids.get(Number(r.domain_id)) ?? -1, r]));
    const domainsWrong: string[] = [];
    written.forEach((w, i) => {
      const r = found.get(i);
      const got = r ? `${r.rows} rows, status sum ${r.statuses}, size sum ${r.bytes}` : 'no rows';
      if (!r || Number(r.rows) !== w.lines || Number(r.statuses) !== w.statuses || Number(r.bytes) !== w.bytes) domainsWrong.push(`${domainOf(i)}: ${got}, written ${w.lines} / ${w.statuses} / ${w.bytes}`);
    });
    for (const r of perDomain) if (!ids.has(Number(r.domain_id))) domainsWrong.push(`unknown domain id ${r.domain_id}: ${r.rows} rows`);
    const spotIndex = Math.floor(written.length / 2);
    const spot = found.get(spotIndex);
    return {
      rows: Number(totals!.rows),
      ids: Number(totals!.ids),
      domainsWrong,
      rejects: Number(rejects!.n),
      errors: Number(errors!.n),
      spot: `${domainOf(spotIndex)}: written ${written[spotIndex]!.lines} lines (status sum ${written[spotIndex]!.statuses}, size sum ${written[spotIndex]!.bytes}), stored ${spot ? `${spot.rows} (${spot.statuses}, ${spot.bytes})` : 'none'}`,
    };
  } finally {
    await client.close();
  }
}

// --- figures -----------------------------------------------------------------------------------

const quantile = (values: number[], q: number) => {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
};
const seconds = (ms: number) => `${(ms / 1000).toFixed(2)} s`;
const mb = (n: number) => `${fmt(n)} MB`;

interface Figures {
  insertsSteady: number;
  insertsWhole: number;
  insertsPeakSecond: number;
  accessInserts: number;
  rowsPerInsert: number;
  insertMsP50: number;
  insertMsP95: number;
  otherInserts: string;
  lagMax: number;
  lagP95: number;
  lagP50: number;
  drainMs: number;
  rssPeak: number;
  anonPeak: number;
  rssAtStart: number;
  rssAtWriterStart: number;
  rssAtWriterStop: number;
  rssSlopeMbPerMin: number;
  shimPeak: number;
  rate: number;
}

function figuresOf(r: RunResult): Figures {
  const startEpoch = r.writer.startedEpoch;
  const stopEpoch = startEpoch + (r.writer.stoppedAt - r.writer.startedAt);
  const allInEpoch = startEpoch + (r.allInAt - r.writer.startedAt);
  const access = r.inserts.filter((i) => i.table === 'access_logs');
  const steady = access.filter((i) => i.at >= startEpoch + WARMUP_MS && i.at <= stopEpoch);
  const whole = access.filter((i) => i.at >= startEpoch && i.at <= allInEpoch);
  const perSecond = new Map<number, number>();
  for (const i of whole) perSecond.set(Math.floor((i.at - startEpoch) / 1000), (perSecond.get(Math.floor((i.at - startEpoch) / 1000)) ?? 0) + 1);
  const others = new Map<string, number>();
  for (const i of r.inserts) if (i.table !== 'access_logs') others.set(i.table, (others.get(i.table) ?? 0) + 1);
  const during = r.samples.filter((s) => s.at >= r.writer.startedAt && s.at <= r.allInAt);
  const lags = during.map((s) => s.lagMs);
  const writing = r.rss.filter((s) => s.at >= r.writer.startedAt + WARMUP_MS && s.at <= r.writer.stoppedAt);
  // Least squares of VmRSS over time in the steady part: memory growth while the load is constant.
  const slope = (() => {
    if (writing.length < 3) return NaN;
    const mx = writing.reduce((s, p) => s + p.at, 0) / writing.length;
    const my = writing.reduce((s, p) => s + p.worker, 0) / writing.length;
    const num = writing.reduce((s, p) => s + (p.at - mx) * (p.worker - my), 0);
    const den = writing.reduce((s, p) => s + (p.at - mx) ** 2, 0);
    return (num / den) * 60_000;
  })();
  const nearest = (t: number) => r.rss.reduce((best, p) => (Math.abs(p.at - t) < Math.abs(best.at - t) ? p : best), r.rss[0]!).worker;
  return {
    insertsSteady: steady.length / ((stopEpoch - startEpoch - WARMUP_MS) / 1000),
    insertsWhole: whole.length / ((allInEpoch - startEpoch) / 1000),
    insertsPeakSecond: Math.max(0, ...perSecond.values()),
    accessInserts: whole.length,
    rowsPerInsert: median(whole.map((i) => i.rows)),
    insertMsP50: median(whole.map((i) => i.ms)),
    insertMsP95: quantile(whole.map((i) => i.ms), 0.95),
    otherInserts: [...others].map(([t, n]) => `${t} ${n}`).join(', ') || 'none',
    lagMax: Math.max(0, ...lags),
    lagP95: quantile(lags, 0.95),
    lagP50: quantile(lags, 0.5),
    drainMs: r.allInAt - r.writer.stoppedAt,
    rssPeak: r.worker.peakRssMb,
    anonPeak: r.worker.peakAnonMb,
    rssAtStart: r.rss[0]!.worker,
    rssAtWriterStart: nearest(r.writer.startedAt),
    rssAtWriterStop: nearest(r.writer.stoppedAt),
    rssSlopeMbPerMin: slope,
    shimPeak: r.shim.peakRssMb,
    rate: (r.writer.lines / (r.writer.stoppedAt - r.writer.startedAt)) * 1000,
  };
}

const met = (ok: boolean) => (ok ? 'met' : '**not met**');

function printRun(r: RunResult, f: Figures): void {
  console.log(`\n### ${r.label} (INGEST_BATCH_MS=${r.batchMs})`);
  console.log(
    `set-up (scratch database, shim, migrate, ${fmt(FILES)} domains, files, config) ${seconds(r.setupMs)}; worker start to a stats line with every source running ${seconds(r.startMs)}; ` +
      `writer: ${fmt(r.writer.lines)} lines in ${seconds(r.writer.stoppedAt - r.writer.startedAt)} (${fmt(f.rate)} lines/s), ${r.writer.lateTicks} ticks late by more than one tick, slowest tick's writes ${fmt(r.writer.worstTickMs)} ms`,
  );
  console.log(
    `load average before ${r.loadBefore}, after ${r.loadAfter}; other load while writing (the worker, the shim and this process excluded): ${r.otherCores.toFixed(2)} cores; ` +
      `this process (writer, reading the stats) ${r.benchCpuWritingS.toFixed(1)} CPU-s`,
  );
  console.log(
    `worker: ${r.workerCpuWritingS.toFixed(1)} CPU-s while writing (${(r.workerCpuWritingS / ((r.writer.stoppedAt - r.writer.startedAt) / 1000)).toFixed(2)} cores), ${r.worker.cpuS.toFixed(1)} over its life; ` +
      `stats lines up to ${fmt(r.statsLineBytes / 1024)} KiB each; exit ${r.worker.code ?? r.worker.signal} after SIGTERM`,
  );
  console.log(`shim: ${r.shimCpuWritingS.toFixed(1)} CPU-s while writing, peak RSS ${mb(f.shimPeak)}; inserts into access_logs: ${fmt(f.accessInserts)} from the first write to all stored, rows per insert median ${fmt(f.rowsPerInsert)}, engine time p50 ${fmt(f.insertMsP50)} ms p95 ${fmt(f.insertMsP95)} ms; other tables' inserts: ${f.otherInserts}`);
  console.log(
    `worker VmRSS: ${mb(f.rssAtStart)} at the first full stats line, ${mb(f.rssAtWriterStart)} at the writer's start, ${mb(f.rssAtWriterStop)} at its stop; ` +
      `trend over the steady part ${Number.isNaN(f.rssSlopeMbPerMin) ? '–' : `${f.rssSlopeMbPerMin >= 0 ? '+' : ''}${f.rssSlopeMbPerMin.toFixed(1)} MB/min`}; peak anon ${mb(f.anonPeak)}`,
  );
  const c = r.check;
  const wrote = r.writer.lines;
  console.log(
    `check: ${fmt(c.rows)} rows of ${fmt(wrote)} written${c.rows === wrote ? ' (equal)' : ' **(differ)**'}, ${fmt(c.ids)} distinct (domain, id), ${c.domainsWrong.length === 0 ? `all ${fmt(FILES)} domains' count, status sum and size sum equal what was written` : `**${c.domainsWrong.length} domains differ**: ${c.domainsWrong.slice(0, 5).join('; ')}`}; ` +
      `${c.rejects} rejects, ${c.errors} error-log rows; spot check ${c.spot}`,
  );
  const retries = r.samples.at(-1)?.retries ?? 0;
  if (retries > 0) console.log(`**the worker retried writes ${retries} times**`);
  for (const [msg, { count, first }] of r.warnings) console.log(`worker logged ${count}× at warn or above: ${msg}: ${first}`);
  for (const line of r.otherOutput) console.log(`other output: ${line}`);
  // A timeline: every BENCH_TIMELINE_MS of writing and draining, what the stats showed.
  const points: string[] = [];
  for (let t = 0; ; t += TIMELINE_MS) {
    const at = r.writer.startedAt + t;
    if (at > r.allInAt + TIMELINE_MS) break;
    const s = r.samples.filter((x) => x.at <= at).at(-1);
    const rss = r.rss.filter((x) => x.at <= at).at(-1);
    if (s) points.push(`${t / 1000}s: inserted ${fmt(s.inserted)}, lag ${seconds(s.lagMs)}, RSS ${rss ? mb(rss.worker) : '–'}`);
  }
  console.log(`timeline: ${points.join(' | ')}`);
}

function printTable(runs: { r: RunResult; f: Figures }[]): void {
  const [shared, peer] = runs;
  const col = (fn: (f: Figures, r: RunResult) => string) => runs.map(({ r, f }) => fn(f, r));
  const head = runs.map(({ r }) => `${r.label} (INGEST_BATCH_MS=${r.batchMs})`);
  console.log(`\n| figure | ${head.join(' | ')} | target | ${shared!.r.label} |`);
  console.log(`|---|${runs.map(() => '---:|').join('')}---|---|`);
  const row = (name: string, values: string[], target: string, ok: string) => console.log(`| ${name} | ${values.join(' | ')} | ${target} | ${ok} |`);
  const s = shared!.f;
  row(`inserts/s into access_logs, steady (writing, after its first ${WARMUP_MS / 1000} s)`, col((f) => f.insertsSteady.toFixed(2)), '≤ 2', met(s.insertsSteady <= 2));
  row('inserts/s, first write to all stored; busiest second', col((f) => `${f.insertsWhole.toFixed(2)}; ${f.insertsPeakSecond}`), '', '');
  row('lag, max over the run (oldest line not inserted, any file)', col((f) => seconds(f.lagMax)), '≤ 2 s', met(s.lagMax <= 2000));
  row('lag p95 / p50 (stats lines every 250 ms)', col((f) => `${seconds(f.lagP95)} / ${seconds(f.lagP50)}`), '≤ 2 s', met(s.lagP95 <= 2000));
  row("writer's stop → every line inserted", col((f) => seconds(f.drainMs)), '≤ 2 s', met(s.drainMs <= 2000));
  row('worker peak RSS (VmHWM), server mode', col((f) => mb(f.rssPeak)), '≤ 400 MB', met(s.rssPeak <= 400));
  row('worker CPU while writing, cores', col((_, r) => (r.workerCpuWritingS / ((r.writer.stoppedAt - r.writer.startedAt) / 1000)).toFixed(2)), '', '');
  row('shim (chDB "server") peak RSS / CPU-s while writing', col((f, r) => `${mb(f.shimPeak)} / ${r.shimCpuWritingS.toFixed(1)}`), '', '');
  row('rows stored = lines written, per domain', col((_, r) => (r.check.rows === r.writer.lines && r.check.domainsWrong.length === 0 && r.check.ids === r.check.rows ? 'yes' : '**no**')), 'yes', '');
  if (peer) console.log(`\nshared batches against the peer: ${(peer.f.insertsSteady / shared!.f.insertsSteady).toFixed(1)}× fewer inserts per second`);
}

// --- main --------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { dir, cleanUp } = benchDirectory('tailhouse-bench-follow-', KEEP);
  try {
    const pool = linePool();
    const avg = pool.reduce((s, l) => s + l.head.length + l.rest.length + 26, 0) / pool.length;
    console.log(`bench/follow-many: ${fmt(FILES)} files (one domain each, one directory), ${fmt(RATE)} lines/s in total for ${SECONDS} s, a write per file every ${TICK_MS} ms, about ${Math.round(avg)} bytes a line (nginx combined), server mode`);
    console.log(`Node ${process.version}, ${os.cpus().length} CPUs (nproc), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; load average before: ${load()}${KEEP ? `; files in ${dir}` : ''}`);
    const runs: { r: RunResult; f: Figures }[] = [];
    const variants: [string, string][] = [['shared batches', DEFAULT_BATCH], ...(PEER ? [['peer', '0'] as [string, string]] : [])];
    for (const [label, batchMs] of variants) {
      process.stderr.write(`running ${label} (INGEST_BATCH_MS=${batchMs})…\n`);
      try {
        const r = await runOnce(label, batchMs, dir, pool);
        const f = figuresOf(r);
        printRun(r, f);
        runs.push({ r, f });
      } catch (err) {
        console.log(`\nnote: ${label}: failed: ${(err as Error).message}`);
      }
    }
    if (runs.length > 0) printTable(runs);
    console.log(`\nload average after: ${load()}`);
  } finally {
    cleanUp();
  }
}

await main();
