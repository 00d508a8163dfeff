import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { commonErrors, conflictResponse, dataEnvelope, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok, pagination, paginationSchema } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import type { AccessWatchers } from './access.js';
import * as members from './members.js';
import { bulkCreateDomainsBody, bulkDomainsResultSchema, createDomainBody, domainIdParams, domainSchema, ingestHealthSchema, listDomainsQuery, listedDomainSchema, memberParams, memberSchema, shareDomainBody, updateDomainBody } from './schemas.js';
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
    ...base, method: 'put', path: '/{domainId}', summary: 'Rename a domain or change its owner (admin only), or hand it over (its owner)',
    description: 'Administrators rename a domain and change or clear its owner. Its owner may hand it over to another user with `{"ownerId": <id>}` alone (403 for anything else); it then no longer sees the domain unless given a role on it again.',
    request: { params: domainIdParams, ...jsonBody(updateDomainBody) },
    responses: { 200: jsonContent(dataEnvelope(domainSchema), 'The updated domain'), ...commonErrors, ...domainNotFound, 409: conflictResponse('Domain already exists') },
  }),
  members: createRoute({
    ...base, method: 'get', path: '/{domainId}/members', summary: "A domain's members and their roles (its owner, administrators)",
    description: 'The users besides its owner who see the domain, by user id. 404 for a domain the caller does not see; 403 for a member (viewer or editor).',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ members: z.array(memberSchema) })), 'The members, by user id'), ...commonErrors, ...domainNotFound },
  }),
  share: createRoute({
    ...base, method: 'post', path: '/{domainId}/members', summary: "Give a user a role on a domain, or change a member's role (its owner, administrators)",
    description:
      'viewer: sees the domain, reads its logs, statistics, exports, live tail and alerts; editor: also creates, changes and deletes its alerts and silences. ' +
      "The member's own permissions stay the ceiling: a role grants nothing they deny. Recorded in the caller's activity (`domain.member_add`, `domain.member_role`). " +
      '422 on `userId` for an unknown user or the owner.',
    request: { params: domainIdParams, ...jsonBody(shareDomainBody, { viewer: { summary: 'User 7 reads the domain', value: { userId: 7, role: 'viewer' } } }) },
    responses: {
      200: jsonContent(dataEnvelope(memberSchema), 'The role of a member changed (or was already this one)'),
      201: jsonContent(dataEnvelope(memberSchema), 'A new member'),
      ...commonErrors,
      ...domainNotFound,
    },
  }),
  unshare: createRoute({
    ...base, method: 'delete', path: '/{domainId}/members/{userId}', summary: 'Take a member off a domain (its owner, administrators; a member itself)',
    description:
      'At once: the member\'s next request about the domain answers 404, its open live tails of it end, its download links stop, its rules stop covering it and their pending notifications no longer name it. ' +
      "Recorded in the caller's activity (`domain.member_remove`).",
    request: { params: memberParams },
    responses: { 200: jsonContent(messageEnvelope, 'Removed'), ...commonErrors, 404: notFoundResponse('Domain or Member') },
  }),
  delete: createRoute({
    ...base, method: 'delete', path: '/{domainId}', summary: 'Delete a domain and everything that belongs to it (admin only)',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(messageEnvelope, 'Deleted'), ...commonErrors, ...domainNotFound },
  }),
};

/** `watchers`: the process's live tails, checked again at once when a role on a domain ends or changes. */
export function domainsRoutes(services: Services, watchers?: AccessWatchers) {
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
    c.json(ok(await domains.updateDomain(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('json'), c.var.client, watchers)), 200),
  );
  app.openapi(routes.members, async (c) => c.json(ok({ members: await members.listDomainMembers(services, c.var.principal, c.req.valid('param').domainId) }), 200));
  app.openapi(routes.share, async (c) => {
    const { member, created } = await members.shareDomain(services, c.var.principal, c.req.valid('param').domainId, c.req.valid('json'), c.var.client, watchers);
    return created ? c.json(ok(member), 201) : c.json(ok(member), 200);
  });
  app.openapi(routes.unshare, async (c) => {
    const { domainId, userId } = c.req.valid('param');
    await members.unshareDomain(services, c.var.principal, domainId, userId, c.var.client, watchers);
    return c.json(message('Member removed'), 200);
  });
  app.openapi(routes.delete, async (c) => {
    await domains.deleteDomain(services, c.var.principal, c.req.valid('param').domainId, c.var.client);
    return c.json(message('Domain deleted'), 200);
  });
  return app;
}
