import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { commonErrors, conflictResponse, dataEnvelope, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok, pagination, paginationSchema } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { bulkCreateDomainsBody, bulkDomainsResultSchema, createDomainBody, domainIdParams, domainSchema, ingestHealthSchema, listDomainsQuery, listedDomainSchema, updateDomainBody } from './schemas.js';
import * as domains from './service.js';

const base = { tags: ['Domains'], security: bearerSecurity };
const domainNotFound = { 404: notFoundResponse('Domain') };

const routes = {
  list: createRoute({
    ...base, method: 'get', path: '/', summary: 'List the domains visible to the caller',
    request: { query: listDomainsQuery },
    responses: { 200: jsonContent(dataEnvelope(z.object({ domains: z.array(listedDomainSchema), pagination: paginationSchema })), 'A page of domains, by name'), ...commonErrors },
  }),
  create: createRoute({
    ...base, method: 'post', path: '/', summary: 'Register a domain',
    request: jsonBody(createDomainBody),
    responses: { 201: jsonContent(dataEnvelope(domainSchema), 'The new domain'), ...commonErrors, 409: conflictResponse('Domain already exists') },
  }),
  bulkCreate: createRoute({
    ...base, method: 'post', path: '/bulk', summary: 'Register up to 10,000 domains at once (admin only)',
    description:
      'All or nothing: one invalid name refuses the request (422, `details.names` naming the position of every invalid one). ' +
      'Names already registered are reported as `exists` and left as they are; a name given twice is a `duplicate`. ' +
      'The new domains and one activity entry (`domain.bulk_create`) are written in one transaction.',
    request: jsonBody(bulkCreateDomainsBody, {
      mixed: { summary: 'Three names, one of them twice, for user 7', value: { names: ['shop.example.com', 'Blog.Example.com.', 'shop.example.com'], ownerId: 7 } },
    }),
    responses: { 200: jsonContent(dataEnvelope(bulkDomainsResultSchema), 'What became of each name, in the order given, and the counts'), ...commonErrors },
  }),
  get: createRoute({
    ...base, method: 'get', path: '/{domainId}', summary: 'Get a domain',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(domainSchema), 'The domain'), ...commonErrors, ...domainNotFound },
  }),
  ingest: createRoute({
    ...base, method: 'get', path: '/{domainId}/ingest', summary: "A domain's ingest health (domains: read)",
    description: 'When its last access and error lines were stored, whether it is stale (no line for longer than INGEST_STALE_S), the lines stored and rejected in the last hour and day, the rejects by cause, and the sources feeding it with their lag as their workers last reported.',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(ingestHealthSchema), "The domain's ingest health"), ...commonErrors, ...domainNotFound },
  }),
  update: createRoute({
    ...base, method: 'put', path: '/{domainId}', summary: 'Rename a domain or change its owner (admin only)',
    request: { params: domainIdParams, ...jsonBody(updateDomainBody) },
    responses: { 200: jsonContent(dataEnvelope(domainSchema), 'The updated domain'), ...commonErrors, ...domainNotFound, 409: conflictResponse('Domain already exists') },
  }),
  delete: createRoute({
    ...base, method: 'delete', path: '/{domainId}', summary: 'Delete a domain and everything that belongs to it (admin only)',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(messageEnvelope, 'Deleted'), ...commonErrors, ...domainNotFound },
  }),
};

export function domainsRoutes(services: Services) {
  const app = createRouter();
  app.use('*', requireAuth(services));

  app.openapi(routes.list, async (c) => {
    const query = c.req.valid('query');
    const { domains: list, total } = await domains.listDomains(services, c.var.principal, query);
    return c.json(ok({ domains: list, pagination: pagination(query.page, query.limit, total) }), 200);
  });
  app.openapi(routes.create, async (c) => c.json(ok(await domains.createDomain(services, c.var.principal, c.req.valid('json'), c.var.client)), 201));
  app.openapi(routes.bulkCreate, async (c) => c.json(ok(await domains.addDomains(services, c.var.principal, c.req.valid('json'), c.var.client)), 200));
  app.openapi(routes.get, async (c) => c.json(ok(await domains.getDomain(services, c.var.principal, c.req.valid('param').domainId)), 200));
  app.openapi(routes.ingest, async (c) => c.json(ok(await domains.getIngestHealth(services, c.var.principal, c.req.valid('param').domainId)), 200));
  app.openapi(routes.update, async (c) =>
    c.json(ok(await domains.updateDomain(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('json'), c.var.client)), 200),
  );
  app.openapi(routes.delete, async (c) => {
    await domains.deleteDomain(services, c.var.principal, c.req.valid('param').domainId, c.var.client);
    return c.json(message('Domain deleted'), 200);
  });
  return app;
}
