/**
 * Access rows for the stats query tests, inserted straight into access_logs (the user-agent class
 * columns included), and the answers of POST /api/logs/query computed from them in JavaScript:
 * filters, dimensions, time buckets with gaps filled, every metric (percentiles exact, nearest
 * rank), the default and asked orders. Written apart from src/stats so that both cannot share a
 * mistake: time buckets, hosts, globs and CIDR ranges are worked out here their own way.
 *
 *   const rows = generateRows({ seed: 1, domain: 7, count: 3000, from, to });
 *   await insertRows(t.runtime.clickhouse, rows);
 *   const expected = bruteForce(rows, { metrics: ['requests'], dimensions: ['url'], filters: [], window: { start, end }, names });
 */
import net from 'node:net';
import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import { prng } from './random.js';
import { storeAgentClasses } from '../../ingest/sinks/clickhouse.js';
import { agentClass, type BotKind, type Device } from '../../ingest/transforms/user-agent.js';
import { DAY_MS, HOUR_MS, MINUTE_MS } from '../../core/durations.js';


export interface Row {
  domain: number;
  id: number;
  t: number;
  ip: string;
  method: string;
  url: string;
  status: number;
  size: number;
  referrer: string;
  agent: string;
  rt: number | null;
  browser: string;
  os: string;
  device: string;
  botName: string;
  botKind: string;
}

/** Text with every metacharacter of SQL, LIKE, globs and JSON. */
export const HOSTILE = `x' OR 1=1; -- "q" \\ %_* {f0:String}`;
/** 8 KB and more: URLs as long as nginx's large_client_header_buffers let through. */
export const LONG_URL = `/long/${'L'.repeat(8192)}`;
export const LONG_URL_PCT = `/long/${'L'.repeat(8191)}%_`;

export const URLS = [
  '/',
  '/api/v1/orders/1',
  '/api/v1/orders/2?x=1',
  '/api/',
  '/api/v1/orders/1?page=2&sort=%27a%27',
  "/quote/it's",
  '/pct/100%_off',
  '/pct/100x_off',
  '/back\\slash',
  '/star/*lit*',
  '/dq/"x"',
  '/Item/CASE',
  '/item/case?x=1',
  '/ünï/Ç',
  '/semi;--',
  `/h/${HOSTILE}`,
  LONG_URL,
  LONG_URL_PCT,
];

export const METHODS = ['GET', 'GET', 'GET', 'GET', 'GET', 'POST', 'POST', 'PUT', 'DELETE', 'HEAD', "G'ET%_"];
export const STATUSES = [200, 200, 200, 200, 200, 200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 404, 499, 500, 502, 503];

/** Referrers with their hosts as the query reads them (scheme://[user@]host[:port]…, ASCII lower-cased). */
export const REFERRERS: [string, string][] = [
  ['', ''],
  ['', ''],
  ['', ''],
  ['https://www.google.com/search?q=100%25', 'www.google.com'],
  ['https://WWW.Google.com/', 'www.google.com'],
  ['http://user:pw@Example.ORG:8080/a_b', 'example.org'],
  ['https://[2001:db8::1]:8443/x', '[2001:db8::1]'],
  ['http://localhost:3000/', 'localhost'],
  ['android-app://com.google.android.gm', 'com.google.android.gm'],
  [`https://x.example/${HOSTILE}`, 'x.example'],
  ['www.no-scheme.com/x', ''],
];
const hostOf = new Map(REFERRERS);

/** User agents with the classes the ingest would store for them. */
export const AGENTS = [
  { agent: 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36', browser: 'Chrome', os: 'Windows', device: 'desktop', botName: '', botKind: '' },
  { agent: 'Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0', browser: 'Firefox', os: 'Linux', device: 'desktop', botName: '', botKind: '' },
  { agent: 'Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) Mobile/15E148 Safari/604.1', browser: 'Mobile Safari', os: 'iOS', device: 'mobile', botName: '', botKind: '' },
  { agent: 'Mozilla/5.0 (iPad; CPU OS 17_0 like Mac OS X) Mobile/15E148 Safari/604.1', browser: 'Mobile Safari', os: 'iOS', device: 'tablet', botName: '', botKind: '' },
  { agent: 'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)', browser: '', os: '', device: 'bot', botName: 'Googlebot', botKind: 'search' },
  { agent: 'Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)', browser: '', os: '', device: 'bot', botName: 'GPTBot', botKind: 'ai' },
  { agent: 'curl/8.5.0', browser: 'curl', os: '', device: 'other', botName: '', botKind: '' },
  { agent: '', browser: '', os: '', device: 'other', botName: '', botKind: '' },
  { agent: HOSTILE, browser: `Br'ow"ser\\%_*`, os: "O'S; --", device: 'bot', botName: `Bot'%_\\"*`, botKind: 'other' },
];

/** Client addresses: IPv4 in three ranges, IPv6 in two, and a logged text that is no address. */
function ipAddress(r: () => number): string {
  const n = (k: number) => Math.floor(r() * k);
  switch (n(7)) {
    case 0:
    case 1:
      return `10.${n(3)}.${n(4)}.${n(20)}`;
    case 2:
      return `192.168.1.${n(256)}`;
    case 3:
      return `203.0.113.${n(16)}`;
    case 4:
      return `2001:db8::${n(300).toString(16)}`;
    case 5:
      return `2001:db8:1::${n(40).toString(16)}`;
    default:
      return n(10) === 0 ? `unknown${HOSTILE}` : `10.9.${n(2)}.${n(5)}`;
  }
}

/** Response times: none for 1 in 20, exact territory (< 128 ms) for about a third, else up to ~6 minutes. */
function responseTime(r: () => number): number | null {
  const x = r();
  if (x < 0.05) return null;
  if (x < 0.35) return Math.floor(r() * 128);
  return Math.floor(128 * Math.exp(r() * 8));
}

/** `count` rows of `domain` at random times in [from, to), ids from `firstId`. */
export function generateRows(options: { seed: number; domain: number; count: number; from: number; to: number; firstId?: number }): Row[] {
  const r = prng(options.seed);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(r() * list.length)]!;
  // Skewed: the first URLs far more often than the last, so that orders by count are not all ties.
  const url = (i: number) => (r() < 0.1 ? `/u/${i % 37}` : URLS[Math.floor(r() ** 2 * URLS.length)]!);
  const rows: Row[] = [];
  for (let i = 0; i < options.count; i++) {
    const agent = pick(AGENTS);
    rows.push({
      domain: options.domain,
      id: (options.firstId ?? 1) + i,
      t: options.from + Math.floor(r() * (options.to - options.from)),
      ip: ipAddress(r),
      method: pick(METHODS),
      url: url(i),
      status: r() < 0.01 ? 0 : pick(STATUSES),
      size: r() < 0.01 ? 3_000_000_000 + Math.floor(r() * 1000) : Math.floor(r() * 100_000),
      referrer: pick(REFERRERS)[0],
      agent: agent.agent,
      rt: responseTime(r),
      browser: agent.browser,
      os: agent.os,
      device: agent.device,
      botName: agent.botName,
      botKind: agent.botKind,
    });
  }
  return rows;
}

const chTime = (ms: number) => new Date(ms).toISOString().slice(0, 23).replace('T', ' ');

/** Inserts in time order, a batch holding at most 90 days: the table has a partition per day, an insert may touch 100. */
/** `classified` false: every row with agent_class 0, as a writer other than the sink stores it before the backfill classifies it. */
export async function insertRows(clickhouse: ClickHouseClient, rows: readonly Row[], classified = true): Promise<void> {
  const sorted = [...rows].sort((a, b) => a.t - b.t);
  const batches: Row[][] = [];
  for (const row of sorted) {
    const batch = batches[batches.length - 1];
    if (batch && batch.length < 2000 && row.t - batch[0]!.t < 89 * DAY_MS) batch.push(row);
    else batches.push([row]);
  }
  for (const batch of batches) {
    const values = batch.map((r) => ({
      domain_id: r.domain,
      id: r.id,
      timestamp: chTime(r.t),
      ip_address: r.ip,
      method: r.method,
      url: r.url,
      protocol: 'HTTP/1.1',
      status_code: r.status,
      response_size: r.size,
      referrer: r.referrer,
      user_agent: r.agent,
      response_time: r.rt,
      agent_class: classified ? agentClass({ browser: r.browser, os: r.os, device: r.device as Device, botName: r.botName, botKind: r.botKind as BotKind }).id : 0,
    }));
    // As the sink does: the classes before the rows that carry them.
    await storeAgentClasses(clickhouse);
    await clickhouse.insert({ table: 'access_logs', values, format: 'JSONEachRow' });
  }
}

// ---------------------------------------------------------------------------------------------
// Brute force
// ---------------------------------------------------------------------------------------------

export type Value = string | number | boolean;
export type Filter = [string, string, unknown[]];

/** A dimension's value of a row; a time dimension's is its bucket start (ms). */
export function dimensionValue(row: Row, dimension: string, names: Map<number, string>): Value {
  switch (dimension) {
    case 'domain':
      return names.get(row.domain)!;
    case 'url':
      return row.url;
    case 'path':
      return row.url.split('?')[0]!;
    case 'statusCode':
      return row.status;
    case 'statusClass':
      return `${Math.floor(row.status / 100)}xx`;
    case 'method':
      return row.method;
    case 'ipAddress':
      return row.ip;
    case 'userAgent':
      return row.agent;
    case 'referrer':
      return row.referrer;
    case 'referrerHost':
      return hostOf.get(row.referrer)!;
    case 'browser':
      return row.browser;
    case 'os':
      return row.os;
    case 'device':
      return row.device;
    case 'bot':
      return row.device === 'bot';
    case 'botName':
      return row.botName;
    case 'botKind':
      return row.botKind;
    default:
      throw new Error(`no brute force for dimension ${dimension}`);
  }
}

const FIXED: Record<string, number> = { minute: MINUTE_MS, '5minutes': 5 * MINUTE_MS, '15minutes': 15 * MINUTE_MS, hour: HOUR_MS, '6hours': 6 * HOUR_MS, day: DAY_MS };

/** The start of the bucket holding `t`: weeks from Monday, calendar months, all UTC. */
export function bucketStart(interval: string, t: number): number {
  const size = FIXED[interval];
  if (size) return t - (((t % size) + size) % size);
  const d = new Date(t);
  if (interval === 'month') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
  if (interval === 'week') return Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() - ((d.getUTCDay() + 6) % 7));
  throw new Error(`no interval ${interval}`);
}

export function bucketsBetween(interval: string, start: number, end: number): number[] {
  const out: number[] = [];
  for (let b = bucketStart(interval, start); b <= end; b = bucketStart(interval, b + (FIXED[interval] ?? (interval === 'week' ? 7 * DAY_MS : 32 * DAY_MS)))) out.push(b);
  return out;
}

const globs = new Map<string, RegExp>();

function globMatches(glob: string, value: string): boolean {
  let regex = globs.get(glob);
  if (!regex) {
    const pattern = glob
      .split('*')
      .map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))
      .join('[\\s\\S]*');
    regex = new RegExp(`^${pattern}$`, 'u');
    globs.set(glob, regex);
  }
  return regex.test(value);
}

function inCidr(ip: string, cidr: string): boolean {
  const version = net.isIP(ip);
  if (version === 0) return false;
  const [address, bits] = cidr.split('/');
  const type = net.isIP(address!) === 4 ? 'ipv4' : 'ipv6';
  if ((type === 'ipv4') !== (version === 4)) return false;
  const list = new net.BlockList();
  if (bits === undefined) list.addAddress(address!, type);
  else list.addSubnet(address!, Number(bits), type);
  return list.check(ip, type);
}

export function matches(row: Row, [op, dimension, values]: Filter, names: Map<number, string>): boolean {
  const value = dimensionValue(row, dimension, names);
  switch (op) {
    case 'is':
      return values.includes(value);
    case 'isNot':
      return !values.includes(value);
    case 'contains':
      return values.some((v) => String(value).toLowerCase().includes(String(v).toLowerCase()));
    case 'glob':
      return values.some((v) => globMatches(String(v), String(value)));
    case 'cidr':
      return values.some((v) => inCidr(row.ip, String(v)));
    default:
      throw new Error(`no operator ${op}`);
  }
}

/** Nearest rank: the smallest value with at least n % of the values at or below it. */
export function nearestRank(sorted: number[], n: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.ceil((n * sorted.length) / 100) - 1]!;
}

export const PERCENTILE_METRICS = new Set(['p50ResponseTime', 'p95ResponseTime', 'p99ResponseTime']);

export function metricValue(rows: Row[], metric: string): number | null {
  const n = rows.length;
  const share = (k: number) => (n === 0 ? 0 : Math.round((10_000 * k) / n) / 10_000);
  const times = rows.flatMap((r) => (r.rt === null ? [] : [r.rt])).sort((a, b) => a - b);
  switch (metric) {
    case 'requests':
      return n;
    case 'visitors':
      return new Set(rows.map((r) => r.ip)).size;
    case 'errorRate':
      return share(rows.filter((r) => r.status >= 500).length);
    case 'clientErrorRate':
      return share(rows.filter((r) => r.status >= 400 && r.status < 500).length);
    case 'bandwidth':
      return rows.reduce((s, r) => s + r.size, 0);
    case 'averageResponseTime':
      return times.length === 0 ? null : Math.round((100 * times.reduce((s, x) => s + x, 0)) / times.length) / 100;
    case 'totalResponseTime':
      return times.length === 0 ? null : times.reduce((s, x) => s + x, 0);
    case 'p50ResponseTime':
      return nearestRank(times, 50);
    case 'p95ResponseTime':
      return nearestRank(times, 95);
    case 'p99ResponseTime':
      return nearestRank(times, 99);
    case 'maxResponseTime':
      return times.length === 0 ? null : times[times.length - 1]!;
    case 'uniquePaths':
      return new Set(rows.map((r) => r.url.split('?')[0])).size;
    default:
      throw new Error(`no brute force for metric ${metric}`);
  }
}

export interface Spec {
  /** The domains read (ids). */
  domains: number[];
  metrics: string[];
  dimensions: string[];
  filters: Filter[];
  window: { start: number; end: number };
  /** The time dimension's interval (meta.interval of the answer). */
  interval?: string | null;
  orderBy?: [string, 'asc' | 'desc'][];
  names: Map<number, string>;
}

export interface ExpectedRow {
  dimensions: Value[];
  metrics: (number | null)[];
}

const isTime = (d: string) => d === 'time' || d.startsWith('time:');
/** ClickHouse's order of strings, by their UTF-8 bytes: the tests' own, independent of core/byte-order.ts. */
export const byBytes = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** The rows of `spec` read from `domains` in the window and through the filters. */
export const selected = (rows: readonly Row[], spec: Spec) =>
  rows.filter((r) => spec.domains.includes(r.domain) && r.t >= spec.window.start && r.t <= spec.window.end && spec.filters.every((f) => matches(r, f, spec.names)));

/** Every result row of the query in its order: groups, gaps filled, ordered as the endpoint documents. */
export function bruteForce(rows: readonly Row[], spec: Spec): ExpectedRow[] {
  const picked = selected(rows, spec);
  const timeAt = spec.dimensions.findIndex(isTime);
  const keyOf = (r: Row): Value[] => spec.dimensions.map((d) => (isTime(d) ? bucketStart(spec.interval!, r.t) : dimensionValue(r, d, spec.names)));
  const groups = new Map<string, { key: Value[]; rows: Row[] }>();
  for (const r of picked) {
    const key = keyOf(r);
    const id = JSON.stringify(key);
    if (!groups.has(id)) groups.set(id, { key, rows: [] });
    groups.get(id)!.rows.push(r);
  }
  if (timeAt >= 0) {
    const others = new Map<string, Value[]>();
    for (const g of groups.values()) others.set(JSON.stringify(g.key.filter((_, i) => i !== timeAt)), g.key);
    if (spec.dimensions.length === 1) others.set('[]', [0]);
    for (const example of others.values()) {
      for (const b of bucketsBetween(spec.interval!, spec.window.start, spec.window.end)) {
        const key = example.map((v, i) => (i === timeAt ? b : v));
        const id = JSON.stringify(key);
        if (!groups.has(id)) groups.set(id, { key, rows: [] });
      }
    }
  }
  if (spec.dimensions.length === 0) groups.set('[]', { key: [], rows: picked });
  const out = [...groups.values()].map((g) => ({ dimensions: g.key, metrics: spec.metrics.map((m) => metricValue(g.rows, m)) }));
  const terms: [string, 'asc' | 'desc'][] = spec.orderBy ? [...spec.orderBy] : timeAt >= 0 ? [[spec.dimensions[timeAt]!, 'asc']] : [[spec.metrics[0]!, 'desc']];
  for (const d of spec.dimensions) if (!terms.some(([name]) => name === d)) terms.push([d, 'asc']);
  out.sort((a, b) => {
    for (const [name, direction] of terms) {
      const m = spec.metrics.indexOf(name);
      const [x, y] = m >= 0 ? [a.metrics[m]!, b.metrics[m]!] : [a.dimensions[spec.dimensions.indexOf(name)]!, b.dimensions[spec.dimensions.indexOf(name)]!];
      if (x === y) continue;
      if (x === null) return 1;
      if (y === null) return -1;
      const ascending = typeof x === 'string' ? byBytes(x, y as string) : Number(x) - Number(y);
      if (ascending !== 0) return direction === 'asc' ? ascending : -ascending;
    }
    return 0;
  });
  return out.map((row) => ({ ...row, dimensions: row.dimensions.map((v, i) => (i === timeAt ? new Date(Number(v)).toISOString() : v)) }));
}

/** Exact below 128 ms, else within 1 % of the exact nearest-rank value, and the rounding of the figure to 2 decimals. */
export const withinPercentileBound = (actual: number | null, exact: number | null) =>
  exact === null || actual === null ? actual === exact : exact < 128 ? actual === exact : Math.abs(actual - exact) <= 0.01 * exact + 0.005;
