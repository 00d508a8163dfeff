/**
 * Server mode with ClickHouse going away: the worker talks to ClickHouse over HTTP
 * (`@clickhouse/client`, CLICKHOUSE_URL) through a real ClickHouse HTTP interface served by chDB
 * (support/clickhouse-http.ts) that the test stops, starts, or makes answer 503.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseIngestConfig } from '../../ingest/config.js';
import { startIngest, type IngestWorker } from '../../ingest/worker.js';
import { loadConfig } from '../../core/config.js';
import { createLogger } from '../../core/log.js';
import { openStores, type Stores } from '../../src/runtime.js';
import { freshDatabase, JWT_SECRET } from '../support/app.js';
import { startClickhouseHttp, type ClickhouseHttp } from '../support/clickhouse-http.js';
import { accessIds, accessLines, append, FORMAT, newDomain, until } from '../support/ingest.js';

let dir: string;
let front: ClickhouseHttp;
let database: Awaited<ReturnType<typeof freshDatabase>>;
let stores: Stores;
const workers: IngestWorker[] = [];
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-ch-down-'));
  front = await startClickhouseHttp({ dataDir: path.join(dir, 'clickhouse') });
  database = await freshDatabase();
  const config = loadConfig({ DATA_DIR: path.join(dir, 'data'), CLICKHOUSE_URL: front.url, JWT_SECRET, ...(database.url ? { DATABASE_URL: database.url } : {}) });
  stores = await openStores(config, log);
});

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
});

afterAll(async () => {
  await stores?.close();
  await front?.close();
  await database?.drop();
  fs.rmSync(dir, { recursive: true, force: true });
});

async function follow(domain: string, file: string): Promise<IngestWorker> {
  const config = parseIngestConfig(`sources:\n  - domain: ${domain}\n    access: ${JSON.stringify(file)}\n    format: ${JSON.stringify(FORMAT)}\n`, path.join(dir, 'ingest.yaml'));
  const worker = await startIngest(config, {
    db: stores.db,
    clickhouse: stores.clickhouse,
    log,
    dataDir: path.join(dir, 'data'),
    statsIntervalMs: 0,
    backoff: { initialMs: 50, maxMs: 400 },
    pollMs: 50,
  });
  workers.push(worker);
  return worker;
}

const rowsOf = async (domainId: number) => (await accessIds(stores.clickhouse, domainId)).rows;

describe('ClickHouse unreachable', () => {
  it('retries with back-off while down, reads nothing more, then catches up with every line once', { timeout: 60_000 }, async () => {
    const domain = await newDomain(stores.db);
    const file = path.join(dir, `down-${domain.id}.log`);
    append(file, accessLines(0, 2_000));
    const worker = await follow(domain.name, file);
    await until(async () => (await rowsOf(domain.id)) === 2_000, 'the first lines');

    await front.stop();
    append(file, accessLines(2_000, 12_000));
    const down = await until(() => {
      const s = worker.stats()[0]!;
      return s.state === 'retrying' && s.retries >= 3 ? s : undefined;
    }, 'three failed writes');
    expect(down.lastError).toMatch(/^writing to ClickHouse: /);
    // Nothing was counted as inserted while ClickHouse was away, and the file holds the backlog.
    expect(down.inserted).toBe(2_000);
    expect(down.lagBytes).toBeGreaterThan(0);

    await front.start();
    await until(async () => (await rowsOf(domain.id)) === 12_000, 'the backlog to land', 30_000);
    expect(await accessIds(stores.clickhouse, domain.id)).toEqual({ rows: 12_000, ids: 12_000 });
    const up = await until(() => (worker.stats()[0]!.lagBytes === 0 ? worker.stats()[0]! : undefined), 'the lag to drain');
    expect(up).toMatchObject({ state: 'running', inserted: 12_000, lastError: null });
  });

  it('answers 503 (a proxy in front of a busy server): retried, stored once', { timeout: 60_000 }, async () => {
    const domain = await newDomain(stores.db);
    const file = path.join(dir, `busy-${domain.id}.log`);
    const worker = await follow(domain.name, file);
    // The worker's inserts, not this test's polling queries, meet the failures.
    front.failNext(4, 503, /^\s*INSERT\b/i);
    append(file, accessLines(0, 500));
    await until(async () => (await rowsOf(domain.id)) === 500, 'the lines');
    expect(await accessIds(stores.clickhouse, domain.id)).toEqual({ rows: 500, ids: 500 });
    expect(worker.stats()[0]!.retries).toBeGreaterThanOrEqual(1);
  });
});
