import { OpenAPIHono } from '@hono/zod-openapi';
import type { AppEnv } from '../context.js';
import { invalidField, validationFailed } from './errors.js';
import { UNSTORABLE_MESSAGE, unstorableField } from './storable-text.js';

/**
 * A router whose failed validations become the 422 envelope with per-field `details`, and whose
 * validated inputs (path, query, body) hold only text the stores can keep (storable-text.ts).
 */
export const createRouter = () =>
  new OpenAPIHono<AppEnv>({
    defaultHook: (result) => {
      if (!result.success) throw validationFailed(result.error);
      const field = unstorableField(result.data);
      if (field !== null) throw invalidField(field || result.target, UNSTORABLE_MESSAGE);
    },
  });

export const bearerSecurity = [{ bearerAuth: [] }];
