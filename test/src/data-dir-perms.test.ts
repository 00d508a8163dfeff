/**
 * DATA_DIR is private to the user tailhouse runs as (src/data-dir-perms.ts): refused when other
 * users may reach it, its looser contents made private when they could not, and everything a real
 * start writes into it private (PGlite sets its files' modes itself, 0666).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../core/config.js';
import { createLogger } from '../../core/log.js';
import { makePrivate } from '../../core/private-files.js';
import { DataDirPermissionError } from '../../src/data-dir-perms.js';
import { openStores } from '../../src/runtime.js';
import { freshDatabase, JWT_SECRET } from '../support/app.js';
import { describeProc, exitOf, fetchJson, killChildren, run, serve, signIn, start, stop } from '../support/child.js';
import { accessLine, FORMAT } from '../support/ingest.js';

const SLOW = 120_000;
const dirs: string[] = [];

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-perms-'));
  dirs.push(dir);
  return dir;
}

afterAll(async () => {
  await killChildren();
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

const modeOf = (file: string) => fs.lstatSync(file).mode & 0o777;

/** Every entry under `root` (itself included) that its group or other users may reach, with its mode; symlinks aside. */
function openEntries(root: string): string[] {
  const found: string[] = [];
  const visit = (file: string) => {
    const stats = fs.lstatSync(file);
    if (stats.isSymbolicLink()) return;
    if (stats.mode & 0o077) found.push(`${path.relative(root, file) || '.'} ${(stats.mode & 0o777).toString(8)}`);
    if (stats.isDirectory()) for (const name of fs.readdirSync(file)) visit(path.join(file, name));
  };
  visit(root);
  return found;
}

/** The stores opened in this process on `dataDir`, their log lines collected. */
async function openOn(dataDir: string) {
  const database = await freshDatabase();
  const lines: { level: string; msg: string; [key: string]: unknown }[] = [];
  const log = createLogger('info', { write: (line: string) => void lines.push(JSON.parse(line)) });
  const config = loadConfig({ DATA_DIR: dataDir, JWT_SECRET, ...(database.url ? { DATABASE_URL: database.url } : {}) });
  try {
    return { stores: await openStores(config, log), lines, drop: database.drop };
  } catch (err) {
    await database.drop();
    throw err;
  }
}

/** The error opening the stores on `dataDir` fails with; stores that open are closed again (so that the next test's chDB may open). */
async function refusal(dataDir: string): Promise<Error | null> {
  try {
    const { stores, drop } = await openOn(dataDir);
    await stores.close();
    await drop();
    return null;
  } catch (err) {
    return err as Error;
  }
}

describe('a DATA_DIR that other users may reach', () => {
  it('is refused before anything is written into it, with the command that makes it private', async () => {
    const dataDir = path.join(tempDir(), 'data');
    fs.mkdirSync(dataDir);
    fs.chmodSync(dataDir, 0o755);
    const refused = await refusal(dataDir);
    expect(refused).toBeInstanceOf(DataDirPermissionError);
    expect(refused?.message).toContain(`DATA_DIR ${dataDir} is open to other users (mode 0755)`);
    expect(refused?.message).toContain(`chmod 700 ${dataDir}`);
    expect(fs.readdirSync(dataDir)).toEqual([]);
    expect(modeOf(dataDir)).toBe(0o755);
  });

  it('is refused when only its group may search it', async () => {
    const dataDir = path.join(tempDir(), 'data');
    fs.mkdirSync(dataDir);
    fs.chmodSync(dataDir, 0o710);
    expect((await refusal(dataDir))?.message).toContain('is open to other users (mode 0710)');
  });

  it.skipIf(process.getuid?.() !== 0)('is refused when another user owns it, even at 0700', async () => {
    const dataDir = path.join(tempDir(), 'data');
    fs.mkdirSync(dataDir, { mode: 0o700 });
    fs.chownSync(dataDir, 4_000_001, 4_000_001);
    const refused = await refusal(dataDir);
    expect(refused?.message).toContain(`DATA_DIR ${dataDir} belongs to user 4000001, not to user 0 that tailhouse runs as`);
    expect(refused?.message).toContain(`chown -R 0 ${dataDir}`);
  });

  it(
    'stops `serve`, `migrate` and a command beside a server with the message on stderr',
    async () => {
      const dataDir = path.join(tempDir(), 'data');
      fs.mkdirSync(dataDir);
      fs.chmodSync(dataDir, 0o755);
      const vars = { DATA_DIR: dataDir, JWT_SECRET };
      for (const args of [['serve'], ['migrate'], ['users', 'list']]) {
        const proc = start(args, { ...vars, PORT: '0' });
        const { code } = await exitOf(proc, 30_000);
        expect(code, `${args.join(' ')}${describeProc(proc)}`).toBe(1);
        expect(proc.stderr).toContain(`tailhouse: DATA_DIR ${dataDir} is open to other users (mode 0755)`);
        expect(proc.stderr).toContain(`chmod 700 ${dataDir}`);
      }
      expect(fs.readdirSync(dataDir)).toEqual([]);
    },
    SLOW,
  );
});

describe('a private DATA_DIR', () => {
  it('that does not exist yet is created 0700', async () => {
    const dataDir = path.join(tempDir(), 'new', 'data');
    const { stores, drop } = await openOn(dataDir);
    try {
      expect(modeOf(dataDir)).toBe(0o700);
    } finally {
      await stores.close();
      await drop();
    }
  });

  it('has its looser contents (a 0666 file, a run/ at 0777) made private, with one warning', { timeout: SLOW }, async () => {
    const dataDir = tempDir();
    fs.writeFileSync(path.join(dataDir, 'left-over'), 'x');
    fs.chmodSync(path.join(dataDir, 'left-over'), 0o666);
    fs.mkdirSync(path.join(dataDir, 'run'));
    fs.chmodSync(path.join(dataDir, 'run'), 0o777);
    const { stores, lines, drop } = await openOn(dataDir);
    try {
      expect(modeOf(path.join(dataDir, 'left-over'))).toBe(0o600);
      expect(modeOf(path.join(dataDir, 'run'))).toBe(0o700);
      const warnings = lines.filter((l) => l.level === 'warn');
      expect(warnings).toEqual([expect.objectContaining({ dataDir, entries: 2, msg: expect.stringContaining('made private') })]);
    } finally {
      await stores.close();
      await drop();
    }
  });

  it('leaves symlinks alone and never follows one out of DATA_DIR', () => {
    const root = tempDir();
    const dataDir = path.join(root, 'data');
    fs.mkdirSync(dataDir, { mode: 0o700 });
    const outside = path.join(root, 'outside');
    fs.writeFileSync(outside, 'x');
    fs.chmodSync(outside, 0o644);
    fs.symlinkSync(outside, path.join(dataDir, 'link'));
    fs.writeFileSync(path.join(dataDir, 'inside'), 'x');
    fs.chmodSync(path.join(dataDir, 'inside'), 0o644);
    expect(makePrivate(dataDir)).toEqual([path.join(dataDir, 'inside')]);
    expect(modeOf(outside)).toBe(0o644);
    expect(modeOf(path.join(dataDir, 'inside'))).toBe(0o600);
  });

  it('that is itself a symlink is followed there, and only there', () => {
    const root = tempDir();
    const real = path.join(root, 'real');
    fs.mkdirSync(real, { mode: 0o700 });
    fs.writeFileSync(path.join(real, 'inside'), 'x');
    fs.chmodSync(path.join(real, 'inside'), 0o666);
    fs.symlinkSync(real, path.join(root, 'data'));
    expect(makePrivate(path.join(root, 'data'))).toEqual([path.join(root, 'data', 'inside')]);
    expect(modeOf(path.join(real, 'inside'))).toBe(0o600);
  });

  it(
    'holds nothing that other users may reach after a real start: the stores, a mail, an import, the lock, jwt-secret',
    async () => {
      const root = tempDir();
      const dataDir = path.join(root, 'data');
      const log = path.join(root, 'access.log');
      fs.writeFileSync(log, Array.from({ length: 50 }, (_, n) => `${accessLine(n)}\n`).join(''));
      const vars = { DATA_DIR: dataDir, ADMIN_PASSWORD: 'perms-admin-1' };
      const { proc, base } = await serve(vars);
      try {
        const login = await signIn(base, 'admin@localhost', 'perms-admin-1');
        expect(login.status).toBe(200);
        const bearer = { authorization: `Bearer ${login.body.data.accessToken}`, 'content-type': 'application/json' };
        const reset = await fetchJson(`${base}/api/users/${login.body.data.user.id}/reset-password`, { method: 'POST', headers: bearer, body: JSON.stringify({ email: 'admin@localhost' }) });
        expect(reset.status, JSON.stringify(reset.body)).toBe(200);
        // Beside the server: run inside it, through the control socket.
        for (const args of [['domains', 'add', 'perms.example.com'], ['import', '--domain', 'perms.example.com', '--format', FORMAT, log]]) {
          const done = await run(args, vars);
          expect(done.code, done.stderr).toBe(0);
        }
        expect(openEntries(dataDir), describeProc(proc)).toEqual([]);
      } finally {
        await stop(proc);
      }
      for (const made of ['jwt-secret', 'outbox', 'ingest', 'postgres', 'clickhouse', 'run']) expect(fs.readdirSync(dataDir)).toContain(made);
      expect(fs.readdirSync(path.join(dataDir, 'outbox'))).toHaveLength(1);
      expect(openEntries(dataDir)).toEqual([]);
      // A second start finds nothing to fix.
      const again = await run(['migrate'], vars);
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout + again.stderr).not.toContain('made private');
      expect(openEntries(dataDir)).toEqual([]);
    },
    SLOW,
  );
});
