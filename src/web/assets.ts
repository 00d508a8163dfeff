/**
 * The dashboard's files (web/): bundled by esbuild when the server starts, in memory, into one
 * script and one style sheet named by their content's hash, and the page that loads them. No
 * build step for the user, and nothing fetched from elsewhere (Preact is bundled in).
 */
import path from 'node:path';
import { build } from 'esbuild';
import { ROOT } from '../../core/paths.js';

export const WEB_DIR = path.join(ROOT, 'web');

export interface WebFile {
  body: Uint8Array;
  type: string;
}

export interface WebAssets {
  /** The page every dashboard URL answers with. */
  html: string;
  /** By name under /assets/: names change with the content, so they may be cached for good. */
  files: Map<string, WebFile>;
}

const TYPES: Record<string, string> = { '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8' };

export async function buildWebAssets(): Promise<WebAssets> {
  const result = await build({
    entryPoints: [path.join(WEB_DIR, 'src/main.tsx')],
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2020',
    jsx: 'automatic',
    jsxImportSource: 'preact',
    outdir: '/assets',
    entryNames: 'app-[hash]',
    write: false,
    legalComments: 'none',
    logLevel: 'silent',
  });
  const files = new Map<string, WebFile>();
  for (const file of result.outputFiles) files.set(path.basename(file.path), { body: file.contents, type: TYPES[path.extname(file.path)] ?? 'application/octet-stream' });
  const named = (ext: string) => [...files.keys()].find((name) => name.endsWith(ext))!;
  const html = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>tailhouse</title>
<link rel="stylesheet" href="/assets/${named('.css')}">
<script type="module" src="/assets/${named('.js')}"></script>
</head>
<body>
<div id="app"></div>
<noscript>The tailhouse dashboard needs JavaScript; the API is at /api/docs.</noscript>
</body>
</html>
`;
  return { html, files };
}
