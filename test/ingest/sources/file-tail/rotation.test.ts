/**
 * FileTail (ingest/sources/file-tail.ts) under rotation while a writer keeps appending, on real
 * files: renamed, copied and truncated, replaced and compressed files, several rotations between
 * two looks, and generations told apart by their identity, each line read once.
 */
import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { FileTail } from '../../../../ingest/sources/file-tail.js';
import { prngInt } from '../../../support/random.js';
import { compress, Consumer, expectExactlyOnce, file, openTail, runUntilLines, seqOf, useTempFiles, waitFor, Writer } from './harness.js';

useTempFiles();

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
