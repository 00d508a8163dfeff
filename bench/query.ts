/**
 * bench/query: the logs API's response times at the issue's scale, in embedded mode on this
 * machine, side by side with GoAccess re-reading the same log.
 *
 *   npm run bench:query                        # 10,000,000 rows for one domain + 9 × 1,000,000
 *   BENCH_ROWS=1000000 npm run bench:query     # a quick run: 1,000,000 + 9 × 100,000
 *
 * What it does, all through the real programs:
 *   1. writes nginx access logs (bench/lib/access-log.ts's generator, with each line's $time_local
 *      rewritten so that the times run evenly over the 30 days ending at the moment of writing):
 *      BENCH_ROWS lines for the main domain, with 10 lines whose URL holds a rare marker spread over
 *      the 30 days, and BENCH_ROWS / 10 lines for each of 9 other domains (the 10:1 shape);
 *   2. on a fresh DATA_DIR: `node bin/tailhouse.js domains add NAME` for the 10 domains, then
 *      `node bin/tailhouse.js import FILE --domain NAME --format '<log_format>'` for each file, one
 *      after another (the embedded stores belong to one process at a time);
 *   3. `goaccess FILE -o report.json` on the main domain's file, the options of bench/ingest.ts;
 *   4. `node bin/tailhouse.js serve` as a child on a free port of 127.0.0.1, waits for /readyz and
 *      for the server to go idle (chDB merges the imported parts when it opens them, and the stats
 *      rollup builder catches up with the import), runs `sync` (the load's gigabytes of dirty pages
 *      are written back before the timed calls, not beside them) and waits for idle again, logs the
 *      admin in, and times over HTTP (fetch, keep-alive) from request to the body's last byte, the
 *      median of BENCH_RUNS calls after one untimed warm-up call each:
 *        GET  /api/domains/:id (no ClickHouse: the floor of HTTP, authentication and PGlite)
 *        GET  …/stats?period=30d and 24h
 *        GET  …/access?statusCode=5xx (page 1 and page 1,000 at the default limit of 20), page 1,000
 *             without a filter, and page 1,000 at limit=1000 (rows 999,001–1,000,000)
 *        POST …/search {"query": <the rare marker>, "startDate": 30 days ago}, a common word, and
 *             the rare marker in `userAgent` alone and in all five fields
 *   5. an export of 1,000,000 rows (the newest: startDate is the timestamp of the 1,000,000th row,
 *      from the limit=1000 listing): POST …/export, then the download GET timed from request to
 *      last byte, rows counted, while the server's RSS is sampled from /proc/PID/status every
 *      10 ms (and its VmHWM, reset through /proc/PID/clear_refs just before, read after); per
 *      format BENCH_EXPORT_REPEAT exports one after the other (the engine keeps memory it took
 *      for the first one, so the first shows the growth a server sees, the next what it costs again).
 *   6. the ratio "dashboard refresh vs re-running GoAccess": GoAccess's wall time over the median
 *      of GET stats?period=30d.
 *
 * Figures are printed with the issue's targets and met / not met; nothing is asserted, the exit
 * status is 0 unless the bench itself could not run.
 *
 * Environment (optional):
 *   BENCH_ROWS     rows of the main domain (default 10000000); the 9 others get a tenth each
 *   BENCH_RUNS     timed calls per figure (default 15), after one warm-up call
 *   BENCH_EXPORT_FORMATS  comma list of csv, json (default csv,json)
 *   BENCH_EXPORT_REPEAT   exports per format, one after the other (default 2: the first is the cold one)
 *   BENCH_GOACCESS 0: skip GoAccess
 *   BENCH_KEEP     1: keep the temporary directory (logs, DATA_DIR, GoAccess report)
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { killAll, spawnMeasured, type Measured } from './lib/measure.js';
import { BENCH_ADMIN, COMMON, DAY_MS, loadQueryData, MAIN_DOMAIN, NEEDLE, NEEDLES, OTHER_DOMAINS, writeQueryLogs } from './lib/query-data.js';
import {
  api as apiOf,
  childEnv,
  download,
  killServer,
  login as loginOf,
  ROOT,
  startServer,
  statusMb,
  stopServer,
  waitIdle,
  withOtherLoad,
  type Download,
  type Server,
} from './lib/serve-child.js';
import { fmt, load, tail } from './lib/util.js';

/** A /proc/meminfo field in MB. */
const meminfoMb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync('/proc/meminfo', 'utf8'))?.[1] ?? 0) / 1024;

const int = (name: string, fallback: number) => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name} must be a positive whole number`);
  return v;
};
const ROWS = int('BENCH_ROWS', 10_000_000);
const OTHER_ROWS = Math.max(1, Math.round(ROWS / 10));
const RUNS = int('BENCH_RUNS', 15);
const EXPORT_ROWS = Math.min(1_000_000, ROWS);
/** Downloads per format, each of a new export: the first one in a process costs the engine more memory than the next. */
const EXPORT_REPEAT = int('BENCH_EXPORT_REPEAT', 2);
const EXPORT_FORMATS = (process.env.BENCH_EXPORT_FORMATS ?? 'csv,json').split(',').map((s) => s.trim()).filter(Boolean) as ('csv' | 'json')[];
for (const f of EXPORT_FORMATS) if (f !== 'csv' && f !== 'json') throw new Error(`BENCH_EXPORT_FORMATS: unknown format ${f}`);
const GOACCESS = process.env.BENCH_GOACCESS !== '0';
const KEEP = process.env.BENCH_KEEP === '1';

/** The options of bench/ingest.ts: the generated format in GoAccess's terms. */
const GOACCESS_ARGS = ['--no-global-config', '--no-progress', '--log-format=%h %^[%d:%t %^] "%r" %s %b "%R" "%u" %T', '--date-format=%d/%b/%Y', '--time-format=%T'];

// --- small helpers -------------------------------------------------------------------------------

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const ms1 = (n: number) => n.toFixed(1);
const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

// --- tailhouse children ----------------------------------------------------------------------------

/** The server of step 4, from its spawn on: killed and its output shown on a failure or Ctrl-C. */
let server: Server | undefined;

// --- HTTP ------------------------------------------------------------------------------------------

/** The API of the server of step 4. */
const api = (method: string, p: string, token?: string, body?: unknown) => apiOf(server!.base, method, p, token, body);
const login = () => loginOf(server!.base, BENCH_ADMIN);

interface Timing {
  label: string;
  request: string;
  times: number[];
  /** What the last answer held (a total, a count), to show it was the intended work. */
  note: string;
  targetMs?: number;
  /** CPU the rest of the machine used meanwhile, in cores. */
  otherCores: number;
}

/**
 * Times `RUNS` calls of one request (after one untimed call), each from the request to its body's
 * last byte, and checks the status of every answer.
 */
async function timeRequest(label: string, method: 'GET' | 'POST', p: string, token: string, body: unknown, describe: (json: any) => string, targetMs?: number): Promise<Timing> {
  const times: number[] = [];
  let json: any;
  await api(method, p, token, body); // warm-up, untimed
  const { otherCores } = await withOtherLoad(server?.pid ?? 0, async () => {
    for (let run = 0; run < RUNS; run++) {
      const started = performance.now();
      const res = await api(method, p, token, body);
      times.push(performance.now() - started);
      if (res.status !== 200) throw new Error(`${label}: ${method} ${p} answered ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`);
      json = res.json;
    }
  });
  return { label, request: `${method} ${p.replace(/^\/api\/logs\/domains\/\d+/, '…')}${body ? ` ${JSON.stringify(body)}` : ''}`, times, note: describe(json), targetMs, otherCores };
}

interface ExportRun extends Download {
  /** 1 for the first export of this format, 2 for the next … */
  nth: number;
  otherCores: number;
}

// --- main ------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-query-'));
  let cleaned = false;
  const cleanUp = () => {
    if (cleaned) return;
    cleaned = true;
    if (server) killServer(server);
    killAll();
    if (!KEEP) fs.rmSync(dir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    cleanUp();
    process.exit(130);
  });
  const benchStarted = performance.now();
  try {
    console.log(`bench/query: ${fmt(ROWS)} access rows of ${MAIN_DOMAIN} + ${OTHER_DOMAINS} domains × ${fmt(OTHER_ROWS)}, times over the 30 days ending now; ${RUNS} timed calls per figure`);
    const chdb = (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', 'chdb', 'package.json'), 'utf8')) as { version: string }).version;
    console.log(`Node ${process.version}, chDB ${chdb}, ${os.cpus().length} CPUs, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; load average at start: ${load()}${KEEP ? `; files in ${dir}` : ''}`);

    // 1. The log files.
    const end = Date.now();
    const { mainLog, otherLogs, generateMs } = writeQueryLogs(dir, ROWS, end);
    const mainSize = fs.statSync(mainLog).size;
    console.log(`\n1. logs written in ${seconds(generateMs)}: ${MAIN_DOMAIN} ${(mainSize / 2 ** 20).toFixed(0)} MiB (${NEEDLES} lines with "${NEEDLE}"), ${OTHER_DOMAINS} × ${(fs.statSync(otherLogs[0]!).size / 2 ** 20).toFixed(0)} MiB; ${new Date(end - 30 * DAY_MS).toISOString()} … ${new Date(end).toISOString()}`);

    // 2. The data load through the real CLI.
    const dataDir = path.join(dir, 'data');
    const { ids, domainsMs, importMs, imports } = await loadQueryData(dataDir, { mainLog, otherLogs, generateMs }, ROWS);
    const mainImport = imports[0]!;
    const othersMs = imports.slice(1).reduce((s, i) => s + i.m.wallMs, 0);
    console.log(
      `2. data loaded in ${seconds(domainsMs + importMs)}: ${ids.size} × \`domains add\` ${seconds(domainsMs)}; imports ${seconds(importMs)} ` +
        `(${MAIN_DOMAIN}: ${seconds(mainImport.m.wallMs)}, ${fmt((ROWS / mainImport.m.wallMs) * 1000)} lines/s spawn to exit, peak RSS ${fmt(mainImport.m.peakRssMb)} MB, ` +
        `other load ${mainImport.m.otherCores.toFixed(2)} cores, its summary: "${mainImport.summary}"; the ${OTHER_DOMAINS} others: ${seconds(othersMs)}, ${fmt(((OTHER_DOMAINS * OTHER_ROWS) / othersMs) * 1000)} lines/s)`,
    );
    console.log(`   load average after the load: ${load()}`);

    // 3. GoAccess on the main domain's file, before the server runs, on a quiet machine.
    let goaccess: { m: Measured; valid: number } | string | undefined;
    if (!GOACCESS) goaccess = 'skipped (BENCH_GOACCESS=0)';
    else if (spawnSync('sh', ['-c', 'command -v goaccess']).status !== 0) goaccess = 'skipped, not installed (apt-get install -y goaccess)';
    else {
      process.stderr.write('running goaccess…\n');
      const report = path.join(dir, 'goaccess.json');
      const m = await spawnMeasured('goaccess', [mainLog, ...GOACCESS_ARGS, '-o', report], { timeoutMs: 20 * 60_000 }).done;
      if (m.code !== 0) goaccess = `failed (exit ${m.code ?? m.signal}): ${tail(m.stderr)}`;
      else {
        const general = (JSON.parse(fs.readFileSync(report, 'utf8')) as { general: { valid_requests: number } }).general;
        goaccess = { m, valid: general.valid_requests };
        const version = spawnSync('goaccess', ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0]?.replace(/[\s.]+$/, '');
        console.log(
          `3. ${version}: JSON report of the ${fmt(ROWS)}-line file in ${seconds(m.wallMs)} (CPU ${m.cpuS.toFixed(1)} s, peak RSS ${fmt(m.peakRssMb)} MB, ` +
            `other load ${m.otherCores.toFixed(2)} cores); ${fmt(general.valid_requests)} valid requests${general.valid_requests === ROWS ? '' : ` (**expected ${fmt(ROWS)}**)`}`,
        );
      }
      if (!KEEP) fs.rmSync(report, { force: true });
    }
    if (typeof goaccess === 'string') console.log(`3. goaccess: ${goaccess}`);

    // 4. The API.
    const t = performance.now();
    // Detached, as spawnMeasured's children: cleanUp (also on Ctrl-C) and a failure kill its process group.
    const s = await startServer(childEnv(dataDir, BENCH_ADMIN), { detached: true, onSpawn: (spawned) => (server = spawned) });
    const readyMs = performance.now() - t;
    // The stats rollup builder (src/rollups/builder.ts) catches up with the import first; until it has,
    // stats read raw rows (exact, slower). Its rounds run back to back while work is left.
    const idle = await waitIdle(s.pid, 1_800_000);
    // The load wrote gigabytes (logs, parts, merges): the kernel writes them back before the timed
    // calls instead of beside them, and the server is waited for once more.
    const dirtyMb = meminfoMb('Dirty');
    const syncStarted = performance.now();
    spawnSync('sync');
    const syncMs = performance.now() - syncStarted;
    await waitIdle(s.pid, 60_000);
    console.log(
      `4. serve ready in ${seconds(readyMs)} (pid ${s.pid}, ${s.base}); ${idle.idle ? 'idle' : '**still busy**'} after ${seconds(idle.waitedMs)} more (${idle.cpuS.toFixed(1)} CPU-s of merges and rollup building meanwhile); ` +
        `then ${fmt(dirtyMb)} MB of dirty pages written back by sync in ${seconds(syncMs)}; RSS ${fmt(statusMb(s.pid, 'VmRSS'))} MB; load average ${load()}`,
    );
    let token = await login();
    const mainId = ids.get(MAIN_DOMAIN)!;
    const d = `/api/logs/domains/${mainId}`;
    const total = (j: any) => `total ${fmt(j.data.pagination.total)}, ${j.data.logs.length} rows`;
    const loadBefore = load();
    const queryStarted = performance.now();
    const timings: Timing[] = [];
    const step = async (label: string, method: 'GET' | 'POST', p: string, body: unknown, describe: (j: any) => string, targetMs?: number) => {
      process.stderr.write(`timing ${label}…\n`);
      const timing = await timeRequest(label, method, p, token, body, describe, targetMs);
      timings.push(timing);
      return timing;
    };
    // The floor under every figure: HTTP, the bearer check (JWT, token version and permissions in PGlite) and one PGlite read.
    await step('GET /api/domains/:id (no ClickHouse)', 'GET', `/api/domains/${mainId}`, undefined, (j) => `domain ${j.data.name}`);
    const stats30 = await step('stats, period=30d', 'GET', `${d}/stats?period=30d`, undefined, (j) => `totalRequests ${fmt(j.data.totalRequests)}, uniqueVisitors ${fmt(j.data.uniqueVisitors)}`, 100);
    await step('stats, period=24h', 'GET', `${d}/stats?period=24h`, undefined, (j) => `totalRequests ${fmt(j.data.totalRequests)}`, 50);
    await step('access, statusCode=5xx, page 1', 'GET', `${d}/access?statusCode=5xx&page=1`, undefined, total, 30);
    await step('access, statusCode=5xx, page 1,000', 'GET', `${d}/access?statusCode=5xx&page=1000`, undefined, total, 60);
    await step('access, no filter, page 1,000', 'GET', `${d}/access?page=1000`, undefined, total, 60);
    await step(`access, no filter, page ${fmt(Math.ceil(EXPORT_ROWS / 1000))} at limit=1000`, 'GET', `${d}/access?page=${Math.ceil(EXPORT_ROWS / 1000)}&limit=1000`, undefined, total);
    const since = new Date(Date.now() - 30 * DAY_MS).toISOString();
    await step(`search "${NEEDLE}" (rare), 30 days`, 'POST', `${d}/search`, { query: NEEDLE, startDate: since }, total, 300);
    await step(`search "${COMMON}" (common), 30 days`, 'POST', `${d}/search`, { query: COMMON, startDate: since }, total);
    // The unindexed fields: a user agent no row holds (answered from the rollups' keys), and all five fields at once.
    await step(`search "${NEEDLE}" in userAgent, 30 days`, 'POST', `${d}/search`, { query: NEEDLE, fields: ['userAgent'], startDate: since }, total);
    await step(`search "${NEEDLE}" in all five fields, 30 days`, 'POST', `${d}/search`, { query: NEEDLE, fields: ['url', 'message', 'userAgent', 'referrer', 'ipAddress'], startDate: since }, total);
    const queryMs = performance.now() - queryStarted;
    const loadAfterQueries = load();

    // 5. The export of the newest EXPORT_ROWS rows: from the timestamp of the EXPORT_ROWS-th row on.
    const boundary = await api('GET', `${d}/access?page=${Math.ceil(EXPORT_ROWS / 1000)}&limit=1000`, token);
    const last = (boundary.json.data.logs as { timestamp: string }[])[(EXPORT_ROWS - 1) % 1000];
    if (!last) throw new Error(`no row ${EXPORT_ROWS} in the listing: ${JSON.stringify(boundary.json).slice(0, 300)}`);
    token = await login();
    const exports: ExportRun[] = [];
    for (const format of EXPORT_FORMATS) {
      for (let nth = 1; nth <= EXPORT_REPEAT; nth++) {
        process.stderr.write(`exporting ${format} (${nth})…\n`);
        const created = await api('POST', `${d}/export`, token, { type: 'access', format, startDate: last.timestamp });
        if (created.status !== 201) throw new Error(`export ${format}: POST answered ${created.status}: ${JSON.stringify(created.json)}`);
        const url = `${s.base}${new URL(created.json.data.downloadUrl as string).pathname}`;
        await waitIdle(s.pid, 30_000);
        const { value, otherCores } = await withOtherLoad(server?.pid ?? 0, () => download(url, format, s.pid, 300_000));
        exports.push({ ...value, nth, otherCores });
      }
    }
    const serverRssMb = statusMb(s.pid, 'VmRSS');
    const serverHwmMb = statusMb(s.pid, 'VmHWM');
    const stopMs = await stopServer(s);

    // The figures.
    const loadAtEnd = load();
    console.log(`\nmedian of ${RUNS} calls after one warm-up, request to last byte of the body, over HTTP on 127.0.0.1 (node bin/tailhouse.js serve, embedded chDB ${chdb}); load average before ${loadBefore}, after ${loadAfterQueries}; ${fmt(queryMs)} ms for all\n`);
    console.log('| figure | median ms | min–max ms | target | met | other load | answer |');
    console.log('|---|---:|---:|---|---|---:|---|');
    for (const timing of timings) {
      const m = median(timing.times);
      const met = timing.targetMs === undefined ? '' : m <= timing.targetMs ? 'met' : '**not met**';
      console.log(`| ${timing.label} | ${ms1(m)} | ${ms1(Math.min(...timing.times))}–${ms1(Math.max(...timing.times))} | ${timing.targetMs === undefined ? '–' : `≤ ${timing.targetMs} ms`} | ${met} | ${timing.otherCores.toFixed(2)} | ${timing.note} |`);
    }
    console.log('\nrequests (… is /api/logs/domains/<id of the main domain>):');
    for (const timing of timings) console.log(`  ${timing.label}: ${timing.request}`);
    console.log(`\nexports from ${last.timestamp} on (the ${fmt(EXPORT_ROWS)}th newest row), download timed from GET to last byte with node:http; server memory from /proc/${s.pid}/status:\n`);
    console.log('| format | rows | MB | s | rows/s (≥ 300,000) | first byte ms | RSS before MB | peak RSS growth MB (≤ 100): sampled / VmHWM | RssAnon growth MB | RSS after MB | other load |');
    console.log('|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|');
    for (const e of exports) {
      const rate = (e.rows / e.ms) * 1000;
      const growth = Math.max(e.rssPeakSampledMb, Number.isNaN(e.hwmMb) ? 0 : e.hwmMb) - e.rssBeforeMb;
      console.log(
        `| ${e.format} (${e.nth === 1 ? '1st' : e.nth === 2 ? '2nd' : `${e.nth}th`}) | ${fmt(e.rows)}${e.rows >= EXPORT_ROWS && e.rows < EXPORT_ROWS + 100 ? '' : ' (**expected about ' + fmt(EXPORT_ROWS) + '**)'} | ${fmt(e.bytes / 2 ** 20)} | ${(e.ms / 1000).toFixed(2)} | ` +
          `${fmt(rate)} ${rate >= 300_000 ? 'met' : '**not met**'} | ${fmt(e.firstByteMs)} | ${fmt(e.rssBeforeMb)} | ` +
          `${(e.rssPeakSampledMb - e.rssBeforeMb).toFixed(1)} / ${Number.isNaN(e.hwmMb) ? '–' : (e.hwmMb - e.rssBeforeMb).toFixed(1)} ${growth <= 100 ? 'met' : '**not met**'} | ` +
          `${(e.anonPeakMb - e.anonBeforeMb).toFixed(1)} | ${fmt(e.rssAfterMb)} | ${e.otherCores.toFixed(2)} |`,
      );
    }
    if (typeof goaccess === 'object') {
      const refresh = median(stats30.times);
      const ratio = goaccess.m.wallMs / refresh;
      console.log(
        `\ndashboard refresh (GET stats?period=30d, median ${ms1(refresh)} ms) vs re-running GoAccess on the same ${fmt(ROWS)} lines (${seconds(goaccess.m.wallMs)}): ` +
          `**${fmt(ratio)}×** (target ≥ 100×: ${ratio >= 100 ? 'met' : '**not met**'})`,
      );
    } else console.log(`\ndashboard refresh vs GoAccess: no figure, goaccess ${goaccess}`);
    console.log(
      `\ndata load: ${seconds(generateMs)} writing the logs (not part of the load), ${seconds(domainsMs + importMs)} through the CLI (${seconds(importMs)} of imports); ` +
        `server: RSS ${fmt(serverRssMb)} MB at the end, peak ${fmt(serverHwmMb)} MB since the last reset, stopped ${fmt(stopMs)} ms after SIGTERM; ` +
        `load average at the end ${loadAtEnd}; whole run ${seconds(performance.now() - benchStarted)}`,
    );
  } finally {
    cleanUp();
  }
}

main().catch((err) => {
  console.error(`bench/query: ${(err as Error).stack ?? err}`);
  if (server) {
    console.error(`server output: ${tail(server.output(), 10)}`);
    killServer(server);
  }
  killAll();
  process.exit(1);
});
