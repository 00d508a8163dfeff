/**
 * A deterministic, realistic nginx access log for the ingest benches: nginx `combined` plus
 * `$request_time`, times ascending over the 30 days before today (UTC midnight, so a run on the
 * same day writes the same bytes; recent enough for the 90-day TTL of access_logs).
 */
import fs from 'node:fs';
import { prng } from '../../test/support/random.js';

/** The nginx log_format of the generated lines. */
export const ACCESS_FORMAT =
  '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';

/** The zone offset written in $time_local: a server in Central Europe in winter. */
export const TIME_OFFSET = '+0100';

const DAYS = 30;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

const AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.0.0 Safari/537.36 Edg/130.0.2849.80',
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:133.0) Gecko/20100101 Firefox/133.0',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Safari/605.1.15',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36',
  'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36',
  'Mozilla/5.0 (X11; Ubuntu; Linux x86_64; rv:132.0) Gecko/20100101 Firefox/132.0',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.81 Mobile Safari/537.36',
  'Mozilla/5.0 (Linux; Android 13; SM-A536B) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0.6723.107 Mobile Safari/537.36',
  'Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/26.0 Chrome/122.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
  'Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.6778.69 Mobile Safari/537.36 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
  'Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)',
  'Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)',
  'Mozilla/5.0 (compatible; YandexBot/3.0; +http://yandex.com/bots)',
  'facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)',
  'curl/8.5.0',
  'Wget/1.21.3',
  'python-requests/2.32.3',
  'Go-http-client/1.1',
  'Prometheus/2.54.1',
  '-',
] as const;
// Browsers dominate; the last ones (tools, '-') are rare.
const AGENT_WEIGHTS = [22, 5, 8, 7, 6, 4, 2, 12, 3, 8, 4, 3, 4, 2, 2, 1, 1, 1, 1, 0.5, 1, 0.5, 0.5, 0.5];

const REFERRERS = [
  'https://www.google.com/',
  'https://www.google.de/',
  'https://www.bing.com/search?q=running+shoes&form=QBLH',
  'https://duckduckgo.com/',
  'https://t.co/Xk2mPq7LzA',
  'https://www.facebook.com/',
  'https://shop.example.com/',
  'https://shop.example.com/products?category=shoes&page=2',
  'https://shop.example.com/cart',
  'android-app://com.google.android.gm/',
];

const PAGES = ['/', '/products', '/products/{id}', '/category/{slug}', '/search', '/cart', '/checkout', '/account/login', '/account/orders', '/blog/{slug}-{id}', '/about', '/contact'];
const ASSETS = ['/static/js/app.{hex}.js', '/static/js/vendor.{hex}.js', '/static/css/main.{hex}.css', '/images/products/{id}-800w.webp', '/images/products/{id}-400w.webp', '/fonts/inter-var.woff2', '/favicon.ico'];
const API = ['/api/v1/products/{id}', '/api/v1/cart', '/api/v1/search', '/api/v1/recommendations', '/api/v1/session'];
const PROBES = ['/wp-login.php', '/.env', '/xmlrpc.php', '/wp-admin/setup-config.php', '/.git/config', '/phpmyadmin/index.php', '/robots.txt', '/sitemap.xml'];
const SLUGS = ['running-shoes', 'winter-jackets', 'how-to-choose-a-tent', 'trail-guide', 'summer-sale', 'kids', 'accessories', 'new-arrivals'];
const QUERIES = ['q=running+shoes', 'q=jacke%20winter', 'q=%E2%82%AC50', 'page={n}', 'sort=price_asc&page={n}', 'utm_source=newsletter&utm_medium=email&utm_campaign=black-friday', 'ref=home&variant={n}', 'size=42&color=black', 'fbclid=IwAR{hex}{hex}'];

/** Picks from `items` with the given relative weights. */
function weighted<T>(rnd: () => number, items: readonly T[], weights: readonly number[]): T {
  const total = weights.reduce((s, w) => s + w, 0);
  let r = rnd() * total;
  for (let i = 0; i < items.length; i++) if ((r -= weights[i]!) < 0) return items[i]!;
  return items[items.length - 1]!;
}

/** Client addresses: 3,000 IPv4 and 400 IPv6; a few clients (bots, offices) send most requests. */
function clients(rnd: () => number): string[] {
  const hex = () => Math.floor(rnd() * 65536).toString(16);
  const v4 = Array.from({ length: 3000 }, () => `${1 + Math.floor(rnd() * 222)}.${Math.floor(rnd() * 256)}.${Math.floor(rnd() * 256)}.${1 + Math.floor(rnd() * 254)}`);
  const v6 = Array.from({ length: 400 }, () => `2a0${Math.floor(rnd() * 10)}:${hex()}:${hex()}:${hex()}::${hex()}`);
  return [...v4, ...v6];
}

const pad2 = (n: number) => (n < 10 ? `0${n}` : String(n));

/** `$time_local` of epoch ms `t`, written in TIME_OFFSET. */
export function timeLocal(t: number): string {
  const d = new Date(t + 3_600_000); // TIME_OFFSET is one hour east of UTC
  return `${pad2(d.getUTCDate())}/${MONTHS[d.getUTCMonth()]}/${d.getUTCFullYear()}:${pad2(d.getUTCHours())}:${pad2(d.getUTCMinutes())}:${pad2(d.getUTCSeconds())} ${TIME_OFFSET}`;
}

/** A client's request as the shop's visitors, bots and probes send it. */
export interface ShopRequest {
  ip: string;
  method: string;
  url: string;
}

/** What a client says about itself: referrer, agent, user, protocol. */
export interface ShopClient {
  referrer: string;
  agent: string;
  user: string;
  protocol: string;
}

/**
 * The shop's traffic from `seed`: `request()` draws whom and what, `client()` the rest, in the
 * order the generated log has always drawn them (a change of order changes its bytes).
 */
export function shopTraffic(seed: number) {
  const rnd = prng(seed);
  const ips = clients(rnd);
  const fill = (template: string) =>
    template
      .replace('{id}', String(1000 + Math.floor(rnd() * 90_000)))
      .replace('{slug}', SLUGS[Math.floor(rnd() * SLUGS.length)]!)
      .replace(/\{hex\}/g, () => Math.floor(rnd() * 2 ** 32).toString(16).padStart(8, '0'))
      .replace('{n}', String(1 + Math.floor(rnd() * 40)));
  const request = (): ShopRequest => {
    const ip = ips[Math.floor(ips.length * rnd() ** 3)]!; // skewed: low indexes are the busy clients
    const kind = rnd();
    let url: string;
    let method = 'GET';
    if (kind < 0.45) url = fill(ASSETS[Math.floor(rnd() * ASSETS.length)]!);
    else if (kind < 0.8) url = fill(PAGES[Math.floor(rnd() * PAGES.length)]!);
    else if (kind < 0.97) {
      url = fill(API[Math.floor(rnd() * API.length)]!);
      method = weighted(rnd, ['GET', 'POST', 'PUT', 'DELETE', 'OPTIONS'], [60, 25, 5, 4, 6]);
    } else url = PROBES[Math.floor(rnd() * PROBES.length)]!;
    if (rnd() < 0.01) method = 'HEAD';
    if (!url.startsWith('/static') && rnd() < 0.3) url += `?${fill(QUERIES[Math.floor(rnd() * QUERIES.length)]!)}`;
    return { ip, method, url };
  };
  const client = (): ShopClient => ({
    referrer: rnd() < 0.45 ? '-' : REFERRERS[Math.floor(rnd() * REFERRERS.length)]!,
    agent: weighted(rnd, AGENTS, AGENT_WEIGHTS),
    user: rnd() < 0.005 ? 'admin' : '-',
    protocol: rnd() < 0.75 ? 'HTTP/2.0' : 'HTTP/1.1',
  });
  return { rnd, request, client };
}

/**
 * The log's lines as blocks of whole lines (about `blockBytes` each), so that a caller can write
 * a file or append to a followed one the way nginx does, whole lines per write.
 */
export function* accessLogBlocks(lines: number, blockBytes = 4 << 20): Generator<string> {
  const { rnd, request, client } = shopTraffic(20261121);
  const { start, end } = accessLogSpan();
  const step = (end - start) / lines;
  let out = '';
  for (let i = 0; i < lines; i++) {
    const { ip, method, url } = request();
    const status = url.includes('.php') || url.startsWith('/.')
      ? 404
      : weighted(rnd, [200, 304, 301, 302, 206, 404, 403, 499, 500, 502, 503], [80, 7, 2, 2, 0.5, 5, 1, 0.5, 1, 0.5, 0.5]);
    const bytes = status === 304 || method === 'HEAD' || status === 499 ? 0 : Math.floor(150 + rnd() * rnd() * 250_000);
    const time = (rnd() < 0.9 ? rnd() * 0.05 : rnd() * rnd() * 3).toFixed(3);
    const { referrer, agent, user, protocol } = client();
    out += `${ip} - ${user} [${timeLocal(start + Math.floor(i * step))}] "${method} ${url} ${protocol}" ${status} ${bytes} "${referrer}" "${agent}" ${time}\n`;
    if (out.length >= blockBytes) {
      yield out;
      out = '';
    }
  }
  if (out) yield out;
}

/** Writes the whole log to `file`. */
export function writeAccessLog(file: string, lines: number): void {
  const fd = fs.openSync(file, 'w');
  try {
    for (const block of accessLogBlocks(lines)) fs.writeSync(fd, block);
  } finally {
    fs.closeSync(fd);
  }
}

/** The epoch-ms range the generated times span: [first line, after the last). */
export function accessLogSpan(): { start: number; end: number } {
  const end = Math.floor(Date.now() / 86_400_000) * 86_400_000;
  return { start: end - DAYS * 86_400_000, end };
}
