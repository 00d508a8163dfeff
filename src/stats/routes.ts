import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../auth/middleware.js';
import type { Services } from '../context.js';
import { domainIdParams } from '../domains/schemas.js';
import { commonErrors, dataEnvelope, jsonContent, notFoundResponse, ok } from '../http/envelope.js';
import { bearerSecurity, createRouter } from '../http/router.js';
import { statsFiltersOf, statsQuery, statsWindowOf } from './schemas.js';
import { STATS_PERIODS } from './periods.js';
import { getLogStats } from './window.js';

const share = z.number().openapi({ description: '100 × count / totalRequests, 2 decimals' });

export const logStatsSchema = z
  .object({
    period: z.enum([...STATS_PERIODS, 'custom']).openapi({ description: "The period asked, or 'custom' for a window from startDate to endDate" }),
    totalRequests: z.number().int(),
    uniqueVisitors: z.number().int().openapi({ description: 'Distinct client addresses' }),
    averageResponseTime: z.number().openapi({ description: 'Milliseconds, 2 decimals; 0 when no request of the window logged one' }),
    errorRate: z.number().openapi({ description: 'Share of requests with status ≥ 500, a fraction with 4 decimals', example: 0.05 }),
    topUrls: z.array(z.object({ url: z.string(), requests: z.number().int(), percentage: share })),
    topStatusCodes: z.array(z.object({ code: z.number().int(), count: z.number().int(), percentage: share })),
    topUserAgents: z.array(z.object({ userAgent: z.string(), requests: z.number().int(), percentage: share })),
    topReferrers: z.array(z.object({ referrer: z.string(), requests: z.number().int(), percentage: share })),
    bandwidth: z.number().int().openapi({ description: 'Beyond the specification: the bytes sent (sum of responseSize)' }),
    responseTimePercentiles: z
      .object({ p50: z.number().nullable(), p95: z.number().nullable(), p99: z.number().nullable() })
      .openapi({
        description:
          'Beyond the specification: nearest-rank percentiles of the response times in ms, exact below 128 ms and within 1 % above; null when no request of the window logged one',
        example: { p50: 42, p95: 310.45, p99: 1203.5 },
      }),
  })
  .openapi('LogStats');

const routes = {
  stats: createRoute({
    tags: ['Logs'],
    security: bearerSecurity,
    method: 'get',
    path: '/domains/{domainId}/stats',
    summary: "A domain's access statistics over the last period, or a window, of the requests that pass the filters (logs:read)",
    description:
      'Top lists hold up to 10 entries, by count descending then key ascending; topReferrers leaves out requests without a referrer. ' +
      'An empty window gives zeros and empty lists. Beyond the specification: startDate/endDate instead of period, and the filters ' +
      '(statusCode, ipAddress, url, method as in the access listing; userAgent and referrer as case-insensitive substrings; bot), ' +
      'combined with AND. Unfiltered, whole hours and days are read from rollups; filtered, every row of the window is read.',
    request: { params: domainIdParams, query: statsQuery },
    responses: { 200: jsonContent(dataEnvelope(logStatsSchema), 'The statistics'), ...commonErrors, 404: notFoundResponse('Domain') },
  }),
};

/** Mounted at /api/logs (the specification's paths). */
export function logStatsRoutes(services: Services) {
  const app = createRouter();
  app.use('/domains/:domainId/stats', requireAuth(services));
  app.openapi(routes.stats, async (c) => {
    const query = c.req.valid('query');
    return c.json(ok(await getLogStats(services, c.var.principal, c.req.valid('param').domainId, statsWindowOf(query), statsFiltersOf(query))), 200);
  });
  return app;
}
