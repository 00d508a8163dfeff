/**
 * What a CLI command runs on: its output, its stores and its operator. One command, two hosts:
 * the process running alone (local-host.ts: the terminal, stores it opens itself) and a running
 * `serve` holding DATA_DIR (src/control/server.ts: frames over the control socket, the server's
 * stores). A command written against this interface behaves the same on both.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Readable } from 'node:stream';
import type { z } from 'zod';
import { ApiError } from '../http/errors.js';
import type { Runtime } from '../runtime.js';

/** Progress of a long command (an import), drawn as a bar where the operator's terminal allows. */
export interface Progress {
  update(diskBytes: number, lines: number): void;
  stop(): void;
}

export interface CommandHost {
  /** Standard output: the command's results. */
  out(text: string): void;
  /** Standard error: notes, warnings, what is shown once. */
  err(text: string): void;
  /** The operator's environment, for the few variables a command reads (TAILHOUSE_PASSWORD). */
  env: Readonly<Record<string, string | undefined>>;
  /** The operator's working directory: relative paths given on the command line are resolved there. */
  cwd: string;
  /** Runs `work` on the stores: opened for it (alone) or the server's (beside a running server). */
  withRuntime<T>(work: (runtime: Runtime) => Promise<T>): Promise<T>;
  /** Aborted when the operator interrupts (Ctrl-C) or goes away; asking for it makes the command interruptible. */
  interruption(): AbortSignal;
  /** A progress bar over `files`' bytes on the operator's terminal; nothing when it is not one. */
  progress(files: string[]): Promise<Progress>;
  /** The operator's standard input (read by readOperatorText for `-`). */
  stdin(): Readable;
  /** Asks the operator yes or no on their terminal; false when there is no terminal to ask on. */
  confirm(question: string): Promise<boolean>;
  /** The exit status the command ends with, unless it throws (1). */
  exitCode: number;
}

/** Fails with one clear line, the way every CLI error should read. */
export class CliError extends Error {}

/** For a service call's catch: its 404 becomes the operator's line `message`; anything else goes on as it is. */
export const whenNotFound =
  (message: string) =>
  (err: unknown): never => {
    if (err instanceof ApiError && err.status === 404) throw new CliError(message);
    throw err;
  };

export function parseWith<T extends z.ZodTypeAny>(schema: T, value: unknown, what: string): z.output<T> {
  const result = schema.safeParse(value);
  if (!result.success) throw new CliError(`${what} ${result.error.issues[0]?.message ?? 'is invalid'}`);
  return result.data;
}

/** Goes on once the operator confirmed (or passed `--yes`); refuses with `refusal` otherwise. */
export async function confirmOr(host: CommandHost, yes: boolean | undefined, question: string, refusal: string): Promise<void> {
  if (!yes && !(await host.confirm(question))) throw new CliError(`${refusal} (confirm, or pass --yes)`);
}

/** Every row of a paged listing (the operator asked for the whole list), 100 a page. */
export async function everyPage<T>(read: (page: { page: number; limit: number }) => Promise<[rows: T[], total: number]>): Promise<T[]> {
  const found: T[] = [];
  for (let page = 1; ; page++) {
    const [rows, total] = await read({ page, limit: 100 });
    found.push(...rows);
    if (found.length >= total || rows.length === 0) return found;
  }
}

/** A path given by the operator, as the host process must open it. */
export const operatorPath = (host: CommandHost, file: string) => path.resolve(host.cwd, file);

/** What `chunks` hold as UTF-8 text, read to their end; refused (`what` named) once past `maxBytes`. */
async function readCapped(chunks: AsyncIterable<Buffer | string>, maxBytes: number, what: string): Promise<string> {
  const parts: Buffer[] = [];
  let bytes = 0;
  for await (const chunk of chunks) {
    const part = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    bytes += part.length;
    if (bytes > maxBytes) throw new CliError(`${what} holds more than ${maxBytes.toLocaleString('en-US')} bytes`);
    parts.push(part);
  }
  return Buffer.concat(parts).toString('utf8');
}

/** The text of a file the operator named, or of their standard input for `-`; refused past `maxBytes`. */
export function readOperatorText(host: CommandHost, file: string, maxBytes: number): Promise<string> {
  return file === '-' ? readCapped(host.stdin(), maxBytes, 'standard input') : readCapped(fs.createReadStream(operatorPath(host, file)), maxBytes, file);
}
