import { createHash, timingSafeEqual } from 'node:crypto';
import { Hono } from 'hono';
import { createMiddleware } from 'hono/factory';
import type { AppEnv } from '../context.js';
import { unauthorized } from '../http/errors.js';
import type { Metrics } from './registry.js';

const digest = (text: string) => createHash('sha256').update(text).digest();

/** Whether an Authorization header carries `token` as its bearer, compared in constant time. */
function bearerMatches(header: string | undefined, token: string): boolean {
  const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
  // Digests have one length whatever was sent, so the comparison's time says nothing about the token.
  return match !== null && timingSafeEqual(digest(match[1]!), digest(token));
}

/**
 * GET /metrics in Prometheus's text format: behind `token` as a bearer (401 in the API's envelope
 * otherwise), or open when `token` is null (METRICS_LISTEN, an address of its own).
 */
export function metricsRoutes(metrics: Metrics, token: string | null) {
  const app = new Hono();
  app.get('/metrics', async (c) => {
    if (token !== null && !bearerMatches(c.req.header('authorization'), token)) throw unauthorized();
    const { text, contentType } = await metrics.scrape();
    return c.body(text, 200, { 'Content-Type': contentType, 'Cache-Control': 'no-store' });
  });
  return app;
}

/**
 * The methods counted under their own name. Node's server passes on every method its parser knows
 * (PROPFIND, M-SEARCH, PURGE, TRACE, … about 30), which clients and scanners send at will; each
 * would be a series of its own. CONNECT never reaches the app (Node's server handles it apart).
 */
const COUNTED_METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH']);

/** A request's `method` label: its method when it is one of COUNTED_METHODS, else `other`. */
const methodLabel = (method: string) => (COUNTED_METHODS.has(method) ? method : 'other');

/**
 * Observes every request by method (methodLabel), route pattern (`/api/domains/:id`, never the path
 * itself: one series per route, not per URL) and status. A path no route matched is counted as
 * `unmatched`.
 */
export const countRequests = (metrics: Metrics) =>
  createMiddleware<AppEnv>(async (c, next) => {
    const started = performance.now();
    await next();
    const route = c.get('unmatched') ? 'unmatched' : c.req.routePath;
    metrics.requestServed(methodLabel(c.req.method), route, c.res.status, (performance.now() - started) / 1000);
  });
