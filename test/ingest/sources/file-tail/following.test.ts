/**
 * FileTail (ingest/sources/file-tail.ts) following a file as it grows, on real files: lines
 * gathered as written, a file's identity, partial lines, acknowledgement and backpressure, and
 * the checkpoint store. Nothing sleeps a fixed time: every wait polls a condition until a deadline.
 */
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import { CheckpointStore } from '../../../../ingest/checkpoints.js';
import { fileIdentity, fingerprintLength, IDENTITY_BYTES, inspectPath, relate } from '../../../../ingest/sources/file-identity.js';
import { Consumer, dataDir, dir, expectContiguous, file, log, openTail, useTempFiles, waitFor, Writer } from './harness.js';

useTempFiles();

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
    const later = path.join(dir, 'later', 'access.log');
    const tail = await openTail({ path: later });
    const consumer = new Consumer(tail);
    const first = consumer.pull(10_000);
    await waitFor(() => tail.stats().refreshes >= 3, () => 'no look at the missing file');
    fs.mkdirSync(path.dirname(later));
    fs.writeFileSync(later, 'hello\nworld\n');
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
