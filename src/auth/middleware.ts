import { createMiddleware } from 'hono/factory';
import type { AppEnv, Services } from '../context.js';
import { forbidden } from '../http/errors.js';
import type { Action, Resource } from '../users/permissions.js';
import { authenticate } from './service.js';

/** Requires a valid bearer token; sets `principal` for the handlers. */
export const requireAuth = (deps: Pick<Services, 'db' | 'jwtSecret' | 'log'>) =>
  createMiddleware<AppEnv>(async (c, next) => {
    c.set('principal', await authenticate(deps, c.req.header('authorization')));
    await next();
  });

/** Throws 403 unless the principal holds the permission. */
export function demand(principal: AppEnv['Variables']['principal'], resource: Resource, action: Action): void {
  if (!principal.permissions.can(resource, action)) throw forbidden();
}
