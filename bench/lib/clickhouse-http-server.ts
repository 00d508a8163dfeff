/**
 * test/support/clickhouse-http.ts (a ClickHouse HTTP interface in front of a chDB session) as a
 * process of its own, standing in for a ClickHouse server: chDB binds one data directory per
 * process, and a bench measuring a server-mode client must not count the engine's memory in it.
 *
 *   npx tsx bench/lib/clickhouse-http-server.ts [DATA_DIR]
 *
 * Listens on a free port of 127.0.0.1, prints `URL http://127.0.0.1:<port>` once it answers, and
 * on SIGTERM or SIGINT closes the session and exits 0. Without DATA_DIR the data lives in a
 * temporary directory, removed on exit.
 *
 * With CLICKHOUSE_HTTP_REPORT_INSERTS=1 it also prints a line for every INSERT statement the
 * engine runs, as it completes: `INSERT {"table":"access_logs","rows":N,"ms":T,"at":EPOCH_MS}`
 * (rows: what the statement read; ms: its time in the engine, queueing excluded). Inserts that
 * materialized views make are not statements and are not reported. chDB has no system.query_log
 * or system.part_log to count them afterwards.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Session } from 'chdb';
import { startClickhouseHttp } from '../../test/support/clickhouse-http.js';

if (process.env.CLICKHOUSE_HTTP_REPORT_INSERTS === '1') reportInserts();

/** Wraps the session's statement methods (this process runs nothing else) to report each INSERT. */
function reportInserts(): void {
  type Run = (this: Session, query: string, ...rest: never[]) => Promise<{ rowsRead: number }>;
  const proto = Session.prototype as unknown as Record<'queryAsync' | 'queryBindAsync', Run>;
  for (const method of ['queryAsync', 'queryBindAsync'] as const) {
    const original = proto[method];
    proto[method] = async function (this: Session, query: string, ...rest: never[]) {
      const table = /^\s*INSERT\s+INTO\s+([\w.`"]+)/i.exec(query)?.[1]?.replace(/[`"]/g, '');
      if (!table) return original.call(this, query, ...rest);
      const started = performance.now();
      const result = await original.call(this, query, ...rest);
      console.log(`INSERT ${JSON.stringify({ table, rows: result.rowsRead, ms: Math.round((performance.now() - started) * 10) / 10, at: Date.now() })}`);
      return result;
    };
  }
}

const given = process.argv[2];
const dataDir = given ?? fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-clickhouse-http-'));
// Port 0: the kernel picks a free one while listening, so no other process can take it first.
const front = await startClickhouseHttp({ dataDir, port: 0 });

let stopping = false;
const stop = async () => {
  if (stopping) return;
  stopping = true;
  await front.close();
  if (!given) fs.rmSync(dataDir, { recursive: true, force: true });
  process.exit(0);
};
process.on('SIGTERM', () => void stop());
process.on('SIGINT', () => void stop());

console.log(`URL ${front.url}`);
