/**
 * gzip-compressed log generations (`access.log.2.gz`, logrotate's `compress`), as the follower
 * reads them: told by their first bytes, never by their name, and read only once complete.
 *
 * A compressor writes its output progressively (gzip into `name.gz`, others into a temporary name
 * renamed at the end). A file still being written decompresses to a prefix of the text and then
 * ends early; a damaged one may decompress to anything before its checksum fails. So a compressed
 * generation is read only after one full decompression has reached the end of every member with
 * its CRC and length checked (`gzipTextLength`); until then the follower leaves it and looks again.
 *
 * Positions are offsets in the decompressed text, as for `tailhouse import` (file-read.ts), so a
 * generation's checkpoint, ids and identity are the same compressed or not, and a file finished
 * plain can be resumed compressed.
 */
import type { FileHandle } from 'node:fs/promises';
import fsp from 'node:fs/promises';
import { Readable } from 'node:stream';
import zlib from 'node:zlib';

/** What the follower needs of an open file, plain (a FileHandle) or compressed (GzipText). */
export interface TextFile {
  read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  /** `size` is the length of the text. */
  stat(): Promise<{ size: number; mtimeMs: number; dev: number; ino: number }>;
  close(): Promise<void>;
}

const GZIP_MAGIC = [0x1f, 0x8b];
const INFLATE_CHUNK_BYTES = 256 * 1024;
const EMPTY: Buffer = Buffer.alloc(0);

/** Whether a file's first bytes are a gzip header. */
export function isGzip(head: Buffer): boolean {
  return head.length >= GZIP_MAGIC.length && GZIP_MAGIC.every((b, i) => head[i] === b);
}

/** Whether the open file starts with a gzip header. */
export async function startsAsGzip(fh: FileHandle): Promise<boolean> {
  const head = Buffer.alloc(GZIP_MAGIC.length);
  const { bytesRead } = await fh.read(head, 0, head.length, 0);
  return isGzip(head.subarray(0, bytesRead));
}

export interface InflateOptions {
  /** Bytes read from disk, and inflated, at a time. */
  chunkBytes?: number;
  /** Called with the compressed bytes read from disk as reading goes on. */
  onDiskBytes?: (bytes: number) => void;
}

/** The bytes of an open file from its beginning, read at positions: the handle stays open for more reads. */
async function* rawBytes(fh: FileHandle, chunkBytes: number, onDiskBytes?: (bytes: number) => void): AsyncGenerator<Buffer> {
  for (let pos = 0; ; ) {
    const buf = Buffer.allocUnsafe(chunkBytes);
    const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
    if (bytesRead === 0) return;
    pos += bytesRead;
    onDiskBytes?.(bytesRead);
    yield buf.subarray(0, bytesRead);
  }
}

/** The decompressed text of an open gzip file, from its beginning, one buffer at a time. */
export async function* inflate(fh: FileHandle, options: InflateOptions = {}): AsyncGenerator<Buffer> {
  const chunkBytes = options.chunkBytes ?? INFLATE_CHUNK_BYTES;
  const raw = Readable.from(rawBytes(fh, chunkBytes, options.onDiskBytes), { objectMode: false });
  // Concatenated members (`cat a.gz b.gz`) are one text, as zcat reads them.
  const gunzip = zlib.createGunzip({ chunkSize: chunkBytes });
  raw.on('error', (err) => gunzip.destroy(err));
  try {
    for await (const buf of raw.pipe(gunzip)) yield buf as Buffer;
  } finally {
    raw.destroy();
    gunzip.destroy();
  }
}

/**
 * The first `bytes` of the text (fewer if it is shorter, or if the file is incomplete or damaged
 * that early: a fingerprint needs no more than a prefix, and a prefix is right as far as it goes).
 */
export async function gzipHead(fh: FileHandle, bytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let length = 0;
  try {
    for await (const buf of inflate(fh)) {
      parts.push(Buffer.from(buf.subarray(0, bytes - length)));
      length += parts[parts.length - 1]!.length;
      if (length >= bytes) break;
    }
  } catch {
    // Ends early (still being written) or damaged further on: the prefix read so far stands.
  }
  return Buffer.concat(parts);
}

/** The length of the whole text when the file is complete and intact; null when it ends early or is damaged. */
export async function gzipTextLength(fh: FileHandle): Promise<number | null> {
  let length = 0;
  try {
    for await (const buf of inflate(fh)) length += buf.length;
  } catch {
    return null;
  }
  return length;
}

interface Segment {
  start: number;
  buf: Buffer;
}

/**
 * A complete gzip file read as its text at any position: sequential reads inflate on, a read
 * behind the two buffers kept starts over from the beginning (the follower reads forward, and
 * looks back only at its first bytes, kept apart, and at the byte before a read position).
 */
export class GzipText implements TextFile {
  private stream: AsyncGenerator<Buffer> | null = null;
  /** The last two inflated buffers: [start, start + buf.length) of the text each. */
  private previous: Segment = { start: 0, buf: EMPTY };
  private current: Segment = { start: 0, buf: EMPTY };

  private constructor(
    private readonly fh: FileHandle,
    private readonly head: Buffer,
    private readonly length: number,
    private readonly file: { mtimeMs: number; dev: number; ino: number },
  ) {}

  /** Opens `fh` (a gzip file) as text; null, and `fh` closed, when it is not complete yet or damaged. */
  static async open(fh: FileHandle, headBytes: number): Promise<GzipText | null> {
    const { mtimeMs, dev, ino } = await fh.stat();
    const length = await gzipTextLength(fh);
    if (length === null) {
      await fh.close();
      return null;
    }
    return new GzipText(fh, await gzipHead(fh, headBytes), length, { mtimeMs, dev, ino });
  }

  async read(buffer: Buffer, offset: number, length: number, position: number): Promise<{ bytesRead: number }> {
    if (length <= 0 || position >= this.length) return { bytesRead: 0 };
    const segment = position < this.head.length ? { start: 0, buf: this.head } : await this.segmentAt(position);
    if (!segment) return { bytesRead: 0 };
    const from = position - segment.start;
    return { bytesRead: segment.buf.copy(buffer, offset, from, Math.min(segment.buf.length, from + length)) };
  }

  async stat(): Promise<{ size: number; mtimeMs: number; dev: number; ino: number }> {
    return { size: this.length, ...this.file };
  }

  async close(): Promise<void> {
    await this.stream?.return(undefined);
    await this.fh.close();
  }

  private async segmentAt(position: number): Promise<Segment | null> {
    for (const segment of [this.current, this.previous]) {
      if (position >= segment.start && position < segment.start + segment.buf.length) return segment;
    }
    if (!this.stream || position < this.previous.start) {
      await this.stream?.return(undefined);
      this.stream = inflate(this.fh);
      this.previous = { start: 0, buf: EMPTY };
      this.current = { start: 0, buf: EMPTY };
    }
    while (position >= this.current.start + this.current.buf.length) {
      const next = await this.stream.next();
      if (next.done) return null;
      this.previous = this.current;
      this.current = { start: this.current.start + this.current.buf.length, buf: next.value };
    }
    return this.current;
  }
}

/** Opens a file found on disk as text: plain as it is, gzip through GzipText (null until complete). */
export async function openText(filePath: string, headBytes: number): Promise<TextFile | null> {
  const fh = await fsp.open(filePath, 'r');
  try {
    if (await startsAsGzip(fh)) return await GzipText.open(fh, headBytes);
  } catch (err) {
    await fh.close();
    throw err;
  }
  return fh;
}
