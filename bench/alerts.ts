/**
 * bench/alerts: the time of one alert evaluation round (src/alerts/evaluator.ts) on the embedded
 * stores, or on a real Postgres with BENCH_DATABASE_URL, at the issue's scale by default: 1,000
 * enabled alerts over 100 domains and 10,000,000 access rows of the last 24 hours.
 *
 *   npx tsx bench/alerts.ts
 *   BENCH_ALERTS=100 BENCH_DOMAINS=10 BENCH_ROWS=200000 npx tsx bench/alerts.ts     # a quick run
 *
 * It opens a runtime under a temporary DATA_DIR, registers BENCH_DOMAINS domains and BENCH_ALERTS
 * alerts spread evenly over them, each domain cycling through ten shapes (errorRate,
 * averageResponseTime and requestCount, windows from 1 min to 24 h: the longest window decides how
 * much of access_logs is read; some shapes fire on the generated traffic, some never do), generates
 * BENCH_ROWS access rows over the last 24 hours inside ClickHouse (INSERT … SELECT FROM numbers),
 * then runs BENCH_ROUNDS rounds (each a claim, ONE ClickHouse query for all alerts, an apply that
 * writes only the alerts whose state changes) and prints the median and the slowest round, where
 * the time goes (claim, query, apply), the alert rows written and the notifications enqueued.
 * The first round writes every alert (their first figures, and the ones that fire); later rounds
 * only what changes. Figures are printed, never asserted.
 *
 * Environment (optional):
 *   BENCH_ALERTS        enabled alerts (default 1000)
 *   BENCH_DOMAINS       domains they are spread over (default 100)
 *   BENCH_ROWS          access rows over the last 24 h (default 10000000)
 *   BENCH_ROUNDS        rounds to time (default 10)
 *   BENCH_DATABASE_URL  a Postgres to create a scratch database in (default: embedded PGlite)
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createAlertEvaluator, type RoundResult } from '../src/alerts/evaluator.js';
import { measure, MIN_ERROR_RATE_REQUESTS } from '../src/alerts/metrics.js';
import type { AlertDefinition } from '../src/alerts/schemas.js';
import { enabledAlertDefinitions, insertAlertWithinCap } from '../src/alerts/store.js';
import { loadConfig } from '../core/config.js';
import { insertDomain } from '../src/domains/store.js';
import { createLogger } from '../core/log.js';
import { openRuntime } from '../src/runtime.js';
import { freshDatabase } from '../test/support/app.js';

const positive = (name: string, fallback: number): number => {
  const value = Number(process.env[name] ?? fallback);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a whole number of at least 1`);
  return value;
};

const ALERTS = positive('BENCH_ALERTS', 1000);
const DOMAINS = positive('BENCH_DOMAINS', 100);
const ROWS = positive('BENCH_ROWS', 10_000_000);
const ROUNDS = positive('BENCH_ROUNDS', 10);
const INTERVAL = 30_000;

type Shape = Pick<AlertDefinition, 'name' | 'condition' | 'operator' | 'threshold' | 'duration'>;

/**
 * What each domain's alerts look like, in turn. The generated traffic has 5 % errors and response
 * times of 0–996 ms scattered over the rows (mean about 500): the errorRate > 0.01 and
 * averageResponseTime > 400 shapes fire at the first round, the others do not. No rows arrive
 * while the rounds run (30 s apart on the clock), so towards the end of a run the short windows
 * empty and a few alerts change state (quiet 5 min fires): some writes in later rounds.
 */
const SHAPES: Shape[] = [
  { name: 'errors 5 min', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5, duration: 300 },
  { name: 'slow 1 h', condition: 'averageResponseTime', operator: 'greaterThan', threshold: 2000, duration: 3600 },
  { name: 'quiet 24 h', condition: 'requestCount', operator: 'lessThan', threshold: 1, duration: 86_400 },
  { name: 'errors 1 min', condition: 'errorRate', operator: 'greaterThanOrEqual', threshold: 0.2, duration: 60 },
  { name: 'some errors 15 min', condition: 'errorRate', operator: 'greaterThan', threshold: 0.01, duration: 900 },
  { name: 'slowish 5 min', condition: 'averageResponseTime', operator: 'greaterThan', threshold: 400, duration: 300 },
  { name: 'fast 1 h', condition: 'averageResponseTime', operator: 'lessThan', threshold: 1, duration: 3600 },
  { name: 'flood 1 h', condition: 'requestCount', operator: 'greaterThan', threshold: 1e9, duration: 3600 },
  { name: 'quiet 5 min', condition: 'requestCount', operator: 'lessThanOrEqual', threshold: 0, duration: 300 },
  { name: 'errors 6 h', condition: 'errorRate', operator: 'greaterThan', threshold: 0.3, duration: 21_600 },
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (x: number) => `${x.toFixed(1)} ms`;

async function main(): Promise<void> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-bench-alerts-'));
  // A scratch database on BENCH_DATABASE_URL's server, dropped afterwards; none: embedded PGlite.
  const database = await freshDatabase(process.env.BENCH_DATABASE_URL);
  const log = createLogger('warn');
  const config = loadConfig({
    DATA_DIR: dataDir,
    ADMIN_PASSWORD: 'bench-password-1',
    JWT_SECRET: 'bench-secret-that-is-at-least-32-bytes-long!',
    ...(database.url ? { DATABASE_URL: database.url } : {}),
  });
  const runtime = await openRuntime(config, log, () => {});
  try {
    const started = performance.now();
    const domainIds: number[] = [];
    for (let i = 0; i < DOMAINS; i++) domainIds.push((await insertDomain(runtime.db, { name: `bench-${i}.example.com`, ownerId: null })).id);
    // Alert i goes to domain i mod DOMAINS, so each domain gets ALERTS / DOMAINS alerts of successive shapes.
    // The API's cap of alerts per domain is not what this bench measures: BENCH_ALERTS / BENCH_DOMAINS may exceed it.
    const configurer = { id: 1, name: 'bench', email: config.adminEmail };
    for (let i = 0; i < ALERTS; i++) {
      const d = i % DOMAINS;
      const shape = SHAPES[Math.floor(i / DOMAINS) % SHAPES.length]!;
      await insertAlertWithinCap(runtime.db, domainIds[d]!, configurer, { ...shape, notificationMethod: 'email', notificationTarget: `ops-${d}@example.com`, enabled: true }, Infinity);
    }
    const now = Date.now();
    // Rows spread evenly over the last 24 h and over the domains (row n to domain n mod DOMAINS);
    // every 20th row of each domain is an error (5 %).
    await runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {domains:Array(UInt32)}[1 + number % length({domains:Array(UInt32)})], number + 1,
          fromUnixTimestamp64Milli({now:Int64} - toInt64(intDiv(number * 86400000, {rows:UInt64})), 'UTC'),
          '10.0.0.1', 'GET', '/', 'HTTP/1.1', if(intDiv(number, length({domains:Array(UInt32)})) % 20 = 0, 500, 200), 100, '', '', toUInt32((number * 7919) % 997)
        FROM numbers({rows:UInt64})`,
      query_params: { domains: domainIds, rows: ROWS, now },
    });
    console.log(`seeded ${DOMAINS} domains, ${ALERTS} alerts, ${ROWS} rows in ${((performance.now() - started) / 1000).toFixed(1)} s (${runtime.db.kind})`);

    const definitions = await enabledAlertDefinitions(runtime.db);
    const windows = definitions.map((a) => ({ domainId: a.domain_id, duration: a.duration }));
    const measures = definitions.map((a) => ({ domainId: a.domain_id, duration: a.duration, filters: [], condition: a.condition }));
    const queryTimes: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      await measure(runtime.clickhouse, measures, now + i * INTERVAL, MIN_ERROR_RATE_REQUESTS);
      queryTimes.push(performance.now() - t0);
    }

    let clock = Math.floor(now / INTERVAL) * INTERVAL;
    const evaluator = createAlertEvaluator({ db: runtime.db, clickhouse: runtime.clickhouse, mailer: runtime.mailer, log, baseUrl: config.baseUrl, intervalMs: INTERVAL, now: () => clock });
    const rounds: Extract<RoundResult, { ran: true }>[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      clock += INTERVAL;
      const result = await evaluator.evaluateOnce();
      if (!result.ran) throw new Error(`round ${i} did not run: ${result.reason}`);
      rounds.push(result);
    }
    await evaluator.stop();
    const [first, ...later] = rounds;
    const enqueued = (r: (typeof rounds)[number]) => r.notifications.firing + r.notifications.resolved + r.notifications.reminder;
    const of = (pick: (r: (typeof rounds)[number]) => number) => rounds.map(pick);
    console.log(`ClickHouse query alone (${windows.length} alerts, ${new Set(windows.map((w) => `${w.domainId}:${w.duration}`)).size} windows): median ${ms(median(queryTimes))}, slowest ${ms(Math.max(...queryTimes))}`);
    console.log(`whole round (claim + query + apply): median ${ms(median(of((r) => r.ms)))}, slowest ${ms(Math.max(...of((r) => r.ms)))}, first ${ms(first!.ms)}`);
    console.log(
      `  median claim ${ms(median(of((r) => r.phases.claimMs)))}, query ${ms(median(of((r) => r.phases.measureMs)))}, apply ${ms(median(of((r) => r.phases.applyMs)))}; first round's apply ${ms(first!.phases.applyMs)}`,
    );
    console.log(
      `alert rows written: first round ${first!.written} of ${first!.alerts} (${enqueued(first!)} notifications), later rounds ${later.map((r) => r.written).join(', ') || '-'} (${later.reduce((n, r) => n + enqueued(r), 0)} notifications)`,
    );
  } finally {
    await runtime.close();
    await database.drop();
    await fs.rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
