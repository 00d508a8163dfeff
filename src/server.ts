import { serve } from '@hono/node-server';
import { loadIngestConfig } from '../ingest/config.js';
import { startUserAgentBackfill } from '../ingest/user-agent-backfill.js';
import { startIngest, type IngestWorker } from '../ingest/worker.js';
import { startAlertEvaluator } from './alerts/evaluator.js';
import { createApp } from './app.js';
import { serveCommands } from './control/server.js';
import { NODE_SERVER_OPTIONS } from './http/node-server.js';
import { createTailHub } from './logs/tail/service.js';
import { startMetricsListener, type MetricsListener } from './metrics/listener.js';
import { Metrics } from './metrics/registry.js';
import { startStatsRollups } from './rollups/builder.js';
import { buildWebAssets } from './web/assets.js';
import type { Config } from '../core/config.js';
import type { Logger } from '../core/log.js';
import { openRuntime } from './runtime.js';
import { stopOnSignals } from './shutdown.js';

/**
 * `tailhouse serve`: the API on PORT, the ingest worker beside it when INGEST_CONFIG is set
 * (docs/reference/ingest.md), the alert evaluator, the stats rollup builder and the user agent backfill. SIGTERM/SIGINT stop accepting connections, end the live tails, let requests in flight and batches being
 * written finish, then close both stores so PGlite and chDB are never left half-written.
 */
export async function runServer(config: Config, log: Logger): Promise<void> {
  // A bad ingest config is reported before anything is opened.
  const ingestConfig = config.ingestConfig ? await loadIngestConfig(config.ingestConfig) : null;
  const runtime = await openRuntime(config, log);
  const metrics = config.metrics ? new Metrics() : undefined;
  let ingest: IngestWorker | null = null;
  let metricsListener: MetricsListener | null = null;
  try {
    if (config.metricsListen && metrics) metricsListener = await startMetricsListener(config, metrics, log);
    if (ingestConfig) {
      ingest = await startIngest(ingestConfig, { db: runtime.db, clickhouse: runtime.clickhouse, log, dataDir: config.dataDir, statsIntervalMs: config.ingestStatsIntervalMs, batchDelayMs: config.ingestBatchMs, metrics });
    }
  } catch (err) {
    await metricsListener?.close();
    await runtime.close();
    throw err;
  }
  // With several processes on one Postgres, one of them evaluates each interval (docs/reference/alerts.md#evaluation).
  const alerts = startAlertEvaluator({
    db: runtime.db,
    clickhouse: runtime.clickhouse,
    mailer: runtime.mailer,
    log,
    baseUrl: config.baseUrl,
    intervalMs: config.alertIntervalS * 1000,
    groupWaitMs: config.alertGroupWaitS * 1000,
    repeatMs: config.alertRepeatS * 1000,
    metrics,
    delivery: { allowNetworks: config.webhookAllowNetworks },
  });
  // Stats rollups are built here, beside ingest, not on its insert path (src/rollups/builder.ts).
  const rollups = startStatsRollups({ db: runtime.db, clickhouse: runtime.clickhouse, log, retentionDays: config.logRetentionDays, metrics });
  // Rows stored before their user agent's class was (sql/clickhouse/008) are classified meanwhile.
  const userAgents = startUserAgentBackfill({ db: runtime.db, clickhouse: runtime.clickhouse, log });
  userAgents.done.catch((err: unknown) => log.error({ err }, 'classifying the user agents of earlier access rows failed; the next start tries again'));
  // CLI commands beside this server run on its stores, through the DATA_DIR lock socket (src/control/).
  const commands = serveCommands(runtime);
  const tail = createTailHub(runtime);
  const app = createApp({ ...runtime, metrics }, { tail, web: await buildWebAssets() });
  const server = serve({ fetch: app.fetch, port: config.port, hostname: config.host, serverOptions: NODE_SERVER_OPTIONS }, (info) => {
    log.info({ port: info.port, host: config.host, mode: config.databaseUrl ? 'server' : 'embedded', baseUrl: config.baseUrl, ingest: ingestConfig?.path ?? null }, 'listening');
  });
  stopOnSignals(log, async () => {
    const closed = new Promise<void>((resolve) => server.close(() => resolve()));
    // Idle keep-alive connections would hold server.close open, and so would live tails, which
    // never end by themselves: each gets `event: end` and its connection closes once it is read.
    if ('closeIdleConnections' in server) server.closeIdleConnections();
    await Promise.all([closed, tail.close(), commands.close(), metricsListener?.close(), ingest?.close(), alerts.stop(), rollups.stop(), userAgents.stop()]);
    await runtime.close();
  });
}
