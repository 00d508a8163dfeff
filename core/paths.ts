import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The checkout's root: the nearest folder above this module with tailhouse's package.json. Found,
 * not counted in `..`s, because this module runs from its source file and from the CLI's bundle
 * (dist/, bin/bundle.js), which sit at different depths.
 */
function findRoot(from: string): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const manifest = path.join(dir, 'package.json');
    if (fs.existsSync(manifest) && (JSON.parse(fs.readFileSync(manifest, 'utf8')) as { name?: string }).name === 'tailhouse') return dir;
    if (path.dirname(dir) === dir) throw new Error(`no tailhouse package.json above ${from}`);
  }
}

export const ROOT = findRoot(path.dirname(fileURLToPath(import.meta.url)));
