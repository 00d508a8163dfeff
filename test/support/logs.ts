/**
 * Generated nginx access and error logs, loaded through the real ingest path (importFiles), with
 * the entries they must give, so tests can compute expectations on their own.
 *
 *   const seeded = await seedLogs(t, { access: 600, errors: 200, ownerId: user.id });
 *   seeded.domain.id          // the new domain
 *   seeded.access[i]          // what line i must give (timestamp in epoch ms, fields as the API names them)
 *   newestFirst(seeded.access) // the order listings return
 *
 * Lines are deterministic for a seed. Timestamps start at T0 (a whole hour a day ago, inside any
 * retention); access times carry milliseconds ($msec) and come three to a timestamp, error times
 * whole seconds two to a timestamp, so ties are common and ordered by id (the later line of a
 * file has the higher id). Access times never fall on a whole second, so an access entry and an
 * error entry never tie. Values include LIKE and parameter metacharacters (`%`, `_`, `\`, `'`,
 * `{x:String}`, `*`), quotes, non-ASCII text and IPv4 and IPv6 clients.
 */
import type { AccessEntry, ErrorEntry } from '../../core/entries.js';
import { downloadsInProgress } from '../../src/exports/service.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, createUserAndLogin, login, type TestApp } from './app.js';
import { errorLogTime, importText, newDomain, T0, until } from './ingest.js';
import { prngInt } from './random.js';

/** The access format of the generated lines: $msec gives milliseconds. */
export const LOG_FORMAT = '$msec $remote_addr - $remote_user "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';

/** An access line's entry as the parser gives it (core/entries.ts), with its place in its file. */
export type GeneratedAccess = Omit<AccessEntry, 'host'> & {
  kind: 'access';
  /** Position in its file: among equal timestamps the higher index has the higher id. */
  index: number;
};

export type GeneratedError = ErrorEntry & { kind: 'error'; index: number };

const pick = <T>(r: (n: number) => number, list: readonly T[]): T => list[r(list.length)]!;

const METHODS = ['GET', 'GET', 'GET', 'GET', 'POST', 'POST', 'PUT', 'DELETE', 'HEAD', 'PATCH', 'OPTIONS'];
const STATUSES = [200, 200, 200, 200, 201, 204, 301, 302, 304, 400, 401, 403, 404, 404, 500, 502, 503];

function ipAddress(r: (n: number) => number): string {
  switch (r(6)) {
    case 0:
      return `10.0.${r(4)}.${r(256)}`;
    case 1:
      return `192.168.1.${r(256)}`;
    case 2:
      return `203.0.113.${r(256)}`;
    case 3:
      return `2001:db8::${r(65536).toString(16)}`;
    case 4:
      return `2001:db8:1::${r(65536).toString(16)}`;
    default:
      return `fe80::${r(65536).toString(16)}`;
  }
}

function url(r: (n: number) => number, i: number): string {
  switch (r(10)) {
    case 0:
      return `/api/v1/orders/${r(1000)}`;
    case 1:
      return `/search?q=100%25_off&n=${i}`;
    case 2:
      return `/files/a\\b/${i}`;
    case 3:
      return `/quote/it's/${i}`;
    case 4:
      return `/tpl/{x:String}/${i}`;
    case 5:
      return `/star/*literal*/${i}`;
    case 6:
      return `/Static/Main.JS?v=${i}`;
    case 7:
      return `/café/${i}`;
    default:
      return `/item/${i}?q=${r(7)}`;
  }
}

function userAgent(r: (n: number) => number): string {
  switch (r(6)) {
    case 0:
      return `curl/8.${r(5)}.0`;
    case 1:
      return 'Googlebot/2.1 (+http://www.google.com/bot.html)';
    case 2:
      return 'Ünïcode-Agent/1.0';
    case 3:
      return 'Quote"Agent 100%_sure';
    case 4:
      return '';
    default:
      return `Mozilla/5.0 (X11; Linux x86_64) Chrome/${100 + r(20)}.0`;
  }
}

/** nginx's escape=default: `"`, `\`, control characters, DEL and non-ASCII bytes as `\xHH`. */
export function nginxEscape(value: string): string {
  let out = '';
  for (const byte of Buffer.from(value, 'utf8')) {
    out += byte === 0x22 || byte === 0x5c || byte < 0x20 || byte >= 0x7f ? `\\x${byte.toString(16).toUpperCase().padStart(2, '0')}` : String.fromCharCode(byte);
  }
  return out;
}

const logged = (value: string) => (value === '' ? '-' : nginxEscape(value));

/** `count` access entries from `start` (epoch ms, default T0), three to a timestamp, never on a whole second. */
export function generateAccess(count: number, options: { seed?: number; start?: number } = {}): GeneratedAccess[] {
  const r = prngInt(options.seed ?? 1);
  const start = options.start ?? T0;
  const out: GeneratedAccess[] = [];
  for (let i = 0; i < count; i++) {
    const k = Math.floor(i / 3);
    const noTime = r(20) === 0;
    out.push({
      kind: 'access',
      index: i,
      timestamp: start + k * 1000 + (k % 998) + 1,
      ipAddress: ipAddress(r),
      method: pick(r, METHODS),
      url: url(r, i),
      protocol: pick(r, ['HTTP/1.1', 'HTTP/1.1', 'HTTP/2.0']),
      statusCode: pick(r, STATUSES),
      responseSize: r(100_000),
      referrer: r(2) === 0 ? '' : `https://ref${r(5)}.example.org/Page_${r(3)}`,
      userAgent: userAgent(r),
      responseTime: noTime ? null : r(5000),
    });
  }
  return out;
}

/** The line of an entry in LOG_FORMAT (`-` for a missing response time). */
export function accessLogLine(e: GeneratedAccess): string {
  const msec = `${Math.floor(e.timestamp / 1000)}.${String(e.timestamp % 1000).padStart(3, '0')}`;
  const requestTime = e.responseTime === null ? '-' : `${Math.floor(e.responseTime / 1000)}.${String(e.responseTime % 1000).padStart(3, '0')}`;
  return `${msec} ${e.ipAddress} - - "${nginxEscape(`${e.method} ${e.url} ${e.protocol}`)}" ${e.statusCode} ${e.responseSize} "${logged(e.referrer)}" "${logged(e.userAgent)}" ${requestTime}`;
}

const NGINX_LEVELS = [
  ['emerg', 'error'],
  ['crit', 'error'],
  ['error', 'error'],
  ['error', 'error'],
  ['warn', 'warn'],
  ['warn', 'warn'],
  ['notice', 'info'],
  ['info', 'info'],
  ['debug', 'debug'],
] as const;

function errorMessage(r: (n: number) => number, i: number): string {
  switch (r(6)) {
    case 0:
      return `open() "/var/www/100%_off/${i}.html" failed (2: No such file or directory)`;
    case 1:
      return 'upstream timed out (110: Connection timed out) while reading response header from upstream';
    case 2:
      return `it's a \\ backslash with {x:String} and *star* ${i}`;
    case 3:
      return `Ünïcode Failure ${i}`;
    default:
      return `connect() failed (111: Connection refused) while connecting to upstream ${r(50)}`;
  }
}

/** `count` error entries from `start` (default T0 + 5 s), two to a whole second. */
export function generateErrors(count: number, options: { seed?: number; start?: number; server?: string } = {}): GeneratedError[] {
  const r = prngInt((options.seed ?? 1) * 7919);
  const start = Math.floor((options.start ?? T0 + 5_000) / 1000) * 1000;
  const server = options.server ?? 'site.example.com';
  const out: GeneratedError[] = [];
  for (let i = 0; i < count; i++) {
    const [, level] = pick(r, NGINX_LEVELS);
    const message = errorMessage(r, i);
    const context: Record<string, string> =
      level === 'debug' ? {} : { client: ipAddress(r), server, request: `GET /item/${i} HTTP/1.1`, host: server, ...(r(2) ? { upstream: `http://127.0.0.1:${8000 + r(10)}/item/${i}` } : {}) };
    out.push({ kind: 'error', index: i, timestamp: start + Math.floor(i / 2) * 1000, level, message, context });
  }
  return out;
}

const nginxLevel = new Map<string, string>([
  ['error', 'error'],
  ['warn', 'warn'],
  ['info', 'info'],
  ['debug', 'debug'],
]);

export function errorLogLine(e: GeneratedError): string {
  const c = e.context;
  const tail = c.client
    ? `, client: ${c.client}, server: ${c.server}, request: "${c.request}"${c.upstream ? `, upstream: "${c.upstream}"` : ''}, host: "${c.host}"`
    : '';
  return `${errorLogTime(e.timestamp)} [${nginxLevel.get(e.level)}] 4242#0: *${e.index + 1} ${e.message}${tail}`;
}

/** Newest first, ties: the later line (higher id) first: the order of listings and search. */
export function newestFirst<T extends { timestamp: number; index: number; kind: string }>(entries: readonly T[]): T[] {
  return [...entries].sort((a, b) => b.timestamp - a.timestamp || (a.kind === b.kind ? b.index - a.index : a.kind < b.kind ? 1 : -1));
}

/** An entry as the API returns it (timestamp ISO with milliseconds, no `kind`/`index`). */
export function apiShape(e: GeneratedAccess | GeneratedError): Record<string, unknown> {
  const { kind: _kind, index: _index, timestamp, ...fields } = e;
  return { timestamp: new Date(timestamp).toISOString(), ...fields };
}

let seq = 0;

export interface SeededLogs {
  domain: { id: number; name: string };
  access: GeneratedAccess[];
  errors: GeneratedError[];
}

/**
 * Registers a new domain (owned by `ownerId`, default none) and imports `access` and `errors`
 * (counts to generate, or entries) through importFiles, access file first. Returns what the
 * domain must hold.
 */
export async function seedLogs(
  t: TestApp,
  options: { access?: number | GeneratedAccess[]; errors?: number | GeneratedError[]; ownerId?: number | null; seed?: number; tag?: string } = {},
): Promise<SeededLogs> {
  const n = ++seq;
  const domain = await newDomain(t.runtime.db, options.tag ?? 'logs', options.ownerId ?? null);
  const name = domain.name;
  const seed = options.seed ?? n;
  const access = typeof options.access === 'number' ? generateAccess(options.access, { seed }) : (options.access ?? []);
  const errors = typeof options.errors === 'number' ? generateErrors(options.errors, { seed, server: name }) : (options.errors ?? []);
  if (access.length) {
    const summary = await importText(t, name, access.map((e) => `${accessLogLine(e)}\n`).join(''), { format: LOG_FORMAT });
    if (summary.inserted !== access.length) throw new Error(`seedLogs: ${summary.inserted} of ${access.length} access lines stored (${summary.rejected} rejected)`);
  }
  if (errors.length) {
    const summary = await importText(t, name, errors.map((e) => `${errorLogLine(e)}\n`).join(''), { type: 'error' });
    if (summary.inserted !== errors.length) throw new Error(`seedLogs: ${summary.inserted} of ${errors.length} error lines stored (${summary.rejected} rejected)`);
  }
  return { domain, access, errors };
}

/** Two signed-in owners, each with a seeded domain, and the administrator's token: the cast of the read tests. */
export interface TwoOwners {
  admin: string;
  owner: { id: number; token: string };
  other: { id: number; token: string };
  /** The owner's domain. */
  seeded: SeededLogs;
  /** The other owner's domain (BOLA checks). */
  othersDomain: SeededLogs;
}

type Counts = { access: number; errors: number };

export async function seedTwoOwners(t: TestApp, mine: Counts, theirs: Counts): Promise<TwoOwners> {
  const admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  const owner = await createUserAndLogin(t.app, admin, { email: 'owner@example.com' });
  const other = await createUserAndLogin(t.app, admin, { email: 'other@example.com' });
  return {
    admin,
    owner,
    other,
    seeded: await seedLogs(t, { ...mine, ownerId: owner.id }),
    othersDomain: await seedLogs(t, { ...theirs, ownerId: other.id }),
  };
}

/** Reads a download's first two chunks (a CSV's header row, then rows), cancels it, and waits until the server has let it go. */
export async function abandonDownload(res: Response): Promise<void> {
  const reader = res.body!.getReader();
  await reader.read();
  await reader.read();
  await reader.cancel();
  await until(() => downloadsInProgress() === 0, 'the download to end');
}

/** What a live tail's stream sends from now until its `event: end` or `timeoutMs`: the text read, decoded. */
export async function readUntilEnd(reader: ReadableStreamDefaultReader<Uint8Array>, timeoutMs = 5_000): Promise<string> {
  const decoder = new TextDecoder();
  const deadline = Date.now() + timeoutMs;
  let text = '';
  while (!text.includes('event: end') && Date.now() < deadline) {
    const chunk = await Promise.race([reader.read(), new Promise<null>((resolve) => setTimeout(() => resolve(null), deadline - Date.now()))]);
    if (!chunk || chunk.done) break;
    text += decoder.decode(chunk.value);
  }
  return text;
}
