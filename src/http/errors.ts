import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { ZodError } from 'zod';
import type { Logger } from '../../core/log.js';

/** An error meant for the caller: its status and `error` text go out as the envelope. */
export class ApiError extends Error {
  constructor(
    readonly status: ContentfulStatusCode,
    message: string,
    readonly details?: Record<string, string>,
    readonly headers?: Record<string, string>,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

export const unauthorized = () => new ApiError(401, 'Authentication required', undefined, { 'WWW-Authenticate': 'Bearer' });
export const forbidden = () => new ApiError(403, 'Insufficient permissions');
export const notFound = (what: 'User' | 'Domain' | 'Group' | 'Member' | 'Invitation' | 'Grant' | 'Alert' | 'Silence' | 'Route') => new ApiError(404, `${what} not found`);
export const conflict = (message: string) => new ApiError(409, message);
/** A 422 for one field, for rules that a schema alone cannot check (wrong current password, …). */
export const invalidField = (field: string, message: string) => new ApiError(422, 'Validation failed', { [field]: message });

/** Where in a field an issue lies: `statusCode[1]`, `[0].scope`; empty for the field itself. */
const placeInField = (rest: PropertyKey[]) => rest.map((key) => (typeof key === 'number' ? `[${key}]` : `.${String(key)}`)).join('').replace(/^\./, '');

/**
 * Maps zod issues to `details`: one message per top-level field (the specification's field
 * names), the first issue of each field winning. An issue inside a field (an array entry, a
 * filter of the export's `filters`) is reported on that field, its message led by where in it.
 */
function validationDetails(error: ZodError): Record<string, string> {
  const details: Record<string, string> = {};
  for (const issue of error.issues) {
    const [field, ...rest] = issue.path;
    const place = placeInField(rest);
    const lead = place ? `${place}: ` : '';
    if (issue.code === 'unrecognized_keys') {
      if (field === undefined) for (const key of issue.keys) details[key] ??= 'Unknown field';
      else details[String(field)] ??= `${lead}Unknown field ${issue.keys.join(', ')}`;
      continue;
    }
    details[field === undefined ? 'body' : String(field)] ??= `${lead}${issue.message}`;
  }
  return details;
}

export function validationFailed(error: ZodError): ApiError {
  return new ApiError(422, 'Validation failed', validationDetails(error));
}

function errorBody(err: ApiError) {
  return err.details ? { success: false as const, error: err.message, details: err.details } : { success: false as const, error: err.message };
}

/**
 * The 413 answer. The rest of the body is never read, so the connection cannot carry another
 * request: it is closed, as nginx does.
 */
export const payloadTooLarge = (c: Context) => c.json({ success: false, error: 'Request body too large (limit 1 MiB)' }, 413, { Connection: 'close' });

/** Turns anything thrown in a handler into the envelope; never a stack trace to the caller. */
export function handleError(err: Error, c: Context, log: Logger): Response {
  if (err instanceof ApiError) {
    if (err.headers) for (const [k, v] of Object.entries(err.headers)) c.header(k, v);
    return c.json(errorBody(err), err.status);
  }
  if (err instanceof HTTPException) {
    const status = err.status;
    if (status === 413) return payloadTooLarge(c);
    if (status === 415 || status === 400) {
      // Hono's validator raises 400 for malformed JSON and 415 for another content type.
      return c.json({ success: false, error: 'Request body must be valid JSON (Content-Type: application/json)' }, 400);
    }
    return c.json({ success: false, error: err.message || 'Request failed' }, status as ContentfulStatusCode);
  }
  log.error({ err, method: c.req.method, path: c.req.path }, 'unhandled error');
  return c.json({ success: false, error: 'Internal server error' }, 500);
}
