/**
 * GET /api/logs/domains/:domainId/stats at scale: BENCH_LINES (default 3,000,000) generated access
 * lines of one domain over 30 days (bench/lib/access-log.ts), imported through `importFiles`, then
 * each period timed (median of BENCH_RUNS, default 7) through `app.request()` (rollups, the real
 * route) and through the service with a raw-only plan (every row read from access_logs, the answer
 * without rollups), checking that both answers are equal.
 *
 * Also times the import, then the rollup builder (src/rollups/builder.ts) catching up with it: every
 * stats answer before that is read raw, and is the same answer.
 *
 *   npx tsx bench/query-stats.ts
 *   BENCH_LINES=1000000 BENCH_RUNS=5 npx tsx bench/query-stats.ts
 *
 * Embedded mode (PGlite and chDB under a temporary DATA_DIR, removed afterwards).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { importFiles } from '../ingest/import.js';
import { createApp } from '../src/app.js';
import { loadConfig } from '../core/config.js';
import { insertDomain } from '../src/domains/store.js';
import { createLogger } from '../core/log.js';
import { buildRollups } from '../src/rollups/builder.js';
import { STATS_PERIODS, windowAt } from '../src/stats/periods.js';
import { queryWindowStats } from '../src/stats/window.js';
import { openRuntime } from '../src/runtime.js';
import { ACCESS_FORMAT, writeAccessLog } from './lib/access-log.js';

const LINES = Number(process.env.BENCH_LINES ?? 3_000_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 7);
const PASSWORD = 'bench-admin-password';

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const ms = (n: number) => `${n.toFixed(1)} ms`;

async function timed<T>(fn: () => Promise<T>): Promise<[number, T]> {
  const t0 = performance.now();
  const value = await fn();
  return [performance.now() - t0, value];
}

async function main() {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-stats-'));
  const log = createLogger('silent');
  const config = loadConfig({ DATA_DIR: dataDir, ADMIN_EMAIL: 'admin@bench.test', ADMIN_PASSWORD: PASSWORD, JWT_SECRET: 'bench-secret-that-is-at-least-32-bytes!!' });
  const runtime = await openRuntime(config, log, () => {});
  try {
    const app = createApp(runtime);
    const file = path.join(dataDir, 'access.log');
    let [elapsed] = await timed(async () => writeAccessLog(file, LINES));
    console.log(`generated ${LINES.toLocaleString('en')} lines (${(fs.statSync(file).size / 2 ** 20).toFixed(0)} MiB) in ${ms(elapsed)}`);

    const importInto = async (domain: string) => {
      const [t, summary] = await timed(() =>
        importFiles([file], { domain, type: 'access', format: ACCESS_FORMAT, timezone: 'UTC' }, { db: runtime.db, clickhouse: runtime.clickhouse, log, dataDir, signal: new AbortController().signal, retentionDays: 90 }),
      );
      if (summary.inserted !== LINES) throw new Error(`imported ${summary.inserted} of ${LINES} lines into ${domain}`);
      return t;
    };

    const domain = await insertDomain(runtime.db, { name: 'shop.bench.test', ownerId: null });
    const imported = await importInto(domain.name);
    const rate = (t: number) => `${Math.round(LINES / (t / 1000)).toLocaleString('en')} lines/s`;
    const [building, round] = await timed(() => buildRollups(runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 3_600_000, retentionDays: 90 }));
    console.log(`import: ${ms(imported)} (${rate(imported)}); rollup builder catching up: ${ms(building)} (${round.hours} hours, ${round.days} days)`);
    await runtime.clickhouse.command({ query: 'OPTIMIZE TABLE access_rollups FINAL' });
    const sizes = await (
      await runtime.clickhouse.query({
        query: "SELECT table, sum(rows) AS rows, sum(data_compressed_bytes) AS bytes FROM system.parts WHERE active AND database = currentDatabase() AND table IN ('access_logs', 'access_rollups', 'access_hour_rows') GROUP BY table ORDER BY table",
        format: 'JSONEachRow',
      })
    ).json<{ table: string; rows: string; bytes: string }>();
    for (const s of sizes) console.log(`  ${s.table}: ${Number(s.rows).toLocaleString('en')} rows, ${(Number(s.bytes) / 2 ** 20).toFixed(1)} MiB compressed `);

    const login = await app.request('/api/auth/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: 'admin@bench.test', password: PASSWORD }) });
    const token = ((await login.json()) as { data: { accessToken: string } }).data.accessToken;

    console.log('\nmedians of %d runs; "rollups" and "raw only" read the same window (same now) and must agree', RUNS);
    console.log('period  app.request (rollups)  service, rollups  service, raw only  raw/rollups  requests in window');
    for (const period of STATS_PERIODS) {
      const viaApp: number[] = [];
      const rolled: number[] = [];
      const raw: number[] = [];
      let same = true;
      let total = 0;
      for (let i = 0; i < RUNS + 1; i++) {
        const [a, res] = await timed(async () => app.request(`/api/logs/domains/${domain.id}/stats?period=${period}`, { headers: { authorization: `Bearer ${token}` } }));
        if (res.status !== 200) throw new Error(`stats ${period}: ${res.status} ${await res.text()}`);
        await res.arrayBuffer();
        const { start, end } = windowAt({ period }, Date.now(), config.logRetentionDays);
        const [r1, viaRollups] = await timed(() => queryWindowStats(runtime.clickhouse, domain.id, start, end));
        const [r2, viaRaw] = await timed(() => queryWindowStats(runtime.clickhouse, domain.id, start, end, false));
        same &&= isDeepStrictEqual(viaRollups, viaRaw);
        total = viaRaw.totalRequests;
        // The first run warms caches up and is not counted.
        if (i > 0) {
          viaApp.push(a);
          rolled.push(r1);
          raw.push(r2);
        }
      }
      console.log(
        `${period.padEnd(6)}  ${ms(median(viaApp)).padStart(21)}  ${ms(median(rolled)).padStart(16)}  ${ms(median(raw)).padStart(17)}  ${`${(median(raw) / median(rolled)).toFixed(1)}x`.padStart(11)}  ${total.toLocaleString('en').padStart(18)}${same ? '' : '  [!] answers differ'}`,
      );
    }
  } finally {
    await runtime.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
