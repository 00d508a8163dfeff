/**
 * bench/view-cache: a dashboard view (web/src/view.ts) opened by one viewer, then by ten at once,
 * in process (app.request, no sockets), on the embedded stores (issue 31, parts 2 and 3):
 *
 *   npx tsx bench/view-cache.ts                        # 300,000 rows of one domain over 30 days
 *   BENCH_ROWS=50000 BENCH_SECONDS=3 npx tsx bench/view-cache.ts
 *
 * Each round, in turn for each way of asking:
 *   - "view": the view as the page asks it now: two batches sent together (headline, panels), the
 *     answer cache on (QUERY_CACHE_MB 64);
 *   - "view, no cache": the same with QUERY_CACHE_MB 0 (identical questions in flight still shared);
 *   - "14 requests": the page before, each query alone, the headline's three then the panels' eleven, no cache;
 * one viewer opens the view again and again for BENCH_SECONDS, then ten viewers together: views per
 * second, and the median and p99 of a view's time. Targets: ten viewers ≥ 5× one viewer's views per
 * second, p99 ≤ 3× the median. Nothing is asserted; the rounds alternate and the medians are printed.
 *
 * Environment (optional): BENCH_ROWS (300000), BENCH_SECONDS (5), BENCH_ROUNDS (3), BENCH_PERIOD (24h).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { loadConfig } from '../core/config.js';
import { createLogger } from '../core/log.js';
import { createApp, type App } from '../src/app.js';
import { insertDomain } from '../src/domains/store.js';
import { buildRollups } from '../src/rollups/builder.js';
import { openRuntime } from '../src/runtime.js';
import { PANELS } from '../web/src/panels.js';
import { viewQueries } from '../web/src/view.js';
import { generateRows, insertRows } from '../test/support/query-rows.js';
import { fmt } from './lib/util.js';
import { DAY_MS } from '../core/durations.js';

const f1 = (n: number) => n.toFixed(1);

const ROWS = Number(process.env.BENCH_ROWS ?? 300_000);
const SECONDS = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const PERIOD = process.env.BENCH_PERIOD ?? '24h';

const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-bench-view-cache-'));
const admin = { email: 'bench-view@example.com', password: 'bench-view-password-1' };
const config = loadConfig({ DATA_DIR: dataDir, ADMIN_EMAIL: admin.email, ADMIN_PASSWORD: admin.password, JWT_SECRET: 'bench-view-cache-secret-bench-view-cache-secret', LOG_LEVEL: 'warn' });
const runtime = await openRuntime(config, createLogger('warn'), () => {});
try {
  const domain = await insertDomain(runtime.db, { name: 'shop.example.com', ownerId: null });
  const now = Date.now();
  console.log(`loading ${ROWS} rows over 30 days…`);
  for (let i = 0; i < ROWS; i += 50_000) {
    await insertRows(runtime.clickhouse, generateRows({ seed: i, domain: domain.id, count: Math.min(50_000, ROWS - i), from: now - 30 * DAY_MS, to: now - 60_000, firstId: i + 1 }));
  }
  await buildRollups(runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 600_000, retentionDays: 90 });

  const appOf = (queryCacheMb: number) => createApp({ ...runtime, config: { ...runtime.config, queryCacheMb } });
  const first = appOf(64);
  const login = await first.request('/api/auth/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(admin) });
  const token = ((await login.json()) as { data: { accessToken: string } }).data.accessToken;
  const view = viewQueries({ domains: [domain.id], dateRange: PERIOD, filters: [] }, false, PANELS);

  const post = async (app: App, body: unknown) => {
    const res = await app.request('/api/logs/query', { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify(body) });
    if (res.status !== 200) throw new Error(`${res.status} ${await res.text()}`);
    await res.text();
  };
  const ways: { name: string; app: App; open: (app: App) => Promise<unknown> }[] = [
    { name: 'view', app: appOf(64), open: (app) => Promise.all([post(app, { queries: view.headline }), post(app, { queries: view.panels })]) },
    { name: 'view, no cache', app: appOf(0), open: (app) => Promise.all([post(app, { queries: view.headline }), post(app, { queries: view.panels })]) },
    {
      name: '14 requests',
      app: appOf(0),
      open: async (app) => {
        await Promise.all(view.headline.map((q) => post(app, q)));
        await Promise.all(view.panels.map((q) => post(app, q)));
      },
    },
  ];

  /** `viewers` opening the view again and again for SECONDS: views per second, median and p99 of a view's ms. */
  async function measure(way: (typeof ways)[number], viewers: number) {
    const times: number[] = [];
    const end = performance.now() + SECONDS * 1000;
    await Promise.all(
      Array.from({ length: viewers }, async () => {
        while (performance.now() < end) {
          const started = performance.now();
          await way.open(way.app);
          times.push(performance.now() - started);
        }
      }),
    );
    times.sort((a, b) => a - b);
    return { perSecond: times.length / SECONDS, median: times[times.length >> 1]!, p99: times[Math.min(times.length - 1, Math.floor(times.length * 0.99))]! };
  }

  for (const way of ways) await way.open(way.app); // warm: plans, the build states
  const results = new Map<string, { one: number[]; ten: number[]; median: number[]; p99: number[] }>();
  for (let round = 1; round <= ROUNDS; round++) {
    for (const way of ways) {
      const one = await measure(way, 1);
      const ten = await measure(way, 10);
      const r = results.get(way.name) ?? { one: [], ten: [], median: [], p99: [] };
      r.one.push(one.perSecond);
      r.ten.push(ten.perSecond);
      r.median.push(ten.median);
      r.p99.push(ten.p99);
      results.set(way.name, r);
      console.log(`round ${round} ${way.name}: one viewer ${f1(one.perSecond)} views/s (median ${fmt(one.median)} ms); ten ${f1(ten.perSecond)} views/s (median ${fmt(ten.median)} ms, p99 ${fmt(ten.p99)} ms)`);
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
  const spread = (xs: number[]) => `${f1(Math.min(...xs))}–${f1(Math.max(...xs))}`;
  console.log(`\n${ROWS} rows, period ${PERIOD}, ${ROUNDS} rounds of ${SECONDS} s, ${os.cpus().length} cores, load ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  console.log('| way | one viewer, views/s | ten viewers, views/s | ratio | ten: median ms | ten: p99 ms | p99 ÷ median |');
  console.log('|---|---|---|---|---|---|---|');
  for (const [name, r] of results) {
    const ratios = r.ten.map((t, i) => t / r.one[i]!);
    const tails = r.p99.map((p, i) => p / r.median[i]!);
    console.log(`| ${name} | ${f1(med(r.one))} (${spread(r.one)}) | ${f1(med(r.ten))} (${spread(r.ten)}) | ${f1(med(ratios))} (${spread(ratios)}) | ${fmt(med(r.median))} | ${fmt(med(r.p99))} | ${f1(med(tails))} (${spread(tails)}) |`);
  }
} finally {
  await runtime.close();
  await fs.rm(dataDir, { recursive: true, force: true });
}
