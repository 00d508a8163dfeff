/**
 * A `node bin/tailhouse.js serve` child in embedded mode, for the benches that time its HTTP API:
 * started on a free port of 127.0.0.1 and waited for until ready, stopped, its CPU and memory read
 * from Linux /proc, and an export downloaded while its memory is sampled.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePort } from '../../test/support/ports.js';
import { killAll, machineBusyTicks, terminate } from './measure.js';
import { sleep, tail } from './util.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
export const BIN = path.join(ROOT, 'bin', 'tailhouse.js');

export interface Admin {
  ADMIN_EMAIL: string;
  ADMIN_PASSWORD: string;
  JWT_SECRET: string;
}

/** Embedded mode on `dataDir`; the environment is built from scratch, so no DATABASE_URL or CLICKHOUSE_URL of the caller leaks in. */
export function childEnv(dataDir: string, admin: Admin, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir, ...admin, ...extra };
}

export interface Server {
  child: ChildProcess;
  base: string;
  pid: number;
  /** In a process group of its own: killed as a group. */
  detached: boolean;
  /** The last 8,000 characters of its stdout and stderr. */
  output: () => string;
}

/**
 * A bench's end on an error: the error, the server's last output, the server and every measured
 * child killed, exit status 1.
 */
export function failBench(name: string, err: unknown, server: Server | undefined): never {
  console.error(`bench/${name}: ${(err as Error).stack ?? err}`);
  if (server) {
    console.error(`server output: ${tail(server.output(), 10)}`);
    killServer(server);
  }
  killAll();
  process.exit(1);
}

/** SIGKILL to the server (its process group when detached); nothing if it is gone. */
export function killServer(s: Server): void {
  try {
    if (s.detached) process.kill(-s.pid, 'SIGKILL');
    else s.child.kill('SIGKILL');
  } catch {
    // Already gone.
  }
}

/**
 * Spawns `serve` with `env` (see childEnv) on a free port and waits up to 120 s for /readyz to
 * answer 200. `onSpawn` sees the server as soon as it is spawned, before it is ready, so that a
 * caller can kill it and show its output whatever happens next.
 */
export async function startServer(env: NodeJS.ProcessEnv, options: { detached?: boolean; onSpawn?: (s: Server) => void } = {}): Promise<Server> {
  const { detached = false, onSpawn } = options;
  const port = await freePort();
  const child = spawn(process.execPath, [BIN, 'serve'], {
    cwd: ROOT,
    env: { ...env, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn', ALERT_INTERVAL_S: '3600' },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
  });
  let out = '';
  const keep = (chunk: Buffer) => {
    out = (out + chunk.toString()).slice(-8000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const s: Server = { child, base: `http://127.0.0.1:${port}`, pid: child.pid!, detached, output: () => out };
  onSpawn?.(s);
  const deadline = performance.now() + 120_000;
  while (performance.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`serve exited with ${child.exitCode} before it was ready: ${tail(out)}`);
    try {
      const res = await fetch(`${s.base}/readyz`, { signal: AbortSignal.timeout(2000) });
      await res.arrayBuffer();
      if (res.status === 200) return s;
    } catch {
      // Not listening yet.
    }
    await sleep(20);
  }
  killServer(s);
  throw new Error(`serve not ready within 120 s: ${tail(out)}`);
}

/** SIGTERM, and SIGKILL after 30 s; resolves once it has exited, with the time that took in ms (0 if it was gone). */
export async function stopServer(s: Server): Promise<number> {
  const started = performance.now();
  if (s.child.exitCode !== null || s.child.signalCode !== null) return 0;
  await terminate(s.child, new Promise((r) => s.child.once('exit', r)), () => killServer(s));
  return performance.now() - started;
}

/** utime + stime of a process in clock ticks (1/100 s), or NaN once it is gone. */
export function cpuTicks(pid: number): number {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]);
  } catch {
    return NaN;
  }
}

/**
 * Runs `work` and measures the CPU the rest of the machine used meanwhile, in cores: the machine's
 * busy time less the process `pid`'s (the server measured) and this process's. Above about 0.1 the
 * figures shared the machine.
 */
export async function withOtherLoad<T>(pid: number, work: () => Promise<T>): Promise<{ value: T; otherCores: number }> {
  const busy0 = machineBusyTicks();
  const server0 = cpuTicks(pid);
  const self0 = process.cpuUsage();
  const started = performance.now();
  const value = await work();
  const wallS = (performance.now() - started) / 1000;
  const self = process.cpuUsage(self0);
  const ownTicks = cpuTicks(pid) - server0 + (self.user + self.system) / 10_000;
  return { value, otherCores: Math.max(0, (machineBusyTicks() - busy0 - ownTicks) / 100 / wallS) };
}

/** A line of /proc/PID/status in MiB (VmRSS, VmHWM, RssAnon), NaN where unreadable. */
export function statusMb(pid: number, field: string): number {
  try {
    const m = new RegExp(`${field}:\\s+(\\d+) kB`).exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

/**
 * Waits until the server uses less than 5 % of a core over a second (chDB merges the parts written
 * before it opened them, in the background, once it has them open), at most `maxMs`. Returns the
 * time waited, the CPU seconds the server used meanwhile, and whether it went idle.
 */
export async function waitIdle(pid: number, maxMs: number): Promise<{ waitedMs: number; cpuS: number; idle: boolean }> {
  const started = performance.now();
  const first = cpuTicks(pid);
  let before = first;
  while (performance.now() - started < maxMs) {
    await sleep(1000);
    const now = cpuTicks(pid);
    if (now - before <= 5) return { waitedMs: performance.now() - started, cpuS: (now - first) / 100, idle: true };
    before = now;
  }
  return { waitedMs: performance.now() - started, cpuS: (cpuTicks(pid) - first) / 100, idle: false };
}

/** One call of the JSON API; `json` is the body parsed, or its text where it is not JSON. */
export async function api(base: string, method: string, p: string, token?: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(base + p, {
    method,
    headers: { ...(body === undefined ? {} : { 'content-type': 'application/json' }), ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(120_000),
  });
  const text = await res.text();
  let json: unknown = text;
  try {
    json = JSON.parse(text);
  } catch {
    // Not JSON: kept as text.
  }
  return { status: res.status, json };
}

/** Logs `admin` in; its access token. */
export async function login(base: string, admin: Admin): Promise<string> {
  const res = await api(base, 'POST', '/api/auth/login', undefined, { email: admin.ADMIN_EMAIL, password: admin.ADMIN_PASSWORD });
  if (res.status !== 200) throw new Error(`admin login answered ${res.status}: ${JSON.stringify(res.json)}`);
  return res.json.data.accessToken as string;
}

export interface Download {
  format: 'csv' | 'json';
  rows: number;
  bytes: number;
  ms: number;
  firstByteMs: number;
  rssBeforeMb: number;
  /** The largest VmRSS sampled every 10 ms. */
  rssPeakSampledMb: number;
  /** VmHWM after the download, the peak having been reset to the current RSS just before it (NaN if the reset is not allowed). */
  hwmMb: number;
  anonBeforeMb: number;
  anonPeakMb: number;
  rssAfterMb: number;
}

/**
 * Downloads `url` with node:http, timed from the request to the last byte and counting line feeds,
 * while the memory of the server `pid` is sampled; fails once the connection has been idle for `timeoutMs`.
 */
export async function download(url: string, format: 'csv' | 'json', pid: number, timeoutMs: number): Promise<Download> {
  const rssBeforeMb = statusMb(pid, 'VmRSS');
  const anonBeforeMb = statusMb(pid, 'RssAnon');
  let hwmReset = false;
  try {
    fs.writeFileSync(`/proc/${pid}/clear_refs`, '5'); // resets VmHWM to the current RSS
    hwmReset = true;
  } catch {
    // Not allowed here: the sampled peak is the figure.
  }
  let rssPeak = rssBeforeMb;
  let anonPeak = anonBeforeMb;
  const sampleNow = () => {
    rssPeak = Math.max(rssPeak, statusMb(pid, 'VmRSS') || 0);
    anonPeak = Math.max(anonPeak, statusMb(pid, 'RssAnon') || 0);
  };
  const sampler = setInterval(sampleNow, 10);
  const started = performance.now();
  let firstByteMs = 0;
  let bytes = 0;
  let lines = 0;
  try {
    await new Promise<void>((resolve, reject) => {
      const req = http.get(url, (res) => {
        if (res.statusCode !== 200) {
          res.resume();
          reject(new Error(`download answered ${res.statusCode}`));
          return;
        }
        res.on('data', (chunk: Buffer) => {
          if (!firstByteMs) firstByteMs = performance.now() - started;
          bytes += chunk.length;
          for (let i = chunk.indexOf(10); i !== -1; i = chunk.indexOf(10, i + 1)) lines++;
        });
        res.once('end', () => resolve());
        res.once('error', reject);
      });
      req.once('error', reject);
      req.setTimeout(timeoutMs, () => req.destroy(new Error('download timed out')));
    });
  } finally {
    clearInterval(sampler);
  }
  const ms = performance.now() - started;
  sampleNow();
  return {
    format,
    // Records end with a line feed (CSV: CRLF, after a header row); no generated value holds one.
    rows: format === 'csv' ? lines - 1 : lines,
    bytes,
    ms,
    firstByteMs,
    rssBeforeMb,
    rssPeakSampledMb: rssPeak,
    hwmMb: hwmReset ? statusMb(pid, 'VmHWM') : NaN,
    anonBeforeMb,
    anonPeakMb: anonPeak,
    rssAfterMb: statusMb(pid, 'VmRSS'),
  };
}
