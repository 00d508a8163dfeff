import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { domainIdParams } from '../domains/schemas.js';
import { commonErrors, dataEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { alertParams, alertSchema, createAlertBody, updateAlertBody } from './schemas.js';
import * as alerts from './service.js';
import { ALERTS_PER_DOMAIN } from './limits.js';

const base = { tags: ['Alerts'], security: bearerSecurity };
const domainNotFound = { 404: notFoundResponse('Domain') };
const alertNotFound = { 404: notFoundResponse('Domain or alert') };

const routes = {
  firing: createRoute({
    ...base, method: 'get', path: '/alerts/firing', summary: 'The alerts firing now on every domain the caller sees (alerts:read): the fleet at a glance',
    responses: { 200: jsonContent(dataEnvelope(z.object({ alerts: z.array(alertSchema.extend({ domainId: z.number().int() })) })), 'Enabled alerts in state firing, by domain and id'), ...commonErrors },
  }),
  list: createRoute({
    ...base, method: 'get', path: '/domains/{domainId}/alerts', summary: "List a domain's alerts (alerts:read)",
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ alerts: z.array(alertSchema) })), 'The alerts, by id'), ...commonErrors, ...domainNotFound },
  }),
  create: createRoute({
    ...base, method: 'post', path: '/domains/{domainId}/alerts', summary: 'Define an alert (alerts:create)',
    request: { params: domainIdParams, ...jsonBody(createAlertBody) },
    responses: {
      201: jsonContent(dataEnvelope(alertSchema), 'The new alert'),
      ...commonErrors,
      ...domainNotFound,
      409: errorResponse(`The domain already has ${ALERTS_PER_DOMAIN} alerts, the most a domain may have`),
    },
  }),
  update: createRoute({
    ...base, method: 'put', path: '/domains/{domainId}/alerts/{alertId}', summary: 'Change an alert, or enable or disable it (alerts:update)',
    request: { params: alertParams, ...jsonBody(updateAlertBody) },
    responses: { 200: jsonContent(dataEnvelope(alertSchema), 'The changed alert'), ...commonErrors, ...alertNotFound },
  }),
  delete: createRoute({
    ...base, method: 'delete', path: '/domains/{domainId}/alerts/{alertId}', summary: 'Delete an alert (alerts:delete)',
    request: { params: alertParams },
    responses: { 200: jsonContent(messageEnvelope, 'Deleted'), ...commonErrors, ...alertNotFound },
  }),
};

/** Mounted at /api/logs (the specification's paths). */
export function alertsRoutes(services: Services) {
  const app = createRouter();
  app.use('/domains/:domainId/alerts', requireAuth(services));
  app.use('/domains/:domainId/alerts/*', requireAuth(services));
  app.use('/alerts/firing', requireAuth(services));

  app.openapi(routes.firing, async (c) => c.json(ok({ alerts: await alerts.listFiringAlerts(services, c.var.principal) }), 200));

  app.openapi(routes.list, async (c) => c.json(ok({ alerts: await alerts.listAlerts(services, c.var.principal, c.req.valid('param').domainId) }), 200));
  app.openapi(routes.create, async (c) =>
    c.json(ok(await alerts.createAlert(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('json'), c.var.client)), 201),
  );
  app.openapi(routes.update, async (c) => {
    const { domainId, alertId } = c.req.valid('param');
    return c.json(ok(await alerts.updateAlert(services, c.var.principal, domainId, alertId, c.req.valid('json'), c.var.client)), 200);
  });
  app.openapi(routes.delete, async (c) => {
    const { domainId, alertId } = c.req.valid('param');
    await alerts.deleteAlert(services, c.var.principal, domainId, alertId, c.var.client);
    return c.json(message('Alert deleted'), 200);
  });
  return app;
}
