/**
 * Path patterns (ingest/sources/file-pattern.ts): what a scan matches and leaves out, and the worker
 * following a control panel's tree of a thousand virtual hosts, registering the domains the paths
 * name, with files appearing, rotating and going away while it runs.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseIngestConfig } from '../../../ingest/config.js';
import { CheckpointStore } from '../../../ingest/checkpoints.js';
import { compileFilePattern, domainFromPath, ListingCache, patternMatches, pruneLetGo, scanFilePattern } from '../../../ingest/sources/file-pattern.js';
import { startIngest, type IngestWorker } from '../../../ingest/worker.js';
import { createLogger } from '../../../core/log.js';
import { sql } from '../../../core/db/sql.js';
import { ADMIN_EMAIL, startTestApp, type TestApp } from '../../support/app.js';
import { accessLines, append, FORMAT, select, testWorkerOptions, until } from '../../support/ingest.js';

let t: TestApp;
let root: string;
let treeSeq = 0;
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

beforeAll(async () => {
  t = await startTestApp();
  root = path.join(t.dataDir, 'trees');
  fs.mkdirSync(root);
});

afterAll(async () => {
  await t?.close();
});

/** A new directory for one test's tree. */
function newTree(): string {
  const dir = path.join(root, `tree-${++treeSeq}`);
  fs.mkdirSync(dir);
  return dir;
}

/** Writes `text` to `file`, making its directories. */
function write(file: string, text: string): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, text);
}

describe('compiling a pattern', () => {
  it('refuses what it cannot follow, saying why', () => {
    expect(() => compileFilePattern('logs/{domain}.log')).toThrow('must be an absolute path');
    expect(() => compileFilePattern('/l/{domain}/{domain}.log')).toThrow('may hold {domain} once');
    expect(() => compileFilePattern('/l/{host}.log')).toThrow('only {domain} may stand in braces');
    expect(() => compileFilePattern('/l/**/access.log')).toThrow('** is not supported');
    expect(() => compileFilePattern('/l/access.log.[0-9]')).toThrow('?, [ and ] are not supported');
    expect(() => compileFilePattern('/l/../{domain}.log')).toThrow('may not hold ..');
  });

  it('takes the longest name {domain} can be beside a *', () => {
    const p = compileFilePattern('/var/log/nginx/{domain}.*.log');
    expect(p.root).toBe('/var/log/nginx');
    const segment = p.segments[0]!;
    expect('match' in segment && segment.match.exec('www.shop.example.access.log')?.[1]).toBe('www.shop.example');
  });

  it('reads a name from a path as a host name: ASCII, lower case, two labels, a top-level label that is no number', () => {
    expect(domainFromPath('Shop.Example.COM')).toEqual({ domain: 'shop.example.com' });
    expect(domainFromPath('bücher.example')).toEqual({ domain: 'xn--bcher-kva.example' });
    for (const bad of ['localhost', 'not_a_host!', '10.0.0.1', 'a..b', '-x.example', "x.example';DROP TABLE domains;--"]) {
      expect(domainFromPath(bad), bad).toHaveProperty('invalid');
    }
  });
});

describe('scanning a pattern', () => {
  it('matches virtual hosts, and leaves out generations, archives, other files, loops and second paths to a file', async () => {
    const dir = newTree();
    for (const host of ['a.example', 'b.example', 'Not_A_Host']) write(path.join(dir, host, 'logs', 'access_log'), '');
    write(path.join(dir, 'a.example', 'logs', 'access_log.1'), '');
    write(path.join(dir, 'a.example', 'logs', 'access_log-20250101.gz'), '');
    // A generation whose file is gone (between a rename and the reopen) is still a generation.
    write(path.join(dir, 'c.example', 'logs', 'access_log.1'), '');
    fs.mkdirSync(path.join(dir, 'd.example', 'logs', 'access_log'), { recursive: true }); // a directory, not a file
    fs.symlinkSync('loop.example', path.join(dir, 'loop.example'));
    fs.symlinkSync('a.example', path.join(dir, 'alias.example'));
    const scan = await scanFilePattern(compileFilePattern(`${dir}/{domain}/logs/access_log*`));
    expect(scan.matches.map((m) => [path.relative(dir, m.path), m.domain, m.invalid !== null])).toEqual([
      ['Not_A_Host/logs/access_log', null, true],
      ['a.example/logs/access_log', 'a.example', false],
      ['b.example/logs/access_log', 'b.example', false],
    ]);
    expect(scan.skipped.map((s) => [path.relative(dir, s.path), s.reason])).toEqual([
      ['alias.example/logs/access_log', `the same file as ${dir}/a.example/logs/access_log: read once, through that path`],
      ['loop.example/logs', 'cannot be listed: a symbolic link loop'],
    ]);
    // A loop met where a file is looked at, not listed.
    const atFile = await scanFilePattern(compileFilePattern(`${dir}/{domain}/logs/access_log`));
    expect(atFile.skipped.map((s) => [path.relative(dir, s.path), s.reason])).toContainEqual(['loop.example/logs/access_log', 'cannot be looked at: a symbolic link loop']);
  });

  it('sees a new file at the next scan, a listing being kept while its directory does not change', async () => {
    const dir = newTree();
    const pattern = compileFilePattern(`${dir}/*.log`);
    write(path.join(dir, 'one.log'), '');
    const cache = new ListingCache();
    expect((await scanFilePattern(pattern, cache)).matches.map((m) => path.basename(m.path))).toEqual(['one.log']);
    write(path.join(dir, 'two.log'), '');
    expect((await scanFilePattern(pattern, cache)).matches.map((m) => path.basename(m.path))).toEqual(['one.log', 'two.log']);
  });

  it('reports a directory it may not list, and goes on with the others', async () => {
    const dir = newTree();
    write(path.join(dir, 'open.example', 'access.log'), '');
    write(path.join(dir, 'shut.example', 'access.log'), '');
    fs.chmodSync(path.join(dir, 'shut.example'), 0o000);
    // Root may list anything: the scan then runs as nobody, in a child process.
    const asNobody = process.getuid?.() === 0;
    if (asNobody) for (let d = dir; d !== '/'; d = path.dirname(d)) fs.chmodSync(d, fs.statSync(d).mode | 0o005);
    const script = `
      ${asNobody ? 'process.setgid(65534); process.setuid(65534);' : ''}
      const { compileFilePattern, scanFilePattern } = await import(${JSON.stringify(path.resolve('ingest/sources/file-pattern.ts'))});
      console.log(JSON.stringify(await scanFilePattern(compileFilePattern(${JSON.stringify(`${dir}/{domain}/*.log`)}))));`;
    const run = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { encoding: 'utf8' });
    fs.chmodSync(path.join(dir, 'shut.example'), 0o755);
    expect(run.stderr).toBe('');
    const scan = JSON.parse(run.stdout);
    expect(scan.matches.map((m: { domain: string }) => m.domain)).toEqual(['open.example']);
    expect(scan.skipped).toEqual([{ path: path.join(dir, 'shut.example'), reason: 'cannot be listed: no permission (EACCES)', problem: true }]);
  });
});

describe('checkpoints of files a pattern let go', () => {
  it('a path matches by its name, segment by segment', () => {
    const pattern = compileFilePattern('/var/www/vhosts/system/{domain}/logs/access_*log');
    expect(patternMatches(pattern, '/var/www/vhosts/system/shop.example/logs/access_ssl_log')).toBe(true);
    expect(patternMatches(pattern, '/var/www/vhosts/system/shop.example/logs/error_log')).toBe(false);
    expect(patternMatches(pattern, '/var/www/vhosts/system/shop.example/logs/old/access_log')).toBe(false);
    expect(patternMatches(pattern, '/var/www/vhosts/systemx/shop.example/logs/access_log')).toBe(false);
  });

  it('go once nothing of the file is left and no follower has it; those of imports, followed files, generations still there and recent changes stay', async () => {
    const dir = newTree();
    const pattern = compileFilePattern(path.join(dir, '{domain}.access.log'));
    const file = (host: string) => path.join(dir, `${host}.access.log`);
    write(`${file('rotated.example')}.1`, 'a line\n');
    write(`${file('rotated.example')}-20261201.gz`, '');
    const old = new Date(Date.now() - 2 * 86_400_000).toISOString();
    const entry = (source: string, updatedAt = old) => ({ source, path: source, offset: 10, dev: 1, ino: 1, cuts: [], updatedAt });
    const entries = {
      gone: entry(file('gone.example')),
      goneToo: entry(file('gone.example')),
      rotated: entry(file('rotated.example')),
      followed: entry(file('followed.example')),
      recent: entry(file('recent.example'), new Date().toISOString()),
      imported: { ...entry('import access shop.example'), path: file('imported.example') },
      elsewhere: entry('/var/log/nginx/other.access.log'),
    };
    const store = path.join(dir, 'checkpoints');
    write(path.join(store, 'checkpoints.json'), JSON.stringify({ version: 1, files: entries }));
    const checkpoints = await CheckpointStore.open(store, log);
    expect(await pruneLetGo(checkpoints, [pattern], new Set([file('followed.example')]), 86_400_000)).toBe(2);
    const kept = JSON.parse(fs.readFileSync(path.join(store, 'checkpoints.json'), 'utf8')) as { files: Record<string, unknown> };
    expect(Object.keys(kept.files).sort()).toEqual(['elsewhere', 'followed', 'imported', 'recent', 'rotated']);
  });
});

describe('the worker on a tree of virtual hosts', () => {
  const HOSTS = 1000;
  let worker: IngestWorker;
  afterAll(async () => {
    await worker?.close();
  });

  /** Rows per domain name, of access_logs. */
  async function rowsByDomain(): Promise<Map<string, number>> {
    const ids = new Map((await t.runtime.db.query<{ id: number; name: string }>(sql`select id, name from domains where name like '%.vhost.example'`)).map((d) => [d.id, d.name]));
    const rows = await select<{ d: number; n: string }>(t.runtime.clickhouse, 'SELECT domain_id AS d, count() AS n FROM access_logs GROUP BY d');
    return new Map(rows.filter((r) => ids.has(Number(r.d))).map((r) => [ids.get(Number(r.d))!, Number(r.n)]));
  }

  it(`follows ${HOSTS} hosts' files under one pattern, registers their domains, and stores every line once under its domain`, async () => {
    const dir = newTree();
    const expected = new Map<string, number>();
    let line = 0;
    /** Appends `n` lines to `file`, counted for `host`. */
    const lines = (host: string, file: string, n: number) => {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      append(file, accessLines(line, (line += n)));
      expected.set(host, (expected.get(host) ?? 0) + n);
    };
    const host = (i: number) => `h${i}.vhost.example`;
    const accessLog = (name: string) => path.join(dir, name, 'logs', 'access_log');
    for (let i = 0; i < HOSTS; i++) lines(host(i), accessLog(host(i)), 1 + (i % 3));
    // Not host names: their lines go to the rejects with the reason.
    write(accessLog('not_a_host!'), accessLines(0, 4));
    write(accessLog('localhost'), accessLines(0, 2));
    // A second path to a host's directory, and a symlink loop.
    fs.symlinkSync(host(0), path.join(dir, 'alias.vhost.example'));
    fs.symlinkSync('loop.vhost.example', path.join(dir, 'loop.vhost.example'));

    const config = parseIngestConfig(
      `sources:\n  - access: ${JSON.stringify(`${dir}/{domain}/logs/access_log`)}\n    format: ${JSON.stringify(FORMAT)}\n    register: { owner: ${ADMIN_EMAIL} }\n`,
      path.join(dir, 'ingest.yaml'),
    );
    worker = await startIngest(config, testWorkerOptions(t, log, { pollMs: 200 }));

    const settled = async (what: string) => {
      let seen = new Map<string, number>();
      try {
        await until(async () => {
          seen = await rowsByDomain();
          return seen.size === expected.size && [...expected].every(([h, n]) => seen.get(h) === n);
        }, what, 120_000, 250);
      } catch (err) {
        const wrong = [...expected].filter(([h, n]) => seen.get(h) !== n).slice(0, 5).map(([h, n]) => `${h}: ${seen.get(h) ?? 0} of ${n}`);
        throw new Error(`${(err as Error).message}; ${wrong.join(', ')}; ${seen.size} domains with rows`);
      }
    };
    await settled('every host\'s lines');

    // While it runs: new hosts, rotations (lines the writer appends to the renamed file too), removals.
    for (let i = HOSTS; i < HOSTS + 20; i++) lines(host(i), accessLog(host(i)), 2);
    for (let i = 0; i < 20; i++) {
      const file = accessLog(host(i));
      fs.renameSync(file, `${file}.1`);
      lines(host(i), `${file}.1`, 1);
      lines(host(i), file, 2);
    }
    const removed = Array.from({ length: 10 }, (_, k) => accessLog(host(100 + k)));
    for (const file of removed) fs.rmSync(file);
    await settled('new hosts\' and rotated files\' lines');

    const owned = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from domains d join users u on u.id = d.owner_id where d.name like '%.vhost.example' and u.email = ${ADMIN_EMAIL}`);
    expect(owned[0]!.n).toBe(HOSTS + 20);
    // Rejects are their own insert after a batch's rows: wait for the count the test expects, then compare.
    const rejectsByReason = async () =>
      (await select<{ reason: string; n: string }>(t.runtime.clickhouse, `SELECT reason, count() AS n FROM ingest_rejects WHERE source LIKE {dir:String} GROUP BY reason ORDER BY reason`, { dir: `${dir}/%` }))
        .map((r) => [r.reason, Number(r.n)] as const);
    await until(async () => (await rejectsByReason()).reduce((sum, [, n]) => sum + n, 0) >= 6, 'the six rejects to be stored');
    expect(await rejectsByReason()).toEqual([
      ['the path names "localhost" as its domain, which is no host name (such as shop.example.com)', 2],
      ['the path names "not_a_host!" as its domain, which is no host name (such as shop.example.com)', 4],
    ]);
    // Generations are never sources of their own; removed files are let go once read.
    await until(() => !worker.stats().some((s) => removed.includes(s.name.replace(/^access /, ''))), 'the removed files let go');
    const names = worker.stats().map((s) => s.name);
    expect(names.filter((n) => n.endsWith('.1') || n.includes('alias') || n.includes('loop'))).toEqual([]);
    expect(names).toHaveLength(HOSTS + 20 - removed.length + 2);
  }, 300_000);
});
