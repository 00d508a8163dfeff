/**
 * Exactly once across crashes: the real program (`tailhouse ingest`, `tailhouse import`) killed
 * with SIGKILL right after ClickHouse accepted a batch and before its checkpoint moved (the log
 * line `batch written` comes between the two), or at a random moment, then started again. At the
 * end every line is stored once: exact counts, no id twice, every line's url present.
 *
 * The children hold the embedded stores while they run (DATA_DIR lock), so this process opens them
 * only at the end, to count.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.js';
import { findDomainByName } from '../../src/domains/store.js';
import { createLogger } from '../../core/log.js';
import { openStores, type Stores } from '../../src/runtime.js';
import { freshDatabase, JWT_SECRET } from '../support/app.js';
import { exitOf, killChildren, run, start, waitForOutput, type Proc } from '../support/child.js';
import { accessLines, FORMAT, select, until } from '../support/ingest.js';

const SLOW = 240_000;
let dataDir: string;
let database: { url: string | undefined; drop: () => Promise<void> };
let vars: Record<string, string>;

beforeAll(async () => {
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-crash-'));
  database = await freshDatabase();
  vars = { DATA_DIR: dataDir, JWT_SECRET, LOG_LEVEL: 'debug', INGEST_STATS_INTERVAL_MS: '100', ...(database.url ? { DATABASE_URL: database.url } : {}) };
});

afterAll(async () => {
  await killChildren();
  await database?.drop();
  fs.rmSync(dataDir, { recursive: true, force: true });
});

/** Opens the stores the children used, once none is running, and counts a domain's rows. */
async function stored(domain: string): Promise<{ rows: number; ids: number; urls: number; rejects: number }> {
  let stores: Stores | undefined;
  try {
    stores = await openStores(loadConfig(vars), createLogger('silent'));
    const row = await findDomainByName(stores.db, domain);
    const [counts] = await select<{ rows: string; ids: string; urls: string }>(
      stores.clickhouse,
      'SELECT count() AS rows, uniqExact(id) AS ids, uniqExact(url) AS urls FROM access_logs WHERE domain_id = {d:UInt32}',
      { d: row!.id },
    );
    const [rejects] = await select<{ n: string }>(stores.clickhouse, 'SELECT count() AS n FROM ingest_rejects WHERE domain_id = {d:UInt32}', { d: row!.id });
    return { rows: Number(counts!.rows), ids: Number(counts!.ids), urls: Number(counts!.urls), rejects: Number(rejects!.n) };
  } finally {
    await stores?.close();
  }
}

/** `tailhouse domains add` as a child: the children hold the stores, this process never opens them meanwhile. */
async function addDomain(name: string): Promise<void> {
  const added = await run(['domains', 'add', name], vars);
  expect(added.code, added.stderr).toBe(0);
}

/** An ingest config following `file` for `domain`, written next to it. */
function ingestConfig(name: string, domain: string, file: string): string {
  const config = path.join(dataDir, name);
  fs.writeFileSync(config, `sources:\n  - domain: ${domain}\n    access: ${JSON.stringify(file)}\n    format: ${JSON.stringify(FORMAT)}\n`);
  return config;
}

const batchesWritten = (n: number) => new RegExp(`(?:"msg":"batch written"[\\s\\S]*){${n}}`);

async function killed(proc: Proc): Promise<void> {
  proc.child.kill('SIGKILL');
  expect((await exitOf(proc)).signal).toBe('SIGKILL');
}

describe('tailhouse ingest killed with SIGKILL', () => {
  it('resumes after each kill with nothing lost and nothing twice', { timeout: SLOW }, async () => {
    const domain = 'crash.example.com';
    await addDomain(domain);
    const file = path.join(dataDir, 'access.log');
    const config = ingestConfig('ingest.yaml', domain, file);
    // A bad line too: rejects must not double either.
    fs.writeFileSync(file, `${accessLines(0, 60_000)}this line does not parse\n`);
    let total = 60_000;

    // Right after a batch was accepted, before its checkpoint: the replay must deduplicate.
    for (const after of [1, 2, 1]) {
      const proc = start(['ingest', '--config', config], vars);
      await waitForOutput(proc, batchesWritten(after), 60_000);
      await killed(proc);
      fs.appendFileSync(file, accessLines(total, total + 15_000));
      total += 15_000;
    }
    // At a moment of the operating system's choosing: while reading, inserting or checkpointing.
    {
      const proc = start(['ingest', '--config', config], vars);
      await waitForOutput(proc, /"msg":"ingest started"/, 60_000);
      await new Promise((r) => setTimeout(r, 150 + Math.floor(Math.random() * 300)));
      await killed(proc);
    }

    const last = start(['ingest', '--config', config], vars);
    // Caught up: the file is open and nothing of it is waiting.
    // One source: its object holds arrays of its own (`domains`), so the line is matched to its end.
    await waitForOutput(last, /"sources":\[\{[^\n]*"lagBytes":0,"files":1,[^\n]*\],"msg":"ingest stats"/, 90_000);
    last.child.kill('SIGTERM');
    expect((await exitOf(last)).code).toBe(0);

    expect(await stored(domain)).toEqual({ rows: total, ids: total, urls: total, rejects: 1 });
  });
});

describe('tailhouse import killed with SIGKILL', () => {
  it('a second run finishes the file exactly; a third adds nothing', { timeout: SLOW }, async () => {
    const domain = 'import-crash.example.com';
    await addDomain(domain);
    const file = path.join(dataDir, 'old.access.log');
    // Long enough that the import is still running when the kill lands.
    const total = 400_000;
    fs.writeFileSync(file, accessLines(0, total));
    const args = ['import', file, '--domain', domain, '--format', FORMAT];

    // Killed once a checkpoint records progress (and while a batch is being written).
    const first = start(args, vars);
    const checkpoints = path.join(dataDir, 'ingest', 'checkpoints.json');
    await until(() => {
      const files = fs.existsSync(checkpoints) ? (JSON.parse(fs.readFileSync(checkpoints, 'utf8')) as { files: Record<string, { path: string; offset: number }> }).files : {};
      return Object.values(files).some((c) => c.path === file && c.offset > 0);
    }, 'the import to checkpoint some progress', 60_000, 5);
    await killed(first);

    const second = await run(args, vars);
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toMatch(/bytes already imported before/);
    expect(second.stdout).toMatch(new RegExp(`imported \\d+ lines from 1 file\\(s\\)`));

    const third = await run(args, vars);
    expect(third.stdout).toMatch(/^.*: 0 lines, 0 stored, 0 rejected/m);

    expect(await stored(domain)).toEqual({ rows: total, ids: total, urls: total, rejects: 0 });
  });
});

describe('serve with INGEST_CONFIG', () => {
  it('runs the sources beside the API and stops both cleanly', { timeout: SLOW }, async () => {
    const domain = 'served.example.com';
    await addDomain(domain);
    const file = path.join(dataDir, 'served.access.log');
    const config = ingestConfig('served.yaml', domain, file);
    fs.writeFileSync(file, accessLines(0, 3_000));
    const server = start(['serve'], { ...vars, PORT: '0', INGEST_CONFIG: config, LOG_LEVEL: 'info' });
    await waitForOutput(server, /"msg":"listening"/, 60_000);
    await waitForOutput(server, /"sources":\[\{[^\n]*"inserted":3000,[^\n]*\],"msg":"ingest stats"/, 60_000);
    server.child.kill('SIGTERM');
    expect((await exitOf(server)).code).toBe(0);
    expect(server.stdout).toMatch(/"msg":"ingest stopped"/);
    expect(await stored(domain)).toEqual({ rows: 3_000, ids: 3_000, urls: 3_000, rejects: 0 });
  });

  it('a bad ingest config stops serve and ingest at start with one line per problem', { timeout: SLOW }, async () => {
    const config = path.join(dataDir, 'bad.yaml');
    fs.writeFileSync(config, 'sources:\n  - access: /var/log/a.log\n    format: comined\n');
    for (const [args, extra] of [[['serve'], { INGEST_CONFIG: config }], [['ingest', '--config', config], {}]] as const) {
      const result = await run([...args], { ...vars, ...extra });
      expect(result.code).toBe(1);
      expect(result.stderr.trim()).toBe(`tailhouse: ingest config ${config}:3: sources[0].format: must be combined, main or an nginx log_format string with $variables (got "comined")`);
    }
  });
});
