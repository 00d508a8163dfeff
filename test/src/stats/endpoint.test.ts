/**
 * GET /api/logs/domains/:domainId/stats (docs/reference/logs.md#statistics): every period against a brute-force answer
 * over the same generated lines, loaded through the real import path; the rollups
 * (sql/clickhouse/005_stats_deferred_rollups.sql, built by src/rollups/builder.ts) against the raw
 * rows for many windows, also against a plain SQL query, built, partly built and written twice;
 * empty windows; validation; access rules; deduplicated retries.
 */
import { isDeepStrictEqual } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { dedupToken, insertAccessBatch, type AccessRow } from '../../../ingest/sinks/clickhouse.js';
import { createLogger } from '../../../core/log.js';
import { buildRollups, startRollupBuilder, startStatsRollups, type RollupBuilder, type RollupRound } from '../../../src/rollups/builder.js';
import { deleteDomainData } from '../../../core/db/domain-data.js';
import { bucketSetOf, emptyBuildState, planWindow, queryBuildState, windowBuckets } from '../../../src/rollups/plan.js';
import { classifyUserAgent } from '../../../ingest/transforms/user-agent.js';
import { PARTIALS, type PartialState } from '../../../src/stats/registry.js';
import { countsOverBoth, provenTop, topProven, type WindowStats } from '../../../src/stats/figures.js';
import { queryWindowStats } from '../../../src/stats/window.js';
import { REFRESH_MS } from '../../../src/rollups/known-plans.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';
import { FORMAT, importText, select, timeLocal, until } from '../../support/ingest.js';
import { prng } from '../../support/random.js';
import { byBytes } from '../../support/query-rows.js';
import { registerDomain } from '../../support/domains.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';
const PERIODS = { '1h': HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS } as const;
type Period = keyof typeof PERIODS;

/** The test's "now", whole seconds: every generated time is relative to it. */
const NOW = Math.floor(Date.now() / 1000) * 1000;
/** How long after NOW the requests may run: no line lies where that could move it in or out of a window. */
const SLACK = 10 * 60_000;

let t: TestApp;
let admin: { id: number; token: string };
let alice: { id: number; token: string };
let bob: { id: number; token: string };
/** Owns a domain, holds no logs:read. */
let nora: { id: number; token: string };

/** An entry as the brute force sees it: the fields the statistics use. */
interface Entry {
  t: number;
  ip: string;
  url: string;
  status: number;
  referrer: string;
  agent: string;
  rt: number | null;
  /** The response size, when not the generator's (bytesOf). */
  bytes?: number;
}

/** Near a window's start the answer would depend on the exact moment of the request. */
const nearBoundary = (ts: number) => Object.values(PERIODS).some((p) => ts >= NOW - p - 2000 && ts <= NOW - p + SLACK + 2000);

const STATUSES = [200, 200, 200, 200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 404, 500, 502, 503, 504];
const AGENTS = ['Mozilla/5.0 (X11; Linux x86_64)', 'curl/8.5.0', 'Googlebot/2.1', '', 'python-requests/2.31', 'Mozilla/5.0 (iPhone)', 'Wget/1.21', 'bingbot/2.0', 'Zeta', 'alpha', 'Beta', 'ÄÖÜ-agent/1'];
const REFERRERS = ['', '', '', 'https://www.google.com/', 'https://example.org/a', 'https://example.org/B', 'https://news.ycombinator.com/', 'android-app://x', 'https://t.co/z'];
/** Fifteen URLs always requested together: equal counts in every window, so ties decide their order. */
const TIED = Array.from({ length: 15 }, (_, i) => `/tie/${String.fromCharCode(i % 2 ? 97 + i : 65 + i)}${i}`);

/**
 * `count` requests over the 31 days before NOW (and a few after it), in time order: single requests
 * over 300 URLs, and bursts that request all TIED URLs in one second with one status and one agent.
 */
function generate(seed: number, count: number, withResponseTime: boolean): Entry[] {
  const rnd = prng(seed);
  const pick = <T>(list: readonly T[]) => list[Math.floor(rnd() * list.length)]!;
  const entries: Entry[] = [];
  const ip = () => (rnd() < 0.1 ? `2001:db8::${Math.floor(rnd() * 400).toString(16)}` : `10.${Math.floor(rnd() * 4)}.${Math.floor(rnd() * 30)}.${Math.floor(rnd() * 40)}`);
  const rt = () => (withResponseTime ? Math.floor(rnd() ** 3 * 5000) : null);
  while (entries.length < count) {
    const ts = NOW - Math.floor(rnd() * 31 * 86_400) * 1000 - 1000;
    if (nearBoundary(ts)) continue;
    if (rnd() < 0.08) {
      const status = pick(STATUSES);
      const agent = pick(AGENTS);
      for (const url of TIED) entries.push({ t: ts, ip: ip(), url, status, referrer: pick(REFERRERS), agent, rt: rt() });
    } else {
      const n = Math.floor(rnd() ** 2 * 300);
      entries.push({ t: ts, ip: ip(), url: `/${n % 3 ? 'p' : 'Q'}/${n}${n % 5 ? '' : `?q=${n % 7}`}`, status: pick(STATUSES), referrer: pick(REFERRERS), agent: pick(AGENTS), rt: rt() });
    }
  }
  // Requests on whole hours (and days) and just before them, where the rollups' buckets meet the raw edges.
  for (let h = 1; h < 31 * 24; h += 5) {
    const hour = Math.floor(NOW / HOUR_MS) * HOUR_MS - h * HOUR_MS;
    for (const ts of [hour, hour - 1000]) {
      if (!nearBoundary(ts)) entries.push({ t: ts, ip: ip(), url: `/edge/${h % 4}`, status: pick(STATUSES), referrer: pick(REFERRERS), agent: pick(AGENTS), rt: rt() });
    }
  }
  // Requests after now are in no window.
  for (let i = 0; i < 5; i++) entries.push({ t: NOW + 3 * HOUR_MS + i * 1000, ip: '10.9.9.9', url: '/future', status: 500, referrer: 'https://future.example/', agent: 'future', rt: withResponseTime ? 5 : null });
  return entries.sort((a, b) => a.t - b.t);
}

/** An entry's response size: varied, and a function of its other fields (the generator's draws stay as they were). */
const bytesOf = (e: Entry) => e.bytes ?? 100 + (Math.floor(e.t / 1000) % 5_000) + e.url.length * 7;

function lineOf(e: Entry): string {
  const field = (s: string) => (s === '' ? '-' : s);
  const base = `${e.ip} - - [${timeLocal(e.t)}] "GET ${e.url} HTTP/1.1" ${e.status} ${bytesOf(e)} "${field(e.referrer)}" "${field(e.agent)}"`;
  return e.rt === null ? base : `${base} ${(e.rt / 1000).toFixed(3)}`;
}

async function importEntries(domain: string, entries: Entry[], format: string): Promise<void> {
  const text = entries.map((e) => `${lineOf(e)}\n`).join('');
  const summary = await importText(t, domain, text, { format, limits: { maxLineBytes: 64 * 1024, chunkMaxLines: 2_000, chunkMaxBytes: 1 << 20 } });
  expect(summary.inserted).toBe(entries.length);
}

// ---------------------------------------------------------------------------------------------
// The reference answers

const pct = (n: number, total: number) => Math.round((n * 10_000) / total) / 100;

/** The exact nearest-rank percentile `n` of `values`; null when there are none. */
function nearestRank(values: number[], n: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil((n * sorted.length) / 100) - 1]!;
}

/**
 * Matches a percentile as the statistics give it (src/stats/registry.ts): the exact value below
 * 128 ms, else within 1 % of it (and the 2-decimal rounding of the bucket's representative).
 */
const nearPercentile = (exact: number | null) => ({
  asymmetricMatch: (got: unknown) =>
    exact === null || exact < 128 ? got === exact : typeof got === 'number' && Math.abs(got - exact) <= 0.01 * exact + 0.005,
  toString: () => `a percentile near ${exact}`,
  toAsymmetricMatcher: () => `a percentile near ${exact}`,
});
const percentilesOf = (times: number[]) => ({ p50: nearPercentile(nearestRank(times, 50)), p95: nearPercentile(nearestRank(times, 95)), p99: nearPercentile(nearestRank(times, 99)) });

/** The statistics of [start, end] computed in JavaScript from the entries themselves. */
function bruteForce(entries: Entry[], start: number, end: number): WindowStats {
  const inWindow = entries.filter((e) => e.t >= start && e.t <= end);
  const total = inWindow.length;
  const timed = inWindow.filter((e) => e.rt !== null);
  const top = <K extends string | number>(key: (e: Entry) => K | null, cmp: (a: K, b: K) => number) => {
    const counts = new Map<K, number>();
    for (const e of inWindow) {
      const k = key(e);
      if (k !== null) counts.set(k, (counts.get(k) ?? 0) + 1);
    }
    return [...counts].sort((a, b) => b[1] - a[1] || cmp(a[0], b[0])).slice(0, 10);
  };
  return {
    totalRequests: total,
    uniqueVisitors: new Set(inWindow.map((e) => e.ip)).size,
    averageResponseTime: timed.length ? Math.round((timed.reduce((s, e) => s + e.rt!, 0) * 100) / timed.length) / 100 : 0,
    errorRate: total ? Math.round((inWindow.filter((e) => e.status >= 500).length * 10_000) / total) / 10_000 : 0,
    topUrls: top((e) => e.url, byBytes).map(([url, n]) => ({ url, requests: n, percentage: pct(n, total) })),
    topStatusCodes: top((e) => e.status, (a, b) => a - b).map(([code, n]) => ({ code, count: n, percentage: pct(n, total) })),
    topUserAgents: top((e) => e.agent, byBytes).map(([userAgent, n]) => ({ userAgent, requests: n, percentage: pct(n, total) })),
    topReferrers: top((e) => (e.referrer === '' ? null : e.referrer), byBytes).map(([referrer, n]) => ({ referrer, requests: n, percentage: pct(n, total) })),
    bandwidth: inWindow.reduce((sum, e) => sum + bytesOf(e), 0),
    responseTimePercentiles: percentilesOf(timed.map((e) => e.rt!)) as unknown as WindowStats['responseTimePercentiles'],
  };
}

/** The same figures by one plain SQL query per figure over access_logs, no rollup involved. */
async function rawSql(domainId: number, start: number, end: number): Promise<WindowStats> {
  const ch = t.runtime.clickhouse;
  const where = "domain_id = {d:UInt32} AND timestamp BETWEEN fromUnixTimestamp64Milli({s:Int64}, 'UTC') AND fromUnixTimestamp64Milli({e:Int64}, 'UTC')";
  const params = { d: domainId, s: start, e: end };
  const [totals] = await select<Record<string, string | number | null>>(
    ch,
    `SELECT count() AS n, uniqExact(ip_address) AS v, countIf(status_code >= 500) AS errors, sum(response_time) AS rt_sum, count(response_time) AS rt_n,
       sum(response_size) AS bytes, arrayFilter(x -> x IS NOT NULL, groupArray(response_time)) AS times FROM access_logs WHERE ${where}`,
    params,
  );
  const total = Number(totals!.n);
  const top = (column: string, extra = '') =>
    select<{ k: string; n: string }>(ch, `SELECT ${column} AS k, count() AS n FROM access_logs WHERE ${where}${extra} GROUP BY k ORDER BY n DESC, k ASC LIMIT 10`, params);
  const [urls, codes, agents, referrers] = await Promise.all([top('url'), top('status_code'), top('user_agent'), top('referrer', " AND referrer != ''")]);
  const rtN = Number(totals!.rt_n);
  const times = (totals!.times as unknown as (number | string)[]).map(Number);
  return {
    totalRequests: total,
    uniqueVisitors: Number(totals!.v),
    averageResponseTime: rtN ? Math.round((Number(totals!.rt_sum) * 100) / rtN) / 100 : 0,
    errorRate: total ? Math.round((Number(totals!.errors) * 10_000) / total) / 10_000 : 0,
    topUrls: urls.map((r) => ({ url: r.k, requests: Number(r.n), percentage: pct(Number(r.n), total) })),
    topStatusCodes: codes.map((r) => ({ code: Number(r.k), count: Number(r.n), percentage: pct(Number(r.n), total) })),
    topUserAgents: agents.map((r) => ({ userAgent: r.k, requests: Number(r.n), percentage: pct(Number(r.n), total) })),
    topReferrers: referrers.map((r) => ({ referrer: r.k, requests: Number(r.n), percentage: pct(Number(r.n), total) })),
    bandwidth: Number(totals!.bytes),
    responseTimePercentiles: { p50: nearestRank(times, 50), p95: nearestRank(times, 95), p99: nearestRank(times, 99) },
  };
}

// ---------------------------------------------------------------------------------------------

/** alice's main domain: the recommended format, plus a file in `combined` (no $request_time). */
let shop: { id: number; name: string };
let shopEntries: Entry[];
/** alice's domain whose format has no $request_time at all. */
let plain: { id: number; name: string };
let plainEntries: Entry[];
/** alice's domain without a line. */
let empty: { id: number; name: string };
/** nora's domain (nora has no logs:read). */
let noras: { id: number; name: string };

const createDomain = (name: string, ownerId: number) => registerDomain(t.app, admin.token, { ownerId, name });

beforeAll(async () => {
  t = await startTestApp();
  const session = await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD);
  admin = { id: session.user.id, token: session.accessToken };
  alice = await createUserAndLogin(t.app, admin.token, { email: 'alice@example.com' });
  bob = await createUserAndLogin(t.app, admin.token, { email: 'bob@example.com' });
  nora = await createUserAndLogin(t.app, admin.token, { email: 'nora@example.com' });
  const res = await call(t.app, 'PUT', `/api/users/${nora.id}/permissions`, { token: admin.token, body: { permissions: [{ resource: 'alerts', actions: ['read'] }] } });
  expect(res.status).toBe(200);

  shop = await createDomain('shop.example.com', alice.id);
  plain = await createDomain('plain.example.com', alice.id);
  empty = await createDomain('empty.example.com', alice.id);
  noras = await createDomain('nora.example.com', nora.id);

  const timed = generate(1, 24_000, true);
  const untimed = generate(2, 3_000, false);
  await importEntries(shop.name, timed, FORMAT);
  await importEntries(shop.name, untimed, 'combined');
  shopEntries = [...timed, ...untimed];
  plainEntries = generate(3, 4_000, false);
  await importEntries(plain.name, plainEntries, 'combined');
  await importEntries(noras.name, generate(4, 500, true), FORMAT);
  await buildAll();
}, 120_000);

/** The builder's whole backlog, as `serve` runs it (settled a second after an hour ends). */
async function buildAll(): Promise<RollupRound> {
  return buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
}

afterAll(async () => {
  await t?.close();
});

const stats = (domainId: number, token: string, query = '') => call(t.app, 'GET', `/api/logs/domains/${domainId}/stats${query}`, { token });

describe('GET /api/logs/domains/:domainId/stats', () => {
  it.each(Object.keys(PERIODS) as Period[])('period %s equals the brute force over the generated lines', async (period) => {
    const res = await stats(shop.id, alice.token, `?period=${period}`);
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(Date.now() - NOW).toBeLessThan(SLACK);
    expect(res.body).toEqual({ success: true, data: { period, ...bruteForce(shopEntries, NOW - PERIODS[period], NOW) } });
  });

  it('the data covers what the checks need: ties, NULL response times, empty agents and referrers, 5xx', () => {
    const month = bruteForce(shopEntries, NOW - 30 * DAY_MS, NOW);
    expect(month.topUrls.slice(0, 10).every((u) => TIED.includes(u.url))).toBe(true);
    expect(month.topUrls[0]!.requests).toBe(month.topUrls[9]!.requests);
    expect(month.topUserAgents.some((a) => a.userAgent === '')).toBe(true);
    expect(month.errorRate).toBeGreaterThan(0);
    const untimed = shopEntries.filter((e) => e.rt === null && e.t > NOW - DAY_MS).length;
    expect(untimed).toBeGreaterThan(0);
    expect(shopEntries.filter((e) => e.referrer === '').length).toBeGreaterThan(0);
  });

  it('no period means 24h', async () => {
    const res = await stats(shop.id, alice.token);
    expect(res.status).toBe(200);
    expect(res.body.data).toEqual({ period: '24h', ...bruteForce(shopEntries, NOW - DAY_MS, NOW) });
  });

  it('a format without $request_time: averageResponseTime 0, the rest as usual', async () => {
    for (const period of ['24h', '30d'] as const) {
      const res = await stats(plain.id, alice.token, `?period=${period}`);
      expect(res.status).toBe(200);
      expect(res.body.data.averageResponseTime).toBe(0);
      expect(res.body.data.totalRequests).toBeGreaterThan(0);
      expect(res.body.data).toEqual({ period, ...bruteForce(plainEntries, NOW - PERIODS[period], NOW) });
    }
  });

  it('an empty window gives zeros and empty lists', async () => {
    const zero = {
      totalRequests: 0,
      uniqueVisitors: 0,
      averageResponseTime: 0,
      errorRate: 0,
      topUrls: [],
      topStatusCodes: [],
      topUserAgents: [],
      topReferrers: [],
      bandwidth: 0,
      responseTimePercentiles: { p50: null, p95: null, p99: null },
    };
    for (const period of Object.keys(PERIODS)) {
      const res = await stats(empty.id, alice.token, `?period=${period}`);
      expect(res.status).toBe(200);
      expect(res.body).toEqual({ success: true, data: { period, ...zero } });
    }
    // A window between the lines of a domain that has some.
    const gap = await queryWindowStats(t.runtime.clickhouse, shop.id, NOW + HOUR_MS, NOW + 2 * HOUR_MS);
    expect(gap).toEqual(zero);
  });

  it('a bad period is a 422 naming the field', async () => {
    for (const bad of ['2h', '', '24H', '30d ']) {
      const res = await stats(shop.id, alice.token, `?period=${encodeURIComponent(bad)}`);
      expect(res.status, bad).toBe(422);
      expect(res.body).toEqual({ success: false, error: 'Validation failed', details: { period: expect.stringContaining('1h, 24h, 7d, 30d') } });
    }
    const res = await stats(0, alice.token);
    expect(res.status).toBe(422);
    expect(Object.keys(res.body.details)).toEqual(['domainId']);
  });

  it('filters and a custom window: the figures of the rows that pass, as brute force gives them', async () => {
    const isBot = (agent: string) => classifyUserAgent(agent).device === 'bot';
    const cases: [string, (e: Entry) => boolean][] = [
      ['statusCode=404', (e) => e.status === 404],
      ['statusCode=5xx', (e) => e.status >= 500 && e.status < 600],
      ['method=get&statusCode=404', (e) => e.status === 404],
      ['method=POST', () => false],
      ['url=%2Fp%2F', (e) => e.url.includes('/p/')],
      ['url=%2FQ%2F*', (e) => e.url.startsWith('/Q/')],
      ['url=%3Fq%3D', (e) => e.url.includes('?q=')],
      ['ipAddress=10.1.0.0%2F16', (e) => e.ip.startsWith('10.1.')],
      ['ipAddress=2001%3Adb8%3A%3A%2F32', (e) => e.ip.startsWith('2001:db8::')],
      ['userAgent=MOZILLA', (e) => e.agent.toLowerCase().includes('mozilla')],
      ['userAgent=%C3%A4%C3%B6%C3%BC', (e) => e.agent.startsWith('ÄÖÜ')],
      ['referrer=EXAMPLE.org', (e) => e.referrer.includes('example.org')],
      ['bot=true', (e) => isBot(e.agent)],
      ['bot=false&statusCode=2xx', (e) => !isBot(e.agent) && e.status < 300],
      // SQL and LIKE metacharacters match themselves only.
      ["userAgent=%25_'%22%5C", () => false],
      ['url=%25', () => false],
    ];
    for (const [query, passes] of cases) {
      const res = await stats(shop.id, alice.token, `?period=30d&${query}`);
      expect(res.status, query).toBe(200);
      expect(res.body.data, query).toEqual({ period: '30d', ...bruteForce(shopEntries.filter(passes), NOW - 30 * DAY_MS, NOW) });
    }
    // A window from startDate to endDate, to the millisecond, alone and filtered.
    const start = NOW - 10 * DAY_MS + 12_345;
    const end = NOW - 2 * DAY_MS - 999;
    const window = `?startDate=${new Date(start).toISOString()}&endDate=${new Date(end).toISOString()}`;
    expect((await stats(shop.id, alice.token, window)).body.data).toEqual({ period: 'custom', ...bruteForce(shopEntries, start, end) });
    expect((await stats(shop.id, alice.token, `${window}&statusCode=5xx`)).body.data).toEqual({ period: 'custom', ...bruteForce(shopEntries.filter((e) => e.status >= 500), start, end) });
    // startDate alone: up to now.
    const since = NOW - 3 * DAY_MS;
    expect((await stats(shop.id, alice.token, `?startDate=${new Date(since).toISOString()}`)).body.data).toEqual({ period: 'custom', ...bruteForce(shopEntries, since, NOW) });
  }, 180_000);

  it('422 for a window or a filter it cannot take, naming the field', async () => {
    const cases: [string, string][] = [
      ['?period=24h&startDate=2026-01-01', 'period'],
      ['?endDate=2026-01-01', 'startDate'],
      ['?startDate=2026-02-01&endDate=2026-01-01', 'endDate'],
      ['?startDate=1969-12-31', 'startDate'],
      ['?bot=yes', 'bot'],
      ['?statusCode=6xx', 'statusCode'],
      ['?ipAddress=10.0.0.0%2F99', 'ipAddress'],
      ['?userAgent=', 'userAgent'],
      [`?referrer=${'r'.repeat(65_537)}`, 'referrer'],
    ];
    for (const [query, field] of cases) {
      const res = await stats(shop.id, alice.token, query);
      expect(res.status, query.slice(0, 80)).toBe(422);
      expect(Object.keys(res.body.details), query.slice(0, 80)).toEqual([field]);
    }
  });

  it('401 without a valid token', async () => {
    const none = await call(t.app, 'GET', `/api/logs/domains/${shop.id}/stats`);
    expect(none.status).toBe(401);
    expect(none.headers.get('www-authenticate')).toBe('Bearer');
    expect(none.body).toEqual({ success: false, error: 'Authentication required' });
    expect((await stats(shop.id, 'not-a-token')).status).toBe(401);
  });

  it("another owner's domain is a 404 exactly like an unknown one; an admin sees every domain", async () => {
    const unknown = await stats(999_999, bob.token);
    const foreign = await stats(shop.id, bob.token);
    expect(unknown.status).toBe(404);
    expect(foreign.status).toBe(404);
    expect(foreign.body).toEqual({ success: false, error: 'Domain not found' });
    expect(foreign.body).toEqual(unknown.body);
    expect((await stats(noras.id, alice.token)).body).toEqual(unknown.body);
    const asAdmin = await stats(shop.id, admin.token, '?period=7d');
    expect(asAdmin.status).toBe(200);
    expect(asAdmin.body.data).toEqual({ period: '7d', ...bruteForce(shopEntries, NOW - 7 * DAY_MS, NOW) });
  });

  it('403 without logs:read, even on an own domain', async () => {
    const res = await stats(noras.id, nora.token);
    expect(res.status).toBe(403);
    expect(res.body).toEqual({ success: false, error: 'Insufficient permissions' });
  });

  it('is described in the OpenAPI document', async () => {
    const res = await call(t.app, 'GET', '/api/openapi.json');
    const op = res.body.paths['/api/logs/domains/{domainId}/stats']?.get;
    expect(op).toBeDefined();
    expect(op.parameters.map((p: { name: string }) => p.name).sort()).toEqual(
      ['bot', 'domainId', 'endDate', 'ipAddress', 'method', 'period', 'referrer', 'startDate', 'statusCode', 'url', 'userAgent'],
    );
    const stats = res.body.components.schemas.LogStats.properties;
    expect(Object.keys(stats)).toEqual(expect.arrayContaining(['topReferrers', 'bandwidth', 'responseTimePercentiles']));
  });
});

describe('rollups', () => {
  /** Rows per span as access_rollups holds them (the totals), and per span as the entries give them. */
  const ROLLUP_TOTALS = "SELECT span, toString(sum(requests)) AS n FROM access_rollups WHERE domain_id = {d:UInt32} AND dim = 'total' GROUP BY span ORDER BY span";
  const builtSpans = (domainId: number) => select<{ span: string; n: string }>(t.runtime.clickhouse, ROLLUP_TOTALS, { d: domainId });
  /**
   * Each built total row holds every partial of the registry exactly as its bucket's rows give it
   * (a set and a maximum finalised, a histogram without keys of count 0): its rollup column read
   * against its SQL over the raw rows, per hour and per day.
   */
  async function expectTotalsExact(domainId: number): Promise<void> {
    const partials: PartialState[] = Object.values(PARTIALS);
    const shown = (x: PartialState, sql: string) =>
      x === PARTIALS.visitors
        ? `toString(finalizeAggregation(${sql}))`
        : x === PARTIALS.rtHistogram
          ? `toString((arrayFilter((k, c) -> c != 0, tupleElement(${sql}, 1), tupleElement(${sql}, 2)), arrayFilter(c -> c != 0, tupleElement(${sql}, 2))))`
          : `toString(${sql})`;
    for (const [span, start] of [['hour', 'toStartOfHour'], ['day', 'toStartOfDay']] as const) {
      const built = await select<Record<string, string>>(
        t.runtime.clickhouse,
        `SELECT toString(toUnixTimestamp(bucket)) AS b, ${partials.map((x) => `${shown(x, x.rollup.read)} AS ${x.name}`).join(', ')}
         FROM access_rollups WHERE domain_id = {d:UInt32} AND span = {span:String} AND dim = 'total' GROUP BY bucket ORDER BY bucket`,
        { d: domainId, span },
      );
      const raw = await select<Record<string, string>>(
        t.runtime.clickhouse,
        `SELECT toString(toUnixTimestamp(${start}(timestamp))) AS b, ${partials.map((x) => `${shown(x, x.raw)} AS ${x.name}`).join(', ')}
         FROM access_logs WHERE domain_id = {d:UInt32} AND toUnixTimestamp(${start}(timestamp)) IN {buckets:Array(UInt32)} GROUP BY b ORDER BY b`,
        { d: domainId, buckets: built.map((r) => Number(r.b)) },
      );
      expect(built.length, span).toBeGreaterThan(0);
      expect(built, span).toEqual(raw);
    }
  }
  /** Entries of hours (days) that ended before now, which the builder builds. */
  const complete = (entries: Entry[], unit: number) => String(entries.filter((e) => Math.floor(e.t / unit) * unit + unit <= Date.now() - 1000).length);
  /**
   * Waits, when the next hour ends (and settles) within `marginMs`, until it has: a build after this
   * and the counts of `complete` taken after that build then see the same complete hours.
   */
  async function clearOfHourEnd(marginMs = 20_000): Promise<void> {
    const settled = (Math.floor(Date.now() / HOUR_MS) + 1) * HOUR_MS + 1000;
    if (settled - Date.now() < marginMs) await until(() => Date.now() > settled + 1000, 'the hour to end and settle', marginMs + 5_000, 250);
  }
  /** What a second builder would add to a built bucket: the same difference again. */
  const writeTwice = (domainId: number, span: 'hour' | 'day', bucket: number) =>
    t.runtime.clickhouse.command({
      query: `INSERT INTO access_rollups SELECT * FROM access_rollups WHERE domain_id = {d:UInt32} AND span = {span:String} AND bucket = toDateTime({b:UInt32}, 'UTC')`,
      query_params: { d: domainId, span, b: bucket / 1000 },
    });

  it('the builder builds every complete hour, and every complete day from its hours', async () => {
    // The file may have run into a new hour since beforeAll's build: that build and now differ by it.
    await clearOfHourEnd();
    await buildAll();
    expect(await builtSpans(shop.id)).toEqual([
      { span: 'hour', n: complete(shopEntries, HOUR_MS) },
      { span: 'day', n: complete(shopEntries, DAY_MS) },
    ]);
    // A second round finds nothing left and writes nothing.
    const again = await buildAll();
    expect(again).toMatchObject({ hours: 0, days: 0, repaired: 0 });
    expect(await builtSpans(shop.id)).toEqual([
      { span: 'hour', n: complete(shopEntries, HOUR_MS) },
      { span: 'day', n: complete(shopEntries, DAY_MS) },
    ]);
  });

  /** Every window of the list: through the rollups as built now, raw, brute force and plain SQL agree. */
  async function expectWindowsExact(domainId: number, entries: Entry[], windows: [number, number][]): Promise<void> {
    for (const [start, end] of windows) {
      const label = `${new Date(start).toISOString()} … ${new Date(end).toISOString()}`;
      const expected = bruteForce(entries, start, end);
      const rolled = await queryWindowStats(t.runtime.clickhouse, domainId, start, end);
      const raw = await queryWindowStats(t.runtime.clickhouse, domainId, start, end, false);
      expect(rolled, `rollups ${label}`).toEqual(expected);
      expect(raw, `raw ${label}`).toEqual(expected);
      // The same histogram either way: the percentiles do not depend on what is built.
      expect(rolled.responseTimePercentiles, `percentiles ${label}`).toEqual(raw.responseTimePercentiles);
      expect(await rawSql(domainId, start, end), `sql ${label}`).toEqual(expected);
    }
  }

  /** Deletes a bucket's short top lists, as if the builder had died before writing them. */
  async function deleteTops(domainId: number, span: 'hour' | 'day', bucket: number): Promise<void> {
    await t.runtime.clickhouse.command({
      query: "DELETE FROM access_tops WHERE domain_id = {d:UInt32} AND span = {span:String} AND bucket = toDateTime({bucket:UInt32}, 'UTC') SETTINGS lightweight_deletes_sync = 2",
      query_params: { d: domainId, span, bucket: bucket / 1000 },
    });
  }

  it('windows read through the rollups equal the raw rows, the brute force and plain SQL', async () => {
    const rnd = prng(7);
    const times = shopEntries.map((e) => e.t);
    const windows: [number, number][] = [
      [NOW - 30 * DAY_MS, NOW],
      [NOW - 31 * DAY_MS, NOW + DAY_MS],
      // Whole hours and days at both ends, and ends on a line's own millisecond.
      [Math.floor((NOW - 10 * DAY_MS) / DAY_MS) * DAY_MS, Math.floor(NOW / HOUR_MS) * HOUR_MS],
      [Math.floor((NOW - 3 * DAY_MS) / HOUR_MS) * HOUR_MS, Math.floor((NOW - DAY_MS) / DAY_MS) * DAY_MS],
      [times[100]!, times[20_000]!],
      [times[5_000]!, times[5_000]!],
      [times[7_000]! + 1, times[9_000]! - 1],
      // Inside one hour, and inside one day.
      [Math.floor((NOW - 5 * DAY_MS) / HOUR_MS) * HOUR_MS + 60_000, Math.floor((NOW - 5 * DAY_MS) / HOUR_MS) * HOUR_MS + 1_800_000],
      [Math.floor((NOW - 5 * DAY_MS) / DAY_MS) * DAY_MS + 3 * HOUR_MS + 5, Math.floor((NOW - 5 * DAY_MS) / DAY_MS) * DAY_MS + 20 * HOUR_MS - 5],
    ];
    for (let i = 0; i < 12; i++) {
      const a = NOW - Math.floor(rnd() * 31 * DAY_MS);
      windows.push([a, a + Math.floor(rnd() * (NOW - a))]);
    }
    // The 30-day window really is read from built days and hours, with raw rows at its ends only.
    const plan = planWindow(NOW - 30 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, shop.id, NOW - 30 * DAY_MS, NOW));
    expect(plan.days.length).toBeGreaterThanOrEqual(28);
    expect(plan.hours.length).toBeGreaterThan(0);
    expect(bucketSetOf(plan.listed)).toEqual({ days: plan.days, hours: plan.hours });
    expect(plan.raw).toEqual([
      [NOW - 30 * DAY_MS, Math.ceil((NOW - 30 * DAY_MS) / HOUR_MS) * HOUR_MS],
      [Math.floor(NOW / HOUR_MS) * HOUR_MS, NOW + 1],
    ]);
    await expectWindowsExact(shop.id, shopEntries, windows);
  });

  it('rows added to built hours and days are read raw until the builder has built them again', async () => {
    const domain = await createDomain('late.example.com', alice.id);
    const entries = generate(11, 3_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const windows: [number, number][] = [
      [NOW - 30 * DAY_MS, NOW],
      [NOW - 7 * DAY_MS, NOW],
      [Math.floor((NOW - 10 * DAY_MS) / DAY_MS) * DAY_MS + 5 * HOUR_MS + 17, NOW - 2 * DAY_MS - 17],
    ];
    // Asked before the late lines: the next answers start from the build state these read.
    await expectWindowsExact(domain.id, entries, windows);
    // Late lines (an old rotated file imported now) into days and hours that are already built.
    // A few, in about a dozen hours: many more would make the plan read the whole window raw.
    const late = generate(12, 600, true).filter((e, i) => i % 61 === 0 && e.t < NOW - 2 * DAY_MS);
    await importEntries(domain.name, late, FORMAT);
    const all = [...entries, ...late].sort((a, b) => a.t - b.t);
    const before = planWindow(NOW - 30 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 30 * DAY_MS, NOW));
    expect(before.raw.length).toBeGreaterThan(4);
    expect(before.raw.length).toBeLessThan(20);
    await expectWindowsExact(domain.id, all, windows);
    await clearOfHourEnd();
    const round = await buildAll();
    expect(round.hours).toBeGreaterThan(0);
    expect(round.days).toBeGreaterThan(0);
    const after = planWindow(NOW - 30 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 30 * DAY_MS, NOW));
    expect(after.raw.length).toBe(2);
    await expectWindowsExact(domain.id, all, windows);
    await expectTotalsExact(domain.id);
    expect(await builtSpans(domain.id)).toEqual([
      { span: 'hour', n: complete(all, HOUR_MS) },
      { span: 'day', n: complete(all, DAY_MS) },
    ]);
  });

  it('a built part kept in memory answers with one query, and only while its buckets hold the rows it was read from', async () => {
    const domain = await createDomain('kept.example.com', alice.id);
    const entries = generate(21, 2_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const window: [number, number] = [NOW - 9 * DAY_MS + 17, NOW - 5];
    const queries = vi.spyOn(t.runtime.clickhouse, 'query');
    const answer = async (all: Entry[]) => {
      queries.mockClear();
      expect(await queryWindowStats(t.runtime.clickhouse, domain.id, ...window)).toEqual(bruteForce(all, ...window));
      return queries.mock.calls.length;
    };
    try {
      // The first request reads the state, the part and the ends; the next ones the ends and counts alone.
      expect(await answer(entries)).toBeGreaterThan(2);
      expect(await answer(entries)).toBe(1);
      // Late lines into built hours, built again; a state read anew (after REFRESH_MS) plans the
      // same days and hours as before, whose kept sums no longer hold: read again, and exact.
      const late = generate(22, 400, true).filter((e, i) => i % 23 === 0 && e.t > window[0] + DAY_MS && e.t < NOW - 2 * DAY_MS);
      expect(late.length).toBeGreaterThan(3);
      await importEntries(domain.name, late, FORMAT);
      const all = [...entries, ...late].sort((a, b) => a.t - b.t);
      await answer(all);
      expect((await buildAll()).hours).toBeGreaterThan(0);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() + REFRESH_MS + 1);
      await answer(all);
      await answer(all);
      expect(await answer(all)).toBe(1);
    } finally {
      vi.useRealTimers();
      queries.mockRestore();
    }
  });

  it('lines stored between the lists and the totals of a build leave the hour unbuilt until the next round catches up', async () => {
    const domain = await createDomain('between.example.com', alice.id);
    const entries = generate(14, 1_500, true).filter((e) => e.t < NOW - 3 * HOUR_MS);
    await importEntries(domain.name, entries, FORMAT);
    const hour = Math.floor(entries[entries.length - 1]!.t / HOUR_MS) * HOUR_MS;
    const late = Array.from({ length: 25 }, (_, i) => ({ ...entries[0]!, t: hour + 1000 + i, status: 404, url: `/between/${i}` }));
    // The builder's own client, but the late lines are stored the moment it starts the hours' totals:
    // after its lists statement has read the rows, as an ingest running beside it can do.
    let stored = false;
    const racing = new Proxy(t.runtime.clickhouse, {
      get(target, prop, receiver) {
        if (prop !== 'command') return Reflect.get(target, prop, receiver);
        return async (params: { query: string }) => {
          if (!stored && /'hour', dim, bucket, key/.test(params.query) && /toInt8\(0\) AS dim/.test(params.query)) {
            stored = true;
            await importEntries(domain.name, late, FORMAT);
          }
          return target.command(params as Parameters<typeof target.command>[0]);
        };
      },
    });
    await buildRollups(racing, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
    expect(stored).toBe(true);
    const all = [...entries, ...late].sort((a, b) => a.t - b.t);
    // Its total does not claim the late lines its lists lack: the hour is read raw.
    const state = await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 7 * DAY_MS, NOW);
    expect(state.counted.get(hour)).toBe(all.filter((e) => Math.floor(e.t / HOUR_MS) * HOUR_MS === hour).length);
    expect(state.builtHours.get(hour)).not.toBe(state.counted.get(hour));
    await expectWindowsExact(domain.id, all, [[NOW - 7 * DAY_MS, NOW], [hour - 2 * HOUR_MS, hour + HOUR_MS]]);
    await buildAll();
    const rebuilt = await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 7 * DAY_MS, NOW);
    expect(rebuilt.builtHours.get(hour)).toBe(rebuilt.counted.get(hour));
    await expectWindowsExact(domain.id, all, [[NOW - 7 * DAY_MS, NOW], [hour - 2 * HOUR_MS, hour + HOUR_MS]]);
    await expectTotalsExact(domain.id);
    // Every list of every bucket holds the rows its total counts.
    const lists = await select<{ span: string; dim: string; off: string }>(
      t.runtime.clickhouse,
      `SELECT span, dim, toString(countIf(listed != total)) AS off FROM (
         SELECT span, bucket, dim, sum(requests) AS listed, any(total) AS total FROM access_rollups
         JOIN (SELECT span, bucket, sum(requests) AS total FROM access_rollups WHERE domain_id = {d:UInt32} AND dim = 'total' GROUP BY span, bucket) AS t USING (span, bucket)
         WHERE domain_id = {d:UInt32} AND dim IN ('url', 'status', 'agent', 'referrer_host') GROUP BY span, bucket, dim)
       GROUP BY span, dim ORDER BY span, dim`,
      { d: domain.id },
    );
    expect(lists.map((l) => l.off)).toEqual(['0', '0', '0', '0', '0', '0', '0', '0']);
  });

  it('short lists kept in memory are used only at the version their bucket was built for', async () => {
    const domain = await createDomain('relisted.example.com', alice.id);
    const base = { ip: '10.9.9.9', status: 200, referrer: 'https://r.example/', agent: 'ua', rt: 5 };
    const lastHour = Math.floor(NOW / HOUR_MS) * HOUR_MS;
    const entries: Entry[] = [];
    // Every URL in every hour's short list: /a 5, /b 4, /z 1 per hour.
    for (let h = lastHour - 50 * HOUR_MS; h < lastHour - 2 * HOUR_MS; h += HOUR_MS) {
      for (const [url, n] of [['/a', 5], ['/b', 4], ['/z', 1]] as const) {
        for (let i = 0; i < n; i++) entries.push({ ...base, t: h + 20 * 60_000 + i * 1000, url });
      }
    }
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    // Keeps the lists of the window's buckets in memory.
    await expectWindowsExact(domain.id, entries, [[NOW - 2 * DAY_MS, NOW]]);
    // Late lines make /z the top URL of one built hour (and of its day); both are built again.
    const late = Array.from({ length: 40 }, (_, i) => ({ ...base, t: lastHour - 30 * HOUR_MS + 30 * 60_000 + i * 1000, url: '/z' }));
    await importEntries(domain.name, late, FORMAT);
    await buildAll();
    // Another window over the same buckets plans from a state read now: the rebuilt bucket is listed
    // at its new version, whose lists are not the ones in memory.
    await expectWindowsExact(domain.id, [...entries, ...late], [[NOW - 2 * DAY_MS + HOUR_MS, NOW]]);
  });

  it('a bucket written twice (two builders at once) is read raw, then deleted and built again', async () => {
    const domain = await createDomain('twice.example.com', alice.id);
    const entries = generate(13, 2_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    // chDB keeps settings given with a query as the session's: the builder's must stay in its own statements.
    const sessionSettings = () => select(t.runtime.clickhouse, "SELECT getSetting('max_threads') AS threads, getSetting('lightweight_deletes_sync') AS deletes", {});
    await t.runtime.clickhouse.command({ query: 'SET max_threads = 3' });
    await t.runtime.clickhouse.command({ query: 'SET lightweight_deletes_sync = 1' });
    await buildAll();
    // What a second builder would add: the same difference again, for one day and one of its hours.
    const day = Math.floor((NOW - 3 * DAY_MS) / DAY_MS) * DAY_MS;
    const busyHour = Math.floor(entries.find((e) => e.t >= day + HOUR_MS)!.t / HOUR_MS) * HOUR_MS;
    await writeTwice(domain.id, 'hour', busyHour);
    await writeTwice(domain.id, 'day', day);
    await expectWindowsExact(domain.id, entries, [[NOW - 7 * DAY_MS, NOW], [day + 10, busyHour + HOUR_MS + 10]]);
    await clearOfHourEnd();
    const round = await buildAll();
    expect(round.repaired).toBe(2);
    const settings = await sessionSettings();
    await t.runtime.clickhouse.command({ query: 'SET max_threads = DEFAULT' });
    await t.runtime.clickhouse.command({ query: 'SET lightweight_deletes_sync = DEFAULT' });
    expect(settings).toEqual([{ threads: 3, deletes: 1 }]);
    expect(await builtSpans(domain.id)).toEqual([
      { span: 'hour', n: complete(entries, HOUR_MS) },
      { span: 'day', n: complete(entries, DAY_MS) },
    ]);
    const plan = planWindow(NOW - 7 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 7 * DAY_MS, NOW));
    expect(plan.days).toContain(day);
    await expectWindowsExact(domain.id, entries, [[NOW - 7 * DAY_MS, NOW], [day + 10, busyHour + HOUR_MS + 10]]);
  });

  it('serve’s builder builds in the background, one process per database at a time (a lease)', async () => {
    const domain = await createDomain('background.example.com', alice.id);
    const entries = generate(14, 1_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    const deps = { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log: createLogger('silent'), retentionDays: 90 };
    const first = startStatsRollups(deps);
    const second = startStatsRollups(deps);
    try {
      // Taken at each look: an hour may end while the builder works.
      const expected = () => [
        { span: 'hour', n: complete(entries, HOUR_MS) },
        { span: 'day', n: complete(entries, DAY_MS) },
      ];
      await until(async () => JSON.stringify(await builtSpans(domain.id)) === JSON.stringify(expected()), 'rollups built in the background', 60_000, 200);
      // Whichever claimed the lease first holds it: the other's rounds do nothing.
      const rounds = await Promise.all([first.runOnce(), second.runOnce()]);
      expect(rounds.filter((r) => r === null)).toHaveLength(1);
      // Stopped, the holder gives the lease up, and the other takes over at its next round.
      const [holder, other] = rounds[0] === null ? [second, first] : [first, second];
      await holder.stop();
      expect(await other.runOnce()).not.toBeNull();
    } finally {
      await first.stop();
      await second.stop();
    }
  });

  it('an idle builder skips its rounds until a line is stored, and for quietMs at most', async () => {
    const domain = await createDomain('quiet.example.com', alice.id);
    const entries = generate(15, 300, true).filter((e) => e.t < NOW - 2 * DAY_MS);
    await importEntries(domain.name, entries, FORMAT);
    const hour = Math.floor(entries[0]!.t / HOUR_MS) * HOUR_MS;
    const hourTotal = async () =>
      Number((await select<{ n: string }>(t.runtime.clickhouse, "SELECT toString(sum(requests)) AS n FROM access_rollups WHERE domain_id = {d:UInt32} AND span = 'hour' AND dim = 'total' AND bucket = toDateTime({b:UInt32}, 'UTC')", { d: domain.id, b: hour / 1000 }))[0]!.n);
    const inHour = entries.filter((e) => Math.floor(e.t / HOUR_MS) * HOUR_MS === hour).length;
    // The settled hour (one of the round's inputs) changes half an hour from now at the earliest, not during the test.
    const settleS = Math.floor(((Date.now() % HOUR_MS) + HOUR_MS / 2) / 1000);
    const nothing: RollupRound = { hours: 0, days: 0, repaired: 0, more: false };
    const withBuilder = async (quietMs: number, use: (builder: RollupBuilder) => Promise<void>) => {
      const builder = startRollupBuilder({ clickhouse: t.runtime.clickhouse, log: createLogger('silent'), claim: async () => true }, { intervalMs: HOUR_MS, settleS, budgetMs: 60_000, retentionDays: 90, quietMs });
      try {
        // Rounds until one finds nothing (the first one also builds what other tests left).
        await until(async () => isDeepStrictEqual(await builder.runOnce(), nothing), 'a round with nothing to build', 60_000, 0);
        await use(builder);
      } finally {
        await builder.stop();
      }
    };
    await withBuilder(HOUR_MS, async (builder) => {
      expect(await hourTotal()).toBe(inHour);
      await writeTwice(domain.id, 'hour', hour);
      // Nothing the round reads changed: skipped, the bucket stays written twice.
      expect(await builder.runOnce()).toEqual(nothing);
      expect(await hourTotal()).toBe(2 * inHour);
      // A stored line (in another hour) wakes it: the round finds the bucket and repairs it.
      const late = { ...entries.find((e) => Math.floor(e.t / HOUR_MS) * HOUR_MS !== hour)!, url: '/late' };
      await importEntries(domain.name, [late], FORMAT);
      expect(await builder.runOnce()).toMatchObject({ repaired: 1, more: false });
      expect(await hourTotal()).toBe(inHour);
    });
    await withBuilder(2_000, async (builder) => {
      await writeTwice(domain.id, 'hour', hour);
      expect(await builder.runOnce()).toEqual(nothing);
      // Without any line, a round runs again once quietMs has passed.
      const repaired = await until(async () => ((await builder.runOnce())?.repaired === 1 ? true : undefined), 'a round after quietMs', 30_000, 200);
      expect(repaired).toBe(true);
      expect(await hourTotal()).toBe(inHour);
    });
  });

  it('short day lists: a flat distribution they cannot prove, and days without them, still give the exact lists', async () => {
    const domain = await createDomain('flat.example.com', alice.id);
    // 400 URLs requested about equally every day: a day's 101st URL has about the 10th's count.
    const rnd = prng(15);
    const entries: Entry[] = [];
    for (let i = 0; i < 12_000; i++) {
      const ts = NOW - 2 * HOUR_MS - Math.floor(rnd() * 20 * DAY_MS);
      entries.push({ t: ts, ip: `10.1.${i % 7}.${i % 11}`, url: `/flat/${Math.floor(rnd() * 400)}`, status: 200, referrer: '', agent: `agent-${Math.floor(rnd() * 300)}`, rt: 5 });
    }
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const windows: [number, number][] = [
      [NOW - 30 * DAY_MS, NOW],
      [NOW - 7 * DAY_MS - 5, NOW - DAY_MS + 5],
    ];
    // This window has whole days and, at its ends, whole hours with requests.
    const [from, to] = windows[1]!;
    const plan = () => queryBuildState(t.runtime.clickhouse, domain.id, from, to).then((state) => planWindow(from, to, state));
    const listedEverywhere = async () => {
      const p = await plan();
      return p.listed.length === p.days.length + p.hours.length;
    };
    expect(await listedEverywhere()).toBe(true);
    await expectWindowsExact(domain.id, entries, windows);
    // A day and an hour built without their short lists (a builder that died between the statements).
    const day = Math.floor((NOW - 5 * DAY_MS) / DAY_MS) * DAY_MS;
    const hour = (await plan()).hours[0]!;
    await deleteTops(domain.id, 'day', day);
    await deleteTops(domain.id, 'hour', hour);
    const unlisted = await plan();
    expect(unlisted.days).toContain(day);
    expect(bucketSetOf(unlisted.listed).days).not.toContain(day);
    expect(unlisted.hours).toContain(hour);
    expect(bucketSetOf(unlisted.listed).hours).not.toContain(hour);
    await expectWindowsExact(domain.id, entries, windows);
    const rebuilt = await buildAll();
    expect([rebuilt.days, rebuilt.hours]).toEqual([1, 1]);
    expect(await listedEverywhere()).toBe(true);
  });

  it('short hour lists: busy hours with more keys than a list holds, skewed and flat, give the exact lists', async () => {
    const domain = await createDomain('busy-hours.example.com', alice.id);
    const rnd = prng(21);
    // Four whole hours, the newest ending five hours before now: three skewed (600 URLs, a few of
    // them busy) and the oldest flat (300 URLs about equally), 2,000 requests each.
    const newest = Math.floor((NOW - 6 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    const entries: Entry[] = [];
    for (let h = 0; h < 4; h++) {
      for (let i = 0; i < 2_000; i++) {
        const n = h === 3 ? Math.floor(rnd() * 300) : Math.floor(rnd() ** 3 * 600);
        const agent = `agent-${Math.floor(rnd() ** 2 * 200)}`;
        entries.push({ t: newest - h * HOUR_MS + Math.floor(rnd() * 3_600) * 1000, ip: `10.2.${h}.${i % 50}`, url: `/h/${n}`, status: 200, referrer: i % 3 ? '' : `https://ref.example/${n % 150}`, agent, rt: 7 });
      }
    }
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    // The hours' URL lists are cut: each keeps the next URL's count as its threshold.
    const cut = await select<{ n: string }>(
      t.runtime.clickhouse,
      "SELECT toString(countIf(threshold > 0)) AS n FROM access_tops FINAL WHERE domain_id = {d:UInt32} AND span = 'hour' AND dim = 'url'",
      { d: domain.id },
    );
    expect(cut).toEqual([{ n: '4' }]);
    const skewed: [number, number] = [newest - 2 * HOUR_MS, newest + HOUR_MS - 1];
    const plan = planWindow(...skewed, await queryBuildState(t.runtime.clickhouse, domain.id, ...skewed));
    expect(bucketSetOf(plan.listed)).toEqual({ days: [], hours: [newest - 2 * HOUR_MS, newest - HOUR_MS] });
    expect(plan.raw).toEqual([[newest, newest + HOUR_MS]]);
    await expectWindowsExact(domain.id, entries, [
      skewed,
      [newest - 3 * HOUR_MS - 17, newest + HOUR_MS + 17],
      [newest - 2 * HOUR_MS + 5, newest + HOUR_MS - 5],
      [NOW - DAY_MS, NOW],
    ]);
  });

  it('short hour lists: a URL just below every hour’s list is counted through the thresholds', async () => {
    const domain = await createDomain('steady.example.com', alice.id);
    // Four hours, each: 9 URLs of every hour (50 requests), 91 of that hour alone (40 down to 22),
    // then /steady (19), first outside every hour's 100-key list. Over the four hours /steady (76)
    // is 10th; a proof that left out the hours' thresholds would take a 40-request URL instead.
    const newest = Math.floor((NOW - 9 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    const entries: Entry[] = [];
    for (let h = 0; h < 4; h++) {
      const counts: [string, number][] = [
        ...Array.from({ length: 9 }, (_, i): [string, number] => [`/common/${i}`, 50]),
        ...Array.from({ length: 91 }, (_, i): [string, number] => [`/only/${h}/${i}`, 40 - Math.floor(i / 5)]),
        ['/steady', 19],
      ];
      let second = 0;
      for (const [url, n] of counts) {
        for (let i = 0; i < n; i++) entries.push({ t: newest - h * HOUR_MS + (second++ % 3_600) * 1000, ip: '10.3.0.1', url, status: 200, referrer: '', agent: 'a', rt: 1 });
      }
    }
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const window: [number, number] = [newest - 3 * HOUR_MS, newest + HOUR_MS - 1];
    const plan = planWindow(...window, await queryBuildState(t.runtime.clickhouse, domain.id, ...window));
    expect(bucketSetOf(plan.listed).hours).toHaveLength(3);
    const top = (await queryWindowStats(t.runtime.clickhouse, domain.id, ...window)).topUrls;
    expect(top[9]).toEqual({ url: '/steady', requests: 76, percentage: expect.any(Number) });
    await expectWindowsExact(domain.id, entries, [window]);
  });

  it('short hour lists: a candidate missing from some lists is counted in their full rows, read again once its bucket is rebuilt', async () => {
    const domain = await createDomain('rising.example.com', alice.id);
    // Three hours (the newest ending nine hours before now), each: 9 URLs of every hour (50
    // requests), 95 of that hour alone (10) and 10 (5). /rising: 45 in the oldest hour (in its
    // list), 5 in the others (below theirs). It is 10th over the three (55), proven by the lists
    // (thresholds 10 + 10 + 10), its count outside the oldest hour's list looked up in the others'
    // full rows.
    const newest = Math.floor((NOW - 9 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    const line = (t: number, url: string) => ({ t, ip: '10.4.0.1', url, status: 200, referrer: '', agent: 'a', rt: 1 });
    const entries: Entry[] = [];
    for (let h = 1; h <= 3; h++) {
      const counts: [string, number][] = [
        ...Array.from({ length: 9 }, (_, i): [string, number] => [`/common/${i}`, 50]),
        ...Array.from({ length: 95 }, (_, i): [string, number] => [`/only/${h}/${i}`, 10]),
        ...Array.from({ length: 10 }, (_, i): [string, number] => [`/tail/${h}/${i}`, 5]),
        ['/rising', h === 3 ? 45 : 5],
      ];
      let second = 0;
      for (const [url, n] of counts) for (let i = 0; i < n; i++) entries.push(line(newest - h * HOUR_MS + (second++ % 3_600) * 1000, url));
    }
    // A line after them: the builder leaves a domain's newest hour for later.
    entries.push(line(newest + 1000, '/after'));
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const window: [number, number] = [newest - 3 * HOUR_MS, newest];
    const listed = async (w = window) => bucketSetOf(planWindow(...w, await queryBuildState(t.runtime.clickhouse, domain.id, ...w)).listed).hours;
    const tenth = async (w = window) => (await queryWindowStats(t.runtime.clickhouse, domain.id, ...w)).topUrls[9];
    expect(await listed()).toHaveLength(3);
    expect(await tenth()).toEqual({ url: '/rising', requests: 55, percentage: expect.any(Number) });
    // Three more /rising in the middle hour, built again: its lists hold the same keys at a new
    // version, and its count of /rising is read again (the one in memory is of the old version).
    const late = [0, 1, 2].map((i) => line(newest - 2 * HOUR_MS + 100_000 + i, '/rising'));
    await importEntries(domain.name, late, FORMAT);
    await buildAll();
    // A window of other whole hours plans from a state read now (the same window would go on
    // reading the rebuilt hour raw from the state kept for its hours, known-plans.ts).
    const longer: [number, number] = [window[0] - HOUR_MS, window[1]];
    expect(await listed(longer)).toHaveLength(3);
    expect(await tenth(longer)).toEqual({ url: '/rising', requests: 58, percentage: expect.any(Number) });
    await expectWindowsExact(domain.id, [...entries, ...late], [window, longer]);
  });

  it('provenTop: a list is proven only when no key outside the candidates can reach the 10th count', () => {
    const proposed = (counts: number[]) => counts.map((n, i) => ({ key: `/k${String(i).padStart(2, '0')}`, proposed: n, edge: 0, listedIn: 0 }));
    const exactAsProposed = (list: { key: string; proposed: number }[]) => new Map(list.map((c) => [c.key, c.proposed]));
    // 31 proposals: the 31st (20) plus the thresholds (9) stays below the 10th count (30): proven.
    const many = proposed([...Array.from({ length: 10 }, (_, i) => 100 - i * 7), ...Array.from({ length: 21 }, () => 20)]);
    expect(provenTop({ proposed: many, threshold: 9 }, exactAsProposed(many), false)?.map((e) => e.count)).toEqual(Array.from({ length: 10 }, (_, i) => 100 - i * 7));
    // Equal to it: an outside key could tie with the 10th and come first by its name. Not proven.
    const tenth = 100 - 9 * 7;
    expect(provenTop({ proposed: many, threshold: tenth - 20 }, exactAsProposed(many), false)).toBeNull();
    // The exact counts (day rows plus edge) decide, not the proposals.
    const edged = many.map((c, i) => (i === 30 ? c : { ...c, edge: 1 }));
    expect(provenTop({ proposed: edged, threshold: 9 }, exactAsProposed(many), false)?.[0]).toEqual({ key: '/k00', count: 101 });
    // Fewer than 10 keys: proven only when nothing can lie outside (no threshold, no 31st key).
    const few = proposed([5, 4, 3]);
    expect(provenTop({ proposed: few, threshold: 0 }, exactAsProposed(few), false)?.map((e) => e.key)).toEqual(['/k00', '/k01', '/k02']);
    expect(provenTop({ proposed: few, threshold: 1 }, exactAsProposed(few), false)).toBeNull();
    // Status codes order as numbers among equal counts.
    const codes = [500, 404, 1000].map((code) => ({ key: String(code), proposed: 3, edge: 0, listedIn: 0 }));
    expect(provenTop({ proposed: codes, threshold: 0 }, exactAsProposed(codes), true)?.map((e) => e.key)).toEqual(['404', '500', '1000']);
  });

  it('countsOverBoth: a key is exact where each part knows it or has no other key; the rest are bounded', () => {
    const kept = { exact: [{ key: '/a', count: 50 }, { key: '/b', count: 40 }], bound: 30 };
    const ends = { exact: [{ key: '/b', count: 5 }, { key: '/c', count: 4 }], bound: 0 };
    // /b is known on both sides; /a has no other row at the ends (their bound is 0); /c may have up to 30 kept.
    expect(countsOverBoth(kept, ends)).toEqual({ exact: [{ key: '/a', count: 50 }, { key: '/b', count: 45 }], bound: 34 });
    expect(countsOverBoth(ends, { exact: [], bound: 0 })).toEqual({ exact: ends.exact, bound: 0 });
    // Both bounded: a key known on one side only is bounded by its count there plus the other's bound.
    expect(countsOverBoth({ exact: [{ key: '/a', count: 9 }], bound: 2 }, { exact: [{ key: '/z', count: 8 }], bound: 3 })).toEqual({ exact: [], bound: 12 });
    // And the top list is proven only above every bound.
    expect(topProven(countsOverBoth(kept, ends), false)).toBeNull();
  });

  it('windowBuckets: days inside, whole hours around them, partial hours at the ends', () => {
    expect(windowBuckets(Date.UTC(2026, 0, 1, 10, 30), Date.UTC(2026, 0, 8, 5, 15))).toEqual({
      hourFrom: Date.UTC(2026, 0, 1, 11),
      dayFrom: Date.UTC(2026, 0, 2),
      dayTo: Date.UTC(2026, 0, 8),
      hourTo: Date.UTC(2026, 0, 8, 5),
    });
    // No whole day: hours only.
    expect(windowBuckets(Date.UTC(2026, 0, 1, 10, 30), Date.UTC(2026, 0, 2, 9, 30))).toEqual({
      hourFrom: Date.UTC(2026, 0, 1, 11),
      dayFrom: Date.UTC(2026, 0, 2, 9),
      dayTo: Date.UTC(2026, 0, 2, 9),
      hourTo: Date.UTC(2026, 0, 2, 9),
    });
    // No whole hour: nothing.
    const start = Date.UTC(2026, 0, 1, 10, 30);
    expect(windowBuckets(start, Date.UTC(2026, 0, 1, 10, 59))).toEqual({ hourFrom: start, dayFrom: start, dayTo: start, hourTo: start });
  });

  it('planWindow: built days and hours from the rollups, unbuilt ones and the ends raw, adjacent raw ranges joined', () => {
    const h = (day: number, hour: number) => Date.UTC(2026, 0, day, hour);
    const start = Date.UTC(2026, 0, 1, 22, 30);
    const end = Date.UTC(2026, 0, 4, 1, 15);
    const state = emptyBuildState();
    for (let t0 = h(1, 23); t0 < h(4, 1); t0 += HOUR_MS) {
      state.counted.set(t0, 10);
      state.builtHours.set(t0, 10);
    }
    state.builtDays.set(h(2, 0), 240); // Jan 2 built as a day
    state.builtDays.set(h(3, 0), 200); // Jan 3's day is stale: its hours are used …
    state.builtHours.set(h(3, 5), 9); // … except 05:00, which is not built again yet, and is raw
    state.counted.set(h(3, 7), 0); // no rows: neither read nor raw
    state.builtHours.delete(h(1, 23)); // not built: raw, joined with the start's partial hour
    const plan = planWindow(start, end, state);
    expect(plan.days).toEqual([h(2, 0)]);
    expect(plan.hours).toEqual(Array.from({ length: 24 }, (_, i) => h(3, i)).filter((x) => x !== h(3, 5) && x !== h(3, 7)).concat([h(4, 0)]));
    expect(plan.raw).toEqual([
      [start, h(2, 0)],
      [h(3, 5), h(3, 6)],
      [h(4, 1), end + 1],
    ]);
    // A bucket's short top lists are used only when they were built with its current total.
    expect(plan.listed).toEqual([]);
    state.topsDays.set(h(2, 0), 239);
    state.topsHours.set(h(3, 4), 10);
    state.topsHours.set(h(3, 5), 10); // not built again yet: raw, whatever its lists say
    state.topsHours.set(h(3, 6), 9);
    expect(planWindow(start, end, state).listed).toEqual([{ span: 'hour', start: h(3, 4), version: 10 }]);
    state.topsDays.set(h(2, 0), 240);
    expect(planWindow(start, end, state).listed).toEqual([
      { span: 'day', start: h(2, 0), version: 240 },
      { span: 'hour', start: h(3, 4), version: 10 },
    ]);
    // Without a state, or with more raw ranges than a query should carry, the whole window is raw.
    expect(planWindow(start, end, null)).toEqual({ start, end, days: [], hours: [], raw: [[start, end + 1]], listed: [] });
    const patchy = emptyBuildState();
    for (let t0 = h(1, 0); t0 < h(6, 0); t0 += HOUR_MS) {
      patchy.counted.set(t0, 1);
      if (t0 % (2 * HOUR_MS) === 0) patchy.builtHours.set(t0, 1);
    }
    expect(planWindow(h(1, 0) - 5, h(6, 0) + 5, patchy).raw).toEqual([[h(1, 0) - 5, h(6, 0) + 6]]);
  });

  it('planWindow visits the counted hours only, however far the window reaches (1970 to 2106: a million hours)', () => {
    // Maps that count their lookups: a plan of the widest window over three days of rows must not
    // look at every hour of it (1.2 million lookups and about 100 ms of one request's own CPU before).
    let lookups = 0;
    class CountingMap extends Map<number, number> {
      override get(key: number) {
        lookups++;
        return super.get(key);
      }
    }
    const state = { counted: new CountingMap(), builtHours: new CountingMap(), builtDays: new CountingMap(), topsHours: new CountingMap(), topsDays: new CountingMap() };
    const day = Date.UTC(2026, 0, 10);
    for (let h = day - 5 * HOUR_MS; h < day + 2 * DAY_MS + 3 * HOUR_MS; h += HOUR_MS) {
      state.counted.set(h, 7);
      state.builtHours.set(h, 7);
    }
    state.builtDays.set(day, 7 * 24);
    state.counted.set(day + 30 * HOUR_MS, 0);
    state.builtHours.set(day + 31 * HOUR_MS, 6); // counted 7: raw
    const start = Date.UTC(1970, 0, 1);
    const end = Date.UTC(2106, 1, 6, 23, 59, 59, 999);
    const plan = planWindow(start, end, state);
    expect(lookups).toBeLessThan(10 * state.counted.size);
    expect(plan.days).toEqual([day]);
    expect(plan.hours).toEqual([
      ...Array.from({ length: 5 }, (_, i) => day - (5 - i) * HOUR_MS),
      ...Array.from({ length: 27 }, (_, i) => day + DAY_MS + i * HOUR_MS).filter((h) => h !== day + 30 * HOUR_MS && h !== day + 31 * HOUR_MS),
    ]);
    expect(plan.raw).toEqual([
      [start, start],
      [day + 31 * HOUR_MS, day + 32 * HOUR_MS],
      [Date.UTC(2106, 1, 6, 23), end + 1],
    ].filter(([a, b]) => a! < b!));
  });

  it('planWindow plans as an hour-by-hour walk of the window does, for any build state', () => {
    // The reference: every hour and day of the window in turn, as planWindow did before it visited counted hours only.
    const walk = (start: number, end: number, state: ReturnType<typeof emptyBuildState>) => {
      const b = windowBuckets(start, end);
      const raw: [number, number][] = [];
      const addRaw = (from: number, to: number) => {
        if (from >= to) return;
        const last = raw[raw.length - 1];
        if (last && last[1] === from) last[1] = to;
        else raw.push([from, to]);
      };
      const days: number[] = [];
      const hours: number[] = [];
      const hour = (h: number) => {
        const counted = state.counted.get(h) ?? 0;
        if (counted === 0) return;
        if (state.builtHours.get(h) === counted) hours.push(h);
        else addRaw(h, h + HOUR_MS);
      };
      addRaw(start, b.hourFrom);
      for (let h = b.hourFrom; h < b.dayFrom; h += HOUR_MS) hour(h);
      for (let d = b.dayFrom; d < b.dayTo; d += DAY_MS) {
        let counted = 0;
        for (let h = d; h < d + DAY_MS; h += HOUR_MS) counted += state.counted.get(h) ?? 0;
        if (counted === 0) continue;
        if (state.builtDays.get(d) === counted) days.push(d);
        else for (let h = d; h < d + DAY_MS; h += HOUR_MS) hour(h);
      }
      for (let h = b.dayTo; h < b.hourTo; h += HOUR_MS) hour(h);
      addRaw(b.hourTo, end + 1);
      return { days, hours, raw };
    };
    const random = prng(1313);
    const base = Date.UTC(2026, 2, 1);
    for (let run = 0; run < 300; run++) {
      const state = emptyBuildState();
      for (let h = base - 2 * DAY_MS; h < base + 6 * DAY_MS; h += HOUR_MS) {
        const r = random();
        if (r < 0.4) continue;
        const n = r < 0.45 ? 0 : 1 + Math.floor(random() * 5);
        state.counted.set(h, n);
        if (random() < 0.8) state.builtHours.set(h, random() < 0.95 ? n : n + 1);
      }
      for (let d = base - 2 * DAY_MS; d < base + 6 * DAY_MS; d += DAY_MS) {
        let sum = 0;
        for (let h = d; h < d + DAY_MS; h += HOUR_MS) sum += state.counted.get(h) ?? 0;
        if (random() < 0.6) state.builtDays.set(d, random() < 0.8 ? sum : sum - 1);
      }
      const start = base - DAY_MS + Math.floor(random() * 3 * DAY_MS);
      const end = start + Math.floor(random() * 4 * DAY_MS);
      const plan = planWindow(start, end, state);
      const want = walk(start, end, state);
      const expected = want.raw.length > 48 ? { days: [], hours: [], raw: [[start, end + 1]] } : want;
      expect({ days: plan.days, hours: plan.hours, raw: plan.raw }, `run ${run}`).toEqual(expected);
    }
  });

  it('a retried batch that ClickHouse deduplicates is not counted again by the rollups', async () => {
    const domain = await createDomain('retry.example.com', alice.id);
    const base = { method: 'GET', protocol: 'HTTP/1.1', responseSize: 10, referrer: 'https://r.example/', userAgent: 'ua', host: null };
    // One batch over three days and several hours: one part per day partition.
    const rows: AccessRow[] = Array.from({ length: 300 }, (_, i) => ({
      ...base,
      domainId: domain.id,
      id: i + 1,
      timestamp: NOW - 2 * DAY_MS - i * 11 * 60_000,
      ipAddress: `10.0.0.${i % 37}`,
      url: `/r/${i % 13}`,
      statusCode: i % 9 === 0 ? 503 : 200,
      responseTime: i % 4 === 0 ? null : i,
    }));
    const token = dedupToken('test:retry', 0, 300);
    const HOUR_ROWS = 'SELECT hour, toString(sum(rows)) AS n FROM access_hour_rows WHERE domain_id = {d:UInt32} GROUP BY hour ORDER BY hour';
    await insertAccessBatch(t.runtime.clickhouse, rows, token);
    const once = await select<{ hour: string; n: string }>(t.runtime.clickhouse, HOUR_ROWS, { d: domain.id });
    expect(once.reduce((sum, r) => sum + Number(r.n), 0)).toBe(300);
    await insertAccessBatch(t.runtime.clickhouse, rows, token);
    await insertAccessBatch(t.runtime.clickhouse, rows, token);
    expect(await select(t.runtime.clickhouse, 'SELECT toString(count()) AS n FROM access_logs WHERE domain_id = {d:UInt32}', { d: domain.id })).toEqual([{ n: '300' }]);
    // The hour counts decide which rollups are used: counted twice, no bucket would ever match.
    expect(await select(t.runtime.clickhouse, HOUR_ROWS, { d: domain.id })).toEqual(once);
    await buildAll();
    expect(await builtSpans(domain.id)).toEqual([
      { span: 'hour', n: '300' },
      { span: 'day', n: '300' },
    ]);

    // Another batch with the same rows but its own token is new data, and is counted.
    const entries: Entry[] = rows.map((r) => ({ t: r.timestamp, ip: r.ipAddress, url: r.url, status: r.statusCode, referrer: r.referrer, agent: r.userAgent, rt: r.responseTime, bytes: r.responseSize }));
    const res = await stats(domain.id, alice.token, '?period=7d');
    expect(res.body.data).toEqual({ period: '7d', ...bruteForce(entries, NOW - 7 * DAY_MS, NOW) });
    await insertAccessBatch(t.runtime.clickhouse, rows.map((r) => ({ ...r, id: r.id + 1000 })), dedupToken('test:retry', 300, 600));
    const twice = await stats(domain.id, alice.token, '?period=7d');
    expect(twice.body.data).toEqual({ period: '7d', ...bruteForce([...entries, ...entries], NOW - 7 * DAY_MS, NOW) });
  });

  it('deleteDomainData removes a domain’s rollup rows and no other domain’s', async () => {
    const domain = await createDomain('gone.example.com', alice.id);
    const entries = generate(9, 300, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    const count = (table: string, id: number) => select<{ n: string }>(t.runtime.clickhouse, `SELECT toString(count()) AS n FROM ${table} WHERE domain_id = {d:UInt32}`, { d: id });
    await buildAll();
    expect(Number((await count('access_rollups', domain.id))[0]!.n)).toBeGreaterThan(0);
    expect(Number((await count('access_hour_rows', domain.id))[0]!.n)).toBeGreaterThan(0);
    const before = await stats(shop.id, alice.token, '?period=30d');
    await deleteDomainData(t.runtime.clickhouse, domain.id);
    expect(await count('access_rollups', domain.id)).toEqual([{ n: '0' }]);
    expect(await count('access_hour_rows', domain.id)).toEqual([{ n: '0' }]);
    expect((await stats(shop.id, alice.token, '?period=30d')).body).toEqual(before.body);
  });
});
