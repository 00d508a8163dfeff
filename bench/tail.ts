/**
 * bench/tail: the live tail under load. One domain with BENCH_CLIENTS tailing clients (real HTTP,
 * real sockets, spread over ten sets of filters), rows written through the ingest sink at
 * BENCH_RATE rows a second for BENCH_SECONDS, in embedded mode.
 *
 *   npx tsx bench/tail.ts      # BENCH_CLIENTS (default 100), BENCH_RATE (200), BENCH_SECONDS (20), BENCH_URL_BYTES (100)
 *
 * Prints, never asserts: the queries the hub sent and their time, the latency from a row's write to
 * its event on the clients (the row's timestamp is taken just before it is written), the events
 * delivered, and the process's memory. The clients run in the same process as the server, so
 * their parsing competes with it for the CPU: the figures are an upper bound.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { createIdAllocator } from '../ingest/ids.js';
import { dedupToken, writeRows, type AccessRow, type ErrorRow } from '../ingest/sinks/clickhouse.js';
import { createApp } from '../src/app.js';
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import { insertDomain } from '../src/domains/store.js';
import { NODE_SERVER_OPTIONS } from '../src/http/node-server.js';
import { createTailHub, TAIL_LIMITS } from '../src/logs/tail/service.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, login, startTestApp } from '../test/support/app.js';

const CLIENTS = Number(process.env.BENCH_CLIENTS ?? 100);
const RATE = Number(process.env.BENCH_RATE ?? 200);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 20);
const URL_BYTES = Number(process.env.BENCH_URL_BYTES ?? 100);
const FILTERS = ['', 'statusCode=5xx', 'statusCode=404', 'method=POST', 'url=%2Fapi%2F', 'url=*%2Forders*', 'ipAddress=10.0.0.0%2F8', 'level=error', 'type=error', 'type=access'];

const quantile = (sorted: number[], q: number) => (sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : NaN);
const summary = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  return `p50 ${quantile(s, 0.5).toFixed(0)} ms, p95 ${quantile(s, 0.95).toFixed(0)} ms, max ${(s.at(-1) ?? NaN).toFixed(0)} ms (n=${s.length})`;
};
const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(0)} MB`;

async function main(): Promise<void> {
  const t = await startTestApp();
  const queryMs: number[] = [];
  const timed = new Proxy(t.runtime.clickhouse, {
    get(target, prop, receiver) {
      if (prop === 'query') {
        return async (params: Parameters<ClickHouseClient['query']>[0]) => {
          const started = performance.now();
          try {
            return await target.query(params);
          } finally {
            queryMs.push(performance.now() - started);
          }
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  // Every client is the administrator's: the per-user limit (TAIL_PER_USER) is lifted to the process's.
  const hub = createTailHub({ ...t.runtime, clickhouse: timed }, { maxPerUser: TAIL_LIMITS.maxClients });
  const app = createApp(t.runtime, { tail: hub });
  const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: NODE_SERVER_OPTIONS });
  await new Promise((resolve) => server.once('listening', resolve));
  const port = (server.address() as AddressInfo).port;
  const token = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  const domain = await insertDomain(t.runtime.db, { name: 'tail-bench.example.com', ownerId: null });

  const latencies: number[] = [];
  let events = 0;
  let bytes = 0;
  const requests: http.ClientRequest[] = [];
  await Promise.all(
    Array.from({ length: CLIENTS }, (_, i) => {
      return new Promise<void>((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port, path: `/api/logs/domains/${domain.id}/tail?${FILTERS[i % FILTERS.length]}`, headers: { authorization: `Bearer ${token}` }, agent: false }, (res) => {
          if (res.statusCode !== 200) return reject(new Error(`client ${i}: ${res.statusCode}`));
          res.setEncoding('utf8');
          let buffer = '';
          res.on('data', (chunk: string) => {
            bytes += chunk.length;
            buffer += chunk;
            let end: number;
            while ((end = buffer.indexOf('\n\n')) >= 0) {
              const message = buffer.slice(0, end);
              buffer = buffer.slice(end + 2);
              const data = /^data: (.*)$/m.exec(message)?.[1];
              if (data) {
                events++;
                latencies.push(Date.now() - Date.parse(JSON.parse(data).timestamp));
              }
            }
          });
          resolve();
        });
        req.on('error', () => {});
        requests.push(req);
      });
    }),
  );
  const rssBefore = process.memoryUsage().rss;
  queryMs.length = 0;

  // Writing: one batch every 100 ms, an access file and an error file, as the ingest writes them.
  const ids = createIdAllocator(t.runtime.db);
  const files = { access: { identity: 'bench-access', offset: 0 }, error: { identity: 'bench-error', offset: 0 } };
  const perBatch = Math.max(1, Math.round(RATE / 10));
  const started = Date.now();
  let written = 0;
  let peakRss = rssBefore;
  while (Date.now() - started < SECONDS * 1000) {
    const next = started + (written / perBatch) * 100;
    await new Promise((r) => setTimeout(r, Math.max(0, next - Date.now())));
    const errorsToo = written % (perBatch * 10) === 0;
    const batch = async (kind: 'access' | 'error', count: number) => {
      const file = files[kind];
      const start = file.offset;
      file.offset += count * 200;
      const idOf = await ids.forBatch(file.identity, [domain.id], start, file.offset);
      const now = Date.now();
      const access: AccessRow[] = [];
      const error: ErrorRow[] = [];
      for (let k = 0; k < count; k++) {
        const id = idOf(domain.id, start + k * 200);
        const n = written + k;
        if (kind === 'access') {
          access.push({
            domainId: domain.id,
            id,
            timestamp: now,
            ipAddress: n % 3 ? '203.0.113.9' : '10.1.2.3',
            method: n % 5 ? 'GET' : 'POST',
            url: `/${n % 4 ? 'api' : 'shop'}/orders/${n}/${'u'.repeat(URL_BYTES)}`,
            protocol: 'HTTP/1.1',
            statusCode: n % 20 === 0 ? 502 : n % 7 === 0 ? 404 : 200,
            responseSize: 512,
            referrer: '',
            userAgent: 'bench/1.0',
            responseTime: 3,
            host: null,
          });
        } else error.push({ domainId: domain.id, id, timestamp: now, level: 'error', message: `upstream timed out ${n}`, context: {} });
      }
      await writeRows(t.runtime.clickhouse, { access, error, rejects: [] }, dedupToken(file.identity, start, file.offset));
    };
    await batch('access', perBatch);
    if (errorsToo) await batch('error', 1);
    written += perBatch;
    peakRss = Math.max(peakRss, process.memoryUsage().rss);
  }
  const elapsed = (Date.now() - started) / 1000;
  // The last rows' events.
  await new Promise((r) => setTimeout(r, 2_500));

  console.log(`live tail: ${CLIENTS} clients (${FILTERS.length} sets of filters), ${written} access rows in ${elapsed.toFixed(1)} s (${(written / elapsed).toFixed(0)}/s), urls of ${URL_BYTES} bytes`);
  console.log(`  ClickHouse queries: ${queryMs.length} (${(queryMs.length / (elapsed + 2.5)).toFixed(2)}/s), each ${summary(queryMs)}`);
  console.log(`  written → event on a client: ${summary(latencies)}`);
  console.log(`  events delivered: ${events} (${mb(bytes)} of stream), tailing clients at the end: ${hub.clients}`);
  console.log(`  process RSS: ${mb(rssBefore)} with the clients connected, peak ${mb(peakRss)} while writing`);
  for (const req of requests) req.destroy();
  await hub.close();
  server.close();
  await t.close();
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
