/**
 * What the tests of the statistics (GET /api/logs/domains/:domainId/stats, the rollups it reads) share:
 * an app with alice's shop (the recommended format and a file in `combined`), plain (no
 * $request_time), empty, and nora's domain; lines generated from fixed seeds, imported through the
 * real import path; and a brute force over the generated entries, independent of the code.
 */
import { afterAll, beforeAll, expect } from 'vitest';
import { buildRollups, type RollupRound } from '../../../src/rollups/builder.js';
import { PARTIALS, type PartialState } from '../../../src/stats/registry.js';
import { type WindowStats } from '../../../src/stats/figures.js';
import { queryWindowStats } from '../../../src/stats/window.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';
import { FORMAT, importText, select, timeLocal, until } from '../../support/ingest.js';
import { prng } from '../../support/random.js';
import { byBytes } from '../../support/query-rows.js';
import { registerDomain } from '../../support/domains.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';

export const PERIODS = { '1h': HOUR_MS, '24h': DAY_MS, '7d': 7 * DAY_MS, '30d': 30 * DAY_MS } as const;
export type Period = keyof typeof PERIODS;

/** The test's "now", whole seconds: every generated time is relative to it. */
export const NOW = Math.floor(Date.now() / 1000) * 1000;
/** How long after NOW the requests may run: no line lies where that could move it in or out of a window. */
export const SLACK = 10 * 60_000;

export let t: TestApp;
export let admin: { id: number; token: string };
export let alice: { id: number; token: string };
export let bob: { id: number; token: string };
/** Owns a domain, holds no logs:read. */
export let nora: { id: number; token: string };

/** An entry as the brute force sees it: the fields the statistics use. */
export interface Entry {
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
export const nearBoundary = (ts: number) => Object.values(PERIODS).some((p) => ts >= NOW - p - 2000 && ts <= NOW - p + SLACK + 2000);

export const STATUSES = [200, 200, 200, 200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 404, 500, 502, 503, 504];
export const AGENTS = ['Mozilla/5.0 (X11; Linux x86_64)', 'curl/8.5.0', 'Googlebot/2.1', '', 'python-requests/2.31', 'Mozilla/5.0 (iPhone)', 'Wget/1.21', 'bingbot/2.0', 'Zeta', 'alpha', 'Beta', 'ÄÖÜ-agent/1'];
export const REFERRERS = ['', '', '', 'https://www.google.com/', 'https://example.org/a', 'https://example.org/B', 'https://news.ycombinator.com/', 'android-app://x', 'https://t.co/z'];
/** Fifteen URLs always requested together: equal counts in every window, so ties decide their order. */
export const TIED = Array.from({ length: 15 }, (_, i) => `/tie/${String.fromCharCode(i % 2 ? 97 + i : 65 + i)}${i}`);

/**
 * `count` requests over the 31 days before NOW (and a few after it), in time order: single requests
 * over 300 URLs, and bursts that request all TIED URLs in one second with one status and one agent.
 */
export function generate(seed: number, count: number, withResponseTime: boolean): Entry[] {
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
export const bytesOf = (e: Entry) => e.bytes ?? 100 + (Math.floor(e.t / 1000) % 5_000) + e.url.length * 7;

export function lineOf(e: Entry): string {
  const field = (s: string) => (s === '' ? '-' : s);
  const base = `${e.ip} - - [${timeLocal(e.t)}] "GET ${e.url} HTTP/1.1" ${e.status} ${bytesOf(e)} "${field(e.referrer)}" "${field(e.agent)}"`;
  return e.rt === null ? base : `${base} ${(e.rt / 1000).toFixed(3)}`;
}

export async function importEntries(domain: string, entries: Entry[], format: string): Promise<void> {
  const text = entries.map((e) => `${lineOf(e)}\n`).join('');
  const summary = await importText(t, domain, text, { format, limits: { maxLineBytes: 64 * 1024, chunkMaxLines: 2_000, chunkMaxBytes: 1 << 20 } });
  expect(summary.inserted).toBe(entries.length);
}

// ---------------------------------------------------------------------------------------------
// The reference answers

export const pct = (n: number, total: number) => Math.round((n * 10_000) / total) / 100;

/** The exact nearest-rank percentile `n` of `values`; null when there are none. */
export function nearestRank(values: number[], n: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.ceil((n * sorted.length) / 100) - 1]!;
}

/**
 * Matches a percentile as the statistics give it (src/stats/registry.ts): the exact value below
 * 128 ms, else within 1 % of it (and the 2-decimal rounding of the bucket's representative).
 */
export const nearPercentile = (exact: number | null) => ({
  asymmetricMatch: (got: unknown) =>
    exact === null || exact < 128 ? got === exact : typeof got === 'number' && Math.abs(got - exact) <= 0.01 * exact + 0.005,
  toString: () => `a percentile near ${exact}`,
  toAsymmetricMatcher: () => `a percentile near ${exact}`,
});
export const percentilesOf = (times: number[]) => ({ p50: nearPercentile(nearestRank(times, 50)), p95: nearPercentile(nearestRank(times, 95)), p99: nearPercentile(nearestRank(times, 99)) });

/** The statistics of [start, end] computed in JavaScript from the entries themselves. */
export function bruteForce(entries: Entry[], start: number, end: number): WindowStats {
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
export async function rawSql(domainId: number, start: number, end: number): Promise<WindowStats> {
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
export let shop: { id: number; name: string };
export let shopEntries: Entry[];
/** alice's domain whose format has no $request_time at all. */
export let plain: { id: number; name: string };
export let plainEntries: Entry[];
/** alice's domain without a line. */
export let empty: { id: number; name: string };
/** nora's domain (nora has no logs:read). */
export let noras: { id: number; name: string };

export const createDomain = (name: string, ownerId: number) => registerDomain(t.app, admin.token, { ownerId, name });

/** The builder's whole backlog, as `serve` runs it (settled a second after an hour ends). */
export async function buildAll(): Promise<RollupRound> {
  return buildRollups(t.runtime.clickhouse, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
}

export const stats = (domainId: number, token: string, query = '') => call(t.app, 'GET', `/api/logs/domains/${domainId}/stats${query}`, { token });

/** Rows per span as access_rollups holds them (the totals), and per span as the entries give them. */
export const ROLLUP_TOTALS = "SELECT span, toString(sum(requests)) AS n FROM access_rollups WHERE domain_id = {d:UInt32} AND dim = 'total' GROUP BY span ORDER BY span";
export const builtSpans = (domainId: number) => select<{ span: string; n: string }>(t.runtime.clickhouse, ROLLUP_TOTALS, { d: domainId });
/**
 * Each built total row holds every partial of the registry exactly as its bucket's rows give it
 * (a set and a maximum finalised, a histogram without keys of count 0): its rollup column read
 * against its SQL over the raw rows, per hour and per day.
 */
export async function expectTotalsExact(domainId: number): Promise<void> {
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
export const complete = (entries: Entry[], unit: number) => String(entries.filter((e) => Math.floor(e.t / unit) * unit + unit <= Date.now() - 1000).length);
/**
 * Waits, when the next hour ends (and settles) within `marginMs`, until it has: a build after this
 * and the counts of `complete` taken after that build then see the same complete hours.
 */
export async function clearOfHourEnd(marginMs = 20_000): Promise<void> {
  const settled = (Math.floor(Date.now() / HOUR_MS) + 1) * HOUR_MS + 1000;
  if (settled - Date.now() < marginMs) await until(() => Date.now() > settled + 1000, 'the hour to end and settle', marginMs + 5_000, 250);
}
/** What a second builder would add to a built bucket: the same difference again. */
export const writeTwice = (domainId: number, span: 'hour' | 'day', bucket: number) =>
  t.runtime.clickhouse.command({
    query: `INSERT INTO access_rollups SELECT * FROM access_rollups WHERE domain_id = {d:UInt32} AND span = {span:String} AND bucket = toDateTime({b:UInt32}, 'UTC')`,
    query_params: { d: domainId, span, b: bucket / 1000 },
  });

/** Every window of the list: through the rollups as built now, raw, brute force and plain SQL agree. */
export async function expectWindowsExact(domainId: number, entries: Entry[], windows: [number, number][]): Promise<void> {
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
export async function deleteTops(domainId: number, span: 'hour' | 'day', bucket: number): Promise<void> {
  await t.runtime.clickhouse.command({
    query: "DELETE FROM access_tops WHERE domain_id = {d:UInt32} AND span = {span:String} AND bucket = toDateTime({bucket:UInt32}, 'UTC') SETTINGS lightweight_deletes_sync = 2",
    query_params: { d: domainId, span, bucket: bucket / 1000 },
  });
}

/** The app for the file's tests with alice, bob and nora (no logs:read), and their four domains; with `lines`, shop's and plain's generated lines imported (through the real import path) and built into rollups. */
export function useShops({ lines = true }: { lines?: boolean } = {}): void {
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
    if (!lines) return;

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
  afterAll(async () => {
    await t?.close();
  });
}
