import fs from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Hono } from 'hono';

// Swagger UI's assets come from the swagger-ui-dist package, served by tailhouse itself, so the
// reference works on a machine with no internet access.
const assetDir = path.dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'));
const ASSETS: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
  'favicon-32x32.png': 'image/png',
};

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>tailhouse API reference</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="stylesheet" href="/api/docs/assets/swagger-ui.css">
  <link rel="icon" href="/api/docs/assets/favicon-32x32.png">
</head>
<body>
  <div id="reference"></div>
  <script src="/api/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/api/docs/init.js"></script>
</body>
</html>`;

// persistAuthorization off: a bearer token typed into "Authorize" stays in the page's memory and
// is gone with the tab, instead of sitting in localStorage for any script of this origin to read.
// validatorUrl null: no badge image fetched from a public validator, which would be sent the
// address of this document (and which the CSP below would block anyway).
const INIT = `window.ui = SwaggerUIBundle({ url: '/api/openapi.json', dom_id: '#reference', deepLinking: true, persistAuthorization: false, validatorUrl: null });`;

/**
 * Scripts and styles from this origin only (no inline script at all), images also as data: URIs
 * (Swagger UI's icons), requests ("Try it out") to this origin, no framing.
 */
export const DOCS_CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** The interactive API reference at /api/docs. */
export function docsRoutes() {
  const app = new Hono();
  const cache = new Map<string, Uint8Array>();
  app.get('/', (c) => c.html(PAGE, 200, { 'Content-Security-Policy': DOCS_CONTENT_SECURITY_POLICY }));
  app.get('/init.js', (c) => c.body(INIT, 200, { 'Content-Type': 'text/javascript; charset=utf-8' }));
  app.get('/assets/:file', async (c) => {
    const file = c.req.param('file');
    const type = ASSETS[file];
    if (!type) return c.json({ success: false, error: 'Not found' }, 404);
    let bytes = cache.get(file);
    if (!bytes) {
      bytes = new Uint8Array(await fs.readFile(path.join(assetDir, file)));
      cache.set(file, bytes);
    }
    return c.body(bytes as Uint8Array<ArrayBuffer>, 200, { 'Content-Type': type, 'Cache-Control': 'public, max-age=86400' });
  });
  return app;
}
