/**
 * The shapes that flow through the ingest pipeline: sources produce line chunks, parsers turn
 * lines into entries (core/entries.ts), sinks write entries (or rejects) to ClickHouse.
 */

export type ParseResult<T> = { ok: true; entry: T } | { ok: false; reason: string };

/** One complete line of a source and the byte offset where it starts. */
export interface SourceLine {
  text: string;
  offset: number;
}

/**
 * Complete lines kept as the bytes they were read as (a LineCutter in `line-bytes` framing): each
 * part holds whole lines, each with its newline, in order; `count` lines in all.
 */
export interface RawLines {
  parts: Buffer[];
  count: number;
}

/**
 * Complete lines read from one file (or stream) between two byte offsets. `identity` names the
 * file independently of its path (a fingerprint of the source and the file's first line; the
 * device/inode is only a hint kept in the checkpoint), so a checkpoint survives rotation;
 * [startOffset, endOffset) is deterministic for the same file content.
 */
export interface LineChunk {
  identity: string;
  path: string;
  startOffset: number;
  endOffset: number;
  lines: SourceLine[];
  /** The lines as bytes instead, when the reader kept them so (`lines` is then empty). */
  raw?: RawLines;
  /** Lines longer than the limit, not in `lines`: they go to the rejects with their offsets. */
  overlong: { offset: number; length: number; head: string }[];
  /**
   * Date.now() of the first sign (a directory event) that the file held more than had been read,
   * when one prompted this read: the chunk's lines have been waiting since then at the latest.
   */
  waitingSince?: number;
}
