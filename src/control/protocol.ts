/**
 * The control socket's protocol: one JSON object a line, each way. The server (the lock socket of
 * a running `serve`, src/data-dir-lock.ts) greets with `{"pid":…,"commands":true}`; the CLI sends one
 * `run`; the server answers with the command's output, progress and questions, then `exit`. The CLI
 * may send `cancel` (Ctrl-C) and `answer`s, and its standard input when the server asks for it. A
 * connection runs one command.
 */
import type net from 'node:net';
import { z } from 'zod';

/** Environment variables a command reads from the operator's shell (host.ts's `env`); nothing else is sent. */
export const FORWARDED_ENV = ['TAILHOUSE_PASSWORD'] as const;

const MAX_ARGS = 10_000;
/** The longest piece of standard input one frame carries. */
export const STDIN_FRAME_CHARS = 65_536;

export const clientFrame = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('run'),
    argv: z.array(z.string().max(65_536)).max(MAX_ARGS),
    cwd: z.string().min(1).max(4096),
    env: z.partialRecord(z.enum(FORWARDED_ENV), z.string().max(4096)),
    /** Which of the operator's streams are terminals: a progress bar and questions need one. */
    terminal: z.object({ stdin: z.boolean(), stderr: z.boolean() }),
  }),
  z.object({ type: z.literal('cancel') }),
  z.object({ type: z.literal('answer'), yes: z.boolean() }),
  /** The operator's standard input, in pieces, after the server asked for it (`read-stdin`); then `stdin-end`. */
  z.object({ type: z.literal('stdin'), text: z.string().max(STDIN_FRAME_CHARS) }),
  z.object({ type: z.literal('stdin-end') }),
]);
export type ClientFrame = z.infer<typeof clientFrame>;

export const serverFrame = z.discriminatedUnion('type', [
  z.object({ type: z.literal('out'), text: z.string() }),
  z.object({ type: z.literal('err'), text: z.string() }),
  z.object({ type: z.literal('progress-start'), files: z.array(z.string()) }),
  z.object({ type: z.literal('progress'), diskBytes: z.number(), lines: z.number() }),
  z.object({ type: z.literal('progress-stop') }),
  z.object({ type: z.literal('confirm'), question: z.string() }),
  /** The command reads the operator's standard input: the CLI sends it (`stdin` frames, then `stdin-end`). */
  z.object({ type: z.literal('read-stdin') }),
  z.object({ type: z.literal('exit'), code: z.number().int() }),
]);
export type ServerFrame = z.infer<typeof serverFrame>;

export const hello = z.object({ pid: z.number().int(), commands: z.boolean() });

/** A run frame longer than this is not a command line: the connection is dropped. */
const MAX_LINE_BYTES = 16 * 1024 * 1024;

/** Calls `onLine` with each complete line `socket` receives; destroys a socket sending an endless line. */
export function onLines(socket: net.Socket, onLine: (line: string) => void): void {
  let pending = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    pending += chunk;
    let end: number;
    while ((end = pending.indexOf('\n')) >= 0) {
      const line = pending.slice(0, end);
      pending = pending.slice(end + 1);
      onLine(line);
    }
    if (pending.length > MAX_LINE_BYTES) socket.destroy();
  });
}

/** Writes one frame, unless the other side has gone. */
export function send(socket: net.Socket, frame: object): void {
  if (!socket.destroyed && socket.writable) socket.write(`${JSON.stringify(frame)}\n`);
}

/** Parses a received line with `schema`; undefined for anything else. */
export function parseFrame<T extends z.ZodTypeAny>(schema: T, line: string): z.output<T> | undefined {
  try {
    const parsed = schema.safeParse(JSON.parse(line));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
