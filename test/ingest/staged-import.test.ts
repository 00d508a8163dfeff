/**
 * An import whose lines ClickHouse parses gives what the JavaScript parser gives
 * (test/support/staged-import.ts), on the embedded store.
 */
import { afterAll, beforeAll, describe, it } from 'vitest';
import { FORMAT } from '../support/ingest.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { compareImports, replayStoresNothingTwice, SHOP_FORMAT } from '../support/staged-import.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
});
afterAll(async () => {
  await t?.close();
});

describe('an import parsed by ClickHouse', () => {
  it('stores what the JavaScript parser stores, line for line (combined with $request_time)', async () => {
    await compareImports(t.runtime.db, t.runtime.clickhouse, t.dataDir, FORMAT);
  });

  it('stores what the JavaScript parser stores, line for line (a shop format with $upstream_response_time)', async () => {
    await compareImports(t.runtime.db, t.runtime.clickhouse, t.dataDir, SHOP_FORMAT);
  });

  it('a replay of every chunk, the checkpoints lost after the inserts, stores nothing twice', async () => {
    await replayStoresNothingTwice(t.runtime.db, t.runtime.clickhouse, t.dataDir);
  });
});
