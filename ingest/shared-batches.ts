/**
 * Shared batches: the chunks of every followed file go into common inserts, flushed by size or by
 * a short deadline, so that a worker following a thousand files sends about one insert a second to
 * each table instead of one per chunk per file (ClickHouse merges every insert's part, and refuses
 * inserts once a partition holds too many).
 *
 * Exactly once. Which chunks share an insert depends on timing, so a batch sent again after a
 * crash would not be cut the same way by itself, and a new token would not deduplicate. So the
 * batch's composition is made durable first: its manifest (each chunk's file identity and byte
 * range, and the token) is written to the checkpoint store before the insert is sent, and leaves
 * it in the same write that moves the chunks' checkpoints (checkpoints.ts `together`). A restart
 * that finds manifests waits until the followers hand those same chunks out again (their ranges
 * are deterministic: file-tail.ts records the ends it cut at the end of a file), puts them together
 * in the recorded order and sends them under the recorded token: an insert that had landed is
 * deduplicated, one that had not lands now. New batches wait until the manifests are replayed, so
 * a file's checkpoint still moves in order.
 *
 * ClickHouse remembers a token per partition (a batch's rows of each day are a block of their
 * own), so a replay that lacks a chunk is still exact for the chunks it has. A chunk cannot come
 * back when its source was removed from the config, or when its file disappeared: such a member
 * is left out (logged) at the start or after `replayTimeoutMs`; if that source or file returns
 * later, that one chunk may be stored twice.
 *
 * A batch that ClickHouse refuses for its data (a bug: the sink writes bodies that parse) is split
 * into its chunks, each written alone under a manifest of its own, so that only the source whose
 * data is refused stops.
 */
import { createHash } from 'node:crypto';
import type { BatchManifest, BatchMember, CheckpointStore } from './checkpoints.js';
import { countWritten, Stopped, writeAccepted, type BatchSink, type PipelineDeps, type Prepared, type Submission } from './pipeline.js';
import type { Rows } from './transforms/rows.js';
import { AccessTsv } from './sinks/clickhouse.js';

export interface SharedBatchOptions {
  /** Flush once the oldest line waiting has waited this long (since its chunk was submitted, or its Submission.waitingSince). */
  maxDelayMs: number;
  /** Flush once the chunks waiting hold this many bytes of rows. */
  maxBytes: number;
  /** The sources (followed paths) configured in this run: a manifest's chunk of another source cannot come back. */
  sources: ReadonlySet<string>;
  /** How long a restart waits for the chunks of its manifests before leaving the missing ones out. */
  replayTimeoutMs?: number;
}

/** Label of the shared batches' inserts in the metrics (one series, whatever the number of files). */
export const SHARED_BATCH_LABEL = 'files';

interface Waiting {
  submission: Submission;
  resolve(): void;
  reject(err: unknown): void;
}

/** A batch ready to be written: its chunks in order, and its manifest when already on disk. */
interface Ready {
  waiting: Waiting[];
  manifest: BatchManifest | null;
}

/** A manifest of an earlier run, filled as its chunks come back. */
interface Replay {
  manifest: BatchManifest;
  slots: Map<string, Waiting | null>;
}

const keyOf = (m: BatchMember) => `${m.identity}\0${m.start}\0${m.end}`;
// Access rows are a body already; error rows and rejects are objects until written, counted at a
// typical line's size.
const bytesOf = (p: Prepared) => (p.rows.access instanceof AccessTsv ? p.rows.access.bytes.length : 0) + (p.rows.error.length + p.rows.rejects.length) * 256;

export class SharedBatches implements BatchSink {
  private open: Waiting[] = [];
  private openBytes = 0;
  private openedAt = 0;
  private hurried = false;
  /** Batches to write before the open one: split batches. */
  private readonly ready: Ready[] = [];
  private readonly replays: Replay[] = [];
  private readonly replayKeys = new Map<string, Replay>();
  private readonly replayDeadline: number;
  private nextSeq: number;
  private writing: Promise<void> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly checkpoints: CheckpointStore,
    private readonly deps: PipelineDeps,
    private readonly options: SharedBatchOptions,
  ) {
    const pending = checkpoints.pendingBatches();
    this.nextSeq = (pending.at(-1)?.seq ?? 0) + 1;
    this.replayDeadline = Date.now() + (options.replayTimeoutMs ?? 30_000);
    for (const manifest of pending) {
      const members = manifest.members.filter((m) => {
        // Moved already (not through `together`, but a hand-edited file could say so), or a file
        // whose checkpoint was pruned (no file holds it any more): nothing of it can come back.
        if ((checkpoints.get(m.identity)?.offset ?? Infinity) >= m.end) return false;
        if (options.sources.has(m.source)) return true;
        deps.log.warn({ source: m.source, identity: m.identity, start: m.start, end: m.end, token: manifest.token }, 'a batch to replay holds a chunk of a source no longer configured: replayed without it');
        return false;
      });
      if (members.length === 0) {
        checkpoints.forgetBatch(manifest.token);
        continue;
      }
      const replay: Replay = { manifest: { ...manifest, members }, slots: new Map(members.map((m) => [keyOf(m), null])) };
      this.replays.push(replay);
      for (const key of replay.slots.keys()) this.replayKeys.set(key, replay);
    }
    if (this.replays.length > 0) deps.log.info({ batches: this.replays.length }, 'replaying the shared batches a stop interrupted');
  }

  /** Takes a chunk; resolves once the insert holding it was accepted and its checkpoint written. */
  submit(submission: Submission): Promise<void> {
    if (this.closed) return Promise.reject(new Stopped());
    return new Promise<void>((resolve, reject) => {
      const waiting: Waiting = { submission, resolve, reject };
      const key = keyOf(submission);
      const replay = this.replayKeys.get(key);
      if (replay) {
        this.replayKeys.delete(key);
        replay.slots.set(key, waiting);
      } else {
        // The deadline counts from the oldest line's wait, not its chunk's: a file is read again
        // only half the batch's delay after it was read to its end (worker.ts, gatherMs).
        const since = Math.min(Date.now(), submission.waitingSince ?? Infinity);
        this.openedAt = this.open.length === 0 ? since : Math.min(this.openedAt, since);
        this.open.push(waiting);
        this.openBytes += bytesOf(submission.prepared);
      }
      this.kick();
    });
  }

  /** A source can read nothing more until its chunks are written: flush without waiting for the deadline. */
  hurry(): void {
    if (this.open.length === 0) return;
    this.hurried = true;
    this.kick();
  }

  /** Stops taking chunks; the insert under way finishes. Chunks not written are rejected with Stopped (their sources replay them). */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    const left = [...this.open, ...this.ready.flatMap((r) => r.waiting), ...this.replays.flatMap((r) => [...r.slots.values()].filter((w): w is Waiting => w !== null))];
    this.open = [];
    this.ready.length = 0;
    this.replays.length = 0;
    for (const w of left) w.reject(new Stopped());
    await this.writing?.catch(() => {});
  }

  /** Starts the next write when nothing is being written and a batch is due; otherwise arms the deadline. */
  private kick(): void {
    if (this.closed || this.writing) return;
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const next = this.takeDue();
    if (next === 'later') return;
    if (typeof next === 'number') {
      this.timer = setTimeout(() => {
        this.timer = null;
        this.kick();
      }, next);
      return;
    }
    this.writing = this.write(next).finally(() => {
      this.writing = null;
      this.kick();
    });
  }

  /** The batch due now, or in how many ms one may be, or 'later' (nothing waiting). */
  private takeDue(): Ready | number | 'later' {
    const replay = this.replays[0];
    if (replay) {
      const missing = [...replay.slots].filter(([, w]) => w === null);
      if (missing.length > 0 && Date.now() < this.replayDeadline) return this.replayDeadline - Date.now();
      this.replays.shift();
      for (const [key] of missing) {
        this.replayKeys.delete(key);
        const [identity, start, end] = key.split('\0');
        this.deps.log.warn({ identity, start: Number(start), end: Number(end), token: replay.manifest.token }, 'a chunk of a batch to replay did not come back (its file is gone?): replayed without it');
      }
      const waiting = [...replay.slots.values()].filter((w): w is Waiting => w !== null);
      if (waiting.length === 0) {
        // Written with the next write; nothing of this batch can be replayed.
        this.checkpoints.forgetBatch(replay.manifest.token);
        return this.takeDue();
      }
      const back = new Set(waiting.map((w) => keyOf(w.submission)));
      return { waiting, manifest: { ...replay.manifest, members: replay.manifest.members.filter((m) => back.has(keyOf(m))) } };
    }
    const split = this.ready.shift();
    if (split) return split;
    if (this.open.length === 0) return 'later';
    const wait = this.openedAt + this.options.maxDelayMs - Date.now();
    if (!this.hurried && this.openBytes < this.options.maxBytes && wait > 0) return wait;
    const waiting = this.open;
    this.open = [];
    this.openBytes = 0;
    this.hurried = false;
    return { waiting, manifest: null };
  }

  private async write(batch: Ready): Promise<void> {
    const submissions = batch.waiting.map((w) => w.submission);
    const served = [...new Set(submissions.map((s) => s.stats))];
    // A chunk's body is needed until the chunk is written, or given up (its source replays it).
    let bodiesDone = true;
    try {
      let manifest = batch.manifest;
      if (manifest === null) {
        manifest = { token: tokenOf(submissions), seq: this.nextSeq++, members: submissions.map(({ source, identity, start, end }) => ({ source, identity, start, end })) };
        await this.checkpoints.recordBatch(manifest);
      }
      try {
        await writeAccepted(combined(submissions), manifest.token, served, SHARED_BATCH_LABEL, this.deps);
      } catch (err) {
        if (err instanceof Stopped || batch.waiting.length === 1) throw err;
        this.deps.log.error({ chunks: batch.waiting.length, err: err instanceof Error ? err.message : String(err) }, 'ClickHouse refused a shared batch for its data: writing its chunks one by one');
        // The refused insert wrote nothing; each chunk's own manifest replaces this one as it is written.
        this.checkpoints.forgetBatch(manifest.token);
        this.ready.unshift(...batch.waiting.map((w) => ({ waiting: [w], manifest: null })));
        bodiesDone = false;
        return;
      }
      this.deps.log.debug({ chunks: submissions.length, lines: submissions.reduce((n, s) => n + s.prepared.lines, 0), token: manifest.token }, 'batch written');
      for (const s of submissions) countWritten(s.prepared, s.stats);
      this.settle(batch.waiting, manifest.token);
    } catch (err) {
      for (const w of batch.waiting) w.reject(err);
    } finally {
      if (bodiesDone) for (const s of submissions) if (s.prepared.rows.access instanceof AccessTsv) s.prepared.rows.access.release();
    }
  }

  /**
   * Moves the checkpoints of an accepted batch and forgets its manifest, in one write. Not awaited
   * by the writer: the next insert may start meanwhile (its own manifest shares the write).
   */
  private settle(waiting: Waiting[], token: string): void {
    const commits: Promise<void>[] = [];
    const grouped = this.checkpoints.together(() => {
      for (const w of waiting) commits.push(w.submission.commit());
      this.checkpoints.forgetBatch(token);
    });
    grouped.catch(() => {});
    waiting.forEach((w, i) => commits[i]!.then(w.resolve, w.reject));
  }
}

/** The token of a new batch: a digest of its chunks, in order. */
function tokenOf(members: readonly BatchMember[]): string {
  const hash = createHash('sha256').update('shared batch');
  for (const m of members) hash.update(`\0${m.identity}\0${m.start}\0${m.end}`);
  return hash.digest('hex');
}

/** The rows of several chunks as one batch, in the chunks' order. */
function combined(submissions: readonly Submission[]): Rows {
  const bodies = submissions.map(({ prepared: { rows } }) => {
    // File chunks are serialised as they are parsed (transforms/rows.ts): rows as objects would be a caller's bug.
    if (!(rows.access instanceof AccessTsv)) throw new Error('a shared batch takes access rows as a TabSeparated body');
    return rows.access;
  });
  const access = AccessTsv.concat(bodies);
  return {
    access,
    error: submissions.flatMap((s) => s.prepared.rows.error),
    rejects: submissions.flatMap((s) => s.prepared.rows.rejects),
  };
}
