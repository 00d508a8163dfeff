/**
 * DATA_DIR is private to the user tailhouse runs as. Its stores hold the users table, password
 * hashes, the token secret and every customer's logs, and the embedded engines write their files
 * readable and writable by anyone (PGlite's 0666, chDB's 0644 under the usual umask): only the
 * directory's own mode keeps other users out. So, as PostgreSQL refuses a data directory with
 * group or world permissions:
 * - a DATA_DIR that other users may read, write or search, or that another user owns, is refused,
 *   with the command that makes it private: its contents may already have been read or changed;
 * - inside a private DATA_DIR, entries with looser modes (an installation from before this rule,
 *   a `run/` made by hand) could never have been reached by another user: they are made private,
 *   with one warning saying how many, so that an existing installation starts after the upgrade;
 * - a missing DATA_DIR is created 0700.
 * Symlinks inside are left alone (core/private-files.ts). The CLI runs with umask 077 (src/cli.ts),
 * so that what tailhouse creates afterwards is private too.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../core/log.js';
import { GROUP_AND_OTHER, makePrivate } from '../core/private-files.js';

export class DataDirPermissionError extends Error {}

const octal = (mode: number) => `0${(mode & 0o777).toString(8)}`;

/**
 * Refuses a DATA_DIR that other users may reach or that another user owns. A missing one passes:
 * whatever creates it creates it private.
 */
export function assertPrivateDataDir(dataDir: string): void {
  let stats: fs.Stats;
  try {
    stats = fs.statSync(dataDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
    throw err;
  }
  if (!stats.isDirectory()) throw new DataDirPermissionError(`DATA_DIR ${dataDir} is not a directory`);
  const uid = process.getuid?.();
  if (uid !== undefined && stats.uid !== uid) {
    throw new DataDirPermissionError(
      `DATA_DIR ${dataDir} belongs to user ${stats.uid}, not to user ${uid} that tailhouse runs as, who must be its only user: run tailhouse as user ${stats.uid}, or \`chown -R ${uid} ${dataDir}\``,
    );
  }
  if (stats.mode & GROUP_AND_OTHER) {
    throw new DataDirPermissionError(
      `DATA_DIR ${dataDir} is open to other users (mode ${octal(stats.mode)}), who may read or change the stores in it: make it private with \`chmod 700 ${dataDir}\` once you have checked that its contents are yours (tailhouse then makes them private too)`,
    );
  }
}

/**
 * The common start of every process that uses DATA_DIR: creates it 0700 if `create` and it is
 * missing, refuses it if other users may reach it, and makes what is inside private.
 */
export function secureDataDir(dataDir: string, log: Logger, { create }: { create: boolean }): void {
  if (create) fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  assertPrivateDataDir(dataDir);
  if (!fs.existsSync(dataDir)) return;
  let changed: string[];
  try {
    changed = makePrivate(dataDir);
  } catch (err) {
    const { code, path: file } = err as NodeJS.ErrnoException;
    if (code !== 'EPERM' || !file) throw err;
    throw new DataDirPermissionError(`DATA_DIR ${dataDir} holds ${file}, which belongs to another user and is open to other users: \`chown -R ${process.getuid?.()} ${dataDir}\``);
  }
  if (changed.length > 0) {
    log.warn(
      { dataDir, entries: changed.length, first: path.relative(dataDir, changed[0]!) },
      'DATA_DIR entries open to other users made private (chmod go-rwx); DATA_DIR itself was private, so no other user could reach them',
    );
  }
}
