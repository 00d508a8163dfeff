import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterEach, beforeEach, expect } from 'vitest';
import { checkpointDir, CheckpointStore } from '../../../../ingest/checkpoints.js';
import { FileTail, type FileTailOptions } from '../../../../ingest/sources/file-tail.js';
import type { LineChunk } from '../../../../ingest/types.js';
import { createLogger } from '../../../../core/log.js';
import { prngInt } from '../../../support/random.js';

// What the tests of FileTail share: real files in a temporary directory, a real follower, real
// checkpoints, a writer of nginx's shape, and waits that poll a condition until a deadline.

export const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

export let dir: string;
export let file: string;
export let dataDir: string;
/** The followers opened by the test running, closed after it. */
export const tails: FileTail[] = [];

/** Each test in a temporary directory of its own (`dir`, the log `file`, the checkpoints' `dataDir`), its followers closed after it. */
export function useTempFiles(): void {
  beforeEach(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-tail-'));
    file = path.join(dir, 'logs', 'access.log');
    dataDir = checkpointDir(path.join(dir, 'data'));
    fs.mkdirSync(path.dirname(file));
  });
  afterEach(async () => {
    await Promise.all(tails.splice(0).map((t) => t.close()));
    fs.rmSync(dir, { recursive: true, force: true });
  });
}

/** A follower of `file` with the checkpoints of `dataDir`, loaded afresh as after a restart. */
export async function openTail(options: Partial<FileTailOptions> = {}): Promise<FileTail> {
  const tail = new FileTail({ path: file, checkpoints: await CheckpointStore.open(dataDir, log), log, pollMs: 50, ...options });
  tails.push(tail);
  return tail;
}

/** Resolves once `condition` holds; fails with `what()` after the deadline. */
export async function waitFor(condition: () => boolean, what: () => string, deadlineMs = 10_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting after ${deadlineMs} ms: ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Pulls chunks from a follower; `pull` gives up at a deadline but keeps the pending request. */
export class Consumer {
  readonly chunks: LineChunk[] = [];
  private pending: Promise<IteratorResult<LineChunk>> | null = null;
  private running: Promise<void> | null = null;
  private failure: unknown = null;

  constructor(
    private readonly tail: FileTail,
    private readonly autoAck = true,
  ) {}

  /** The next chunk, or null when none came within `withinMs`. */
  async pull(withinMs = 10_000): Promise<LineChunk | null> {
    this.pending ??= this.tail.next();
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), withinMs)));
    const result = await Promise.race([this.pending, expired]);
    clearTimeout(timer);
    if (result === null) return null;
    this.pending = null;
    if (result.done) return null;
    this.chunks.push(result.value);
    if (this.autoAck) await this.tail.ack(result.value);
    return result.value;
  }

  /** Pulls and acknowledges in the background until the follower closes. */
  run(): void {
    this.running = (async () => {
      for (;;) {
        const result = await this.tail.next();
        if (result.done) return;
        this.chunks.push(result.value);
        await this.tail.ack(result.value);
      }
    })().catch((err: unknown) => {
      this.failure = err;
    });
  }

  async stop(): Promise<void> {
    await this.tail.close();
    await this.running;
    if (this.failure !== null) throw this.failure;
  }

  lines(): string[] {
    return this.chunks.flatMap((c) => c.lines.map((l) => l.text));
  }

  async untilLines(count: number, deadlineMs = 10_000): Promise<void> {
    const deadline = Date.now() + deadlineMs;
    while (this.lines().length < count) {
      if (this.running) {
        await waitFor(() => this.lines().length >= count || this.failure !== null, () => `${this.lines().length} of ${count} lines`, deadline - Date.now());
        if (this.failure !== null) throw this.failure;
      }
      else if ((await this.pull(Math.max(1, deadline - Date.now()))) === null) throw new Error(`${this.lines().length} of ${count} lines by the deadline`);
    }
  }
}

/** Chunks of one file follow each other without gap or overlap, from 0 or a known start. */
export function expectContiguous(chunks: LineChunk[], starts: Record<string, number> = {}): void {
  const next = new Map<string, number>(Object.entries(starts));
  for (const c of chunks) {
    expect(c.startOffset, `chunk of ${c.path}`).toBe(next.get(c.identity) ?? 0);
    let at = c.startOffset;
    const entries = [...c.lines.map((l) => ({ offset: l.offset, length: Buffer.byteLength(l.text) })), ...c.overlong].sort((a, b) => a.offset - b.offset);
    for (const e of entries) {
      expect(e.offset).toBe(at);
      at = e.offset + e.length + 1;
    }
    expect(c.endOffset).toBe(at);
    next.set(c.identity, c.endOffset);
  }
}

/** Appends numbered lines the way nginx does: one write per line, to a descriptor opened with O_APPEND. */
export class Writer {
  private fd: number;
  seq = 0;
  private readonly rand = prngInt(7);

  /** `fixed`: every line the same length, so offsets of two contents line up. */
  constructor(
    private readonly target: string,
    private readonly fixed = false,
  ) {
    this.fd = fs.openSync(target, 'a');
  }

  write(count: number): void {
    for (let i = 0; i < count; i++) {
      const query = this.fixed ? 'fixed' : 'x'.repeat(this.rand(90));
      fs.writeSync(this.fd, `${String(this.seq).padStart(6, '0')} GET /item?q=${query} 200\n`);
      this.seq++;
    }
  }

  /** nginx after USR1: reopen the path (creating it when missing). */
  reopen(): void {
    fs.closeSync(this.fd);
    this.fd = fs.openSync(this.target, 'a');
  }

  close(): void {
    fs.closeSync(this.fd);
  }
}

export function seqOf(line: string): number {
  return Number(line.slice(0, line.indexOf(' ')));
}

/** Every line exactly once, and in order within each file. */
export function expectExactlyOnce(consumer: Consumer, total: number): void {
  const seqs = consumer.lines().map(seqOf);
  expect(seqs.length).toBe(total);
  expect([...seqs].sort((a, b) => a - b)).toEqual(Array.from({ length: total }, (_, i) => i));
  const lastOfFile = new Map<string, number>();
  for (const c of consumer.chunks) {
    for (const l of c.lines) {
      const seq = seqOf(l.text);
      expect(seq, `order within ${c.path}`).toBeGreaterThan(lastOfFile.get(c.identity) ?? -1);
      lastOfFile.set(c.identity, seq);
    }
  }
  expectContiguous(consumer.chunks);
}

/** A first run of the follower: reads (and acknowledges) `count` lines, then stops. */
export async function runUntilLines(count: number): Promise<Consumer> {
  const tail = await openTail();
  const consumer = new Consumer(tail);
  await consumer.untilLines(count);
  await tail.close();
  return consumer;
}

/** logrotate's `compress`: the file's gzip written beside it (whole, or only its first `fraction`), the plain file removed. */
export function compress(plain: string, gz: string, fraction = 1): Buffer {
  const bytes = zlib.gzipSync(fs.readFileSync(plain));
  fs.writeFileSync(gz, bytes.subarray(0, Math.floor(bytes.length * fraction)));
  fs.unlinkSync(plain);
  return bytes;
}
