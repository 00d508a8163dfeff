import { createRoute } from '@hono/zod-openapi';
import { requireAuth } from '../../auth/middleware.js';
import type { Services } from '../../context.js';
import { commonErrors, dataEnvelope, jsonBody, jsonContent, notFoundResponse, ok, type Examples } from '../../http/envelope.js';
import { bearerSecurity, createRouter } from '../../http/router.js';
import { queryBody, queryResultSchema } from './schemas.js';
import { queryLogs } from './service.js';

const requestExamples: Examples = {
  series: {
    summary: 'A chart: requests, error rate, p95 and bandwidth per hour over the last day',
    value: { domains: [1], metrics: ['requests', 'errorRate', 'p95ResponseTime', 'bandwidth'], dimensions: ['time:hour'], dateRange: '24h' },
  },
  drillDown: {
    summary: 'The URLs under /api/ answering 5xx, not to bots, with the previous 7 days beside',
    value: {
      metrics: ['requests', 'visitors', 'p95ResponseTime'],
      dimensions: ['url'],
      filters: [['is', 'statusClass', ['5xx']], ['glob', 'url', ['/api/*']], ['isNot', 'bot', [true]]],
      dateRange: '7d',
      compare: 'previous',
      orderBy: [['requests', 'desc']],
      limit: 10,
    },
  },
  fleet: {
    summary: 'Every domain the caller sees, with its error rate',
    value: { metrics: ['requests', 'errorRate'], dimensions: ['domain'], dateRange: 'custom', startDate: '2026-11-24', endDate: '2026-11-24' },
  },
};

const answerExamples: Examples = {
  series: {
    summary: 'A series: a row per hour, empty hours with zeros',
    value: {
      success: true,
      data: {
        results: [
          { dimensions: ['2026-11-24T10:00:00.000Z'], metrics: [1234, 0.0123, 87.5, 10485760] },
          { dimensions: ['2026-11-24T11:00:00.000Z'], metrics: [0, 0, null, 0] },
        ],
        meta: { metrics: ['requests', 'errorRate', 'p95ResponseTime', 'bandwidth'], dimensions: ['time:hour'], startDate: '2026-11-24T10:37:00.000Z', endDate: '2026-11-25T10:37:00.000Z', interval: 'hour' },
        pagination: { page: 1, limit: 100, total: 25, pages: 1 },
      },
    },
  },
  drillDown: {
    summary: 'A breakdown with compare',
    value: {
      success: true,
      data: {
        results: [{ dimensions: ['/api/orders'], metrics: [42, 17, 1530.3], comparison: [21, 9, 1020.51], change: [1, 0.8889, 0.4996] }],
        meta: { metrics: ['requests', 'visitors', 'p95ResponseTime'], dimensions: ['url'], startDate: '2026-11-18T10:37:00.000Z', endDate: '2026-11-25T10:37:00.000Z', interval: null },
        pagination: { page: 1, limit: 10, total: 1, pages: 1 },
      },
    },
  },
};

const routes = {
  query: createRoute({
    tags: ['Logs'],
    security: bearerSecurity,
    method: 'post',
    path: '/query',
    summary: 'Metrics of access logs by dimensions, filtered, over one domain, several or all the caller sees (logs:read)',
    description:
      'Rows hold the dimension values and the metric values in the order asked; a time dimension has a row for every bucket from the one holding startDate ' +
      'to the one holding endDate (UTC; weeks from Monday), empty buckets with zero counts and null response times, for each combination of the other ' +
      'dimensions that has rows. Without dimensions there is one row. `total` counts result rows. Percentiles are nearest-rank over a histogram: exact below ' +
      '128 ms, else within 1 % of the exact value. A time dimension with more than 10,000 buckets, or a series of more than 100,000 rows, is refused (422).',
    request: jsonBody(queryBody, requestExamples),
    responses: { 200: jsonContent(dataEnvelope(queryResultSchema), 'The result rows', answerExamples), ...commonErrors, 404: notFoundResponse('Domain') },
  }),
};

/** Mounted at /api/logs: POST /api/logs/query. */
export function queryRoutes(services: Services) {
  const app = createRouter();
  app.use('/query', requireAuth(services));
  app.openapi(routes.query, async (c) => c.json(ok(await queryLogs(services, c.var.principal, c.req.valid('json'))), 200));
  return app;
}
