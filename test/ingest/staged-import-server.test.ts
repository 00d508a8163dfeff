/**
 * An import whose lines ClickHouse parses, in server mode: the lines go as the body of an
 * `INSERT … SELECT … FROM input()` (test/support/clickhouse-http.ts stands in for the server), and
 * give what the JavaScript parser gives (test/support/staged-import.ts).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, it } from 'vitest';
import { loadConfig } from '../../core/config.js';
import { createLogger } from '../../core/log.js';
import { openStores, type Stores } from '../../src/runtime.js';
import { freshDatabase, JWT_SECRET } from '../support/app.js';
import { startClickhouseHttp, type ClickhouseHttp } from '../support/clickhouse-http.js';
import { compareImports, SHOP_FORMAT } from '../support/staged-import.js';

describe('an import parsed by a ClickHouse server', () => {
  let dir: string;
  let front: ClickhouseHttp;
  let database: Awaited<ReturnType<typeof freshDatabase>>;
  let stores: Stores;
  beforeAll(async () => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-staged-server-'));
    front = await startClickhouseHttp({ dataDir: path.join(dir, 'clickhouse') });
    database = await freshDatabase();
    stores = await openStores(loadConfig({ DATA_DIR: path.join(dir, 'data'), CLICKHOUSE_URL: front.url, JWT_SECRET, ...(database.url ? { DATABASE_URL: database.url } : {}) }), createLogger('silent'));
  });
  afterAll(async () => {
    await stores?.close();
    await front?.close();
    await database?.drop();
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('stores what the JavaScript parser stores, the lines sent as the request body', async () => {
    await compareImports(stores.db, stores.clickhouse, path.join(dir, 'data'), SHOP_FORMAT);
  });
});
