/**
 * src/logs/hour-counts.ts's query against a count in the test: the status codes counted per hour by the
 * insert (sql/clickhouse/007_hour_statuses.sql) for rows stored before that migration (its
 * backfill) and after it (the view), and access_logs for the partial hours at a range's ends.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migrateClickhouse, openClickhouse, selectRows, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { SQL_DIR } from '../../../core/db/migrate.js';
import { createLogger } from '../../../core/log.js';
import type { StatusCodeFilter } from '../../../src/logs/filters.js';
import { statusCountsQuery } from '../../../src/logs/hour-counts.js';
import { prngInt } from '../../support/random.js';
import { HOUR_MS } from '../../../core/durations.js';
/** Six whole hours ending at the last whole hour, so every row is in the past. */
const START = Math.floor(Date.now() / HOUR_MS) * HOUR_MS - 6 * HOUR_MS;
const CODES = [200, 200, 200, 301, 404, 404, 500, 502, 503];
const DOMAIN = 7;

interface Row {
  t: number;
  status: number;
}

let dir: string;
let ch: ClickHouseClient;
const rows: Row[] = [];

function generate(seed: number, n: number): Row[] {
  const int = prngInt(seed);
  return Array.from({ length: n }, () => ({ t: START + int(6 * HOUR_MS), status: CODES[int(CODES.length)]! }));
}

async function insert(batch: Row[], domainId = DOMAIN): Promise<void> {
  const values = batch.map((r, i) => ({
    domain_id: domainId,
    id: rows.length + i + 1,
    timestamp: new Date(r.t).toISOString().replace('T', ' ').replace('Z', ''),
    ip_address: '198.51.100.7',
    method: 'GET',
    url: '/',
    protocol: 'HTTP/1.1',
    status_code: r.status,
    response_size: 10,
    referrer: '',
    user_agent: 'test',
    response_time: 5,
  }));
  await ch.insert({ table: 'access_logs', values, format: 'JSONEachRow' });
}

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-hour-counts-'));
  ch = await openClickhouse({ dataDir: path.join(dir, 'data') });
  const log = createLogger('silent');
  // The store as it was before migration 007, with rows in it.
  const before = path.join(dir, 'migrations-before-007');
  await fs.mkdir(before);
  for (const file of await fs.readdir(path.join(SQL_DIR, 'clickhouse'))) {
    if (file < '007') await fs.copyFile(path.join(SQL_DIR, 'clickhouse', file), path.join(before, file));
  }
  await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 }, before);
  const old = generate(1, 1_500);
  await insert(old);
  rows.push(...old);
  await insert(generate(3, 300), DOMAIN + 1);
  // Then the upgrade, and more rows through the new view.
  expect(await migrateClickhouse(ch, log, { LOG_RETENTION_DAYS: 90 })).toBeGreaterThan(0);
  const fresh = generate(2, 1_500);
  await insert(fresh);
  rows.push(...fresh);
}, 120_000);

afterAll(async () => {
  await ch?.close();
  await fs.rm(dir, { recursive: true, force: true });
});

interface HourCount {
  hour: number;
  count: number;
}

/** What the query counts, per hour (epoch ms), newest first. */
async function statusMatchesByHour(clickhouse: ClickHouseClient, domainId: number, codes: StatusCodeFilter[], range: { startDate?: Date; endDate?: Date }): Promise<HourCount[]> {
  const query = statusCountsQuery(domainId, codes, range);
  if (!query) return [];
  const rows = await selectRows<{ hour: number; n: string }>(clickhouse, query.sql, query.params);
  return rows.map((r) => ({ hour: Number(r.hour) * 1000, count: Number(r.n) })).sort((a, b) => b.hour - a.hour);
}

/** The count in the test: matching rows per hour in [from, to] (both included), newest first. */
function expected(match: (status: number) => boolean, from = -Infinity, to = Infinity): HourCount[] {
  const byHour = new Map<number, number>();
  for (const r of rows) {
    if (r.t < from || r.t > to || !match(r.status)) continue;
    const hour = Math.floor(r.t / HOUR_MS) * HOUR_MS;
    byHour.set(hour, (byHour.get(hour) ?? 0) + 1);
  }
  return [...byHour].map(([hour, count]) => ({ hour, count })).sort((a, b) => b.hour - a.hour);
}

describe('statusCountsQuery', () => {
  const filters: [string, StatusCodeFilter[], (s: number) => boolean][] = [
    ['5xx', [{ class: 5 }], (s) => s >= 500 && s < 600],
    ['404', [{ code: 404 }], (s) => s === 404],
    ['404 or 5xx', [{ code: 404 }, { class: 5 }], (s) => s === 404 || s >= 500],
    ['418 (none)', [{ code: 418 }], (s) => s === 418],
  ];

  it.each(filters)('%s over all rows: rows from before the upgrade and after it', async (_, codes, match) => {
    expect(await statusMatchesByHour(ch, DOMAIN, codes, {})).toEqual(expected(match));
  });

  it.each(filters)('%s between dates inside hours: partial hours at the ends, and a range within one hour', async (_, codes, match) => {
    const ranges: [number, number][] = [
      [START + HOUR_MS + 1_234_567, START + 4 * HOUR_MS + 999_999],
      [START + 2 * HOUR_MS, START + 3 * HOUR_MS - 1],
      [START + 2 * HOUR_MS + 10_000, START + 2 * HOUR_MS + 2_000_000],
      [START + 5 * HOUR_MS + 1, START + 5 * HOUR_MS + 1],
    ];
    for (const [from, to] of ranges) {
      const range = { startDate: new Date(from), endDate: new Date(to) };
      expect(await statusMatchesByHour(ch, DOMAIN, codes, range), `${from}..${to}`).toEqual(expected(match, from, to));
    }
    // Open at one end.
    const middle = START + 3 * HOUR_MS + 77_777;
    expect(await statusMatchesByHour(ch, DOMAIN, codes, { startDate: new Date(middle) })).toEqual(expected(match, middle));
    expect(await statusMatchesByHour(ch, DOMAIN, codes, { endDate: new Date(middle) })).toEqual(expected(match, -Infinity, middle));
  });

  it('an empty or reversed range has no hours', async () => {
    expect(await statusMatchesByHour(ch, DOMAIN, [{ class: 5 }], { startDate: new Date(START + HOUR_MS), endDate: new Date(START) })).toEqual([]);
    expect(await statusMatchesByHour(ch, DOMAIN + 2, [{ class: 5 }], {})).toEqual([]);
  });
});
