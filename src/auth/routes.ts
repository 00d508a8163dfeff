import { createRoute } from '@hono/zod-openapi';
import type { Services } from '../context.js';
import { commonErrors, dataEnvelope, errorEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, ok } from '../http/envelope.js';
import { createRouter } from '../http/router.js';
import { confirmEmailChange } from '../users/service.js';
import { confirmEmailBody, loginBody, refreshBody, resetPasswordBody, sessionSchema } from './schemas.js';
import * as auth from './service.js';

const { 401: unauthorized, 400: badBody, 413: tooLarge, 422: invalid } = commonErrors;
const base = { tags: ['Auth'] };
const tooManyLinks = errorResponse('Too many unknown links from this address; see Retry-After');

const routes = {
  login: createRoute({
    ...base, method: 'post', path: '/login', summary: 'Sign in with e-mail and password',
    request: jsonBody(loginBody),
    responses: {
      200: jsonContent(dataEnvelope(sessionSchema), 'Access and refresh tokens'),
      400: badBody, 401: unauthorized, 413: tooLarge, 422: invalid,
      429: jsonContent(errorEnvelope, 'Too many failed attempts; see Retry-After'),
    },
  }),
  refresh: createRoute({
    ...base, method: 'post', path: '/refresh', summary: 'Trade a refresh token for new tokens (the old one stops working)',
    request: jsonBody(refreshBody),
    responses: { 200: jsonContent(dataEnvelope(sessionSchema), 'New tokens'), 400: badBody, 401: unauthorized, 413: tooLarge, 422: invalid },
  }),
  logout: createRoute({
    ...base, method: 'post', path: '/logout', summary: 'End the session of a refresh token',
    request: jsonBody(refreshBody),
    responses: { 200: jsonContent(messageEnvelope, 'Signed out'), 400: badBody, 413: tooLarge, 422: invalid },
  }),
  resetPassword: createRoute({
    ...base, method: 'post', path: '/reset-password', summary: 'Set a new password with the token of a reset e-mail',
    request: jsonBody(resetPasswordBody),
    responses: { 200: jsonContent(messageEnvelope, 'Password set'), 400: badBody, 413: tooLarge, 422: invalid, 429: tooManyLinks },
  }),
  confirmEmail: createRoute({
    ...base, method: 'post', path: '/confirm-email', summary: 'Apply an e-mail change with the token mailed to the new address',
    request: jsonBody(confirmEmailBody),
    responses: {
      200: jsonContent(messageEnvelope, 'E-mail address changed'),
      400: badBody, 409: errorResponse('The address was taken meanwhile'), 413: tooLarge, 422: invalid, 429: tooManyLinks,
    },
  }),
};

export function authRoutes(services: Services) {
  const app = createRouter();
  // Answers here carry tokens or concern secrets: no cache, shared or private, is to keep them.
  app.use('*', async (c, next) => {
    await next();
    c.header('Cache-Control', 'no-store');
  });
  app.openapi(routes.login, async (c) => c.json(ok(await auth.login(services, c.req.valid('json'), c.var.client)), 200));
  app.openapi(routes.refresh, async (c) => c.json(ok(await auth.refresh(services, c.req.valid('json').refreshToken)), 200));
  app.openapi(routes.logout, async (c) => {
    await auth.logout(services, c.req.valid('json').refreshToken, c.var.client);
    return c.json(message('Signed out'), 200);
  });
  app.openapi(routes.resetPassword, async (c) => {
    const { token, newPassword } = c.req.valid('json');
    await auth.resetPasswordWithToken(services, token, newPassword, c.var.client);
    return c.json(message('Password set; sign in with the new password'), 200);
  });
  app.openapi(routes.confirmEmail, async (c) => {
    const email = await confirmEmailChange(services, c.req.valid('json').token, c.var.client);
    return c.json(message(`E-mail address changed to ${email}; sign in with it from now on`), 200);
  });
  return app;
}
