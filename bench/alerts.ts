/**
 * bench/alerts: the time of one alert evaluation round (src/alerts/evaluator.ts) on the embedded
 * stores, or on a real Postgres with BENCH_DATABASE_URL, with many domains, alerts and log rows.
 *
 *   npx tsx bench/alerts.ts
 *
 * It opens a runtime under a temporary DATA_DIR, registers BENCH_DOMAINS domains with three alerts
 * each (errorRate over 5 min, averageResponseTime over 1 h, requestCount over 24 h: the longest
 * window, which decides how much of access_logs is read), generates BENCH_ROWS access rows over the
 * last 24 hours inside ClickHouse (INSERT … SELECT FROM numbers), then runs BENCH_ROUNDS rounds
 * (each a claim, ONE ClickHouse query for all alerts, an apply) and prints the median and the
 * slowest, the query alone, and the notifications enqueued. Figures are printed, never asserted.
 *
 * Environment (optional):
 *   BENCH_DOMAINS       domains (default 1000; alerts are three times as many)
 *   BENCH_ROWS          access rows over the last 24 h (default 5000000)
 *   BENCH_ROUNDS        rounds to time (default 10)
 *   BENCH_DATABASE_URL  a Postgres to create a scratch database in (default: embedded PGlite)
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import postgres from 'postgres';
import { createAlertEvaluator } from '../src/alerts/evaluator.js';
import { windowFigures } from '../src/alerts/metrics.js';
import { enabledAlertDefinitions, insertAlert } from '../src/alerts/store.js';
import { loadConfig } from '../src/config.js';
import { insertDomain } from '../src/domains/store.js';
import { createLogger } from '../src/log.js';
import { openRuntime } from '../src/runtime.js';

const DOMAINS = Number(process.env.BENCH_DOMAINS ?? 1000);
const ROWS = Number(process.env.BENCH_ROWS ?? 5_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 10);
const INTERVAL = 30_000;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (x: number) => `${x.toFixed(1)} ms`;

async function scratchDatabase(): Promise<{ url: string | undefined; drop: () => Promise<void> }> {
  const server = process.env.BENCH_DATABASE_URL;
  if (!server) return { url: undefined, drop: async () => {} };
  const name = `tailhouse_bench_alerts_${process.pid}`;
  const admin = postgres(server, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const url = new URL(server);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const again = postgres(server, { max: 1, onnotice: () => {} });
      await again.unsafe(`drop database if exists ${name} with (force)`);
      await again.end();
    },
  };
}

async function main(): Promise<void> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-bench-alerts-'));
  const database = await scratchDatabase();
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
    for (let i = 0; i < DOMAINS; i++) {
      const domain = await insertDomain(runtime.db, { name: `bench-${i}.example.com`, ownerId: null });
      const common = { notificationMethod: 'email' as const, notificationTarget: `ops-${i}@example.com`, enabled: true };
      await insertAlert(runtime.db, domain.id, 1, { ...common, name: 'errors', condition: 'errorRate', operator: 'greaterThan', threshold: 0.5, duration: 300 });
      await insertAlert(runtime.db, domain.id, 1, { ...common, name: 'slow', condition: 'averageResponseTime', operator: 'greaterThan', threshold: 2000, duration: 3600 });
      await insertAlert(runtime.db, domain.id, 1, { ...common, name: 'quiet', condition: 'requestCount', operator: 'lessThan', threshold: 1, duration: 86_400 });
    }
    const now = Date.now();
    // Rows spread evenly over the last 24 h and over the domains (ids 1…DOMAINS); 5 % errors.
    await runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT 1 + number % {domains:UInt32}, number + 1,
          fromUnixTimestamp64Milli({now:Int64} - toInt64(intDiv(number * 86400000, {rows:UInt64})), 'UTC'),
          '10.0.0.1', 'GET', '/', 'HTTP/1.1', if(number % 20 = 0, 500, 200), 100, '', '', toUInt32(number % 997)
        FROM numbers({rows:UInt64})`,
      query_params: { domains: DOMAINS, rows: ROWS, now },
    });
    console.log(`seeded ${DOMAINS} domains, ${DOMAINS * 3} alerts, ${ROWS} rows in ${((performance.now() - started) / 1000).toFixed(1)} s (${runtime.db.kind})`);

    const definitions = await enabledAlertDefinitions(runtime.db);
    const windows = definitions.map((a) => ({ domainId: a.domain_id, duration: a.duration }));
    const queryTimes: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const t0 = performance.now();
      await windowFigures(runtime.clickhouse, windows, now + i * INTERVAL);
      queryTimes.push(performance.now() - t0);
    }

    let clock = Math.floor(now / INTERVAL) * INTERVAL;
    const evaluator = createAlertEvaluator({ db: runtime.db, clickhouse: runtime.clickhouse, mailer: runtime.mailer, log, baseUrl: config.baseUrl, intervalMs: INTERVAL, now: () => clock });
    const roundTimes: number[] = [];
    let enqueued = 0;
    for (let i = 0; i < ROUNDS; i++) {
      clock += INTERVAL;
      const result = await evaluator.evaluateOnce();
      if (!result.ran) throw new Error(`round ${i} did not run: ${result.reason}`);
      roundTimes.push(result.ms);
      enqueued += result.notifications.firing + result.notifications.resolved + result.notifications.reminder;
    }
    await evaluator.stop();
    console.log(`ClickHouse query alone (${windows.length} alerts, ${new Set(windows.map((w) => `${w.domainId}:${w.duration}`)).size} windows): median ${ms(median(queryTimes))}, slowest ${ms(Math.max(...queryTimes))}`);
    console.log(`whole round (claim + query + apply): median ${ms(median(roundTimes))}, slowest ${ms(Math.max(...roundTimes))}, first ${ms(roundTimes[0]!)} (enqueued ${enqueued} notifications in all)`);
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
