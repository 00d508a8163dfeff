/**
 * POST /api/logs/query: the body (zod, checked field by field so that a 422 names the top-level
 * field) and the answer, both with examples for the OpenAPI document.
 */
import { z } from '@hono/zod-openapi';
import { paginationSchema } from '../../http/envelope.js';
import { bodyWholeNumber, checkDateOrder, checkPageDepth, isoDate, pageBody } from '../../http/query.js';
import { STATS_PERIODS } from '../periods.js';
import { DIMENSION_NAMES, dimensionByName, METRIC_NAMES } from '../registry.js';
import { filtersField } from './filters.js';

export const QUERY_LIMIT_MAX = 10_000;
export const QUERY_LIMIT_DEFAULT = 100;
export const QUERY_DOMAINS_MAX = 10_000;
/** Dimensions of one query: each multiplies the groups (16 ran 6.7 s before their groups were refused); a dashboard asks for two. */
export const QUERY_DIMENSIONS_MAX = 4;
export const DATE_RANGES = [...STATS_PERIODS, 'custom'] as const;
const DIRECTIONS = ['asc', 'desc'] as const;

const listOf = <T extends z.ZodTypeAny>(item: T, max: number) =>
  z.array(item, { message: 'must be an array' }).max(max, { message: `must have at most ${max} entries` });

const metricName = z.enum(METRIC_NAMES, { message: `must be one of ${METRIC_NAMES.join(', ')}` });
const dimensionName = z.enum(DIMENSION_NAMES, { message: `must be one of ${DIMENSION_NAMES.join(', ')}` });

/** The first repeated entry of a list, by `key`. */
const repeated = <T>(list: readonly T[], key: (item: T) => unknown = (x) => x): T | undefined => {
  const seen = new Set<unknown>();
  return list.find((item) => seen.has(key(item)) || !seen.add(key(item)));
};

interface CheckedFields {
  domains?: number[] | undefined;
  metrics: string[];
  dimensions: string[];
  dateRange: string;
  startDate?: Date | undefined;
  endDate?: Date | undefined;
  orderBy?: [string, string][] | undefined;
}

/** The rules between fields and within lists, each reported on its top-level field. */
function checkQuery(body: CheckedFields, ctx: z.RefinementCtx): void {
  const issue = (field: string, message: string) => ctx.addIssue({ code: 'custom', path: [field], message });
  for (const field of ['domains', 'metrics', 'dimensions'] as const) {
    const twice = repeated<unknown>(body[field] ?? []);
    if (twice !== undefined) issue(field, `names ${JSON.stringify(twice)} twice`);
  }
  if (body.dimensions.filter((d) => dimensionByName.get(d)?.kind === 'time').length > 1) issue('dimensions', 'may hold one time dimension at most');
  if (body.dateRange === 'custom') {
    if (!body.startDate) issue('startDate', 'is required with dateRange "custom"');
  } else {
    if (body.startDate) issue('startDate', 'is only taken with dateRange "custom"');
    if (body.endDate) issue('endDate', 'is only taken with dateRange "custom"');
  }
  const asked = new Set([...body.metrics, ...body.dimensions]);
  const unasked = body.orderBy?.find(([name]) => !asked.has(name));
  if (unasked) issue('orderBy', `${JSON.stringify(unasked[0])} is neither an asked metric nor an asked dimension`);
  const twice = repeated(body.orderBy ?? [], ([name]) => name);
  if (twice) issue('orderBy', `names ${JSON.stringify(twice[0])} twice`);
}

export const queryBody = z
  .strictObject({
    domains: listOf(bodyWholeNumber(1, 2 ** 31 - 1), QUERY_DOMAINS_MAX)
      .min(1, { message: 'must not be empty' })
      .optional()
      .openapi({ description: 'Domain ids; default every domain the caller sees. An id the caller does not see answers 404 "Domain not found".', example: [1] }),
    metrics: listOf(metricName, METRIC_NAMES.length)
      .min(1, { message: 'must not be empty' })
      .openapi({ description: 'The figures of each result row, in this order', example: ['requests', 'errorRate', 'p95ResponseTime'] }),
    dimensions: listOf(dimensionName, QUERY_DIMENSIONS_MAX)
      .default([])
      .openapi({ description: 'What the rows are grouped by, in this order; one time dimension at most, four dimensions in all. None: one row.', example: ['time:hour'] }),
    filters: filtersField,
    dateRange: z
      .enum(DATE_RANGES, { message: `must be one of ${DATE_RANGES.join(', ')}` })
      .default('24h')
      .openapi({ description: 'The window: the last hour, day, 7 or 30 days up to now, or "custom" from startDate to endDate', example: '24h' }),
    startDate: isoDate(false).optional().openapi({ description: 'With dateRange "custom" (required there): the first moment of the window' }),
    endDate: isoDate(true).optional().openapi({ description: 'With dateRange "custom": the last moment of the window (a date alone: its end); default now' }),
    compare: z
      .enum(['previous'], { message: 'must be "previous"' })
      .optional()
      .openapi({ description: 'Also the figures of the window of the same length just before (rows get comparison and change)' }),
    orderBy: listOf(z.tuple([z.string({ message: 'must be a metric or dimension name' }), z.enum(DIRECTIONS, { message: 'must be asc or desc' })], { message: 'must be [name, "asc" | "desc"]' }), 32)
      .optional()
      .openapi({
        description:
          'Asked metrics and dimensions with a direction. Default (also for an empty list): the time dimension ascending, else the first metric descending; the dimensions not named follow, ascending. Nulls come last.',
        example: [['requests', 'desc']],
      }),
    ...pageBody(QUERY_LIMIT_MAX, QUERY_LIMIT_DEFAULT),
  })
  .superRefine(checkDateOrder)
  .superRefine(checkPageDepth)
  .superRefine(checkQuery)
  .openapi('LogQuery');

export type QueryBody = z.infer<typeof queryBody>;

const metricValue = z.number().nullable();
const figures = z.array(metricValue);

export const queryResultSchema = z
  .object({
    results: z.array(
      z.object({
        dimensions: z.array(z.union([z.string(), z.number(), z.boolean()])).openapi({ description: 'In the order asked: a time bucket as its start (ISO 8601, UTC), a domain as its name' }),
        metrics: figures.openapi({ description: 'In the order asked' }),
        comparison: figures.optional().openapi({ description: 'With compare: the previous window (for a time dimension the bucket at the same place)' }),
        change: figures.optional().openapi({ description: 'With compare: (metric − comparison) ÷ comparison, 4 decimals; null where the comparison is 0 or null' }),
      }),
    ),
    meta: z.object({
      metrics: z.array(z.string()),
      dimensions: z.array(z.string()),
      startDate: z.string().openapi({ example: '2026-11-24T10:37:00.000Z' }),
      endDate: z.string().openapi({ example: '2026-11-25T10:37:00.000Z' }),
      interval: z.string().nullable().openapi({ description: 'The time buckets: minute, 5minutes, 15minutes, hour, 6hours, day, week or month; null without a time dimension' }),
      totalIsLowerBound: z
        .literal(true)
        .optional()
        .openapi({ description: 'Present when pagination.total (and pages) is a lower bound: a top page proven from the rollups\' short lists counts only the groups it saw; the results are exact' }),
    }),
    pagination: paginationSchema,
  })
  .openapi('LogQueryResult');

/** Queries of one batch at most: a dashboard view asks 14. */
export const BATCH_QUERIES_MAX = 32;

/**
 * The batch form: each query is validated alone, as the single form's body is (service.ts), so
 * that an invalid one answers its own 422 in its place and the others their figures.
 */
export const queryBatchBody = z
  .strictObject({
    queries: listOf(z.unknown().openapi({ type: 'object', description: 'A body of the single form (LogQuery)' }), BATCH_QUERIES_MAX)
      .min(1, { message: 'must not be empty' })
      .openapi({ description: `Up to ${BATCH_QUERIES_MAX} bodies of the single form, answered in this order` }),
  })
  .openapi('LogQueryBatch');

export type QueryBatchBody = z.infer<typeof queryBatchBody>;

/** A body of either form, as the route takes it. */
export const queryRequestBody = z.union([queryBody, queryBatchBody]);

/** Whether `body` (as sent) is of the batch form: what chooses the schema its 422 comes from. */
export const isBatch = (body: unknown): body is { queries: unknown } => typeof body === 'object' && body !== null && 'queries' in body;

export const queryBatchResultSchema = z
  .object({
    answers: z.array(
      z.union([
        z.object({ success: z.literal(true), data: queryResultSchema }),
        z
          .object({ success: z.literal(false), status: z.number().int(), error: z.string(), details: z.record(z.string(), z.string()).optional() })
          .openapi({ description: 'The status, error and details the single form would answer' }),
      ]),
    ),
  })
  .openapi('LogQueryBatchResult');
