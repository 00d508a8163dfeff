/**
 * The DATA_DIR lock: embedded PGlite and chDB each bind their data directory to one process, and a
 * second process must stop at once with a message naming the holder instead of corrupting them.
 *
 * The lock is a listening Unix socket in `DATA_DIR/run/`, which the kernel closes when its process
 * dies, whatever the death (SIGKILL included). Why that and not the alternatives:
 * - a pid file and `kill(pid, 0)`: a killed process stays "alive" until its parent reaps it (a
 *   zombie), so a restart right after `kill -9` was refused; the pid can also have been reused,
 *   and means nothing across containers (pid namespaces);
 * - flock/fcntl: Node has no binding, and the packages adding one compile C at install (node-gyp:
 *   python, make, a compiler), which `npm install` as the only set-up step and the slim Docker
 *   image do not have;
 * - an abstract-namespace socket: needs no file, but is per network namespace (two containers
 *   sharing the volume would not see each other) and Linux only. A socket file is seen by every
 *   process that sees the directory.
 *
 * A connection to a live socket is accepted (by the kernel, even while its process is busy); to a
 * dead one's file it is refused. A single fixed socket name would have to be unlinked after a crash
 * and bound again, and two starters doing that at once could both believe they hold it. So every
 * process binds a socket of its own (`<pid>-<random>.sock`, listening before it gets that name, so a
 * file with such a name is either live or dead, never half-made) and only then looks at the others:
 * any live one is a holder, or another process starting at the same moment, and this one backs off;
 * dead ones are removed (their names are never reused, so removing one cannot hit a live socket).
 * Two processes starting together see each other at least one way round, so at most one goes on
 * (both may stop; starting again then works). `DATA_DIR/tailhouse.pid` is still written, for people.
 *
 * A process killed with SIGKILL shows as a zombie ('Z') as soon as its main thread has gone, but
 * the kernel closes its files only when its last thread has: for a large process that takes a
 * moment, during which its socket still accepts. So a holder whose process is a zombie is waited
 * for (up to EXITING_WAIT_MS) rather than named: a restart right after `kill -9` goes ahead.
 *
 * The socket is private (0600 in a 0700 directory): whoever may read the data may administer it. It
 * answers a connection with a hello line, `{"pid":…,"commands":false}`, unless its process took
 * commands on it (acceptCommands: `serve` does, src/control/server.ts), which makes it the control
 * socket a CLI beside the running server talks to (src/control/client.ts).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** sun_path holds 108 bytes on Linux (104 on the BSDs and macOS) with its final NUL; libuv silently cuts longer paths. */
const MAX_SOCKET_PATH_BYTES = process.platform === 'linux' ? 107 : 103;
const SOCKET_NAME = /^(\d+)-[0-9a-f]+\.sock$/;
/** A half-made socket (a process killed between its bind and its rename) older than this is litter. */
const STALE_TEMP_MS = 60_000;
/** How long a holder whose process is exiting (a zombie whose threads are still going) is waited for. */
export const EXITING_WAIT_MS = 10_000;
const EXITING_POLL_MS = 50;

/** The state letter of /proc/PID/stat (R, S, Z, …); null where it cannot be read (gone, another pid namespace, not Linux). */
export function processState(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.charAt(stat.lastIndexOf(')') + 2) || null;
  } catch {
    return null;
  }
}

export interface LockOptions {
  /** A process's state letter (processState unless a test gives its own). */
  stateOf?: (pid: number) => string | null;
  exitingWaitMs?: number;
}

export class DataDirInUseError extends Error {}

export interface DataDirLock {
  /** Gives up the lock; its socket stops answering. */
  release(): void;
  /** From now on, connections to the lock socket go to `handler`; null: back to a hello that says "no commands". */
  acceptCommands(handler: ((socket: net.Socket) => void) | null): void;
}

/** The first line the lock socket writes to a connection. */
export interface LockHello {
  pid: number;
  commands: boolean;
}

/**
 * Takes the lock of `dataDir` for this process. Throws DataDirInUseError naming the holder when
 * another live process (or this one) has it.
 */
export async function lockDataDir(dataDir: string, { stateOf = processState, exitingWaitMs = EXITING_WAIT_MS }: LockOptions = {}): Promise<DataDirLock> {
  const runDir = path.join(dataDir, 'run');
  fs.mkdirSync(runDir, { recursive: true, mode: 0o700 });
  const token = `${process.pid}-${randomBytes(4).toString('hex')}`;
  const own = path.join(runDir, `${token}.sock`);
  const temp = path.join(runDir, `.${token}.tmp`);
  if (Buffer.byteLength(own) > MAX_SOCKET_PATH_BYTES) {
    throw new Error(`DATA_DIR ${dataDir} is too long for its lock socket (${own} has ${Buffer.byteLength(own)} bytes, at most ${MAX_SOCKET_PATH_BYTES}): choose a shorter path`);
  }
  let commands: ((socket: net.Socket) => void) | null = null;
  const server = net.createServer((socket) => {
    // A prober hangs up at once: its reset is no error of ours.
    socket.on('error', () => {});
    if (commands) commands(socket);
    else socket.end(`${JSON.stringify({ pid: process.pid, commands: false } satisfies LockHello)}\n`);
  });
  server.on('error', () => {});
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(temp, () => {
      server.off('error', reject);
      resolve();
    });
  });
  // Never keeps the process alive on its own.
  server.unref();
  const closeSocket = () => {
    server.close();
    for (const file of [own, temp]) fs.rmSync(file, { force: true });
  };
  try {
    fs.chmodSync(temp, 0o600);
    fs.renameSync(temp, own);
    let holder = await liveHolder(runDir, path.basename(own));
    for (const deadline = Date.now() + exitingWaitMs; holder !== null && stateOf(holder) === 'Z' && Date.now() < deadline; ) {
      await new Promise((resolve) => setTimeout(resolve, EXITING_POLL_MS));
      holder = await liveHolder(runDir, path.basename(own));
    }
    if (holder) {
      throw new DataDirInUseError(
        `DATA_DIR ${dataDir} is in use by process ${holder}: the embedded stores allow one process; stop it first, or use DATABASE_URL and CLICKHOUSE_URL`,
      );
    }
    fs.writeFileSync(path.join(dataDir, 'tailhouse.pid'), `${process.pid}\n`);
  } catch (err) {
    closeSocket();
    throw err;
  }
  const release = () => {
    closeSocket();
    const pidFile = path.join(dataDir, 'tailhouse.pid');
    try {
      if (Number(fs.readFileSync(pidFile, 'utf8')) === process.pid) fs.unlinkSync(pidFile);
    } catch {
      // Already gone.
    }
  };
  return { release, acceptCommands: (handler) => void (commands = handler) };
}

/** The lock sockets of `dataDir` whose process is alive, removing dead ones on the way. */
export async function liveLockSockets(dataDir: string): Promise<{ pid: number; file: string }[]> {
  const runDir = path.join(dataDir, 'run');
  if (!fs.existsSync(runDir)) return [];
  const live: { pid: number; file: string }[] = [];
  for (const name of fs.readdirSync(runDir)) {
    const match = SOCKET_NAME.exec(name);
    if (!match) continue;
    const file = path.join(runDir, name);
    const state = await probe(file);
    if (state === 'dead') fs.rmSync(file, { force: true });
    else if (state === 'live') live.push({ pid: Number(match[1]), file });
  }
  return live;
}

/** The pid of another live lock socket in `runDir`, removing dead ones and litter on the way; null if none. */
async function liveHolder(runDir: string, ownName: string): Promise<number | null> {
  for (const name of fs.readdirSync(runDir)) {
    const file = path.join(runDir, name);
    if (name.endsWith('.tmp') && isOlderThan(file, STALE_TEMP_MS)) fs.rmSync(file, { force: true });
  }
  return (await liveLockSockets(path.dirname(runDir))).find((s) => path.basename(s.file) !== ownName)?.pid ?? null;
}

/** Connects to a lock socket: accepted means live; refused means its process is gone. */
function probe(file: string): Promise<'live' | 'dead' | 'gone'> {
  return new Promise((resolve) => {
    const socket = net.connect(file);
    socket.once('connect', () => {
      socket.destroy();
      resolve('live');
    });
    socket.once('error', (err: NodeJS.ErrnoException) => {
      socket.destroy();
      // Anything but "refused" or "no such file" (a full backlog: EAGAIN) is a holder that is busy.
      resolve(err.code === 'ECONNREFUSED' ? 'dead' : err.code === 'ENOENT' ? 'gone' : 'live');
    });
  });
}

function isOlderThan(file: string, ms: number): boolean {
  try {
    return Date.now() - fs.statSync(file).mtimeMs > ms;
  } catch {
    return false;
  }
}
