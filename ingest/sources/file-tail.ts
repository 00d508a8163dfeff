/**
 * A file source with `tail -F` semantics over one path, producing line chunks for the pipeline
 * (sources → transforms → sinks). The consumer pulls chunks (async iterator) and acknowledges each
 * one once the sink has accepted it; the acknowledgement is what advances the durable checkpoint.
 *
 * What is followed:
 * - a file that does not exist yet: picked up when it appears (directory watch, polling fallback);
 * - appends: read as soon as the directory watch fires, at the latest after `pollMs`;
 * - rename-and-create rotation, and delete-and-recreate: the old file stays open and is read to its
 *   end before the new one (lines the writer still appends through its old descriptor are read
 *   too); it is closed once it has been idle at its end for `rotatedIdleMs`;
 * - copytruncate and in-place truncation: the file at the path shrinks below the read position, or
 *   its first line (its identity) changes, or the read position no longer follows a newline. The
 *   rest of the previous content is then looked for among the rotated siblings (`access.log.1`,
 *   `access.log-20250101`, not compressed ones) by identity and read from where we were; the new
 *   content is read from its beginning. Lines written between logrotate's copy and its truncate are
 *   lost by copytruncate's design, in every shipper.
 * - inode reuse: checkpoints are keyed by content identity, never by inode, so a new file that got
 *   the old inode number starts from its beginning (see file-identity.ts).
 * - restart: the file at the path resumes from its checkpoint; every other checkpointed file of the
 *   same source still found at its recorded path or among the rotated siblings, and longer than its
 *   checkpoint, is finished first (rotations that happened while the worker was stopped).
 * - generations nobody saw (two rotations between two looks, or while stopped): a rotated sibling
 *   with no checkpoint, modified after the previous generation's last change, is read from 0. So is
 *   one modified since the previous look at a file that had no identity then: a new file is empty
 *   when first seen, and lines written to it, copied and truncated before the next look (a
 *   copytruncate right after a rename-and-create) are only in that copy.
 *
 * Chunks are exact: [startOffset, endOffset) runs from one line start to the next, cut after
 * `chunkMaxLines` lines or once `chunkMaxBytes` are reached, counted from the chunk's start, so a
 * replay from a checkpoint cuts the same batches. A chunk cut short by the end of the file (live
 * following) cannot be recomputed later, when the file has grown: its end is recorded durably in the
 * checkpoint before it is handed out, and a replay cuts there again. Changing the chunk limits
 * between a crash and its restart re-cuts the batches that were in flight, which then no longer
 * deduplicate: change them after a clean stop.
 *
 * Memory: at most `maxInFlight` unacknowledged chunks exist, the follower reads nothing more until
 * one is acknowledged (the file is the buffer); a line being assembled holds at most `maxLineBytes`;
 * longer lines are reported in `overlong` (offset, length, head) without ever being held whole.
 *
 * Not handled: compressed rotations (`compress` without `delaycompress` leaves no plain copy to
 * finish); a file deleted before it was ever opened (nobody can read it); a partial last line of a
 * rotated file that never gets its newline (left unread, logged); lines a writer appends to a
 * rotated file after it was closed (idle `rotatedIdleMs`) wait for the next restart, which finishes
 * it from its checkpoint; two generations of one file whose first lines are byte-identical (they
 * share an identity: nginx lines carry a timestamp, so this takes two rotations within a second
 * with identical requests, or a truncation that keeps the first line).
 */
import fs from 'node:fs';
import fsp, { type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../src/log.js';
import type { Checkpoint, CheckpointStore, CheckpointUpdate } from '../checkpoints.js';
import type { LineChunk } from '../types.js';
import { DEFAULT_CUT_LIMITS, LineCutter, type Cut, type Framing, type OverlongScan } from './line-cutter.js';
import { inspectPath, isMissing, readIdentity, relate, type FoundFile } from './file-identity.js';

export interface FileTailOptions {
  /** The followed path (`tail -F` follows the name, not the file). */
  path: string;
  checkpoints: CheckpointStore;
  log: Logger;
  /** Names the source in identities and checkpoints; default: the absolute path. */
  source?: string;
  /** Where the file at the path starts when the source has no checkpoint at all (CONTRACT §6). */
  startAt?: 'beginning' | 'end';
  /** Longer lines go to `overlong` (default 64 KiB). */
  maxLineBytes?: number;
  /** `error-log`: continuation lines join the entry before them (see line-cutter.ts); default `line`. */
  framing?: Framing;
  chunkMaxLines?: number;
  chunkMaxBytes?: number;
  /** Chunks handed out and not yet acknowledged, at most. */
  maxInFlight?: number;
  /** Polling interval, the fallback when the directory watch misses or is unavailable (≤ 250 ms). */
  pollMs?: number;
  /** A rotated-away file idle at its end for this long is done and closed. */
  rotatedIdleMs?: number;
  /** Checkpoints of files that are gone are dropped after this long without change. */
  pruneAfterMs?: number;
}

export interface FileTailStats {
  /** Bytes read from disk so far (a line re-read while it waits for its newline counts again). */
  readBytes: number;
  /** Chunks handed out and not yet acknowledged. */
  inFlight: number;
  /** Bytes of the open files not yet acknowledged. */
  lagBytes: number;
  /** How many times the follower has looked at the files. */
  refreshes: number;
  openFiles: number;
}


interface Position {
  lineStart: number;
  overlong: OverlongScan | null;
}

/** An open file being read. */
interface Tracked extends Position {
  fh: FileHandle;
  path: string;
  dev: number;
  ino: number;
  /** Null while the first line is incomplete: nothing can be read before that anyway. */
  identity: string | null;
  size: number;
  mtimeMs: number;
  /** When the size last changed (Date.now()). */
  changedAt: number;
  /** The last read found no complete line and the size has not changed since. */
  drained: boolean;
  /** No longer the file at the path: read to its end, then closed. */
  rotated: boolean;
  /** Another open file has the same identity: this one waits for it to finish. */
  waiting: boolean;
  /**
   * Set when the content was replaced in place, or changed while it had no identity (it may have
   * been replaced unseen): once the content has an identity, look for generations written since
   * then. Not before: with the identity still unknown, a generation written, copied and truncated
   * meanwhile would be neither the file's content nor yet a sibling.
   */
  unseenSince: number | null;
  /** When the previous look at the file began (Date.now()); null before the first. */
  lookedAt: number | null;
}

/** Per identity: what the sink has accepted and what is handed out. */
interface Progress {
  acked: number;
  cuts: number[];
  /** Handed out, not yet acknowledged, oldest first. */
  handedOut: LineChunk[];
  path: string;
  dev: number;
  ino: number;
}

interface Scan extends Cut {
  /** An overlong line still missing its newline at the end. */
  pending: OverlongScan | null;
  /** Stopped at the end of the file rather than at a chunk limit or a recorded cut. */
  eof: boolean;
}

const NEWLINE = 0x0a;
// Large reads: a backlog (a restart, a burst) is read at disk speed with few system calls.
const READ_BUFFER_BYTES = 256 * 1024;
const WATCH_RETRY_MS = 5_000;
/**
 * File systems stamp modification times from a coarse clock (ext4: one scheduler tick behind), so
 * "written after" comparisons against them allow this much; an archive never read and last written
 * within a second of the current generation's last change is the price.
 */
const MTIME_SLACK_MS = 1_000;
const COMPRESSED = /\.(gz|bz2|xz|zst|lz4|zip|Z)$/;
const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };

export class FileTail implements AsyncIterable<LineChunk> {
  readonly path: string;
  readonly source: string;
  private readonly store: CheckpointStore;
  private readonly log: Logger;
  private readonly startAt: 'beginning' | 'end';
  private readonly cutter: LineCutter;
  private readonly maxInFlight: number;
  private readonly pollMs: number;
  private readonly rotatedIdleMs: number;
  private readonly pruneAfterMs: number;

  /** Rotated-away files first, oldest first; the file at the path last. */
  private readonly files: Tracked[] = [];
  private current: Tracked | null = null;
  private readonly progress = new Map<string, Progress>();
  /** Chunks handed out → whether their acknowledgement is being written. */
  private readonly outstanding = new Map<LineChunk, boolean>();
  private readonly buffer = Buffer.alloc(READ_BUFFER_BYTES);
  private queue: Promise<unknown> = Promise.resolve();
  private started = false;
  private closed = false;
  private closing: Promise<void> | null = null;
  /** Only while starting: the source has no checkpoint and starts at the end. */
  private skipExisting = false;
  private dirty = false;
  private waker: (() => void) | null = null;
  private watcher: fs.FSWatcher | null = null;
  private watchTriedAt = -Infinity;
  /** Date.now() of the previous look at the path; null before the first. */
  private previousLookAt: number | null = null;
  private readBytes = 0;
  private refreshes = 0;

  constructor(options: FileTailOptions) {
    this.path = path.resolve(options.path);
    this.source = options.source ?? this.path;
    this.store = options.checkpoints;
    this.log = options.log.child({ component: 'file-tail', source: this.source });
    this.startAt = options.startAt ?? 'beginning';
    this.cutter = new LineCutter({
      maxLineBytes: options.maxLineBytes ?? DEFAULT_CUT_LIMITS.maxLineBytes,
      chunkMaxLines: options.chunkMaxLines ?? DEFAULT_CUT_LIMITS.chunkMaxLines,
      chunkMaxBytes: options.chunkMaxBytes ?? DEFAULT_CUT_LIMITS.chunkMaxBytes,
    }, options.framing);
    this.maxInFlight = options.maxInFlight ?? 2;
    this.pollMs = options.pollMs ?? 200;
    this.rotatedIdleMs = options.rotatedIdleMs ?? 5_000;
    this.pruneAfterMs = options.pruneAfterMs ?? 24 * 3600_000;
  }

  [Symbol.asyncIterator](): AsyncIterator<LineChunk> {
    return {
      next: () => this.next(),
      return: async () => {
        await this.close();
        return DONE;
      },
    };
  }

  /** The next chunk; waits for lines, and while `maxInFlight` chunks are unacknowledged. */
  next(): Promise<IteratorResult<LineChunk>> {
    const result = this.queue.then(() => this.step());
    this.queue = result.catch(() => {});
    return result;
  }

  /**
   * Records that the sink accepted `chunk`: the checkpoint of its file moves to its end, durably,
   * before this resolves. Chunks of one file must be acknowledged in the order they were handed out.
   * A rejection means the checkpoint could not be written: stop, and let a restart replay.
   */
  async ack(chunk: LineChunk): Promise<void> {
    if (this.outstanding.get(chunk) !== false) throw new Error('ack of a chunk this follower did not hand out, or acknowledged twice');
    const p = this.progress.get(chunk.identity);
    const position = p ? p.handedOut.indexOf(chunk) : -1;
    if (position > 0) {
      throw new Error(`chunks of a file are acknowledged in order: [${chunk.startOffset}, ${chunk.endOffset}) of ${chunk.path} came before an earlier one`);
    }
    this.outstanding.set(chunk, true);
    try {
      if (p && position === 0) {
        p.handedOut.shift();
        p.acked = chunk.endOffset;
        p.cuts = p.cuts.filter((c) => c > chunk.endOffset);
        await this.store.set(chunk.identity, this.checkpointOf(p));
      } else {
        this.log.warn({ path: chunk.path, identity: chunk.identity, offset: chunk.startOffset }, 'acknowledged a chunk of a file that was reread from its beginning since');
      }
    } finally {
      this.outstanding.delete(chunk);
      this.wake();
    }
  }

  stats(): FileTailStats {
    let lagBytes = 0;
    for (const t of this.files) {
      const acked = t.identity === null ? 0 : (this.progress.get(t.identity)?.acked ?? 0);
      lagBytes += Math.max(0, t.size - acked);
    }
    return { readBytes: this.readBytes, inFlight: this.outstanding.size, lagBytes, refreshes: this.refreshes, openFiles: this.files.length };
  }

  /** Stops following: a pending `next()` resolves as done; open files are closed. */
  close(): Promise<void> {
    if (!this.closing) {
      this.closed = true;
      this.wake();
      this.closing = (async () => {
        await this.queue;
        this.watcher?.close();
        this.watcher = null;
        for (const t of this.files.splice(0)) await t.fh.close();
        this.current = null;
      })();
    }
    return this.closing;
  }

  private async step(): Promise<IteratorResult<LineChunk>> {
    if (!this.started) await this.start();
    for (;;) {
      if (this.closed) return DONE;
      if (this.outstanding.size < this.maxInFlight) {
        await this.refresh();
        const chunk = await this.readNext();
        if (chunk) return { done: false, value: chunk };
      }
      await this.wait();
    }
  }

  private async start(): Promise<void> {
    this.started = true;
    const entries = this.store.list(this.source);
    this.skipExisting = this.startAt === 'end' && entries.length === 0;
    await this.refresh();
    this.skipExisting = false;
    await this.resumeRotated(entries);
    await this.prune();
  }

  /** Finishes files of earlier checkpoints that rotated away while nobody was reading them. */
  private async resumeRotated(entries: [string, Checkpoint][]): Promise<void> {
    if (entries.length === 0) return;
    const current = this.current;
    const pending = entries.filter(([identity]) => identity !== current?.identity && !this.progress.has(identity));
    const found = await this.siblings(pending.map(([, e]) => e.path));
    for (const [identity, entry] of pending) {
      if (current && entry.path === this.path && relate({ identity, dev: entry.dev, ino: entry.ino }, current) === 'inode-reused') {
        this.log.info({ path: this.path, identity, ino: entry.ino }, 'the inode of a checkpointed file now holds another file: reading the new one from its beginning');
      }
      const file = found.find((f) => f.identity === identity);
      if (file && file.size > entry.offset) await this.track(file, identity);
    }
    await this.trackUnseen(Math.max(...entries.map(([, e]) => Date.parse(e.updatedAt))));
  }

  /** Looks at the path and at every open file: rotation, truncation, identity, finished files. */
  private async refresh(): Promise<void> {
    this.refreshes++;
    this.ensureWatch();
    const lookedAt = Date.now();
    const seen = await statOrNull(this.path);
    const cur = this.current;
    // When the path holds a new file: generations written since this could have come and gone.
    let since: number | null = null;
    if (cur && (!seen || seen.dev !== cur.dev || seen.ino !== cur.ino)) {
      this.log.info({ path: this.path, identity: cur.identity }, seen ? 'another file is at the path (rotation): finishing the old one first' : 'the file left the path: finishing it');
      cur.rotated = true;
      cur.changedAt = Date.now();
      this.current = null;
      since = cur.mtimeMs;
    }
    if (!this.current && seen?.isFile() && (await this.openCurrent())) since ??= this.previousLookAt;
    // After opening the new file, not before: a rotation between the look and the open leaves the
    // generation it skipped among the siblings by now.
    if (since !== null) await this.trackUnseen(since);
    this.previousLookAt = lookedAt;
    for (const t of [...this.files]) await this.inspect(t);
  }

  /** Opens the file at the path; false when there is none or it is one already open. */
  private async openCurrent(): Promise<boolean> {
    let fh: FileHandle;
    try {
      fh = await fsp.open(this.path, 'r');
    } catch (err) {
      if (isMissing(err)) return false;
      throw err;
    }
    const st = await fh.stat();
    const known = this.files.find((t) => t.dev === st.dev && t.ino === st.ino);
    if (!st.isFile() || known) {
      await fh.close();
      // A rotated-away file moved back to the path is the followed file again.
      if (known) {
        known.rotated = false;
        this.files.splice(this.files.indexOf(known), 1);
        this.files.push(known);
        this.current = known;
      }
      return false;
    }
    const t = newTracked(fh, this.path, st, false);
    this.files.push(t);
    this.current = t;
    this.log.info({ path: this.path, ino: st.ino }, 'following file');
    return true;
  }

  private async inspect(t: Tracked): Promise<void> {
    const lookedAt = Date.now();
    const st = await t.fh.stat();
    const previousSize = t.size;
    const previousMtimeMs = t.mtimeMs;
    const changed = st.size !== t.size || st.mtimeMs !== t.mtimeMs;
    if (changed) {
      t.size = st.size;
      t.mtimeMs = st.mtimeMs;
      t.changedAt = Date.now();
      t.drained = false;
    }
    if (t.identity === null) {
      // No identity at the previous look either (a new file is empty when first seen): what was
      // written since may already be copied and truncated away, and nothing we hold recognises the
      // copy. So once the file has an identity, generations written since that look are looked for.
      if (changed && t.lookedAt !== null) t.unseenSince ??= t.lookedAt;
      const identity = await readIdentity(t.fh, this.source);
      if (identity !== null) await this.adopt(t, identity);
    } else if (changed) {
      const why = await this.replacedBecause(t);
      if (why) await this.onReplaced(t, why, previousSize, previousMtimeMs);
    }
    t.lookedAt = lookedAt;
    const done = t.drained || (t.identity === null && !t.waiting);
    if (t.rotated && done && Date.now() - t.changedAt >= this.rotatedIdleMs) await this.finish(t);
  }

  /** Why the content at the read position is no longer what was read up to it, or null. */
  private async replacedBecause(t: Tracked): Promise<string | null> {
    if (t.size < (t.overlong?.scanned ?? t.lineStart)) return 'shrank below the read position';
    if ((await readIdentity(t.fh, this.source)) !== t.identity) return 'first line changed';
    if (t.lineStart > 0 && (await byteAt(t.fh, t.lineStart - 1)) !== NEWLINE) return 'no line boundary at the read position';
    return null;
  }

  /** Truncation or copytruncate: finish the previous content from a copy if there is one; restart the file. */
  private async onReplaced(t: Tracked, why: string, previousSize: number, previousMtimeMs: number): Promise<void> {
    const old = t.identity;
    const position: Position = { lineStart: t.lineStart, overlong: t.overlong };
    t.identity = null;
    t.lineStart = 0;
    t.overlong = null;
    t.drained = false;
    const copy = old === null ? undefined : (await this.siblings([])).find((f) => f.identity === old && f.size > position.lineStart);
    const fields = { path: t.path, identity: old, offset: position.lineStart, why };
    if (copy && old !== null) {
      this.log.info({ ...fields, copy: copy.path }, 'file rewritten in place (copytruncate): finishing its previous content from the copy');
      await this.track(copy, old, position);
    } else if (previousSize > position.lineStart) {
      this.log.warn({ ...fields, unread: previousSize - position.lineStart }, 'file truncated in place with unread bytes and no copy of them found: they are lost');
    } else {
      this.log.info(fields, 'file truncated in place: reading it again from its beginning');
    }
    t.unseenSince = previousMtimeMs;
    const identity = await readIdentity(t.fh, this.source);
    if (identity !== null) await this.adopt(t, identity);
  }

  /** Gives `t` its identity and the position to read from: the checkpoint, or the beginning. */
  private async adopt(t: Tracked, identity: string): Promise<void> {
    // The same content open twice (a copy moved into place while the original is still being
    // read): reading both would repeat lines, so this one waits and continues where the other ends.
    if (this.files.some((u) => u !== t && u.identity === identity)) {
      if (!t.waiting) this.log.info({ path: t.path, identity }, 'a file with the same identity is still being read: waiting for it');
      t.waiting = true;
      return;
    }
    t.waiting = false;
    let p = this.progress.get(identity);
    if (!p) {
      p = this.loadProgress(identity, t);
      this.progress.set(identity, p);
    }
    Object.assign(p, { path: t.path, dev: t.dev, ino: t.ino });
    let at = p.handedOut.at(-1)?.endOffset ?? p.acked;
    if (!(await fitsAt(t, at))) {
      this.log.warn({ path: t.path, identity, offset: at, size: t.size }, 'checkpoint does not fit the file (no line boundary there): reading it from its beginning');
      p = { acked: 0, cuts: [], handedOut: [], path: t.path, dev: t.dev, ino: t.ino };
      this.progress.set(identity, p);
      at = 0;
    }
    if (this.skipExisting && t === this.current && at === 0) {
      at = await lastLineEnd(t.fh, t.size);
      p.acked = at;
      await this.store.set(identity, this.checkpointOf(p));
      this.log.info({ path: t.path, identity, offset: at }, 'no checkpoint and startAt end: skipping what the file already holds');
    }
    t.identity = identity;
    t.lineStart = at;
    t.overlong = null;
    if (t.unseenSince !== null) {
      const since = t.unseenSince;
      t.unseenSince = null;
      await this.trackUnseen(since);
    }
  }

  private loadProgress(identity: string, t: Tracked): Progress {
    const entry = this.store.get(identity);
    return { acked: entry?.offset ?? 0, cuts: [...(entry?.cuts ?? [])], handedOut: [], path: t.path, dev: t.dev, ino: t.ino };
  }

  /** Opens a file found on disk as a rotated one to finish, at `position` or at its checkpoint. */
  private async track(found: FoundFile, identity: string, position?: Position): Promise<void> {
    let fh: FileHandle;
    try {
      fh = await fsp.open(found.path, 'r');
    } catch (err) {
      if (isMissing(err)) return;
      throw err;
    }
    const st = await fh.stat();
    // Renamed again between the look and the open: leave it for the next look.
    if (st.dev !== found.dev || st.ino !== found.ino || (await readIdentity(fh, this.source)) !== identity) {
      await fh.close();
      return;
    }
    const t = newTracked(fh, found.path, st, true);
    t.size = st.size;
    t.mtimeMs = st.mtimeMs;
    this.files.splice(this.current ? this.files.indexOf(this.current) : this.files.length, 0, t);
    if (position) {
      t.identity = identity;
      t.lineStart = position.lineStart;
      t.overlong = position.overlong;
      const p = this.progress.get(identity);
      if (p) Object.assign(p, { path: t.path, dev: t.dev, ino: t.ino });
    } else {
      await this.adopt(t, identity);
    }
    this.log.info({ path: found.path, identity, offset: t.lineStart, size: st.size }, 'finishing a rotated file');
  }

  /**
   * Generations that came and went unseen: two rotations between two looks, or rotations while the
   * worker was stopped, leave a sibling (`access.log.1` between `.2` and the new file) that no
   * checkpoint knows. Such a sibling was written after `since` (the last change seen in the
   * generation before it, or the last checkpoint); older archives were not, and are left alone
   * (`tailhouse import` is for those). Read from their beginning, oldest first.
   */
  private async trackUnseen(since: number): Promise<void> {
    const unseen = (await this.siblings([])).filter(
      (f): f is FoundFile & { identity: string } => f.identity !== null && f.mtimeMs > since - MTIME_SLACK_MS && !this.store.get(f.identity) && !this.progress.has(f.identity),
    );
    for (const file of unseen.sort((a, b) => a.mtimeMs - b.mtimeMs)) {
      this.log.info({ path: file.path, identity: file.identity }, 'a generation of the file rotated away before it was seen: reading it');
      await this.track(file, file.identity);
    }
  }

  /** A rotated-away file has been idle at its end long enough. */
  private async finish(t: Tracked): Promise<void> {
    const fields = { path: t.path, identity: t.identity, offset: t.lineStart };
    if (t.size > t.lineStart) {
      this.log.warn({ ...fields, bytes: t.size - t.lineStart }, 'rotated file ends with a line that never got its newline: left unread');
    } else {
      this.log.info(fields, 'rotated file finished');
    }
    this.files.splice(this.files.indexOf(t), 1);
    await t.fh.close();
    await this.prune();
  }

  private async prune(): Promise<void> {
    await this.store.prune(this.source, this.pruneAfterMs, async (identity, entry) => {
      if (this.files.some((t) => t.identity === identity) || (this.progress.get(identity)?.handedOut.length ?? 0) > 0) return false;
      const found = await inspectPath(entry.path, this.source).catch(() => null);
      return found?.identity !== identity;
    });
  }

  /**
   * The rotated siblings of the followed path (`access.log.1`, `access.log-20250101`, …, not the
   * compressed ones) and `extra` paths, with their identities; files already open are left out.
   */
  private async siblings(extra: string[]): Promise<FoundFile[]> {
    const dir = path.dirname(this.path);
    const base = path.basename(this.path);
    let names: string[] = [];
    try {
      names = await fsp.readdir(dir);
    } catch (err) {
      if (!isMissing(err)) throw err;
    }
    const candidates = new Set(
      names.filter((n) => (n.startsWith(`${base}.`) || n.startsWith(`${base}-`)) && !COMPRESSED.test(n)).map((n) => path.join(dir, n)),
    );
    for (const p of extra) if (p !== this.path) candidates.add(p);
    const found: FoundFile[] = [];
    for (const candidate of candidates) {
      const file = await inspectPath(candidate, this.source).catch((err: unknown) => {
        this.log.debug({ path: candidate, err }, 'cannot inspect a rotated sibling');
        return null;
      });
      if (file && !this.files.some((t) => t.dev === file.dev && t.ino === file.ino)) found.push(file);
    }
    return found;
  }

  /** The next chunk of the first file (oldest first) that has a complete line. */
  private async readNext(): Promise<LineChunk | null> {
    for (const t of this.files) {
      if (t.identity === null || t.drained) continue;
      const p = this.progress.get(t.identity)!;
      const scan = await this.scan(t, p.cuts.find((c) => c > t.lineStart) ?? Infinity);
      if (scan.lines.length + scan.overlong.length === 0) {
        t.overlong = scan.pending;
        t.drained = true;
        continue;
      }
      // Replaced while it was being read (truncated, rewritten): what was read may mix two
      // contents, so it is dropped; the next look at the file sorts out what happened.
      if ((await readIdentity(t.fh, this.source)) !== t.identity) {
        t.size = -1;
        this.dirty = true;
        continue;
      }
      const chunk: LineChunk = { identity: t.identity, path: t.path, startOffset: t.lineStart, endOffset: scan.lineStart, lines: scan.lines, overlong: scan.overlong };
      if (scan.eof && !p.cuts.includes(chunk.endOffset)) await this.recordCut(t.identity, p, chunk.endOffset);
      t.lineStart = scan.lineStart;
      t.overlong = scan.pending;
      t.drained = scan.eof;
      p.handedOut.push(chunk);
      this.outstanding.set(chunk, false);
      return chunk;
    }
    return null;
  }

  /** Makes a cut at the end of the file durable before the chunk leaves, so a replay cuts there too. */
  private async recordCut(identity: string, p: Progress, end: number): Promise<void> {
    p.cuts = [...p.cuts, end].sort((a, b) => a - b);
    try {
      await this.store.set(identity, this.checkpointOf(p));
    } catch (err) {
      p.cuts = p.cuts.filter((c) => c !== end);
      throw err;
    }
  }

  /**
   * Reads complete lines of `t` from its read position up to a chunk limit, the recorded cut
   * `cutAt`, or the end of the file. A line still missing its newline at the end is left for the
   * next read (an overlong one keeps only its head and how far it has been scanned).
   */
  private async scan(t: Tracked, cutAt: number): Promise<Scan> {
    const cutter = this.cutter;
    cutter.begin(t.lineStart, cutAt, t.overlong);
    let pos = t.overlong?.scanned ?? t.lineStart;
    for (;;) {
      const { bytesRead } = await t.fh.read(this.buffer, 0, this.buffer.length, pos);
      if (bytesRead === 0) return { ...cutter.cut(), pending: cutter.pendingOverlong(pos), eof: true };
      this.readBytes += bytesRead;
      if (cutter.feed(this.buffer.subarray(0, bytesRead), pos) !== -1) return { ...cutter.cut(), pending: null, eof: false };
      pos += bytesRead;
    }
  }

  private checkpointOf(p: Progress): CheckpointUpdate {
    return { source: this.source, path: p.path, offset: p.acked, dev: p.dev, ino: p.ino, cuts: p.cuts };
  }

  /** Resolves on the next directory event, acknowledgement or close, or after `pollMs`. */
  private wait(): Promise<void> {
    if (this.dirty) {
      this.dirty = false;
      return Promise.resolve();
    }
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waker = null;
        this.dirty = false;
        resolve();
      };
      const timer = setTimeout(done, this.pollMs);
      this.waker = done;
    });
  }

  private wake(): void {
    this.dirty = true;
    this.waker?.();
  }

  /** Watches the directory (creation, rename, append); polling covers whatever it misses. */
  private ensureWatch(): void {
    if (this.watcher || this.closed || Date.now() - this.watchTriedAt < WATCH_RETRY_MS) return;
    this.watchTriedAt = Date.now();
    const base = path.basename(this.path);
    try {
      const watcher = fs.watch(path.dirname(this.path), { persistent: false }, (_event, name) => {
        if (name === null || name.startsWith(base)) this.wake();
      });
      watcher.on('error', (err) => {
        this.log.warn({ err }, 'directory watch failed: polling only');
        watcher.close();
        if (this.watcher === watcher) this.watcher = null;
      });
      this.watcher = watcher;
    } catch (err) {
      if (!isMissing(err)) this.log.warn({ err }, 'cannot watch the directory: polling only');
    }
  }
}

function newTracked(fh: FileHandle, filePath: string, st: fs.Stats, rotated: boolean): Tracked {
  return {
    fh,
    path: filePath,
    dev: st.dev,
    ino: st.ino,
    identity: null,
    lineStart: 0,
    overlong: null,
    // -1: the first look counts as a change, which reads the identity and checks the file.
    size: -1,
    mtimeMs: -1,
    changedAt: Date.now(),
    drained: false,
    rotated,
    waiting: false,
    unseenSince: null,
    lookedAt: null,
  };
}

async function statOrNull(filePath: string): Promise<fs.Stats | null> {
  try {
    return await fsp.stat(filePath);
  } catch (err) {
    if (isMissing(err)) return null;
    throw err;
  }
}

/** The byte at `offset`, or -1 past the end. */
async function byteAt(fh: FileHandle, offset: number): Promise<number> {
  const one = Buffer.alloc(1);
  const { bytesRead } = await fh.read(one, 0, 1, offset);
  return bytesRead === 1 ? one[0]! : -1;
}

/** A read position is valid when it is within the file and follows a newline (or is 0). */
async function fitsAt(t: Tracked, offset: number): Promise<boolean> {
  return offset === 0 || (offset <= t.size && (await byteAt(t.fh, offset - 1)) === NEWLINE);
}

/** Where the last complete line of the first `size` bytes ends (0 when there is none). */
async function lastLineEnd(fh: FileHandle, size: number): Promise<number> {
  const buf = Buffer.alloc(READ_BUFFER_BYTES);
  for (let end = size; end > 0; ) {
    const start = Math.max(0, end - buf.length);
    const { bytesRead } = await fh.read(buf, 0, end - start, start);
    const nl = buf.subarray(0, bytesRead).lastIndexOf(NEWLINE);
    if (nl !== -1) return start + nl + 1;
    end = start;
  }
  return 0;
}
