import type { AddressInfo } from 'node:net';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import type { Config } from '../../core/config.js';
import type { Logger } from '../../core/log.js';
import { handleError } from '../http/errors.js';
import { NODE_SERVER_OPTIONS } from '../http/node-server.js';
import type { Metrics } from './registry.js';
import { metricsRoutes } from './routes.js';

export interface MetricsListener {
  /** The bound address (port 0 in METRICS_LISTEN picks a free port). */
  readonly port: number;
  close(): Promise<void>;
}

/**
 * Serves GET /metrics alone: on METRICS_LISTEN without a token (`serve` with METRICS_LISTEN), or,
 * without METRICS_LISTEN, on HOST:PORT behind METRICS_TOKEN (`tailhouse ingest`, which has no API
 * port to share). An address that cannot be bound fails the start.
 */
export async function startMetricsListener(config: Config, metrics: Metrics, log: Logger): Promise<MetricsListener> {
  const at = config.metricsListen ?? { host: config.host, port: config.port };
  const token = config.metricsListen ? null : config.metricsToken;
  // loadConfig refuses METRICS=true with neither, so this only guards against a hand-made Config.
  if (token === undefined) throw new Error('metrics need METRICS_LISTEN or METRICS_TOKEN');
  const app = new Hono();
  app.route('/', metricsRoutes(metrics, token));
  app.notFound((c) => c.json({ success: false, error: 'Not found' }, 404));
  app.onError((err, c) => handleError(err, c, log));
  const server = createAdaptorServer({ fetch: app.fetch, serverOptions: NODE_SERVER_OPTIONS });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(at.port, at.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address() as AddressInfo;
  log.info({ host: at.host, port, bearerRequired: token !== null }, 'metrics listening');
  return {
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ('closeIdleConnections' in server) server.closeIdleConnections();
      }),
  };
}
