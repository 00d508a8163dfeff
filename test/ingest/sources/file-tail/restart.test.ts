/**
 * FileTail (ingest/sources/file-tail.ts) stopped and started again from its checkpoint, on real
 * files, and killed or rotated in every window between reading, sending and acknowledging: no line
 * lost or read twice.
 */
import { describe, expect, it, vi } from 'vitest';
import fs from 'node:fs';
import fsp from 'node:fs/promises';
import path from 'node:path';
import zlib from 'node:zlib';
import { compress, Consumer, dataDir, file, openTail, runUntilLines, seqOf, tails, useTempFiles, waitFor, Writer } from './harness.js';

useTempFiles();

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
