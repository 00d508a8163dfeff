import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../../auth/middleware.js';
import type { Services } from '../../context.js';
import { commonErrors, dataEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok } from '../../http/envelope.js';
import { bearerSecurity, createRouter } from '../../http/router.js';
import { SILENCES_PER_USER } from '../limits.js';
import { createSilenceBody, silenceListQuery, silenceParams, silenceSchema } from './schemas.js';
import * as silences from './service.js';

const base = { tags: ['Alerts'], security: bearerSecurity };

const routes = {
  create: createRoute({
    ...base, method: 'post', path: '/silences', summary: 'Hold back the notifications of alerts on some or all domains for a while, or weekly (alerts:update)',
    request: jsonBody(createSilenceBody),
    responses: {
      201: jsonContent(dataEnvelope(silenceSchema), 'The new silence'),
      ...commonErrors,
      404: notFoundResponse('Domain'),
      409: errorResponse(`The caller already has ${SILENCES_PER_USER} silences in force or to come`),
    },
  }),
  list: createRoute({
    ...base, method: 'get', path: '/silences', summary: "The caller's silences (an administrator's: everyone's), in force and to come or expired (alerts:read)",
    request: { query: silenceListQuery },
    responses: { 200: jsonContent(dataEnvelope(z.object({ silences: z.array(silenceSchema) })), 'Newest first'), ...commonErrors },
  }),
  end: createRoute({
    ...base, method: 'delete', path: '/silences/{silenceId}', summary: 'End a silence now (alerts:update)',
    request: { params: silenceParams },
    responses: { 200: jsonContent(messageEnvelope, 'Ended'), ...commonErrors, 404: notFoundResponse('Silence'), 409: errorResponse('The silence has ended already') },
  }),
};

/** Mounted at /api/logs. */
export function silencesRoutes(services: Services) {
  const app = createRouter();
  for (const path of ['/silences', '/silences/*']) app.use(path, requireAuth(services));
  app.openapi(routes.create, async (c) => c.json(ok(await silences.createSilence(services, c.var.principal, c.req.valid('json'), c.var.client)), 201));
  app.openapi(routes.list, async (c) => c.json(ok({ silences: await silences.listSilences(services, c.var.principal, c.req.valid('query').state) }), 200));
  app.openapi(routes.end, async (c) => {
    await silences.endSilence(services, c.var.principal, c.req.valid('param').silenceId, c.var.client);
    return c.json(message('Silence ended'), 200);
  });
  return app;
}
