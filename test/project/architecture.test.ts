/**
 * docs/architecture.md against the code, so that the page cannot drift unnoticed: its layout names
 * every folder there is and none that is gone, imports point the way it says, and no module imports
 * itself back through others. Imports are read from the sources' text (static, re-exports, side
 * effects, dynamic `import()`), type-only ones included: a layer that needs another's types
 * depends on it too.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const PAGE = 'docs/architecture.md';
/** The folders whose every subfolder the layout names. */
const CODE_ROOTS = ['src', 'core', 'ingest', 'web'];

/** The layout: the first fenced block after the page's "## Layout", as (path, is a folder) entries. */
function layoutEntries(): { name: string; folder: boolean }[] {
  const text = readFileSync(path.join(ROOT, PAGE), 'utf8');
  const block = /^## Layout\n[\s\S]*?^```\n([\s\S]*?)^```$/m.exec(text);
  if (!block) throw new Error(`${PAGE} has no fenced block under "## Layout"`);
  const parents: string[] = [];
  const entries: { name: string; folder: boolean }[] = [];
  for (const line of block[1]!.split('\n')) {
    // An entry: a name at 0, 2, 4 or 6 spaces, then two spaces or the line's end. Descriptions
    // continue on lines indented further, which this leaves alone.
    const match = /^((?: {2}){0,3})([.\w-]+(?:\/[.\w-]+)*\/?)(?: {2}|$)/.exec(line);
    if (!match) continue;
    const depth = match[1]!.length / 2;
    if (depth > parents.length) throw new Error(`${PAGE}: "${line.trim()}" is indented under no folder`);
    parents.length = depth;
    const name = [...parents, match[2]!].join('');
    const folder = name.endsWith('/');
    entries.push({ name: folder ? name.slice(0, -1) : name, folder });
    if (folder) parents.push(match[2]!);
    else parents.push('(a file)/');
  }
  return entries;
}

/** Every folder under `dir` (relative to the root), at any depth. */
function foldersUnder(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .flatMap((entry) => [`${dir}/${entry.name}`, ...foldersUnder(`${dir}/${entry.name}`)]);
}

interface Import {
  from: string;
  to: string;
}

/** The relative imports of every .ts and .tsx module of the code roots, resolved to files. */
function imports(): { modules: string[]; edges: Import[] } {
  const modules = CODE_ROOTS.flatMap((root) => filesUnder(root)).filter((file) => /\.tsx?$/.test(file) && !file.endsWith('.d.ts'));
  const edges: Import[] = [];
  for (const from of modules) {
    const text = readFileSync(path.join(ROOT, from), 'utf8');
    const specifiers = [
      // import … from '…', import type … from '…', import '…', export … from '…'
      ...[...text.matchAll(/^[ \t]*(?:import|export)\s+(?:['"]([^'"]+)['"]|[^;'"]*?\bfrom\s*['"]([^'"]+)['"])/gm)].map((m) => (m[1] ?? m[2])!),
      // import('…'), but not a type's `typeof import('…')`
      ...[...text.matchAll(/(?<!typeof\s*)\bimport\(\s*['"]([^'"]+)['"]\s*\)/g)].map((m) => m[1]!),
    ];
    for (const specifier of specifiers.filter((s) => s.startsWith('.'))) {
      const to = resolveModule(from, specifier);
      if (to) edges.push({ from, to });
    }
  }
  return { modules, edges };
}

function filesUnder(dir: string): string[] {
  return readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? filesUnder(`${dir}/${entry.name}`) : [`${dir}/${entry.name}`],
  );
}

/** The module a relative specifier names (`./x.js` is `./x.ts` or `./x.tsx`); null for a non-code file (a style sheet). */
function resolveModule(from: string, specifier: string): string | null {
  const target = path.join(path.dirname(from), specifier);
  for (const candidate of [target.replace(/\.js$/, '.ts'), target.replace(/\.js$/, '.tsx'), `${target}.ts`, `${target}.tsx`]) {
    if (/\.tsx?$/.test(candidate) && existsSync(path.join(ROOT, candidate)) && statSync(path.join(ROOT, candidate)).isFile()) return candidate;
  }
  if (existsSync(path.join(ROOT, target)) && !/\.[jt]sx?$/.test(target)) return null;
  throw new Error(`${from}: cannot resolve ${specifier}`);
}

const inside = (file: string, dir: string) => file.startsWith(`${dir}/`);
const described = (edges: Import[]) => edges.map((edge) => `${edge.from} imports ${edge.to}`);

/** Folders of test/ that are no mirror of the code: shared helpers, recorded inputs, the repository's own tests. */
const TEST_OWN = ['test/support', 'test/fixtures', 'test/project'];

describe('test/ mirrors the code (test/README.md)', () => {
  const testFiles = filesUnder('test').filter((file) => file.endsWith('.test.ts'));

  it('holds every test file below a folder that names a folder or a module of the code, or in test/project/', () => {
    expect(testFiles.length).toBeGreaterThan(90);
    const mirrors = (folder: string) => {
      const code = folder.slice('test/'.length);
      return [code, `${code}.ts`, `${code}.tsx`].some((candidate) => existsSync(path.join(ROOT, candidate)));
    };
    const astray = testFiles.filter((file) => {
      const folder = path.dirname(file);
      if (TEST_OWN.some((own) => folder === own || inside(folder, own))) return false;
      return folder === 'test' || !mirrors(folder);
    });
    expect(astray).toEqual([]);
  });

  it('keeps every test file under 1,000 lines (a larger subject is a folder of files)', () => {
    const long = testFiles.filter((file) => readFileSync(path.join(ROOT, file), 'utf8').split('\n').length > 1_000);
    expect(long).toEqual([]);
  });
});

describe('docs/architecture.md', () => {
  const { modules, edges } = imports();

  it('reads imports from the sources (a check of the reader itself)', () => {
    expect(modules.length).toBeGreaterThan(150);
    expect(edges).toContainEqual({ from: 'src/server.ts', to: 'ingest/worker.ts' });
    // A dynamic import, and a type-only one.
    expect(edges).toContainEqual({ from: 'src/cli/commands/process.ts', to: 'src/server.ts' });
    expect(edges).toContainEqual({ from: 'src/context.ts', to: 'core/config.ts' });
  });

  it('names in its layout every folder of src/, core/, ingest/ and web/, every top-level folder, and nothing that is not there', () => {
    const entries = layoutEntries();
    const listedFolders = entries.filter((entry) => entry.folder).map((entry) => entry.name);
    const listedInCode = listedFolders.filter((name) => CODE_ROOTS.some((root) => name === root || inside(name, root)));
    const codeFolders = CODE_ROOTS.flatMap((root) => [root, ...foldersUnder(root)]);
    expect(listedInCode.sort()).toEqual(codeFolders.sort());

    const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean);
    const topFolders = [...new Set(tracked.filter((file) => file.includes('/')).map((file) => file.split('/')[0]!))];
    expect(listedFolders.filter((name) => !name.includes('/')).sort()).toEqual(topFolders.sort());

    const missing = entries.filter((entry) => !existsSync(path.join(ROOT, entry.name))).map((entry) => entry.name);
    expect(missing).toEqual([]);
  });

  it('core/ imports nothing of src/, ingest/ or web/', () => {
    const wrong = edges.filter((edge) => inside(edge.from, 'core') && !inside(edge.to, 'core'));
    expect(described(wrong)).toEqual([]);
  });

  it('ingest/ imports nothing of src/ or web/', () => {
    const wrong = edges.filter((edge) => inside(edge.from, 'ingest') && !inside(edge.to, 'ingest') && !inside(edge.to, 'core'));
    expect(described(wrong)).toEqual([]);
  });

  it('src/ imports ingest/ only from src/server.ts, src/cli/ and src/domains/', () => {
    const wrong = edges.filter(
      (edge) => inside(edge.to, 'ingest') && inside(edge.from, 'src') && edge.from !== 'src/server.ts' && !inside(edge.from, 'src/cli') && !inside(edge.from, 'src/domains'),
    );
    expect(described(wrong)).toEqual([]);
  });

  it("web/ imports nothing outside web/ but the types of the API's schemas (import type, erased when bundled) and core/durations.ts (constants)", () => {
    const schemaTypes = (edge: Import) =>
      edge.to === 'core/durations.ts' ||
      /^src\/[\w-]+\/schemas\.ts$/.test(edge.to) &&
      new RegExp(`import type [^;]*from '[./]*${edge.to.replace(/\.ts$/, '')}\.js'`).test(readFileSync(path.join(ROOT, edge.from), 'utf8'));
    const wrong = edges.filter((edge) => inside(edge.from, 'web') && !inside(edge.to, 'web') && !schemaTypes(edge));
    expect(described(wrong)).toEqual([]);
  });

  it('keeps the command line outside the API: src/cli/ is imported by src/cli.ts and src/control/ only, and imports no src/control/', () => {
    const wrong = edges.filter(
      (edge) =>
        (inside(edge.to, 'src/cli') && !inside(edge.from, 'src/cli') && edge.from !== 'src/cli.ts' && !inside(edge.from, 'src/control')) ||
        (inside(edge.from, 'src/cli') && inside(edge.to, 'src/control')),
    );
    expect(described(wrong)).toEqual([]);
  });

  it('has no import cycle among modules', () => {
    const next = new Map<string, string[]>(modules.map((module) => [module, []]));
    for (const edge of edges) next.get(edge.from)!.push(edge.to);
    // Depth-first, in a fixed order; a module met again while still on the path closes a cycle.
    const state = new Map<string, 'open' | 'done'>();
    const cycles: string[] = [];
    const visit = (trail: string[]) => {
      const module = trail.at(-1)!;
      state.set(module, 'open');
      for (const to of next.get(module)!) {
        if (state.get(to) === 'open') cycles.push([...trail.slice(trail.indexOf(to)), to].join(' → '));
        else if (!state.has(to)) visit([...trail, to]);
      }
      state.set(module, 'done');
    };
    for (const module of [...modules].sort()) if (!state.has(module)) visit([module]);
    expect(cycles).toEqual([]);
  });
});
