/**
 * The project's own reference (docs/reference/): nothing in the repository cites a document the
 * repository does not hold, and every citation of a reference page leads to that page and, when it
 * names one, to that heading.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const REFERENCE_DIR = path.join(ROOT, 'docs/reference');
const THIS_FILE = path.relative(ROOT, import.meta.filename);

/** The text of every tracked file that is text (a NUL byte marks the screenshots and the like). */
function trackedTexts(): { file: string; text: string }[] {
  const files = execFileSync('git', ['ls-files', '-z'], { cwd: ROOT, encoding: 'utf8' }).split('\0').filter(Boolean);
  return files
    // A tracked file deleted in the working tree (a rename not committed yet) has nothing to cite.
    .filter((file) => existsSync(path.join(ROOT, file)))
    .map((file) => ({ file, text: readFileSync(path.join(ROOT, file), 'utf8') }))
    .filter(({ text }) => !text.includes('\0'));
}

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function anchorOf(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
}

/** The anchors of a Markdown file's headings, outside fenced code (whose `#` lines are comments). */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  let fenced = false;
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const heading = fenced ? null : /^#{1,6}\s+(.*)$/.exec(line);
    if (heading) anchors.add(anchorOf(heading[1]!));
  }
  return anchors;
}

/** What is wrong with a link to `target` (a path, maybe with `#anchor`) resolved from `dir`, or null. */
function brokenLink(dir: string, target: string): string | null {
  const [file = '', anchor] = target.split('#');
  const resolved = path.resolve(dir, file);
  if (!existsSync(resolved)) return `${file} does not exist`;
  if (anchor !== undefined && !anchorsOf(resolved).has(anchor)) return `${file} has no heading #${anchor}`;
  return null;
}

describe('the project cites its own reference', () => {
  it('cites no document the repository does not hold', () => {
    const citing = trackedTexts()
      .filter(({ file }) => file !== THIS_FILE)
      .flatMap(({ file, text }) => text.split('\n').flatMap((line, i) => (/CONTRACT(\s*§|\.md)/.test(line) ? [`${file}:${i + 1}: ${line.trim()}`] : [])));
    expect(citing).toEqual([]);
  });

  it('points every citation of docs/reference at an existing page and heading', () => {
    const cited = trackedTexts().flatMap(({ file, text }) =>
      [...text.matchAll(/docs\/reference\/[\w./-]*\.md(?:#[\w-]+)?/g)].map((m) => ({ file, target: m[0] })),
    );
    expect(cited.length).toBeGreaterThan(30);
    const broken = cited.flatMap(({ file, target }) => {
      const problem = brokenLink(ROOT, target);
      return problem ? [`${file}: ${target}: ${problem}`] : [];
    });
    expect(broken).toEqual([]);
  });

  it('links its pages to each other and to the repository without a broken link, and lists each page in its index', () => {
    const pages = readdirSync(REFERENCE_DIR).filter((name) => name.endsWith('.md'));
    const broken = pages.flatMap((page) => {
      const text = readFileSync(path.join(REFERENCE_DIR, page), 'utf8');
      const targets = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((target) => !/^[a-z]+:/.test(target));
      return targets.flatMap((target) => {
        const problem = target.startsWith('#') ? brokenLink(REFERENCE_DIR, `${page}${target}`) : brokenLink(REFERENCE_DIR, target);
        return problem ? [`docs/reference/${page}: ${target}: ${problem}`] : [];
      });
    });
    expect(broken).toEqual([]);
    const index = readFileSync(path.join(REFERENCE_DIR, 'README.md'), 'utf8');
    expect(pages.filter((page) => page !== 'README.md' && !index.includes(`](${page})`))).toEqual([]);
  });
});

describe('the guide', () => {
  /** The README, the guides beside the reference (docs/*.md) and the tests' README. */
  const GUIDE = ['README.md', ...readdirSync(path.join(ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => `docs/${name}`), 'test/README.md'];

  it('links to files and headings that exist', () => {
    const broken = GUIDE.flatMap((file) => {
      const text = readFileSync(path.join(ROOT, file), 'utf8');
      const dir = path.dirname(path.join(ROOT, file));
      const targets = [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((target) => !/^[a-z]+:/.test(target));
      return targets.flatMap((target) => {
        const problem = target.startsWith('#') ? brokenLink(dir, `${path.basename(file)}${target}`) : brokenLink(dir, target);
        return problem ? [`${file}: ${target}: ${problem}`] : [];
      });
    });
    expect(GUIDE.length).toBeGreaterThan(5);
    expect(broken).toEqual([]);
  });

  it('names only files that exist (a path in backquotes, from the root or from the page)', () => {
    const pages = [...GUIDE, ...readdirSync(REFERENCE_DIR).filter((name) => name.endsWith('.md')).map((name) => `docs/reference/${name}`)];
    // A path of the repository in backquotes; what DATA_DIR holds (`ingest/checkpoints.json` in its list) is no file here.
    const named = /`((?:src|core|ingest|web|test|bench|scripts|sql|docs|deploy|bin|support|fixtures|project)\/[\w./-]*\.(?:ts|tsx|md|sql|sh|yaml|json|css))`/g;
    const missing = pages.flatMap((file) => {
      const dir = path.dirname(path.join(ROOT, file));
      return [...readFileSync(path.join(ROOT, file), 'utf8').matchAll(named)]
        .map((m) => m[1]!)
        .filter((name) => name !== 'ingest/checkpoints.json')
        .filter((name) => ![path.join(ROOT, name), path.join(dir, name)].some((candidate) => existsSync(candidate)))
        .map((name) => `${file}: ${name}`);
    });
    expect(pages.length).toBeGreaterThan(15);
    expect(missing).toEqual([]);
  });

  it('keeps the README within 300 lines, a guide read in ten minutes', () => {
    expect(readFileSync(path.join(ROOT, 'README.md'), 'utf8').split('\n').length).toBeLessThanOrEqual(301);
  });

  it("names every dependency of package.json in the README's table of dependencies", () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as Record<string, Record<string, string> | undefined>;
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const table = readme.slice(readme.indexOf('## Dependencies and why'));
    const named = (name: string) => table.includes(`\`${name}\``) || (name.startsWith('@types/') && table.includes('`@types/…`'));
    const missing = [...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.devDependencies ?? {})].filter((name) => !named(name));
    expect(missing).toEqual([]);
  });
});
