import { OpenAPIHono } from '@hono/zod-openapi';
import { bodyLimit } from 'hono/body-limit';
import { secureHeaders } from 'hono/secure-headers';
import { linkPages } from './auth/pages.js';
import { browserSessionRoutes } from './auth/browser-session.js';
import { authRoutes } from './auth/routes.js';
import type { AppEnv, Services } from './context.js';
import { docsRoutes } from './docs/routes.js';
import { alertsRoutes } from './alerts/routes.js';
import { silencesRoutes } from './alerts/silences/routes.js';
import { domainsRoutes, invitationsRoutes } from './domains/routes.js';
import { groupsRoutes } from './groups/routes.js';
import { downloadRoutes, exportRoutes } from './exports/routes.js';
import type { ExportLimits } from './exports/service.js';
import { healthRoutes } from './health/routes.js';
import { clientInfo } from './http/client-info.js';
import { handleError, payloadTooLarge } from './http/errors.js';
import { logStatsRoutes } from './stats/routes.js';
import { logsRoutes } from './logs/routes.js';
import { countRequests, metricsRoutes } from './metrics/routes.js';
import { queryRoutes } from './stats/query/routes.js';
import { createTailHub, type TailHub } from './logs/tail/service.js';
import { usersRoutes } from './users/routes.js';
import type { WebAssets } from './web/assets.js';
import { webRoutes } from './web/routes.js';

/** The path as logged: a download's file name is its bearer secret and stays out of the logs. */
const loggedPath = (path: string) => path.replace(/^\/api\/downloads\/[^/]+/, '/api/downloads/…');

export const MAX_BODY_BYTES = 1024 * 1024;

/**
 * What is set apart from the services: export and download limits (default EXPORT_LIMITS), the
 * process's live tails (default: a hub of its own; `serve` passes the one it closes at shutdown),
 * and the dashboard's files (built by `serve` at start).
 */
export interface AppOptions {
  exportLimits?: ExportLimits;
  tail?: TailHub;
  /** The dashboard's files (src/web/assets.ts); without them / stays a 404. */
  web?: WebAssets;
}

/** The whole HTTP API over already-open services; no I/O happens here. */
export function createApp(services: Services, options: AppOptions = {}) {
  const { log, config } = services;
  const app = new OpenAPIHono<AppEnv>();

  app.use('*', async (c, next) => {
    const started = performance.now();
    c.set('client', clientInfo(c, config.trustProxy));
    await next();
    log.info({ method: c.req.method, path: loggedPath(c.req.path), status: c.res.status, ms: Math.round((performance.now() - started) * 10) / 10, ip: c.var.client.ipAddress }, 'request');
  });
  if (services.metrics) app.use('*', countRequests(services.metrics));
  // Every answer gets the usual headers (nosniff, no-referrer, …) and, unless its handler set one
  // (the API reference, the link pages), a CSP that lets it load and run nothing, nor be framed.
  app.use('*', secureHeaders({ crossOriginResourcePolicy: false, contentSecurityPolicy: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] }, overwrite: false }));
  const limitBody = bodyLimit({ maxSize: MAX_BODY_BYTES, onError: payloadTooLarge });
  // GET and HEAD handlers never read a body; merely asking whether there is one makes the node
  // adapter build a full Request object, a tenth of the CPU of an authenticated GET (bench/auth).
  app.use('/api/*', (c, next) => (c.req.method === 'GET' || c.req.method === 'HEAD' ? next() : limitBody(c, next)));

  app.route('/', healthRoutes(services));
  // With METRICS_LISTEN they are served there instead (src/metrics/listener.ts); loadConfig
  // guarantees a token otherwise.
  if (services.metrics && !config.metricsListen && config.metricsToken) app.route('/', metricsRoutes(services.metrics, config.metricsToken));
  app.route('/api/auth/session', browserSessionRoutes(services));
  app.route('/api/auth', authRoutes(services));
  app.route('/api/users', usersRoutes(services));
  const tail = options.tail ?? createTailHub(services);
  app.route('/api/domains', domainsRoutes(services, tail));
  app.route('/api/invitations', invitationsRoutes(services));
  app.route('/api/groups', groupsRoutes(services, tail));
  app.route('/api/logs', exportRoutes(services));
  app.route('/api/downloads', downloadRoutes(services, options.exportLimits));
  app.route('/api/logs', alertsRoutes(services));
  app.route('/api/logs', silencesRoutes(services));
  app.route('/api/logs', logStatsRoutes(services));
  app.route('/api/logs', logsRoutes(services, tail));
  app.route('/api/logs', queryRoutes(services));
  app.route('/api/docs', docsRoutes());
  app.route('/', linkPages());
  if (options.web) app.route('/', webRoutes(options.web));

  app.openAPIRegistry.registerComponent('securitySchemes', 'bearerAuth', {
    type: 'http',
    scheme: 'bearer',
    description: 'A JWT access token from POST /api/auth/login, or a personal access token (thk_…)',
  });
  app.doc31('/api/openapi.json', {
    openapi: '3.1.0',
    info: { title: 'tailhouse', version: '0.1.0', description: 'Users, domains and nginx log analytics for hosting providers.' },
    servers: [{ url: config.baseUrl }],
  });

  app.notFound((c) => {
    c.set('unmatched', true);
    return c.json({ success: false, error: 'Not found' }, 404);
  });
  app.onError((err, c) => handleError(err, c, log));
  return app;
}

export type App = ReturnType<typeof createApp>;
