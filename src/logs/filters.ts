/**
 * The log filters (docs/reference/logs.md#filters), shared by the listings (query strings) and the export (JSON
 * bodies): their zod schemas, and pure functions that turn parsed filters into a ClickHouse
 * WHERE clause over `access_logs` / `error_logs` (sql/clickhouse/002_logs.sql) with bound
 * parameters only.
 *
 * Filters and what they match:
 *
 * | filter       | query string (listing)        | JSON body (export `filters`)            | matches |
 * |--------------|-------------------------------|-----------------------------------------|---------|
 * | `statusCode` | `404` or a class `5xx`        | an array of those (`[404, "5xx"]`)      | any of them |
 * | `ipAddress`  | `10.1.2.3`, `10.0.0.0/8`, `2001:db8::/32` | the same string             | the client address, or a CIDR range (IPv4 and IPv6; IPv4 also matches as `::ffff:a.b.c.d`) |
 * | `url`        | `/item` or `/item/*?q=1`      | the same string                         | case-sensitive substring; with `*`, a glob over the whole URL where `*` is any run of characters, `/` included |
 * | `method`     | `get`                         | an array (`["GET", "post"]`)            | any of them, case-insensitive |
 * | `level`      | `error`                       | an array (`["error", "warn"]`)          | any of them (`error`, `warn`, `info`, `debug`) |
 *
 * The body form also accepts a single value where an array is shown. Either way the parsed form
 * is the same (`AccessFilters`, `ErrorFilters`: arrays), so the WHERE builders take both.
 * `startDate` / `endDate` are not filters here (the listings take them in the query, the export
 * beside `filters`): pass them as a `TimeRange` of Dates, both ends included, milliseconds kept.
 *
 * Use:
 *
 * ```ts
 * import { accessFiltersBody, accessWhere } from './filters.js';
 * const body = z.strictObject({ ..., filters: accessFiltersBody.optional() });
 * const { where, params } = accessWhere(domainId, { ...body.filters, startDate, endDate });
 * await clickhouse.query({ query: `SELECT … FROM access_logs WHERE ${where} ORDER BY timestamp DESC, id DESC`, query_params: params });
 * ```
 *
 * `where` is a conjunction (`domain_id = {f0:UInt32} AND …`, never empty: the domain is always
 * there) over the table's own unqualified column names, which are fixed in this file; user input
 * only ever reaches ClickHouse through `params`, named `{prefix}{n}` (default prefix `f`; pass
 * another prefix to combine two clauses in one query).
 */
import { isIP } from 'node:net';
import { z } from '@hono/zod-openapi';

// ---------------------------------------------------------------------------------------------
// Parsed forms
// ---------------------------------------------------------------------------------------------

/** An exact status code, or a class (`5xx` → `{ class: 5 }`). */
export type StatusCodeFilter = { code: number } | { class: number };

/** An inclusive range of addresses as IPv6 text (IPv4 mapped to `::ffff:a.b.c.d`). */
export interface IpRange {
  first: string;
  last: string;
}

export const LEVELS = ['error', 'warn', 'info', 'debug'] as const;
export type Level = (typeof LEVELS)[number];

export interface AccessFilters {
  statusCode?: StatusCodeFilter[] | undefined;
  ipAddress?: IpRange | undefined;
  /** A substring, or a glob when it contains `*`. */
  url?: string | undefined;
  /** Upper-cased methods. */
  method?: string[] | undefined;
}

export interface ErrorFilters {
  level?: Level[] | undefined;
}

/** Both ends included. */
export interface TimeRange {
  startDate?: Date | undefined;
  endDate?: Date | undefined;
}

// ---------------------------------------------------------------------------------------------
// Pure parsers (also usable without zod)
// ---------------------------------------------------------------------------------------------

/** `404` → `{ code: 404 }`, `5xx` / `5XX` → `{ class: 5 }`; null for anything else (codes 100–599). */
export function parseStatusCode(value: string | number): StatusCodeFilter | null {
  if (typeof value === 'number') return Number.isInteger(value) && value >= 100 && value <= 599 ? { code: value } : null;
  const text = value.trim();
  const cls = /^([1-5])xx$/i.exec(text);
  if (cls) return { class: Number(cls[1]) };
  if (/^[1-5]\d\d$/.test(text)) return { code: Number(text) };
  return null;
}

/** The 16 bytes of an IPv4 (as ::ffff:a.b.c.d) or IPv6 address; null if it is no address. */
function addressBytes(text: string): number[] | null {
  const version = isIP(text);
  if (version === 4) return [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, ...text.split('.').map(Number)];
  if (version !== 6) return null;
  let head = text;
  const tail: number[] = [];
  // An embedded IPv4 tail (::ffff:1.2.3.4) becomes two groups.
  const v4 = /^(.*:)(\d+\.\d+\.\d+\.\d+)$/.exec(head);
  if (v4) {
    const [a, b, c, d] = v4[2]!.split('.').map(Number) as [number, number, number, number];
    head = `${v4[1]}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [left, right] = head.includes('::') ? head.split('::') : [head, undefined];
  const groups = (s: string | undefined) => (s ? s.split(':').map((g) => parseInt(g, 16)) : []);
  const l = groups(left);
  const r = groups(right);
  const all = right === undefined ? l : [...l, ...new Array<number>(8 - l.length - r.length).fill(0), ...r];
  if (all.length !== 8 || all.some((g) => !Number.isInteger(g) || g < 0 || g > 0xffff)) return null;
  for (const g of all) tail.push(g >> 8, g & 0xff);
  return tail;
}

function bytesToIpv6(bytes: number[]): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((bytes[i]! << 8) | bytes[i + 1]!).toString(16).padStart(4, '0'));
  return groups.join(':');
}

/**
 * An address (`10.1.2.3`, `2001:db8::1`) → a range of one; a CIDR (`10.0.0.0/8`, `2001:db8::/32`)
 * → its first and last address (host bits of the given address are ignored). Null when invalid.
 */
export function parseIpFilter(value: string): IpRange | null {
  const text = value.trim();
  const slash = text.indexOf('/');
  const addr = slash < 0 ? text : text.slice(0, slash);
  const bytes = addressBytes(addr);
  if (!bytes) return null;
  let prefix = 128;
  if (slash >= 0) {
    const p = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(p)) return null;
    const bits = Number(p);
    const max = isIP(addr) === 4 ? 32 : 128;
    if (bits > max) return null;
    prefix = isIP(addr) === 4 ? 96 + bits : bits;
  }
  const first = bytes.slice();
  const last = bytes.slice();
  for (let bit = prefix; bit < 128; bit++) {
    const i = bit >> 3;
    const m = 0x80 >> (bit & 7);
    first[i]! &= ~m;
    last[i]! |= m;
  }
  return { first: bytesToIpv6(first), last: bytesToIpv6(last) };
}

/** An HTTP method token (RFC 9110), upper-cased. */
const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}$/;

/** Text matched literally by LIKE: `%`, `_` and `\` escaped with `\`. */
export function likeEscape(text: string): string {
  return text.replace(/[\\%_]/g, (c) => `\\${c}`);
}

/** A glob (the `url` filter's, the query's `glob`) as a LIKE pattern over the whole value: `%`, `_` and `\` escaped, `*` → `%`. */
export function globToLike(glob: string): string {
  return likeEscape(glob).replaceAll('*', '%');
}

// ---------------------------------------------------------------------------------------------
// Schemas
// ---------------------------------------------------------------------------------------------

/**
 * The longest `url` filter: as long as any URL a stored entry can hold. The ingest stores lines of
 * up to 64 KiB (longer ones go to ingest_rejects), so no logged URL is longer, whatever nginx's
 * large_client_header_buffers allow (8 KiB by default). In a listing's
 * query string it may take three times as many bytes percent-encoded, which the server accepts
 * (src/http/node-server.ts).
 */
export const URL_FILTER_MAX = 65_536;

/** A zod transform through `parse`, failing with `message` where it gives null. */
const parsedBy =
  <I, O>(parse: (input: I) => O | null, message: string) =>
  (input: I, ctx: z.RefinementCtx): O => {
    const parsed = parse(input);
    if (parsed === null) {
      ctx.addIssue({ code: 'custom', message });
      return z.NEVER;
    }
    return parsed;
  };

const statusCodeMessage = 'must be a status code (100-599) or a class such as 5xx';
const statusCodeText = z
  .string()
  .transform(parsedBy(parseStatusCode, statusCodeMessage))
  .openapi({ type: 'string', example: '5xx', description: 'A status code (`404`) or a class (`5xx`)' });

const statusCodeItem = z
  .union([z.number(), z.string()], { message: statusCodeMessage })
  .transform(parsedBy(parseStatusCode, statusCodeMessage))
  .openapi({ oneOf: [{ type: 'integer', minimum: 100, maximum: 599 }, { type: 'string', pattern: '^[1-5]xx$' }], example: 404 });

const ipMessage = 'must be an IPv4 or IPv6 address, or a CIDR range such as 10.0.0.0/8';
/** An address or a CIDR range, parsed to the range it covers (the listing's `ipAddress`, the query's `cidr`). */
export const ipAddressField = z
  .string({ message: ipMessage })
  .max(64, { message: ipMessage })
  .transform(parsedBy(parseIpFilter, ipMessage))
  .openapi({ type: 'string', example: '10.0.0.0/8', description: 'An address, or a CIDR range (IPv4 or IPv6)' });

/** A text to match (a substring or a glob): not empty, at most URL_FILTER_MAX characters. */
export const filterText = z
  .string({ message: 'must be a string' })
  .min(1, { message: 'must not be empty' })
  .max(URL_FILTER_MAX, { message: `must be at most ${URL_FILTER_MAX} characters` });

const urlField = filterText.openapi({
  type: 'string',
  example: '/api/*/orders',
  description: 'A case-sensitive substring of the URL; with `*`, a glob over the whole URL (`*` matches anything, `/` included)',
});

const methodMessage = 'must be an HTTP method such as GET';
const methodText = z
  .string({ message: methodMessage })
  .regex(METHOD, { message: methodMessage })
  .transform((m) => m.toUpperCase())
  .openapi({ type: 'string', example: 'GET', description: 'Case-insensitive' });

const levelMessage = `must be one of ${LEVELS.join(', ')}`;
const levelText = z.enum(LEVELS, { message: levelMessage });

/**
 * One value or a non-empty array of them, parsed as an array. A single value is checked as an
 * array of one, so that an entry's issue names its place (`statusCode[1]: …`), which a union of
 * the two forms could not tell.
 */
const oneOrMany = <T extends z.ZodTypeAny>(item: T, max: number) =>
  z.preprocess(
    (v) => (Array.isArray(v) ? v : [v]),
    z.array(item).min(1, { message: 'must not be empty' }).max(max, { message: `must have at most ${max} entries` }),
  ) as unknown as z.ZodType<z.output<T>[], z.input<T> | z.input<T>[]>;

const one = <T>(v: T) => [v];

/** Access filters of a listing's query string (single values); spread into the query object. */
export const accessFilterQuery = {
  statusCode: statusCodeText.transform(one).optional(),
  ipAddress: ipAddressField.optional(),
  url: urlField.optional(),
  method: methodText.transform(one).optional(),
};

/** Error filters of a listing's query string. */
export const errorFilterQuery = {
  level: levelText.transform(one).optional().openapi({ type: 'string', enum: [...LEVELS] }),
};

/**
 * The filters a parsed query sets, by their names in the query-string schemas above: what decides a
 * listing's read path (src/logs/service.ts), so a filter added to a schema is a filter there too.
 */
export const accessFiltersSet = (query: AccessFilters) => filtersSet(Object.keys(accessFilterQuery) as (keyof AccessFilters)[], query);
export const errorFiltersSet = (query: ErrorFilters) => filtersSet(Object.keys(errorFilterQuery) as (keyof ErrorFilters)[], query);

function filtersSet<K extends string>(names: K[], query: Partial<Record<K, unknown>>): K[] {
  return names.filter((name) => {
    const value = query[name];
    return value !== undefined && !(Array.isArray(value) && value.length === 0);
  });
}

/** The export's `filters` for `type: "access"` (JSON; arrays for `statusCode` and `method`). Unknown keys → 422. */
export const accessFiltersBody = z
  .strictObject({
    statusCode: oneOrMany(statusCodeItem, 100).optional(),
    ipAddress: ipAddressField.optional(),
    url: urlField.optional(),
    method: oneOrMany(methodText, 32).optional(),
  })
  .openapi('AccessLogFilters');

/** The export's `filters` for `type: "error"` (JSON; an array for `level`). Unknown keys → 422. */
export const errorFiltersBody = z.strictObject({ level: oneOrMany(levelText, 4).optional() }).openapi('ErrorLogFilters');

// ---------------------------------------------------------------------------------------------
// WHERE builders
// ---------------------------------------------------------------------------------------------

export interface SqlFilter {
  /** Conditions joined by AND, without the WHERE keyword; never empty. */
  where: string;
  /** Values of the `{name:Type}` placeholders in `where`. */
  params: Record<string, unknown>;
}

/** Collects bound parameters as `{prefixN:Type}` placeholders. */
export class Params {
  readonly values: Record<string, unknown> = {};
  private n = 0;
  constructor(private readonly prefix = 'f') {}
  /** The placeholder of a new parameter holding `value`. */
  bind(type: string, value: unknown): string {
    const name = `${this.prefix}${this.n++}`;
    this.values[name] = value;
    return `{${name}:${type}}`;
  }
}

/** `timestamp` conditions of a range, both ends included, to the millisecond. */
export function timeConditions(range: TimeRange, p: Params): string[] {
  const out: string[] = [];
  if (range.startDate) out.push(`timestamp >= fromUnixTimestamp64Milli(${p.bind('Int64', range.startDate.getTime())}, 'UTC')`);
  if (range.endDate) out.push(`timestamp <= fromUnixTimestamp64Milli(${p.bind('Int64', range.endDate.getTime())}, 'UTC')`);
  return out;
}

/** `status_code` within any of the codes or classes; callers may alias another expression as status_code. */
export function statusCondition(filters: StatusCodeFilter[], p: Params): string {
  const codes = filters.flatMap((f) => ('code' in f ? [f.code] : []));
  const classes = filters.flatMap((f) => ('class' in f ? [f.class] : []));
  const parts: string[] = [];
  if (codes.length) parts.push(`status_code IN ${p.bind('Array(UInt16)', [...new Set(codes)])}`);
  if (classes.length) parts.push(`intDiv(status_code, 100) IN ${p.bind('Array(UInt16)', [...new Set(classes)])}`);
  return parts.length === 1 ? parts[0]! : `(${parts.join(' OR ')})`;
}

/** The client address (access_logs' `ip`, IPv4 mapped into IPv6) within a range. */
export function ipRangeCondition({ first, last }: IpRange, p: Params): string {
  return first === last ? `ip = toIPv6(${p.bind('String', first)})` : `ip BETWEEN toIPv6(${p.bind('String', first)}) AND toIPv6(${p.bind('String', last)})`;
}

/** The conditions of access filters alone (no domain, no time), for callers composing their own clause. */
export function accessConditions(filters: AccessFilters, p: Params): string[] {
  const out: string[] = [];
  if (filters.statusCode?.length) out.push(statusCondition(filters.statusCode, p));
  if (filters.ipAddress) out.push(ipRangeCondition(filters.ipAddress, p));
  if (filters.url !== undefined) {
    out.push(filters.url.includes('*') ? `url LIKE ${p.bind('String', globToLike(filters.url))}` : `position(url, ${p.bind('String', filters.url)}) > 0`);
  }
  if (filters.method?.length) out.push(`upper(method) IN ${p.bind('Array(String)', [...new Set(filters.method.map((m) => m.toUpperCase()))])}`);
  return out;
}

/** The conditions of error filters alone (no domain, no time). */
export function errorConditions(filters: ErrorFilters, p: Params): string[] {
  return filters.level?.length ? [`level IN ${p.bind('Array(String)', [...new Set(filters.level)])}`] : [];
}

/** WHERE of `access_logs` for one domain, a time range and access filters. */
export function accessWhere(domainId: number, filters: AccessFilters & TimeRange, prefix = 'f'): SqlFilter {
  const p = new Params(prefix);
  const conditions = [`domain_id = ${p.bind('UInt32', domainId)}`, ...timeConditions(filters, p), ...accessConditions(filters, p)];
  return { where: conditions.join(' AND '), params: p.values };
}

/** WHERE of `error_logs` for one domain, a time range and error filters. */
export function errorWhere(domainId: number, filters: ErrorFilters & TimeRange, prefix = 'f'): SqlFilter {
  const p = new Params(prefix);
  const conditions = [`domain_id = ${p.bind('UInt32', domainId)}`, ...timeConditions(filters, p), ...errorConditions(filters, p)];
  return { where: conditions.join(' AND '), params: p.values };
}
