/**
 * A file source with `tail -F` semantics over one path, producing line chunks for the pipeline
 * (sources → transforms → sinks). The consumer pulls chunks (async iterator) and acknowledges each
 * one once the sink has accepted it; the acknowledgement is what advances the durable checkpoint.
 *
 * What is followed:
 * - a file that does not exist yet: picked up when it appears (directory watch, polling fallback);
 * - appends: read as soon as the directory watch fires, at the latest after `pollMs`; after a chunk
 *   that took everything the file held, the next read waits `gatherMs`, so that a file written a
 *   line at a time makes a chunk per `gatherMs`, not one per line;
 * - rename-and-create rotation, and delete-and-recreate: the old file stays open and is read to its
 *   end before the new one (lines the writer still appends through its old descriptor are read
 *   too); it is closed once it has been idle at its end for `rotatedIdleMs`;
 * - copytruncate and in-place truncation: the file at the path shrinks below the read position, or
 *   its first line (its identity) changes, or the read position no longer follows a newline. The
 *   rest of the previous content is then looked for among the siblings by identity (see
 *   generations below) and read from where we were; the new content is read from its beginning.
 *   Lines written between logrotate's copy and its truncate are lost by copytruncate's design, in
 *   every shipper.
 * - inode reuse: checkpoints are keyed by content identity, never by inode, so a new file that got
 *   the old inode number starts from its beginning (see file-identity.ts).
 * - restart: the file at the path resumes from its checkpoint, and the generations below are
 *   looked for (rotations that happened while the worker was stopped).
 *
 * Generations are recognised by identity (the fingerprint of their first line, file-identity.ts),
 * never by name alone. A file is *claimed* as soon as it has an identity: its checkpoint is written
 * at its start position (0, or its end for `startAt: end` on a first start) before any of it is
 * read, so a generation the follower has seen is never forgotten, even when the worker dies before
 * reading a line of it (while its domain is still unregistered, say). The siblings looked at are the
 * files whose names start with the followed name and `.` or `-`, plain or gzip-compressed (told by
 * content; a compressed one only once its gzip stream is complete, gzip-text.ts):
 * - known generations (a checkpoint, or this run's progress) holding more than was read are
 *   finished from where they were, whatever their name now: a file rotated away (and perhaps
 *   compressed) before it was finished, the copy of a file truncated in place; from the copy that
 *   holds the most of it (a `.bak` taken before the writer let go of the file holds less). A
 *   checkpoint stays as long as some file holds its generation (prune);
 * - unseen generations: a sibling nobody claimed, written after the source last knew every
 *   generation (`knownUntil` in the checkpoint store, advanced as the follower looks; the previous
 *   generation's last change when two rotations come between two looks). It must also be named as
 *   logrotate names generations (`access.log.1`, `access.log-20250101`, either with `.gz`), and no
 *   sibling with the same identity may be older than that time (a fresh copy of an old archive).
 *   So a compressor's temporary file (`access.log.2.gz.tmp`), a `.bak` copy, or an archive from
 *   before the source was first started are never read as generations. Read from their beginning,
 *   oldest first. A rotation that goes on during a look (a sibling renamed between the listing
 *   of the names and the look at it, or between that look and its opening) keeps the look owed
 *   from the same time, so a generation seen under neither name is found under its next one. A file
 *   that changed while it had no identity (a new file is empty when first seen) has its
 *   generations looked for once it has one: lines written to it, copied and truncated before the
 *   next look (a copytruncate right after a rename-and-create) are only in that copy.
 * - the first start of a source claims the file at the path and records when it started, in one
 *   write (killed before it, the next start is a first start again); rotated generations already
 *   there are history for `tailhouse import`, which the follower does not read (importing them and
 *   following would store them twice).
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
 * Not handled: compressions other than gzip (bzip2, xz, zstd: such a generation is finished only
 * while a plain copy or the open descriptor has it); a file deleted before it was ever opened
 * (nobody can read it); a partial last line of a rotated file that never gets its newline (left
 * unread, logged); lines a writer appends to a rotated file after it was closed (idle
 * `rotatedIdleMs`) wait for the next look for generations (a rotation, a restart); two generations
 * of one file whose first lines are byte-identical (they share an identity: nginx lines carry a
 * timestamp, so this takes two rotations within a second with identical requests, or a truncation
 * that keeps the first line).
 */
import { HOUR_MS } from '../../core/durations.js';
import fs from 'node:fs';
import fsp, { type FileHandle } from 'node:fs/promises';
import path from 'node:path';
import type { Logger } from '../../core/log.js';
import type { CheckpointStore, CheckpointUpdate } from '../checkpoints.js';
import type { LineChunk } from '../types.js';
import { DEFAULT_CUT_LIMITS, LineCutter, type Cut, type Framing, type OverlongScan } from './line-cutter.js';
import { IDENTITY_BYTES, inspectPath, isMissing, readIdentity, relate, type FoundFile } from './file-identity.js';
import { listDirectory } from './directory-listing.js';
import { watchName } from './directory-watch.js';
import { GzipText, gzipTextLength, type TextFile } from './gzip-text.js';

export interface FileTailOptions {
  /** The followed path (`tail -F` follows the name, not the file). */
  path: string;
  checkpoints: CheckpointStore;
  log: Logger;
  /** Names the source in identities and checkpoints; default: the absolute path. */
  source?: string;
  /** Where the file at the path starts when the source has no checkpoint at all (`startAt`, docs/reference/ingest.md#sources-files). */
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
  /** After a chunk cut at the end of the file, the next read waits this long (default 0). */
  gatherMs?: number;
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
  /** A plain file, or the text of a complete gzip one (a compressed generation). */
  fh: TextFile;
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
/** A pending look for generations (a compressed one still being written) is tried again this often. */
const SEARCH_RETRY_MS = 1_000;
/** Text lengths of compressed siblings are remembered by file state; the memory is dropped beyond this. */
const MAX_REMEMBERED_LENGTHS = 1_000;
/**
 * An incomplete gzip file changed this recently is still being written (a compressor at work), and
 * worth waiting for; one unchanged for longer was abandoned (a compressor that died).
 */
const ABANDONED_AFTER_MS = 60_000;
const DONE: IteratorReturnResult<undefined> = { done: true, value: undefined };
/** What follows the followed name in a generation's name: `.1`, `-20250101` (any dateformat of digits), perhaps `.gz`. */
export const GENERATION_SUFFIX = /^(?:\.\d+|-\d[\d._-]*?)(?:\.gz)?$/;

export class FileTail implements AsyncIterable<LineChunk> {
  readonly path: string;
  readonly source: string;
  private readonly store: CheckpointStore;
  private readonly log: Logger;
  private readonly startAt: 'beginning' | 'end';
  private readonly cutter: LineCutter;
  private readonly maxInFlight: number;
  private readonly pollMs: number;
  private readonly gatherMs: number;
  /** When the last chunk that reached the end of its file was handed out. */
  private reachedEndAt = -Infinity;
  /** Date.now() of the first directory event since the follower last read a file to its end; null: none. */
  private changedAt: number | null = null;
  private readonly rotatedIdleMs: number;
  private readonly pruneAfterMs: number;

  /** Rotated-away files first, oldest first; the file at the path last. */
  private readonly files: Tracked[] = [];
  private current: Tracked | null = null;
  private readonly progress = new Map<string, Progress>();
  /**
   * Where chunks of this source's files that a shared batch recorded before a stop begin
   * (identity → starts; checkpoints.ts's manifests), read before anything else: that batch is
   * sent again only once all its chunks are back, and the chunks after them wait for it, so
   * reading on in another file first could fill the window of unacknowledged chunks with chunks
   * that wait for a replay that waits for them.
   */
  private readonly replayFirst = new Map<string, Set<number>>();
  /** Chunks handed out → whether their acknowledgement is being written. */
  private readonly outstanding = new Map<LineChunk, boolean>();
  // Not zero-filled: its pages become resident only as reads fill them (a thousand followers of
  // quiet files would otherwise hold 256 KiB each before reading a line); only what a read filled is looked at.
  private readonly buffer = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES);
  private queue: Promise<unknown> = Promise.resolve();
  private starting: Promise<void> | null = null;
  private closed = false;
  private closing: Promise<void> | null = null;
  /** Only while starting: the source has no checkpoint and starts at the end. */
  private skipExisting = false;
  /** Only while a first start has not claimed a file yet: when it began (its record, see begin). */
  private firstStartAt: number | null = null;
  private dirty = false;
  private waker: (() => void) | null = null;
  /** Stops the directory watch's calls (directory-watch.ts); null when not watching. */
  private unwatch: (() => void) | null = null;
  private watchTriedAt = -Infinity;
  /** Date.now() of the previous look at the path; null before the first. */
  private previousLookAt: number | null = null;
  /**
   * A look for generations is owed: those written after this time (Infinity: known ones only).
   * It stays owed while a candidate cannot be read yet (a gzip file still being written).
   */
  private searchSince: number | null = null;
  private searchedAt = -Infinity;
  /** Owed by an event of this look (a replaced or newly identified file): looked for at its end. */
  private searchOwedNow = false;
  /** Text length (null: incomplete) of compressed siblings, by `dev:ino:size:mtimeMs`. */
  private readonly textLengths = new Map<string, number | null>();
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
    this.gatherMs = options.gatherMs ?? 0;
    this.rotatedIdleMs = options.rotatedIdleMs ?? 5_000;
    this.pruneAfterMs = options.pruneAfterMs ?? 24 * HOUR_MS;
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
        await this.starting?.catch(() => {});
        await this.queue;
        this.unwatch?.();
        this.unwatch = null;
        for (const t of this.files.splice(0)) await t.fh.close();
        this.current = null;
      })();
    }
    return this.closing;
  }

  private async step(): Promise<IteratorResult<LineChunk>> {
    await this.start();
    for (;;) {
      if (this.closed) return DONE;
      if (this.outstanding.size < this.maxInFlight) {
        const gathering = this.reachedEndAt + this.gatherMs - Date.now();
        if (gathering > 0) {
          await this.hold(gathering);
          continue;
        }
        await this.refresh();
        const chunk = await this.readNext();
        if (chunk) return { done: false, value: chunk };
      }
      await this.wait();
    }
  }

  /**
   * Claims the source's files without reading a line: on a first start, records that the source
   * exists from now on (generations written since are its own); opens the file at the path and
   * writes its checkpoint if it has none; looks for generations rotated away while nobody followed.
   * The worker calls it before it waits for the source's domain; `next()` calls it otherwise.
   */
  start(): Promise<void> {
    this.starting ??= this.begin();
    return this.starting;
  }

  private async begin(): Promise<void> {
    const startedAt = Date.now();
    const entries = this.store.list(this.source);
    for (const batch of this.store.pendingBatches()) {
      for (const m of batch.members) {
        if (m.source !== this.source) continue;
        let starts = this.replayFirst.get(m.identity);
        if (!starts) this.replayFirst.set(m.identity, (starts = new Set()));
        starts.add(m.start);
      }
    }
    // Written by this version (knownUntil), or else the last change of a checkpoint.
    const knownUntil = this.store.knownUntil(this.source) ?? (entries.length > 0 ? Math.max(...entries.map(([, e]) => Date.parse(e.updatedAt))) : undefined);
    const firstStart = knownUntil === undefined;
    if (firstStart) {
      // Recorded in the write that claims the file at the path (adopt), not before: a kill between
      // two writes would leave a source that has started without its first file, and the restart,
      // no longer a first start, would read that file from its beginning (startAt end ignored), or
      // miss it if it was rotated away meanwhile.
      this.firstStartAt = startedAt;
      this.log.info({ path: this.path, startAt: this.startAt }, 'first start of the source: following the file at the path, not the generations already rotated');
    }
    this.skipExisting = this.startAt === 'end' && firstStart;
    // The first start reads no rotated generation already there; known ones it cannot have.
    this.searchSince = firstStart ? Infinity : knownUntil;
    await this.refresh();
    this.skipExisting = false;
    if (this.firstStartAt !== null) {
      // Nothing was claimed (no file at the path, or one without a complete first line yet).
      this.store.noteKnownUntil(this.source, this.firstStartAt);
      this.firstStartAt = null;
      await this.store.flush();
    }
    const current = this.current;
    for (const [identity, entry] of entries) {
      if (current && identity !== current.identity && entry.path === this.path && relate({ identity, dev: entry.dev, ino: entry.ino }, current) === 'inode-reused') {
        this.log.info({ path: this.path, identity, ino: entry.ino }, 'the inode of a checkpointed file now holds another file: reading the new one from its beginning');
      }
    }
    await this.prune();
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
    if (since !== null) this.owe(since);
    this.previousLookAt = lookedAt;
    for (const t of [...this.files]) await this.inspect(t);
    // After opening the new file, not before: a rotation between the look and the open leaves the
    // generation it skipped among the siblings by now. A look still owed is tried again each second.
    if (this.searchSince !== null && (since !== null || this.searchOwedNow || Date.now() - this.searchedAt >= SEARCH_RETRY_MS)) await this.search();
    this.searchOwedNow = false;
    // Every generation written before this look is claimed now: a restart need look no further back.
    if (this.searchSince === null && this.files.every((t) => t.unseenSince === null)) this.store.noteKnownUntil(this.source, lookedAt);
  }

  /** Generations written after `since` (and known ones with more to read) are to be looked for. */
  private owe(since: number): void {
    this.searchSince = Math.min(this.searchSince ?? Infinity, since);
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
    const position = t.lineStart;
    t.identity = null;
    t.lineStart = 0;
    t.overlong = null;
    t.drained = false;
    // The copy, if any, is a known generation with more to read than was read (its progress stays).
    this.owe(previousMtimeMs);
    await this.search();
    const fields = { path: t.path, identity: old, offset: position, why };
    const copy = this.files.find((u) => u !== t && u.identity === old);
    if (copy) {
      this.log.info({ ...fields, copy: copy.path }, 'file rewritten in place (copytruncate): finishing its previous content from the copy');
    } else if (previousSize > position && this.searchSince === null) {
      this.log.warn({ ...fields, unread: previousSize - position }, 'file truncated in place with unread bytes and no copy of them found: they are lost');
    } else if (previousSize > position) {
      this.log.info(fields, 'file rewritten in place: a copy of its unread rest may still be being written; looking again');
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
      this.noteFirstStart();
      await this.store.set(identity, this.checkpointOf(p));
      this.log.info({ path: t.path, identity, offset: at }, 'no checkpoint and startAt end: skipping what the file already holds');
    } else if (!this.store.get(identity)) {
      // Claimed before anything is read: if the worker dies now and the file is rotated away, the
      // restart knows it and finishes it wherever it went.
      this.noteFirstStart();
      await this.store.set(identity, this.checkpointOf(p));
    }
    t.identity = identity;
    t.lineStart = at;
    t.overlong = null;
    if (t.unseenSince !== null) {
      this.owe(t.unseenSince);
      this.searchOwedNow = true;
      t.unseenSince = null;
    }
  }

  /**
   * On a first start, puts the source's record in memory just before its first claim is: no
   * await between the two, so every write of the shared store (another source's included) that
   * carries the record carries the claim.
   */
  private noteFirstStart(): void {
    if (this.firstStartAt === null) return;
    this.store.noteKnownUntil(this.source, this.firstStartAt);
    this.firstStartAt = null;
  }

  private loadProgress(identity: string, t: Tracked): Progress {
    const entry = this.store.get(identity);
    return { acked: entry?.offset ?? 0, cuts: [...(entry?.cuts ?? [])], handedOut: [], path: t.path, dev: t.dev, ino: t.ino };
  }

  /**
   * Opens a generation found on disk as a rotated file to finish, from its progress or checkpoint;
   * false when it cannot be read yet (a gzip file not complete) or changed since it was looked at.
   */
  private async track(found: FoundFile, identity: string): Promise<boolean> {
    // Renamed again, or replaced, between the look and the open (a rotation under way): the look
    // stays owed, from the same time, and finds it under its next name. Taken as done, an unseen
    // generation would be forgotten: the looks after this one start later than its last change.
    let fh: FileHandle;
    try {
      fh = await fsp.open(found.path, 'r');
    } catch (err) {
      if (isMissing(err)) return false;
      throw err;
    }
    const st = await fh.stat();
    let text: TextFile | null = fh;
    if (found.compressed) text = await GzipText.open(fh, IDENTITY_BYTES);
    if (!text) return false;
    if (st.dev !== found.dev || st.ino !== found.ino || (await readIdentity(text, this.source)) !== identity) {
      await text.close();
      return false;
    }
    const t = newTracked(text, found.path, st, true);
    const textStat = await text.stat();
    t.size = textStat.size;
    t.mtimeMs = textStat.mtimeMs;
    this.files.splice(this.current ? this.files.indexOf(this.current) : this.files.length, 0, t);
    await this.adopt(t, identity);
    this.log.info({ path: found.path, identity, offset: t.lineStart, size: t.size, compressed: found.compressed }, 'finishing a rotated file');
    return true;
  }

  /**
   * Looks among the siblings for the generations owed (see the header): known ones with more to
   * read than was read, and unseen ones written after `searchSince`. Opens them oldest first. The
   * look stays owed while a candidate cannot be read yet.
   */
  private async search(): Promise<void> {
    const since = this.searchSince;
    if (since === null) return;
    this.searchedAt = Date.now();
    const { found: siblings, moved } = await this.siblings();
    const open = new Set(this.files.map((t) => t.identity));
    // How far each known generation was read: this run's progress, else its checkpoint.
    const readTo = new Map<string, number>(this.store.list(this.source).map(([identity, e]) => [identity, e.offset]));
    for (const [identity, p] of this.progress) readTo.set(identity, p.handedOut.at(-1)?.endOffset ?? p.acked);
    const byIdentity = new Map<string, FoundFile[]>();
    for (const f of siblings) {
      if (f.identity === null || open.has(f.identity)) continue;
      byIdentity.set(f.identity, [...(byIdentity.get(f.identity) ?? []), f]);
    }
    // A rotation during the look: what it found is read, and the look is made again.
    let pending = moved;
    const toRead: { file: FoundFile; identity: string }[] = [];
    for (const [identity, copies] of byIdentity) {
      const position = readTo.get(identity);
      let candidates = copies;
      if (position === undefined) {
        // Unseen: new content, so every copy of it was written after `since` (one older than that
        // makes the others fresh copies of an old archive), read from a file named as a generation.
        if (!copies.every((f) => f.mtimeMs > since - MTIME_SLACK_MS)) continue;
        candidates = copies.filter((f) => this.isGenerationName(f.path));
        // A compressor writing under a name of its own renames the file when done: look again then.
        if (candidates.length === 0) {
          if (copies.some((f) => f.compressed && isFresh(f))) pending = true;
          continue;
        }
      }
      const choice = await this.readableCopy(candidates, position ?? 0);
      if (choice === 'pending') pending = true;
      else if (choice) toRead.push({ file: choice, identity });
    }
    // An unseen generation whose first line is still incomplete gets it soon: look again then.
    if (siblings.some((f) => f.identity === null && f.size > 0 && f.mtimeMs > since - MTIME_SLACK_MS && this.isGenerationName(f.path))) pending = true;
    // Known generations came first (they were seen before the others), then by modification time.
    const order = (g: { file: FoundFile; identity: string }) => [readTo.has(g.identity) ? 0 : 1, g.file.mtimeMs] as const;
    toRead.sort((a, b) => order(a)[0] - order(b)[0] || order(a)[1] - order(b)[1]);
    for (const { file, identity } of toRead) {
      if (!readTo.has(identity)) this.log.info({ path: file.path, identity }, 'a generation of the file rotated away before it was seen: reading it');
      if (!(await this.track(file, identity))) pending = true;
    }
    this.searchSince = pending ? since : null;
  }

  /**
   * Of the copies of one generation, the one to read past `position`: the one holding the most
   * text, plain or compressed (a copy taken earlier, a `.bak` made before the writer let go of the
   * file, holds less of the same lines), a plain one when they hold as much. A compressed copy
   * counts once its gzip stream is complete. 'pending' when no copy holds more but one still being
   * compressed might; null when none holds more.
   */
  private async readableCopy(copies: FoundFile[], position: number): Promise<FoundFile | 'pending' | null> {
    let best: FoundFile | null = null;
    let most = position;
    let pending = false;
    for (const copy of [...copies].sort((a, b) => Number(a.compressed) - Number(b.compressed))) {
      const length = copy.compressed ? await this.textLength(copy) : copy.size;
      if (length === undefined || (length === null && isFresh(copy))) pending = true;
      else if (length !== null && length > most) {
        best = copy;
        most = length;
      }
    }
    return best ?? (pending ? 'pending' : null);
  }

  /** Whether a sibling's name is one logrotate gives a generation: `.N` or `-DATE`, perhaps `.gz`. */
  private isGenerationName(filePath: string): boolean {
    const name = path.basename(filePath);
    const base = path.basename(this.path);
    if (path.dirname(filePath) !== path.dirname(this.path) || !name.startsWith(base)) return false;
    return GENERATION_SUFFIX.test(name.slice(base.length));
  }

  /**
   * The text length of a compressed sibling: null while it is incomplete (or damaged), undefined
   * when it was renamed or replaced since it was looked at. Remembered by file state.
   */
  private async textLength(file: FoundFile): Promise<number | null | undefined> {
    const key = `${file.dev}:${file.ino}:${file.size}:${file.mtimeMs}`;
    if (this.textLengths.has(key)) return this.textLengths.get(key);
    let fh: FileHandle;
    try {
      fh = await fsp.open(file.path, 'r');
    } catch (err) {
      if (isMissing(err)) return undefined;
      throw err;
    }
    let length: number | null;
    try {
      const st = await fh.stat();
      if (st.dev !== file.dev || st.ino !== file.ino || st.size !== file.size || st.mtimeMs !== file.mtimeMs) return undefined;
      length = await gzipTextLength(fh);
    } finally {
      await fh.close();
    }
    if (this.textLengths.size >= MAX_REMEMBERED_LENGTHS) this.textLengths.clear();
    this.textLengths.set(key, length);
    return length;
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

  /**
   * Drops the checkpoints of generations no file holds any more, at the path or beside it. One a
   * file still holds must stay, whatever its name now: without its checkpoint a generation named
   * like one, changed after `knownUntil` (a restart after a long stop starts looking from there),
   * would be read again from its beginning as unseen.
   */
  private async prune(): Promise<void> {
    // The identities files hold, looked for once; 'moved': a rotation went through the look, which
    // may have missed a file, so nothing counts as gone this time.
    let present: Set<string | null> | 'moved' | null = null;
    await this.store.prune(this.source, this.pruneAfterMs, async (identity) => {
      if (this.files.some((t) => t.identity === identity) || (this.progress.get(identity)?.handedOut.length ?? 0) > 0) return false;
      if (present === null) {
        const { found, moved } = await this.siblings();
        present = moved ? 'moved' : new Set([...found, await inspectPath(this.path, this.source).catch(() => null)].map((f) => f?.identity ?? null));
      }
      return present !== 'moved' && !present.has(identity);
    });
  }

  /**
   * The files beside the followed path whose names start with its name and `.` or `-`, plain or
   * compressed, with their identities; files already open are left out. `moved`: a rotation went
   * on during the look (a name came or went, or holds another file than before): a file renamed
   * meanwhile may have been seen under neither name (`.1` looked at after it became `.2`, `.2` not
   * yet listed), so the look is to be made again before it can tell that nothing is missing.
   */
  private async siblings(): Promise<{ found: FoundFile[]; moved: boolean }> {
    const dir = path.dirname(this.path);
    const before = await this.siblingNames();
    const inodes = new Map<string, string | null>();
    for (const name of before) inodes.set(name, await inodeOf(path.join(dir, name)));
    const found: FoundFile[] = [];
    for (const name of before) {
      const candidate = path.join(dir, name);
      const file = await inspectPath(candidate, this.source).catch((err: unknown) => {
        this.log.debug({ path: candidate, err }, 'cannot inspect a sibling');
        return null;
      });
      if (file && !this.files.some((t) => t.dev === file.dev && t.ino === file.ino)) found.push(file);
    }
    const after = await this.siblingNames();
    let moved = after.length !== before.length;
    for (const name of after) moved ||= !inodes.has(name) || inodes.get(name) !== (await inodeOf(path.join(dir, name)));
    return { found, moved };
  }

  private async siblingNames(): Promise<string[]> {
    const base = path.basename(this.path);
    try {
      return (await listDirectory(path.dirname(this.path))).filter((name) => name.startsWith(`${base}.`) || name.startsWith(`${base}-`));
    } catch (err) {
      if (isMissing(err)) return [];
      throw err;
    }
  }

  /** The next chunk of the first file (oldest first) that has a complete line. */
  private async readNext(): Promise<LineChunk | null> {
    // The chunks a replay waits for first (replayFirst), then the files oldest first.
    const wanted = (t: Tracked) => (t.identity !== null && this.replayFirst.get(t.identity)?.has(t.lineStart)) === true;
    const order = this.replayFirst.size === 0 ? this.files : [...this.files.filter(wanted), ...this.files.filter((t) => !wanted(t))];
    const changedAt = this.changedAt;
    for (const t of order) {
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
      if (this.changedAt !== null) chunk.waitingSince = this.changedAt;
      if (scan.eof && !p.cuts.includes(chunk.endOffset)) await this.recordCut(t.identity, p, chunk.endOffset);
      t.lineStart = scan.lineStart;
      t.overlong = scan.pending;
      t.drained = scan.eof;
      if (scan.eof) {
        this.reachedEndAt = Date.now();
        this.changedAt = null;
      }
      const starts = this.replayFirst.get(t.identity);
      if (starts?.delete(chunk.startOffset) && starts.size === 0) this.replayFirst.delete(t.identity);
      p.handedOut.push(chunk);
      this.outstanding.set(chunk, false);
      return chunk;
    }
    // Nothing was waiting (a change that added no line): the next line waits from its own change,
    // unless one came during this look.
    if (this.changedAt === changedAt) this.changedAt = null;
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
      // The end the look before this read saw (inspect): reached without reading again to find it
      // empty, one read in five of a followed file's cycle. What was appended since wakes the follower.
      if (t.size >= 0 && pos >= t.size) return { ...cutter.cut(), pending: cutter.pendingOverlong(pos), eof: true };
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

  /** Resolves after `ms`, or at close; directory events and acknowledgements are left for the read after it. */
  private hold(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.waker = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.waker = () => {
        if (this.closed) done();
      };
    });
  }

  private wake(): void {
    this.dirty = true;
    this.waker?.();
  }

  /** Watches the directory (creation, rename, append); polling covers whatever it misses. */
  private ensureWatch(): void {
    if (this.unwatch || this.closed || Date.now() - this.watchTriedAt < WATCH_RETRY_MS) return;
    this.watchTriedAt = Date.now();
    try {
      this.unwatch = watchName(path.dirname(this.path), {
        base: path.basename(this.path),
        changed: () => {
          this.changedAt ??= Date.now();
          this.wake();
        },
        failed: (err) => {
          this.log.warn({ err }, 'directory watch failed: polling only');
          this.unwatch = null;
        },
      });
    } catch (err) {
      if (!isMissing(err)) this.log.warn({ err }, 'cannot watch the directory: polling only');
    }
  }
}

function newTracked(fh: TextFile, filePath: string, st: { dev: number; ino: number }, rotated: boolean): Tracked {
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

/** A file changed recently enough to be still being written. */
function isFresh(file: FoundFile): boolean {
  return Date.now() - file.mtimeMs < ABANDONED_AFTER_MS;
}

/** `dev:ino` of the regular file at `filePath`; null when there is none. */
async function inodeOf(filePath: string): Promise<string | null> {
  const st = await statOrNull(filePath).catch(() => null);
  return st?.isFile() ? `${st.dev}:${st.ino}` : null;
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
async function byteAt(fh: TextFile, offset: number): Promise<number> {
  const one = Buffer.alloc(1);
  const { bytesRead } = await fh.read(one, 0, 1, offset);
  return bytesRead === 1 ? one[0]! : -1;
}

/** A read position is valid when it is within the file and follows a newline (or is 0). */
async function fitsAt(t: Tracked, offset: number): Promise<boolean> {
  return offset === 0 || (offset <= t.size && (await byteAt(t.fh, offset - 1)) === NEWLINE);
}

/** Where the last complete line of the first `size` bytes ends (0 when there is none). */
async function lastLineEnd(fh: TextFile, size: number): Promise<number> {
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
