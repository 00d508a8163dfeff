import { z } from '@hono/zod-openapi';
import { REJECT_CAUSES } from '../../core/entries.js';
import { paginationSchema } from '../http/envelope.js';
import { checkDateOrder, checkPageDepth, dateRangeQuery, pageBody, pageQuery } from '../http/query.js';
import { accessFilterQuery, errorFilterQuery, LEVELS } from './filters.js';
import { SEARCH_FIELDS } from './store.js';

/** The highest `limit` of log listings and search (docs/reference/http.md#paging). */
export const LOG_PAGE_MAX = 1000;
/** The longest search `query` (docs/reference/logs.md#search). A longer logged value, such as a long URL, is found by any part of it. */
export const SEARCH_QUERY_MAX = 500;

export const accessListQuery = z
  .object({ ...pageQuery(LOG_PAGE_MAX), ...dateRangeQuery(false), ...accessFilterQuery })
  .superRefine(checkDateOrder)
  .superRefine(checkPageDepth);

export const errorListQuery = z
  .object({ ...pageQuery(LOG_PAGE_MAX), ...dateRangeQuery(false), ...errorFilterQuery })
  .superRefine(checkDateOrder)
  .superRefine(checkPageDepth);

/** The highest `limit` of the rejects listing: a rejected line may be 64 KiB (its head, when longer). */
export const REJECTS_PAGE_MAX = 100;

export const rejectsListQuery = z
  .object({
    ...pageQuery(REJECTS_PAGE_MAX),
    cause: z.enum(REJECT_CAUSES, { message: `must be one of ${REJECT_CAUSES.join(', ')}` }).optional(),
  })
  .superRefine(checkPageDepth);

export type AccessListQuery = z.infer<typeof accessListQuery>;
export type ErrorListQuery = z.infer<typeof errorListQuery>;
export type RejectsListQuery = z.infer<typeof rejectsListQuery>;

const searchDates = dateRangeQuery(true);

export const searchBody = z
  .strictObject({
    query: z
      .string({ error: (issue) => (issue.input === undefined ? 'is required' : 'must be a string') })
      .min(1, { message: 'must not be empty' })
      .max(SEARCH_QUERY_MAX, { message: `must be at most ${SEARCH_QUERY_MAX} characters` })
      .openapi({ description: 'A case-insensitive substring', example: 'timed out' }),
    fields: z
      .array(z.enum(SEARCH_FIELDS, { message: `must be one of ${SEARCH_FIELDS.join(', ')}` }), { message: 'must be an array of field names' })
      .min(1, { message: 'must not be empty' })
      .max(SEARCH_FIELDS.length * 2, { message: 'has too many entries' })
      .default(['url', 'message'])
      .openapi({ description: 'Fields to search; an entry type without a field never matches on it' }),
    startDate: searchDates.startDate,
    endDate: searchDates.endDate.openapi({ description: 'Default: now' }),
    ...pageBody(LOG_PAGE_MAX),
  })
  .superRefine(checkDateOrder)
  .superRefine(checkPageDepth)
  .openapi('LogSearch');

export type SearchBody = z.infer<typeof searchBody>;

export const accessEntrySchema = z
  .object({
    id: z.number().int(),
    timestamp: z.string().openapi({ example: '2026-11-21T08:15:30.123Z' }),
    ipAddress: z.string(),
    method: z.string(),
    url: z.string(),
    protocol: z.string(),
    statusCode: z.number().int(),
    responseSize: z.number().int(),
    referrer: z.string(),
    userAgent: z.string(),
    responseTime: z.number().nullable().openapi({ description: 'Milliseconds; null when the log format has no $request_time' }),
  })
  .openapi('AccessLogEntry');

export const errorEntrySchema = z
  .object({
    id: z.number().int(),
    timestamp: z.string().openapi({ example: '2026-11-21T08:15:30.123Z' }),
    level: z.enum(LEVELS),
    message: z.string(),
    context: z.record(z.string(), z.string()).openapi({ description: 'Whichever of client, server, request, upstream, host, referrer the line carries' }),
  })
  .openapi('ErrorLogEntry');

export const searchEntrySchema = z
  .union([accessEntrySchema.extend({ type: z.literal('access') }), errorEntrySchema.extend({ type: z.literal('error') })])
  .openapi('SearchLogEntry');

export const rejectedLineSchema = z
  .object({
    time: z.string().openapi({ description: 'When the line was rejected', example: '2026-11-21T08:15:30.123Z' }),
    kind: z.enum(['access', 'error']),
    source: z.string().openapi({ description: 'Where it was read: a path, or a syslog tag', example: '/var/log/nginx/shop.access.log' }),
    cause: z.enum(REJECT_CAUSES).nullable().openapi({ description: 'Why, in a few fixed words; null: rejected before causes were recorded' }),
    reason: z.string().openapi({ example: 'does not parse: expected " after $request' }),
    line: z.string().openapi({ description: 'The line as read; for an overlong line, its head' }),
    length: z.number().int().openapi({ description: "The whole line's length in bytes" }),
  })
  .openapi('RejectedLine');

export const rejectsPageSchema = z.object({ rejects: z.array(rejectedLineSchema), pagination: paginationSchema });

export const accessPageSchema = z.object({ logs: z.array(accessEntrySchema), pagination: paginationSchema });
export const errorPageSchema = z.object({ logs: z.array(errorEntrySchema), pagination: paginationSchema });
export const searchPageSchema = z.object({ logs: z.array(searchEntrySchema), pagination: paginationSchema });
