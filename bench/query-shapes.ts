/**
 * bench/query-shapes: POST /api/logs/query's shapes as the dashboard asks them (issue 14's figures
 * and the domain dashboard's panels), each beside the same question read from the raw rows only,
 * on a DATA_DIR that bench/query kept (no 20-minute load per try):
 *
 *   BENCH_KEEP=1 npm run bench:query          # once; it prints where its files are
 *   BENCH_DATA_DIR=/tmp/tailhouse-bench-query-XXXX/data npm run bench:query-shapes
 *
 * What it does: a `serve` child on that DATA_DIR (embedded mode; a migration that empties the
 * rollups makes the builder rebuild them first: it waits until the server is idle), a bench
 * administrator created by the CLI first, then for each shape over the biggest domain (and the
 * fleet: every domain named *.fleet.example.org) BENCH_RUNS timed calls after one untimed one, from
 * request to the body's last byte, and the same body with a filter every row passes and no rollup
 * row holds (method is not "\u0001"): the raw read the rollups spare, the peer of each figure in
 * the same run. Medians; the targets are issue 14's where it names the shape.
 *
 * Environment: BENCH_DATA_DIR (required), BENCH_RUNS (default 5), BENCH_RANGE (default 30d),
 * BENCH_RAW 0: skip the raw peers (they take minutes at 10M rows), STATS_ROLLUP_MIN_ROWS: passed to
 * the server (0: every built hour from the rollups, as before that setting).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { median } from './lib/baseline.js';
import { api, BIN, childEnv, login, startServer, stopServer, waitIdle } from './lib/serve-child.js';
import { fmt, load } from './lib/util.js';
import { PANELS } from '../web/src/panels.js';

const DATA_DIR = process.env.BENCH_DATA_DIR;
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const RANGE = process.env.BENCH_RANGE ?? '30d';
const RAW = process.env.BENCH_RAW !== '0';
if (!DATA_DIR || !fs.existsSync(DATA_DIR)) {
  console.error('BENCH_DATA_DIR must name the DATA_DIR of a bench/query run (BENCH_KEEP=1)');
  process.exit(2);
}

const admin = { ADMIN_EMAIL: 'bench-shapes@example.com', ADMIN_PASSWORD: 'bench-shapes-password', JWT_SECRET: 'bench-shapes-secret-bench-shapes-secret-0123' };
/** A filter every row passes that no rollup row holds: the same question, read raw. */
const RAW_ONLY = ['isNot', 'method', ['\u0001']];

interface Shape {
  label: string;
  body: Record<string, unknown>;
  targetMs?: number;
}

spawnSync(process.execPath, [BIN, 'users', 'create', '--email', admin.ADMIN_EMAIL, '--password', admin.ADMIN_PASSWORD, '--role', 'admin'], { env: childEnv(DATA_DIR, admin, { LOG_LEVEL: 'warn' }), stdio: 'ignore' });
const server = await startServer(childEnv(DATA_DIR, admin, { LOG_LEVEL: 'warn', ...(process.env.STATS_ROLLUP_MIN_ROWS ? { STATS_ROLLUP_MIN_ROWS: process.env.STATS_ROLLUP_MIN_ROWS } : {}) }));
try {
  const idle = await waitIdle(server.pid, 30 * 60_000);
  const token = await login(server.base, admin);
  const call = async (body: Record<string, unknown>) => {
    const started = performance.now();
    const res = await api(server.base, 'POST', '/api/logs/query', token, body);
    if (res.status !== 200) throw new Error(`${JSON.stringify(body)}: ${res.status} ${JSON.stringify(res.json).slice(0, 300)}`);
    return { ms: performance.now() - started, json: res.json };
  };
  const biggest = (await call({ metrics: ['requests'], dimensions: ['domain'], dateRange: '30d', limit: 1 })).json.data.results[0];
  const domains: { id: number; name: string }[] = [];
  for (let page = 1; ; page++) {
    const { data } = (await api(server.base, 'GET', `/api/domains?limit=100&page=${page}`, token)).json;
    domains.push(...data.domains);
    if (page >= data.pagination.pages) break;
  }
  const mainId = domains.find((d) => d.name === biggest.dimensions[0])!.id;
  const fleet = domains.filter((d) => d.name.endsWith('.fleet.example.org')).map((d) => d.id);
  console.log(
    `bench/query-shapes: ${biggest.dimensions[0]} (${fmt(biggest.metrics[0])} requests in 30 days), ${fmt(fleet.length)} fleet domains; serve idle after ${fmt(idle.waitedMs)} ms; ` +
      `${RUNS} timed calls per figure; load ${load()}`,
  );

  const one = (body: Record<string, unknown>) => ({ domains: [mainId], dateRange: RANGE, ...body });
  const panel = (dimensions: string[], metrics: string[], extra: Record<string, unknown> = {}) => one({ metrics, dimensions, limit: 10, ...extra });
  const shapes: Shape[] = [
    { label: 'series by hour: requests, errorRate, p95, bandwidth', body: one({ metrics: ['requests', 'errorRate', 'p95ResponseTime', 'bandwidth'], dimensions: ['time:hour'], limit: 1000 }), targetMs: 100 },
    { label: 'p50/p95/p99', body: one({ metrics: ['p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime'] }), targetMs: 100 },
    { label: 'top 10 urls of the 5xx', body: panel(['url'], ['requests'], { filters: [['is', 'statusClass', ['5xx']]] }), targetMs: 150 },
    { label: 'panel: tiles with compare', body: one({ metrics: ['requests', 'visitors', 'errorRate', 'p95ResponseTime', 'bandwidth'], compare: 'previous' }) },
    { label: 'chart: p50/p95/p99, bandwidth, visitors (auto interval)', body: one({ metrics: ['p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime', 'bandwidth', 'visitors'], dimensions: ['time'], limit: 10_000 }) },
    { label: 'chart: requests by status class (auto interval)', body: one({ metrics: ['requests'], dimensions: ['time', 'statusClass'], limit: 10_000 }) },
    // The domain dashboard's panels, as the page asks them.
    ...PANELS.map((p) => ({
      label: `panel: ${p.title}`,
      body: panel(
        p.dimensions,
        p.metrics.map((m) => m.name),
        { ...(p.filters ? { filters: p.filters } : {}), ...(p.orderBy ? { orderBy: p.orderBy } : {}) },
      ),
    })),
  ];
  if (fleet.length) {
    shapes.push(
      { label: `fleet table: ${fmt(fleet.length)} domains × requests, errorRate, p95, 24h`, body: { domains: fleet, metrics: ['requests', 'errorRate', 'p95ResponseTime'], dimensions: ['domain'], dateRange: '24h', limit: Math.min(fleet.length, 10_000) } },
      { label: 'fleet sparklines: requests by domain and hour, 24h (first page)', body: { domains: fleet, metrics: ['requests'], dimensions: ['domain', 'time:hour'], dateRange: '24h', limit: 10_000 } },
    );
  }

  const timed = async (body: Record<string, unknown>) => {
    const first = await call(body);
    const times: number[] = [];
    for (let i = 0; i < RUNS; i++) times.push((await call(body)).ms);
    return { median: median(times), min: Math.min(...times), max: Math.max(...times), json: first.json };
  };
  console.log(`\n| shape (${RANGE} unless said) | median ms | min–max ms | target | met | raw read: median ms | raw ÷ this | rows, total |`);
  console.log('|---|---:|---:|---|---|---:|---:|---|');
  for (const shape of shapes) {
    process.stderr.write(`timing ${shape.label}…\n`);
    const figure = await timed(shape.body);
    const raw = RAW ? await timed({ ...shape.body, filters: [...((shape.body.filters as unknown[]) ?? []), RAW_ONLY] }) : null;
    const met = shape.targetMs === undefined ? '' : figure.median <= shape.targetMs ? 'met' : '**not met**';
    const data = figure.json.data;
    console.log(
      `| ${shape.label} | ${figure.median.toFixed(1)} | ${figure.min.toFixed(1)}–${figure.max.toFixed(1)} | ${shape.targetMs ? `≤ ${shape.targetMs} ms` : '–'} | ${met} | ` +
        `${raw ? raw.median.toFixed(1) : '–'} | ${raw ? `${(raw.median / figure.median).toFixed(1)}×` : '–'} | ${fmt(data.results.length)}, ${fmt(data.pagination.total)} |`,
    );
  }
  console.log(`\nload at the end ${load()}`);
} finally {
  await stopServer(server);
}
