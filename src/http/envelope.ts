import { z } from '@hono/zod-openapi';

/** Success envelopes of the specification, for handlers and for the OpenAPI document. */
export const ok = <T>(data: T) => ({ success: true as const, data });
export const message = (text: string) => ({ success: true as const, message: text });

export const dataEnvelope = <T extends z.ZodTypeAny>(data: T) => z.object({ success: z.literal(true), data });
export const messageEnvelope = z.object({ success: z.literal(true), message: z.string() }).openapi('Message');
export const errorEnvelope = z
  .object({
    success: z.literal(false),
    error: z.string(),
    details: z.record(z.string(), z.string()).optional(),
  })
  .openapi('Error');

export const paginationSchema = z
  .object({ page: z.number().int(), limit: z.number().int(), total: z.number().int(), pages: z.number().int() })
  .openapi('Pagination');

export type Pagination = z.infer<typeof paginationSchema>;

export function pagination(page: number, limit: number, total: number): Pagination {
  return { page, limit, total, pages: Math.ceil(total / limit) };
}

export const errorResponse = (description: string) => ({ description, content: { 'application/json': { schema: errorEnvelope } } });

/** The error responses every authenticated route may give, for the OpenAPI document. */
export const commonErrors = {
  400: errorResponse('Body is not JSON'),
  401: errorResponse('Missing, malformed, expired or revoked token'),
  403: errorResponse('Insufficient permissions'),
  413: errorResponse('Body over 1 MiB'),
  422: errorResponse('Validation failed; details maps each field to a message'),
};
export const notFoundResponse = (what: string) => errorResponse(`${what} not found`);
export const conflictResponse = (what: string) => errorResponse(what);
/** Named examples of a body for the OpenAPI document. */
export type Examples = Record<string, { summary: string; value: unknown }>;

export const jsonContent = <T extends z.ZodTypeAny>(schema: T, description: string, examples?: Examples) => ({
  description,
  content: { 'application/json': { schema, ...(examples ? { examples } : {}) } },
});

/** A required JSON request body for `createRoute`. */
export const jsonBody = <T extends z.ZodTypeAny>(schema: T, examples?: Examples) => ({
  body: { required: true as const, content: { 'application/json': { schema, ...(examples ? { examples } : {}) } } },
});
