import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { commonErrors, conflictResponse, dataEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, notFoundResponse, ok, pagination, paginationSchema } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import {
  activityQuery,
  activitySchema,
  createdTokenSchema,
  createTokenBody,
  createUserBody,
  listUsersQuery,
  passwordBody,
  permissionEntrySchema,
  permissionsBody,
  personalTokenSchema,
  resetRequestBody,
  tokenParams,
  updateUserBody,
  userIdParams,
  userSchema,
} from './schemas.js';
import * as users from './service.js';

const base = { tags: ['Users'], security: bearerSecurity };
const userNotFound = { 404: notFoundResponse('User') };

const routes = {
  listTokens: createRoute({
    ...base, method: 'get', path: '/{id}/tokens', summary: "A user's personal access tokens (their own, or anyone's for an administrator)",
    request: { params: userIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ tokens: z.array(personalTokenSchema) })), 'The tokens, by id, revoked ones too'), ...commonErrors, ...userNotFound },
  }),
  createToken: createRoute({
    ...base, method: 'post', path: '/{id}/tokens', summary: 'Create a personal access token for oneself (signed in with the password); its secret is shown once',
    request: { params: userIdParams, ...jsonBody(createTokenBody) },
    responses: { 201: jsonContent(dataEnvelope(createdTokenSchema), 'The token with its secret'), ...commonErrors, ...userNotFound },
  }),
  revokeToken: createRoute({
    ...base, method: 'delete', path: '/{id}/tokens/{tokenId}', summary: 'Revoke a personal access token (one\'s own, or anyone\'s for an administrator; signed in with the password)',
    request: { params: tokenParams },
    responses: { 200: jsonContent(messageEnvelope, 'Revoked'), ...commonErrors, 404: notFoundResponse('User or token') },
  }),
  list: createRoute({
    ...base, method: 'get', path: '/', summary: 'List users',
    request: { query: listUsersQuery },
    responses: { 200: jsonContent(dataEnvelope(z.object({ users: z.array(userSchema), pagination: paginationSchema })), 'A page of users, by id'), ...commonErrors },
  }),
  get: createRoute({
    ...base, method: 'get', path: '/{id}', summary: 'Get a user',
    request: { params: userIdParams },
    responses: { 200: jsonContent(dataEnvelope(userSchema), 'The user'), ...commonErrors, ...userNotFound },
  }),
  create: createRoute({
    ...base, method: 'post', path: '/', summary: 'Create a user',
    request: jsonBody(createUserBody),
    responses: { 201: jsonContent(dataEnvelope(userSchema), 'The new user'), ...commonErrors, 409: conflictResponse('E-mail already in use') },
  }),
  update: createRoute({
    ...base, method: 'put', path: '/{id}', summary: 'Update a user (partial)',
    description:
      "Changing one's own e-mail needs `currentPassword` and a signed-in session (403 with a personal access token); it applies once the link mailed to the new address is used. " +
      'Until then `data` shows the old address and `message` says where the link went, whether or not that address is taken.',
    request: { params: userIdParams, ...jsonBody(updateUserBody) },
    responses: {
      200: jsonContent(dataEnvelope(userSchema).extend({ message: z.string().optional() }), 'The updated user; `message` when an e-mail change waits for its confirmation link'),
      ...commonErrors,
      ...userNotFound,
      409: conflictResponse("E-mail in use (another user's change), or last active administrator"),
      429: errorResponse('Too many wrong current passwords or e-mail change requests; see Retry-After'),
      503: errorResponse('The confirmation e-mail could not be sent'),
    },
  }),
  delete: createRoute({
    ...base, method: 'delete', path: '/{id}', summary: 'Delete a user',
    request: { params: userIdParams },
    responses: { 200: jsonContent(messageEnvelope, 'Deleted'), ...commonErrors, ...userNotFound, 409: conflictResponse('Last active administrator') },
  }),
  password: createRoute({
    ...base, method: 'put', path: '/{id}/password', summary: 'Change a password',
    request: { params: userIdParams, ...jsonBody(passwordBody) },
    responses: {
      200: jsonContent(messageEnvelope, 'Changed; the user must sign in again'),
      ...commonErrors,
      ...userNotFound,
      429: errorResponse('Too many wrong current passwords; see Retry-After'),
    },
  }),
  resetPassword: createRoute({
    ...base, method: 'post', path: '/{id}/reset-password', summary: 'E-mail a password reset link (admin only)',
    request: { params: userIdParams, ...jsonBody(resetRequestBody) },
    responses: { 200: jsonContent(messageEnvelope, 'Reset e-mail sent'), ...commonErrors, ...userNotFound },
  }),
  getPermissions: createRoute({
    ...base, method: 'get', path: '/{id}/permissions', summary: "Get a user's permissions",
    request: { params: userIdParams },
    responses: { 200: jsonContent(dataEnvelope(z.object({ permissions: z.array(permissionEntrySchema) })), 'The permissions'), ...commonErrors, ...userNotFound },
  }),
  setPermissions: createRoute({
    ...base, method: 'put', path: '/{id}/permissions', summary: "Replace a user's permissions (admin only)",
    request: { params: userIdParams, ...jsonBody(permissionsBody) },
    responses: { 200: jsonContent(messageEnvelope, 'Updated'), ...commonErrors, ...userNotFound },
  }),
  activity: createRoute({
    ...base, method: 'get', path: '/{id}/activity', summary: "A user's activity, newest first",
    request: { params: userIdParams, query: activityQuery },
    responses: { 200: jsonContent(dataEnvelope(z.object({ activities: z.array(activitySchema), pagination: paginationSchema })), 'A page of activity'), ...commonErrors, ...userNotFound },
  }),
};

export function usersRoutes(services: Services) {
  const app = createRouter();
  app.use('*', requireAuth(services));

  app.openapi(routes.list, async (c) => {
    const query = c.req.valid('query');
    const { users: list, total } = await users.listUsers(services, c.var.principal, query);
    return c.json(ok({ users: list, pagination: pagination(query.page, query.limit, total) }), 200);
  });

  app.openapi(routes.get, async (c) => c.json(ok(await users.getUser(services, c.var.principal, c.req.valid('param').id)), 200));

  app.openapi(routes.create, async (c) => {
    const { name, email, password, role, active } = c.req.valid('json');
    return c.json(ok(await users.createUser(services, c.var.principal, { name, email, password, role, active }, c.var.client)), 201);
  });

  app.openapi(routes.update, async (c) => {
    const { name, email, role, active, currentPassword } = c.req.valid('json');
    const outcome = await users.updateUser(services, c.var.principal, c.req.valid('param').id, { name, email, role, active, currentPassword }, c.var.client);
    if (outcome.pendingEmail === undefined) return c.json(ok(outcome.user), 200);
    const notice = `A confirmation link was sent to ${outcome.pendingEmail}; the e-mail address changes when it is opened (valid one hour)`;
    return c.json({ ...ok(outcome.user), message: notice }, 200);
  });

  app.openapi(routes.delete, async (c) => {
    await users.deleteUser(services, c.var.principal, c.req.valid('param').id, c.var.client);
    return c.json(message('User deleted'), 200);
  });

  app.openapi(routes.password, async (c) => {
    await users.changePassword(services, c.var.principal, c.req.valid('param').id, c.req.valid('json'), c.var.client);
    return c.json(message('Password updated; sign in again with the new password'), 200);
  });

  app.openapi(routes.resetPassword, async (c) => {
    const email = await users.requestPasswordReset(services, c.var.principal, c.req.valid('param').id, c.req.valid('json').email, c.var.client);
    return c.json(message(`A password reset e-mail was sent to ${email}; its link is valid for one hour`), 200);
  });

  app.openapi(routes.getPermissions, async (c) =>
    c.json(ok({ permissions: await users.getPermissions(services, c.var.principal, c.req.valid('param').id) }), 200),
  );

  app.openapi(routes.setPermissions, async (c) => {
    await users.setPermissions(services, c.var.principal, c.req.valid('param').id, c.req.valid('json').permissions, c.var.client);
    return c.json(message('Permissions updated'), 200);
  });

  app.openapi(routes.activity, async (c) => {
    const query = c.req.valid('query');
    const { activities, total } = await users.getActivity(services, c.var.principal, c.req.valid('param').id, query);
    return c.json(ok({ activities, pagination: pagination(query.page, query.limit, total) }), 200);
  });

  app.openapi(routes.listTokens, async (c) => c.json(ok({ tokens: await users.listTokens(services, c.var.principal, c.req.valid('param').id) }), 200));
  app.openapi(routes.createToken, async (c) =>
    c.json(ok(await users.createToken(services, c.var.principal, c.req.valid('param').id, c.req.valid('json').name, c.var.client)), 201),
  );
  app.openapi(routes.revokeToken, async (c) => {
    const { id, tokenId } = c.req.valid('param');
    await users.revokeToken(services, c.var.principal, id, tokenId, c.var.client);
    return c.json(message('Token revoked'), 200);
  });
  return app;
}
