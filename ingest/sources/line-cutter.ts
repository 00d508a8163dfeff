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

/** Bytes decoded at once into one string that the lines are sliced from (see LineCutter.slab). */
const SLAB_BYTES = 64 * 1024;

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
  /**
   * Lines are decoded a slab at a time: the bytes [from, slabEnd) of the view being fed, whole
   * lines, as one string, each line a slice of it (`slabAt`: where the next one starts). A slice
   * is a small object pointing into the slab, where a string per line would be a copy: a chunk's
   * lines live until its batch is written, and the garbage collector copies what lives.
   */
  private slab = '';
  private slabAt = 0;
  private slabEnd = 0;

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
    this.slabEnd = 0;
    for (let nl = view.indexOf(NEWLINE); nl !== -1; nl = view.indexOf(NEWLINE, from)) {
      const length = pos + nl - this.lineStart;
      if (this.head !== null || length > maxLineBytes) {
        this.overlong.push({ offset: this.lineStart, length, head: this.head ?? headOf([...this.pieces, view.subarray(from, nl)]) });
        this.slabEnd = 0;
      } else if (this.pieces.length > 0) {
        this.lines.push({ offset: this.lineStart, text: Buffer.concat([...this.pieces, view.subarray(from, nl)]).toString('utf8') });
      } else {
        if (from >= this.slabEnd) {
          // Whole lines from here, up to SLAB_BYTES and no further than the chunk can reach.
          const room = Math.min(SLAB_BYTES, Math.max(1, chunkMaxBytes - (pos + from - this.start)));
          const last = view.lastIndexOf(NEWLINE, Math.min(view.length, from + room) - 1);
          this.slabEnd = Math.max(last, nl) + 1;
          // UTF-8 never encodes anything else with the byte of \n, so the slab's lines are the lines' text.
          this.slab = view.toString('utf8', from, this.slabEnd);
          this.slabAt = 0;
        }
        const end = this.slab.indexOf('\n', this.slabAt);
        this.lines.push({ offset: this.lineStart, text: this.slab.slice(this.slabAt, end) });
        this.slabAt = end + 1;
      }
      this.head = null;
      if (this.pieces.length > 0) this.pieces = [];
      this.lineStart = pos + nl + 1;
      from = nl + 1;
      if (this.lines.length + this.overlong.length >= chunkMaxLines || this.lineStart - this.start >= chunkMaxBytes || this.lineStart >= this.cutAt) {
        this.slab = '';
        return from;
      }
    }
    this.slab = '';
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
