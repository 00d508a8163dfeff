import type { Logger } from '../core/log.js';

/**
 * SIGTERM/SIGINT run `stop` once (it finishes work in flight and closes the stores), then exit 0;
 * a second signal exits at once. Used by `serve` and `ingest`.
 */
export function stopOnSignals(log: Logger, stop: () => Promise<void>): void {
  let stopping = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      log.warn({ signal }, 'second signal; exiting at once');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'shutting down');
    stop().then(
      () => {
        log.info('stopped');
        process.exit(0);
      },
      (err: unknown) => {
        log.error({ err }, 'shutdown failed');
        process.exit(1);
      },
    );
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
}
