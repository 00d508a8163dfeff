/**
 * bench/query: the logs API's response times at the issue's scale, in embedded mode on this
 * machine, side by side with GoAccess re-reading the same log.
 *
 *   npm run bench:query                        # 10,000,000 rows for one domain + 9 × 1,000,000 + 1,000 small ones
 *   BENCH_ROWS=1000000 BENCH_FLEET=100 npm run bench:query     # a quick run: 1,000,000 + 9 × 100,000 + 100 small ones
 *
 * What it does, all through the real programs:
 *   1. writes nginx access logs (bench/lib/access-log.ts's generator, with each line's $time_local
 *      rewritten so that the times run evenly over the 30 days ending at the moment of writing):
 *      BENCH_ROWS lines for the main domain, with 10 lines whose URL holds a rare marker spread over
 *      the 30 days, and BENCH_ROWS / 10 lines for each of 9 other domains (the 10:1 shape); and the
 *      fleet: BENCH_FLEET small domains of BENCH_FLEET_LINES lines each over the last 24 hours, in
 *      one file with `$host` in front of each line;
 *   2. on a fresh DATA_DIR: `node bin/tailhouse.js domains add NAME` for the 10 domains, the fleet's
 *      domains through POST /api/domains of a `serve` child (the CLI adds one domain per process
 *      and has no bulk form), then `node bin/tailhouse.js import FILE --domain NAME --format
 *      '<log_format>'` for each file and one `import` of the fleet's file routed by `$host`, one
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
 *      and the dashboard's shapes of issue 14, each beside its target (DASHBOARD below): stats
 *      30d/24h, POST /api/logs/query's hourly series over 30 days, percentiles, the top URLs of
 *      the 5xx, stats filtered by a url glob, the fleet at a glance; then BENCH_CLIENTS clients at
 *      once, each running the dashboard's mix in turn for BENCH_CONCURRENT_S seconds: req/s, p50, p99;
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
 *   BENCH_FLEET    small domains of the fleet (default 1000; 0: none, and no fleet figure)
 *   BENCH_FLEET_LINES  lines of each, over the last 24 hours (default 300)
 *   BENCH_CLIENTS  concurrent clients of the mix (default 10); BENCH_CONCURRENT_S its seconds (default 20)
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
import { BENCH_ADMIN, COMMON, fleetDomain, loadQueryData, MAIN_DOMAIN, NEEDLE, NEEDLES, OTHER_DOMAINS, writeQueryLogs } from './lib/query-data.js';
import { DAY_MS } from '../core/durations.js';
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

const int = (name: string, fallback: number, least = 1) => {
  const v = Number(process.env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v < least) throw new Error(`${name} must be a whole number ≥ ${least}`);
  return v;
};
const ROWS = int('BENCH_ROWS', 10_000_000);
const OTHER_ROWS = Math.max(1, Math.round(ROWS / 10));
const RUNS = int('BENCH_RUNS', 15);
const FLEET = int('BENCH_FLEET', 1000, 0);
const FLEET_LINES = int('BENCH_FLEET_LINES', 300);
const CLIENTS = int('BENCH_CLIENTS', 10);
const CONCURRENT_S = int('BENCH_CONCURRENT_S', 20);
/** POST /api/logs/query's largest page: the fleet's series (domains × 25 hours) takes several. */
const QUERY_PAGE_MAX = 10_000;
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
/** The nearest-rank quantile q (0–1) of `xs`. */
const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(q * s.length) - 1)]!;
};

/** Prints a table of figures, each beside its target. */
function printTimings(timings: Timing[]): void {
  console.log('| figure | median ms | min–max ms | target | met | other load | answer |');
  console.log('|---|---:|---:|---|---|---:|---|');
  for (const timing of timings) {
    const m = median(timing.times);
    const met = timing.targetMs === undefined ? '' : m <= timing.targetMs ? 'met' : '**not met**';
    console.log(`| ${timing.label} | ${ms1(m)} | ${ms1(Math.min(...timing.times))}–${ms1(Math.max(...timing.times))} | ${timing.targetMs === undefined ? '–' : `≤ ${timing.targetMs} ms`} | ${met} | ${timing.otherCores.toFixed(2)} | ${timing.note} |`);
  }
}
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

/** One request of a figure; `pages` > 1: the same body asked for pages 1 … pages, one after the other. */
interface Call {
  method: 'GET' | 'POST';
  path: string;
  body?: Record<string, unknown>;
  pages?: number;
}

/** What a figure's requests look like in the list under the table (… is the main domain's path). */
const describeCall = (c: Call) => {
  const body = c.body ? ` ${JSON.stringify(c.body).replace(/"domains":\[(\d+)(,\d+){20,}\]/, (_, first: string) => `"domains":[${first},…]`)}` : '';
  return `${c.method} ${c.path.replace(/^\/api\/logs\/domains\/\d+/, '…')}${body}${c.pages && c.pages > 1 ? ` (pages 1–${c.pages})` : ''}`;
};

/** Makes the calls one after the other, each checked for a 200; the last answer's body. */
async function callAll(label: string, calls: Call[], token: string): Promise<any> {
  let json: any;
  for (const c of calls) {
    for (let page = 1; page <= (c.pages ?? 1); page++) {
      const res = await api(c.method, c.path, token, c.pages ? { ...c.body, page } : c.body);
      if (res.status !== 200) throw new Error(`${label}: ${describeCall(c)} answered ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`);
      json = res.json;
    }
  }
  return json;
}

/**
 * Times `RUNS` rounds of `calls` (after one untimed round), each round from the first request to
 * the last body's last byte, and checks the status of every answer.
 */
async function timeCalls(label: string, calls: Call[], token: string, describe: (json: any) => string, targetMs?: number): Promise<Timing> {
  const times: number[] = [];
  let json: any;
  await callAll(label, calls, token); // warm-up, untimed
  const { otherCores } = await withOtherLoad(server?.pid ?? 0, async () => {
    for (let run = 0; run < RUNS; run++) {
      const started = performance.now();
      json = await callAll(label, calls, token);
      times.push(performance.now() - started);
    }
  });
  return { label, request: calls.map(describeCall).join(' + '), times, note: describe(json), targetMs, otherCores };
}

interface Mix {
  requests: number;
  wallMs: number;
  /** Each request's time, all clients together. */
  times: number[];
  /** The same by figure. */
  byLabel: Map<string, number[]>;
  otherCores: number;
}

/**
 * `clients` clients at once for `seconds`, each making the requests of `figures` in turn (client k
 * starting at figure k, so that they are not in step), one at a time: every request timed from
 * its start to its body's last byte.
 */
async function runMix(figures: { label: string; call: Call }[], token: string, clients: number, seconds: number): Promise<Mix> {
  const times: number[] = [];
  const byLabel = new Map(figures.map((f) => [f.label, [] as number[]]));
  const started = performance.now();
  const until = started + seconds * 1000;
  const { otherCores } = await withOtherLoad(server?.pid ?? 0, () =>
    Promise.all(
      Array.from({ length: clients }, async (_, k) => {
        for (let i = k; performance.now() < until; i++) {
          const figure = figures[i % figures.length]!;
          const t = performance.now();
          await callAll(figure.label, [figure.call], token);
          const ms = performance.now() - t;
          times.push(ms);
          byLabel.get(figure.label)!.push(ms);
        }
      }),
    ),
  );
  return { requests: times.length, wallMs: performance.now() - started, times, byLabel, otherCores };
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
    console.log(
      `bench/query: ${fmt(ROWS)} access rows of ${MAIN_DOMAIN} + ${OTHER_DOMAINS} domains × ${fmt(OTHER_ROWS)}, times over the 30 days ending now; ` +
        `a fleet of ${fmt(FLEET)} domains × ${fmt(FLEET_LINES)} rows over the last 24 hours; ${RUNS} timed calls per figure`,
    );
    const chdb = (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', 'chdb', 'package.json'), 'utf8')) as { version: string }).version;
    console.log(`Node ${process.version}, chDB ${chdb}, ${os.cpus().length} CPUs, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; load average at start: ${load()}${KEEP ? `; files in ${dir}` : ''}`);

    // 1. The log files.
    const end = Date.now();
    const logs = writeQueryLogs(dir, ROWS, end, { domains: FLEET, linesEach: FLEET_LINES });
    const { mainLog, otherLogs, generateMs } = logs;
    const mainSize = fs.statSync(mainLog).size;
    console.log(
      `\n1. logs written in ${seconds(generateMs)}: ${MAIN_DOMAIN} ${(mainSize / 2 ** 20).toFixed(0)} MiB (${NEEDLES} lines with "${NEEDLE}"), ${OTHER_DOMAINS} × ${(fs.statSync(otherLogs[0]!).size / 2 ** 20).toFixed(0)} MiB` +
        `${logs.fleet ? `, the fleet ${(fs.statSync(logs.fleet.log).size / 2 ** 20).toFixed(0)} MiB` : ''}; ${new Date(end - 30 * DAY_MS).toISOString()} … ${new Date(end).toISOString()}`,
    );

    // 2. The data load through the real CLI.
    const dataDir = path.join(dir, 'data');
    const { ids, domainsMs, fleetDomainsMs, importMs, imports } = await loadQueryData(dataDir, logs, ROWS, (spawned) => (server = spawned));
    const mainImport = imports[0]!;
    const othersMs = imports.slice(1, 1 + OTHER_DOMAINS).reduce((s, i) => s + i.m.wallMs, 0);
    const fleetImport = imports[1 + OTHER_DOMAINS];
    const perCliAdd = domainsMs / (1 + OTHER_DOMAINS);
    console.log(
      `2. data loaded in ${seconds(domainsMs + fleetDomainsMs + importMs)}: ${1 + OTHER_DOMAINS} × \`domains add\` ${seconds(domainsMs)} (${fmt(perCliAdd)} ms a call)` +
        `${FLEET ? `; the fleet's ${fmt(FLEET)} domains through POST /api/domains in ${seconds(fleetDomainsMs)} (a \`serve\` child started and stopped for it; one CLI call each would take about ${seconds(FLEET * perCliAdd)})` : ''}; ` +
        `imports ${seconds(importMs)} (${MAIN_DOMAIN}: ${seconds(mainImport.m.wallMs)}, ${fmt((ROWS / mainImport.m.wallMs) * 1000)} lines/s spawn to exit, peak RSS ${fmt(mainImport.m.peakRssMb)} MB, ` +
        `other load ${mainImport.m.otherCores.toFixed(2)} cores, its summary: "${mainImport.summary}"; the ${OTHER_DOMAINS} others: ${seconds(othersMs)}, ${fmt(((OTHER_DOMAINS * OTHER_ROWS) / othersMs) * 1000)} lines/s` +
        `${fleetImport ? `; the fleet, one import routed by $host: ${seconds(fleetImport.m.wallMs)}, "${fleetImport.summary}"` : ''})`,
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
    const step = async (label: string, method: 'GET' | 'POST', p: string, body: Record<string, unknown> | undefined, describe: (j: any) => string, targetMs?: number) => {
      process.stderr.write(`timing ${label}…\n`);
      const timing = await timeCalls(label, [{ method, path: p, body }], token, describe, targetMs);
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

    // 4b. Issue 14's dashboard shapes, each beside its target, then a dashboard's mix from several clients at once.
    token = await login();
    const dashboardLoadBefore = load();
    // The rows of the main domain's 30 days: what a filtered stats request reads (the rollups hold no row's fields).
    const windowRows = (await api('GET', `${d}/stats?period=30d`, token)).json.data.totalRequests as number;
    const results = (j: any) => `${fmt(j.data.results.length)} rows, total ${fmt(j.data.pagination.total)}`;
    const query = (body: Record<string, unknown>): Call => ({ method: 'POST', path: '/api/logs/query', body: { domains: [mainId], ...body } });
    const dashboard: { label: string; call: Call; describe: (j: any) => string; targetMs: number }[] = [
      { label: 'stats, period=30d', call: { method: 'GET', path: `${d}/stats?period=30d` }, describe: (j) => `totalRequests ${fmt(j.data.totalRequests)}`, targetMs: 50 },
      { label: 'stats, period=24h', call: { method: 'GET', path: `${d}/stats?period=24h` }, describe: (j) => `totalRequests ${fmt(j.data.totalRequests)}`, targetMs: 30 },
      {
        label: 'query: series 30d by hour (requests, errorRate, p95, bandwidth)',
        call: query({ metrics: ['requests', 'errorRate', 'p95ResponseTime', 'bandwidth'], dimensions: ['time:hour'], dateRange: '30d', limit: 1000 }),
        describe: results,
        targetMs: 100,
      },
      { label: 'query: p50/p95/p99 over 30d', call: query({ metrics: ['p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime'], dateRange: '30d' }), describe: (j) => `[${j.data.results[0].metrics.join(', ')}] ms`, targetMs: 100 },
      {
        label: 'query: top 10 urls of the 5xx, 30d',
        call: query({ metrics: ['requests'], dimensions: ['url'], filters: [['is', 'statusClass', ['5xx']]], dateRange: '30d', limit: 10 }),
        describe: (j) => `${results(j)}; first ${JSON.stringify(j.data.results[0]?.dimensions[0])} × ${j.data.results[0]?.metrics[0]}`,
        targetMs: 150,
      },
      {
        label: 'stats, period=30d&url=/api/* (raw read)',
        call: { method: 'GET', path: `${d}/stats?period=30d&url=${encodeURIComponent('/api/*')}` },
        describe: (j) => `totalRequests ${fmt(j.data.totalRequests)} of the window's ${fmt(windowRows)} rows, whose url it reads (see bench/README)`,
        targetMs: 400,
      },
    ];
    const dashboardTimings: Timing[] = [];
    for (const figure of dashboard) {
      process.stderr.write(`timing ${figure.label}…\n`);
      dashboardTimings.push(await timeCalls(figure.label, [figure.call], token, figure.describe, figure.targetMs));
    }
    if (FLEET) {
      // Two queries, as a fleet page draws: the table (totals per domain, an exact p95 over the day),
      // then the sparklines (requests per domain and hour: 25 buckets for a window of 24 hours
      // ending now, so FLEET × 25 rows over as many pages of the query's largest limit as needed).
      const fleetIds = Array.from({ length: FLEET }, (_, i) => ids.get(fleetDomain(i + 1))!);
      const seriesRows = FLEET * 25;
      const fleetCalls: Call[] = [
        { method: 'POST', path: '/api/logs/query', body: { domains: fleetIds, metrics: ['requests', 'errorRate', 'p95ResponseTime'], dimensions: ['domain'], dateRange: '24h', limit: Math.min(FLEET, QUERY_PAGE_MAX) }, pages: Math.ceil(FLEET / QUERY_PAGE_MAX) },
        { method: 'POST', path: '/api/logs/query', body: { domains: fleetIds, metrics: ['requests'], dimensions: ['domain', 'time:hour'], dateRange: '24h', limit: Math.min(seriesRows, QUERY_PAGE_MAX) }, pages: Math.ceil(seriesRows / QUERY_PAGE_MAX) },
      ];
      const label = `fleet: ${fmt(FLEET)} domains × (requests, errorRate, p95) + hourly sparkline, 24h`;
      process.stderr.write(`timing ${label}…\n`);
      dashboardTimings.push(await timeCalls(label, fleetCalls, token, (j) => `series: ${fmt(j.data.pagination.total)} rows over ${j.data.pagination.pages} page(s)`, 200));
      // Each part alone, to show which one costs.
      for (const [i, part] of fleetCalls.entries()) dashboardTimings.push(await timeCalls(`fleet, part ${i + 1} alone`, [part], token, results));
    }
    const dashboardLoadAfter = load();
    // A dashboard's mix: the figures above but the fleet's (another page), from CLIENTS clients at once.
    process.stderr.write(`${CLIENTS} clients running the mix for ${CONCURRENT_S} s…\n`);
    const mix = await runMix(dashboard, token, CLIENTS, CONCURRENT_S);

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
    printTimings(timings);
    console.log('\nrequests (… is /api/logs/domains/<id of the main domain>):');
    for (const timing of timings) console.log(`  ${timing.label}: ${timing.request}`);
    console.log(`\nissue 14, a dashboard's shapes: the same kind of median; load average before ${dashboardLoadBefore}, after ${dashboardLoadAfter}\n`);
    printTimings(dashboardTimings);
    console.log('\nrequests (… as above):');
    for (const timing of dashboardTimings) console.log(`  ${timing.label}: ${timing.request}`);
    console.log(
      `\n${CLIENTS} clients at once for ${CONCURRENT_S} s, each making the first ${dashboard.length} requests above in turn, one at a time: ` +
        `**${(mix.requests / (mix.wallMs / 1000)).toFixed(1)} req/s** (${fmt(mix.requests)} requests), p50 ${ms1(quantile(mix.times, 0.5))} ms, **p99 ${ms1(quantile(mix.times, 0.99))} ms**, ` +
        `max ${ms1(Math.max(...mix.times))} ms; other load ${mix.otherCores.toFixed(2)} cores; by request (count, p50, p99 ms): ` +
        [...mix.byLabel].map(([label, xs]) => `${label} ${xs.length}, ${ms1(quantile(xs, 0.5))}, ${ms1(quantile(xs, 0.99))}`).join('; '),
    );
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
      `\ndata load: ${seconds(generateMs)} writing the logs (not part of the load), ${seconds(domainsMs + fleetDomainsMs + importMs)} through the CLI and the API (${seconds(importMs)} of imports); ` +
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
