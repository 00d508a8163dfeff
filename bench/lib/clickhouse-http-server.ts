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
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startClickhouseHttp } from '../../test/support/clickhouse-http.js';

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
