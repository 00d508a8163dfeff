/**
 * Child processes timed from spawn to exit, with their peak memory and CPU time read from Linux
 * /proc while they run (the process and all its descendants). Elsewhere memory and CPU read as 0.
 */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface Measured {
  code: number | null;
  signal: NodeJS.Signals | null;
  wallMs: number;
  /** Sum over the process tree of each process's VmHWM (peak resident set). */
  peakRssMb: number;
  /**
   * The same for RssAnon (heap and stacks, without file-backed pages such as libchdb's 200 MB of
   * code): the kernel keeps no peak of it, so this is the largest value sampled.
   */
  peakAnonMb: number;
  /** User + system CPU of the process tree, in seconds. */
  cpuS: number;
  /** The last 64 KiB of each stream. */
  stdout: string;
  stderr: string;
  /**
   * CPU the rest of the machine used meanwhile, in cores (busy time from /proc/stat less this
   * tree's): other work on a shared machine disturbs the figures when this is high.
   */
  otherCores: number;
  /** Killed (SIGKILL to its process group) after `timeoutMs`. */
  timedOut: boolean;
}

export interface MeasuredChild {
  child: ChildProcess;
  done: Promise<Measured>;
}

const CLOCK_TICKS = 100; // USER_HZ on Linux
const KEEP = 64 << 10;
const TREE_EVERY = 20;
const HAVE_PROC = fs.existsSync('/proc/self/stat');
const running = new Set<ChildProcess>();

function killGroup(child: ChildProcess): void {
  try {
    process.kill(-child.pid!, 'SIGKILL');
  } catch {
    // Already gone.
  }
}

/** SIGTERM, and `kill` after 30 s unless `exited` has settled by then; what `exited` gives. */
export async function terminate<T>(child: ChildProcess, exited: Promise<T>, kill: () => void): Promise<T> {
  child.kill('SIGTERM');
  const killer = setTimeout(kill, 30_000);
  try {
    return await exited;
  } finally {
    clearTimeout(killer);
  }
}

/** A measured child stopped with SIGTERM (SIGKILL after 30 s): its figures once it has exited. */
export const stopMeasured = (c: MeasuredChild): Promise<Measured> => terminate(c.child, c.done, () => c.child.kill('SIGKILL'));

/** Ends every child still running (their process groups): on a failure or Ctrl-C. */
export function killAll(): void {
  for (const child of running) killGroup(child);
}

/** The process and its descendants, found by parent pid (/proc/PID/task/…/children needs a kernel option not always set). */
function processTree(root: number): number[] {
  const parents = new Map<number, number>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      // Field 4 (ppid) comes after the command name, which is in parentheses and may hold spaces.
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // Exited between the listing and the read.
    }
  }
  const tree = [root];
  for (let i = 0; i < tree.length; i++) for (const [pid, ppid] of parents) if (ppid === tree[i]) tree.push(pid);
  return tree;
}

/** Busy CPU ticks of the whole machine (all cores): total less idle and iowait; 0 without /proc. */
export function machineBusyTicks(): number {
  if (!HAVE_PROC) return 0;
  const [, ...ticks] = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).map(Number);
  // user nice system idle iowait irq softirq steal (guest time is already in user)
  return ticks.slice(0, 8).reduce((s, t) => s + t, 0) - ticks[3]! - ticks[4]!;
}

interface Sample {
  hwmKb: number;
  anonKb: number;
  ticks: number;
}

/** VmHWM and RssAnon in KiB and utime + stime in ticks of one process, or undefined once it is gone. */
function sample(pid: number): Sample | undefined {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of stat, 11 and 12 after the command name.
    const kb = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
    return { hwmKb: kb('VmHWM'), anonKb: kb('RssAnon'), ticks: Number(fields[11]) + Number(fields[12]) };
  } catch {
    return undefined;
  }
}

/**
 * Spawns `command` in a process group of its own and samples its tree every `sampleMs` until it
 * exits. The last samples before exit are the figures, so what happens in the final interval is
 * missed: up to `sampleMs` of CPU, and memory growth (rare while a process shuts down). A
 * descendant that lives less than a second may be missed. `onLine` sees every complete output line.
 */
export function spawnMeasured(
  command: string,
  args: readonly string[],
  options: SpawnOptions & { onLine?: (line: string) => void; sampleMs?: number; timeoutMs?: number } = {},
): MeasuredChild {
  const { onLine, sampleMs = 50, timeoutMs = 30 * 60_000, ...spawnOptions } = options;
  const started = performance.now();
  const busyBefore = machineBusyTicks();
  const child = spawn(command, args, { ...spawnOptions, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  running.add(child);
  const seen = new Map<number, Sample>();
  // Finding the tree scans all of /proc: done every `TREE_EVERY` samples; its members every sample.
  let tree: number[] = [];
  let polls = 0;
  const poll = () => {
    if (child.pid === undefined || !HAVE_PROC) return;
    if (polls++ % TREE_EVERY === 0) tree = processTree(child.pid);
    for (const pid of tree) {
      const s = sample(pid);
      // Maxima: a zombie (exited, not yet reaped) has no memory lines and reads 0.
      const last = seen.get(pid) ?? { hwmKb: 0, anonKb: 0, ticks: 0 };
      if (s) seen.set(pid, { hwmKb: Math.max(s.hwmKb, last.hwmKb), anonKb: Math.max(s.anonKb, last.anonKb), ticks: Math.max(s.ticks, last.ticks) });
    }
  };
  const timer = setInterval(poll, sampleMs);
  let timedOut = false;
  const watchdog = setTimeout(() => {
    timedOut = true;
    killGroup(child);
  }, timeoutMs);
  const out = { stdout: '', stderr: '' };
  const collect = (stream: 'stdout' | 'stderr') => {
    let partial = '';
    child[stream]!.setEncoding('utf8');
    child[stream]!.on('data', (text: string) => {
      out[stream] = (out[stream] + text).slice(-KEEP);
      if (!onLine) return;
      const lines = (partial + text).split('\n');
      partial = lines.pop()!;
      for (const line of lines) onLine(line);
    });
  };
  collect('stdout');
  collect('stderr');
  const done = new Promise<Measured>((resolve, reject) => {
    let exitedAt = 0;
    child.once('error', reject);
    let busy = 0;
    child.once('exit', () => {
      exitedAt = performance.now();
      busy = machineBusyTicks() - busyBefore;
      clearInterval(timer);
      clearTimeout(watchdog);
    });
    // 'close' comes after the last output; the wall time is the exit's.
    child.once('close', (code, signal) => {
      running.delete(child);
      const values = [...seen.values()];
      const wallMs = (exitedAt || performance.now()) - started;
      const cpuS = values.reduce((s, v) => s + v.ticks, 0) / CLOCK_TICKS;
      resolve({
        code,
        signal,
        wallMs,
        peakRssMb: values.reduce((s, v) => s + v.hwmKb, 0) / 1024,
        peakAnonMb: values.reduce((s, v) => s + v.anonKb, 0) / 1024,
        cpuS,
        otherCores: Math.max(0, busy / CLOCK_TICKS - cpuS) / (wallMs / 1000),
        ...out,
        timedOut,
      });
    });
  });
  poll();
  return { child, done };
}

/**
 * A bench's temporary directory, and what removes it (unless `keep`) and ends the children this
 * process spawned: called at the end, and on Ctrl-C before exiting with 130.
 */
export function benchDirectory(prefix: string, keep: boolean): { dir: string; cleanUp: () => void } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  const cleanUp = () => {
    killAll();
    if (!keep) fs.rmSync(dir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    cleanUp();
    process.exit(130);
  });
  return { dir, cleanUp };
}
