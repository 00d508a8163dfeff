/**
 * Serves the dashboard (assets.ts): its files under /assets/, and its page for every other GET
 * outside /api, so that any dashboard URL can be loaded, bookmarked and reloaded. The page may run
 * and load only this origin's script and style sheet and call only this origin.
 */
import { Hono } from 'hono';
import type { AppEnv } from '../context.js';
import type { WebAssets } from './assets.js';

const PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "img-src 'self' data:",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

export function webRoutes(assets: WebAssets) {
  const app = new Hono<AppEnv>();
  app.get('/assets/:name', (c) => {
    const file = assets.files.get(c.req.param('name'));
    if (!file) return c.json({ success: false, error: 'Not found' }, 404);
    return c.body(file.body as Uint8Array<ArrayBuffer>, 200, { 'Content-Type': file.type, 'Cache-Control': 'public, max-age=31536000, immutable' });
  });
  app.get('*', async (c, next) => {
    if (c.req.path === '/api' || c.req.path.startsWith('/api/')) return next();
    return c.html(assets.html, 200, { 'Content-Security-Policy': PAGE_CSP, 'Cache-Control': 'no-cache' });
  });
  return app;
}
