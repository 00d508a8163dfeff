import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { domainIdParams } from '../domains/schemas.js';
import { commonErrors, dataEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok, pagination, paginationSchema } from '../http/envelope.js';
import { pageQuery } from '../http/query.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { ALERTS_PER_DOMAIN, RULES_PER_USER } from './limits.js';
import {
  alertParams,
  alertSchema,
  createAlertBody,
  createRuleBody,
  firingAlertSchema,
  historyEntrySchema,
  ruleParams,
  ruleSchema,
  updateAlertBody,
  updateRuleBody,
} from './schemas.js';
import * as alerts from './service.js';

const base = { tags: ['Alerts'], security: bearerSecurity };
const domainNotFound = { 404: notFoundResponse('Domain') };
const alertNotFound = { 404: notFoundResponse('Domain or alert') };
const historyQuery = z.object(pageQuery(100));
const historyAnswer = jsonContent(dataEnvelope(z.object({ entries: z.array(historyEntrySchema), pagination: paginationSchema })), 'State changes, newest first (kept 90 days)');

const routes = {
  firing: createRoute({
    ...base, method: 'get', path: '/alerts/firing', summary: 'The alerts firing now on every domain the caller sees, domain alerts and rules (alerts:read): the fleet at a glance',
    responses: { 200: jsonContent(dataEnvelope(z.object({ alerts: z.array(firingAlertSchema) })), 'One entry per firing alert and domain, by domain and alert id'), ...commonErrors },
  }),
  history: createRoute({
    ...base, method: 'get', path: '/alerts/history', summary: 'The state changes of the alerts on every domain the caller sees (alerts:read)',
    request: { query: historyQuery },
    responses: { 200: historyAnswer, ...commonErrors },
  }),
  listAll: createRoute({
    ...base, method: 'get', path: '/alerts', summary: "Every alert the caller reads: the domains' alerts and the caller's rules (an administrator's: every rule), each with the domains it fires on (alerts:read)",
    responses: { 200: jsonContent(dataEnvelope(z.object({ alerts: z.array(ruleSchema) })), 'The alerts, by id'), ...commonErrors },
  }),
  createRule: createRoute({
    ...base, method: 'post', path: '/alerts', summary: 'Define a rule over many domains: every domain the caller sees, or a list (alerts:create)',
    request: jsonBody(createRuleBody),
    responses: {
      201: jsonContent(dataEnvelope(alertSchema), 'The new rule'),
      ...commonErrors,
      ...domainNotFound,
      409: errorResponse(`The caller already has ${RULES_PER_USER} rules, the most a user may have`),
    },
  }),
  getRule: createRoute({
    ...base, method: 'get', path: '/alerts/{alertId}', summary: 'One alert (a rule or a domain alert) with its state, value and silence on each domain it covers (alerts:read)',
    request: { params: ruleParams },
    responses: { 200: jsonContent(dataEnvelope(ruleSchema), 'The alert'), ...commonErrors, 404: notFoundResponse('Alert') },
  }),
  updateRule: createRoute({
    ...base, method: 'put', path: '/alerts/{alertId}', summary: "Change an alert or a rule's scope (alerts:update)",
    request: { params: ruleParams, ...jsonBody(updateRuleBody) },
    responses: { 200: jsonContent(dataEnvelope(alertSchema), 'The changed alert'), ...commonErrors, 404: notFoundResponse('Alert or domain') },
  }),
  deleteRule: createRoute({
    ...base, method: 'delete', path: '/alerts/{alertId}', summary: 'Delete an alert or a rule (alerts:delete)',
    request: { params: ruleParams },
    responses: { 200: jsonContent(messageEnvelope, 'Deleted'), ...commonErrors, 404: notFoundResponse('Alert') },
  }),
  list: createRoute({
    ...base, method: 'get', path: '/domains/{domainId}/alerts', summary: "List a domain's alerts (alerts:read)",
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ alerts: z.array(alertSchema) })), 'The alerts, by id'), ...commonErrors, ...domainNotFound },
  }),
  rulesOfDomain: createRoute({
    ...base, method: 'get', path: '/domains/{domainId}/alerts/rules', summary: 'The rules covering a domain that the caller reads, with their state there (alerts:read)',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ rules: z.array(ruleSchema) })), 'The rules, by id'), ...commonErrors, ...domainNotFound },
  }),
  domainHistory: createRoute({
    ...base, method: 'get', path: '/domains/{domainId}/alerts/history', summary: "The state changes of a domain's alerts and of the rules covering it (alerts:read)",
    request: { params: domainIdParams, query: historyQuery },
    responses: { 200: historyAnswer, ...commonErrors, ...domainNotFound },
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
  for (const path of ['/domains/:domainId/alerts', '/domains/:domainId/alerts/*', '/alerts', '/alerts/*']) app.use(path, requireAuth(services));

  app.openapi(routes.firing, async (c) => c.json(ok({ alerts: await alerts.listFiringAlerts(services, c.var.principal) }), 200));
  app.openapi(routes.history, async (c) => {
    const query = c.req.valid('query');
    const { entries, total } = await alerts.alertHistory(services, c.var.principal, null, query);
    return c.json(ok({ entries, pagination: pagination(query.page, query.limit, total) }), 200);
  });
  app.openapi(routes.listAll, async (c) => c.json(ok({ alerts: await alerts.listAllAlerts(services, c.var.principal) }), 200));
  app.openapi(routes.createRule, async (c) => c.json(ok(await alerts.createRule(services, c.var.principal, c.req.valid('json'), c.var.client)), 201));
  app.openapi(routes.getRule, async (c) => c.json(ok(await alerts.getAlert(services, c.var.principal, c.req.valid('param').alertId)), 200));
  app.openapi(routes.updateRule, async (c) =>
    c.json(ok(await alerts.updateRule(services, c.var.principal, c.req.valid('param').alertId, c.req.valid('json'), c.var.client)), 200),
  );
  app.openapi(routes.deleteRule, async (c) => {
    await alerts.deleteRule(services, c.var.principal, c.req.valid('param').alertId, c.var.client);
    return c.json(message('Alert deleted'), 200);
  });

  app.openapi(routes.list, async (c) => c.json(ok({ alerts: await alerts.listAlerts(services, c.var.principal, c.req.valid('param').domainId) }), 200));
  app.openapi(routes.rulesOfDomain, async (c) => c.json(ok({ rules: await alerts.rulesOfDomain(services, c.var.principal, c.req.valid('param').domainId) }), 200));
  app.openapi(routes.domainHistory, async (c) => {
    const query = c.req.valid('query');
    const { entries, total } = await alerts.alertHistory(services, c.var.principal, c.req.valid('param').domainId, query);
    return c.json(ok({ entries, pagination: pagination(query.page, query.limit, total) }), 200);
  });
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
