/**
 * The real program, `node bin/tailhouse.js …`, as child processes with a minimal environment of
 * their own (nothing inherited from the test run but PATH, HOME and TMPDIR).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { expect } from 'vitest';
import { freePort } from './ports.js';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = path.join(ROOT, 'bin', 'tailhouse.js');

export interface Proc {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  /** Resolves when the process has exited and its output is closed. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const children: Proc[] = [];

export function childEnv(vars: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: process.env.HOME, HOST: '127.0.0.1', LOG_LEVEL: 'info', ...vars };
  if (process.env.TMPDIR) env.TMPDIR = process.env.TMPDIR;
  return env;
}

/** Starts the program; `input`, when given, is its standard input (otherwise it reads nothing). */
export function start(args: string[], vars: Record<string, string>, input?: string): Proc {
  const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, env: childEnv(vars), stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
  // A command that ends before reading all of its input closes the pipe: not the test's failure.
  if (input !== undefined) child.stdin!.on('error', () => {}).end(input);
  const proc: Proc = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal }))),
  };
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (proc.stdout += chunk));
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (proc.stderr += chunk));
  children.push(proc);
  return proc;
}

export function describeProc(proc: Proc): string {
  return `\n--- stdout ---\n${proc.stdout}\n--- stderr ---\n${proc.stderr}`;
}

/** Waits for the process to exit, within a deadline (then kills it and fails). */
export async function exitOf(proc: Proc, timeoutMs = 45_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      proc.child.kill('SIGKILL');
      reject(new Error(`process did not exit within ${timeoutMs} ms${describeProc(proc)}`));
    }, timeoutMs);
  });
  try {
    return await Promise.race([proc.exited, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** Runs a command to completion. */
export async function run(args: string[], vars: Record<string, string>, input?: string) {
  const proc = start(args, vars, input);
  const { code } = await exitOf(proc);
  return { code, stdout: proc.stdout, stderr: proc.stderr };
}

/** Resolves once stdout and stderr (joined) match; fails when the process exits first or the deadline passes. */
export function waitForOutput(proc: Proc, pattern: RegExp, timeoutMs = 45_000): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const match = (proc.stdout + proc.stderr).match(pattern);
      if (!match) return false;
      done();
      resolve(match);
      return true;
    };
    const onExit = () => {
      if (check()) return;
      done();
      reject(new Error(`process exited before printing ${pattern}${describeProc(proc)}`));
    };
    const timer = setTimeout(() => {
      done();
      reject(new Error(`no ${pattern} within ${timeoutMs} ms${describeProc(proc)}`));
    }, timeoutMs);
    const done = () => {
      clearTimeout(timer);
      proc.child.stdout!.off('data', check);
      proc.child.stderr!.off('data', check);
      proc.child.off('close', onExit);
    };
    if (check()) return;
    // The output listeners registered in start() run first, so the texts are up to date here.
    proc.child.stdout!.on('data', check);
    proc.child.stderr!.on('data', check);
    proc.child.once('close', onExit);
  });
}

/** SIGKILLs every child still running (afterAll). */
export async function killChildren(): Promise<void> {
  for (const proc of children.splice(0)) {
    if (proc.child.exitCode === null && proc.child.signalCode === null) {
      proc.child.kill('SIGKILL');
      await proc.exited;
    }
  }
}

/** `serve` on a free port, once it listens. */
export async function serve(vars: Record<string, string>): Promise<{ proc: Proc; base: string }> {
  const port = await freePort();
  const proc = start(['serve'], { ...vars, PORT: String(port) });
  await waitForOutput(proc, /"msg":"listening"/);
  return { proc, base: `http://127.0.0.1:${port}` };
}

/** SIGTERM, then exit code 0 and "stopped" in the log. */
export async function stop(proc: Proc): Promise<void> {
  proc.child.kill('SIGTERM');
  const { code, signal } = await exitOf(proc);
  expect({ code, signal }, describeProc(proc)).toEqual({ code: 0, signal: null });
  const stopped = proc.stdout
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as { msg: string })
    .some((l) => l.msg === 'stopped');
  expect(stopped, describeProc(proc)).toBe(true);
}

export async function fetchJson(url: string, init: RequestInit = {}) {
  const res = await fetch(url, init);
  return { status: res.status, body: (await res.json()) as any };
}

export const signIn = (base: string, email: string, password: string) =>
  fetchJson(`${base}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email, password }) });

/**
 * Runs CLI commands with `vars`: `ok` expects exit 0 and gives its standard output; `fails` expects
 * another exit code and standard error matching `stderr`.
 */
export function commandsWith(vars: Record<string, string>) {
  return {
    async ok(args: string[]): Promise<string> {
      const res = await run(args, vars);
      expect(res.code, `${args.join(' ')}: ${res.stderr}`).toBe(0);
      return res.stdout;
    },
    async fails(args: string[], stderr: string | RegExp): Promise<void> {
      const res = await run(args, vars);
      expect(res.code, args.join(' ')).not.toBe(0);
      expect(res.stderr).toMatch(stderr);
    },
  };
}
