/**
 * bench/lib/clickhouse-http-server.ts (chDB behind a ClickHouse HTTP front) started as a measured
 * child of a bench: the "server" of server-mode steps, in a process of its own.
 */
import path from 'node:path';
import { spawnMeasured, type MeasuredChild } from './measure.js';
import { ROOT } from './serve-child.js';
import { tail } from './util.js';

const CLICKHOUSE_HTTP = path.join(ROOT, 'bench', 'lib', 'clickhouse-http-server.ts');

/**
 * The shim on `dataDir`, measured from spawn to exit, once it has printed its URL. `env` replaces
 * the environment (default this process's); `onLine` sees each line it prints (see the server's
 * CLICKHOUSE_HTTP_REPORT_INSERTS).
 */
export async function spawnClickhouseHttp(dataDir: string, options: { env?: NodeJS.ProcessEnv; onLine?: (line: string) => void } = {}): Promise<{ url: string; server: MeasuredChild }> {
  let announce: (url: string) => void = () => {};
  const url = new Promise<string>((resolve) => (announce = resolve));
  const server = spawnMeasured(process.execPath, [...process.execArgv, CLICKHOUSE_HTTP, dataDir], {
    cwd: ROOT,
    env: options.env,
    onLine: (line) => {
      if (line.startsWith('URL ')) announce(line.slice(4));
      options.onLine?.(line);
    },
  });
  const exited = server.done.then((m) => {
    throw new Error(`the ClickHouse HTTP interface exited (${m.code ?? m.signal}) before it listened: ${tail(m.stderr || m.stdout)}`);
  });
  return { url: await Promise.race([url, exited]), server };
}
