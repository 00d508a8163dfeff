/**
 * The dashboard's session: the same sessions as POST /api/auth/login and /refresh, with the
 * refresh token in a cookie the page's scripts cannot read (HttpOnly, SameSite=Strict, Secure
 * under an https BASE_URL, sent only to these routes) and the access token in the answer, which
 * the page keeps in memory. A reload signs in again through /refresh.
 *
 * Against cross-site requests (the cookie is sent without the page asking): every route here
 * wants the header SESSION_HEADER, which a form or a cross-origin script cannot send without a
 * CORS preflight this server never grants, and an Origin, when the browser sends one, of this
 * server. SameSite=Strict keeps the cookie off cross-site requests in the first place.
 */
import { createRoute } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { deleteCookie, getCookie, setCookie } from 'hono/cookie';
import type { AppEnv, Services } from '../context.js';
import { commonErrors, dataEnvelope, errorResponse, jsonBody, jsonContent, message, messageEnvelope, ok } from '../http/envelope.js';
import { ApiError } from '../http/errors.js';
import { createRouter } from '../http/router.js';
import { browserSessionSchema, loginBody } from './schemas.js';
import * as auth from './service.js';
import { REFRESH_TOKEN_TTL_S } from './tokens.js';

export const SESSION_COOKIE = 'tailhouse_refresh';
export const SESSION_PATH = '/api/auth/session';
/** The header a dashboard request carries; its value is not checked, its presence is the point. */
export const SESSION_HEADER = 'X-Tailhouse-Session';

const { 401: unauthorized, 400: badBody, 413: tooLarge, 422: invalid } = commonErrors;
const base = { tags: ['Auth'], description: `For the dashboard: needs the header ${SESSION_HEADER}; the refresh token travels in an HttpOnly cookie (${SESSION_COOKIE}, path ${SESSION_PATH}).` };
const crossSite = errorResponse(`Without ${SESSION_HEADER}, or from another origin`);

const routes = {
  signIn: createRoute({
    ...base, method: 'post', path: '/', summary: 'Sign in from the dashboard: the refresh token as a cookie',
    request: jsonBody(loginBody),
    responses: { 200: jsonContent(dataEnvelope(browserSessionSchema), 'The access token'), 400: badBody, 401: unauthorized, 403: crossSite, 413: tooLarge, 422: invalid, 429: errorResponse('Too many failed attempts; see Retry-After') },
  }),
  refresh: createRoute({
    ...base, method: 'post', path: '/refresh', summary: "Trade the cookie's refresh token for a new access token (and cookie)",
    responses: { 200: jsonContent(dataEnvelope(browserSessionSchema), 'A new access token'), 401: unauthorized, 403: crossSite },
  }),
  signOut: createRoute({
    ...base, method: 'post', path: '/logout', summary: "End the cookie's session and remove the cookie",
    responses: { 200: jsonContent(messageEnvelope, 'Signed out'), 403: crossSite },
  }),
};

/** Refuses what a page of another site could have sent (see above). */
export function checkSameOrigin(c: Context<AppEnv>, baseUrl: string): void {
  if (c.req.header(SESSION_HEADER) === undefined) throw new ApiError(403, `Missing ${SESSION_HEADER} header`);
  const origin = c.req.header('Origin');
  if (origin === undefined) return;
  // The configured address, or the one the browser used to reach this server directly.
  const host = c.req.header('Host');
  const allowed = new URL(baseUrl).origin === origin || (host !== undefined && (origin === `http://${host}` || origin === `https://${host}`));
  if (!allowed) throw new ApiError(403, 'Cross-origin request refused');
}

/** The session's answer: the tokens but the refresh token, which goes into the cookie. */
function withCookie(c: Context<AppEnv>, session: auth.Session, secure: boolean) {
  setCookie(c, SESSION_COOKIE, session.refreshToken, { path: SESSION_PATH, httpOnly: true, sameSite: 'Strict', secure, maxAge: REFRESH_TOKEN_TTL_S });
  const { refreshToken: _, ...rest } = session;
  return ok(rest);
}

export function browserSessionRoutes(services: Services) {
  const app = createRouter();
  const secure = services.config.baseUrl.startsWith('https:');
  const forget = (c: Context<AppEnv>) => deleteCookie(c, SESSION_COOKIE, { path: SESSION_PATH, httpOnly: true, sameSite: 'Strict', secure });
  app.use('*', async (c, next) => {
    checkSameOrigin(c, services.config.baseUrl);
    await next();
    c.header('Cache-Control', 'no-store');
  });
  app.openapi(routes.signIn, async (c) => c.json(withCookie(c, await auth.login(services, c.req.valid('json'), c.var.client), secure), 200));
  app.openapi(routes.refresh, async (c) => {
    const token = getCookie(c, SESSION_COOKIE);
    if (!token || token.length > 512) {
      forget(c);
      throw new ApiError(401, 'Not signed in');
    }
    try {
      return c.json(withCookie(c, await auth.refresh(services, token), secure), 200);
    } catch (err) {
      forget(c);
      throw err;
    }
  });
  app.openapi(routes.signOut, async (c) => {
    const token = getCookie(c, SESSION_COOKIE);
    if (token && token.length <= 512) await auth.logout(services, token, c.var.client);
    forget(c);
    return c.json(message('Signed out'), 200);
  });
  return app;
}
