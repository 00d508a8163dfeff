/**
 * Cuts bytes into line chunks, the one rule shared by every file reader (the follower reading
 * through a file handle, the importer reading a stream, plain or gunzipped), so that the same
 * content read either way gives the same chunks, hence the same deduplication tokens and ids:
 *
 * - a chunk runs from a line start to the next line start; it ends after `chunkMaxLines` lines, or
 *   at the first line end at or past `chunkMaxBytes` from its start, or at `cutAt` (a cut recorded
 *   earlier), whichever comes first;
 * - a line longer than `maxLineBytes` is never held whole: only its head (OVERLONG_HEAD_BYTES) and
 *   length are kept, as an `overlong` entry;
 * - a line still missing its newline stays pending: it is not part of any chunk.
 */
import type { LineChunk, SourceLine } from '../types.js';

export interface CutLimits {
  /** Longer lines go to `overlong` (default 64 KiB). */
  maxLineBytes: number;
  chunkMaxLines: number;
  chunkMaxBytes: number;
}

export const DEFAULT_CUT_LIMITS: CutLimits = { maxLineBytes: 64 * 1024, chunkMaxLines: 20_000, chunkMaxBytes: 4 * 1024 * 1024 };

export type Overlong = LineChunk['overlong'][number];

/** A line longer than the limit whose newline has not been read yet. */
export interface OverlongScan {
  head: string;
  /** Offset up to which it has been read. */
  scanned: number;
}

/** What one chunk's worth of cutting produced. */
export interface Cut {
  lines: SourceLine[];
  overlong: Overlong[];
  /** Where the next line starts: the chunk's end. */
  lineStart: number;
}

/** What an overlong line keeps for the rejects: enough to recognise it. */
export const OVERLONG_HEAD_BYTES = 1024;
const NEWLINE = 0x0a;

export class LineCutter {
  private start = 0;
  private lineStart = 0;
  private cutAt = Infinity;
  private lines: SourceLine[] = [];
  private overlong: Overlong[] = [];
  /** Non-null while the line in progress is overlong. */
  private head: string | null = null;
  /** The line in progress, when it started in an earlier buffer (copies: callers reuse buffers). */
  private pieces: Buffer[] = [];

  constructor(private readonly limits: CutLimits) {}

  /** Starts a chunk at `start` (a line start); `pending` continues an overlong line scanned before. */
  begin(start: number, cutAt = Infinity, pending: OverlongScan | null = null): void {
    this.start = start;
    this.lineStart = start;
    this.cutAt = cutAt;
    this.lines = [];
    this.overlong = [];
    this.head = pending?.head ?? null;
    this.pieces = [];
  }

  /**
   * Cuts `view`, the bytes found at offset `pos` of the source. Returns the index in `view` just
   * after the newline that completed the chunk, or -1 when the whole view was taken and the chunk
   * is not complete yet (its last line, if unfinished, is kept pending).
   */
  feed(view: Buffer, pos: number): number {
    const { maxLineBytes, chunkMaxLines, chunkMaxBytes } = this.limits;
    let from = 0;
    for (let nl = view.indexOf(NEWLINE); nl !== -1; nl = view.indexOf(NEWLINE, from)) {
      const length = pos + nl - this.lineStart;
      if (this.head !== null || length > maxLineBytes) {
        this.overlong.push({ offset: this.lineStart, length, head: this.head ?? headOf([...this.pieces, view.subarray(from, nl)]) });
      } else {
        const text = this.pieces.length === 0 ? view.toString('utf8', from, nl) : Buffer.concat([...this.pieces, view.subarray(from, nl)]).toString('utf8');
        this.lines.push({ offset: this.lineStart, text });
      }
      this.head = null;
      this.pieces = [];
      this.lineStart = pos + nl + 1;
      from = nl + 1;
      if (this.lines.length + this.overlong.length >= chunkMaxLines || this.lineStart - this.start >= chunkMaxBytes || this.lineStart >= this.cutAt) {
        return from;
      }
    }
    if (this.head === null && from < view.length) {
      if (pos + view.length - this.lineStart > maxLineBytes) {
        this.head = headOf([...this.pieces, view.subarray(from)]);
        this.pieces = [];
      } else {
        this.pieces.push(Buffer.from(view.subarray(from)));
      }
    }
    return -1;
  }

  /** The chunk so far. */
  cut(): Cut {
    return { lines: this.lines, overlong: this.overlong, lineStart: this.lineStart };
  }

  /** The overlong line in progress, if any, scanned up to `scannedTo`. */
  pendingOverlong(scannedTo: number): OverlongScan | null {
    return this.head === null ? null : { head: this.head, scanned: scannedTo };
  }

  /** Bytes of an unfinished line (not overlong) held since the last complete one. */
  pendingBytes(): number {
    return this.pieces.reduce((n, b) => n + b.length, 0);
  }
}

/** The first bytes of a line given in pieces, as text (a multi-byte character cut at the end shows as U+FFFD). */
function headOf(parts: Buffer[]): string {
  const total = parts.reduce((n, b) => n + b.length, 0);
  return Buffer.concat(parts, Math.min(total, OVERLONG_HEAD_BYTES)).toString('utf8');
}
