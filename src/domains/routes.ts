import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { commonErrors, conflictResponse, dataEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok, pagination, paginationSchema } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import type { AccessWatchers } from './access.js';
import * as invitations from './invitations.js';
import * as members from './members.js';
import { bulkCreateDomainsBody, bulkDomainsResultSchema, createDomainBody, domainIdParams, domainSchema, groupSeeingSchema, ingestHealthSchema, invitationParams, invitationSchema, listDomainsQuery, listedDomainSchema, acceptInvitationBody, memberParams, memberSchema, shareDomainBody, updateDomainBody } from './schemas.js';
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
    description: 'The users besides its owner who see the domain, by user id, and the groups that see it (docs/reference/groups.md): through a grant on it, or on every domain (`allDomains`). 404 for a domain the caller does not see; 403 for a member (viewer or editor).',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ members: z.array(memberSchema), groups: z.array(groupSeeingSchema) })), 'The members, by user id, and the groups that see the domain, by name'), ...commonErrors, ...domainNotFound },
  }),
  share: createRoute({
    ...base, method: 'post', path: '/{domainId}/members', summary: "Give a user a role on a domain, change a member's role, or invite an address (its owner, administrators)",
    description:
      'viewer: sees the domain, reads its logs, statistics, exports, live tail and alerts; editor: also creates, changes and deletes its alerts and silences. ' +
      "The member's own permissions stay the ceiling: a role grants nothing they deny. Recorded in the caller's activity (`domain.member_add`, `domain.member_role`). " +
      '422 on `userId` for an unknown user or the owner. ' +
      'With `email` instead of `userId`: an invitation. A one-use link, valid 7 days, is mailed to the address; it makes the address\'s account a member, creating the account when there is none (`POST /api/invitations/accept`). ' +
      'The answer is `202` and the same whether or not the address has an account, and so is everything the caller can see afterwards (the invitation is pending in `GET …/invitations` either way; the member appears once the link is used). ' +
      "Recorded in the caller's activity (`domain.member_invite`); at most 20 invitations per caller per 15 minutes (429). Exactly one of `userId` and `email` (422 otherwise).",
    request: {
      params: domainIdParams,
      ...jsonBody(shareDomainBody, {
        viewer: { summary: 'User 7 reads the domain', value: { userId: 7, role: 'viewer' } },
        invite: { summary: 'Invite an address as an editor', value: { email: 'dev@example.com', role: 'editor' } },
      }),
    },
    responses: {
      200: jsonContent(dataEnvelope(memberSchema), 'The role of a member changed (or was already this one)'),
      201: jsonContent(dataEnvelope(memberSchema), 'A new member'),
      202: jsonContent(messageEnvelope, 'With `email`: invitation sent (the same answer whether or not the address has an account)'),
      ...commonErrors,
      ...domainNotFound,
      429: errorResponse('Too many invitations; see Retry-After'),
    },
  }),
  invitations: createRoute({
    ...base, method: 'get', path: '/{domainId}/invitations', summary: "A domain's pending invitations (its owner, administrators)",
    description: 'Invitations by e-mail address not yet used, withdrawn or expired, by id. 404 for a domain the caller does not see; 403 for a member.',
    request: { params: domainIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ invitations: z.array(invitationSchema) })), 'The pending invitations'), ...commonErrors, ...domainNotFound },
  }),
  withdraw: createRoute({
    ...base, method: 'delete', path: '/{domainId}/invitations/{invitationId}', summary: 'Withdraw a pending invitation (its owner, administrators)',
    description: "Its link stops working at once (answered as an unknown link). Recorded in the caller's activity (`domain.invitation_withdraw`).",
    request: { params: invitationParams },
    responses: { 200: jsonContent(messageEnvelope, 'Withdrawn'), ...commonErrors, 404: notFoundResponse('Domain or Invitation') },
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
  app.openapi(routes.members, async (c) => c.json(ok(await members.listDomainMembers(services, c.var.principal, c.req.valid('param').domainId)), 200));
  app.openapi(routes.share, async (c) => {
    const { domainId } = c.req.valid('param');
    const { userId, email, role } = c.req.valid('json');
    if (email !== undefined) {
      await invitations.inviteMember(services, c.var.principal, domainId, { email, role }, c.var.client);
      return c.json(message('Invitation sent'), 202);
    }
    const { member, created } = await members.shareDomain(services, c.var.principal, domainId, { userId: userId!, role }, c.var.client, watchers);
    return created ? c.json(ok(member), 201) : c.json(ok(member), 200);
  });
  app.openapi(routes.invitations, async (c) => c.json(ok({ invitations: await invitations.listDomainInvitations(services, c.var.principal, c.req.valid('param').domainId) }), 200));
  app.openapi(routes.withdraw, async (c) => {
    const { domainId, invitationId } = c.req.valid('param');
    await invitations.withdrawInvitation(services, c.var.principal, domainId, invitationId, c.var.client);
    return c.json(message('Invitation withdrawn'), 200);
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

const acceptRoute = createRoute({
  tags: ['Domains'], method: 'post', path: '/accept', summary: 'Use an invitation link: join the domain, creating the account when the address has none',
  description:
    'No sign-in: the token from the e-mailed link is the proof. When the invited address has no account, `password` (8 to 128 characters) and optionally `name` create one ' +
    '(role `user`, active, the default permissions); when it has one, the domain is added to that account, whose password and name stay as they are (sign in as usual). ' +
    'A membership the account already holds keeps its role. Unknown, used, withdrawn and expired links, and those whose inviter no longer manages the domain, ' +
    'answer `422` on `token` ("Invitation link is unknown, already used or expired"), as reset links do; unknown ones are throttled per client address (429).',
  request: jsonBody(acceptInvitationBody),
  responses: {
    200: jsonContent(messageEnvelope, 'Joined; the message names the account to sign in with'),
    400: commonErrors[400], 409: errorResponse('The address got an account meanwhile; use the link again'), 413: commonErrors[413], 422: commonErrors[422],
    429: errorResponse('Too many unknown links from this address; see Retry-After'),
  },
});

/** /api/invitations: the target of an invitation's link (no sign-in). */
export function invitationsRoutes(services: Services) {
  const app = createRouter();
  app.use('*', async (c, next) => {
    await next();
    c.header('Cache-Control', 'no-store');
  });
  app.openapi(acceptRoute, async (c) => {
    const accepted = await invitations.acceptInvitation(services, c.req.valid('json'), c.var.client);
    const text = accepted.created
      ? `Account ${accepted.email} created; it is now ${accepted.role === 'editor' ? 'an editor' : 'a viewer'} of ${accepted.domain}. Sign in with it.`
      : `The domain ${accepted.domain} was added to your account ${accepted.email}. Sign in as usual.`;
    return c.json(message(text), 200);
  });
  return app;
}
