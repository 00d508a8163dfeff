/**
 * sql/clickhouse/012_rollup_lists_behind_totals.sql: buckets built before the fix in
 * src/rollups/builder.ts (boundedByLists) whose total counts lines their lists lack are unbuilt by
 * the migration, and the builder builds them again; the buckets whose lists agree are kept.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateClickhouse, openClickhouse, selectRows, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { SQL_DIR } from '../../../core/db/migrate.js';
import { createLogger } from '../../../core/log.js';
import { buildRollups } from '../../../src/rollups/builder.js';
import { prngInt } from '../../support/random.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';
/** Six hours of yesterday: every hour and the day are complete, so the builder builds them all. */
const START = Math.floor(Date.now() / DAY_MS) * DAY_MS - DAY_MS + 6 * HOUR_MS;
const DOMAIN = 3;
const log = createLogger('silent');
const build = () => buildRollups(ch, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });

let dir: string;
let ch: ClickHouseClient;

/** Per bucket (span and start, seconds): the total's requests and each complete list's. */
const sums = () =>
  selectRows<{ span: string; bucket: number; total: string; status: string; agent: string }>(
    ch,
    `SELECT span, toUnixTimestamp(bucket) AS bucket, toString(sumIf(requests, dim = 'total')) AS total,
            toString(sumIf(requests, dim = 'status')) AS status, toString(sumIf(requests, dim = 'agent')) AS agent
     FROM access_rollups WHERE domain_id = {d:UInt32} GROUP BY span, bucket ORDER BY span, bucket`,
    { d: DOMAIN },
  );

let before: string;
let upTo012: string;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-lists-behind-'));
  before = path.join(dir, 'migrations-before-012');
  upTo012 = path.join(dir, 'migrations-up-to-012');
  ch = await openClickhouse({ dataDir: path.join(dir, 'data') });
  // The store as it was before migration 012, with rows built into rollups by today's builder: the
  // lists it writes added to the Enums as 016 has them (013 and 016 then empty the rollups, which
  // would leave nothing of 012's work to see, so the migrations run here stop at 012), and its short
  // lists in access_tops as 015 makes it (which touches no rollup row).
  for (const [folder, last] of [[before, '011'], [upTo012, '012']] as const) {
    await fs.mkdir(folder);
    for (const file of await fs.readdir(path.join(SQL_DIR, 'clickhouse'))) {
      if (file.slice(0, 3) <= last || file.startsWith('015_')) await fs.copyFile(path.join(SQL_DIR, 'clickhouse', file), path.join(folder, file));
    }
  }
  await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 }, before);
  const lists = await fs.readFile(path.join(SQL_DIR, 'clickhouse', '016_rollup_error_paths.sql'), 'utf8');
  for (const [alter] of lists.matchAll(/^ALTER TABLE \w+ MODIFY COLUMN dim .*$/gm)) await ch.command({ query: alter.replace(/;$/, '') });
  const int = prngInt(12);
  const values = Array.from({ length: 3_000 }, (_, i) => ({
    domain_id: DOMAIN,
    id: i + 1,
    timestamp: new Date(START + int(6 * HOUR_MS)).toISOString().replace('T', ' ').replace('Z', ''),
    ip_address: '198.51.100.7',
    method: 'GET',
    url: `/p/${int(50)}`,
    protocol: 'HTTP/1.1',
    status_code: [200, 404, 500][int(3)]!,
    response_size: 10,
    referrer: '',
    user_agent: `agent/${int(4)}`,
    response_time: 5,
    // Classified (a class the rollups may list; 0 would keep the buckets unbuilt).
    agent_class: 1,
  }));
  await ch.insert({ table: 'access_logs', values, format: 'JSONEachRow' });
  await build();
}, 120_000);

afterAll(async () => {
  await ch?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

describe('migration 012', () => {
  it('unbuilds the buckets whose lists hold fewer requests than their total, and the builder builds them again', async () => {
    const built = await sums();
    expect(built.length).toBe(7); // six hours and their day
    expect(built.every((b) => b.total === b.status && b.total === b.agent)).toBe(true);
    // What a build raced by an insert left: one hour's lists (and so its day's) short of its total.
    const hour = built.find((b) => b.span === 'hour')!.bucket;
    await ch.command({
      query: `DELETE FROM access_rollups WHERE domain_id = {d:UInt32} AND span = 'hour' AND bucket = toDateTime({b:UInt32}, 'UTC') AND dim IN ('status', 'agent') AND key IN ('404', 'agent/2') SETTINGS lightweight_deletes_sync = 2`,
      query_params: { d: DOMAIN, b: hour },
    });
    const day = Math.floor(hour / 86_400) * 86_400;
    await ch.command({
      query: `DELETE FROM access_rollups WHERE domain_id = {d:UInt32} AND span = 'day' AND dim = 'status' AND key = '404' SETTINGS lightweight_deletes_sync = 2`,
      query_params: { d: DOMAIN },
    });
    // The builder alone does not see it: the total still equals the rows counted.
    expect((await build()).hours).toBe(0);

    expect(await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 }, upTo012)).toBe(1);
    const after = await sums();
    const gone = (b: { span: string; bucket: number }) => (b.span === 'hour' && b.bucket === hour) || (b.span === 'day' && b.bucket === day);
    expect(after).toEqual(built.filter((b) => !gone(b)));

    const round = await build();
    expect(round.hours).toBe(1);
    expect(await sums()).toEqual(built);
  });
});
