/**
 * The commands that are a process of their own: `serve`, `migrate` and the ingest worker. They open
 * the stores themselves and never run through a server's control socket.
 */
import type { Command } from 'commander';
import { loadConfig } from '../../../core/config.js';
import { createLogger } from '../../../core/log.js';
import { loadIngestConfig } from '../../../ingest/config.js';
import { stopOnSignals } from '../../shutdown.js';
import { logToStderr } from '../local-host.js';
import type { CommandHost } from '../host.js';

export function registerProcessCommands(program: Command, host: CommandHost, ingest: Command): void {
  program
    .command('serve')
    .description('serve the API (and, with INGEST_CONFIG, the ingest worker); CLI commands run through it meanwhile')
    .action(async () => {
      const config = loadConfig();
      const { runServer } = await import('../../server.js');
      await runServer(config, createLogger(config.logLevel));
    });

  program
    .command('migrate')
    .description('apply pending Postgres and ClickHouse migrations, then exit')
    .action(async () => {
      const config = loadConfig();
      const log = createLogger(config.logLevel, logToStderr());
      // Through openStores, so an embedded DATA_DIR in use by a running `serve` is refused.
      const { openStores } = await import('../../runtime.js');
      const stores = await openStores(config, log);
      try {
        host.out(`applied ${stores.applied.postgres} Postgres and ${stores.applied.clickhouse} ClickHouse migrations\n`);
        // Rows stored before their user agent's class was (sql/clickhouse/008), classified now.
        const { startUserAgentBackfill } = await import('../../../ingest/user-agent-backfill.js');
        const classified = await startUserAgentBackfill({ db: stores.db, clickhouse: stores.clickhouse, log }).done;
        if (classified.rows > 0) host.out(`classified the user agents of ${classified.rows} earlier access rows\n`);
        if (!classified.complete) host.out('another process is classifying the user agents of earlier access rows\n');
      } finally {
        await stores.close();
      }
    });

  ingest
    .description('the ingest worker: follow the files and syslog inputs of an ingest config into ClickHouse (docs/reference/ingest.md)')
    .option('--config <file>', 'the ingest config (YAML)')
    .action(async (opts: { config?: string }) => {
      // Not a required option: `ingest validate --config` is the subcommand's.
      if (!opts.config) ingest.error("error: required option '--config <file>' not specified");
      const config = loadConfig();
      const log = createLogger(config.logLevel);
      const ingestConfig = await loadIngestConfig(opts.config!);
      const [{ openStores }, { startIngest }, { Metrics }, { startMetricsListener }] = await Promise.all([
        import('../../runtime.js'),
        import('../../../ingest/worker.js'),
        import('../../metrics/registry.js'),
        import('../../metrics/listener.js'),
      ]);
      const stores = await openStores(config, log);
      const metrics = config.metrics ? new Metrics() : undefined;
      let metricsListener: { close(): Promise<void> } | null = null;
      try {
        // METRICS_LISTEN without a token, else HOST:PORT behind METRICS_TOKEN: the worker has no API port to share.
        metricsListener = metrics ? await startMetricsListener(config, metrics, log) : null;
        const worker = await startIngest(ingestConfig, { db: stores.db, clickhouse: stores.clickhouse, log, dataDir: config.dataDir, statsIntervalMs: config.ingestStatsIntervalMs, batchDelayMs: config.ingestBatchMs, metrics });
        stopOnSignals(log, async () => {
          await metricsListener?.close();
          await worker.close();
          await stores.close();
        });
      } catch (err) {
        await metricsListener?.close();
        await stores.close();
        throw err;
      }
    });
}
