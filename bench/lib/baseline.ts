/**
 * A git revision of this repository checked out in a temporary worktree, for benches that time the
 * code before a change against the code after it in the same run. The worktree shares this
 * checkout's node_modules and is removed by `remove`; nothing is committed.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface Baseline {
  /** The revision, abbreviated. */
  rev: string;
  /** The worktree's root. */
  root: string;
  remove(): void;
}

/** Checks `revision` out beside `root` (this checkout) in a temporary directory. */
export function checkoutBaseline(root: string, revision: string): Baseline {
  const git = (...args: string[]) => {
    const r = spawnSync('git', ['-C', root, ...args], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr.trim()}`);
    return r.stdout.trim();
  };
  const rev = git('rev-parse', '--short', revision);
  const tree = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-baseline-')), 'tree');
  git('worktree', 'add', '--detach', tree, rev);
  fs.symlinkSync(path.join(root, 'node_modules'), path.join(tree, 'node_modules'));
  return {
    rev,
    root: tree,
    remove() {
      git('worktree', 'remove', '--force', tree);
      fs.rmSync(path.dirname(tree), { recursive: true, force: true });
    },
  };
}

/** How this checkout is named beside a baseline: its HEAD, and whether it has uncommitted changes. */
export function describeCheckout(root: string): string {
  const git = (...args: string[]) => spawnSync('git', ['-C', root, ...args], { encoding: 'utf8' }).stdout.trim();
  return `this checkout (${git('rev-parse', '--short', 'HEAD')}${git('status', '--porcelain', '--untracked-files=no') ? ', with uncommitted changes' : ''})`;
}

export const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};
