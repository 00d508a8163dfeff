import { createRoute } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { domainIdParams } from '../domains/schemas.js';
import { commonErrors, dataEnvelope, errorResponse, jsonBody, jsonContent, notFoundResponse, ok } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { downloadParams, exportBody, exportResultSchema } from './schemas.js';
import { createExport, EXPORT_LIMITS, openDownload, type ExportLimits } from './service.js';

const routes = {
  create: createRoute({
    tags: ['Logs'],
    security: bearerSecurity,
    method: 'post',
    path: '/domains/{domainId}/export',
    summary: 'Export log entries to a downloadable CSV or NDJSON file',
    description:
      'Creates a download link (valid EXPORT_TTL_S seconds, no bearer needed: the file name holds a random token). The rows are ' +
      'queried when the link is fetched, newest first, with the range and filters fixed now.',
    request: { params: domainIdParams, ...jsonBody(exportBody) },
    responses: {
      201: jsonContent(dataEnvelope(exportResultSchema), 'The download link and when it expires'),
      ...commonErrors,
      404: notFoundResponse('Domain'),
      429: errorResponse('Too many exports this hour; see Retry-After'),
    },
  }),
  download: createRoute({
    tags: ['Logs'],
    method: 'get',
    path: '/{file}',
    summary: 'Download an export (the downloadUrl of an export; no bearer)',
    request: { params: downloadParams },
    responses: {
      200: {
        description: 'The file, streamed: CSV (RFC 4180, header row) or NDJSON (one entry a line)',
        content: { 'text/csv': { schema: { type: 'string' } }, 'application/x-ndjson': { schema: { type: 'string' } } },
      },
      404: errorResponse('Download not found'),
      410: errorResponse('Download link expired'),
      429: errorResponse('Too many downloads in progress, in this process or of the same user\'s exports; see Retry-After'),
    },
  }),
};

/** `POST /domains/:domainId/export`, mounted under /api/logs; authenticated on its own route only. */
export function exportRoutes(services: Services) {
  const app = createRouter();
  app.openapi({ ...routes.create, middleware: [requireAuth(services)] }, async (c) => {
    const result = await createExport(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('json'), c.var.client);
    return c.json(ok(result), 201);
  });
  return app;
}

/** `GET /:file`, mounted under /api/downloads: the link is the credential. `limits`: tests may narrow the slots and the reader's pace. */
export function downloadRoutes(services: Services, limits: ExportLimits = EXPORT_LIMITS) {
  const app = createRouter();
  app.openapi(routes.download, async (c) => {
    // Hono answers HEAD with the GET handler and drops the body unread: run the checks only.
    const headOnly = c.req.method === 'HEAD';
    const download = await openDownload(services, c.req.valid('param').file, { headOnly, limits });
    const headers = {
      'Content-Type': download.contentType,
      'Content-Disposition': `attachment; filename="${download.filename}"`,
      'Cache-Control': 'no-store',
      'X-Content-Type-Options': 'nosniff',
    };
    return new Response(download.stream, { status: 200, headers });
  });
  return app;
}
