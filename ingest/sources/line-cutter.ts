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
 *
 * Error logs are cut into entries instead of lines (`framing: 'error-log'`). nginx writes the raw
 * line breaks a message holds (a request for `/a%0d%0aSet-Cookie:x=1` gives `open() "/srv/a\r`,
 * then `Set-Cookie:x=1" failed …` on a line of its own), so a line that does not begin an entry
 * (`YYYY/MM/DD HH:MM:SS [level] PID#TID: `) continues the entry before it, newline included; one
 * with no entry before it (after a cut, or in a file that is no error log) stands alone. The rules
 * above then hold for entries: a chunk ends only between two entries (`chunkMaxLines` counts
 * entries), and an entry longer than `maxLineBytes` is `overlong` as a whole. nginx writes an entry
 * in one write(), so an entry is complete once the next line begins another, or once the data ends
 * right after its newline (or with the start of another entry): a continuation that comes in the
 * next read of the same data still joins, and the entry before a line still being written waits
 * for it. A recorded cut ends the entry there, as it did when the cut was made.
 */
import { startsErrorEntry } from '../parsers/error-log.js';
import type { LineChunk, RawLines, SourceLine } from '../types.js';

export interface CutLimits {
  /** Longer lines go to `overlong` (default 64 KiB). */
  maxLineBytes: number;
  chunkMaxLines: number;
  chunkMaxBytes: number;
}

export const DEFAULT_CUT_LIMITS: CutLimits = { maxLineBytes: 64 * 1024, chunkMaxLines: 20_000, chunkMaxBytes: 4 * 1024 * 1024 };

/**
 * What a chunk's unit is: a line, or an error-log entry with its continuation lines. `line-bytes`
 * cuts lines as `line` does but keeps them as bytes (`Cut.raw`, see RawLines), with no string or
 * object per line, for a reader that hands them on as bytes (the staged import).
 */
export type Framing = 'line' | 'error-log' | 'line-bytes';

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
  /** `line-bytes` framing: the lines (then `lines` is empty). */
  raw?: RawLines;
  overlong: Overlong[];
  /** Where the next line starts: the chunk's end. */
  lineStart: number;
}

/** An error-log entry being assembled (error-log framing). */
interface OpenEntry {
  /** It begins like an entry; false for a line that continues nothing (it stands alone). */
  begun: boolean;
  offset: number;
  /** Its lines so far, joined by newlines; null once it is overlong. */
  text: string | null;
  /** The head of an overlong entry. */
  head: string;
  /** Bytes from its start to the end of its last line (without that line's newline). */
  length: number;
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
  /** Error-log framing: the entry being assembled; it belongs to the next chunk once this one is complete. */
  private entry: OpenEntry | null = null;
  /** Error-log framing: where the last complete entry ends (the chunk's end so far). */
  private entriesEnd = 0;
  /** `feed` completed the chunk: `cut` gives it as it is. */
  private complete = false;
  /** `line-bytes` framing: the chunk's lines so far, copied from the views, and how many. */
  private parts: Buffer[] = [];
  private count = 0;

  constructor(
    private readonly limits: CutLimits,
    private readonly framing: Framing = 'line',
  ) {}

  /** Starts a chunk at `start` (a line start); `pending` continues an overlong line scanned before. */
  begin(start: number, cutAt = Infinity, pending: OverlongScan | null = null): void {
    this.start = start;
    this.lineStart = start;
    this.cutAt = cutAt;
    this.lines = [];
    this.overlong = [];
    this.head = pending?.head ?? null;
    this.pieces = [];
    this.entry = null;
    this.entriesEnd = start;
    this.complete = false;
    this.parts = [];
    this.count = 0;
  }

  /**
   * Starts the chunk after the one `feed` just completed, for a caller that goes on feeding the
   * same stream where `feed` stopped (rather than reading again from the new chunk's start): what
   * was read past the chunk's end (an entry's first line) stays.
   */
  next(cutAt = Infinity): void {
    const { entry } = this;
    const start = this.framing === 'error-log' ? this.entriesEnd : this.lineStart;
    this.start = start;
    this.cutAt = cutAt;
    this.lines = [];
    this.overlong = [];
    this.parts = [];
    this.count = 0;
    this.complete = false;
    // The carried entry's first line may already reach a recorded cut: the chunk is that entry.
    if (entry !== null && entry.offset + entry.length + 1 >= cutAt) {
      this.closeEntry();
      this.complete = true;
    }
  }

  /**
   * Cuts `view`, the bytes found at offset `pos` of the source. Returns the index in `view` just
   * after the newline that completed the chunk (0 when `next` found it complete already: an entry
   * read past the last chunk's end that reaches a recorded cut), or -1 when the whole view was taken
   * and the chunk is not complete yet (its last line, if unfinished, is kept pending).
   */
  feed(view: Buffer, pos: number): number {
    if (this.complete) return 0;
    if (this.framing === 'line-bytes') return this.feedBytes(view, pos);
    const { maxLineBytes, chunkMaxBytes } = this.limits;
    const entries = this.framing === 'error-log';
    let from = 0;
    this.slabEnd = 0;
    for (let nl = view.indexOf(NEWLINE); nl !== -1; nl = view.indexOf(NEWLINE, from)) {
      const length = pos + nl - this.lineStart;
      let line: SourceLine | Overlong;
      if (this.head !== null || length > maxLineBytes) {
        line = { offset: this.lineStart, length, head: this.head ?? headOf([...this.pieces, view.subarray(from, nl)]) };
        this.slabEnd = 0;
      } else if (this.pieces.length > 0) {
        line = { offset: this.lineStart, text: Buffer.concat([...this.pieces, view.subarray(from, nl)]).toString('utf8') };
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
        line = { offset: this.lineStart, text: this.slab.slice(this.slabAt, end) };
        this.slabAt = end + 1;
      }
      this.head = null;
      if (this.pieces.length > 0) this.pieces = [];
      this.lineStart = pos + nl + 1;
      from = nl + 1;
      if (entries ? this.takeEntryLine(line) : this.takeLine(line)) {
        this.slab = '';
        this.complete = true;
        return from;
      }
    }
    this.slab = '';
    this.keepUnfinished(view, pos, from);
    return -1;
  }

  /** `feed` in `line-bytes` framing: the same cut, the lines' bytes (newlines included) copied a run of whole lines at a time. */
  private feedBytes(view: Buffer, pos: number): number {
    const { maxLineBytes } = this.limits;
    let from = 0;
    // Where the lines not copied yet begin.
    let run = 0;
    for (let nl = view.indexOf(NEWLINE); nl !== -1; nl = view.indexOf(NEWLINE, from)) {
      const length = pos + nl - this.lineStart;
      if (this.head !== null || length > maxLineBytes) {
        this.copyRun(view, run, from);
        this.overlong.push({ offset: this.lineStart, length, head: this.head ?? headOf([...this.pieces, view.subarray(from, nl)]) });
        run = nl + 1;
      } else {
        if (this.pieces.length > 0) {
          this.parts.push(Buffer.concat([...this.pieces, view.subarray(from, nl + 1)]));
          run = nl + 1;
        }
        this.count++;
      }
      this.head = null;
      if (this.pieces.length > 0) this.pieces = [];
      this.lineStart = pos + nl + 1;
      from = nl + 1;
      if (this.chunkDone(this.count)) {
        this.copyRun(view, run, from);
        this.complete = true;
        return from;
      }
    }
    this.copyRun(view, run, from);
    this.keepUnfinished(view, pos, from);
    return -1;
  }

  /** A copy of the view's whole lines [from, to): the caller reuses the view. */
  private copyRun(view: Buffer, from: number, to: number): void {
    if (to > from) this.parts.push(Buffer.from(view.subarray(from, to)));
  }

  /** Keeps the line the view ends in the middle of (its head only, once it is overlong). */
  private keepUnfinished(view: Buffer, pos: number, from: number): void {
    if (this.head === null && from < view.length) {
      if (pos + view.length - this.lineStart > this.limits.maxLineBytes) {
        this.head = headOf([...this.pieces, view.subarray(from)]);
        this.pieces = [];
      } else {
        this.pieces.push(Buffer.from(view.subarray(from)));
      }
    }
  }

  /**
   * The chunk so far. When `feed` did not complete it, the data ends here: in error-log framing the
   * entry being assembled is complete if nothing follows its last newline or what follows begins
   * another entry, and otherwise waits (the chunk then ends where it starts).
   */
  cut(): Cut {
    if (this.framing === 'line') return { lines: this.lines, overlong: this.overlong, lineStart: this.lineStart };
    if (this.framing === 'line-bytes') return { lines: [], raw: { parts: this.parts, count: this.count }, overlong: this.overlong, lineStart: this.lineStart };
    if (!this.complete && this.entry !== null) {
      const pending = this.head ?? (this.pieces.length > 0 ? headOf(this.pieces) : null);
      if (pending === null || startsErrorEntry(pending) || !this.entry.begun) this.closeEntry();
    }
    return { lines: this.lines, overlong: this.overlong, lineStart: this.entriesEnd };
  }

  /** The overlong line in progress, if any, scanned up to `scannedTo`; null when reading must start again at the chunk's end. */
  pendingOverlong(scannedTo: number): OverlongScan | null {
    // An entry waiting for what follows it is read again from its start.
    if (this.entry !== null) return null;
    return this.head === null ? null : { head: this.head, scanned: scannedTo };
  }

  /** Bytes of an unfinished line (not overlong) held since the last complete one. */
  pendingBytes(): number {
    return this.pieces.reduce((n, b) => n + b.length, 0);
  }

  /** Line framing: adds a complete line; true when it completes the chunk. */
  private takeLine(line: SourceLine | Overlong): boolean {
    if ('text' in line) this.lines.push(line);
    else this.overlong.push(line);
    return this.chunkDone(this.lines.length);
  }

  /** Line framings: whether the line just taken, the chunk's `lines`-th (overlong ones aside), completes it. */
  private chunkDone(lines: number): boolean {
    return lines + this.overlong.length >= this.limits.chunkMaxLines || this.lineStart - this.start >= this.limits.chunkMaxBytes || this.lineStart >= this.cutAt;
  }

  /** Error-log framing: adds a complete line to its entry, or starts one; true when the chunk is complete. */
  private takeEntryLine(line: SourceLine | Overlong): boolean {
    const entry = this.entry;
    const text = 'text' in line ? line.text : line.head;
    const begins = startsErrorEntry(text);
    // lineStart is already past the line's newline.
    const lineEnd = this.lineStart - 1;
    if (entry !== null && entry.begun && !begins) {
      entry.length = lineEnd - entry.offset;
      if (entry.text !== null && ('head' in line || entry.length > this.limits.maxLineBytes)) {
        entry.head = headOf([Buffer.from(`${entry.text}\n${text}`)]);
        entry.text = null;
      } else if (entry.text !== null) {
        entry.text += `\n${text}`;
      }
    } else {
      if (entry !== null) {
        this.closeEntry();
        if (this.lines.length + this.overlong.length >= this.limits.chunkMaxLines || this.entriesEnd - this.start >= this.limits.chunkMaxBytes) {
          // The line begins the next chunk's first entry.
          this.entry = newEntry(line, lineEnd, begins);
          return true;
        }
      }
      this.entry = newEntry(line, lineEnd, begins);
    }
    if (this.lineStart < this.cutAt) return false;
    this.closeEntry();
    return true;
  }

  /** The entry being assembled is complete. */
  private closeEntry(): void {
    const entry = this.entry!;
    if (entry.text !== null) this.lines.push({ offset: entry.offset, text: entry.text });
    else this.overlong.push({ offset: entry.offset, length: entry.length, head: entry.head });
    this.entriesEnd = entry.offset + entry.length + 1;
    this.entry = null;
  }
}

/** How many lines a cut (or a chunk) holds, overlong ones included, in any framing. */
export function linesIn(cut: Pick<Cut, 'lines' | 'raw' | 'overlong'>): number {
  return cut.lines.length + (cut.raw?.count ?? 0) + cut.overlong.length;
}

/**
 * Calls `visit` for each line of `raw`, a chunk's lines from `startOffset` in `line-bytes` framing,
 * in order: the Latin-1 text of the part holding it (one byte per character, so positions in it
 * are positions in `part`), where the line starts and ends (before its newline) in both, and its
 * offset in the source. The chunk's `overlong` lines are not in `raw`; their bytes are skipped.
 */
export function eachRawLine(
  raw: RawLines,
  startOffset: number,
  overlong: readonly Overlong[],
  visit: (text: string, part: Buffer, start: number, end: number, offset: number) => void,
): void {
  let offset = startOffset;
  let skipped = 0;
  for (const part of raw.parts) {
    const text = part.toString('latin1');
    for (let start = 0; start < text.length; ) {
      while (skipped < overlong.length && overlong[skipped]!.offset === offset) offset += overlong[skipped++]!.length + 1;
      const end = text.indexOf('\n', start);
      visit(text, part, start, end, offset);
      offset += end + 1 - start;
      start = end + 1;
    }
  }
}

/** An entry that begins with `line`, whose newline is at `lineEnd`. */
function newEntry(line: SourceLine | Overlong, lineEnd: number, begun: boolean): OpenEntry {
  const length = lineEnd - line.offset;
  return 'text' in line ? { begun, offset: line.offset, text: line.text, head: '', length } : { begun, offset: line.offset, text: null, head: line.head, length };
}

/** The first bytes of a line given in pieces, as text (a multi-byte character cut at the end shows as U+FFFD). */
function headOf(parts: Buffer[]): string {
  const total = parts.reduce((n, b) => n + b.length, 0);
  return Buffer.concat(parts, Math.min(total, OVERLONG_HEAD_BYTES)).toString('utf8');
}
