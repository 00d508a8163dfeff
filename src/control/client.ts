/**
 * The CLI's side of the control socket (protocol.ts): finds a running `serve` holding DATA_DIR and
 * runs a command line through it, with the same output, progress bar, questions, standard input
 * and exit status as when the command runs alone. Ctrl-C asks the server to stop the command at a
 * clean point; a second Ctrl-C leaves at once (the server then stops the command as well).
 */
import net from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import { importProgress } from '../cli/import-report.js';
import type { Progress } from '../cli/host.js';
import { askOnTerminal } from '../cli/local-host.js';
import { liveLockSockets } from '../data-dir-lock.js';
import { FORWARDED_ENV, hello, onLines, parseFrame, send, serverFrame, STDIN_FRAME_CHARS, type ServerFrame } from './protocol.js';

/** A connection to a server that takes commands. */
export interface CommandConnection {
  pid: number;
  socket: net.Socket;
  /** Lines received after the greeting. */
  lines: AsyncIterator<string>;
}

/** A connection to the process holding `dataDir` if it takes commands (a `serve`); null otherwise (no holder, or one that does not). */
export async function connectToServer(dataDir: string): Promise<CommandConnection | null> {
  for (const { file } of await liveLockSockets(dataDir)) {
    const connection = await greet(file);
    if (connection) return connection;
  }
  return null;
}

async function greet(file: string): Promise<CommandConnection | null> {
  const socket = net.connect(file);
  const queue: string[] = [];
  const waiting: ((line: IteratorResult<string>) => void)[] = [];
  let ended = false;
  onLines(socket, (line) => {
    const next = waiting.shift();
    if (next) next({ value: line, done: false });
    else queue.push(line);
  });
  const finish = () => {
    ended = true;
    for (const next of waiting.splice(0)) next({ value: undefined, done: true });
  };
  socket.on('close', finish);
  socket.on('error', finish);
  const lines: AsyncIterator<string> = {
    next: () => {
      const line = queue.shift();
      if (line !== undefined) return Promise.resolve({ value: line, done: false });
      if (ended) return Promise.resolve({ value: undefined, done: true });
      return new Promise((resolve) => waiting.push(resolve));
    },
  };
  const first = await lines.next();
  const greeting = first.done ? undefined : parseFrame(hello, first.value);
  if (!greeting?.commands) {
    socket.destroy();
    return null;
  }
  return { pid: greeting.pid, socket, lines };
}

/** Runs `argv` through the server of `connection`; resolves with the command's exit status. */
export async function runThroughServer(connection: CommandConnection, argv: readonly string[]): Promise<number> {
  const { socket, lines } = connection;
  const env = Object.fromEntries(FORWARDED_ENV.flatMap((name) => (process.env[name] === undefined ? [] : [[name, process.env[name]]])));
  send(socket, { type: 'run', argv, cwd: process.cwd(), env, terminal: { stdin: Boolean(process.stdin.isTTY), stderr: Boolean(process.stderr.isTTY) } });
  let interrupts = 0;
  const onInterrupt = () => {
    if (++interrupts === 1) send(socket, { type: 'cancel' });
    else socket.destroy();
  };
  process.on('SIGINT', onInterrupt);
  process.on('SIGTERM', onInterrupt);
  let progress: Progress | null = null;
  try {
    for (let line = await lines.next(); !line.done; line = await lines.next()) {
      const frame = parseFrame(serverFrame, line.value);
      if (!frame) continue;
      if (frame.type === 'exit') return frame.code;
      progress = await apply(frame, socket, progress);
    }
  } finally {
    process.off('SIGINT', onInterrupt);
    process.off('SIGTERM', onInterrupt);
    socket.destroy();
    progress?.stop();
  }
  if (interrupts > 1) return 130;
  process.stderr.write(`tailhouse: the server (process ${connection.pid}) closed the connection before the command ended; its log tells why\n`);
  return 1;
}

/** Acts on one frame; returns the progress bar, which `progress-start` creates and `progress-stop` ends. */
async function apply(frame: Exclude<ServerFrame, { type: 'exit' }>, socket: net.Socket, progress: Progress | null): Promise<Progress | null> {
  switch (frame.type) {
    case 'out':
      process.stdout.write(frame.text);
      return progress;
    case 'err':
      process.stderr.write(frame.text);
      return progress;
    case 'progress-start':
      return importProgress(frame.files);
    case 'progress':
      progress?.update(frame.diskBytes, frame.lines);
      return progress;
    case 'progress-stop':
      progress?.stop();
      return null;
    case 'confirm':
      send(socket, { type: 'answer', yes: await askOnTerminal(frame.question) });
      return progress;
    case 'read-stdin':
      await sendStdin(socket);
      return progress;
  }
}

/**
 * Sends this process's standard input to the server, in frames, then its end; stops early when
 * the connection closes (the command ended, e.g. refusing more input than it takes). Should the
 * input fail, the connection is dropped rather than the input ended: the server then interrupts the
 * command, which never takes a part of the input for all of it.
 */
function sendStdin(socket: net.Socket): Promise<void> {
  const decoder = new StringDecoder('utf8');
  const sendText = (text: string) => {
    for (let at = 0; at < text.length; at += STDIN_FRAME_CHARS) send(socket, { type: 'stdin', text: text.slice(at, at + STDIN_FRAME_CHARS) });
  };
  return new Promise((resolve) => {
    const onData = (chunk: Buffer) => sendText(decoder.write(chunk));
    const stop = () => {
      process.stdin.off('data', onData).off('end', onEnd).off('error', onError);
      socket.off('close', stop);
      // Paused, it no longer holds the process open.
      process.stdin.pause();
      resolve();
    };
    const onEnd = () => {
      sendText(decoder.end());
      send(socket, { type: 'stdin-end' });
      stop();
    };
    const onError = (err: Error) => {
      process.stderr.write(`tailhouse: cannot read standard input: ${err.message}\n`);
      socket.destroy();
      stop();
    };
    process.stdin.on('data', onData).once('end', onEnd).once('error', onError);
    socket.once('close', stop);
  });
}
