/**
 * The reference pages generated from the code (scripts/reference.ts) are committed as the code
 * gives them now: a change to the statistics registry, the config schema, the command line or the
 * routes that leaves its page behind fails here.
 */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { generate } from '../../scripts/reference.js';

const ROOT = path.resolve(import.meta.dirname, '..', '..');

it('commits every generated reference page as the code gives it', async () => {
  for (const [file, text] of Object.entries(await generate())) {
    const committed = existsSync(path.join(ROOT, file)) ? readFileSync(path.join(ROOT, file), 'utf8') : null;
    // Soft: every stale page is reported, not only the first.
    expect.soft(committed, `${file} is not what the code gives: run npm run docs:reference`).toBe(text);
  }
});
