import { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../context.js';
import { validationFailed } from './errors.js';

/** A router whose failed validations become the 422 envelope with per-field `details`. */
export const createRouter = () =>
  new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) throw validationFailed(result.error);
    },
  });

export const bearerSecurity = [{ bearerAuth: [] }];
