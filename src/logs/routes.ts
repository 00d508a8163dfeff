import { createRoute } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { domainIdParams } from '../domains/schemas.js';
import { commonErrors, dataEnvelope, jsonBody, jsonContent, notFoundResponse, ok } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { accessListQuery, accessPageSchema, errorListQuery, errorPageSchema, rejectsListQuery, rejectsPageSchema, searchBody, searchPageSchema } from './schemas.js';
import * as logs from './service.js';
import { tailRoutes } from './tail/routes.js';
import type { TailHub } from './tail/service.js';

const base = { tags: ['Logs'], security: bearerSecurity };
const domainNotFound = { 404: notFoundResponse('Domain') };
const order = 'Newest first (ties: higher id first). Needs `logs: read`; a domain the caller does not see answers 404 like an unknown one.';

const routes = {
  access: createRoute({
    ...base,
    method: 'get',
    path: '/domains/{domainId}/access',
    summary: "List a domain's access log entries",
    description: `${order} \`statusCode\` is a code or a class (\`5xx\`); \`ipAddress\` an address or CIDR; \`url\` a case-sensitive substring, or with \`*\` a glob over the whole URL; \`method\` case-insensitive; dates include both ends.`,
    request: { params: domainIdParams, query: accessListQuery },
    responses: { 200: jsonContent(dataEnvelope(accessPageSchema), 'A page of access entries'), ...commonErrors, ...domainNotFound },
  }),
  error: createRoute({
    ...base,
    method: 'get',
    path: '/domains/{domainId}/error',
    summary: "List a domain's error log entries",
    description: `${order} Dates include both ends.`,
    request: { params: domainIdParams, query: errorListQuery },
    responses: { 200: jsonContent(dataEnvelope(errorPageSchema), 'A page of error entries'), ...commonErrors, ...domainNotFound },
  }),
  rejects: createRoute({
    ...base,
    method: 'get',
    path: '/domains/{domainId}/rejects',
    summary: "List a domain's rejected lines",
    description:
      'The lines of the domain the ingest kept instead of storing them (they do not parse, their time is out of range, they are too long), newest first, each with why: `cause` in a few fixed words, `reason` in full. Needs `logs: read`; a domain the caller does not see answers 404 like an unknown one.',
    request: { params: domainIdParams, query: rejectsListQuery },
    responses: { 200: jsonContent(dataEnvelope(rejectsPageSchema), 'A page of rejected lines'), ...commonErrors, ...domainNotFound },
  }),
  search: createRoute({
    ...base,
    method: 'post',
    path: '/domains/{domainId}/search',
    summary: "Search a domain's access and error entries",
    description: `Case-insensitive substring over the chosen fields, access and error entries mixed, each with \`type\`. ${order}`,
    request: { params: domainIdParams, ...jsonBody(searchBody) },
    responses: { 200: jsonContent(dataEnvelope(searchPageSchema), 'A page of matching entries'), ...commonErrors, ...domainNotFound },
  }),
};

/** Listing, search and live tail of a domain's logs, mounted at /api/logs. */
export function logsRoutes(services: Services, tail: TailHub) {
  const app = createRouter();
  app.route('/', tailRoutes(services, tail));
  app.use('/domains/:domainId/access', requireAuth(services));
  app.use('/domains/:domainId/error', requireAuth(services));
  app.use('/domains/:domainId/search', requireAuth(services));
  app.use('/domains/:domainId/rejects', requireAuth(services));

  app.openapi(routes.access, async (c) =>
    c.json(ok(await logs.listAccessLogs(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('query'))), 200),
  );
  app.openapi(routes.error, async (c) =>
    c.json(ok(await logs.listErrorLogs(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('query'))), 200),
  );
  app.openapi(routes.rejects, async (c) =>
    c.json(ok(await logs.listRejectedLines(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('query'))), 200),
  );
  app.openapi(routes.search, async (c) =>
    c.json(ok(await logs.searchLogs(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('json'))), 200),
  );
  return app;
}
