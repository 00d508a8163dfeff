/**
 * GET /metrics (docs/reference/http.md, "Metrics"): off by default, behind METRICS_TOKEN on the API
 * port, and its figures moving with real requests through the app, a real file followed by the
 * ingest worker, alert rounds and deliveries, rollup rounds; METRICS_LISTEN through a real `serve`.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../../core/config.js';
import { sql } from '../../../core/db/sql.js';
import { createLogger } from '../../../core/log.js';
import { parseIngestConfig } from '../../../ingest/config.js';
import { startIngest, type IngestWorker } from '../../../ingest/worker.js';
import { createApp, type App } from '../../../src/app.js';
import { NODE_SERVER_OPTIONS } from '../../../src/http/node-server.js';
import { startMetricsListener } from '../../../src/metrics/listener.js';
import { Metrics } from '../../../src/metrics/registry.js';
import { startRollupBuilder } from '../../../src/rollups/builder.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, login, startTestApp, type TestApp } from '../../support/app.js';
import { GROUP_WAIT_MS } from '../../../src/alerts/evaluator.js';
import { evaluatorOf, postAlert } from '../../support/alerts.js';
import { describeProc, exitOf, killChildren, run, start, waitForOutput } from '../../support/child.js';
import { accessLine, accessLines, append, FORMAT, importText, newDomain, T0, timeLocal, until } from '../../support/ingest.js';
import { freePort } from '../../support/ports.js';

const TOKEN = 'metrics-token-for-the-tests-0123456789';
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

let t: TestApp;
let metrics: Metrics;
/** The app as `serve` builds it with METRICS=true and METRICS_TOKEN. */
let app: App;
let admin: string;

beforeAll(async () => {
  t = await startTestApp({ METRICS: 'true', METRICS_TOKEN: TOKEN });
  metrics = new Metrics();
  app = createApp({ ...t.runtime, metrics });
  admin = (await login(app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
});

afterAll(async () => {
  await killChildren();
  await t?.close();
});

/** The value of one series (exactly these labels) in Prometheus's text format; undefined when absent. */
function sampleOf(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const found = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1], l[2]]));
    if (Object.keys(found).length === Object.keys(labels).length && Object.entries(labels).every(([k, v]) => found[k] === v)) return Number(m[3]);
  }
  return undefined;
}

async function scrape(): Promise<string> {
  const res = await call(app, 'GET', '/metrics', { token: TOKEN });
  expect(res.status).toBe(200);
  return res.body as string;
}

describe('configuration', () => {
  const problemOf = (env: Record<string, string>) => {
    try {
      loadConfig(env);
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      return (err as ConfigError).problems.join('\n');
    }
    throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
  };

  it('is off by default; METRICS=true needs a token or an address of its own; each variable is checked', () => {
    expect(loadConfig({})).toMatchObject({ metrics: false, metricsToken: undefined, metricsListen: undefined });
    expect(problemOf({ METRICS: 'true' })).toMatch(/^invalid configuration: METRICS=true needs METRICS_TOKEN .* or METRICS_LISTEN/);
    expect(loadConfig({ METRICS: 'true', METRICS_TOKEN: TOKEN })).toMatchObject({ metrics: true, metricsToken: TOKEN, metricsListen: undefined });
    expect(loadConfig({ METRICS: 'true', METRICS_LISTEN: '127.0.0.1:9464' }).metricsListen).toEqual({ host: '127.0.0.1', port: 9464 });
    expect(loadConfig({ METRICS: 'true', METRICS_LISTEN: '[::1]:0' }).metricsListen).toEqual({ host: '::1', port: 0 });
    expect(loadConfig({ METRICS: 'true', METRICS_LISTEN: 'metrics.internal:9464' }).metricsListen).toEqual({ host: 'metrics.internal', port: 9464 });
    for (const bad of ['9464', '127.0.0.1', '127.0.0.1:70000', '::1:9464', 'a b:1']) expect(problemOf({ METRICS_LISTEN: bad })).toMatch(/^invalid configuration: METRICS_LISTEN must be host:port/);
    // A token too short to be a secret is refused without being repeated.
    const short = problemOf({ METRICS_TOKEN: 'abc123' });
    expect(short).toBe('invalid configuration: METRICS_TOKEN must be at least 16 characters (got 6 characters)');
  });
});

describe('GET /metrics on the API port', () => {
  it('is not there without METRICS: 404 like any unknown path', async () => {
    // t.app is the app without metrics, as `serve` builds it when METRICS is unset.
    const res = await call(t.app, 'GET', '/metrics', { token: TOKEN });
    expect(res.status).toBe(404);
    expect(res.body).toEqual({ success: false, error: 'Not found' });
  });

  it('answers 401 in the envelope without the token or with a wrong one', async () => {
    const refused: Record<string, string>[] = [{}, { authorization: 'Bearer wrong-token-of-some-length' }, { authorization: `Bearer ${TOKEN}x` }, { authorization: TOKEN }, { authorization: `Basic ${TOKEN}` }];
    for (const headers of refused) {
      const res = await call(app, 'GET', '/metrics', { headers });
      expect(res.status, JSON.stringify(headers)).toBe(401);
      expect(res.body).toEqual({ success: false, error: 'Authentication required' });
      expect(res.headers.get('www-authenticate')).toBe('Bearer');
    }
  });

  it("answers Prometheus's text format with the token, process metrics included", async () => {
    const res = await call(app, 'GET', '/metrics', { token: TOKEN });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
    expect(res.body).toContain('# TYPE tailhouse_http_request_duration_seconds histogram');
    expect(sampleOf(res.body, 'process_cpu_user_seconds_total')).toBeGreaterThan(0);
    expect(sampleOf(res.body, 'nodejs_heap_size_used_bytes')).toBeGreaterThan(0);
  });

  it('counts requests by route pattern (never the path) and status, with their durations', async () => {
    const domain = await newDomain(t.runtime.db, 'counted');
    const series = (route: string, status: string) => ({ method: 'GET', route, status });
    const count = (text: string, route: string, status: string) => sampleOf(text, 'tailhouse_http_request_duration_seconds_count', series(route, status)) ?? 0;
    const before = await scrape();
    for (let i = 0; i < 3; i++) expect((await call(app, 'GET', `/api/domains/${domain.id}`, { token: admin })).status).toBe(200);
    expect((await call(app, 'GET', '/api/domains/999999', { token: admin })).status).toBe(404);
    expect((await call(app, 'GET', `/no/such/path/${domain.id}`)).status).toBe(404);
    const after = await scrape();
    expect(count(after, '/api/domains/:domainId', '200') - count(before, '/api/domains/:domainId', '200')).toBe(3);
    expect(count(after, '/api/domains/:domainId', '404') - count(before, '/api/domains/:domainId', '404')).toBe(1);
    expect(count(after, 'unmatched', '404') - count(before, 'unmatched', '404')).toBe(1);
    // Every bucket holds the request; the sum is a positive duration.
    expect(sampleOf(after, 'tailhouse_http_request_duration_seconds_bucket', { ...series('/api/domains/:domainId', '200'), le: '+Inf' })).toBe(count(after, '/api/domains/:domainId', '200'));
    expect(sampleOf(after, 'tailhouse_http_request_duration_seconds_sum', series('/api/domains/:domainId', '200'))).toBeGreaterThan(0);
    // No series names a path itself.
    expect(after).not.toContain(`/api/domains/${domain.id}"`);
    expect(after).not.toContain('/no/such/path');
  });

  it('counts a method outside GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH as `other`, over a real socket', async () => {
    // A real node server: it passes on every method its parser knows, which app.request() cannot send (TRACE).
    const server = await new Promise<ServerType>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: NODE_SERVER_OPTIONS }, () => resolve(s));
    });
    const port = (server.address() as AddressInfo).port;
    const send = (method: string, path: string) =>
      new Promise<number>((resolve, reject) => {
        const req = http.request({ host: '127.0.0.1', port, path, method, agent: false }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        });
        req.on('error', reject);
        req.end();
      });
    const odd = ['PROPFIND', 'M-SEARCH', 'PURGE', 'TRACE', 'MKCOL', 'SEARCH', 'LINK'];
    try {
      const before = await scrape();
      for (const method of odd) {
        expect(await send(method, '/api/domains'), method).toBeGreaterThanOrEqual(400);
        expect(await send(method, '/no/such/path'), method).toBe(404);
      }
      expect(await send('PATCH', '/no/such/path')).toBe(404);
      const after = await scrape();
      // Requests of a method, over every route and status.
      const count = (text: string, method: string) =>
        [...text.matchAll(/^tailhouse_http_request_duration_seconds_count\{(.*)\} (\S+)$/gm)].filter((m) => m[1]!.includes(`method="${method}"`)).reduce((sum, m) => sum + Number(m[2]), 0);
      expect(count(after, 'other') - count(before, 'other')).toBe(odd.length * 2);
      expect(count(after, 'PATCH') - count(before, 'PATCH')).toBe(1);
      for (const method of odd) expect(after, method).not.toContain(`method="${method}"`);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });

  it('times the ClickHouse reads of listings, searches, stats, queries and exports by kind', async () => {
    const domain = await newDomain(t.runtime.db, 'read');
    await importText(t, domain.name, accessLines(0, 50));
    const kinds = ['listing', 'search', 'stats', 'query', 'export'] as const;
    const counts = async () => {
      const text = await scrape();
      return Object.fromEntries(kinds.map((kind) => [kind, sampleOf(text, 'tailhouse_clickhouse_query_duration_seconds_count', { kind }) ?? 0]));
    };
    const before = await counts();
    const ok = async (method: string, url: string, body?: unknown) => {
      const res = await call(app, method, url, { token: admin, body });
      expect(res.status, JSON.stringify(res.body)).toBeLessThan(300);
      return res;
    };
    await ok('GET', `/api/logs/domains/${domain.id}/access`);
    const startDate = new Date(T0 - 3_600_000).toISOString();
    await ok('POST', `/api/logs/domains/${domain.id}/search`, { query: 'item', startDate });
    await ok('GET', `/api/logs/domains/${domain.id}/stats?period=7d`);
    await ok('POST', '/api/logs/query', { domains: [domain.id], metrics: ['requests'] });
    const created = await ok('POST', `/api/logs/domains/${domain.id}/export`, { type: 'access', startDate });
    const download = await app.request(new URL(created.body.data.downloadUrl).pathname);
    expect((await download.text()).split('\n').length).toBeGreaterThan(50);
    // The export's read is timed once its stream has ended, just after the reader's last byte.
    const after = await until(async () => {
      const now = await counts();
      return now.export! > before.export! ? now : undefined;
    }, 'the export timed');
    for (const kind of kinds) expect(after[kind]! - before[kind]!, kind).toBe(1);
  });
});

describe('the ingest worker', () => {
  const workers: IngestWorker[] = [];
  afterEach(async () => {
    for (const w of workers.splice(0)) await w.close();
  });

  it('shows the counters it keeps: lines read, stored, rejected by reason, lag; and each insert timed', async () => {
    const domain = await newDomain(t.runtime.db, 'followed');
    const dir = fs.mkdtempSync(path.join(t.dataDir, 'logs-'));
    const file = path.join(dir, 'access.log');
    const overlong = accessLine(20).replace('/item/20', `/${'z'.repeat(70 * 1024)}`);
    append(file, `${accessLines(0, 20)}not a log line\n${overlong}\n`);
    const config = parseIngestConfig(`sources:\n  - domain: ${domain.name}\n    access: ${JSON.stringify(file)}\n    format: ${JSON.stringify(FORMAT)}\n`, path.join(dir, 'ingest.yaml'));
    workers.push(await startIngest(config, { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: t.dataDir, statsIntervalMs: 0, pollMs: 50, metrics }));
    const source = { source: `access ${file}` };
    const readLines = async (n: number) => until(async () => ((await scrape()).includes(`tailhouse_ingest_lines_read_total{source="${source.source}"} ${n}\n`) ? scrape() : undefined), `${n} lines read`);

    let text = await readLines(22);
    expect(sampleOf(text, 'tailhouse_ingest_lines_stored_total', source)).toBe(20);
    expect(sampleOf(text, 'tailhouse_ingest_lines_rejected_total', { ...source, reason: 'unparsed' })).toBe(1);
    expect(sampleOf(text, 'tailhouse_ingest_lines_rejected_total', { ...source, reason: 'too_long' })).toBe(1);
    expect(sampleOf(text, 'tailhouse_ingest_lag_bytes', source)).toBe(0);
    expect(sampleOf(text, 'tailhouse_ingest_retries_total', source)).toBe(0);
    expect(sampleOf(text, 'tailhouse_ingest_source_state', { ...source, state: 'running' })).toBe(1);
    expect(text).not.toMatch(/tailhouse_ingest_source_state\{[^}]*state="(?!running)/);
    // The followed files' inserts are shared (ingest/shared-batches.ts): one series for them all.
    const inserts = sampleOf(text, 'tailhouse_ingest_insert_duration_seconds_count', { source: 'files' })!;
    expect(inserts).toBeGreaterThanOrEqual(1);

    append(file, accessLines(21, 26));
    text = await readLines(27);
    expect(sampleOf(text, 'tailhouse_ingest_lines_stored_total', source)).toBe(25);
    expect(sampleOf(text, 'tailhouse_ingest_lines_rejected_total', { ...source, reason: 'unparsed' })).toBe(1);
    expect(sampleOf(text, 'tailhouse_ingest_insert_duration_seconds_count', { source: 'files' })).toBeGreaterThan(inserts);
  });
});

describe('alerts and rollups', () => {
  it('counts alert rounds by outcome and notifications by method and outcome', async () => {
    const domain = await newDomain(t.runtime.db, 'alerted');
    // An idle domain: "fewer than 1 request in 5 minutes" fires at the first round.
    const silent = { name: 'Site silent', condition: 'requestCount', operator: 'lessThan', threshold: 1, duration: 300 };
    await postAlert(t, admin, domain.id, { ...silent, notificationMethod: 'email', notificationTarget: `oncall-${process.pid}@example.com` });
    // A target on a non-public address (stored as code can, past the API's check) is refused at
    // delivery: a failed attempt, retried later.
    const webhook = await postAlert(t, admin, domain.id, { ...silent, notificationMethod: 'webhook', notificationTarget: 'https://placeholder.example.com/hook' });
    await t.runtime.db.query(sql`update alerts set notification_target = 'https://127.0.0.1:9/hook' where id = ${webhook.id}`);
    const now = Date.now();
    const evaluator = evaluatorOf(t, { log, baseUrl: 'http://tailhouse.test', intervalMs: 60_000, now: () => now, metrics });
    try {
      expect(await evaluator.evaluateOnce()).toMatchObject({ ran: true });
      // The interval's round is taken: the same moment again is skipped.
      expect(await evaluator.evaluateOnce()).toMatchObject({ ran: false, reason: 'taken' });
      // Each target's notification is due once its group wait is over.
      expect(await evaluator.deliverDue(now + GROUP_WAIT_MS)).toMatchObject({ delivered: 1, failed: 1 });
    } finally {
      await evaluator.stop();
    }
    const text = await scrape();
    expect(sampleOf(text, 'tailhouse_alert_rounds_total', { outcome: 'ran' })).toBe(1);
    expect(sampleOf(text, 'tailhouse_alert_rounds_total', { outcome: 'taken' })).toBe(1);
    expect(sampleOf(text, 'tailhouse_alert_notifications_total', { method: 'email', outcome: 'delivered' })).toBe(1);
    expect(sampleOf(text, 'tailhouse_alert_notifications_total', { method: 'webhook', outcome: 'failed' })).toBe(1);
  });

  it("shows the rollup builder's unbuilt hours after each round, 0 where another process builds", async () => {
    const own = new Metrics();
    const unbuilt = async () => sampleOf((await own.scrape()).text, 'tailhouse_rollup_unbuilt_hours');
    /** One round of a builder that claims the lease when `claims`, with `budgetMs` to spend. */
    const roundOf = async (budgetMs: number, claims = true) => {
      const builder = startRollupBuilder({ clickhouse: t.runtime.clickhouse, log, claim: async () => claims, metrics: own }, { intervalMs: 3_600_000, settleS: 0, budgetMs, retentionDays: 90, quietMs: 0 });
      try {
        return await builder.runOnce();
      } finally {
        await builder.stop();
      }
    };
    // Everything stored so far gets built: none left.
    expect(await roundOf(120_000)).toMatchObject({ more: false });
    expect(await unbuilt()).toBe(0);
    // Three new hours of a new domain, two days ago: a round out of budget at once leaves all three.
    const domain = await newDomain(t.runtime.db, 'rolled');
    const base = Math.floor(Date.now() / 3_600_000) * 3_600_000 - 2 * 86_400_000;
    const lines = [0, 1, 2].map((h) => `10.9.0.${h} - - [${timeLocal(base + h * 3_600_000 + 60_000)}] "GET /r/${h} HTTP/1.1" 200 1 "-" "agent" 0.001`);
    await importText(t, domain.name, `${lines.join('\n')}\n`);
    expect(await roundOf(0)).toMatchObject({ hours: 0, more: true });
    expect(await unbuilt()).toBe(3);
    // A builder without the lease shows 0: the holder, another process, shows the three.
    expect(await roundOf(120_000, false)).toBeNull();
    expect(await unbuilt()).toBe(0);
    // A round with time builds them: none left again.
    expect(await roundOf(0)).toMatchObject({ hours: 0, more: true });
    expect(await unbuilt()).toBe(3);
    expect(await roundOf(120_000)).toMatchObject({ hours: 3, more: false });
    expect(await unbuilt()).toBe(0);
  });
});

/** An ingest config in `dataDir` following one access log of `domain` that holds `lines`; its source's label. */
function followedLog(dataDir: string, domain: string, lines: string) {
  const file = path.join(dataDir, 'shop.access.log');
  const ingestConfig = path.join(dataDir, 'ingest.yaml');
  fs.writeFileSync(ingestConfig, `sources:\n  - domain: ${domain}\n    access: ${JSON.stringify(file)}\n    format: ${JSON.stringify(FORMAT)}\n`);
  append(file, lines);
  return { file, ingestConfig, source: { source: `access ${file}` } };
}

describe('served alone', () => {
  it('startMetricsListener without METRICS_LISTEN (`tailhouse ingest`): HOST:PORT behind the token', async () => {
    const config = loadConfig({ METRICS: 'true', METRICS_TOKEN: TOKEN, HOST: '127.0.0.1', PORT: '0' });
    const listener = await startMetricsListener(config, new Metrics(), log);
    try {
      const url = `http://127.0.0.1:${listener.port}/metrics`;
      const refused = await fetch(url);
      expect(refused.status).toBe(401);
      expect(await refused.json()).toEqual({ success: false, error: 'Authentication required' });
      const res = await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } });
      expect(res.status).toBe(200);
      expect(await res.text()).toContain('process_cpu_user_seconds_total');
      expect((await fetch(`http://127.0.0.1:${listener.port}/api/domains`)).status).toBe(404);
    } finally {
      await listener.close();
    }
  });

  it("`serve` with METRICS_LISTEN: its own port, no token, the ingest worker's counters; none on the API port", async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-metrics-'));
    try {
      const name = `served-${process.pid}.example.com`;
      const { ingestConfig, source } = followedLog(dataDir, name, accessLines(0, 30));
      const [port, metricsPort] = [await freePort(), await freePort()];
      const proc = start(['serve'], {
        DATA_DIR: dataDir,
        PORT: String(port),
        ADMIN_EMAIL,
        ADMIN_PASSWORD,
        INGEST_CONFIG: ingestConfig,
        METRICS: 'true',
        METRICS_LISTEN: `127.0.0.1:${metricsPort}`,
      });
      await waitForOutput(proc, /"msg":"listening"/);
      const api = `http://127.0.0.1:${port}`;
      const served = `http://127.0.0.1:${metricsPort}/metrics`;
      // Without metrics there, /metrics is a path like any other: the dashboard's page.
      const [page, unknown] = await Promise.all([fetch(`${api}/metrics`), fetch(`${api}/no-such-page`)]);
      expect([page.status, page.headers.get('content-type')], describeProc(proc)).toEqual([unknown.status, unknown.headers.get('content-type')]);
      expect(await page.text()).toBe(await unknown.text());
      // The source waits for its domain, then reads the file.
      const { accessToken } = (await (await fetch(`${api}/api/auth/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ email: ADMIN_EMAIL, password: ADMIN_PASSWORD }) })).json()).data;
      const created = await fetch(`${api}/api/domains`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${accessToken}` }, body: JSON.stringify({ name }) });
      expect(created.status).toBe(201);
      const text = await until(async () => {
        const res = await fetch(served);
        const body = await res.text();
        return res.status === 200 && sampleOf(body, 'tailhouse_ingest_lines_stored_total', source) === 30 ? body : undefined;
      }, '30 lines stored, on the metrics port', 60_000);
      expect(sampleOf(text, 'tailhouse_ingest_lines_read_total', source)).toBe(30);
      // The API's own requests are counted there too.
      expect(sampleOf(text, 'tailhouse_http_request_duration_seconds_count', { method: 'POST', route: '/api/domains', status: '201' })).toBe(1);
      proc.child.kill('SIGTERM');
      expect(await exitOf(proc), describeProc(proc)).toEqual({ code: 0, signal: null });
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
    // A child process's start and a chDB of its own: more than the default 30 s on a loaded machine.
  }, 120_000);

  it('`tailhouse ingest` alone: its counters on HOST:PORT behind METRICS_TOKEN', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-metrics-'));
    try {
      const name = `worker-${process.pid}.example.com`;
      const { ingestConfig, source } = followedLog(dataDir, name, `${accessLines(0, 20)}not a log line\n`);
      const vars = { DATA_DIR: dataDir, ADMIN_EMAIL, ADMIN_PASSWORD };
      const added = await run(['domains', 'add', name], vars);
      expect(added.code, added.stderr).toBe(0);
      const port = await freePort();
      const proc = start(['ingest', '--config', ingestConfig], { ...vars, HOST: '127.0.0.1', PORT: String(port), METRICS: 'true', METRICS_TOKEN: TOKEN });
      const url = `http://127.0.0.1:${port}/metrics`;
      const text = await until(async () => {
        const res = await fetch(url, { headers: { authorization: `Bearer ${TOKEN}` } }).catch(() => null);
        const body = res?.status === 200 ? await res.text() : '';
        return sampleOf(body, 'tailhouse_ingest_lines_stored_total', source) === 20 ? body : undefined;
      }, '20 lines stored, on the worker\'s metrics port', 60_000);
      expect(sampleOf(text, 'tailhouse_ingest_lines_read_total', source)).toBe(21);
      expect(sampleOf(text, 'tailhouse_ingest_lines_rejected_total', { ...source, reason: 'unparsed' })).toBe(1);
      expect((await fetch(url)).status).toBe(401);
      proc.child.kill('SIGTERM');
      expect(await exitOf(proc), describeProc(proc)).toEqual({ code: 0, signal: null });
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 120_000);
});
