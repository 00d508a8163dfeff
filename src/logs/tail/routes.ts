import { MINUTE_MS } from '../../../core/durations.js';
import type { ServerResponse } from 'node:http';
import { createRoute, z } from '@hono/zod-openapi';
import { requireAuth } from '../../auth/middleware.js';
import type { Services } from '../../context.js';
import { domainIdParams } from '../../domains/schemas.js';
import { commonErrors, errorResponse, notFoundResponse } from '../../http/envelope.js';
import { bearerSecurity, createRouter } from '../../http/router.js';
import { tailHeaders, tailQuery } from './schemas.js';
import { TAIL_LIMITS, type TailHub } from './service.js';

const EXAMPLE =
  'retry: 3000\nid: 1.a1z141z4\n\n' +
  'id: 1.a1z141zb\nevent: access\ndata: {"id":4294967307,"timestamp":"2026-11-21T08:15:30.123Z","ipAddress":"203.0.113.7","method":"GET","url":"/","protocol":"HTTP/1.1","statusCode":200,"responseSize":512,"referrer":"","userAgent":"curl/8.5.0","responseTime":3}\n\n' +
  ': keepalive\n\n' +
  'event: end\ndata: {"reason":"token-expired"}\n\n';

const route = createRoute({
  tags: ['Logs'],
  security: bearerSecurity,
  method: 'get',
  path: '/domains/{domainId}/tail',
  summary: "Follow a domain's access and error entries as they are stored (Server-Sent Events)",
  description:
    'A `text/event-stream` of the entries stored from now on (docs/reference/logs.md, "Live tail"): `event: access` and `event: error`, `data:` the entry ' +
    'exactly as the listings return it, `id:` the place in the stream (send it back as `Last-Event-ID` to resume without loss or repeat). ' +
    'Filters as the access listing (`statusCode`, `ipAddress`, `url`, `method`) and the error listing (`level`). New entries are read once ' +
    `a second; an entry dated more than ${TAIL_LIMITS.windowMs / MINUTE_MS} minutes before it is stored (a backfill) is not sent. ` +
    'A message with only an `id:` moves the place over entries the filters leave out; `: keepalive` comments come every ' +
    `${TAIL_LIMITS.keepaliveMs / 1000} s. The stream ends with \`event: end\` and \`data: {"reason": …}\`: \`token-expired\` (sign in again), ` +
    '`access-revoked` (its session signed out or revoked, the user deactivated, the domain or `logs: read` taken away; checked every few seconds), ' +
    '`access-check-failed`, `shutdown`. A client that still has ' +
    `${TAIL_LIMITS.maxQueuedBytes / 1024 / 1024} MiB unread when new events come is disconnected. The token goes in the Authorization header only, never in the URL.`,
  request: { params: domainIdParams, query: tailQuery, headers: tailHeaders },
  responses: {
    200: { description: 'The stream', content: { 'text/event-stream': { schema: z.string().openapi({ example: EXAMPLE }) } } },
    ...commonErrors,
    404: notFoundResponse('Domain'),
    429: errorResponse(`This process already serves ${TAIL_LIMITS.maxClients} live tails, or the caller's user TAIL_PER_USER of them; see Retry-After`),
    503: errorResponse('The server is shutting down'),
  },
});

const STREAM_HEADERS = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-store',
  // nginx in front of the API would otherwise hold the events back in its proxy buffer.
  'X-Accel-Buffering': 'no',
  // The connection carries this one response: once it ends, nothing holds a shutdown open.
  Connection: 'close',
};

/** `GET /domains/:domainId/tail`, mounted under /api/logs. */
export function tailRoutes(services: Services, hub: TailHub) {
  const app = createRouter();
  app.openapi({ ...route, middleware: [requireAuth(services)] }, async (c) => {
    // Under the node server (not app.request() in tests), its response: destroying it cuts the connection.
    const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
    const body = await hub.open({
      principal: c.var.principal,
      authorization: c.req.header('authorization'),
      domainId: c.req.valid('param').domainId,
      query: c.req.valid('query'),
      resumeFrom: c.req.valid('header')['last-event-id'] ?? null,
      headOnly: c.req.method === 'HEAD',
      disconnect: outgoing ? () => outgoing.destroy() : undefined,
    });
    return new Response(body, { status: 200, headers: STREAM_HEADERS });
  });
  return app;
}
