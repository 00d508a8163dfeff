/**
 * Durable ingest progress: file identity → how far the sink has accepted it. One JSON file
 * (DATA_DIR/ingest/checkpoints.json) shared by every file source of the process, rewritten whole
 * and atomically on each change: write a temporary file, fsync it, rename it over the old one, fsync
 * the directory. A crash at any point leaves either the old or the new file, never a torn one.
 *
 * Writes are grouped: callers that change entries while a write is under way share the next write,
 * so many sources acknowledging at once cost one fsync, not one each.
 *
 * Besides the files, each source has the time up to which every generation of its file is known
 * (`knownUntil`: each one written before it has an entry). A restart looks for generations written
 * since, which nobody claimed: rotated away while the worker was stopped, or before it had a look.
 * The follower advances it in memory as it looks; it goes to disk with the next write.
 *
 * And the manifests of the shared batches being written (shared-batches.ts): which chunks
 * of which files an insert holds, under which deduplication token. A manifest is on disk before its
 * insert is sent and leaves in the same write that moves its chunks' checkpoints, so a restart
 * that finds one puts the same chunks together under the same token again.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { z } from 'zod';
import type { Logger } from '../core/log.js';
import { replaceFile } from '../core/replace-file.js';

export interface Checkpoint {
  /** The source (followed path) the file belongs to: each follower lists and prunes its own. */
  source: string;
  /** Where the file was last seen; only a hint, rotation moves files. */
  path: string;
  /** Byte offset up to which the sink has accepted the file: the next line starts here. */
  offset: number;
  /** Device and inode when last seen: a hint to explain a mismatch, never the identity itself. */
  dev: number;
  ino: number;
  /**
   * Ends of chunks handed out at the end of the file (so not at a deterministic boundary) and not
   * yet accepted, ascending: a replay after a crash cuts there again, so that its batches are
   * byte-for-byte the ones that may already have reached the sink, and deduplicate.
   */
  cuts: number[];
  /** ISO 8601: when the entry last changed. */
  updatedAt: string;
}

export type CheckpointUpdate = Omit<Checkpoint, 'updatedAt'>;

/** One chunk of a shared batch: a byte range of a file of a source. */
export interface BatchMember {
  /** The checkpoint source (followed path) whose follower hands the chunk out. */
  source: string;
  identity: string;
  start: number;
  end: number;
}

/** A shared batch whose insert may have reached ClickHouse and whose chunks' checkpoints have not moved yet. */
export interface BatchManifest {
  /** The insert's deduplication token. */
  token: string;
  /** Order of recording: batches are written, and replayed, in this order. */
  seq: number;
  members: BatchMember[];
}

const FILE_NAME = 'checkpoints.json';
const TEMP_NAME = `${FILE_NAME}.tmp`;

const offset = z.number().int().nonnegative();
const fileSchema = z.object({
  version: z.literal(1),
  // Absent in files written before it existed.
  sources: z.record(z.string(), z.object({ knownUntil: z.string() })).optional(),
  // Absent in files written before shared batches, and when none is being written.
  batches: z
    .array(
      z.object({
        token: z.string().min(1),
        seq: z.number().int().nonnegative(),
        members: z.array(z.object({ source: z.string(), identity: z.string().min(1), start: offset, end: offset })),
      }),
    )
    .optional(),
  files: z.record(
    z.string().min(1),
    z.object({
      source: z.string(),
      path: z.string(),
      offset,
      dev: z.number(),
      ino: z.number(),
      cuts: z.array(offset),
      updatedAt: z.string(),
    }),
  ),
});

export class CheckpointStore {
  private writing: Promise<void> | null = null;
  private queued: Promise<void> | null = null;
  /** Set while `together` runs: changes wait for the one write after it. */
  private holding: { promise: Promise<void>; resolve(): void; reject(err: unknown): void } | null = null;
  private readonly batches = new Map<string, BatchManifest>();

  private constructor(
    private readonly dir: string,
    private readonly entries: Map<string, Checkpoint>,
    private readonly sources: Map<string, { knownUntil: string }>,
    private readonly log: Logger,
    batches: BatchManifest[] = [],
  ) {
    for (const b of batches) this.batches.set(b.token, b);
  }

  /**
   * Loads the store of `dir` (created when missing). A leftover temporary file is what a crash in
   * the middle of a write leaves: the real file is still the previous complete version, so the
   * leftover is deleted. A real file that does not parse is an error, not an empty store: starting
   * over would read every file again from its beginning.
   */
  static async open(dir: string, log: Logger): Promise<CheckpointStore> {
    await fs.mkdir(dir, { recursive: true });
    const file = path.join(dir, FILE_NAME);
    try {
      await fs.unlink(path.join(dir, TEMP_NAME));
      log.info({ dir }, 'checkpoints: removed the temporary file of an interrupted write');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    }
    let text: string;
    try {
      text = await fs.readFile(file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new CheckpointStore(dir, new Map(), new Map(), log);
      throw err;
    }
    let parsed: z.infer<typeof fileSchema>;
    try {
      parsed = fileSchema.parse(JSON.parse(text));
    } catch (err) {
      throw new Error(
        `checkpoint file ${file} is not valid (${(err as Error).message.split('\n')[0]}); move it away to start over, which reads every log file again from its beginning`,
      );
    }
    return new CheckpointStore(dir, new Map(Object.entries(parsed.files)), new Map(Object.entries(parsed.sources ?? {})), log, parsed.batches);
  }

  get(identity: string): Checkpoint | undefined {
    return this.entries.get(identity);
  }

  /** The entries of one source, oldest change first. */
  list(source: string): [string, Checkpoint][] {
    return [...this.entries].filter(([, e]) => e.source === source).sort(([, a], [, b]) => a.updatedAt.localeCompare(b.updatedAt));
  }

  /** Every source some entry belongs to. */
  sourceNames(): string[] {
    return [...new Set([...this.entries.values()].map((e) => e.source))];
  }

  /** Epoch ms up to which every generation of `source` is known; undefined for a source never started. */
  knownUntil(source: string): number | undefined {
    const record = this.sources.get(source);
    return record ? Date.parse(record.knownUntil) : undefined;
  }

  /** Moves `source`'s knownUntil forward (never back); written with the next write, or by `flush`. */
  noteKnownUntil(source: string, ms: number): void {
    if (ms > (this.knownUntil(source) ?? -Infinity)) this.sources.set(source, { knownUntil: new Date(ms).toISOString() });
  }

  /** Writes what changed in memory only (knownUntil); resolves once it is on disk. */
  flush(): Promise<void> {
    return this.persist();
  }

  /** The manifests on record, in the order they were recorded. */
  pendingBatches(): BatchManifest[] {
    return [...this.batches.values()].sort((a, b) => a.seq - b.seq);
  }

  /** Records a shared batch's manifest; resolves once it is on disk. */
  recordBatch(manifest: BatchManifest): Promise<void> {
    this.batches.set(manifest.token, { ...manifest, members: manifest.members.map((m) => ({ ...m })) });
    return this.persist();
  }

  /** Forgets a manifest; written with the next write (call it inside `together` with its acknowledgements). */
  forgetBatch(token: string): void {
    this.batches.delete(token);
  }

  /**
   * Runs `fn`, whose changes (`set`, `forgetBatch`, …) all go to disk in one write: a shared batch's
   * checkpoints move together with the removal of its manifest, never some before the others.
   * Resolves once that write is done.
   */
  together(fn: () => void): Promise<void> {
    if (this.holding) throw new Error('checkpoint changes grouped inside a group');
    let resolve!: () => void;
    let reject!: (err: unknown) => void;
    const promise = new Promise<void>((res, rej) => {
      resolve = res;
      reject = rej;
    });
    promise.catch(() => {});
    this.holding = { promise, resolve, reject };
    try {
      fn();
    } finally {
      this.holding = null;
    }
    const write = this.persist();
    write.then(resolve, reject);
    return write;
  }

  /** Records an entry; resolves once it is on disk. */
  set(identity: string, update: CheckpointUpdate): Promise<void> {
    this.entries.set(identity, { ...update, cuts: [...update.cuts], updatedAt: new Date().toISOString() });
    return this.persist();
  }

  /**
   * Deletes the entries of `source` unchanged for `olderThanMs` whose file `isGone` says has
   * disappeared. The age guard keeps the entry of a file that is only being renamed right now.
   * `isGone` must look for the file under any name: a generation whose entry is dropped while a
   * file still holds it may be read again from its beginning as one never seen (file-tail.ts).
   * Returns how many entries went.
   */
  async prune(source: string, olderThanMs: number, isGone: (identity: string, entry: Checkpoint) => Promise<boolean>): Promise<number> {
    const limit = Date.now() - olderThanMs;
    let removed = 0;
    for (const [identity, entry] of this.list(source)) {
      if (Date.parse(entry.updatedAt) > limit || !(await isGone(identity, entry))) continue;
      // isGone awaited: the entry may have been refreshed meanwhile.
      if (this.entries.get(identity) !== entry) continue;
      this.entries.delete(identity);
      removed++;
    }
    if (removed > 0) {
      this.log.info({ source, removed }, 'checkpoints: pruned entries of files that are gone');
      await this.persist();
    }
    return removed;
  }

  /** A write that starts after the caller's change: joins the queued one, or starts one, or queues one. */
  private persist(): Promise<void> {
    if (this.holding) return this.holding.promise;
    if (this.queued) return this.queued;
    if (!this.writing) return this.startWrite();
    this.queued = this.writing
      .catch(() => {})
      .then(() => {
        this.queued = null;
        return this.startWrite();
      });
    return this.queued;
  }

  private startWrite(): Promise<void> {
    // The snapshot is taken now, synchronously: every change made before this call is in it.
    const batches = this.batches.size > 0 ? { batches: this.pendingBatches() } : {};
    const text = `${JSON.stringify({ version: 1, sources: Object.fromEntries(this.sources), ...batches, files: Object.fromEntries(this.entries) })}\n`;
    const write = replaceFile(path.join(this.dir, FILE_NAME), path.join(this.dir, TEMP_NAME), text).finally(() => {
      this.writing = null;
    });
    this.writing = write;
    return write;
  }
}

/** The checkpoint directory under DATA_DIR. */
export function checkpointDir(dataDir: string): string {
  return path.join(dataDir, 'ingest');
}
