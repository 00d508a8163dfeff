/**
 * bench/dashboard: the dashboard as a browser gets it, on a DATA_DIR that bench/query left
 * (`BENCH_KEEP=1 npm run bench:query`, or BENCH_ROWS=1000000 for a quicker one):
 *
 *   BENCH_DATA_DIR=/tmp/tailhouse-bench-query-XXXX/data npm run bench:dashboard
 *
 *   1. the script and style sheet `serve` ships, raw and gzipped (target: ≤ 250 KB gzipped);
 *   2. a `serve` child on that DATA_DIR (embedded mode), a bench administrator created by the CLI
 *      first (`users create`, kept: the DATA_DIR is a throw-away copy of the bench's);
 *   3. headless Chromium (Debian's, CHROMIUM_PATH) signs in, then opens the dashboard of the
 *      domain with the most rows (24 hours, then 30 days) BENCH_RUNS times: from navigation to
 *      every panel holding its table (or "No requests") and the four charts drawn, median and
 *      range (target: ≤ 1 s median for the dashboard as it opens, 24 hours); the same for the
 *      fleet overview with its sparklines.
 *   4. with BENCH_SCREENSHOTS=DIR, the fleet and a dashboard with a filter as PNGs (the README's).
 *
 * Nothing is asserted; figures are printed beside their targets.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { gzipSync } from 'node:zlib';
import { chromium, type Page } from 'playwright-core';
import { buildWebAssets } from '../src/web/assets.js';
import { api, BIN, childEnv, login, startServer, stopServer, waitIdle } from './lib/serve-child.js';
import { fmt, load } from './lib/util.js';
import { PANELS } from '../web/src/panels.js';

const DATA_DIR = process.env.BENCH_DATA_DIR;
const RUNS = Number(process.env.BENCH_RUNS ?? 9);
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const SHOTS = process.env.BENCH_SCREENSHOTS;
if (!DATA_DIR || !fs.existsSync(DATA_DIR)) {
  console.error('BENCH_DATA_DIR must name the DATA_DIR of a bench/query run (BENCH_KEEP=1)');
  process.exit(2);
}

const admin = { ADMIN_EMAIL: 'bench-dashboard@example.com', ADMIN_PASSWORD: 'bench-dashboard-password', JWT_SECRET: 'bench-dashboard-secret-bench-dashboard-secret' };
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;

// 1. What is shipped.
const assets = await buildWebAssets();
let raw = 0;
let gzipped = 0;
for (const file of assets.files.values()) {
  raw += file.body.length;
  gzipped += gzipSync(file.body, { level: 9 }).length;
}
console.log(`1. shipped: script + style sheet ${fmt(raw / 1024)} KB, gzipped ${fmt(gzipped / 1024)} KB (target ≤ 250 KB: ${gzipped <= 250 * 1024 ? 'met' : '**not met**'})`);

// 2. The server, with a bench administrator (users create refuses an existing e-mail: fine on a second run).
spawnSync(process.execPath, [BIN, 'users', 'create', '--email', admin.ADMIN_EMAIL, '--password', admin.ADMIN_PASSWORD, '--role', 'admin'], { env: childEnv(DATA_DIR, admin, { LOG_LEVEL: 'warn' }), stdio: 'ignore' });
const server = await startServer(childEnv(DATA_DIR, admin, { LOG_LEVEL: 'warn' }));
try {
  const idle = await waitIdle(server.pid, 10 * 60_000);
  const token = await login(server.base, admin);
  const { json } = await api(server.base, 'POST', '/api/logs/query', token, { metrics: ['requests'], dimensions: ['domain'], dateRange: '30d', limit: 1 });
  const biggest = json.data.results[0];
  const domains = (await api(server.base, 'GET', `/api/domains?limit=100&search=${encodeURIComponent(biggest.dimensions[0])}`, token)).json.data;
  const id = domains.domains.find((d: { name: string }) => d.name === biggest.dimensions[0])?.id;
  const fleetSize = (await api(server.base, 'GET', '/api/domains?limit=1', token)).json.data.pagination.total;
  console.log(`2. serve ready (idle after ${fmt(idle.waitedMs)} ms); the biggest domain: ${biggest.dimensions[0]} (id ${id}), ${fmt(biggest.metrics[0])} requests in 30 days; ${fleetSize} domains; load ${load()}`);

  // 3. The browser.
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${server.base}/signin`);
  await page.getByLabel('E-mail').fill(admin.ADMIN_EMAIL);
  await page.getByLabel('Password').fill(admin.ADMIN_PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${server.base}/`);

  /** Every panel answered and the four charts drawn. */
  const dashboardDrawn = (p: Page) =>
    p.waitForFunction((panels) => document.querySelectorAll('.chart canvas').length >= 4 && [...document.querySelectorAll('.panel')].every((panel) => panel.querySelector('table, .hint, .error')) && document.querySelectorAll('.panel').length === panels && ![...document.querySelectorAll('.tile .figure')].some((f) => f.textContent === '…'), PANELS.length, { timeout: 60_000, polling: 'raf' });
  const fleetDrawn = (p: Page) => p.waitForFunction(() => document.querySelectorAll('svg.sparkline').length > 0, undefined, { timeout: 60_000, polling: 'raf' });

  async function timed(what: string, url: string, drawn: (p: Page) => Promise<unknown>, target: number | null) {
    const times: number[] = [];
    for (let i = 0; i <= RUNS; i++) {
      const start = Date.now();
      await page.goto(url);
      await drawn(page);
      if (i > 0) times.push(Date.now() - start);
    }
    const m = median(times);
    const verdict = target === null ? '' : ` (target ≤ ${fmt(target)} ms: ${m <= target ? 'met' : '**not met**'})`;
    console.log(`   ${what}: median ${fmt(m)} ms, ${fmt(Math.min(...times))}–${fmt(Math.max(...times))} over ${RUNS} loads after one${verdict}`);
  }
  console.log(`3. time from navigation to drawn, in Chromium (a reload signs in through the session cookie first); load ${load()}`);
  await timed('domain dashboard, 24 hours', `${server.base}/domains/${id}`, dashboardDrawn, 1000);
  // The figure is the dashboard as it opens (24 hours); 30 days is printed beside it, without a target.
  await timed('domain dashboard, 30 days', `${server.base}/domains/${id}?period=30d`, dashboardDrawn, null);
  await timed(`fleet overview (${fleetSize} domains)`, `${server.base}/`, fleetDrawn, null);

  if (SHOTS) {
    fs.mkdirSync(SHOTS, { recursive: true });
    await page.goto(`${server.base}/`);
    await fleetDrawn(page);
    await page.screenshot({ path: path.join(SHOTS, 'fleet.png') });
    await page.goto(`${server.base}/domains/${id}?period=7d`);
    await dashboardDrawn(page);
    // The top URL of the 5xx: a status class filter the way a click on a panel sets one.
    await page.goto(`${server.base}/domains/${id}?period=7d&f=is:statusClass:5xx`);
    await dashboardDrawn(page);
    await page.getByRole('region', { name: 'Top pages' }).locator('tbody .entry').first().click();
    await dashboardDrawn(page);
    await page.waitForFunction(() => new URLSearchParams(location.search).getAll('f').length === 2);
    await dashboardDrawn(page);
    // The whole page in the viewport: panels off the screen are not painted (content-visibility: auto),
    // and a full-page screenshot alone would show them empty. Painted, they take their own heights:
    // again until the page's height stays.
    for (let i = 0; i < 5; i++) {
      const height = Number(await page.evaluate('document.documentElement.scrollHeight'));
      if (height === page.viewportSize()!.height) break;
      await page.setViewportSize({ width: page.viewportSize()!.width, height });
      await page.evaluate('new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)))');
    }
    await page.screenshot({ path: path.join(SHOTS, 'dashboard-filtered.png'), fullPage: true });
    console.log(`4. screenshots in ${SHOTS}`);
  }
  await browser.close();
} finally {
  await stopServer(server);
}
