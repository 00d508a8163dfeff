/**
 * bench/auth: login (argon2id verify) and an authenticated GET /api/users under load, plus cold
 * start, in server mode (real Postgres) and in embedded mode (PGlite).
 *
 *   npm run bench:auth            (or: npx tsx bench/auth.ts)
 *
 * The server is the real program (`node bin/tailhouse.js serve`) in a child process; the load
 * generator (autocannon) is a second child process. All traffic stays on 127.0.0.1. Figures are
 * printed, never asserted: the exit status is 0 unless the bench itself could not run.
 *
 * Environment (all optional):
 *   BENCH_DATABASE_URL   Postgres to create the throw-away database in (default postgres://postgres@127.0.0.1:5432/test)
 *   BENCH_MODES          comma list of `server`, `embedded` (default both)
 *   BENCH_DURATION       seconds per load run (default 10)
 *   BENCH_CONNECTIONS    concurrent connections for GET /api/users (default 50)
 *   BENCH_LOGIN_CONNECTIONS  concurrent connections for POST /api/auth/login (default 50)
 *   BENCH_USERS          users to seed, the admin included (default 100)
 *   BENCH_COLD_STARTS    cold starts to time per mode (default 5)
 *   BENCH_SERVER_ENV     extra server environment, `K=V,K=V` (e.g. LOG_LEVEL=silent), for comparisons
 *   BENCH_STEPS          comma list of `users`, `login`, `hammer`, `cold` (default all four)
 *   BENCH_HAMMER_PHASE   seconds per phase of the `hammer` step (default 5; 3 rounds of idle / junk resets from
 *                        fresh addresses / junk resets from one address)
 *   BENCH_WRK=1          also measure GET /api/users with wrk (when installed), as a cross-check of autocannon
 *   BENCH_NODE_ARGS      extra node flags for the server, space-separated (e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof`)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import postgres from 'postgres';
import { freePort } from '../test/support/ports.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const BIN = path.join(ROOT, 'bin', 'tailhouse.js');
const AUTOCANNON = createRequire(import.meta.url).resolve('autocannon/autocannon.js');

const env = process.env;
const int = (name: string, fallback: number) => {
  const v = Number(env[name] ?? fallback);
  if (!Number.isSafeInteger(v) || v <= 0) throw new Error(`${name} must be a positive whole number`);
  return v;
};
const BASE_DATABASE_URL = env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';
const MODES = (env.BENCH_MODES || 'server,embedded').split(',').map((m) => m.trim()).filter(Boolean) as Mode[];
const DURATION_S = int('BENCH_DURATION', 10);
const CONNECTIONS = int('BENCH_CONNECTIONS', 50);
const LOGIN_CONNECTIONS = int('BENCH_LOGIN_CONNECTIONS', 50);
const USERS = int('BENCH_USERS', 100);
const COLD_STARTS = int('BENCH_COLD_STARTS', 5);
const EXTRA_ENV = Object.fromEntries(
  (env.BENCH_SERVER_ENV || '').split(',').filter(Boolean).map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
);
const STEPS = new Set((env.BENCH_STEPS || 'users,login,hammer,cold').split(',').map((s) => s.trim()).filter(Boolean));
for (const s of STEPS) if (!['users', 'login', 'hammer', 'cold'].includes(s)) throw new Error(`BENCH_STEPS: unknown step ${s}`);
const HAMMER_PHASE_S = int('BENCH_HAMMER_PHASE', 5);
const HAMMER_ROUNDS = 3;
const HAMMER_CONNECTIONS = 16;
const WRK = env.BENCH_WRK === '1';
const NODE_ARGS = (env.BENCH_NODE_ARGS || '').split(/\s+/).filter(Boolean);
for (const m of MODES) if (m !== 'server' && m !== 'embedded') throw new Error(`BENCH_MODES: unknown mode ${m}`);

// Targets of the issue (GET /api/users on real Postgres; cold start in both modes).
const TARGET_RPS = 3000;
const TARGET_P99_MS = 50;
const TARGET_COLD_MS = 3000;
/** Login p50 while 16 clients post junk reset tokens, at most this many times its idle p50 (issue 13). */
const TARGET_HAMMER_RATIO = 2;

const ADMIN_EMAIL = 'bench-admin@example.com';
const ADMIN_PASSWORD = 'bench-admin-password-1';
const JWT_SECRET = randomBytes(48).toString('base64url');
/** Whole-run watchdog: whatever hangs, children are ended and temp dirs removed. */
const WATCHDOG_MS = (MODES.length * (4 * DURATION_S + 8 * 20 + 2 * COLD_STARTS * 30 + 3 * HAMMER_ROUNDS * (HAMMER_PHASE_S + 30)) + 120) * 1000;

type Mode = 'server' | 'embedded';

// --- children and clean-up -------------------------------------------------------------------

const children = new Set<ChildProcess>();
/** Process groups of servers not yet seen gone (under npm the leader can exit before the server). */
const serverGroups = new Set<number>();
const cleanups: (() => Promise<void> | void)[] = [];

function killAll(): void {
  for (const pgid of serverGroups) {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // Already gone.
    }
  }
  serverGroups.clear();
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}

let cleaning: Promise<void> | undefined;
/** Set by a signal or the watchdog: the run is being stopped on purpose. */
let interrupted = false;

/** Ends every child, drops the database, removes the temp dirs; every caller awaits the same run. */
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    killAll();
    for (const fn of cleanups.splice(0).reverse()) {
      try {
        await withTimeout(Promise.resolve(fn()), 15_000, 'clean-up step');
      } catch (err) {
        process.stderr.write(`bench: clean-up: ${(err as Error).message}\n`);
      }
    }
  })();
  return cleaning;
}

function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise.finally(() => clearTimeout(timer)),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
    }),
  ]);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function waitExit(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => child.once('exit', () => resolve()));
}

// --- the server under test ---------------------------------------------------------------------

interface Server {
  child: ChildProcess;
  base: string;
  /** ms from spawn to the first 200 from /readyz */
  readyMs: number;
  output: () => string;
}

/**
 * How the server is started: `node bin/tailhouse.js serve` (the load runs), or `npm start`
 * (`tsx src/cli.ts serve` under npm, as the issue words the cold-start target).
 */
type Launcher = 'node' | 'npm';
const LAUNCHERS: Record<Launcher, string> = { node: 'node bin/tailhouse.js serve', npm: 'npm start' };

async function startServer(opts: { dataDir: string; databaseUrl?: string | undefined; port: number; launcher?: Launcher }): Promise<Server> {
  const started = performance.now();
  const [command, args] = opts.launcher === 'npm' ? ['npm', ['start', '--silent']] : [process.execPath, [...NODE_ARGS, BIN, 'serve']];
  const child = spawn(command, args, {
    cwd: ROOT,
    env: {
      PATH: env.PATH,
      HOME: env.HOME,
      PORT: String(opts.port),
      HOST: '127.0.0.1',
      DATA_DIR: opts.dataDir,
      LOG_LEVEL: 'warn',
      JWT_SECRET,
      ADMIN_EMAIL,
      ADMIN_PASSWORD,
      ALERT_INTERVAL_S: '3600',
      // The hammer step sends X-Forwarded-For to play many clients; the other steps send none, so
      // they are counted by their socket address as without it.
      TRUST_PROXY: 'true',
      ...(opts.databaseUrl ? { DATABASE_URL: opts.databaseUrl } : {}),
      ...EXTRA_ENV,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group, so that npm's children can be ended with it if it does not stop.
    detached: true,
  });
  children.add(child);
  child.once('exit', () => children.delete(child));
  if (child.pid) serverGroups.add(child.pid);
  let out = '';
  const keep = (chunk: Buffer) => {
    out = (out + chunk.toString()).slice(-8000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const base = `http://127.0.0.1:${opts.port}`;
  const deadline = started + 60_000;
  while (performance.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`server exited with ${child.exitCode} before it was ready:\n${out}`);
    try {
      const res = await fetch(`${base}/readyz`, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200) return { child, base, readyMs: performance.now() - started, output: () => out };
    } catch {
      // Not listening yet.
    }
    await sleep(10);
  }
  killGroup(child);
  throw new Error(`server not ready within 60 s:\n${out}`);
}

/** SIGKILL to a detached child's whole process group (npm, its shell, tsx and the server). */
function killGroup(child: ChildProcess): void {
  try {
    if (child.pid) process.kill(-child.pid, 'SIGKILL');
  } catch {
    child.kill('SIGKILL');
  }
}

/**
 * SIGTERM to the server's process group, as Ctrl-C in a terminal does: the server finishes the
 * requests in flight and closes both stores. Under `npm start` the server gets that one signal itself
 * (npm does not forward it, and tsx relays only a signal its child did not get). The group is
 * killed only when the graceful stop overruns 15 s.
 */
async function stopServer(server: Server): Promise<void> {
  const pgid = server.child.pid;
  if (!pgid) return;
  if (!groupAlive(pgid)) {
    serverGroups.delete(pgid);
    return;
  }
  try {
    process.kill(-pgid, 'SIGTERM');
  } catch {
    server.child.kill('SIGTERM');
  }
  const deadline = performance.now() + 15_000;
  while (groupAlive(pgid)) {
    if (performance.now() > deadline) {
      process.stderr.write(`bench: server group ${pgid} still running 15 s after SIGTERM; killing it\n`);
      killGroup(server.child);
      break;
    }
    await sleep(20);
  }
  await waitExit(server.child);
  serverGroups.delete(pgid);
}

function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

// --- API helpers -------------------------------------------------------------------------------

async function api(base: string, method: string, p: string, body?: unknown, token?: string): Promise<{ status: number; json: any }> {
  const res = await fetch(base + p, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = text;
  }
  return { status: res.status, json };
}

async function loginAdmin(base: string): Promise<string> {
  const res = await api(base, 'POST', '/api/auth/login', { email: ADMIN_EMAIL, password: ADMIN_PASSWORD });
  if (res.status !== 200) throw new Error(`admin login answered ${res.status}: ${JSON.stringify(res.json)}`);
  return res.json.data.accessToken as string;
}

/** Creates users 2..USERS through the API, a few at a time (each one costs an argon2 hash). */
async function seedUsers(base: string, token: string): Promise<void> {
  const list = await api(base, 'GET', '/api/users?limit=1', undefined, token);
  let next = (list.json?.data?.pagination?.total as number) ?? 1;
  const work = async () => {
    while (next < USERS) {
      const n = next++;
      const res = await api(base, 'POST', '/api/users', { name: `Bench User ${n}`, email: `bench-user-${n}@example.com`, password: `password-${n}-bench` }, token);
      if (res.status !== 201) throw new Error(`creating user ${n} answered ${res.status}: ${JSON.stringify(res.json)}`);
    }
  };
  await Promise.all(Array.from({ length: 4 }, work));
}

// --- CPU accounting (Linux /proc; figures are left out elsewhere) ----------------------------------

interface CpuSample {
  /** user+system clock ticks per process id, with the process name */
  procs: Map<number, { comm: string; ticks: number }>;
  /** the machine's busy and total clock ticks, summed over CPUs */
  busy: number;
  total: number;
  /** ticks the kernel spent in interrupts and softirqs (loopback TCP is mostly here), charged to no process */
  irq: number;
}

function cpuSample(): CpuSample | undefined {
  try {
    const cpu = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1).map(Number);
    const total = cpu.reduce((a, b) => a + b, 0);
    const procs = new Map<number, { comm: string; ticks: number }>();
    for (const entry of fs.readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
        const comm = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
        const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
        procs.set(Number(entry), { comm, ticks: Number(fields[11]) + Number(fields[12]) });
      } catch {
        // Gone meanwhile.
      }
    }
    return { procs, busy: total - (cpu[3] ?? 0) - (cpu[4] ?? 0), total, irq: (cpu[5] ?? 0) + (cpu[6] ?? 0) };
  } catch {
    return undefined;
  }
}

/** Where the CPU went between two samples, in % of one core; `machine` is the busy share of all cores. */
interface CpuUse {
  server: number;
  postgres: number;
  loadgen: number;
  irq: number;
  other: number;
  /** the biggest consumers among the others, by process name */
  others: string;
  machine: number;
}

function cpuUse(a: CpuSample | undefined, b: CpuSample | undefined, pids: { server?: number | undefined; loadgen?: number | undefined }): CpuUse | undefined {
  if (!a || !b || b.total <= a.total) return undefined;
  const cpus = os.cpus().length;
  const wallTicks = (b.total - a.total) / cpus;
  const pct = (ticks: number) => (100 * ticks) / wallTicks;
  let server = 0;
  let postgresTicks = 0;
  let loadgen = 0;
  const byName = new Map<string, number>();
  for (const [pid, after] of b.procs) {
    const used = after.ticks - (a.procs.get(pid)?.ticks ?? 0);
    if (pid === pids.server) server += used;
    else if (pid === pids.loadgen) loadgen += used;
    else if (after.comm === 'postgres') postgresTicks += used;
    else if (pid !== process.pid && used > 0) byName.set(after.comm, (byName.get(after.comm) ?? 0) + used);
  }
  const busyAll = pct(b.busy - a.busy);
  const irq = pct(b.irq - a.irq);
  const attributed = pct(server) + pct(postgresTicks) + pct(loadgen) + irq;
  const others = [...byName]
    .sort((x, y) => y[1] - x[1])
    .slice(0, 3)
    .filter(([, t]) => pct(t) >= 1)
    .map(([name, t]) => `${name} ${pct(t).toFixed(0)}`)
    .join(', ');
  return {
    server: pct(server),
    postgres: pct(postgresTicks),
    loadgen: pct(loadgen),
    irq,
    other: Math.max(0, busyAll - attributed),
    others,
    machine: (100 * (b.busy - a.busy)) / (b.total - a.total),
  };
}

// --- load generator ----------------------------------------------------------------------------

interface LoadResult {
  rps: number;
  p50: number;
  p99: number;
  ok: number;
  non2xx: number;
  errors: number;
  timeouts: number;
  cpu?: CpuUse | undefined;
}

/** Runs autocannon in its own process and reads its JSON summary. */
async function autocannon(args: { serverPid?: number | undefined; url: string; method?: string; headers?: Record<string, string>; body?: string; connections: number; duration: number }): Promise<LoadResult> {
  const argv = [AUTOCANNON, '--json', '--no-progress', '-c', String(args.connections), '-d', String(args.duration), '-t', '10'];
  if (args.method) argv.push('-m', args.method);
  for (const [k, v] of Object.entries(args.headers ?? {})) argv.push('-H', `${k}=${v}`);
  if (args.body !== undefined) argv.push('-b', args.body);
  argv.push(args.url);
  const child = spawn(process.execPath, argv, { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  // CPU is sampled inside the load window, so that start-up and exit of the load generator stay out.
  let before: CpuSample | undefined;
  let after: CpuSample | undefined;
  const t1 = setTimeout(() => (before = cpuSample()), 1000);
  const t2 = setTimeout(() => (after = cpuSample()), Math.max(1500, args.duration * 1000));
  child.once('exit', () => children.delete(child));
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  try {
    await withTimeout(waitExit(child), (args.duration + 30) * 1000, 'autocannon');
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  clearTimeout(t1);
  clearTimeout(t2);
  if (child.exitCode !== 0) throw new Error(`autocannon exited with ${child.exitCode}: ${stderr}`);
  const r = JSON.parse(stdout.slice(stdout.indexOf('{')));
  const ok = Number(r['2xx'] ?? 0);
  return {
    rps: ok / Number(r.duration || args.duration),
    p50: Number(r.latency.p50),
    p99: Number(r.latency.p99),
    ok,
    non2xx: Number(r.non2xx ?? 0),
    errors: Number(r.errors ?? 0),
    timeouts: Number(r.timeouts ?? 0),
    cpu: cpuUse(before, after, { server: args.serverPid, loadgen: child.pid }),
  };
}

/** The same GET with wrk (one thread, same connections), when BENCH_WRK=1 and wrk is installed. */
async function wrk(args: { url: string; headers: Record<string, string>; connections: number; duration: number }): Promise<LoadResult | string> {
  const argv = ['-t1', `-c${args.connections}`, `-d${args.duration}s`, '--latency', '--timeout', '10s'];
  for (const [k, v] of Object.entries(args.headers)) argv.push('-H', `${k}: ${v}`);
  argv.push(args.url);
  const child = spawn('wrk', argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let out = '';
  child.stdout!.on('data', (c: Buffer) => (out += c.toString()));
  const spawned = await new Promise<boolean>((resolve) => {
    child.once('spawn', () => resolve(true));
    child.once('error', () => resolve(false));
  });
  if (!spawned) return 'wrk is not installed (apt-get install -y wrk)';
  try {
    await withTimeout(waitExit(child), (args.duration + 30) * 1000, 'wrk');
  } catch (err) {
    child.kill('SIGKILL');
    throw err;
  }
  const ms = (label: string) => {
    const m = new RegExp(`^\\s*${label}%\\s+([\\d.]+)(us|ms|s)\\s*$`, 'm').exec(out);
    if (!m) return NaN;
    return Number(m[1]) * (m[2] === 'us' ? 0.001 : m[2] === 's' ? 1000 : 1);
  };
  const total = Number(/(\d+) requests in/.exec(out)?.[1] ?? 0);
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  const seconds = Number(/requests in ([\d.]+)s/.exec(out)?.[1] ?? args.duration);
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  return {
    rps: (total - non2xx) / seconds,
    p50: ms('50'),
    p99: ms('99'),
    ok: total - non2xx,
    non2xx,
    errors: errors ? Number(errors[1]) + Number(errors[2]) + Number(errors[3]) : 0,
    timeouts: errors ? Number(errors[4]) : 0,
  };
}

// --- login while reset-password is hammered ----------------------------------------------------

interface HammerResult {
  /** 2xx/4xx answers per second by status */
  statuses: Record<string, number>;
  rps: number;
}

/**
 * HAMMER_CONNECTIONS clients posting junk reset tokens for `seconds`, from autocannon's API in a
 * child process (its CLI cannot vary a header per request): with `addresses: 'fresh'` every
 * request comes from another X-Forwarded-For address, so no per-address throttle ever engages and
 * only the cost of a junk token shows; with `one`, all come from one address.
 */
async function hammerResets(base: string, seconds: number, addresses: 'fresh' | 'one'): Promise<HammerResult> {
  const script = `
    const autocannon = require(${JSON.stringify(path.dirname(AUTOCANNON))});
    const { randomBytes } = require('node:crypto');
    let n = 0;
    const setupRequest = (req) => ({
      ...req,
      headers: { ...req.headers, 'content-type': 'application/json', 'x-forwarded-for': ${addresses === 'fresh' ? '`10.${(++n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`' : "'10.255.255.254'"} },
      body: JSON.stringify({ token: randomBytes(32).toString('base64url'), newPassword: 'junk-password-1' }),
    });
    autocannon({ url: ${JSON.stringify(`${base}/api/auth/reset-password`)}, connections: ${HAMMER_CONNECTIONS}, duration: ${seconds}, timeout: 10,
      requests: [{ method: 'POST', setupRequest }] }, (err, r) => {
      if (err) { console.error(err); process.exit(1); }
      process.stdout.write(JSON.stringify({ statusCodeStats: r.statusCodeStats, duration: r.duration }));
    });`;
  const child = spawn(process.execPath, ['-e', script], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  children.add(child);
  child.once('exit', () => children.delete(child));
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on('data', (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  await withTimeout(waitExit(child), (seconds + 30) * 1000, 'reset hammer');
  if (child.exitCode !== 0) throw new Error(`reset hammer exited with ${child.exitCode}: ${stderr}`);
  const r = JSON.parse(stdout) as { statusCodeStats: Record<string, { count: number }>; duration: number };
  const statuses = Object.fromEntries(Object.entries(r.statusCodeStats).map(([code, { count }]) => [code, count / r.duration]));
  return { statuses, rps: Object.values(statuses).reduce((a, b) => a + b, 0) };
}

/** One client signing in again and again for `seconds` (never throttled: it always succeeds); latencies in ms. */
async function timeLogins(base: string, seconds: number, email: string, password: string): Promise<number[]> {
  const times: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const started = performance.now();
    const res = await api(base, 'POST', '/api/auth/login', { email, password });
    if (res.status !== 200) throw new Error(`login answered ${res.status}: ${JSON.stringify(res.json)}`);
    times.push(performance.now() - started);
  }
  return times;
}

type HammerPhase = 'idle' | 'fresh addresses' | 'one address';

interface HammerReport {
  /** per phase kind: the login p50 of each round, in ms */
  p50s: Record<HammerPhase, number[]>;
  /** per hammered phase kind: the hammer's answers per second by status, summed over rounds */
  hammer: Partial<Record<HammerPhase, HammerResult[]>>;
}

/**
 * Login latency idle and while reset-password is hammered, the phases alternating in the same run
 * (idle, fresh addresses, idle, one address, …) so that the shared machine's load falls on both.
 */
async function hammerStep(base: string, log: (line: string) => void): Promise<HammerReport> {
  const [email, password] = [ADMIN_EMAIL, ADMIN_PASSWORD];
  await timeLogins(base, 1, email, password); // warm-up
  const report: HammerReport = { p50s: { idle: [], 'fresh addresses': [], 'one address': [] }, hammer: {} };
  for (let round = 1; round <= HAMMER_ROUNDS; round++) {
    for (const phase of ['idle', 'fresh addresses', 'idle', 'one address'] as const) {
      // The hammer runs a second longer than the logins, which start once it is under way.
      const hammer = phase === 'idle' ? undefined : hammerResets(base, HAMMER_PHASE_S + 1, phase === 'fresh addresses' ? 'fresh' : 'one');
      if (hammer) await sleep(500);
      const times = await timeLogins(base, HAMMER_PHASE_S, email, password);
      const p50 = median(times);
      report.p50s[phase].push(p50);
      let line = `round ${round}, ${phase.padEnd(15)}: ${times.length} logins, p50 ${fmtMs(p50)} ms, p99 ${fmtMs(percentile(times, 0.99))} ms`;
      if (hammer) {
        const h = await hammer;
        (report.hammer[phase] ??= []).push(h);
        line += `; junk resets ${fmtInt(h.rps)}/s (${Object.entries(h.statuses).map(([code, rate]) => `${code}: ${fmtInt(rate)}/s`).join(', ')})`;
      }
      log(line);
    }
  }
  return report;
}

function describeHammer(r: HammerReport): string[] {
  const idle = median(r.p50s.idle);
  return (['fresh addresses', 'one address'] as const).map((phase) => {
    const hammered = median(r.p50s[phase]);
    const ratio = hammered / idle;
    return `login p50 idle ${fmtMs(idle)} ms, with 16 clients posting junk reset tokens from ${phase} ${fmtMs(hammered)} ms: ${ratio.toFixed(2)}x (target ≤ ${TARGET_HAMMER_RATIO}x: ${ratio <= TARGET_HAMMER_RATIO ? 'ok' : 'missed'})`;
  });
}

// --- reporting ---------------------------------------------------------------------------------

const fmtInt = (n: number) => Math.round(n).toLocaleString('en-US');
const fmtMs = (n: number) => (n >= 100 ? fmtInt(n) : n.toFixed(n >= 10 ? 0 : 1));
const percentile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))]!;
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

function describeLoad(r: LoadResult, target?: { rps: number; p99: number }): string {
  let line = `${fmtInt(r.rps)} req/s`;
  if (target) line += ` (target ${fmtInt(target.rps)}: ${(r.rps / target.rps).toFixed(2)}x)`;
  line += `  p50 ${fmtMs(r.p50)} ms  p99 ${fmtMs(r.p99)} ms`;
  if (target) line += ` (target ${target.p99}: ${r.p99 <= target.p99 ? 'ok' : `missed, ${(r.p99 / target.p99).toFixed(2)}x`})`;
  if (r.cpu) {
    const c = r.cpu;
    const perRequest = (pct: number) => (r.rps > 0 ? `${fmtInt((pct / 100 / r.rps) * 1e6)} µs` : '-');
    line += `\n    CPU (% of one core): server ${c.server.toFixed(0)}, postgres ${c.postgres.toFixed(0)}, autocannon ${c.loadgen.toFixed(0)}, kernel irq ${c.irq.toFixed(0)}, other ${c.other.toFixed(0)}${c.others ? ` (${c.others})` : ''}; machine ${c.machine.toFixed(0)}% busy`;
    line += `; per request: server ${perRequest(c.server)}, postgres ${perRequest(c.postgres)}`;
    if (c.other > 25) line += `  [!] other processes took ${c.other.toFixed(0)}% of a core: figures disturbed`;
  }
  const bad = r.non2xx + r.errors + r.timeouts;
  if (bad > 0) line += `  [!] ${r.non2xx} non-2xx, ${r.errors} errors, ${r.timeouts} timeouts`;
  return line;
}

interface ModeReport {
  mode: Mode;
  users?: LoadResult | undefined;
  login?: LoadResult | undefined;
  hammer?: HammerReport | undefined;
  cold: Record<Launcher, number[]>;
}

// --- one mode ----------------------------------------------------------------------------------

async function createDatabase(): Promise<string> {
  const name = `tailhouse_bench_${process.pid}_${randomBytes(3).toString('hex')}`;
  const admin = postgres(BASE_DATABASE_URL, { max: 1, onnotice: () => {}, connect_timeout: 10 });
  try {
    await admin.unsafe(`create database ${name}`);
  } finally {
    await admin.end({ timeout: 5 });
  }
  cleanups.push(async () => {
    const again = postgres(BASE_DATABASE_URL, { max: 1, onnotice: () => {}, connect_timeout: 10 });
    try {
      await again.unsafe(`drop database if exists ${name} with (force)`);
    } finally {
      await again.end({ timeout: 5 });
    }
  });
  const url = new URL(BASE_DATABASE_URL);
  url.pathname = `/${name}`;
  return url.toString();
}

async function runMode(mode: Mode): Promise<ModeReport> {
  const log = (line: string) => process.stdout.write(`[${mode}] ${line}\n`);
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `tailhouse-bench-${mode}-`));
  cleanups.push(() => fs.rmSync(dataDir, { recursive: true, force: true }));
  const databaseUrl = mode === 'server' ? await createDatabase() : undefined;
  const port = await freePort();

  log(`first start (creates the schemas) on ${dataDir}${databaseUrl ? ` and ${new URL(databaseUrl).pathname.slice(1)}` : ''}`);
  let server = await startServer({ dataDir, databaseUrl, port });
  log(`ready after ${fmtInt(server.readyMs)} ms`);
  try {
    let token = await loginAdmin(server.base);
    await seedUsers(server.base, token);
    log(`seeded ${USERS} users`);
    token = await loginAdmin(server.base);

    let users: LoadResult | undefined;
    if (STEPS.has('users')) {
      const usersUrl = `${server.base}/api/users?limit=20`;
      const check = await api(server.base, 'GET', '/api/users?limit=20', undefined, token);
      if (check.status !== 200 || check.json.data.users.length !== 20) throw new Error(`GET /api/users?limit=20 answered ${check.status}`);
      const headers = { authorization: `Bearer ${token}` };
      // Warm-up: JIT, connection pool, Postgres caches.
      await autocannon({ url: usersUrl, headers, connections: CONNECTIONS, duration: 3 });
      log(`GET /api/users?limit=20: ${CONNECTIONS} connections, ${DURATION_S} s ...`);
      users = await autocannon({ serverPid: server.child.pid, url: usersUrl, headers, connections: CONNECTIONS, duration: DURATION_S });
      log(`GET /api/users?limit=20   ${describeLoad(users, mode === 'server' ? { rps: TARGET_RPS, p99: TARGET_P99_MS } : undefined)}`);
      if (WRK) {
        const cross = await wrk({ url: usersUrl, headers, connections: CONNECTIONS, duration: DURATION_S });
        log(`GET /api/users?limit=20   wrk cross-check: ${typeof cross === 'string' ? cross : describeLoad(cross)}`);
      }
    }

    let login: LoadResult | undefined;
    if (STEPS.has('login')) {
      log(`POST /api/auth/login: ${LOGIN_CONNECTIONS} connections, ${DURATION_S} s ...`);
      login = await autocannon({
        serverPid: server.child.pid,
        url: `${server.base}/api/auth/login`,
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ email: ADMIN_EMAIL, password: ADMIN_PASSWORD }),
        connections: LOGIN_CONNECTIONS,
        duration: DURATION_S,
      });
      log(`POST /api/auth/login      ${describeLoad(login)}`);
    }

    let hammer: HammerReport | undefined;
    if (STEPS.has('hammer')) {
      log(`login under reset-password hammering: ${HAMMER_ROUNDS} rounds of ${HAMMER_PHASE_S} s phases, ${HAMMER_CONNECTIONS} hammering clients ...`);
      hammer = await hammerStep(server.base, log);
      for (const line of describeHammer(hammer)) log(line);
    }

    const cold: Record<Launcher, number[]> = { node: [], npm: [] };
    if (STEPS.has('cold')) {
      for (const launcher of ['node', 'npm'] as const) {
        for (let i = 0; i < COLD_STARTS; i++) {
          await stopServer(server);
          server = await startServer({ dataDir, databaseUrl, port: await freePort(), launcher });
          cold[launcher].push(server.readyMs);
        }
        const times = cold[launcher];
        const max = Math.max(...times);
        log(
          `cold start, ${LAUNCHERS[launcher]}, spawn to first 200 from /readyz, ${times.length} runs: median ${fmtInt(median(times))} ms, max ${fmtInt(max)} ms ` +
            `(target ${fmtInt(TARGET_COLD_MS)}: ${max <= TARGET_COLD_MS ? 'ok' : 'missed'})  [${times.map(fmtInt).join(', ')}]`,
        );
      }
      // The data survived the restarts.
      const after = await api(server.base, 'GET', '/api/users?limit=1', undefined, await loginAdmin(server.base));
      if (after.json?.data?.pagination?.total !== USERS) throw new Error(`after restarts the user count is ${after.json?.data?.pagination?.total}`);
    }
    return { mode, users, login, hammer, cold };
  } catch (err) {
    if (!interrupted) process.stderr.write(`[${mode}] server output:\n${server.output()}\n`);
    throw err;
  } finally {
    await stopServer(server);
  }
}

// --- main --------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const watchdog = setTimeout(() => {
    interrupted = true;
    process.stderr.write(`bench: watchdog: still running after ${WATCHDOG_MS / 1000} s; stopping\n`);
    void cleanup().finally(() => process.exit(2));
  }, WATCHDOG_MS);
  watchdog.unref();
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => {
      interrupted = true;
      process.stderr.write(`bench: ${signal}; cleaning up\n`);
      void cleanup().finally(() => process.exit(130));
    });
  }

  process.stdout.write(
    `bench/auth: ${os.cpus().length} CPUs (${os.cpus()[0]?.model ?? '?'}), node ${process.version}; ` +
      `autocannon ${DURATION_S} s, ${CONNECTIONS} connections (login ${LOGIN_CONNECTIONS}); ${USERS} users; modes ${MODES.join(', ')}` +
      (Object.keys(EXTRA_ENV).length ? `; server env ${JSON.stringify(EXTRA_ENV)}` : '') +
      (NODE_ARGS.length ? `; node flags ${NODE_ARGS.join(' ')}` : '') +
      '\n',
  );
  const reports: ModeReport[] = [];
  try {
    for (const mode of MODES) reports.push(await runMode(mode));
  } finally {
    await cleanup();
    clearTimeout(watchdog);
  }

  process.stdout.write('\nsummary\n');
  const rows = [['mode', 'endpoint', 'req/s', 'p50 ms', 'p99 ms', 'vs target']];
  for (const r of reports) {
    const target = r.mode === 'server';
    if (r.users) {
      rows.push([
        r.mode,
        'GET /api/users?limit=20',
        fmtInt(r.users.rps),
        fmtMs(r.users.p50),
        fmtMs(r.users.p99),
        target ? `${(r.users.rps / TARGET_RPS).toFixed(2)}x of ${fmtInt(TARGET_RPS)} req/s, p99 ${r.users.p99 <= TARGET_P99_MS ? 'ok' : 'missed'}` : '(target is for server mode)',
      ]);
    }
    if (r.login) rows.push([r.mode, 'POST /api/auth/login', fmtInt(r.login.rps), fmtMs(r.login.p50), fmtMs(r.login.p99), '(no target)']);
    if (r.hammer) {
      const idle = median(r.hammer.p50s.idle);
      rows.push([r.mode, 'login, idle (1 client)', '', fmtMs(idle), '', '']);
      for (const phase of ['fresh addresses', 'one address'] as const) {
        const ratio = median(r.hammer.p50s[phase]) / idle;
        rows.push([
          r.mode,
          `login, 16 junk resetters (${phase})`,
          '',
          fmtMs(median(r.hammer.p50s[phase])),
          '',
          `${ratio.toFixed(2)}x of idle p50 (target ≤ ${TARGET_HAMMER_RATIO}x), ${ratio <= TARGET_HAMMER_RATIO ? 'ok' : 'missed'}`,
        ]);
      }
    }
    for (const launcher of ['node', 'npm'] as const) {
      const times = r.cold[launcher];
      if (times.length === 0) continue;
      const max = Math.max(...times);
      rows.push([
        r.mode,
        `cold start, ${LAUNCHERS[launcher]} (${times.length}x)`,
        '',
        `median ${fmtInt(median(times))}`,
        `max ${fmtInt(max)}`,
        `${(max / TARGET_COLD_MS).toFixed(2)}x of ${fmtInt(TARGET_COLD_MS)} ms, ${max <= TARGET_COLD_MS ? 'ok' : 'missed'}`,
      ]);
    }
  }
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => row[i]!.length)));
  for (const row of rows) process.stdout.write(`${row.map((cell, i) => cell.padEnd(widths[i]!)).join('  ')}\n`);
}

main().catch(async (err: unknown) => {
  // After a signal or the watchdog, the failure is only the children being killed: not worth a stack.
  if (!interrupted) process.stderr.write(`bench: ${(err as Error).stack ?? String(err)}\n`);
  await cleanup();
  process.exit(interrupted ? 130 : 1);
});
