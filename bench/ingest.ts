/**
 * bench/ingest: tailhouse's import and live ingest of an nginx access log against GoAccess and
 * against ClickHouse parsing the same file itself, side by side.
 *
 *   npm run bench:ingest                      # 1,000,000 generated lines
 *   BENCH_LINES=100000 npm run bench:ingest
 *   BENCH_SOURCE=nginx BENCH_LINES=1500000 BENCH_STEPS=goaccess,regexp,import npm run bench:ingest
 *                                             # a shop's log written by a real nginx under autocannon
 *
 * Steps (each a child process, timed from spawn to exit with its peak RSS and CPU from /proc):
 *   goaccess   `goaccess FILE -o report.json`: the common single-host tool; skipped when not installed
 *   regexp     INSERT … SELECT FROM file(FILE, 'Regexp') into access_logs in a fresh chDB: the engine's own parse
 *   engine     (only when asked) the floor of the import's design: its own ClickHouse statements
 *              (ingest/sinks/clickhouse-staged.ts) on the file's chunks, made first in JavaScript, then
 *              timed alone one after another (lines/s over the INSERTs alone)
 *   import     `tailhouse import FILE --domain D --format F` on a fresh DATA_DIR, then again (idempotence)
 *   server-import  the same in server mode: DATABASE_URL a scratch database on a PostgreSQL server,
 *              CLICKHOUSE_URL test/support/clickhouse-http.ts in a process of its own (chDB behind a
 *              JavaScript HTTP front, standing in for a ClickHouse server), so that the import
 *              process holds neither engine; skipped when the PostgreSQL server does not answer
 *   live       `tailhouse ingest --config C` following an empty file to which the log is appended at full speed
 *   baseline   (only when asked) the import of this checkout against the import of BENCH_BASELINE, a git
 *              revision checked out in a temporary worktree (removed afterwards): BENCH_ROUNDS rounds,
 *              the two alternating in each, on fresh DATA_DIRs; medians of their own rates and CPU times
 *
 * goaccess, regexp, engine and import run BENCH_ROUNDS rounds, the order turned by one each round so that a
 * drift of the machine favours none; the ratios are the medians of the rounds' ratios, with their range.
 * Rows landed are checked by count and by a fingerprint of their columns against the regexp step's.
 * Figures are printed, never asserted: exit 0 unless the bench itself could not run.
 *
 * Environment (optional):
 *   BENCH_LINES   lines to generate (default 1000000)
 *   BENCH_SOURCE  generated (default: bench/lib/access-log.ts) or nginx (bench/lib/nginx-shop-log.ts: a
 *                 real nginx's output of BENCH_LINES requests, kept in BENCH_NGINX_DIR between runs)
 *   BENCH_NGINX_DIR  where the nginx log is kept (default /tmp/tailhouse-bench-nginx)
 *   BENCH_STEPS   comma list of goaccess,regexp,engine,import,server-import,live,baseline (default all but engine and baseline)
 *   BENCH_BASELINE  the git revision the baseline step times (e.g. the commit before a change)
 *   BENCH_ROUNDS  rounds of goaccess, regexp and import, and of the baseline step (default 3)
 *   BENCH_TARGET  the least ratio of the rates the baseline step prints as its target (default 0.97, issue 13's)
 *   BENCH_DATABASE_URL  the PostgreSQL server of server-import (default postgres://postgres@127.0.0.1:5432/test)
 *   BENCH_LIVE_RATE  lines/s the live step appends at (default: full speed, in 4 MiB writes)
 *   BENCH_KEEP    1: keep the temporary directory (log, reports, data directories) and print its path
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chdbOf, migrateClickhouse, openClickhouse, type ClickHouseClient } from '../core/db/clickhouse.js';
import { createLogger } from '../core/log.js';
import { SEGMENT_SIZE } from '../core/entries.js';
import { STAGED_CUT_LIMITS } from '../ingest/import.js';
import { compileAccessFormat } from '../ingest/parsers/access-format.js';
import { storeAgentClasses } from '../ingest/sinks/clickhouse.js';
import { openStagedWriter } from '../ingest/sinks/clickhouse-staged.js';
import { CheckpointStore } from '../ingest/checkpoints.js';
import { openFileRead } from '../ingest/sources/file-read.js';
import { DEFAULT_CUT_LIMITS } from '../ingest/sources/line-cutter.js';
import { splitForEngine } from '../ingest/staged-chunks.js';
import { stagedReadingOf } from '../ingest/transforms/staged-rows.js';
import { userAgentClasses } from '../ingest/transforms/user-agent.js';
import { freshDatabase } from '../test/support/app.js';
import { ACCESS_FORMAT, writeAccessLog } from './lib/access-log.js';
import { countLines, nginxShopLog, SHOP_FORMAT } from './lib/nginx-shop-log.js';
import { checkoutBaseline, describeCheckout, median } from './lib/baseline.js';
import { spawnClickhouseHttp } from './lib/clickhouse-http-child.js';
import { benchDirectory, spawnMeasured, stopMeasured, type Measured } from './lib/measure.js';

const REQUESTED_LINES = Number(process.env.BENCH_LINES ?? 1_000_000);
const SOURCE_KIND = process.env.BENCH_SOURCE ?? 'generated';
const NGINX_DIR = process.env.BENCH_NGINX_DIR || path.join(os.tmpdir(), 'tailhouse-bench-nginx');
const STEPS = new Set((process.env.BENCH_STEPS ?? 'goaccess,regexp,import,server-import,live').split(',').map((s) => s.trim()));
const KEEP = process.env.BENCH_KEEP === '1';
/** Lines per second the live step appends at; unset: as fast as the disk takes them. */
const LIVE_RATE = Number(process.env.BENCH_LIVE_RATE || Infinity);
/** The git revision whose import the baseline step times against this checkout's. */
const BASELINE = process.env.BENCH_BASELINE;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const TARGET = Number(process.env.BENCH_TARGET ?? 0.97);
/** The PostgreSQL server the server-mode import gets a scratch database on. */
const DATABASE_URL = process.env.BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

const SELF = fileURLToPath(import.meta.url);
const ROOT = path.resolve(path.dirname(SELF), '..');
const BIN = path.join(ROOT, 'bin', 'tailhouse.js');
const DOMAIN = 'shop.example.com';
/** How often the live worker reports its counters: the resolution of the measured lag. */
const STATS_INTERVAL_MS = 250;
/** Give up on a step whose child shows no progress for this long. */
const STALL_MS = 120_000;

/**
 * How each tool reads a source's format: tailhouse's `--format`, GoAccess's `--log-format` (%^
 * skips a field; %T is $request_time in seconds), and ClickHouse's Regexp format (one capture
 * group per access_logs column; fields tailhouse does not store are matched, not captured).
 */
interface Format {
  nginx: string;
  goaccess: string;
  regexp: string;
}

const FORMATS: Record<string, Format> = {
  generated: {
    nginx: ACCESS_FORMAT,
    goaccess: '%h %^[%d:%t %^] "%r" %s %b "%R" "%u" %T',
    regexp: String.raw`^(\S+) - (\S+) \[([^\]]+)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" (\S+)$`,
  },
  nginx: {
    nginx: SHOP_FORMAT,
    goaccess: '%h %^[%d:%t %^] "%r" %s %b "%R" "%u" %T %^',
    // $upstream_response_time: "-", seconds, or a list ("0.001, 0.002 : 0.003").
    regexp: String.raw`^(\S+) - (\S+) \[([^\]]+)\] "(\S+) (\S+) (\S+)" (\d{3}) (\d+) "([^"]*)" "([^"]*)" (\S+) (?:\S+(?:(?:, | : )\S+)*)$`,
  },
};
const GOACCESS_TIME_ARGS = ['--date-format=%d/%b/%Y', '--time-format=%T'];

/** The log every step reads: its path, its line count and its format. */
interface Source {
  log: string;
  lines: number;
  format: Format;
  note: string;
}

/** The lines of the source, set once main has it: the N every rate and row count is of. */
let LINES = REQUESTED_LINES;

// --- the ClickHouse side (child modes of this script: chDB binds one data directory per process) ---

const REGEXP_STRUCTURE = 'ip String, user String, time String, method String, url String, protocol String, status UInt16, size UInt64, referrer String, agent String, rt Float64';

/** Columns whose values the fingerprint compares; ids and domain ids differ by design between stores. */
const FINGERPRINT = `SELECT count() AS rows, toString(min(timestamp)) AS first, toString(max(timestamp)) AS last,
  toString(sum(status_code)) AS statuses, toString(sum(response_size)) AS bytes, toString(sum(response_time)) AS times,
  uniqExact(ip_address) AS clients, toString(sum(cityHash64(method, url, protocol, referrer, user_agent))) AS texts
  FROM access_logs`;

type Fingerprint = Record<string, string | number>;

async function fingerprintOf(client: ClickHouseClient): Promise<Fingerprint> {
  const [row] = await (await client.query({ query: FINGERPRINT, format: 'JSONEachRow' })).json<Fingerprint>();
  return row!;
}

/**
 * The fingerprint of what tailhouse wrote (after its process has exited): in a DATA_DIR's chDB
 * (which binds the process to it: run it in a child mode), or at a ClickHouse server's URL.
 */
async function fingerprint(store: { dataDir: string; clickhouseUrl?: string }): Promise<Fingerprint> {
  const client = await openClickhouse(store);
  try {
    return await fingerprintOf(client);
  } finally {
    await client.close();
  }
}

/** A string literal of ClickHouse SQL (the bench's own paths and expressions, not user input). */
const sqlString = (s: string) => `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;

/** The log parsed by ClickHouse's Regexp format: the table function and its settings. */
function regexpParse(log: string, format: Format): { from: string; settings: string } {
  return {
    from: `file(${sqlString(log)}, 'Regexp', ${sqlString(REGEXP_STRUCTURE)})`,
    settings: `SETTINGS format_regexp = ${sqlString(format.regexp)}, format_regexp_escaping_rule = 'Raw', format_regexp_skip_unmatched = 0, async_insert = 0`,
  };
}

/** The access_logs columns of the Regexp step's INSERT, and their values from the parse. */
const REGEXP_COLUMNS = 'domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time';
const REGEXP_VALUES = `1, rowNumberInAllBlocks() + 1, parseDateTime64BestEffort(replaceOne(time, ':', ' '), 3, 'UTC'), ip, method, url, protocol,
  status, size, if(referrer = '-', '', referrer), if(agent = '-', '', agent), toUInt32(round(rt * 1000))`;

/** ClickHouse parses the log itself: the same columns as tailhouse fills, timed around the INSERT alone. */
async function regexpInsert(log: string, dataDir: string, format: Format): Promise<{ insertMs: number; fingerprint: Fingerprint }> {
  const client = await openClickhouse({ dataDir });
  const { from, settings } = regexpParse(log, format);
  try {
    await migrateClickhouse(client, createLogger('silent'), { LOG_RETENTION_DAYS: 90 });
    const started = performance.now();
    await chdbOf(client)!.queryAsync(`INSERT INTO access_logs (${REGEXP_COLUMNS}) SELECT ${REGEXP_VALUES} FROM ${from} ${settings}`);
    return { insertMs: performance.now() - started, fingerprint: await fingerprintOf(client) };
  } finally {
    await client.close();
  }
}

/** What the engine step's child measured: each part of its work, and the fingerprint of its rows. */
interface EngineParse {
  chunks: number;
  /** Cutting the file and splitting its chunks (ingest/staged-chunks.ts), in JavaScript. */
  splitMs: number;
  agents: number;
  classifyMs: number;
  /** The statements alone, one after another, nothing else running. */
  insertMs: number;
  insertCpuS: number;
  fingerprint: Fingerprint;
}

/**
 * The floor of the import's design (ingest/staged-chunks.ts, issue 32): the import's own ClickHouse
 * statements (ingest/sinks/clickhouse-staged.ts) on the file's chunks, made first (cut, split and
 * agents classified, timed apart) and then run one after another with nothing else running: what
 * the engine takes for the import's work. Segment numbers are made up (the import's come from
 * Postgres), which changes the ids and nothing else.
 */
async function engineParse(log: string, dataDir: string, format: Format): Promise<EngineParse> {
  const reading = stagedReadingOf(compileAccessFormat(format.nginx).shape);
  if (reading === null) throw new Error('the format is not one the import lets ClickHouse read');
  const started = performance.now();
  const known = new Set<string>();
  const chunks: { body: Buffer; start: number; end: number }[] = [];
  // Read as the import reads it: the same reader, framing and chunk limits.
  const checkpoints = await CheckpointStore.open(path.join(dataDir, 'checkpoints'), createLogger('silent'));
  const read = await openFileRead({ path: log, source: 'bench', checkpoints, limits: { ...DEFAULT_CUT_LIMITS, ...STAGED_CUT_LIMITS }, framing: 'line-bytes' });
  for await (const chunk of read) {
    const split = splitForEngine(chunk, chunk.raw!, reading, known);
    for (const agent of split.agents) known.add(agent);
    chunks.push({ body: split.body, start: chunk.startOffset, end: chunk.endOffset });
  }
  const splitMs = performance.now() - started;
  const classes = [...known].map((a) => ({ user_agent: a, agent_class: userAgentClasses.of(a).id }));
  const classifyMs = performance.now() - started - splitMs;

  const client = await openClickhouse({ dataDir });
  try {
    await migrateClickhouse(client, createLogger('silent'), { LOG_RETENTION_DAYS: 90 });
    const writer = await openStagedWriter(client, reading);
    await writer.classify(classes);
    await storeAgentClasses(client);
    const insertStarted = performance.now();
    const cpu = process.cpuUsage();
    for (const [i, chunk] of chunks.entries()) {
      const first = Math.floor(chunk.start / SEGMENT_SIZE);
      const numbers = Array.from({ length: Math.floor(chunk.end / SEGMENT_SIZE) - first + 1 }, (_, k) => first + k + 1);
      await writer.insert(chunk.body, { domainId: 1, segments: { first, numbers }, token: `bench-${i}`, retainedFromMs: 0 });
    }
    const used = process.cpuUsage(cpu);
    const insertMs = performance.now() - insertStarted;
    await writer.close();
    return { chunks: chunks.length, splitMs, agents: known.size, classifyMs, insertMs, insertCpuS: (used.user + used.system) / 1e6, fingerprint: await fingerprintOf(client) };
  } finally {
    await client.close();
  }
}

/** Runs a child mode of this script and returns the JSON it printed after `RESULT `. */
async function childResult<T>(args: string[]): Promise<{ result: T; m: Measured }> {
  const m = await spawnMeasured(process.execPath, [...process.execArgv, SELF, ...args]).done;
  const line = m.stdout.split('\n').find((l) => l.startsWith('RESULT '));
  if (m.code !== 0 || !line) throw new Error(`${args[0]} failed (exit ${m.code}): ${tail(m.stderr || m.stdout)}`);
  return { result: JSON.parse(line.slice(7)) as T, m };
}

// --- tailhouse ---------------------------------------------------------------------------------

const ADMIN = { ADMIN_EMAIL: 'bench-admin@example.com', ADMIN_PASSWORD: 'bench-admin-password-1', JWT_SECRET: randomBytes(48).toString('base64url') };

/**
 * Embedded mode on `dataDir`: the environment is built from scratch, so no DATABASE_URL or
 * CLICKHOUSE_URL leaks in. `root`: the checkout whose tailhouse runs (default this one).
 */
function tailhouse(args: string[], dataDir: string, opts: { env?: Record<string, string>; onLine?: (line: string) => void; root?: string } = {}) {
  const root = opts.root ?? ROOT;
  return spawnMeasured(process.execPath, [path.join(root, 'bin', 'tailhouse.js'), ...args], {
    cwd: root,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, DATA_DIR: dataDir, ...ADMIN, ...opts.env },
    onLine: opts.onLine,
  });
}

async function mustRun(args: string[], dataDir: string, env?: Record<string, string>, root?: string): Promise<Measured> {
  const m = await tailhouse(args, dataDir, { env, root }).done;
  if (m.code !== 0) throw new Error(`tailhouse ${args.join(' ')} failed (exit ${m.code}): ${tail(m.stderr || m.stdout)}`);
  return m;
}

/**
 * A fresh DATA_DIR with the bench domain registered (which also creates and migrates both stores:
 * embedded ones in the directory, or the servers `env` names).
 */
async function freshDataDir(dir: string, name: string, env?: Record<string, string>, root?: string): Promise<string> {
  const dataDir = path.join(dir, name);
  await mustRun(['domains', 'add', DOMAIN], dataDir, env, root);
  return dataDir;
}

/** Whether tailhouse lists `command` in its help (the import and ingest commands are being built). */
function hasCommand(command: string): boolean {
  const r = spawnSync(process.execPath, [BIN, '--help'], { cwd: ROOT, encoding: 'utf8', env: { PATH: process.env.PATH, HOME: process.env.HOME } });
  return new RegExp(`^\\s+${command}\\b`, 'm').test(r.stdout);
}

/** The total `inserted` of an "ingest stats" log line (ingest/worker.ts, statsLineWriter). */
function insertedOf(entry: unknown): number {
  const inserted = (entry as { totals?: { inserted?: unknown } }).totals?.inserted;
  return typeof inserted === 'number' ? inserted : 0;
}

// --- the steps ---------------------------------------------------------------------------------

interface Figure {
  step: string;
  what: string;
  m: Measured;
  /** Lines per second the step achieved; by default LINES over its wall time; NaN: not a rate. */
  linesPerS?: number;
  check: string;
}

async function benchGoaccess(source: Source, dir: string): Promise<Figure | string> {
  if (spawnSync('sh', ['-c', 'command -v goaccess']).status !== 0) return 'goaccess: skipped, not installed (apt-get install -y goaccess)';
  const report = path.join(dir, 'goaccess.json');
  const args = [source.log, '--no-global-config', '--no-progress', `--log-format=${source.format.goaccess}`, ...GOACCESS_TIME_ARGS, '-o', report];
  const m = await spawnMeasured('goaccess', args).done;
  if (m.code !== 0) return `goaccess: failed (exit ${m.code}): ${tail(m.stderr)}`;
  const general = (JSON.parse(fs.readFileSync(report, 'utf8')) as { general: { total_requests: number; valid_requests: number } }).general;
  const version = spawnSync('goaccess', ['--version'], { encoding: 'utf8' }).stdout.split('\n')[0]?.replace(/[\s.]+$/, '');
  return { step: 'goaccess', what: `${version}, JSON report`, m, check: `${fmt(general.valid_requests)} valid of ${fmt(general.total_requests)} requests${countNote(general.valid_requests)}` };
}

async function benchRegexp(source: Source, dir: string): Promise<{ figure: Figure; reference: Fingerprint }> {
  const dataDir = path.join(dir, 'regexp');
  fs.rmSync(dataDir, { recursive: true, force: true });
  const { result, m } = await childResult<{ insertMs: number; fingerprint: Fingerprint }>(['--regexp', source.log, dataDir, JSON.stringify(source.format)]);
  const rows = Number(result.fingerprint.rows);
  return {
    figure: {
      step: 'clickhouse regexp',
      what: `chDB ${chdbVersion()}: INSERT … SELECT FROM file(…, 'Regexp'); lines/s over the INSERT alone (${fmt(result.insertMs)} ms)`,
      m,
      linesPerS: (LINES / result.insertMs) * 1000,
      check: `${fmt(rows)} rows${countNote(rows)}`,
    },
    reference: result.fingerprint,
  };
}

async function benchEngine(source: Source, dir: string, reference: Fingerprint | undefined): Promise<Figure> {
  const dataDir = path.join(dir, 'engine');
  fs.rmSync(dataDir, { recursive: true, force: true });
  const { result, m } = await childResult<EngineParse>(['--engine-parse', source.log, dataDir, JSON.stringify(source.format)]);
  const rows = Number(result.fingerprint.rows);
  const same = reference === undefined ? '' : JSON.stringify(result.fingerprint) === JSON.stringify(reference) ? ', columns match the regexp step' : ', COLUMNS DIFFER from the regexp step';
  return {
    step: "the import's statements alone",
    what: `${result.chunks} INSERTs from the Regexp format, one after another: ${fmt(result.insertMs)} ms, ${result.insertCpuS.toFixed(1)} CPU-s (made first: cut and split ${fmt(result.splitMs)} ms, ${fmt(result.agents)} agents classified ${fmt(result.classifyMs)} ms); lines/s over the INSERTs alone`,
    m,
    linesPerS: (LINES / result.insertMs) * 1000,
    check: `${fmt(rows)} rows${countNote(rows)}${same}`,
  };
}

/** Where an import writes: the embedded stores of its DATA_DIR, or the servers its environment names. */
interface Target {
  /** The step's name in the table. */
  step: string;
  /** Its DATA_DIR's name in the bench's directory. */
  dataDir: string;
  /** DATABASE_URL and CLICKHOUSE_URL for server mode; none: embedded. */
  env?: Record<string, string>;
  /** The rows' fingerprint once tailhouse has exited. */
  fingerprint: (dataDir: string) => Promise<Fingerprint>;
}

const EMBEDDED: Target = {
  step: 'tailhouse import',
  dataDir: 'import',
  // chDB binds a process to one data directory: read from a child, not from this process.
  fingerprint: async (dataDir) => (await childResult<Fingerprint>(['--fingerprint', dataDir])).result,
};

async function benchImport(source: Source, dir: string, reference?: Fingerprint, target = EMBEDDED): Promise<Figure[]> {
  fs.rmSync(path.join(dir, target.dataDir), { recursive: true, force: true });
  const dataDir = await freshDataDir(dir, target.dataDir, target.env);
  const args = ['import', source.log, '--domain', DOMAIN, '--format', source.format.nginx];
  const figures: Figure[] = [];
  let before: Fingerprint | undefined;
  for (const run of ['first', 'again'] as const) {
    const m = await tailhouse(args, dataDir, { env: target.env }).done;
    // The summary's last line: totals, the import's own time and rate (without process start-up).
    const summary = m.stdout.split('\n').find((l) => l.startsWith('imported ')) ?? tail(m.stdout, 1);
    if (m.code !== 0) throw new Error(`tailhouse import failed (exit ${m.code}): ${tail(m.stderr || m.stdout)}`);
    const after = await target.fingerprint(dataDir);
    const rows = Number(after.rows);
    const check =
      run === 'first'
        ? `${fmt(rows)} rows${countNote(rows)}; ${compare(after, reference)}`
        : `${fmt(rows)} rows, ${same(after, before) ? 'unchanged' : '**changed**'}`;
    // The second run finds every byte checkpointed: its time is the fixed cost of a run, not a rate.
    figures.push({ step: run === 'first' ? target.step : `${target.step}, again`, what: `summary: ${summary}`, m, linesPerS: run === 'first' ? undefined : NaN, check });
    before = after;
  }
  return figures;
}

/**
 * The import in server mode, as with a real deployment's servers: a scratch database on
 * DATABASE_URL's PostgreSQL, and ClickHouse's HTTP interface from test/support in a process of its
 * own (chDB behind a JavaScript HTTP front: its rate is not a ClickHouse server's, but the import
 * process holds neither engine, which is what this step measures). Its figures, then the shim's
 * over its whole life (the "server"); a note instead when PostgreSQL does not answer.
 */
async function benchServerImport(source: Source, dir: string, reference?: Fingerprint): Promise<Figure[] | string> {
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  try {
    database = await freshDatabase(DATABASE_URL);
  } catch (err) {
    const at = new URL(DATABASE_URL);
    return `server-import: skipped, no PostgreSQL at ${at.host}${at.pathname} (${(err as Error).message}); set BENCH_DATABASE_URL, or leave server-import out of BENCH_STEPS`;
  }
  let figures: Figure[];
  let shim: Measured;
  try {
    const clickhouse = await spawnClickhouseHttp(path.join(dir, 'server-clickhouse'));
    try {
      figures = await benchImport(source, dir, reference, {
        step: 'tailhouse import (SERVER MODE)',
        dataDir: 'server-import',
        env: { DATABASE_URL: database.url!, CLICKHOUSE_URL: clickhouse.url },
        fingerprint: (dataDir) => fingerprint({ dataDir, clickhouseUrl: clickhouse.url }),
      });
    } finally {
      shim = await stopMeasured(clickhouse.server);
    }
  } finally {
    await database.drop();
  }
  const server: Figure = {
    step: 'ClickHouse HTTP shim (the "server")',
    what: "test/support/clickhouse-http.ts in a process of its own: chDB behind a JavaScript HTTP front, not a ClickHouse server; its whole life (start, migrations, both imports' inserts, the checks)",
    m: shim,
    linesPerS: NaN,
    check: `exit ${shim.code ?? shim.signal} after SIGTERM`,
  };
  return [...figures, server];
}

/**
 * The import of this checkout against the import of BASELINE, checked out in a temporary worktree:
 * ROUNDS rounds, each running both on fresh DATA_DIRs, the order swapped every round so that a
 * drift of the machine's load does not favour one. The figures are each import's own rate (its
 * summary's, without process start-up) and its CPU time (start-up included), as medians: on a
 * shared machine the CPU time varies less than the rate.
 */
async function benchBaseline(source: Source, dir: string): Promise<string[]> {
  if (!BASELINE) throw new Error('set BENCH_BASELINE to the git revision to compare with');
  const baseline = checkoutBaseline(ROOT, BASELINE);
  try {
    const codes = [
      { name: describeCheckout(ROOT), root: ROOT, rates: [] as number[], cpu: [] as number[] },
      { name: `baseline ${baseline.rev}`, root: baseline.root, rates: [] as number[], cpu: [] as number[] },
    ];
    const lines: string[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      for (const code of round % 2 === 0 ? codes : [...codes].reverse()) {
        const dataDir = await freshDataDir(dir, `baseline-${round}-${code.root === ROOT ? 'this' : 'base'}`, undefined, code.root);
        const m = await mustRun(['import', source.log, '--domain', DOMAIN, '--format', source.format.nginx], dataDir, undefined, code.root);
        const summary = m.stdout.split('\n').find((l) => l.startsWith('imported ')) ?? '';
        const rate = Number(/\((\d+) lines\/s\)/.exec(summary)?.[1]);
        if (!summary.includes(`${LINES} stored, 0 rejected`) || !rate) throw new Error(`${code.name}: unexpected summary: ${summary || tail(m.stdout)}`);
        code.rates.push(rate);
        code.cpu.push(m.cpuS);
        fs.rmSync(dataDir, { recursive: true, force: true });
      }
      lines.push(`round ${round + 1}: ${codes.map((c) => `${c.name} ${fmt(c.rates.at(-1)!)} lines/s ${c.cpu.at(-1)!.toFixed(2)} CPU s`).join(', ')} (load average ${os.loadavg()[0]!.toFixed(1)})`);
    }
    const [rate, baseRate] = codes.map((c) => median(c.rates)) as [number, number];
    const [cpu, baseCpu] = codes.map((c) => median(c.cpu)) as [number, number];
    lines.push(`import's own rate, median of ${ROUNDS}: ${codes[0]!.name} ${fmt(rate)}, ${codes[1]!.name} ${fmt(baseRate)} lines/s: ${(rate / baseRate).toFixed(3)}× (target: ≥ ${TARGET}×)`);
    lines.push(`import's CPU time, median of ${ROUNDS}: ${cpu.toFixed(2)} s against ${baseCpu.toFixed(2)} s: the rate per CPU-second ${(baseCpu / cpu).toFixed(3)}×`);
    return lines;
  } finally {
    baseline.remove();
  }
}

async function benchLive(source: Source, dir: string, reference?: Fingerprint): Promise<{ figure: Figure; lagMs: number; stopMs: number }> {
  const dataDir = await freshDataDir(dir, 'live');
  const followed = path.join(dir, 'live-access.log');
  fs.writeFileSync(followed, '');
  const config = path.join(dir, 'ingest.yaml');
  // JSON strings are YAML double-quoted scalars: the format's quotes and $ need no further escaping.
  fs.writeFileSync(config, `sources:\n  - domain: ${DOMAIN}\n    access: ${JSON.stringify(followed)}\n    format: ${JSON.stringify(source.format.nginx)}\n    startAt: beginning\n`);

  let inserted = -1; // -1 until the first stats line: the worker is not running yet
  let lastChange = performance.now();
  let allInAt = 0;
  const worker = tailhouse(['ingest', '--config', config], dataDir, {
    env: { INGEST_STATS_INTERVAL_MS: String(STATS_INTERVAL_MS) },
    onLine: (line) => {
      if (!line.startsWith('{')) return;
      let entry: { msg?: unknown };
      try {
        entry = JSON.parse(line) as { msg?: unknown };
      } catch {
        return;
      }
      if (entry.msg !== 'ingest stats') return;
      const n = insertedOf(entry);
      if (n !== inserted) lastChange = performance.now();
      inserted = n;
      if (n >= LINES && !allInAt) allInAt = performance.now();
    },
  });
  let exited = false;
  void worker.done.then(() => (exited = true));
  const waitFor = async (what: string, done: () => boolean) => {
    while (!done()) {
      if (exited) throw new Error(`tailhouse ingest exited while waiting for ${what}: ${tail((await worker.done).stderr)}`);
      if (performance.now() - lastChange > STALL_MS) throw new Error(`no progress for ${STALL_MS / 1000} s waiting for ${what} (inserted ${inserted} of ${LINES})`);
      await sleep(20);
    }
  };

  await waitFor('the first "ingest stats" line', () => inserted >= 0);
  const writeStart = performance.now();
  await appendLog(source.log, followed, LIVE_RATE);
  const writerStopped = performance.now();
  lastChange = writerStopped;
  await waitFor(`${fmt(LINES)} inserted rows`, () => allInAt > 0);

  const stopAt = performance.now();
  const m = await stopMeasured(worker);
  const stopMs = performance.now() - stopAt;
  const after = await EMBEDDED.fingerprint(dataDir);
  const rows = Number(after.rows);
  return {
    figure: {
      step: 'tailhouse ingest (live)',
      what: `appended ${Number.isFinite(LIVE_RATE) ? `at ${fmt(LIVE_RATE)} lines/s` : 'at full speed'} in ${fmt(writerStopped - writeStart)} ms; lines/s from first write to all inserted; wall/CPU/RSS of the worker's whole life`,
      m,
      linesPerS: (LINES / (allInAt - writeStart)) * 1000,
      check: `${fmt(rows)} rows${countNote(rows)}; ${compare(after, reference)}; exit ${m.code ?? m.signal} after SIGTERM`,
    },
    lagMs: allInAt - writerStopped,
    stopMs,
  };
}

/**
 * Appends `from` to `to` in writes that each end at a line end, the way nginx flushes whole lines:
 * 4 MiB writes at full speed, or with `linesPerS` a write every 100 ms at that average rate.
 */
async function appendLog(from: string, to: string, linesPerS: number): Promise<void> {
  const input = fs.openSync(from, 'r');
  const output = fs.openSync(to, 'a');
  const bytesPerS = (fs.fstatSync(input).size / LINES) * linesPerS;
  const block = Buffer.alloc(Number.isFinite(bytesPerS) ? Math.min(4 << 20, Math.ceil(bytesPerS / 10) + 4096) : 4 << 20);
  const started = performance.now();
  let written = 0;
  let carry = 0; // bytes at the start of `block` left over from the previous read
  try {
    for (;;) {
      const n = fs.readSync(input, block, carry, block.length - carry, null);
      const end = carry + n;
      if (n === 0) break;
      const cut = block.lastIndexOf(10, end - 1) + 1;
      const due = started + (written / bytesPerS) * 1000;
      if (due > performance.now()) await sleep(due - performance.now());
      written += fs.writeSync(output, block, 0, cut);
      block.copy(block, 0, cut, end);
      carry = end - cut;
    }
    if (carry) fs.writeSync(output, block, 0, carry);
  } finally {
    fs.closeSync(input);
    fs.closeSync(output);
  }
}

// --- output ------------------------------------------------------------------------------------

const fmt = (n: number) => Math.round(n).toLocaleString('en-US');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const tail = (text: string, lines = 5) => text.trim().split('\n').slice(-lines).join(' / ');
const countNote = (rows: number) => (rows === LINES ? ' = N' : ` (**expected ${fmt(LINES)}**)`);
const same = (a?: Fingerprint, b?: Fingerprint) => a !== undefined && b !== undefined && JSON.stringify(a) === JSON.stringify(b);

function compare(actual: Fingerprint, reference?: Fingerprint): string {
  if (!reference) return 'no reference fingerprint';
  if (same(actual, reference)) return "columns match ClickHouse's own parse";
  const differing = Object.keys(reference).filter((k) => String(actual[k]) !== String(reference[k]));
  return `**columns differ from ClickHouse's own parse: ${differing.map((k) => `${k} ${actual[k]} vs ${reference[k]}`).join(', ')}**`;
}

function chdbVersion(): string {
  const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'node_modules', 'chdb', 'package.json'), 'utf8')) as { version: string };
  return pkg.version;
}

const linesPerS = (f: Figure) => f.linesPerS ?? (LINES / f.m.wallMs) * 1000;
/** An import's own rate from the summary in its `what` (without process start-up); NaN without one. */
const ownRate = (f?: Figure) => Number(/\((\d+) lines\/s\)/.exec(f?.what ?? '')?.[1]);

function printTable(figures: Figure[]): void {
  console.log('| step | lines/s | wall s | CPU s | peak RSS MB | peak anon MB | other load | rows | what |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---|---|');
  for (const f of figures) {
    console.log(`| ${f.step} | ${Number.isNaN(linesPerS(f)) ? '–' : fmt(linesPerS(f))} | ${(f.m.wallMs / 1000).toFixed(2)} | ${f.m.cpuS.toFixed(2)} | ${fmt(f.m.peakRssMb)} | ${fmt(f.m.peakAnonMb)} | ${f.m.otherCores.toFixed(2)} | ${f.check} | ${f.what} |`);
  }
}

/** One figure of each compared step per round (goaccess, regexp, engine, import: `undefined` where a step did not run). */
type Round = Record<'goaccess' | 'regexp' | 'engine' | 'import', Figure | undefined>;

/**
 * The median over the rounds of `ours ÷ theirs` (each round's ratio, so that both sides of a
 * ratio come from the same minutes), with the range; nothing when a side is missing.
 */
function ratio(label: string, rounds: readonly Round[], rate: (r: Round) => [number, number] | undefined, target: string): void {
  const ratios = rounds.map(rate).filter((r): r is [number, number] => r !== undefined && r.every(Number.isFinite)).map(([a, b]) => a / b);
  if (ratios.length === 0) return;
  const spread = ratios.length > 1 ? `, rounds ${ratios.map((r) => r.toFixed(2)).join(', ')} (range ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)})` : '';
  console.log(`${label}: ${median(ratios).toFixed(2)}× (median of ${ratios.length}${spread}; ${target})`);
}

/** The log every step reads: bench/lib/access-log.ts's lines, or a real nginx's output. */
async function sourceOf(dir: string): Promise<Source> {
  const started = performance.now();
  if (SOURCE_KIND === 'nginx') {
    fs.mkdirSync(NGINX_DIR, { recursive: true });
    const { log, note } = await nginxShopLog(NGINX_DIR, REQUESTED_LINES, (text) => process.stderr.write(`${text}\n`));
    return { log, lines: countLines(log), format: FORMATS.nginx!, note };
  }
  if (SOURCE_KIND !== 'generated') throw new Error(`BENCH_SOURCE must be generated or nginx, not ${SOURCE_KIND}`);
  const log = path.join(dir, 'access.log');
  writeAccessLog(log, REQUESTED_LINES);
  return { log, lines: REQUESTED_LINES, format: FORMATS.generated!, note: `generated (bench/lib/access-log.ts) in ${fmt(performance.now() - started)} ms` };
}

// --- main --------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const { dir, cleanUp } = benchDirectory('tailhouse-bench-ingest-', KEEP);
  try {
    const source = await sourceOf(dir);
    LINES = source.lines;
    const size = fs.statSync(source.log).size;
    const load = () => os.loadavg().map((l) => l.toFixed(1)).join(' ');
    console.log(`bench/ingest: ${fmt(LINES)} lines, ${(size / 2 ** 20).toFixed(0)} MiB, ${Math.round(size / LINES)} bytes a line: ${source.note}`);
    console.log(`format: ${source.format.nginx}`);
    console.log(`Node ${process.version}, ${os.cpus().length} CPUs, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB; load average before: ${load()}${KEEP ? `; files in ${dir}` : ''}\n`);

    const figures: Figure[] = [];
    const notes: string[] = [];
    const step = async <T>(name: string, run: () => Promise<T>): Promise<T | undefined> => {
      if (!STEPS.has(name)) return undefined;
      process.stderr.write(`running ${name}…\n`);
      try {
        return await run();
      } catch (err) {
        notes.push(`${name}: failed: ${(err as Error).message}`);
        return undefined;
      }
    };

    const cliReady = hasCommand('import') && hasCommand('ingest');
    if (!cliReady && (STEPS.has('import') || STEPS.has('server-import') || STEPS.has('live')))
      notes.push('import, server-import, live: skipped, `tailhouse import` / `tailhouse ingest` do not exist yet');
    // The reference fingerprint is ClickHouse's own parse; the first round's regexp step gives it.
    let reference: Fingerprint | undefined;
    const compared: Record<keyof Round, () => Promise<Figure | undefined>> = {
      goaccess: async () => {
        const goaccess = await step('goaccess', () => benchGoaccess(source, dir));
        if (typeof goaccess === 'string') return void notes.push(goaccess);
        return goaccess;
      },
      regexp: async () => {
        const regexp = await step('regexp', () => benchRegexp(source, dir));
        reference ??= regexp?.reference;
        return regexp?.figure;
      },
      engine: async () => step('engine', () => benchEngine(source, dir, reference)),
      import: async () => {
        const imports = cliReady ? await step('import', () => benchImport(source, dir, reference)) : undefined;
        figures.push(...(imports?.slice(1) ?? [])); // the run again: a fixed cost, not compared
        return imports?.[0];
      },
    };
    const order = ['regexp', 'goaccess', 'engine', 'import'] as const;
    const rounds: Round[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const turned = [...order.slice(round % order.length), ...order.slice(0, round % order.length)];
      const result: Round = { goaccess: undefined, regexp: undefined, engine: undefined, import: undefined };
      for (const name of turned) {
        const figure = await compared[name]();
        if (figure && ROUNDS > 1) figure.step += `, round ${round + 1}`;
        if (figure) figures.push(figure);
        result[name] = figure;
      }
      rounds.push(result);
    }
    const server = cliReady ? await step('server-import', () => benchServerImport(source, dir, reference)) : undefined;
    if (typeof server === 'string') notes.push(server);
    else if (server) figures.push(...server);
    const live = cliReady ? await step('live', () => benchLive(source, dir, reference)) : undefined;
    if (live) figures.push(live.figure);
    const baseline = await step('baseline', () => benchBaseline(source, dir));

    if (figures.length > 0) {
      printTable(figures);
      console.log();
    }
    const rates = (a: keyof Round, b: keyof Round, ours = linesPerS) => (r: Round): [number, number] | undefined =>
      r[a] && r[b] ? [ours(r[a]), linesPerS(r[b])] : undefined;
    ratio('tailhouse import vs goaccess', rounds, rates('import', 'goaccess'), 'target: ≥ 3, spawn to exit both');
    ratio('tailhouse import vs ClickHouse Regexp', rounds, rates('import', 'regexp'), "target: ≥ 0.8; the import's spawn to exit against the INSERT alone");
    ratio("the import's statements alone (the design's floor) vs ClickHouse Regexp", rounds, rates('engine', 'regexp'), "what the import could reach with no cost of its own; ≥ 0.8 needed");
    ratio("tailhouse import's own rate (its summary, without process start-up) vs ClickHouse Regexp", rounds, rates('import', 'regexp', ownRate), 'no target');
    if (Array.isArray(server)) {
      const [first, , shim] = server;
      const embedded = rounds[0]?.import ? `; embedded mode above: ${fmt(rounds[0].import.m.peakRssMb)} MB` : '';
      console.log(
        `SERVER MODE (DATABASE_URL, CLICKHOUSE_URL; neither engine in the import process): import peak RSS ${fmt(first!.m.peakRssMb)} MB, anon ${fmt(first!.m.peakAnonMb)} MB (target ≤ 400 MB${embedded}); ` +
          `${fmt(linesPerS(first!))} lines/s spawn to exit, ${fmt(ownRate(first))} own rate, through a JavaScript HTTP front to chDB (not a ClickHouse server's rate); ` +
          `other load of the import counts the shim and PostgreSQL; the shim, in its own process: peak RSS ${fmt(shim!.m.peakRssMb)} MB, ${shim!.m.cpuS.toFixed(2)} CPU-s`,
      );
    }
    const goaccessRate = median(rounds.flatMap((r) => (r.goaccess ? [linesPerS(r.goaccess)] : [])));
    if (live && goaccessRate) console.log(`live ingest vs goaccess (median of its rounds): ${(linesPerS(live.figure) / goaccessRate).toFixed(2)}× (no target)`);
    if (live) console.log(`live lag after the writer stopped: ${fmt(live.lagMs)} ms (target ≤ 2,000; resolution ${STATS_INTERVAL_MS} ms, the stats interval); worker stopped ${fmt(live.stopMs)} ms after SIGTERM`);
    for (const line of baseline ?? []) console.log(line);
    for (const note of notes) console.log(`note: ${note}`);
    console.log(`\nload average after: ${load()}`);
  } finally {
    cleanUp();
  }
}

const mode = process.argv[2];
if (mode === '--regexp') console.log(`RESULT ${JSON.stringify(await regexpInsert(process.argv[3]!, process.argv[4]!, JSON.parse(process.argv[5]!) as Format))}`);
else if (mode === '--engine-parse') console.log(`RESULT ${JSON.stringify(await engineParse(process.argv[3]!, process.argv[4]!, JSON.parse(process.argv[5]!) as Format))}`);
else if (mode === '--fingerprint') console.log(`RESULT ${JSON.stringify(await fingerprint({ dataDir: process.argv[3]! }))}`);
else await main();
