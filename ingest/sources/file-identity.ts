/**
 * The identity of a log file: who it is independently of its name, so that a checkpoint survives
 * rotation and a new file that happens to get an old inode number is not mistaken for the old one.
 *
 * Identity = hash(source, first line of the file, at most IDENTITY_BYTES of it). Why the first
 * line and not simply "the first 1 KiB":
 * - the identity goes into every row id and every batch's deduplication token, so it must never
 *   change for a given file. A hash of "the first 1 KiB, or fewer bytes while the file is shorter"
 *   changes while a new file grows to 1 KiB: lines inserted under the short hash and replayed after
 *   a crash under the long one would land twice. Waiting for 1 KiB before reading (Filebeat's
 *   fingerprint mode, Vector's old `checksum`) delays a quiet file's first lines indefinitely.
 * - the first line is complete exactly when the first line can be emitted, and then never changes:
 *   the identity is a pure function of the content, known as soon as it is needed (Vector's
 *   `checksum` fingerprint settled on the same rule). A first line longer than IDENTITY_BYTES is
 *   cut there; that many bytes exist by then.
 * - nginx lines carry a timestamp, so two generations of one file almost never share a first line;
 *   two different files can (a health check logged by every virtual host in the same second), so
 *   the source (the followed path) is hashed in too, and those files stay apart.
 *
 * Device and inode are only a hint: they tell "renamed" from "copied" and reveal inode reuse (same
 * device and inode, different content), but never decide on their own.
 *
 * A gzip-compressed file (told by its first bytes) is fingerprinted by its decompressed text, so a
 * generation keeps its identity once logrotate has compressed it (gzip-text.ts).
 */
import { createHash } from 'node:crypto';
import fs, { type FileHandle } from 'node:fs/promises';
import { gzipHead, startsAsGzip, type TextFile } from './gzip-text.js';

/** At most this many bytes of the first line name the file. */
export const IDENTITY_BYTES = 1024;

/** A file as far as identity goes; `identity` is null while its first line is incomplete. */
export interface FileId {
  identity: string | null;
  dev: number;
  ino: number;
}

/** A file found on disk, with the size and modification time it had when its fingerprint was read. */
export interface FoundFile extends FileId {
  path: string;
  /** Bytes on disk (compressed ones for a gzip file, whose text may be longer). */
  size: number;
  mtimeMs: number;
  /** gzip-compressed: its identity is that of its text. */
  compressed: boolean;
}

/** How many leading bytes of `head` (a file's beginning) form its fingerprint; null: not yet known. */
export function fingerprintLength(head: Buffer): number | null {
  const newline = head.subarray(0, IDENTITY_BYTES).indexOf(10);
  if (newline !== -1) return newline + 1;
  return head.length >= IDENTITY_BYTES ? IDENTITY_BYTES : null;
}

/** The identity of a file of `source` whose fingerprint bytes are `prefix`: 32 hex digits. */
export function fileIdentity(source: string, prefix: Buffer): string {
  return createHash('sha256').update(source).update('\0').update(prefix).digest('hex').slice(0, 32);
}

/** Reads the identity of an open file; null while its first line is incomplete and shorter than IDENTITY_BYTES. */
export async function readIdentity(fh: Pick<TextFile, 'read'>, source: string): Promise<string | null> {
  const head = Buffer.alloc(IDENTITY_BYTES);
  const { bytesRead } = await fh.read(head, 0, IDENTITY_BYTES, 0);
  return identityOfHead(head.subarray(0, bytesRead), source);
}

function identityOfHead(head: Buffer, source: string): string | null {
  const length = fingerprintLength(head);
  return length === null ? null : fileIdentity(source, head.subarray(0, length));
}

/** Identity (of the text, for a gzip file), device/inode and size of the regular file at `path`; null when there is none. */
export async function inspectPath(path: string, source: string): Promise<FoundFile | null> {
  let fh: FileHandle;
  try {
    fh = await fs.open(path, 'r');
  } catch (err) {
    if (isMissing(err)) return null;
    throw err;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) return null;
    const compressed = await startsAsGzip(fh);
    const identity = compressed ? identityOfHead(await gzipHead(fh, IDENTITY_BYTES), source) : await readIdentity(fh, source);
    return { path, identity, dev: st.dev, ino: st.ino, size: st.size, mtimeMs: st.mtimeMs, compressed };
  } finally {
    await fh.close();
  }
}

/**
 * How a file found on disk relates to one known before (from a checkpoint). Content decides:
 * - `same`: same content, same inode;
 * - `moved`: same content under another inode (copied, or moved across file systems): it continues;
 * - `inode-reused`: same device and inode, other content: the old file is gone and its inode number
 *   was given to a new one, which starts from the beginning;
 * - `other`: an unrelated file.
 */
export function relate(known: FileId, found: FileId): 'same' | 'moved' | 'inode-reused' | 'other' {
  const sameInode = known.dev === found.dev && known.ino === found.ino;
  if (known.identity !== null && known.identity === found.identity) return sameInode ? 'same' : 'moved';
  return sameInode ? 'inode-reused' : 'other';
}

/** ENOENT and friends: the path names nothing (any more). */
export function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}
