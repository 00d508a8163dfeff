/**
 * A finished log file read once from its checkpoint to its end, plain or gzip-compressed (told by
 * its first bytes, not its name): the source of `tailhouse import`.
 *
 * Offsets are positions in the uncompressed text, so `access.log.2.gz` and the same file
 * uncompressed share identity, ids and checkpoint: importing either after the other adds nothing.
 * Chunks are cut by the same LineCutter as the follower's. The chunk that ends at the end of the
 * file records its end in the checkpoint before it is handed out (as the follower does), so a
 * replay after a crash cuts it the same way even if the file has grown since.
 *
 * A last line without its newline is not imported (it may be a write in progress): its bytes are
 * reported by `trailingBytes()` once the iteration has ended.
 */
import fsp, { type FileHandle } from 'node:fs/promises';
import type { CheckpointStore } from '../checkpoints.js';
import type { LineChunk } from '../types.js';
import { fileIdentity, fingerprintLength, IDENTITY_BYTES } from './file-identity.js';
import { inflate, startsAsGzip } from './gzip-text.js';
import { LineCutter, linesIn, type Cut, type CutLimits, type Framing } from './line-cutter.js';

const READ_BYTES = 1 << 20;

export interface FileReadOptions {
  path: string;
  /** Names the source in identities and checkpoints. */
  source: string;
  checkpoints: CheckpointStore;
  limits: CutLimits;
  /** `error-log`: continuation lines join the entry before them; `line-bytes`: lines kept as bytes (see line-cutter.ts); default `line`. */
  framing?: Framing;
  /** Called with the bytes read from disk (compressed bytes for a .gz) as reading goes on. */
  onDiskBytes?: (bytes: number) => void;
}

export interface FileRead extends AsyncIterable<LineChunk> {
  /** Null when the file holds no complete first line: there is nothing to import. */
  readonly identity: string | null;
  readonly compressed: boolean;
  /** Size on disk. */
  readonly diskBytes: number;
  /** Where reading starts: the checkpoint of an earlier import, or 0. */
  readonly resumeAt: number;
  /** Records that the sink accepted `chunk`; chunks in the order they were handed out. */
  ack(chunk: LineChunk): Promise<void>;
  /** Bytes after the last complete line (known once the iteration has ended). */
  trailingBytes(): number;
}

export async function openFileRead(options: FileReadOptions): Promise<FileRead> {
  const { path: file, source, checkpoints } = options;
  const st = await fsp.stat(file);
  if (!st.isFile()) throw new Error(`${file} is not a regular file`);
  const compressed = await withFile(file, startsAsGzip);
  const head = await readHead(file, compressed);
  const length = fingerprintLength(head);
  const identity = length === null ? null : fileIdentity(source, head.subarray(0, length));
  const saved = identity === null ? undefined : checkpoints.get(identity);
  const resumeAt = saved?.offset ?? 0;
  let cuts = saved?.cuts ?? [];
  let trailing = 0;

  const checkpoint = (offset: number) => checkpoints.set(identity!, { source, path: file, offset, dev: st.dev, ino: st.ino, cuts });

  async function* chunks(): AsyncGenerator<LineChunk> {
    if (identity === null) return;
    const cutter = new LineCutter(options.limits, options.framing);
    let chunkStart = resumeAt;
    const cutAfter = () => cuts.find((c) => c > chunkStart) ?? Infinity;
    const chunkOf = (cut: Cut): LineChunk => ({ identity, path: file, startOffset: chunkStart, endOffset: cut.lineStart, lines: cut.lines, raw: cut.raw, overlong: cut.overlong });
    cutter.begin(chunkStart, cutAfter());
    // Offset of the next uncompressed byte the stream delivers.
    let pos = compressed ? 0 : resumeAt;
    for await (const buf of textStream(file, compressed, resumeAt, options.onDiskBytes)) {
      let view = buf;
      let at = pos;
      pos += view.length;
      if (at < resumeAt) {
        // A compressed file is decompressed from its start; what was imported before is skipped.
        const skip = Math.min(resumeAt - at, view.length);
        view = view.subarray(skip);
        at += skip;
      }
      while (view.length > 0) {
        const used = cutter.feed(view, at);
        if (used === -1) break;
        const cut = cutter.cut();
        yield chunkOf(cut);
        chunkStart = cut.lineStart;
        // What was read past the chunk's end (an error-log entry's first line) stays with the cutter.
        cutter.next(cutAfter());
        view = view.subarray(used);
        at += used;
      }
    }
    const last = cutter.cut();
    trailing = pos - last.lineStart;
    if (linesIn(last) > 0) {
      if (!cuts.includes(last.lineStart)) {
        cuts = [...cuts, last.lineStart].sort((a, b) => a - b);
        await checkpoint(chunkStart);
      }
      yield chunkOf(last);
    }
  }

  return {
    identity,
    compressed,
    diskBytes: st.size,
    resumeAt,
    async ack(chunk) {
      cuts = cuts.filter((c) => c > chunk.endOffset);
      await checkpoint(chunk.endOffset);
    },
    trailingBytes: () => trailing,
    [Symbol.asyncIterator]: chunks,
  };
}

async function withFile<T>(file: string, use: (fh: FileHandle) => Promise<T>): Promise<T> {
  const fh = await fsp.open(file, 'r');
  try {
    return await use(fh);
  } finally {
    await fh.close();
  }
}

/** The first IDENTITY_BYTES of the (uncompressed) text, fewer if the file is shorter. */
async function readHead(file: string, compressed: boolean): Promise<Buffer> {
  const parts: Buffer[] = [];
  let length = 0;
  for await (const buf of textStream(file, compressed, 0)) {
    // A copy: the buffer is reused for the next read.
    parts.push(Buffer.from(buf.subarray(0, IDENTITY_BYTES - length)));
    length += parts[parts.length - 1]!.length;
    if (length >= IDENTITY_BYTES) break;
  }
  return Buffer.concat(parts);
}

/**
 * The file's text from `start` (plain) or from its beginning (compressed, which cannot seek), one
 * buffer at a time. A plain file is read into one buffer over and over: the caller is done with a
 * buffer when it asks for the next (the line cutter copies what it keeps), and a fresh megabyte per
 * read would be garbage for the collector to find, hundreds of megabytes in a large import.
 */
async function* textStream(file: string, compressed: boolean, start: number, onDiskBytes?: (bytes: number) => void): AsyncGenerator<Buffer> {
  const fh = await fsp.open(file, 'r');
  try {
    if (compressed) {
      yield* inflate(fh, { chunkBytes: READ_BYTES, onDiskBytes });
      return;
    }
    const buf = Buffer.allocUnsafe(READ_BYTES);
    for (let pos = start; ; ) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
      if (bytesRead === 0) return;
      pos += bytesRead;
      onDiskBytes?.(bytesRead);
      yield buf.subarray(0, bytesRead);
    }
  } finally {
    await fh.close();
  }
}
