// The CLI's code as one bundle (esbuild; the packages stay imports from node_modules). Loading its
// two hundred TypeScript modules through tsx's loader cost 0.7–1 s at every start of a command
// (`serve`, `import`, `domains add`, …); the bundle loads in about 0.1 s. It is built when the
// sources change (the first run after a clone, a pull or an edit: about a second), into
// dist/<stamp of the sources>/, so a bundle never outlives its sources. Where it cannot be built
// or written (a read-only checkout), the sources run through tsx as before.
//
//   node bin/bundle.js      builds it now (the Dockerfile does, so the image ships it)
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const DIST = path.join(ROOT, 'dist');
// What the bundle is made of: the folders of the sources, and the files that change how they build.
const SOURCES = ['src', 'core', 'ingest'];
const CONFIG = ['package.json', 'tsconfig.json', 'bin/bundle.js'];

function filesUnder(dir) {
  const found = [];
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) found.push(...filesUnder(file));
    else if (entry.isFile()) found.push(file);
  }
  return found;
}

/** A name for the state of the sources: every file's path, size and modification time, hashed. */
export function sourceStamp(root = ROOT) {
  const files = [...SOURCES.flatMap((dir) => filesUnder(path.join(root, dir))), ...CONFIG.map((file) => path.join(root, file))].sort();
  const hash = createHash('sha256');
  for (const file of files) {
    const { size, mtimeMs } = fs.statSync(file);
    hash.update(`${path.relative(root, file)}\0${size}\0${mtimeMs}\n`);
  }
  return hash.digest('hex').slice(0, 16);
}

/**
 * The bundle of the sources as they are now, built if there is none: its path. Built in a folder
 * of its own and renamed into place, so that processes starting at once never read half a file
 * (the first rename wins; the others' copies are removed).
 */
export async function bundle(root = ROOT) {
  const dist = path.join(root, 'dist');
  const dir = path.join(dist, sourceStamp(root));
  const file = path.join(dir, 'cli.js');
  if (fs.existsSync(file)) return file;
  fs.mkdirSync(dist, { recursive: true });
  const building = fs.mkdtempSync(path.join(dist, '.building-'));
  try {
    const { build } = await import('esbuild');
    await build({
      entryPoints: [path.join(root, 'src/cli.ts')],
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node20',
      packages: 'external',
      outfile: path.join(building, 'cli.js'),
      sourcemap: 'linked',
      logLevel: 'silent',
    });
    try {
      fs.renameSync(building, dir);
    } catch (error) {
      if (!fs.existsSync(file)) throw error;
    }
  } finally {
    fs.rmSync(building, { recursive: true, force: true });
  }
  // Bundles of earlier sources: best effort, another process may be loading one right now.
  for (const name of fs.readdirSync(dist)) {
    if (name !== path.basename(dir) && !name.startsWith('.')) fs.rmSync(path.join(dist, name), { recursive: true, force: true });
  }
  return file;
}

/** Runs the CLI: from the bundle, or through tsx when no bundle can be had. */
export async function runCli() {
  let file;
  try {
    file = await bundle();
  } catch (error) {
    process.stderr.write(`tailhouse: running the sources through tsx (no bundle in ${DIST}: ${error instanceof Error ? error.message : String(error)})\n`);
    const { register } = await import('tsx/esm/api');
    register();
    await import(pathToFileURL(path.join(ROOT, 'src/cli.ts')).href);
    return;
  }
  // Stack traces name the TypeScript files and lines (dist/…/cli.js.map).
  process.setSourceMapsEnabled(true);
  await import(pathToFileURL(file).href);
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.stdout.write(`${path.relative(ROOT, await bundle())}\n`);
}
