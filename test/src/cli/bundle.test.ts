import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error: plain JavaScript without declarations (it runs before anything is compiled)
import { bundle, sourceStamp } from '../../../bin/bundle.js';
import { ROOT } from '../../support/child.js';

// bin/bundle.js: the CLI runs from a bundle of its sources, built again whenever they change.

const tempDirs: string[] = [];
afterAll(() => {
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** A checkout in miniature: tailhouse's package.json, an entry importing a module of core/, and node_modules (for esbuild). */
function miniature(): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bundle-'));
  tempDirs.push(root);
  for (const dir of ['src', 'core', 'ingest', 'bin']) fs.mkdirSync(path.join(root, dir));
  fs.writeFileSync(path.join(root, 'package.json'), JSON.stringify({ name: 'tailhouse', type: 'module' }));
  fs.copyFileSync(path.join(ROOT, 'tsconfig.json'), path.join(root, 'tsconfig.json'));
  fs.copyFileSync(path.join(ROOT, 'bin/bundle.js'), path.join(root, 'bin/bundle.js'));
  fs.writeFileSync(path.join(root, 'core/answer.ts'), "export const answer: string = 'first';\n");
  fs.writeFileSync(path.join(root, 'src/cli.ts'), "import { answer } from '../core/answer.js';\nconsole.log(answer);\n");
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(root, 'node_modules'));
  return root;
}

const runBundle = (file: string) => execFileSync(process.execPath, [file], { encoding: 'utf8' }).trim();

describe('the CLI bundle', () => {
  it('is built once for the sources as they are, and again when one of them changes, the old one removed', async () => {
    const root = miniature();
    const first = await bundle(root);
    expect(path.relative(root, first)).toBe(path.join('dist', sourceStamp(root), 'cli.js'));
    expect(runBundle(first)).toBe('first');
    const built = fs.statSync(first).mtimeMs;
    expect(await bundle(root)).toBe(first);
    expect(fs.statSync(first).mtimeMs).toBe(built);

    // An edit that keeps the size: the modification time tells.
    fs.writeFileSync(path.join(root, 'core/answer.ts'), "export const answer: string = 'again';\n");
    fs.utimesSync(path.join(root, 'core/answer.ts'), new Date(), new Date(Date.now() + 5_000));
    const second = await bundle(root);
    expect(second).not.toBe(first);
    expect(runBundle(second)).toBe('again');
    expect(fs.existsSync(first)).toBe(false);
    expect(fs.readdirSync(path.join(root, 'dist'))).toEqual([path.basename(path.dirname(second))]);

    // A new file counts too.
    fs.writeFileSync(path.join(root, 'ingest/extra.ts'), 'export {};\n');
    expect(sourceStamp(root)).not.toBe(path.basename(path.dirname(second)));
  });

  it('processes starting at once share one bundle, each reading a whole file', async () => {
    const root = miniature();
    const files = await Promise.all(Array.from({ length: 4 }, () => bundle(root)));
    expect(new Set(files).size).toBe(1);
    expect(runBundle(files[0]!)).toBe('first');
    expect(fs.readdirSync(path.join(root, 'dist')).filter((name) => !name.startsWith('.'))).toHaveLength(1);
  });

  it('the CLI still runs, through tsx, where no bundle can be written', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bundle-'));
    tempDirs.push(root);
    for (const entry of ['bin', 'src', 'core', 'ingest', 'sql', 'web', 'package.json', 'tsconfig.json']) fs.cpSync(path.join(ROOT, entry), path.join(root, entry), { recursive: true });
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(root, 'node_modules'));
    // A file where the folder would go: no bundle can be written.
    fs.writeFileSync(path.join(root, 'dist'), '');
    const result = spawnSync(process.execPath, [path.join(root, 'bin/tailhouse.js'), '--help'], { encoding: 'utf8' });
    expect(result.status).toBe(0);
    expect(result.stdout).toContain('Usage: tailhouse');
    expect(result.stderr).toMatch(/^tailhouse: running the sources through tsx \(no bundle in .*dist: /);
  }, 60_000);
});
