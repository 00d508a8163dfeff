/**
 * The user agent backfill (ingest/user-agent-backfill.ts): rows stored before migration 008, over
 * several days (daily partitions), get the class the sink would have given them; rows the sink
 * wrote after the migration keep theirs; a second run finds nothing; a run stopped part-way (the
 * lease taken by another process) leaves the rest for the next; `serve`'s start under the lease.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dedupToken, insertAccessBatch } from '../../ingest/sinks/clickhouse.js';
import { classifyUserAgent } from '../../ingest/transforms/user-agent.js';
import { backfillUserAgentClasses, startUserAgentBackfill } from '../../ingest/user-agent-backfill.js';
import { migrateClickhouse, openClickhouse, selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { claimLease, releaseLease } from '../../core/db/leases.js';
import { migratePostgres, SQL_DIR } from '../../core/db/migrate.js';
import { openPglite, type Db } from '../../core/db/postgres.js';
import { createLogger } from '../../core/log.js';
import { accessRow } from '../support/ingest.js';
import { AGENTS, CLASS_VALUES_SQL } from '../support/user-agents.js';
import { DAY_MS } from '../../core/durations.js';
/** Noon five days ago: the rows spread over five days from there, five partitions. */
const START = Math.floor(Date.now() / DAY_MS) * DAY_MS - 5 * DAY_MS + DAY_MS / 2;
const log = createLogger('silent');

// Agents as a client may send them: SQL and LIKE metacharacters, NUL, 8 KB, and the real ones.
const HOSTILE = [`'; DROP TABLE access_logs; --`, `"\\%_*;--`, 'nul\0byte', `${AGENTS.find(([what]) => what === 'GPTBot')![1]} ${'x'.repeat(8192)}`, 'tab\tand\nline'];
const USER_AGENTS = [...AGENTS.map(([, ua]) => ua), ...HOSTILE];

let dir: string;
let ch: ClickHouseClient;
let db: Db;
let nextId = 1;

/** Rows the way the table held them before 008: no class columns, so JSONEachRow of the old columns. */
async function insertOld(count: number, from: number): Promise<void> {
  const values = Array.from({ length: count }, (_, i) => ({
    domain_id: 1,
    id: nextId++,
    timestamp: new Date(from + (i * 5 * DAY_MS) / count).toISOString().replace('T', ' ').replace('Z', ''),
    ip_address: '198.51.100.7',
    method: 'GET',
    url: `/old/${i}`,
    protocol: 'HTTP/1.1',
    status_code: 200,
    response_size: 10,
    referrer: '',
    user_agent: USER_AGENTS[i % USER_AGENTS.length]!,
    response_time: 5,
  }));
  await ch.insert({ table: 'access_logs', values, format: 'JSONEachRow' });
}

interface Stored {
  url: string;
  user_agent: string;
  browser: string;
  os: string;
  device: string;
  bot_name: string;
  bot_kind: string;
}

const stored = () => selectRows<Stored>(ch, `SELECT url, user_agent, ${CLASS_VALUES_SQL} FROM access_logs ORDER BY id`, {});
const unclassified = async () => Number((await selectRows<{ n: string }>(ch, 'SELECT count() AS n FROM access_logs WHERE agent_class = 0', {}))[0]!.n);

/** What the sink would have stored for the row's agent. */
function expectClassified(rows: Stored[]): void {
  for (const r of rows) {
    const { id: _id, ...c } = classifyUserAgent(r.user_agent);
    expect({ url: r.url, browser: r.browser, os: r.os, device: r.device, botName: r.bot_name, botKind: r.bot_kind }).toEqual({ url: r.url, ...c });
  }
}

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-ua-backfill-'));
  ch = await openClickhouse({ dataDir: path.join(dir, 'data') });
  db = await openPglite(path.join(dir, 'pg'));
  await migratePostgres(db, log);
  // The store as it was before migration 008, with rows in it.
  const before = path.join(dir, 'migrations-before-008');
  await fs.mkdir(before);
  for (const file of await fs.readdir(path.join(SQL_DIR, 'clickhouse'))) {
    if (file < '008') await fs.copyFile(path.join(SQL_DIR, 'clickhouse', file), path.join(before, file));
  }
  await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 }, before);
  await insertOld(400, START);
  expect(await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 })).toBeGreaterThan(0);
}, 120_000);

afterAll(async () => {
  await ch?.close();
  await db?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

describe('user agent backfill', () => {
  it('the rows stored before migration 010 read agent_class 0 (no class) until it runs', async () => {
    expect(await unclassified()).toBe(400);
  });

  it('stops before a partition when another process holds the lease, and the next run goes on', async () => {
    let claims = 0;
    const first = await backfillUserAgentClasses({ clickhouse: ch, log, claim: async () => ++claims === 1 });
    expect(first).toMatchObject({ partitions: 1, complete: false });
    expect(await unclassified()).toBe(400 - first.rows);
    expect(first.rows).toBeGreaterThan(0);
  });

  it('classifies every earlier row as the sink would, leaves the sink\'s rows as they are, and empties its table', async () => {
    // Rows written through the sink after the migration: classified on the way in.
    const fresh = USER_AGENTS.map((userAgent, i) => accessRow(i, { id: 10_000 + i, url: `/new/${i}`, timestamp: START + DAY_MS, userAgent }));
    await insertAccessBatch(ch, fresh, dedupToken('backfill-test', 0, fresh.length));
    const result = await backfillUserAgentClasses({ clickhouse: ch, log, claim: async () => true });
    expect(result).toMatchObject({ complete: true });
    expect(result.partitions).toBeGreaterThanOrEqual(4);
    expect(await unclassified()).toBe(0);
    const rows = await stored();
    expect(rows).toHaveLength(400 + fresh.length);
    expectClassified(rows);
    const [joined] = await selectRows<{ rows: string | null }>(ch, "SELECT total_rows AS rows FROM system.tables WHERE database = currentDatabase() AND name = 'user_agent_classes'", {});
    expect(Number(joined!.rows ?? 0)).toBe(0);
    expect(await backfillUserAgentClasses({ clickhouse: ch, log, claim: async () => true })).toEqual({ partitions: 0, rows: 0, agents: 0, complete: true });
  });

  it("serve's start: waits while another process holds the lease, runs once it is free", async () => {
    await insertOld(50, START + DAY_MS);
    expect(await unclassified()).toBe(50);
    await claimLease(db, 'user-agent-backfill', 'another process', 60_000);
    const held = await startUserAgentBackfill({ db, clickhouse: ch, log }).done;
    expect(held.complete).toBe(false);
    expect(await unclassified()).toBe(50);
    await releaseLease(db, 'user-agent-backfill', 'another process');
    const backfill = startUserAgentBackfill({ db, clickhouse: ch, log });
    expect(await backfill.done).toMatchObject({ rows: 50, complete: true });
    await backfill.stop();
    expect(await unclassified()).toBe(0);
    expectClassified(await stored());
  });
});
