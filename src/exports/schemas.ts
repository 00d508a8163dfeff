import { z } from '@hono/zod-openapi';
import { checkDateOrder, dateRangeQuery } from '../http/query.js';
import { accessFiltersBody, errorFiltersBody } from '../logs/filters.js';
import type { ExportSelection } from './stream.js';

export const EXPORT_TYPES = ['access', 'error'] as const;
export const EXPORT_FORMATS = ['csv', 'json'] as const;

const dates = dateRangeQuery(true);
const dateMessage = 'must be an ISO 8601 date, e.g. 2026-11-21T08:15:30Z';

const filtersField = z
  .record(z.string(), z.unknown(), { message: 'must be an object' })
  .optional()
  .openapi({
    type: 'object',
    description:
      'The listing filters. `type: "access"`: `statusCode` (array of codes or classes such as `"5xx"`), `method` (array, case-insensitive), ' +
      '`ipAddress` (an address or a CIDR range), `url` (a substring, or a glob with `*`). `type: "error"`: `level` (array of `error`, `warn`, `info`, `debug`).',
    example: { statusCode: [500, '4xx'], method: ['GET', 'POST'] },
  });

/**
 * POST /api/logs/domains/:domainId/export. `filters` is checked against the filters of `type`
 * (src/logs/filters.ts); the parsed form comes out as `selection`, the request's own form stays
 * in `filters` (it is what the export record keeps).
 */
export const exportBody = z
  .strictObject({
    type: z.enum(EXPORT_TYPES, { message: 'must be access or error' }),
    format: z.enum(EXPORT_FORMATS, { message: 'must be csv or json' }).default('csv'),
    startDate: z.string({ message: `is required; ${dateMessage}` }).pipe(dates.startDate).openapi({ type: 'string', format: 'date-time', example: '2026-11-20T00:00:00Z' }),
    endDate: dates.endDate.openapi({ type: 'string', format: 'date-time', description: 'Default: now, fixed when the export is created' }),
    filters: filtersField,
  })
  .superRefine(checkDateOrder)
  .transform((body, ctx) => {
    const filters = body.filters ?? {};
    const parsed = body.type === 'error' ? errorFiltersBody.safeParse(filters) : accessFiltersBody.safeParse(filters);
    if (!parsed.success) {
      for (const issue of parsed.error.issues) ctx.addIssue({ ...issue, path: ['filters', ...issue.path] } as Parameters<typeof ctx.addIssue>[0]);
      return z.NEVER;
    }
    const selection = { type: body.type, filters: parsed.data } as ExportSelection;
    return { ...body, filters, selection };
  })
  .openapi('ExportRequest');

export type ExportRequest = z.output<typeof exportBody>;

/** Parses the filters an export record keeps (they passed `exportBody` when it was created). */
export function selectionOf(type: 'access' | 'error', filters: Record<string, unknown>): ExportSelection {
  return type === 'error' ? { type, filters: errorFiltersBody.parse(filters) } : { type, filters: accessFiltersBody.parse(filters) };
}

export const exportResultSchema = z
  .object({
    downloadUrl: z.string().openapi({ example: 'https://logs.example.com/api/downloads/Xq3…9w.csv' }),
    expiresAt: z.string().openapi({ example: '2026-11-22T08:15:30.123Z' }),
  })
  .openapi('ExportResult');

export const downloadParams = z.object({
  file: z.string().openapi({ param: { name: 'file', in: 'path' }, example: 'Xq3…9w.csv', description: 'The file name of a downloadUrl' }),
});
