import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { checkpointDir, CheckpointStore } from '../../../ingest/checkpoints.js';
import { fileIdentity, fingerprintLength, IDENTITY_BYTES, inspectPath, relate } from '../../../ingest/sources/file-identity.js';
import { FileTail, type FileTailOptions } from '../../../ingest/sources/file-tail.js';
import type { LineChunk } from '../../../ingest/types.js';
import { createLogger } from '../../../core/log.js';
import { prngInt } from '../../support/random.js';

// Real files in a temporary directory, a real follower, real checkpoints. Nothing sleeps a fixed
// time to let something happen: every wait polls a condition until a deadline.

const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

let dir: string;
let file: string;
let dataDir: string;
const tails: FileTail[] = [];

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

/** A follower of `file` with the checkpoints of `dataDir`, loaded afresh as after a restart. */
async function openTail(options: Partial<FileTailOptions> = {}): Promise<FileTail> {
  const tail = new FileTail({ path: file, checkpoints: await CheckpointStore.open(dataDir, log), log, pollMs: 50, ...options });
  tails.push(tail);
  return tail;
}

/** Resolves once `condition` holds; fails with `what()` after the deadline. */
async function waitFor(condition: () => boolean, what: () => string, deadlineMs = 10_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting after ${deadlineMs} ms: ${what()}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Pulls chunks from a follower; `pull` gives up at a deadline but keeps the pending request. */
class Consumer {
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
function expectContiguous(chunks: LineChunk[], starts: Record<string, number> = {}): void {
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
class Writer {
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

function seqOf(line: string): number {
  return Number(line.slice(0, line.indexOf(' ')));
}

/** Every line exactly once, and in order within each file. */
function expectExactlyOnce(consumer: Consumer, total: number): void {
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

describe('gathering a file written a line at a time', () => {
  it('after a chunk that reached the end of the file, lines appended within gatherMs make one chunk', async () => {
    fs.writeFileSync(file, 'first\n');
    const consumer = new Consumer(await openTail({ gatherMs: 1_500 }));
    expect((await consumer.pull())!.lines.map((l) => l.text)).toEqual(['first']);
    // The next chunk is asked for before the lines come: without gathering, the first append
    // (the directory watch wakes the follower) would be a chunk of its own.
    const second = consumer.pull();
    for (let n = 0; n < 5; n++) {
      fs.appendFileSync(file, `line ${n}\n`);
      await new Promise((resolve) => setTimeout(resolve, 60));
    }
    expect((await second)!.lines.map((l) => l.text)).toEqual(['line 0', 'line 1', 'line 2', 'line 3', 'line 4']);
    expectContiguous(consumer.chunks);
  });

  it('stops gathering at close', async () => {
    fs.writeFileSync(file, 'first\n');
    const tail = await openTail({ gatherMs: 60_000 });
    const consumer = new Consumer(tail);
    await consumer.pull();
    const next = tail.next();
    fs.appendFileSync(file, 'second\n');
    // Gathering: the line is not handed out at once.
    expect(await Promise.race([next.then(() => 'handed out'), new Promise((resolve) => setTimeout(() => resolve('held'), 300))])).toBe('held');
    const started = Date.now();
    await tail.close();
    expect((await next).done).toBe(true);
    expect(Date.now() - started).toBeLessThan(5_000);
  });
});

describe('file identity', () => {
  it('is the first line, at most IDENTITY_BYTES of it, and unknown before that', () => {
    expect(fingerprintLength(Buffer.from('abc'))).toBeNull();
    expect(fingerprintLength(Buffer.from('abc\ndef'))).toBe(4);
    expect(fingerprintLength(Buffer.alloc(IDENTITY_BYTES - 1, 'a'))).toBeNull();
    expect(fingerprintLength(Buffer.alloc(IDENTITY_BYTES + 10, 'a'))).toBe(IDENTITY_BYTES);
    // A growing file keeps its identity: it does not depend on how much follows the first line.
    expect(fileIdentity('s', Buffer.from('first\n'))).not.toBe(fileIdentity('t', Buffer.from('first\n')));
  });

  it('stays the same while the file grows, and tells inode reuse from a move', async () => {
    fs.writeFileSync(file, 'first line\nsec');
    const a = await inspectPath(file, 'src');
    fs.appendFileSync(file, 'ond line\n'.repeat(500));
    const b = await inspectPath(file, 'src');
    expect(a!.identity).not.toBeNull();
    expect(b!.identity).toBe(a!.identity);
    expect(b!.size).toBeGreaterThan(IDENTITY_BYTES);
    expect(relate(a!, b!)).toBe('same');
    expect(relate(a!, { ...b!, ino: b!.ino + 1 })).toBe('moved');
    expect(relate(a!, { ...b!, identity: 'other' })).toBe('inode-reused');
    expect(relate(a!, { ...b!, identity: null, ino: b!.ino + 1 })).toBe('other');
    expect(await inspectPath(path.join(dir, 'missing'), 'src')).toBeNull();
  });
});

describe('following a file', () => {
  it('delivers appended lines well within a second, with the default polling', async () => {
    fs.writeFileSync(file, '');
    const tail = await openTail({ pollMs: undefined });
    const consumer = new Consumer(tail);
    for (let i = 0; i < 5; i++) {
      const pulled = consumer.pull(5_000);
      // Let the follower reach its wait first, so the measure covers noticing the append.
      await waitFor(() => tail.stats().refreshes > i, () => 'the follower has not looked at the file');
      const written = Date.now();
      fs.appendFileSync(file, `line ${i}\n`);
      const chunk = await pulled;
      expect(Date.now() - written).toBeLessThan(1_000);
      expect(chunk?.lines.map((l) => l.text)).toEqual([`line ${i}`]);
    }
    expectContiguous(consumer.chunks);
  });

  it('picks up a file, and even its directory, created after the start', async () => {
    file = path.join(dir, 'later', 'access.log');
    const tail = await openTail();
    const consumer = new Consumer(tail);
    const first = consumer.pull(10_000);
    await waitFor(() => tail.stats().refreshes >= 3, () => 'no look at the missing file');
    fs.mkdirSync(path.dirname(file));
    fs.writeFileSync(file, 'hello\nworld\n');
    expect((await first)?.lines).toEqual([
      { offset: 0, text: 'hello' },
      { offset: 6, text: 'world' },
    ]);
  });

  it('holds a partial last line back until its newline arrives', async () => {
    fs.writeFileSync(file, 'one\ntw');
    const tail = await openTail();
    const consumer = new Consumer(tail);
    expect((await consumer.pull())?.lines).toEqual([{ offset: 0, text: 'one' }]);
    const next = consumer.pull(10_000);
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 5, () => 'the follower stopped looking');
    expect(consumer.chunks).toHaveLength(1);
    fs.appendFileSync(file, 'o\nthr');
    expect((await next)?.lines).toEqual([{ offset: 4, text: 'two' }]);
    fs.appendFileSync(file, 'ee\n');
    expect((await consumer.pull())?.lines).toEqual([{ offset: 8, text: 'three' }]);
    expectContiguous(consumer.chunks);
  });

  it('reports an overlong line with its offset, length and head, never holds it whole, and goes on', async () => {
    const long = 200 * 1024;
    fs.writeFileSync(file, 'before\n');
    const tail = await openTail();
    const consumer = new Consumer(tail);
    expect((await consumer.pull())?.lines.map((l) => l.text)).toEqual(['before']);
    // Written in two halves with looks in between, as a slow writer would: the follower keeps
    // only the head of the line while it waits for the rest.
    const next = consumer.pull(10_000);
    fs.appendFileSync(file, 'y'.repeat(long / 2));
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 3, () => 'the follower stopped looking');
    fs.appendFileSync(file, `${'z'.repeat(long / 2)}\nafter\n`);
    const chunk = await next;
    expect(chunk?.overlong).toEqual([{ offset: 7, length: long, head: 'y'.repeat(1024) }]);
    expect(chunk?.lines).toEqual([{ offset: 7 + long + 1, text: 'after' }]);
    expectContiguous(consumer.chunks);
  });

  it('honours maxLineBytes exactly, and an overlong line found whole in one read', async () => {
    fs.writeFileSync(file, `${'a'.repeat(100)}\n${'b'.repeat(101)}\nc\n`);
    const tail = await openTail({ maxLineBytes: 100 });
    const consumer = new Consumer(tail);
    const chunk = await consumer.pull();
    expect(chunk?.lines.map((l) => l.text)).toEqual(['a'.repeat(100), 'c']);
    expect(chunk?.overlong).toEqual([{ offset: 101, length: 101, head: 'b'.repeat(101) }]);
    expectContiguous(consumer.chunks);
  });

  it('cuts chunks at deterministic offsets: the same backlog gives the same chunks', async () => {
    const writer = new Writer(file);
    writer.write(1000);
    writer.close();
    const cut = async (source: string) => {
      const tail = await openTail({ source, chunkMaxLines: 64, chunkMaxBytes: 4096 });
      const consumer = new Consumer(tail);
      await consumer.untilLines(1000);
      await tail.close();
      return consumer.chunks.map((c) => [c.startOffset, c.endOffset]);
    };
    const first = await cut('a');
    expect(first.length).toBeGreaterThan(10);
    expect(await cut('b')).toEqual(first);
  });

  it('starts at the end when asked and there is no checkpoint, keeping a partial line whole', async () => {
    fs.writeFileSync(file, 'old 1\nold 2\npart');
    const tail = await openTail({ startAt: 'end' });
    const consumer = new Consumer(tail);
    const next = consumer.pull();
    await waitFor(() => tail.stats().refreshes >= 2, () => 'no look');
    fs.appendFileSync(file, 'ial\nnew\n');
    expect((await next)?.lines).toEqual([
      { offset: 12, text: 'partial' },
      { offset: 20, text: 'new' },
    ]);
  });
});

describe('rotation while a writer keeps appending', () => {
  /** Writes rounds of lines at an uneven pace, calling `rotate` between rounds, and checks every line arrived once. */
  async function scenario(rotate: (round: number, writer: Writer, consumer: Consumer) => Promise<void>): Promise<FileTail> {
    const writer = new Writer(file);
    const tail = await openTail({ chunkMaxLines: 7, rotatedIdleMs: 300 });
    const consumer = new Consumer(tail);
    consumer.run();
    const pace = prngInt(11);
    for (let round = 0; round < 4; round++) {
      for (let i = 0; i < 15; i++) {
        writer.write(1 + pace(6));
        // The writer's cadence, not a wait for the follower.
        await new Promise((resolve) => setTimeout(resolve, pace(4)));
      }
      await rotate(round, writer, consumer);
    }
    writer.write(25);
    writer.close();
    await consumer.untilLines(writer.seq, 15_000);
    // Nothing more may come: let the follower look several more times, then check again.
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 5, () => 'the follower stopped looking');
    expectExactlyOnce(consumer, writer.seq);
    // Rotated-away files are closed once idle; only the file at the path stays open.
    await waitFor(() => tail.stats().openFiles === 1, () => `${tail.stats().openFiles} files still open`);
    expect(tail.stats().lagBytes).toBe(0);
    await consumer.stop();
    return tail;
  }

  it('rename and create: the old file is finished through its open descriptor, then the new one', async () => {
    await scenario(async (round, writer) => {
      fs.renameSync(file, `${file}.${round + 1}`);
      fs.writeFileSync(file, '');
      // nginx keeps writing to the renamed file until it gets USR1 and reopens.
      writer.write(3);
      await new Promise((resolve) => setTimeout(resolve, 5));
      writer.write(2);
      writer.reopen();
    });
  });

  it('copytruncate: the unread rest of the old content comes from the copy, the new content from 0', async () => {
    await scenario(async (round) => {
      // logrotate copies, then truncates; the writer's O_APPEND descriptor carries on at 0.
      fs.copyFileSync(file, `${file}.${round + 1}`);
      fs.truncateSync(file, 0);
    });
  });

  it('in-place truncation after the follower caught up', async () => {
    await scenario(async (_round, writer, consumer) => {
      await consumer.untilLines(writer.seq);
      fs.truncateSync(file, 0);
    });
  });

  it('delete and recreate: the deleted file is drained through its descriptor', async () => {
    let generationStart = 0;
    await scenario(async (_round, writer, consumer) => {
      // A file deleted before anyone opened it cannot be read by anyone: wait until the follower
      // has delivered a line of this generation, so it holds the file open.
      await waitFor(() => consumer.lines().some((l) => seqOf(l) >= generationStart), () => 'no line of the current generation yet');
      fs.unlinkSync(file);
      writer.write(3);
      writer.reopen();
      generationStart = writer.seq;
    });
  });
});

describe('the same content under another inode', () => {
  it('continues where the original left off when a copy is moved over the file (sed -i, editors)', async () => {
    fs.writeFileSync(file, Array.from({ length: 10 }, (_, i) => `${String(i).padStart(6, '0')} GET /\n`).join(''));
    const tail = await openTail({ rotatedIdleMs: 200 });
    const consumer = new Consumer(tail);
    await consumer.untilLines(10);
    const copy = `${file}.new`;
    fs.copyFileSync(file, copy);
    fs.appendFileSync(copy, '000010 GET /\n000011 GET /\n');
    fs.renameSync(copy, file);
    await consumer.untilLines(12);
    expectExactlyOnce(consumer, 12);
    expect(new Set(consumer.chunks.map((c) => c.identity)).size).toBe(1);
  });
});

describe('replaced content found by its fingerprint', () => {
  it('copytruncate while nobody reads, the new content already longer than the old position', async () => {
    // Lines of one length: the old read position falls on a line boundary of the new content too,
    // so only the first line (the identity) shows that the content changed.
    const writer = new Writer(file, true);
    writer.write(20);
    const tail = await openTail();
    const consumer = new Consumer(tail);
    await consumer.untilLines(20);
    const position = consumer.chunks.at(-1)!.endOffset;
    const oldIdentity = consumer.chunks[0]!.identity;
    // Ten more lines the follower has not read (nobody pulls), then the rotation, then much more.
    writer.write(10);
    fs.copyFileSync(file, `${file}.1`);
    fs.truncateSync(file, 0);
    writer.write(200);
    writer.close();
    expect(fs.statSync(file).size).toBeGreaterThan(position);
    await consumer.untilLines(230);
    expectExactlyOnce(consumer, 230);
    const fromCopy = consumer.chunks.filter((c) => c.identity === oldIdentity && c.startOffset >= position);
    expect(fromCopy.map((c) => c.path)).toEqual([`${file}.1`]);
    expect(fromCopy.flatMap((c) => c.lines.map((l) => seqOf(l.text)))).toEqual(Array.from({ length: 10 }, (_, i) => 20 + i));
  });
});

describe('several rotations between two looks', () => {
  it.each(['rename and create', 'copytruncate'])('reads the generation nobody saw (%s)', async (how) => {
    const writer = new Writer(file);
    writer.write(10);
    const tail = await openTail();
    const consumer = new Consumer(tail);
    await consumer.untilLines(10);
    // Nobody pulls, so the follower does not look while two rotations go by.
    for (const suffix of ['.1', '.2']) {
      writer.write(5);
      if (how === 'copytruncate') {
        fs.copyFileSync(file, `${file}${suffix}`);
        fs.truncateSync(file, 0);
      } else {
        fs.renameSync(file, `${file}${suffix}`);
        writer.reopen();
      }
    }
    writer.write(5);
    writer.close();
    await consumer.untilLines(25);
    expectExactlyOnce(consumer, 25);
  });

  it.each([
    ['the follower opened it while it was empty', true, 1],
    ['the follower never looked at it', false, 1],
    ['the follower opened it while it was empty; two copies', true, 2],
  ])('reads the head of a new file that only its copy holds: rename and create, then copytruncate (%s)', async (_how, seenEmpty, copies) => {
    const writer = new Writer(file);
    writer.write(10);
    const tail = await openTail();
    const consumer = new Consumer(tail);
    await consumer.untilLines(10);
    // Rename and create; nginx writes to the renamed file until USR1 makes it reopen the path.
    fs.renameSync(file, `${file}.1`);
    fs.writeFileSync(file, '');
    writer.write(5);
    if (seenEmpty) {
      // The look that finds these lines also opens the new file, empty: nothing to fingerprint yet.
      await consumer.untilLines(15);
      await waitFor(() => tail.stats().openFiles === 2, () => `${tail.stats().openFiles} files open, not the old and the new one`);
    }
    // Nobody pulls from here on, so the follower does not look while the new file gets its first
    // lines and is copied and truncated.
    writer.reopen();
    const copyPaths = Array.from({ length: copies }, (_, i) => `${file}.${i + 2}`);
    for (const copy of copyPaths) {
      writer.write(5);
      fs.copyFileSync(file, copy);
      fs.truncateSync(file, 0);
      // Generations are ordered by modification time: the next copy must get a later one.
      const copiedAt = fs.statSync(copy).mtimeMs;
      await waitFor(() => Date.now() > copiedAt + 50, () => 'the clock to move on');
    }
    writer.write(5);
    writer.close();
    await consumer.untilLines(writer.seq);
    expectExactlyOnce(consumer, writer.seq);
    // The old file to its end, then the new file's head from each copy, then what followed it.
    expect(consumer.lines().map(seqOf)).toEqual(Array.from({ length: writer.seq }, (_, i) => i));
    copyPaths.forEach((copy, i) => {
      const fromCopy = consumer.chunks.filter((c) => c.path === copy).flatMap((c) => c.lines.map((l) => seqOf(l.text)));
      expect(fromCopy, copy).toEqual(Array.from({ length: 5 }, (_, j) => 15 + 5 * i + j));
    });
  });
});

/** A first run of the follower: reads (and acknowledges) `count` lines, then stops. */
async function runUntilLines(count: number): Promise<Consumer> {
  const tail = await openTail();
  const consumer = new Consumer(tail);
  await consumer.untilLines(count);
  await tail.close();
  return consumer;
}

describe('restart from the checkpoint', () => {
  it('resumes exactly: an unacknowledged chunk cut at the end of the file is cut the same way again', async () => {
    const writer = new Writer(file);
    writer.write(10);
    const a = await openTail();
    const first = new Consumer(a, false);
    const c1 = (await first.pull())!;
    await a.ack(c1);
    writer.write(5);
    const c2 = (await first.pull())!;
    expect(c2.lines.map((l) => seqOf(l.text))).toEqual([10, 11, 12, 13, 14]);
    // c2 may have reached the sink but is not acknowledged; the file grows before the crash.
    writer.write(5);
    await a.close();

    const b = await openTail();
    const second = new Consumer(b);
    const again = (await second.pull())!;
    expect([again.identity, again.startOffset, again.endOffset]).toEqual([c2.identity, c2.startOffset, c2.endOffset]);
    expect(again.lines).toEqual(c2.lines);
    expect((await second.pull())?.lines.map((l) => seqOf(l.text))).toEqual([15, 16, 17, 18, 19]);
    await b.close();

    const stored = JSON.parse(fs.readFileSync(path.join(dataDir, 'checkpoints.json'), 'utf8'));
    expect(stored.files[c1.identity]).toMatchObject({ source: file, path: file, offset: fs.statSync(file).size, cuts: [] });

    writer.write(1);
    writer.close();
    const c = await openTail();
    const third = new Consumer(c);
    const last = (await third.pull())!;
    expect(last.startOffset).toBe(second.chunks[1]!.endOffset);
    expect(last.lines.map((l) => seqOf(l.text))).toEqual([20]);
  });

  it('finishes a file that rotated away while stopped, then reads the new one', async () => {
    const writer = new Writer(file);
    writer.write(10);
    const first = await runUntilLines(10);
    writer.write(5);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(7);
    writer.close();

    const b = await openTail();
    const second = new Consumer(b);
    await second.untilLines(12);
    const seqs = second.lines().map(seqOf);
    expect(seqs).toEqual(Array.from({ length: 12 }, (_, i) => 10 + i));
    expect(second.chunks[0]!.path).toBe(`${file}.1`);
    expect(second.chunks[0]!.startOffset).toBe(first.chunks.at(-1)!.endOffset);
  });

  it('reads every generation of several rotations while stopped, but no older archive', async () => {
    fs.writeFileSync(`${file}.3`, 'an archive from before the first start\n');
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    // Older than the checkpoint: an mtime comparison must not depend on sub-millisecond luck.
    fs.utimesSync(`${file}.3`, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    for (const suffix of ['.2', '.1']) {
      writer.write(4);
      fs.renameSync(file, `${file}${suffix}`);
      writer.reopen();
    }
    writer.write(3);
    writer.close();

    const b = await openTail();
    const second = new Consumer(b);
    await second.untilLines(11);
    expect(second.lines().map(seqOf)).toEqual(Array.from({ length: 11 }, (_, i) => 10 + i));
    expect(second.chunks.map((c) => path.basename(c.path))).toEqual(['access.log.2', 'access.log.1', 'access.log']);
  });

  it('finishes the copy of a file copytruncated while stopped', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    writer.write(5);
    fs.copyFileSync(file, `${file}-20251121`);
    fs.truncateSync(file, 0);
    writer.write(7);
    writer.close();

    const b = await openTail();
    const second = new Consumer(b);
    await second.untilLines(12);
    expect(second.lines().map(seqOf)).toEqual(Array.from({ length: 12 }, (_, i) => 10 + i));
  });

  it.each(['rewritten in place', 'deleted and recreated'])('does not resume a checkpoint on a reused inode (%s)', async (how) => {
    fs.writeFileSync(file, Array.from({ length: 10 }, (_, i) => `old line ${i}\n`).join(''));
    const before = fs.statSync(file);
    await runUntilLines(10);
    // Same line lengths, so the old offset even falls on a line boundary: only the identity tells.
    const replacement = Array.from({ length: 20 }, (_, i) => `new line ${i}\n`).join('');
    if (how === 'rewritten in place') {
      fs.truncateSync(file, 0);
      fs.appendFileSync(file, replacement);
      expect(fs.statSync(file).ino).toBe(before.ino);
    } else {
      fs.unlinkSync(file);
      fs.writeFileSync(file, replacement);
    }
    const b = await openTail();
    const second = new Consumer(b);
    await second.untilLines(20);
    expect(second.lines()).toEqual(Array.from({ length: 20 }, (_, i) => `new line ${i}`));
    expect(second.chunks[0]!.startOffset).toBe(0);
  });
});

/** logrotate's `compress`: the file's gzip written beside it (whole, or only its first `fraction`), the plain file removed. */
function compress(plain: string, gz: string, fraction = 1): Buffer {
  const bytes = zlib.gzipSync(fs.readFileSync(plain));
  fs.writeFileSync(gz, bytes.subarray(0, Math.floor(bytes.length * fraction)));
  fs.unlinkSync(plain);
  return bytes;
}

describe('generations found by their identity', () => {
  it('a source that stopped before reading anything finds the file it had claimed rotated away, and only that', async () => {
    // Rotated before the source ever started: history for `tailhouse import`, not for the follower.
    fs.writeFileSync(`${file}.2`, 'an older generation\n');
    fs.utimesSync(`${file}.2`, new Date(Date.now() - 60_000), new Date(Date.now() - 60_000));
    const writer = new Writer(file);
    writer.write(10);
    // Started and stopped before a line was read (a worker killed while its domain was still
    // unregistered): the file at the path is claimed all the same.
    const first = await openTail();
    await first.start();
    await first.close();
    writer.write(5);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(7);
    writer.close();

    const second = new Consumer(await openTail());
    await second.untilLines(22);
    expectExactlyOnce(second, 22);
    expect(second.chunks[0]!.path).toBe(`${file}.1`);
    expect(second.lines()).not.toContain('an older generation');
  });

  it.each(['beginning', 'end'] as const)('a source first started on an empty file reads the generation written after its start (startAt %s)', async (startAt) => {
    fs.writeFileSync(file, '');
    const first = await openTail({ startAt });
    await first.start();
    await first.close();
    // Written, and rotated away, while the source was down: nothing of it was ever seen.
    const writer = new Writer(file);
    writer.write(6);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(4);
    writer.close();

    const second = new Consumer(await openTail({ startAt }));
    await second.untilLines(10);
    expectExactlyOnce(second, 10);
  });

  it('reads no foreign file as a generation: a compressor\'s temporary file, .bak and .tmp copies', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    // Beside the log while the source is down: a half-written gzip of another text (a compressor
    // at work), a .bak of an old archive made just now, and a .tmp copy of the file as it was.
    const other = Array.from({ length: 50 }, (_, i) => `foreign line ${i}\n`).join('');
    const gz = zlib.gzipSync(other);
    fs.writeFileSync(`${file}.2.gz.tmp`, gz.subarray(0, gz.length >> 1));
    fs.writeFileSync(`${file}.7`, 'an archive from long ago\n');
    fs.utimesSync(`${file}.7`, new Date(Date.now() - 3_600_000), new Date(Date.now() - 3_600_000));
    fs.copyFileSync(`${file}.7`, `${file}.7.bak`);
    fs.copyFileSync(file, `${file}.tmp`);
    fs.writeFileSync(`${file}.old`, other);
    writer.write(5);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(5);
    writer.close();

    const tail = await openTail();
    const second = new Consumer(tail);
    second.run();
    await second.untilLines(10);
    // Nothing else may come: let the follower look for more than a second (a look for generations
    // still owed is retried every second), then check.
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 30, () => 'the follower stopped looking');
    await second.stop();
    expect(second.lines().map(seqOf)).toEqual(Array.from({ length: 10 }, (_, i) => 10 + i));
    expect(new Set(second.chunks.map((c) => path.basename(c.path)))).toEqual(new Set(['access.log.1', 'access.log']));
  });

  it('finishes a generation compressed while it was stopped, and reads one it never saw from its compressed copy', async () => {
    const writer = new Writer(file);
    writer.write(10);
    const first = await runUntilLines(10);
    // Two rotations while stopped, each generation compressed at once (`compress` without
    // `delaycompress`): the known one (lines 10–14) and an unseen one (15–18) exist only as gzip.
    for (const count of [5, 4]) {
      writer.write(count);
      if (fs.existsSync(`${file}.1.gz`)) fs.renameSync(`${file}.1.gz`, `${file}.2.gz`);
      fs.renameSync(file, `${file}.1`);
      writer.reopen();
      compress(`${file}.1`, `${file}.1.gz`);
    }
    writer.write(3);
    writer.close();

    const second = new Consumer(await openTail());
    await second.untilLines(12);
    expect(second.lines().map(seqOf)).toEqual(Array.from({ length: 12 }, (_, i) => 10 + i));
    expect(second.chunks.map((c) => path.basename(c.path))).toEqual(['access.log.2.gz', 'access.log.1.gz', 'access.log']);
    // Resumed in the decompressed text where the plain file's checkpoint left it.
    expect(second.chunks[0]!.startOffset).toBe(first.chunks.at(-1)!.endOffset);
  });

  it('reads a compressed generation only once its gzip stream is complete', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    writer.write(5);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    // The rest of the known generation (lines 10–14) only in a gzip file still being written.
    const whole = compress(`${file}.1`, `${file}.1.gz`, 0.6);
    writer.write(3);
    writer.close();

    const tail = await openTail();
    const second = new Consumer(tail);
    second.run();
    await waitFor(() => second.lines().length >= 3, () => `${second.lines().length} lines`);
    // Several looks at the incomplete file (retried every second) read nothing of it.
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 30, () => 'the follower stopped looking');
    expect(second.lines().map(seqOf)).toEqual([15, 16, 17]);
    fs.writeFileSync(`${file}.1.gz`, whole);
    await second.untilLines(8);
    await second.stop();
    expect(second.lines().map(seqOf)).toEqual([15, 16, 17, 10, 11, 12, 13, 14]);
  });
});

describe('windows of a kill or a rotation', () => {
  it('finishes a known generation from the copy that holds the most of it: a shorter .bak beside the complete gzip', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    writer.write(2);
    // A copy taken while nginx still wrote to the file: it misses the generation's last lines.
    fs.copyFileSync(file, `${file}.1.bak`);
    writer.write(3);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    compress(`${file}.1`, `${file}.1.gz`);
    writer.write(4);
    writer.close();

    const second = new Consumer(await openTail());
    await second.untilLines(9);
    expect(second.lines().map(seqOf)).toEqual(Array.from({ length: 9 }, (_, i) => 10 + i));
    expect(second.chunks.filter((c) => c.path === `${file}.1.bak`)).toEqual([]);
  });

  it('finds an unseen generation renamed again between the look that found it and its opening', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    // While stopped: the known generation (A) gets 5 lines and becomes .1; a new one (B), never
    // seen, gets 6 and becomes .1 in turn (A .2); the one at the path (C) gets 4.
    writer.write(5);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(6);
    fs.renameSync(`${file}.1`, `${file}.2`);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(4);
    // C last changed well after B: a look owed by C's rotation starts after B's last change.
    const later = new Date(Date.now() + 10_000);
    fs.utimesSync(file, later, later);
    // The next rotation comes while the restarted follower opens B (its second opening of .1: the
    // first is the look that fingerprints it): B is .2 by then, C .1, and D at the path.
    const open = fsp.open;
    let opensOfFirst = 0;
    const spy = vi.spyOn(fsp, 'open').mockImplementation(async (...args: Parameters<typeof fsp.open>) => {
      if (args[0] === `${file}.1` && ++opensOfFirst === 2) {
        fs.renameSync(`${file}.2`, `${file}.3`);
        fs.renameSync(`${file}.1`, `${file}.2`);
        fs.renameSync(file, `${file}.1`);
        writer.reopen();
        writer.write(3);
      }
      return open(...args);
    });
    try {
      const second = new Consumer(await openTail());
      await second.untilLines(18);
      expect(opensOfFirst).toBeGreaterThanOrEqual(2);
      writer.close();
      // A, C, B, D: each whole, once (A and C were open before B was found).
      expect(second.lines().map(seqOf).sort((a, b) => a - b)).toEqual(Array.from({ length: 18 }, (_, i) => 10 + i));
    } finally {
      spy.mockRestore();
    }
  });

  it('looks again when a rotation goes through its look: an unseen generation moved away, its .bak seen alone', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    // While stopped: a generation never seen (B, 6 lines) is rotated to .1 and copied to .1.bak.
    fs.renameSync(file, `${file}.2`);
    writer.reopen();
    writer.write(6);
    fs.renameSync(file, `${file}.1`);
    fs.copyFileSync(`${file}.1`, `${file}.1.bak`);
    writer.reopen();
    writer.write(4);
    writer.close();
    // B moves on (.1 -> .3) while the restarted follower looks at the siblings, before it looks at
    // .1 and after it listed the names: only its .bak copy is seen, which is no generation.
    const open = fsp.open;
    let moved = false;
    const spy = vi.spyOn(fsp, 'open').mockImplementation(async (...args: Parameters<typeof fsp.open>) => {
      if (!moved && String(args[0]).startsWith(`${file}.`)) {
        moved = true;
        fs.renameSync(`${file}.1`, `${file}.3`);
      }
      return open(...args);
    });
    try {
      const tail = await openTail();
      const second = new Consumer(tail);
      second.run();
      await second.untilLines(10);
      expect(moved).toBe(true);
      expect(second.lines().map(seqOf).sort((a, b) => a - b)).toEqual(Array.from({ length: 10 }, (_, i) => 10 + i));
      expect(new Set(second.chunks.map((c) => path.basename(c.path)))).toEqual(new Set(['access.log.3', 'access.log']));
      await second.stop();
    } finally {
      spy.mockRestore();
    }
  });

  it('records a first start in the write that claims the file at the path: a kill before it leaves a first start to do again', async () => {
    const writer = new Writer(file);
    writer.write(5);
    // The write that claims the file fails, as if the worker were killed before it landed.
    const rename = fsp.rename;
    const spy = vi.spyOn(fsp, 'rename').mockImplementation(async (...args: Parameters<typeof fsp.rename>) => {
      const state = JSON.parse(fs.readFileSync(args[0], 'utf8')) as { files: Record<string, unknown> };
      if (Object.keys(state.files).length > 0) throw new Error('killed before the claim landed');
      return rename(...args);
    });
    try {
      const first = await openTail({ startAt: 'end' });
      await expect(first.start()).rejects.toThrow('killed before the claim landed');
      await first.close();
    } finally {
      spy.mockRestore();
    }
    // Still a first start: what the file held before it is skipped, as startAt end asks.
    writer.write(3);
    writer.close();
    const second = new Consumer(await openTail({ startAt: 'end' }));
    second.run();
    const tail = tails.at(-1)!;
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 10, () => 'the follower stopped looking');
    await second.stop();
    expect(second.lines()).toEqual([]);
  });

  it('keeps the checkpoint of a generation a file beside the path still holds, however old', async () => {
    const writer = new Writer(file);
    writer.write(10);
    await runUntilLines(10);
    fs.renameSync(file, `${file}.1`);
    writer.reopen();
    writer.write(4);
    writer.close();
    // A compressor at work on a generation never seen: the look for generations stays owed (it
    // is tried again every second) after the restart's first one.
    const unseen = zlib.gzipSync('2025/01/01 00:00:00 an unseen generation\n'.repeat(200));
    fs.writeFileSync(`${file}.2.gz`, unseen.subarray(0, unseen.length >> 1));

    // Every checkpoint counts as old: the known generation's (now .1) must stay all the same.
    const tail = await openTail({ pruneAfterMs: 0 });
    const second = new Consumer(tail);
    second.run();
    await second.untilLines(4);
    const seen = tail.stats().refreshes;
    await waitFor(() => tail.stats().refreshes >= seen + 30, () => 'the follower stopped looking');
    await second.stop();
    expect(second.lines().map(seqOf)).toEqual([10, 11, 12, 13]);
  });
});

describe('backpressure', () => {
  it('reads no further than the unacknowledged chunks allow on a 50 MB backlog, then delivers it all', async () => {
    const lineCount = 50 * 8192;
    const block = Buffer.from(Array.from({ length: 8192 }, (_, i) => `${String(i).padStart(8, '0')} ${'p'.repeat(118)}\n`).join(''));
    const fd = fs.openSync(file, 'w');
    for (let i = 0; i < 50; i++) fs.writeSync(fd, block);
    fs.closeSync(fd);
    const chunkMaxBytes = 1024 * 1024;
    const heapBefore = process.memoryUsage().heapUsed;
    const tail = await openTail({ chunkMaxBytes, chunkMaxLines: 100_000, maxInFlight: 2 });
    const stalled = new Consumer(tail, false);
    expect(await stalled.pull()).not.toBeNull();
    expect(await stalled.pull()).not.toBeNull();
    // The consumer stalls: the follower must not read on. This negative check needs a window.
    expect(await stalled.pull(300)).toBeNull();
    expect(tail.stats().inFlight).toBe(2);
    expect(tail.stats().readBytes).toBeLessThanOrEqual(2 * (chunkMaxBytes + 64 * 1024));
    expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(32 * 1024 * 1024);

    for (const c of stalled.chunks) await tail.ack(c);
    let lines = stalled.chunks.reduce((n, c) => n + c.lines.length, 0);
    while (lines < lineCount) {
      const c = (await stalled.pull())!;
      await tail.ack(c);
      lines += c.lines.length;
      expect(tail.stats().inFlight).toBe(0);
    }
    expect(lines).toBe(lineCount);
    expect(stalled.chunks.every((c) => c.endOffset - c.startOffset <= chunkMaxBytes + 127)).toBe(true);
    expect(tail.stats().lagBytes).toBe(0);
    // Each byte read about once: cutting a chunk rereads at most one buffer.
    expect(tail.stats().readBytes).toBeLessThan(fs.statSync(file).size * 1.1);
  });

  it('refuses acknowledgements out of order or twice', async () => {
    fs.writeFileSync(file, 'a\n');
    const tail = await openTail({ maxInFlight: 3 });
    const consumer = new Consumer(tail, false);
    const c1 = (await consumer.pull())!;
    fs.appendFileSync(file, 'b\n');
    const c2 = (await consumer.pull())!;
    await expect(tail.ack(c2)).rejects.toThrow(/in order/);
    await tail.ack(c1);
    await expect(tail.ack(c1)).rejects.toThrow(/twice/);
    await tail.ack(c2);
  });
});

describe('checkpoint store', () => {
  const entry = { source: 's', path: '/var/log/nginx/a.log', offset: 10, dev: 1, ino: 2, cuts: [] };

  it('reloads what was written, after a restart', async () => {
    const store = await CheckpointStore.open(dataDir, log);
    await Promise.all(Array.from({ length: 50 }, (_, i) => store.set(`id${i}`, { ...entry, offset: i, cuts: [i + 5] })));
    await store.set('id7', { ...entry, offset: 70, cuts: [] });
    const again = await CheckpointStore.open(dataDir, log);
    expect(again.list('s')).toHaveLength(50);
    expect(again.get('id7')).toMatchObject({ ...entry, offset: 70, cuts: [] });
    expect(again.get('id3')).toMatchObject({ offset: 3, cuts: [8] });
    expect(again.list('other')).toEqual([]);
  });

  it('is not corrupted by a crash in the middle of a write (a leftover temporary file)', async () => {
    const store = await CheckpointStore.open(dataDir, log);
    await store.set('id', entry);
    fs.writeFileSync(path.join(dataDir, 'checkpoints.json.tmp'), '{"version":1,"files":{"id":{"sou');
    const again = await CheckpointStore.open(dataDir, log);
    expect(again.get('id')).toMatchObject(entry);
    expect(fs.existsSync(path.join(dataDir, 'checkpoints.json.tmp'))).toBe(false);
    await again.set('id', { ...entry, offset: 11 });
    expect((await CheckpointStore.open(dataDir, log)).get('id')?.offset).toBe(11);
  });

  it('refuses a checkpoint file that does not parse instead of starting over', async () => {
    fs.mkdirSync(dataDir, { recursive: true });
    fs.writeFileSync(path.join(dataDir, 'checkpoints.json'), '{"version":1,"files":{"id":{"offset":-1}}}');
    await expect(CheckpointStore.open(dataDir, log)).rejects.toThrow(/checkpoints\.json is not valid/);
  });

  it('prunes old entries of files that are gone, and only those', async () => {
    const store = await CheckpointStore.open(dataDir, log);
    await store.set('gone', entry);
    await store.set('present', entry);
    await store.set('other-source', { ...entry, source: 't' });
    expect(await store.prune('s', 60_000, async () => true)).toBe(0);
    expect(await store.prune('s', 0, async (identity) => identity === 'gone')).toBe(1);
    const again = await CheckpointStore.open(dataDir, log);
    expect(again.get('gone')).toBeUndefined();
    expect(again.get('present')).toBeDefined();
    expect(again.get('other-source')).toBeDefined();
  });

  it('lets a follower prune the entry of a finished file that is gone', async () => {
    const store = await CheckpointStore.open(dataDir, log);
    await store.set('finished', { ...entry, source: file, path: path.join(dir, 'logs', 'access.log.9') });
    fs.writeFileSync(file, 'x\n');
    const tail = await openTail({ pruneAfterMs: 0 });
    const consumer = new Consumer(tail);
    await consumer.untilLines(1);
    expect((await CheckpointStore.open(dataDir, log)).get('finished')).toBeUndefined();
  });
});
