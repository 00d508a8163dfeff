/**
 * The data of bench/query (and of bench/worst-request, which can reuse a DATA_DIR that bench/query
 * kept): nginx access logs of one main domain and 9 others, times over the 30 days ending now,
 * loaded on a fresh DATA_DIR through the real CLI (`tailhouse domains add`, `tailhouse import`);
 * optionally a fleet of small domains (a few hundred lines each over the last 24 hours, one file
 * routed by `$host`), registered through the API because the CLI adds one domain per process.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ACCESS_FORMAT, accessLogBlocks, TIME_OFFSET } from './access-log.js';
import { spawnMeasured, type Measured } from './measure.js';
import { api, BIN, childEnv, login, ROOT, startServer, stopServer, type Admin, type Server } from './serve-child.js';
import { fmt, tail } from './util.js';
import { DAY_MS } from '../../core/durations.js';

export const MAIN_DOMAIN = 'shop.example.com';
export const OTHER_DOMAINS = 9;
export const otherDomain = (i: number) => `site${i}.example.net`;
/** The fleet's small domains, 1-based. */
export const fleetDomain = (i: number) => `f${i}.fleet.example.org`;
/** The fleet's file: the generated lines with the domain in front, so that one import routes them all. */
export const FLEET_FORMAT = `$host ${ACCESS_FORMAT}`;
/** Lines of the main domain whose URL holds the rare marker the search looks for. */
export const NEEDLES = 10;
export const NEEDLE = 'zq7needle';
/** A word in most URLs (pages and API calls): the search's worst case, no target. */
export const COMMON = 'products';

/** The administrator of the benches' DATA_DIR: the same on every run, so a kept DATA_DIR can be signed into again. */
export const BENCH_ADMIN: Admin = { ADMIN_EMAIL: 'bench-admin@example.com', ADMIN_PASSWORD: 'bench-admin-password-1', JWT_SECRET: randomBytes(48).toString('base64url') };

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const pad2 = (n: number) => (n < 10 ? `0${n}` : String(n));
/** Minutes east of UTC of TIME_OFFSET (`+0100` → 60). */
const OFFSET_MIN = (TIME_OFFSET.startsWith('-') ? -1 : 1) * (Number(TIME_OFFSET.slice(1, 3)) * 60 + Number(TIME_OFFSET.slice(3, 5)));

/** `$time_local` of the epoch second `s`, written in TIME_OFFSET, as the generator writes it. */
function timeLocal(s: number): string {
  const d = new Date(s * 1000 + OFFSET_MIN * 60_000);
  return `${pad2(d.getUTCDate())}/${MONTHS[d.getUTCMonth()]}/${d.getUTCFullYear()}:${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}:${pad2(d.getUTCSeconds())} ${TIME_OFFSET}`;
}

interface LogShape {
  /** Lines spread evenly that get the marker NEEDLE in front of their path (`/zq7needle/products/…`). */
  needles?: number;
  /** How far back the times reach (default 30 days). */
  spanMs?: number;
  /** Written with a space in front of line i (FLEET_FORMAT's `$host`). */
  hostOf?: (i: number) => string;
}

/**
 * Writes `lines` lines of bench/lib/access-log.ts's log to `file`, each line's $time_local
 * replaced so that line i is at end − span + i × (span / lines): the generator's own times
 * end at today's UTC midnight, the benches need them to end now.
 */
export function writeLog(file: string, lines: number, end: number, { needles = 0, spanMs = 30 * DAY_MS, hostOf }: LogShape = {}): void {
  const start = end - spanMs;
  const step = spanMs / lines;
  const needleAt = new Set(Array.from({ length: needles }, (_, k) => Math.floor(((k + 0.5) * lines) / needles)));
  const fd = fs.openSync(file, 'w');
  let i = 0;
  let lastSecond = -1;
  let lastTime = '';
  try {
    for (const block of accessLogBlocks(lines)) {
      const out: string[] = [];
      let from = 0;
      for (let nl = block.indexOf('\n'); nl !== -1; from = nl + 1, nl = block.indexOf('\n', from), i++) {
        const open = block.indexOf('[', from);
        const close = block.indexOf(']', open);
        const second = Math.floor((start + Math.floor(i * step)) / 1000);
        if (second !== lastSecond) {
          lastSecond = second;
          lastTime = timeLocal(second);
        }
        let rest = block.slice(close, nl + 1);
        if (needleAt.has(i)) {
          const path = rest.indexOf(' ', rest.indexOf('"')) + 1; // after `"METHOD `
          rest = `${rest.slice(0, path)}/${NEEDLE}${rest.slice(path)}`;
        }
        if (hostOf) out.push(hostOf(i), ' ');
        out.push(block.slice(from, open + 1), lastTime, rest);
      }
      fs.writeSync(fd, out.join(''));
    }
  } finally {
    fs.closeSync(fd);
  }
  if (i !== lines) throw new Error(`wrote ${i} lines instead of ${lines}`);
}

/** `node bin/tailhouse.js ARGS` on `dataDir` as BENCH_ADMIN's process, measured; fails on a non-zero exit. */
export async function tailhouse(args: string[], dataDir: string): Promise<Measured> {
  const m = await spawnMeasured(process.execPath, [BIN, ...args], { cwd: ROOT, env: childEnv(dataDir, BENCH_ADMIN) }).done;
  if (m.code !== 0) throw new Error(`tailhouse ${args.slice(0, 2).join(' ')} failed (exit ${m.code ?? m.signal}): ${tail(m.stderr || m.stdout)}`);
  return m;
}

export interface Fleet {
  /** Small domains. */
  domains: number;
  /** Lines of each, over the last 24 hours. */
  linesEach: number;
}

export interface QueryLogs {
  mainLog: string;
  otherLogs: string[];
  /** The fleet's lines in one file, domain by domain in turn (FLEET_FORMAT). */
  fleet?: Fleet & { log: string };
  generateMs: number;
}

/**
 * Step 1: the main domain's log (`rows` lines, NEEDLES of them marked) and the others' (a tenth
 * each), ending at `end`, in `dir`; with `fleet`, its file too.
 */
export function writeQueryLogs(dir: string, rows: number, end: number, fleet?: Fleet): QueryLogs {
  const otherRows = Math.max(1, Math.round(rows / 10));
  const started = performance.now();
  const mainLog = path.join(dir, 'main-access.log');
  const otherLog = path.join(dir, 'other-access.log');
  writeLog(mainLog, rows, end, { needles: NEEDLES });
  writeLog(otherLog, otherRows, end);
  // The same lines for every other domain, each its own file (the import keeps a checkpoint per file).
  const otherLogs = Array.from({ length: OTHER_DOMAINS }, (_, i) => {
    const file = path.join(dir, `site${i + 1}-access.log`);
    fs.copyFileSync(otherLog, file);
    return file;
  });
  fs.rmSync(otherLog);
  let fleetLog: QueryLogs['fleet'];
  if (fleet && fleet.domains > 0) {
    const log = path.join(dir, 'fleet-access.log');
    writeLog(log, fleet.domains * fleet.linesEach, end, { spanMs: DAY_MS, hostOf: (i) => fleetDomain((i % fleet.domains) + 1) });
    fleetLog = { ...fleet, log };
  }
  return { mainLog, otherLogs, fleet: fleetLog, generateMs: performance.now() - started };
}

export interface QueryLoad {
  /** Domain ids by name, the fleet's included. */
  ids: Map<string, number>;
  /** The CLI's `domains add` calls (the main domain and the others). */
  domainsMs: number;
  /** The fleet's domains registered through POST /api/domains, a `serve` child started and stopped for it included. */
  fleetDomainsMs: number;
  importMs: number;
  /** The main domain's import first. */
  imports: { name: string; m: Measured; summary: string }[];
}

/**
 * POST /api/domains for each name, 8 at a time, on a `serve` child of `dataDir` started for it;
 * the ids by name. `onSpawn` sees the child (for the caller's clean-up on a failure).
 */
async function registerThroughApi(dataDir: string, names: string[], onSpawn: (s: Server | undefined) => void): Promise<Map<string, number>> {
  const s = await startServer(childEnv(dataDir, BENCH_ADMIN), { detached: true, onSpawn });
  try {
    const token = await login(s.base, BENCH_ADMIN);
    const ids = new Map<string, number>();
    let next = 0;
    const worker = async () => {
      for (let i = next++; i < names.length; i = next++) {
        const res = await api(s.base, 'POST', '/api/domains', token, { name: names[i] });
        if (res.status !== 201) throw new Error(`POST /api/domains ${names[i]} answered ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`);
        ids.set(names[i]!, res.json.data.id as number);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    return ids;
  } finally {
    await stopServer(s);
    onSpawn(undefined);
  }
}

/**
 * Step 2: the domains registered and the logs imported on `dataDir`, one process after the other;
 * each import must store every line. The main domain and the others are added by `tailhouse
 * domains add`, one process each (each opens both embedded stores: 2–6 s a call on the busy
 * 2-core machine, so 1,000 would take 35–95 minutes, and the CLI has no bulk form), the fleet through the API of a `serve` child; the fleet's
 * file is one `tailhouse import` without `--domain` (lines routed by `$host`).
 */
export async function loadQueryData(dataDir: string, logs: QueryLogs, rows: number, onServer: (s: Server | undefined) => void = () => {}): Promise<QueryLoad> {
  const otherRows = Math.max(1, Math.round(rows / 10));
  let started = performance.now();
  const ids = new Map<string, number>();
  for (const name of [MAIN_DOMAIN, ...logs.otherLogs.map((_, i) => otherDomain(i + 1))]) {
    const m = await tailhouse(['domains', 'add', name], dataDir);
    const id = Number(/added domain (\d+)/.exec(m.stdout)?.[1]);
    if (!id) throw new Error(`domains add ${name}: no id in ${JSON.stringify(m.stdout)}`);
    ids.set(name, id);
  }
  const domainsMs = performance.now() - started;
  started = performance.now();
  if (logs.fleet) {
    process.stderr.write(`registering ${fmt(logs.fleet.domains)} fleet domains through POST /api/domains…\n`);
    const fleetIds = await registerThroughApi(dataDir, Array.from({ length: logs.fleet.domains }, (_, i) => fleetDomain(i + 1)), onServer);
    for (const [name, id] of fleetIds) ids.set(name, id);
  }
  const fleetDomainsMs = performance.now() - started;
  started = performance.now();
  const imports: QueryLoad['imports'] = [];
  const jobs: [string, string, number, string[]][] = [
    [MAIN_DOMAIN, logs.mainLog, rows, ['--domain', MAIN_DOMAIN, '--format', ACCESS_FORMAT]],
    ...logs.otherLogs.map((f, i): [string, string, number, string[]] => [otherDomain(i + 1), f, otherRows, ['--domain', otherDomain(i + 1), '--format', ACCESS_FORMAT]]),
    ...(logs.fleet ? [['the fleet', logs.fleet.log, logs.fleet.domains * logs.fleet.linesEach, ['--format', FLEET_FORMAT]] as [string, string, number, string[]]] : []),
  ];
  for (const [name, file, lines, args] of jobs) {
    process.stderr.write(`importing ${fmt(lines)} lines for ${name}…\n`);
    const m = await tailhouse(['import', file, ...args], dataDir);
    const summary = m.stdout.split('\n').find((l) => l.startsWith('imported ')) ?? tail(m.stdout, 1);
    const stored = Number(/: (\d+) stored/.exec(summary)?.[1]);
    if (stored !== lines) throw new Error(`import for ${name} stored ${stored} of ${lines} lines: ${summary}`);
    imports.push({ name, m, summary });
  }
  return { ids, domainsMs, fleetDomainsMs, importMs: performance.now() - started, imports };
}

/**
 * The DATA_DIR a bench reads: `kept` as it is, or bench/query's logs of `rows` rows (and 9 × rows/10)
 * written into `dir` and loaded into `dir/data` (the log files removed unless `keep`). Prints
 * what it is as the bench's step 1.
 */
export async function benchDataDir(options: { kept: string | undefined; dir: string | null; rows: number; keep: boolean }): Promise<string> {
  if (options.kept) {
    console.log(`1. data: the kept DATA_DIR ${options.kept}`);
    return options.kept;
  }
  const logs = writeQueryLogs(options.dir!, options.rows, Date.now());
  const dataDir = path.join(options.dir!, 'data');
  const loaded = await loadQueryData(dataDir, logs, options.rows);
  for (const file of [logs.mainLog, ...logs.otherLogs]) if (!options.keep) fs.rmSync(file);
  console.log(`1. data: ${fmt(options.rows)} rows of ${MAIN_DOMAIN} + 9 × ${fmt(Math.round(options.rows / 10))}, loaded through the CLI in ${((loaded.domainsMs + loaded.importMs) / 1000).toFixed(1)} s`);
  return dataDir;
}
