/**
 * bench/worst-request: a plain user's worst request, alone and three at once, and how /healthz
 * answers meanwhile (issue 13: ≤ 2 s, and /healthz ≤ 50 ms while three of them run).
 *
 *   npx tsx bench/worst-request.ts                       # bench/query's data: 10,000,000 + 9 × 1,000,000 rows
 *   BENCH_ROWS=1000000 npx tsx bench/worst-request.ts    # a quick run: 1,000,000 + 9 × 100,000
 *   BENCH_DATA_DIR=/tmp/tailhouse-bench-query-…/data npx tsx bench/worst-request.ts
 *                                                        # the DATA_DIR bench/query kept (BENCH_KEEP=1)
 *
 * What it does, through the real programs:
 *   1. the data: bench/query's (bench/lib/query-data.ts: logs over the 30 days ending now, loaded
 *      through `tailhouse domains add` and `tailhouse import` on a fresh DATA_DIR), or the kept
 *      BENCH_DATA_DIR as it is;
 *   2. `node bin/tailhouse.js serve` as a child on 127.0.0.1, waited for until idle (merges, the
 *      stats rollup builder catching up);
 *   3. the administrator creates a plain user (the default rights: logs read) and makes it the
 *      owner of the main domain, which it signs into (on a kept DATA_DIR the owner is put back and
 *      the user deleted at the end);
 *   4. as that user, searches over all five fields and the widest range allowed (1970-01-01 to
 *      2106-02-06), limit 1000: the rare marker (no index helps: every row is read), the common word,
 *      the common word at the deepest page allowed (page 1000 at limit 1000: the first million
 *      matches counted into the page's boundary), and one letter found in every row; BENCH_RUNS
 *      timed calls each after one warm-up, from the request to the body's last byte. The worst is
 *      the one with the highest median;
 *   5. /healthz every 10 ms over a connection of its own, idle first, then while three of the worst
 *      run at once (each on its own connection), BENCH_ROUNDS times: the three requests' times and
 *      /healthz's median, 99th percentile and maximum. Beside it, the same calls to a bare node:http
 *      server in a process of its own (the control): what the machine alone does to an answer's
 *      time, with no work of tailhouse's in that process.
 *
 * Figures are printed beside their targets; nothing is asserted. The machine's other load (CPU not
 * used by the server or this process, in cores) is printed beside each figure: on a shared machine
 * the figures are upper bounds.
 *
 * Environment (optional):
 *   BENCH_ROWS      rows of the main domain when the data is built (default 10000000)
 *   BENCH_DATA_DIR  a DATA_DIR from bench/query (BENCH_KEEP=1) to reuse instead
 *   BENCH_RUNS      timed calls per search (default 5)
 *   BENCH_ROUNDS    rounds of three at once (default 3)
 *   BENCH_KEEP      1: keep the temporary directory (logs, DATA_DIR) when the data is built
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { STORED_TIME_RANGE } from '../core/db/time-range.js';
import { killAll } from './lib/measure.js';
import { BENCH_ADMIN, benchDataDir, COMMON, MAIN_DOMAIN, NEEDLE } from './lib/query-data.js';
import { api as apiOf, childEnv, failBench, killServer, login, ROOT, startServer, stopServer, waitIdle, withOtherLoad, type Server } from './lib/serve-child.js';
import { fmt, load, median, positiveIntEnv, sleep } from './lib/util.js';

const ROWS = positiveIntEnv('BENCH_ROWS', 10_000_000);
const RUNS = positiveIntEnv('BENCH_RUNS', 5);
const ROUNDS = positiveIntEnv('BENCH_ROUNDS', 3);
const KEPT_DATA_DIR = process.env.BENCH_DATA_DIR;
const KEEP = process.env.BENCH_KEEP === '1';

const WORST_TARGET_MS = 2000;
const HEALTHZ_TARGET_MS = 50;
const HEALTHZ_EVERY_MS = 10;
const FIELDS = ['url', 'message', 'userAgent', 'referrer', 'ipAddress'];
const WIDEST = { startDate: new Date(STORED_TIME_RANGE.first).toISOString(), endDate: new Date(STORED_TIME_RANGE.last).toISOString() };

const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.ceil((p / 100) * xs.length) - 1)]!;
const ms1 = (n: number) => n.toFixed(1);
const met = (value: number, target: number) => (value <= target ? 'met' : '**not met**');

let server: Server | undefined;
let control: { base: string; child: ChildProcess } | undefined;

const api = (method: string, p: string, token?: string, body?: unknown) => apiOf(server!.base, method, p, token, body);

/** One search as the plain user, timed from the request to the body's last byte; fails unless 200. */
async function timedSearch(path: string, token: string, body: unknown): Promise<{ ms: number; total: number }> {
  const started = performance.now();
  const res = await api('POST', path, token, body);
  const ms = performance.now() - started;
  if (res.status !== 200) throw new Error(`search answered ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`);
  return { ms, total: res.json.data.pagination.total as number };
}

/** The control: a bare node:http server answering `ok`, in a process of its own; its base URL. */
async function startControl(): Promise<{ base: string; child: ChildProcess }> {
  const script = "const s = require('node:http').createServer((q, r) => r.end('ok')).listen(0, '127.0.0.1', () => console.log(s.address().port));";
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise<string>((resolve, reject) => {
    child.stdout!.once('data', (chunk: Buffer) => resolve(chunk.toString().trim()));
    child.once('exit', (code) => reject(new Error(`the control server exited with ${code}`)));
  });
  return { base: `http://127.0.0.1:${port}`, child };
}

/**
 * Calls `url` every HEALTHZ_EVERY_MS over one keep-alive connection of its own until `stop`
 * resolves; the time of each call, request to last byte.
 */
async function poll(url: string, stop: Promise<unknown>): Promise<number[]> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const times: number[] = [];
  let stopped = false;
  void stop.then(() => (stopped = true));
  try {
    while (!stopped) {
      const started = performance.now();
      await new Promise<void>((resolve, reject) => {
        http
          .get(url, { agent }, (res) => {
            res.resume();
            res.once('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`${url} answered ${res.statusCode}`))));
          })
          .once('error', reject);
      });
      const ms = performance.now() - started;
      times.push(ms);
      await sleep(Math.max(0, HEALTHZ_EVERY_MS - ms));
    }
  } finally {
    agent.destroy();
  }
  return times;
}

interface Candidate {
  label: string;
  body: Record<string, unknown>;
  times: number[];
  total: number;
  otherCores: number;
}

async function main(): Promise<void> {
  const dir = KEPT_DATA_DIR ? null : fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-worst-'));
  let cleaned = false;
  const cleanUp = () => {
    if (cleaned) return;
    cleaned = true;
    if (server) killServer(server);
    control?.child.kill('SIGKILL');
    killAll();
    if (dir && !KEEP) fs.rmSync(dir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    cleanUp();
    process.exit(130);
  });
  const benchStarted = performance.now();
  let restore: (() => Promise<void>) | undefined;
  try {
    const chdb = (JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', 'chdb', 'package.json'), 'utf8')) as { version: string }).version;
    console.log(`bench/worst-request: Node ${process.version}, chDB ${chdb}, ${os.cpus().length} CPUs; load average at start: ${load()}${dir && KEEP ? `; files in ${dir}` : ''}`);

    // 1. The data.
    const dataDir = await benchDataDir({ kept: KEPT_DATA_DIR, dir, rows: ROWS, keep: KEEP });

    // 2. The server.
    const s = await startServer(childEnv(dataDir, BENCH_ADMIN), { detached: true, onSpawn: (spawned) => (server = spawned) });
    const idle = await waitIdle(s.pid, 1_800_000);
    console.log(`2. serve (pid ${s.pid}) ${idle.idle ? 'idle' : '**still busy**'} after ${(idle.waitedMs / 1000).toFixed(1)} s (${idle.cpuS.toFixed(1)} CPU-s of merges and rollup building); load average ${load()}`);

    // 3. A plain user owning the main domain.
    const admin = await login(s.base, BENCH_ADMIN);
    const domains = await api('GET', `/api/domains?search=${MAIN_DOMAIN}`, admin);
    const domain = (domains.json.data.domains as { id: number; name: string; ownerId: number | null }[]).find((d) => d.name === MAIN_DOMAIN);
    if (!domain) throw new Error(`no domain ${MAIN_DOMAIN} in ${dataDir}`);
    const plain = { email: `worst-${process.pid}@example.com`, password: 'worst-request-password-1' };
    const created = await api('POST', '/api/users', admin, plain);
    if (created.status !== 201) throw new Error(`creating the plain user answered ${created.status}: ${JSON.stringify(created.json)}`);
    const plainId = created.json.data.id as number;
    const owned = await api('PUT', `/api/domains/${domain.id}`, admin, { ownerId: plainId });
    if (owned.status !== 200) throw new Error(`handing the domain over answered ${owned.status}: ${JSON.stringify(owned.json)}`);
    restore = async () => {
      await api('PUT', `/api/domains/${domain.id}`, admin, { ownerId: domain.ownerId });
      await api('DELETE', `/api/users/${plainId}`, admin);
    };
    const token = (await api('POST', '/api/auth/login', undefined, plain)).json.data.accessToken as string;
    console.log(`3. plain user ${plainId} (role user, default rights) owns ${MAIN_DOMAIN} (domain ${domain.id})`);

    // 4. The candidates for the worst request, each alone.
    const searchPath = `/api/logs/domains/${domain.id}/search`;
    const candidates: Candidate[] = [
      { label: `the rare marker "${NEEDLE}"`, body: { query: NEEDLE } },
      { label: `the common word "${COMMON}", page 1`, body: { query: COMMON } },
      { label: `the common word "${COMMON}", page 1,000 (the deepest at limit 1000)`, body: { query: COMMON, page: 1000 } },
      { label: 'one letter in every row ("e"), page 1', body: { query: 'e' } },
    ].map((c) => ({ ...c, body: { ...c.body, fields: FIELDS, ...WIDEST, limit: 1000 }, times: [], total: 0, otherCores: 0 }));
    for (const c of candidates) {
      process.stderr.write(`timing ${c.label}…\n`);
      await timedSearch(searchPath, token, c.body); // warm-up
      const { otherCores } = await withOtherLoad(server?.pid ?? 0, async () => {
        for (let run = 0; run < RUNS; run++) {
          const { ms, total } = await timedSearch(searchPath, token, c.body);
          c.times.push(ms);
          c.total = total;
        }
      });
      c.otherCores = otherCores;
    }
    const worst = candidates.reduce((a, b) => (median(b.times) > median(a.times) ? b : a));

    // 5. /healthz (and the control) idle, then while three of the worst run at once.
    const healthzUrl = `${s.base}/healthz`;
    control = await startControl();
    const idleWindow = sleep(2000);
    const [idleHealthz, idleControl] = await Promise.all([poll(healthzUrl, idleWindow), poll(control.base, idleWindow)]);
    const rounds: { three: number[]; healthz: number[]; control: number[]; otherCores: number }[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      process.stderr.write(`three at once, round ${round + 1}…\n`);
      await waitIdle(s.pid, 30_000);
      const { value, otherCores } = await withOtherLoad(server?.pid ?? 0, async () => {
        const three = Promise.all([0, 1, 2].map(() => timedSearch(searchPath, token, worst.body)));
        const [healthz, controlTimes] = await Promise.all([poll(healthzUrl, three), poll(control!.base, three)]);
        return { three: (await three).map((r) => r.ms), healthz, control: controlTimes };
      });
      rounds.push({ ...value, otherCores });
    }

    // The figures.
    console.log(`\n4. searches as the plain user: all five fields, ${WIDEST.startDate} to ${WIDEST.endDate}, limit 1000; median of ${RUNS} calls after one warm-up, request to last byte\n`);
    console.log('| search | median ms | min–max ms | target | | matches | other load |');
    console.log('|---|---:|---:|---|---|---:|---:|');
    for (const c of candidates) {
      const m = median(c.times);
      console.log(`| ${c.label}${c === worst ? ' (**the worst**)' : ''} | ${ms1(m)} | ${ms1(Math.min(...c.times))}–${ms1(Math.max(...c.times))} | ≤ ${WORST_TARGET_MS} ms | ${met(m, WORST_TARGET_MS)} | ${fmt(c.total)} | ${c.otherCores.toFixed(2)} |`);
    }
    console.log(
      `\n5. three of the worst (${worst.label}) at once, ${ROUNDS} rounds; /healthz every ${HEALTHZ_EVERY_MS} ms on its own connection meanwhile, ` +
        `and the same calls to the control (a bare node:http server in a process of its own: the machine's share)\n`,
    );
    console.log('| | the three, ms | /healthz calls | median ms | p99 ms | max ms | target | | control: median / p99 / max ms | other load |');
    console.log('|---|---|---:|---:|---:|---:|---|---|---|---:|');
    const controlText = (times: number[]) => `${ms1(median(times))} / ${ms1(percentile(times, 99))} / ${ms1(Math.max(...times))}`;
    console.log(`| idle, 2 s | – | ${idleHealthz.length} | ${ms1(median(idleHealthz))} | ${ms1(percentile(idleHealthz, 99))} | ${ms1(Math.max(...idleHealthz))} | | | ${controlText(idleControl)} | |`);
    rounds.forEach((r, i) => {
      const max = Math.max(...r.healthz);
      console.log(
        `| round ${i + 1} | ${r.three.map(ms1).join(', ')} | ${r.healthz.length} | ${ms1(median(r.healthz))} | ${ms1(percentile(r.healthz, 99))} | ${ms1(max)} | ≤ ${HEALTHZ_TARGET_MS} ms | ${met(max, HEALTHZ_TARGET_MS)} | ${controlText(r.control)} | ${r.otherCores.toFixed(2)} |`,
      );
    });
    await restore();
    restore = undefined;
    const stopMs = await stopServer(s);
    console.log(`\nserver stopped ${fmt(stopMs)} ms after SIGTERM; load average at the end ${load()}; whole run ${((performance.now() - benchStarted) / 1000).toFixed(1)} s`);
  } finally {
    if (restore) await restore().catch(() => {});
    cleanUp();
  }
}

main().catch((err: unknown) => failBench('worst-request', err, server));
