/**
 * The DATA_DIR lock (src/data-dir-lock.ts): held by one process, released by the kernel when that
 * process dies, even before its parent has reaped it.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { DataDirInUseError, lockDataDir, processState } from '../../src/data-dir-lock.js';
import { JWT_SECRET } from '../support/app.js';
import { childEnv, ROOT, run, waitForOutput, type Proc } from '../support/child.js';
import { until } from '../support/ingest.js';

const dirs: string[] = [];
const cleanups: (() => void)[] = [];

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-lock-'));
  dirs.push(dir);
  return dir;
}

afterAll(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});

describe('DATA_DIR lock', () => {
  it('a process killed with SIGKILL and not reaped yet (a zombie) holds nothing: a restart goes ahead', { timeout: 120_000 }, async () => {
    const dataDir = tempDir();
    const vars = { DATA_DIR: dataDir, JWT_SECRET, PORT: '0', ADMIN_PASSWORD: 'zombie-admin-1' };
    // `serve` started in the background by a shell that then becomes `sleep`, which never reaps
    // its children: once killed, the server stays a zombie for as long as the sleep runs.
    const parent = spawn('sh', ['-c', `"${process.execPath}" bin/tailhouse.js serve & echo "pid=$!"; exec sleep 600`], {
      cwd: ROOT,
      env: childEnv(vars),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(() => parent.kill('SIGKILL'));
    const proc: Proc = { child: parent, stdout: '', stderr: '', exited: new Promise((resolve) => parent.once('close', (code, signal) => resolve({ code, signal }))) };
    parent.stdout.setEncoding('utf8').on('data', (chunk: string) => (proc.stdout += chunk));
    parent.stderr.setEncoding('utf8').on('data', (chunk: string) => (proc.stderr += chunk));
    const pid = Number((await waitForOutput(proc, /pid=(\d+)/))[1]);
    await waitForOutput(proc, /"msg":"listening"/, 60_000);

    const refused = await run(['migrate'], vars);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`DATA_DIR ${dataDir} is in use by process ${pid}`);

    process.kill(pid, 'SIGKILL');
    await until(() => processState(pid) === 'Z', `process ${pid} to be a zombie`);
    const restarted = await run(['migrate'], vars);
    expect(restarted.code, restarted.stderr).toBe(0);
    expect(processState(pid)).toBe('Z');
    // The dead holder's socket was removed by the restart, which removed its own when done.
    expect(fs.readdirSync(path.join(dataDir, 'run'))).toEqual([]);
  });

  it('refuses a second holder, naming the first, and is free again once released', async () => {
    const dataDir = tempDir();
    const { release } = await lockDataDir(dataDir);
    cleanups.push(release);
    expect(fs.readFileSync(path.join(dataDir, 'tailhouse.pid'), 'utf8').trim()).toBe(String(process.pid));
    await expect(lockDataDir(dataDir)).rejects.toThrow(DataDirInUseError);
    await expect(lockDataDir(dataDir)).rejects.toThrow(`DATA_DIR ${dataDir} is in use by process ${process.pid}`);
    // A refused attempt leaves nothing behind.
    expect(fs.readdirSync(path.join(dataDir, 'run'))).toHaveLength(1);
    release();
    expect(fs.existsSync(path.join(dataDir, 'tailhouse.pid'))).toBe(false);
    expect(fs.readdirSync(path.join(dataDir, 'run'))).toEqual([]);
    const again = await lockDataDir(dataDir);
    again.release();
  });

  it('waits for a holder whose process is exiting (a zombie whose last threads still hold its socket), and names one that stays', async () => {
    const dataDir = tempDir();
    const runDir = path.join(dataDir, 'run');
    fs.mkdirSync(runDir, { recursive: true, mode: 0o700 });
    // A live lock socket named for a pid no process has: the state each test gives it is the only one.
    const dying = 4_000_001;
    const holder = net.createServer((socket) => socket.end());
    await new Promise<void>((resolve) => holder.listen(path.join(runDir, `${dying}-0123abcd.sock`), resolve));
    cleanups.push(() => holder.close());
    const asked: number[] = [];
    const stateOf = (state: string) => (pid: number) => (asked.push(pid), pid === dying ? state : processState(pid));

    // Asleep or running: refused at once, its state asked once.
    await expect(lockDataDir(dataDir, { stateOf: stateOf('S') })).rejects.toThrow(`DATA_DIR ${dataDir} is in use by process ${dying}`);
    expect(asked).toEqual([dying]);
    // A zombie whose socket stays: named once the wait is over.
    asked.length = 0;
    await expect(lockDataDir(dataDir, { stateOf: stateOf('Z'), exitingWaitMs: 300 })).rejects.toThrow(`in use by process ${dying}`);
    expect(asked.length).toBeGreaterThan(1);
    // A zombie whose socket closes while the lock waits: the lock is taken.
    asked.length = 0;
    const locking = lockDataDir(dataDir, { stateOf: stateOf('Z') });
    await until(() => asked.length > 0, 'the lock to look at the holder');
    await new Promise<void>((resolve) => holder.close(() => resolve()));
    const { release } = await locking;
    expect(fs.readFileSync(path.join(dataDir, 'tailhouse.pid'), 'utf8').trim()).toBe(String(process.pid));
    release();
  });

  it('refuses a DATA_DIR too long for a socket path instead of binding a cut name', async () => {
    const dataDir = path.join(tempDir(), 'd'.repeat(100));
    await expect(lockDataDir(dataDir)).rejects.toThrow(/too long for its lock socket/);
  });
});
