import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import type { AccessWatchers } from '../domains/access.js';
import { commonErrors, conflictResponse, dataEnvelope, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { groupBody, groupDomainParams, groupGrantBody, groupIdParams, groupMemberBody, groupMemberParams, groupSchema } from './schemas.js';
import * as groups from './service.js';

const base = { tags: ['Groups'], security: bearerSecurity };
const groupNotFound = { 404: notFoundResponse('Group') };
const groupAnswer = (description: string) => jsonContent(dataEnvelope(groupSchema), description);
const ADMIN_ONLY = 'Administrators only (403 for anyone else).';

const routes = {
  list: createRoute({
    ...base, method: 'get', path: '/', summary: 'List the groups with their members and grants (admin only)',
    responses: { 200: jsonContent(dataEnvelope(z.object({ groups: z.array(groupSchema) })), 'Every group, by name'), ...commonErrors },
  }),
  create: createRoute({
    ...base, method: 'post', path: '/', summary: 'Create a group (admin only)',
    description: `${ADMIN_ONLY} Recorded in the caller's activity (\`group.create\`).`,
    request: jsonBody(groupBody, { support: { summary: "The provider's support team", value: { name: 'Support' } } }),
    responses: { 201: groupAnswer('The new group'), ...commonErrors, 409: conflictResponse('Group already exists') },
  }),
  get: createRoute({
    ...base, method: 'get', path: '/{groupId}', summary: 'Get a group (admin only)',
    request: { params: groupIdParams },
    responses: { 200: groupAnswer('The group'), ...commonErrors, ...groupNotFound },
  }),
  rename: createRoute({
    ...base, method: 'put', path: '/{groupId}', summary: 'Rename a group (admin only)',
    request: { params: groupIdParams, ...jsonBody(groupBody) },
    responses: { 200: groupAnswer('The renamed group'), ...commonErrors, ...groupNotFound, 409: conflictResponse('Group already exists') },
  }),
  delete: createRoute({
    ...base, method: 'delete', path: '/{groupId}', summary: 'Delete a group: its members lose what it gave them, at once (admin only)',
    request: { params: groupIdParams },
    responses: { 200: jsonContent(messageEnvelope, 'Deleted'), ...commonErrors, ...groupNotFound },
  }),
  addMember: createRoute({
    ...base, method: 'post', path: '/{groupId}/members', summary: 'Add a user to a group (admin only)',
    description: `${ADMIN_ONLY} The user then holds the group's roles, within its own permissions. 422 on \`userId\` for an unknown user. Recorded as \`group.member_add\`.`,
    request: { params: groupIdParams, ...jsonBody(groupMemberBody) },
    responses: { 200: groupAnswer('Already a member: the group'), 201: groupAnswer('Added: the group'), ...commonErrors, ...groupNotFound },
  }),
  removeMember: createRoute({
    ...base, method: 'delete', path: '/{groupId}/members/{userId}', summary: 'Take a user out of a group (admin only)',
    description: "At once, as a revoked membership of a domain: what it saw only through the group answers 404, its open live tails there end, its download links there stop, its rules stop covering those domains. Recorded as `group.member_remove`.",
    request: { params: groupMemberParams },
    responses: { 200: jsonContent(messageEnvelope, 'Removed'), ...commonErrors, 404: notFoundResponse('Group or Member') },
  }),
  grant: createRoute({
    ...base, method: 'post', path: '/{groupId}/domains', summary: 'Give a group a role on domains, or on every domain (admin only)',
    description:
      `${ADMIN_ONLY} \`viewer\` or \`editor\`, as a member of a domain (docs/reference/domains.md#members); a grant the group holds changes its role. ` +
      '`"domains": "all"` covers every domain, those registered later too: a support team that reads every domain without any power over users or domains. ' +
      "All or nothing: an id that is no domain refuses the request (422 on `domains`). Recorded as `group.grant`.",
    request: {
      params: groupIdParams,
      ...jsonBody(groupGrantBody, {
        all: { summary: 'The support team reads every domain', value: { domains: 'all', role: 'viewer' } },
        some: { summary: "A customer's developers edit its shops' alerts", value: { domains: [3, 4], role: 'editor' } },
      }),
    },
    responses: { 200: groupAnswer('The group with its grants'), ...commonErrors, ...groupNotFound },
  }),
  revoke: createRoute({
    ...base, method: 'delete', path: '/{groupId}/domains/{domainId}', summary: "End a group's role on a domain, or on every domain (`all`) (admin only)",
    description: 'At once for every member of the group, as `DELETE …/members/{userId}` says. Recorded as `group.revoke`.',
    request: { params: groupDomainParams },
    responses: { 200: jsonContent(messageEnvelope, 'Revoked'), ...commonErrors, 404: notFoundResponse('Group or Grant') },
  }),
};

/** /api/groups; `watchers`: the process's live tails, checked again at once when a group's change takes domains away. */
export function groupsRoutes(services: Services, watchers?: AccessWatchers) {
  const app = createRouter();
  const deps = { db: services.db, watchers };
  app.use('*', requireAuth(services));
  const actor = (c: { var: { principal: Principal; client: ClientInfo } }) => groups.actorOf(c.var.principal, c.var.client);

  app.openapi(routes.list, async (c) => {
    groups.adminOnly(c.var.principal);
    return c.json(ok({ groups: await groups.listGroups(deps) }), 200);
  });
  app.openapi(routes.create, async (c) => c.json(ok(await groups.createGroup(deps, actor(c), c.req.valid('json').name)), 201));
  app.openapi(routes.get, async (c) => {
    groups.adminOnly(c.var.principal);
    return c.json(ok(await groups.getGroup(deps, c.req.valid('param').groupId)), 200);
  });
  app.openapi(routes.rename, async (c) => c.json(ok(await groups.renameGroup(deps, actor(c), c.req.valid('param').groupId, c.req.valid('json').name)), 200));
  app.openapi(routes.delete, async (c) => {
    await groups.deleteGroup(deps, actor(c), c.req.valid('param').groupId);
    return c.json(message('Group deleted'), 200);
  });
  app.openapi(routes.addMember, async (c) => {
    const { group, created } = await groups.addMember(deps, actor(c), c.req.valid('param').groupId, c.req.valid('json').userId);
    return created ? c.json(ok(group), 201) : c.json(ok(group), 200);
  });
  app.openapi(routes.removeMember, async (c) => {
    const { groupId, userId } = c.req.valid('param');
    await groups.removeMember(deps, actor(c), groupId, userId);
    return c.json(message('Member removed'), 200);
  });
  app.openapi(routes.grant, async (c) => {
    const { domains, role } = c.req.valid('json');
    return c.json(ok(await groups.grantDomains(deps, actor(c), c.req.valid('param').groupId, domains, role)), 200);
  });
  app.openapi(routes.revoke, async (c) => {
    const { groupId, domainId } = c.req.valid('param');
    await groups.revokeDomain(deps, actor(c), groupId, domainId);
    return c.json(message('Grant revoked'), 200);
  });
  return app;
}
