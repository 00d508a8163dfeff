import { serve } from '@hono/node-server';
import { createApp } from './app.js';
import type { Config } from './config.js';
import type { Logger } from './log.js';
import { openRuntime } from './runtime.js';

/**
 * `tailhouse serve`: the API on PORT. SIGTERM/SIGINT stop accepting connections, let requests in
 * flight finish, then close both stores so PGlite and chDB are never left half-written.
 */
export async function runServer(config: Config, log: Logger): Promise<void> {
  const runtime = await openRuntime(config, log);
  const app = createApp(runtime);
  const server = serve({ fetch: app.fetch, port: config.port, hostname: config.host }, (info) => {
    log.info({ port: info.port, host: config.host, mode: config.databaseUrl ? 'server' : 'embedded', baseUrl: config.baseUrl }, 'listening');
  });
  let stopping = false;
  const stop = (signal: string) => {
    if (stopping) {
      log.warn({ signal }, 'second signal; exiting at once');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    server.close(async () => {
      await runtime.close();
      log.info('stopped');
      process.exit(0);
    });
    // Idle keep-alive connections would hold server.close open.
    if ('closeIdleConnections' in server) server.closeIdleConnections();
  };
  process.on('SIGTERM', () => stop('SIGTERM'));
  process.on('SIGINT', () => stop('SIGINT'));
}
