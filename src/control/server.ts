/**
 * The control socket of a running `serve`: CLI commands (users, domains, tokens, import, stats,
 * alerts, silence, ingest validate) run inside the server, on its stores, for a CLI started beside it. Embedded
 * stores bind DATA_DIR to one process, so this is how a shell reaches them without stopping the
 * service. The socket is the DATA_DIR lock's (0600 in a 0700 directory): whoever may read the data
 * may administer it, and nothing listens on the network for this.
 */
import type net from 'node:net';
import { Readable } from 'node:stream';
import { CliError, type CommandHost } from '../cli/host.js';
import { runCommand, runsBesideServer } from '../cli/program.js';
import type { Runtime } from '../runtime.js';
import { clientFrame, onLines, parseFrame, send, type ClientFrame } from './protocol.js';

export interface CommandServer {
  /** Stops taking commands, interrupts those running (an import stops at a clean point) and waits for them. */
  close(): Promise<void>;
}

type RunFrame = Extract<ClientFrame, { type: 'run' }>;

/** Takes commands on the DATA_DIR lock socket of `runtime`; nothing to take in server mode (no lock: a CLI opens the shared stores itself). */
export function serveCommands(runtime: Runtime): CommandServer {
  const running = new Set<{ abort: AbortController; done: Promise<void> }>();
  runtime.lock?.acceptCommands((socket) => {
    const abort = new AbortController();
    let answer: ((yes: boolean) => void) | null = null;
    // The operator's standard input as it arrives, once the command asked for it.
    let stdin: Readable | null = null;
    let started = false;
    socket.on('close', () => {
      abort.abort();
      answer?.(false);
    });
    send(socket, { pid: process.pid, commands: true });
    onLines(socket, (line) => {
      const frame = parseFrame(clientFrame, line);
      if (!frame) return void socket.destroy();
      if (frame.type === 'cancel') return abort.abort();
      if (frame.type === 'answer') return answer?.(frame.yes);
      if (frame.type === 'stdin') return void stdin?.push(frame.text);
      if (frame.type === 'stdin-end') return void stdin?.push(null);
      if (started) return void socket.destroy();
      started = true;
      const entry = { abort, done: runForClient({ socket, run: frame, runtime, signal: abort.signal, awaitAnswer: (resolve) => (answer = resolve), stdin: () => (stdin ??= operatorStdin(socket, abort.signal)) }).finally(() => running.delete(entry)) };
      running.add(entry);
    });
  });
  return {
    async close() {
      runtime.lock?.acceptCommands(null);
      for (const command of running) command.abort.abort();
      await Promise.all([...running].map((c) => c.done));
    },
  };
}

/** The operator's standard input, asked of the CLI; it ends in an error when the command is interrupted first. */
function operatorStdin(socket: net.Socket, signal: AbortSignal): Readable {
  const stream = new Readable({ read() {} });
  const interrupted = () => stream.destroy(new CliError('interrupted while reading standard input'));
  if (signal.aborted) interrupted();
  else {
    signal.addEventListener('abort', interrupted, { once: true });
    stream.once('close', () => signal.removeEventListener('abort', interrupted));
    send(socket, { type: 'read-stdin' });
  }
  return stream;
}

/** One command a CLI asked the server to run: its connection and frame, and how it is interrupted, asked and fed. */
interface ClientRun {
  socket: net.Socket;
  run: RunFrame;
  runtime: Runtime;
  signal: AbortSignal;
  awaitAnswer: (resolve: (yes: boolean) => void) => void;
  stdin: () => Readable;
}

async function runForClient(client: ClientRun): Promise<void> {
  const { socket, run, runtime } = client;
  let code: number;
  if (!runsBesideServer(run.argv)) {
    send(socket, { type: 'err', text: `tailhouse: \`${run.argv[0]}\` does not run through a server; stop the server to run it\n` });
    code = 1;
  } else {
    const started = performance.now();
    // Logged by its name only: the arguments may hold a password.
    let command = '(none)';
    code = await runCommand(run.argv, remoteHost(client), undefined, (name) => (command = name));
    runtime.log.info({ component: 'control', command, code, ms: Math.round(performance.now() - started) }, 'command from the control socket');
  }
  send(socket, { type: 'exit', code });
  socket.end();
}

/** The host of a command run for a CLI: its output and questions travel back as frames. */
function remoteHost({ socket, run, runtime, signal, awaitAnswer, stdin }: ClientRun): CommandHost {
  return {
    out: (text) => send(socket, { type: 'out', text }),
    err: (text) => send(socket, { type: 'err', text }),
    env: run.env,
    cwd: run.cwd,
    exitCode: 0,
    // The server's stores, open for as long as it runs: nothing to open or close.
    withRuntime: (work) => work(runtime),
    interruption: () => signal,
    stdin,
    async progress(files) {
      if (!run.terminal.stderr) return { update: () => {}, stop: () => {} };
      send(socket, { type: 'progress-start', files });
      return {
        update: (diskBytes, lines) => send(socket, { type: 'progress', diskBytes, lines }),
        stop: () => send(socket, { type: 'progress-stop' }),
      };
    },
    confirm(question) {
      if (!run.terminal.stdin || signal.aborted) return Promise.resolve(false);
      return new Promise((resolve) => {
        awaitAnswer(resolve);
        send(socket, { type: 'confirm', question });
      });
    },
  };
}
