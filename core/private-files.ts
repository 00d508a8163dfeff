import fs from 'node:fs';
import path from 'node:path';

/** The permission bits of the group and of other users. */
export const GROUP_AND_OTHER = 0o077;

/**
 * Removes the group's and other users' permissions from `root` and everything under it (chmod -R
 * go-rwx) in one walk with lstat; returns the paths it changed. `root` itself may be a symlink (the
 * operator's choice of path); below it, symlinks are neither followed nor changed: a symlink's own
 * mode means nothing on Linux, and what one points to is either under `root` (chDB's data/ links
 * into its store/), reached by the walk itself, or not `root`'s to change. An entry that disappears
 * during the walk (removed by a process still running on it) is skipped; an entry whose mode cannot
 * be changed (another user's) throws.
 */
export function makePrivate(root: string): string[] {
  const changed: string[] = [];
  const pending = [root];
  for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
    const stats = ifThere(() => (file === root ? fs.statSync(file) : fs.lstatSync(file)));
    if (!stats || stats.isSymbolicLink()) continue;
    if (stats.mode & GROUP_AND_OTHER && ifThere(() => fs.chmodSync(file, stats.mode & 0o7700)) !== null) changed.push(file);
    if (stats.isDirectory()) for (const name of ifThere(() => fs.readdirSync(file)) ?? []) pending.push(path.join(file, name));
  }
  return changed;
}

/** `work`'s result; null when its file is gone. */
function ifThere<T>(work: () => T): T | null {
  try {
    return work();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}
