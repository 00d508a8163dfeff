import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../../auth/middleware.js';
import type { Services } from '../../context.js';
import { commonErrors, dataEnvelope, jsonBody, jsonContent, notFoundResponse, ok, type Examples } from '../../http/envelope.js';
import { bearerSecurity, createRouter } from '../../http/router.js';
import { validationFailed } from '../../http/errors.js';
import { isBatch, queryBatchBody, queryBatchResultSchema, queryBody, queryRequestBody, queryResultSchema } from './schemas.js';
import { queryLogs, queryLogsBatch } from './service.js';

// The series and drill-down of docs/reference/logs.md (Queries, Examples), with the answers a server gave them.
const series = {
  domains: [1],
  metrics: ['requests', 'errorRate', 'p95ResponseTime', 'bandwidth'],
  dimensions: ['time:hour'],
  filters: [['glob', 'url', ['/api/*']]],
  dateRange: 'custom',
  startDate: '2026-11-25T16:00:00Z',
  endDate: '2026-11-25T22:59:59.999Z',
};
const drillDown = {
  metrics: ['requests', 'visitors', 'p95ResponseTime'],
  dimensions: ['url', 'statusCode'],
  filters: [['is', 'statusClass', ['5xx']], ['glob', 'url', ['/api/*']]],
  dateRange: 'custom',
  startDate: '2026-11-25T18:00:00Z',
  endDate: '2026-11-25T20:59:59.999Z',
  compare: 'previous',
  limit: 5,
};

const requestExamples: Examples = {
  series: { summary: 'A chart: requests, error rate, p95 and bandwidth of /api/* per hour', value: series },
  drillDown: { summary: 'The API URLs answering 5xx, with the three hours before beside', value: drillDown },
  fleet: { summary: 'Every domain the caller sees over the last day, humans only', value: { metrics: ['requests', 'errorRate', 'p95ResponseTime'], dimensions: ['domain'], filters: [['isNot', 'bot', [true]]], dateRange: '24h' } },
  batch: {
    summary: 'A batch: the headline figures and a panel, and a domain the caller does not see',
    value: { queries: [{ domains: [1], metrics: ['requests', 'visitors'], dateRange: '24h' }, { domains: [1], metrics: ['requests'], dimensions: ['url'], dateRange: '24h', limit: 10 }, { domains: [99], metrics: ['requests'] }] },
  },
};

const hour = (h: number, metrics: number[]) => ({ dimensions: [`2026-11-25T${h}:00:00.000Z`], metrics });
const answerExamples: Examples = {
  series: {
    summary: 'A series: a row per hour (an hour without rows would hold 0, 0, null, 0)',
    value: {
      success: true,
      data: {
        results: [
          hour(16, [183, 0.0328, 1337.68, 4578617]),
          hour(17, [198, 0.0505, 1285.73, 4993399]),
          hour(18, [189, 0.1429, 19000.92, 4776260]),
          hour(19, [183, 0.1311, 16872.27, 4699067]),
          hour(20, [196, 0.1122, 12290.54, 5241762]),
          hour(21, [204, 0.0294, 1119.31, 4856010]),
          hour(22, [209, 0.0287, 1311.45, 5342589]),
        ],
        meta: { metrics: series.metrics, dimensions: series.dimensions, startDate: '2026-11-25T16:00:00.000Z', endDate: '2026-11-25T22:59:59.999Z', interval: 'hour' },
        pagination: { page: 1, limit: 100, total: 7, pages: 1 },
      },
    },
  },
  drillDown: {
    summary: 'A breakdown with compare',
    value: {
      success: true,
      data: {
        results: [
          { dimensions: ['/api/checkout', 502], metrics: [37, 34, 27680.75], comparison: [0, 0, null], change: [null, null, null] },
          { dimensions: ['/api/checkout', 504], metrics: [20, 17, 24579.72], comparison: [0, 0, null], change: [null, null, null] },
          { dimensions: ['/api/cart', 500], metrics: [12, 12, 1391.72], comparison: [9, 8, 1419.55], change: [0.3333, 0.5, -0.0196] },
          { dimensions: ['/api/search?q=hat', 500], metrics: [2, 2, 31], comparison: [0, 0, null], change: [null, null, null] },
          { dimensions: ['/api/checkout', 500], metrics: [1, 1, 15], comparison: [4, 4, 1097.36], change: [-0.75, -0.75, -0.9863] },
        ],
        meta: { metrics: drillDown.metrics, dimensions: drillDown.dimensions, startDate: '2026-11-25T18:00:00.000Z', endDate: '2026-11-25T20:59:59.999Z', interval: null },
        pagination: { page: 1, limit: 5, total: 6, pages: 2 },
      },
    },
  },
  batch: {
    summary: 'A batch: each answer in its query\'s place, a failed one as the single form would answer it',
    value: {
      success: true,
      data: {
        answers: [
          { success: true, data: { results: [{ dimensions: [], metrics: [4749, 312] }], meta: { metrics: ['requests', 'visitors'], dimensions: [], startDate: '2026-11-24T10:37:05.000Z', endDate: '2026-11-25T10:37:05.000Z', interval: null }, pagination: { page: 1, limit: 100, total: 1, pages: 1 } } },
          { success: true, data: { results: [{ dimensions: ['/'], metrics: [1204] }], meta: { metrics: ['requests'], dimensions: ['url'], startDate: '2026-11-24T10:37:05.000Z', endDate: '2026-11-25T10:37:05.000Z', interval: null }, pagination: { page: 1, limit: 10, total: 1, pages: 1 } } },
          { success: false, status: 404, error: 'Domain not found' },
        ],
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
      '128 ms, else within 1 % of the exact value. A time dimension with more than 10,000 buckets, or a series of more than 100,000 rows, is refused (422). ' +
      'Read from the rollups where built (fast at any size; time by hours or longer): any metric by `domain` and time, filters on `domain` only; ' +
      'the metrics of sums (requests, errorRate, clientErrorRate, bandwidth, averageResponseTime, totalResponseTime) by `statusCode`/`statusClass`, by `userAgent`, by `referrerHost`, by `path`, by `ipAddress` (not under a cidr filter), by the user agent classes, by `url`/`path`, and by `url`/`path`/`statusCode`/`statusClass` under an `is` filter ' +
      'keeping statuses of 400 and above, with filters on those dimensions. Every other shape reads the raw rows of the window. ' +
      'The batch form `{"queries": [body, …]}` (up to 32) answers `{"answers": [...]}` in the same order, each `{"success": true, "data": …}` or the ' +
      '`{"success": false, "status", "error", "details"}` the single form would answer for it (404, 422, 503): one failed query leaves the others their figures. ' +
      'Answers are reused while the rows they read are unchanged; a row stored before a request shows in its answer. A window ending now ends at the next multiple of 5 s.',
    request: jsonBody(queryRequestBody, requestExamples),
    responses: {
      200: jsonContent(dataEnvelope(z.union([queryResultSchema, queryBatchResultSchema])), 'The result rows; with the batch form, the answers', answerExamples),
      ...commonErrors,
      404: notFoundResponse('Domain'),
    },
  }),
};

/** Mounted at /api/logs: POST /api/logs/query. */
export function queryRoutes(services: Services) {
  const app = createRouter();
  app.use('/query', requireAuth(services));
  app.openapi(
    routes.query,
    async (c) => {
      const body = c.req.valid('json');
      if ('queries' in body) return c.json(ok({ answers: await queryLogsBatch(services, c.var.principal, body.queries) }), 200);
      return c.json(ok(await queryLogs(services, c.var.principal, body)), 200);
    },
    // A body failing both forms answers the 422 of the form it is of, as the single form always has;
    // a batch's queries are checked one by one (queryLogsBatch), each failing in its own place.
    (result, c) => {
      if (!result.success) {
        // The validator hands the body as sent beside a failure (@hono/zod-validator), untyped.
        const sent = (result as { data?: unknown }).data;
        throw validationFailed((isBatch(sent) ? queryBatchBody : queryBody).safeParse(sent).error!);
      }
      if (!isBatch(result.data)) return app.defaultHook!(result, c);
    },
  );
  return app;
}
