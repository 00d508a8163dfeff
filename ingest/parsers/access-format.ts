/**
 * The nginx access-log format compiler: a `log_format` string (or the named `combined` / `main`)
 * becomes one anchored RegExp (and a twin for plain lines, see AccessFields), built once, plus a
 * mapper from its capture groups to an AccessEntry.
 *
 * How each variable is matched. nginx writes variables with escape=default, so no value holds a
 * raw `"` (see nginx-escape.ts):
 * - variables nginx always writes in one shape ($status, $time_local, $request_time, counts,
 *   $upstream_response_time lists, …) have exact patterns;
 * - any other variable followed by a literal that starts with `"` runs to that quote, so quoted
 *   values may hold anything, spaces included;
 * - addresses and host names, unquoted, run to the next space (backtracking finds the port of
 *   `$remote_addr:$remote_port` for IPv6 clients too);
 * - any other unquoted variable runs to the first character of the literal after it.
 * That one expression reads nearly every line. A line it refuses is read once more by the stretch
 * reader (stretchReader): nginx escapes `"` in every value, so the line's quotes are the format's
 * own and cut the line into stretches that match the format's stretches one to one; in each, the
 * last unquoted free-text variable ($remote_user, $http_*, $host, …) runs up to the first place
 * from which the rest of its stretch fits. So `bob smith`, or even `a [b] \x22c\x22` as
 * $remote_user in `combined`, parses: the rest of its stretch, ` [$time_local] `, pins where it
 * ends. Earlier free variables of the same stretch still stop at their literal's first character:
 * two values with spaces between the same two quotes cannot be told apart, by anyone.
 * Variables that no AccessEntry field needs are matched without a capture group.
 *
 * Time, for lines of any content: the first expression's classes stop at the literal after them,
 * so no value is re-split (except two variables written together, `$host$request_uri`: a line
 * that does not fit costs the first value's length times the second's). The stretch reader cuts
 * the line at its quotes in one pass, matches the parts before the free variable once, and looks
 * for where the rest starts only within the most characters that rest can cover (TYPED's
 * `longest`: nginx writes those values, so they are short) back from the stretch's end. A value of
 * any length, with any number of spaces, brackets or fake times in it, is read once.
 */
import type { AccessEntry } from '../../core/entries.js';
import type { ParseResult } from '../types.js';
import { unescapeNginx } from './nginx-escape.js';
import { d2, wallTime } from './time.js';

export interface AccessLineParser {
  (line: string): ParseResult<AccessEntry>;
  /** The format has `$host` or `$server_name`: its lines can pick their domain. */
  readonly hasHost: boolean;
  /**
   * The same parse into `fields`, an object the caller reuses from line to line (a bulk import
   * allocates no entry per line): null when the line parses, else the reason it does not. On
   * failure `fields` is left in an unspecified state.
   */
  into(line: string, fields: AccessFields): string | null;
  /** What ClickHouse needs to read the format's plain lines itself (ingest/transforms/staged-rows.ts). */
  readonly shape: AccessFormatShape;
}

/**
 * The first expression for plain lines and its capture groups: null `plainPattern` when the
 * format's literals hold what makes a line not plain (then every line is read here).
 */
export interface AccessFormatShape {
  /** JavaScript syntax, without anchors. */
  plainPattern: string | null;
  groupCount: number;
  /** The variable each captured group reads ($request: its first of REQUEST_GROUPS groups). */
  groups: ReadonlyMap<string, number>;
  /**
   * `$http_user_agent` between two quotes: the number of quotes before its value. In a plain line
   * the format matches, no value holds a quote, so the agent runs from after that many quotes to the
   * next one. Null when the format has no such agent.
   */
  agentAfterQuotes: number | null;
}

/** An AccessEntry being filled by `AccessLineParser.into`, with what the parser learnt about its strings. */
export interface AccessFields extends AccessEntry {
  /**
   * The line holds no backslash, tab, line feed, carriage return or NUL, so its values were taken
   * as logged (no `\xHH` to decode) and none of its strings holds those characters either: a writer
   * may copy them without escaping.
   */
  plain: boolean;
}

/** A fresh AccessFields to pass to `AccessLineParser.into`. */
export function newAccessFields(): AccessFields {
  return { timestamp: 0, ipAddress: '', method: '', url: '', protocol: '', statusCode: 0, responseSize: 0, referrer: '', userAgent: '', responseTime: null, host: null, plain: true };
}

// What makes a line not plain: an nginx escape, or a character that text formats escape.
const NOT_PLAIN = /[\\\t\n\r\0]/;

const NAMED_FORMATS = new Map<string, string>([
  ['combined', '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"'],
  ['main', '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" "$http_x_forwarded_for"'],
]);

type Kind =
  | 'timeLocal' | 'timeIso' | 'msec' | 'seconds' | 'status' | 'count' | 'ratio' | 'pipe'
  | 'secondsList' | 'countList' | 'addressList'
  | 'address' | 'host' | 'request' | 'text';
type FreeKind = 'address' | 'host' | 'request' | 'text';
type TypedKind = Exclude<Kind, FreeKind>;
const isFree = (kind: Kind): kind is FreeKind => kind === 'address' || kind === 'host' || kind === 'request' || kind === 'text';

const SECONDS = '\\d+(?:\\.\\d+)?';
// nginx joins the values of several upstreams of one group with ", " and of groups passed
// through by an internal redirect with " : "; an upstream without a value is "-".
const list = (item: string) => `(?:${item})(?:(?:, | : )(?:${item}))*`;

/**
 * `longest`: the most characters nginx writes for the variable (a time has a fixed width, a count
 * at most 20 digits, a list one item per upstream tried, at 1 KiB dozens of tries). Only the
 * stretch matcher uses it, to bound where it looks (see matchStretch); the first expression
 * accepts any length.
 */
const TYPED: Record<TypedKind, { pattern: string; expected: string; longest: number }> = {
  timeLocal: { pattern: '\\d{2}/[A-Z][a-z]{2}/\\d{4}:\\d{2}:\\d{2}:\\d{2} [+-]\\d{4}', expected: 'a time like 21/Nov/2026:08:15:30 +0100', longest: 26 },
  timeIso: { pattern: '\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}(?:[+-]\\d{2}:\\d{2}|Z)', expected: 'a time like 2026-11-21T08:15:30+01:00', longest: 25 },
  msec: { pattern: SECONDS, expected: 'seconds since the epoch like 1763709330.123', longest: 24 },
  seconds: { pattern: `${SECONDS}|-`, expected: 'seconds like 0.123', longest: 24 },
  status: { pattern: '\\d{3}', expected: 'a 3-digit status', longest: 3 },
  count: { pattern: '\\d+|-', expected: 'a number', longest: 20 },
  ratio: { pattern: '\\d+\\.\\d+|-', expected: 'a ratio like 3.25 or -', longest: 24 },
  pipe: { pattern: '[p.]', expected: '"p" or "."', longest: 1 },
  secondsList: { pattern: list(`${SECONDS}|-`), expected: 'seconds or a list like 0.001, 0.002 : 0.003', longest: 1024 },
  countList: { pattern: list('\\d+|-'), expected: 'a number or a list like 502, 200', longest: 1024 },
  addressList: { pattern: list('[^ ,"]+'), expected: 'an address or a list like 10.0.0.1:80, 10.0.0.2:80', longest: 1024 },
};
/** An address or port as nginx writes it (IPv6 with a zone, `unix:`): the `longest` of TYPED. */
const ADDRESS_LONGEST = 64;

const KINDS = new Map<string, Kind>([
  ['time_local', 'timeLocal'], ['time_iso8601', 'timeIso'], ['msec', 'msec'],
  ['request_time', 'seconds'], ['connection_time', 'seconds'],
  ['status', 'status'],
  ['body_bytes_sent', 'count'], ['bytes_sent', 'count'], ['request_length', 'count'],
  ['connection', 'count'], ['connection_requests', 'count'], ['pid', 'count'],
  ['tcpinfo_rtt', 'count'], ['tcpinfo_rttvar', 'count'], ['tcpinfo_snd_cwnd', 'count'], ['tcpinfo_rcv_space', 'count'],
  ['gzip_ratio', 'ratio'], ['pipe', 'pipe'],
  ['upstream_response_time', 'secondsList'], ['upstream_connect_time', 'secondsList'],
  ['upstream_header_time', 'secondsList'], ['upstream_queue_time', 'secondsList'],
  ['upstream_status', 'countList'], ['upstream_bytes_received', 'countList'],
  ['upstream_bytes_sent', 'countList'], ['upstream_response_length', 'countList'],
  ['upstream_addr', 'addressList'],
  ['remote_addr', 'address'], ['realip_remote_addr', 'address'], ['server_addr', 'address'],
  ['proxy_protocol_addr', 'address'], ['proxy_protocol_server_addr', 'address'],
  ['remote_port', 'address'], ['realip_remote_port', 'address'], ['server_port', 'address'],
  ['proxy_protocol_port', 'address'], ['proxy_protocol_server_port', 'address'],
  ['host', 'host'], ['server_name', 'host'], ['hostname', 'host'], ['ssl_server_name', 'host'],
  ['request', 'request'],
]);

/** The variables some AccessEntry field is read from; all others are matched but not captured. */
const MAPPED = new Set([
  'msec', 'time_local', 'time_iso8601', 'remote_addr', 'realip_remote_addr', 'request', 'request_method', 'request_uri',
  'uri', 'args', 'query_string', 'server_protocol', 'status', 'body_bytes_sent', 'bytes_sent', 'http_referer',
  'http_user_agent', 'request_time', 'host', 'server_name',
]);

type Part = { literal: string } | { variable: string };

/** nginx.conf's escapes (ngx_conf_read_token); any other backslash stays, and what follows it is read as usual. */
const CONFIG_ESCAPES = new Map([['"', '"'], ["'", "'"], ['\\', '\\'], ['t', '\t'], ['r', '\r'], ['n', '\n']]);

/**
 * Splits a format into literals and variables the way nginx's log_format does: a name runs to the
 * first character outside [A-Za-z0-9_], `${name}` delimits it explicitly. The string is taken as
 * written between the quotes in nginx.conf, so nginx's config escapes (`\"`, `\'`, `\\`, `\t`,
 * `\r`, `\n`) apply. Names are case-insensitive in nginx.
 */
function tokenize(format: string): Part[] {
  const parts: Part[] = [];
  let literal = '';
  let i = 0;
  while (i < format.length) {
    const ch = format[i]!;
    const escaped = ch === '\\' ? CONFIG_ESCAPES.get(format[i + 1] ?? '') : undefined;
    if (escaped !== undefined) {
      literal += escaped;
      i += 2;
      continue;
    }
    if (ch !== '$') {
      literal += ch;
      i++;
      continue;
    }
    const column = i + 1;
    const braced = format[i + 1] === '{';
    let end = braced ? i + 2 : i + 1;
    while (end < format.length && /[A-Za-z0-9_]/.test(format[end]!)) end++;
    const name = format.slice(braced ? i + 2 : i + 1, end);
    if (braced && format[end] !== '}') throw new Error(`log format: the closing bracket of the variable at column ${column} is missing`);
    if (name === '') throw new Error(`log format: "$" without a variable name at column ${column}`);
    if (literal !== '') parts.push({ literal });
    literal = '';
    parts.push({ variable: name.toLowerCase() });
    i = braced ? end + 1 : end;
  }
  if (literal !== '') parts.push({ literal });
  return parts;
}

const escapeRegExp = (text: string) => text.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');

/**
 * The pattern of a variable without a fixed shape; `next` is the literal after it, or null when
 * the format ends or another variable follows directly (`$host$request_uri`: the host stops at `/`).
 */
function freePattern(kind: FreeKind, next: string | null): string {
  const quoted = next !== null && next.startsWith('"');
  const stop = next === null || quoted ? '"' : `"${escapeRegExp(next[0]!)}`;
  if (kind === 'request') return requestPattern(stop);
  if (quoted) return '[^"]*';
  if (kind === 'address') return '[^ "]*';
  if (kind === 'host') return '[^ "/]*';
  return `[^${stop}]*`;
}

/**
 * `$request` is the request line as the client sent it, and nginx logs every connection that got
 * an answer, garbage included: a 400 for a TLS handshake sent to a plain-HTTP port, `-` for a
 * connection closed before its request. Those lines are kept, since their status counts. The
 * expression splits the line itself (faster than splitting in JS), into four groups: a method
 * token, the target (which may hold spaces), the protocol when the line ends with ` HTTP/…`
 * (HTTP/0.9's `GET /` has none); or, for anything that does not start with a method token, the
 * whole text, which becomes the url so that it stays searchable.
 */
const requestPattern = (stop: string) => `([A-Z_-]+) ([^${stop}]*?)(?: (HTTP/[^${stop} ]*))?|([^${stop}]*)`;
const REQUEST_GROUPS = 4;

// Keyed by the three character codes: no substring per line.
const monthKey = (s: string, at: number) => (s.charCodeAt(at) << 16) | (s.charCodeAt(at + 1) << 8) | s.charCodeAt(at + 2);
const MONTHS = new Map(['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'].map((m, i) => [monthKey(m, 0), i]));

/** Wall-clock fields and a UTC offset in minutes (east positive) to epoch ms; NaN when out of range. */
function toEpoch(year: number, month0: number, day: number, h: number, m: number, s: number, offsetMinutes: number): number {
  return wallTime(year, month0, day, h, m, s) - offsetMinutes * 60_000;
}

/** `21/Nov/2026:08:15:30 +0100` */
function parseTimeLocal(s: string): number {
  const month = MONTHS.get(monthKey(s, 3));
  if (month === undefined) return NaN;
  const offset = (s.charCodeAt(21) === 45 ? -1 : 1) * (d2(s, 22) * 60 + d2(s, 24));
  return toEpoch(d2(s, 7) * 100 + d2(s, 9), month, d2(s, 0), d2(s, 12), d2(s, 15), d2(s, 18), offset);
}

/** `2026-11-21T08:15:30+01:00` (nginx writes the offset, `+00:00` for UTC; `Z` is accepted too). */
function parseTimeIso(s: string): number {
  const offset = s.length === 20 ? 0 : (s.charCodeAt(19) === 45 ? -1 : 1) * (d2(s, 20) * 60 + d2(s, 23));
  return toEpoch(d2(s, 0) * 100 + d2(s, 2), d2(s, 5) - 1, d2(s, 8), d2(s, 11), d2(s, 14), d2(s, 17), offset);
}

/** `1763709330.123` (seconds with milliseconds) */
const parseMsec = (s: string) => Math.round(Number(s) * 1000);

const TIME_PARSERS: [name: string, parse: (s: string) => number][] = [
  // $msec first: it is the only one with milliseconds.
  ['msec', parseMsec],
  ['time_local', parseTimeLocal],
  ['time_iso8601', parseTimeIso],
];

/** nginx logs `-` for a variable that has no value. */
/**
 * A value of its own variable ($request_method, $request_uri, $server_protocol), or what $request
 * gave when the format has $request and the variable is `-` or empty. A function of the module, not
 * a closure made per line: creating one per line cost about 4 % of an import's CPU.
 */
function orFromRequest(logged: string, fromRequest: string, hasRequest: boolean, value: (logged: string) => string): string {
  return hasRequest && (logged === '-' || logged === '') ? fromRequest : value(logged);
}

const text = (logged: string) => (logged === '-' ? '' : unescapeNginx(logged));
/** `text` of a value with nothing to unescape. */
const dashless = (logged: string) => (logged === '-' ? '' : logged);
const same = (logged: string) => logged;

/**
 * Compiles `format` (`combined`, `main` or an nginx log_format string) into a line parser.
 * Throws on a format nginx would refuse, or one without a time variable ($msec, $time_local,
 * $time_iso8601), since no entry could be placed in time.
 */
export function compileAccessFormat(format: string): AccessLineParser {
  const parts = tokenize(NAMED_FORMATS.get(format) ?? format);
  const groups = new Map<string, number>();
  let groupCount = 0;
  const compiled = parts.map((part, i): CompiledPart => {
    const group = groupCount + 1;
    if ('literal' in part) return { piece: escapeRegExp(part.literal), kind: null, group };
    const captured = MAPPED.has(part.variable) && !groups.has(part.variable);
    let kind = KINDS.get(part.variable) ?? 'text';
    // A repeated $request is matched as plain text: it is split once.
    if (kind === 'request' && !captured) kind = 'text';
    const after = parts[i + 1];
    const pattern = isFree(kind) ? freePattern(kind, after !== undefined && 'literal' in after ? after.literal : null) : TYPED[kind].pattern;
    if (!captured) return { piece: `(?:${pattern})`, kind, group: 0 };
    groups.set(part.variable, group);
    if (kind === 'request') {
      // The request pattern holds its own groups.
      groupCount += REQUEST_GROUPS;
      return { piece: `(?:${pattern})`, kind, group };
    }
    groupCount += 1;
    return { piece: `(${pattern})`, kind, group };
  });
  const pieces = compiled.map((c) => c.piece);
  const re = new RegExp(`^${pieces.join('')}$`);
  // The same expression for plain lines: each "anything but" class also refuses what makes a line not
  // plain. Only classes can match those characters, so when the format's literals hold none of them,
  // a line this matches is plain, and is matched exactly as `re` would (its characters all get the
  // same answer from both): one pass instead of a match and a scan.
  const plainRe = parts.some((p) => 'literal' in p && NOT_PLAIN.test(p.literal)) ? null : new RegExp(`^${pieces.join('').replaceAll('[^', '[^\\\\\\t\\n\\r\\0')}$`);

  const time = TIME_PARSERS.find(([name]) => groups.has(name));
  if (time === undefined) throw new Error('log format: no time variable ($time_local, $time_iso8601 or $msec)');
  const [timeVar, parseTime] = time;
  const timeGroup = groups.get(timeVar)!;
  const group = (...names: string[]) => groups.get(names.find((name) => groups.has(name)) ?? '') ?? 0;
  const addressGroup = group('remote_addr', 'realip_remote_addr');
  const requestGroup = group('request');
  const methodGroup = group('request_method');
  const uriGroup = group('request_uri');
  const pathGroup = group('uri');
  const argsGroup = group('args', 'query_string');
  const protocolGroup = group('server_protocol');
  const statusGroup = group('status');
  const sizeGroup = group('body_bytes_sent', 'bytes_sent');
  const referrerGroup = group('http_referer');
  const userAgentGroup = group('http_user_agent');
  const requestTimeGroup = group('request_time');
  const hostGroup = group('host', 'server_name');

  /**
   * Fills `f` from a match. A plain line (see AccessFields) has nothing to unescape: its values are
   * the logged text, `-` aside. Otherwise each value is unescaped as nginx escaped it.
   */
  const fill = (line: string, f: AccessFields): string | null => {
    let m: Groups | null = plainRe === null ? null : plainRe.exec(line);
    let plain = m !== null;
    if (m === null) {
      m = re.exec(line);
      if (m === null) {
        stretches ??= stretchReader(parts, compiled, groupCount);
        const read = stretches.match(line);
        if (typeof read === 'number') return explain(line, read);
        m = read;
        plain = !NOT_PLAIN.test(line);
      } else {
        plain = plainRe === null && !NOT_PLAIN.test(line);
      }
    }
    const timestamp = parseTime(m[timeGroup]!);
    if (Number.isNaN(timestamp)) return `$${timeVar}: invalid time ${JSON.stringify(m[timeGroup])}`;
    const value = plain ? dashless : text;
    const raw = plain ? same : unescapeNginx;
    let method = '';
    let url = '';
    let protocol = '';
    if (requestGroup) {
      const other = m[requestGroup + 3];
      if (other === undefined) {
        method = m[requestGroup]!;
        url = raw(m[requestGroup + 1]!);
        const version = m[requestGroup + 2];
        if (version !== undefined) protocol = raw(version);
      } else {
        url = value(other);
      }
    }
    // For a request line nginx refused these are `-` (400) or empty ($server_protocol of a 505 for
    // `HTTP/9.9`) while $request still holds the line: with $request in the format, they leave
    // what $request gave.
    if (methodGroup) method = orFromRequest(m[methodGroup]!, method, requestGroup !== 0, value);
    if (uriGroup) url = orFromRequest(m[uriGroup]!, url, requestGroup !== 0, value);
    else if (pathGroup && !requestGroup) {
      // url from $uri and $args when the format has neither $request_uri nor $request.
      const path = value(m[pathGroup]!);
      const args = argsGroup ? value(m[argsGroup]!) : '';
      url = args === '' ? path : `${path}?${args}`;
    }
    if (protocolGroup) protocol = orFromRequest(m[protocolGroup]!, protocol, requestGroup !== 0, value);
    const size = sizeGroup ? m[sizeGroup]! : '-';
    const requestTime = requestTimeGroup ? m[requestTimeGroup]! : '-';
    f.timestamp = timestamp;
    f.ipAddress = addressGroup ? value(m[addressGroup]!) : '';
    f.method = method;
    f.url = url;
    f.protocol = protocol;
    f.statusCode = statusGroup ? Number(m[statusGroup]) : 0;
    f.responseSize = size === '-' ? 0 : Number(size);
    f.referrer = referrerGroup ? value(m[referrerGroup]!) : '';
    f.userAgent = userAgentGroup ? value(m[userAgentGroup]!) : '';
    f.responseTime = requestTime === '-' ? null : Math.round(Number(requestTime) * 1000);
    f.host = hostGroup ? value(m[hostGroup]!) : null;
    f.plain = plain;
    return null;
  };

  let stretches: StretchReader | undefined;
  let diagnose: ((line: string) => Diagnosis) | undefined;
  /**
   * Why a line fits neither reading: where the stretch reader stops, unless the first expression
   * got past that stretch (a free value with a space stops the first one early, wrongly; a list
   * longer than its `longest` stops the second).
   */
  const explain = (line: string, stretch: number): string => {
    diagnose ??= diagnoser(parts, pieces);
    const first = diagnose(line);
    if (stretch === -1) return first.reason;
    const second = stretches!.explain(line, stretch);
    return first.at > second.end ? first.reason : second.reason;
  };

  const parse = (line: string): ParseResult<AccessEntry> => {
    const f = newAccessFields();
    const reason = fill(line, f);
    if (reason !== null) return { ok: false, reason };
    const entry: AccessEntry = {
      timestamp: f.timestamp,
      ipAddress: f.ipAddress,
      method: f.method,
      url: f.url,
      protocol: f.protocol,
      statusCode: f.statusCode,
      responseSize: f.responseSize,
      referrer: f.referrer,
      userAgent: f.userAgent,
      responseTime: f.responseTime,
      host: f.host,
    };
    return { ok: true, entry };
  };
  const agentAt = parts.findIndex((p) => 'variable' in p && p.variable === 'http_user_agent');
  const before = parts[agentAt - 1];
  const after = parts[agentAt + 1];
  const quotedAgent = agentAt > 0 && before !== undefined && 'literal' in before && before.literal.endsWith('"') && after !== undefined && 'literal' in after && after.literal.startsWith('"');
  const quotesBefore = parts.slice(0, agentAt).reduce((n, p) => n + ('literal' in p ? p.literal.split('"').length - 1 : 0), 0);
  const shape: AccessFormatShape = { plainPattern: plainRe === null ? null : plainRe.source.slice(1, -1), groupCount, groups, agentAfterQuotes: quotedAgent ? quotesBefore : null };
  return Object.assign(parse, { hasHost: hostGroup !== 0, into: fill, shape });
}

/** A part of the format as the first expression matches it. */
interface CompiledPart {
  /** Its piece of the expression: the literal, or the variable's pattern with its capture groups. */
  piece: string;
  /** Null for a literal. */
  kind: Kind | null;
  /** The expression's number of the part's first capture group; 0 for a variable without one. */
  group: number;
}

/** A match's groups by number, as the first expression numbers them (undefined: did not take part). */
type Groups = ArrayLike<string | undefined>;

/** A part of a stretch: a variable, or a literal of the format cut at its quotes. */
interface Item extends CompiledPart {
  part: Part;
}

/** One stretch of the format (its parts between two of its quotes), as the stretch reader reads it. */
interface Stretch {
  items: Item[];
  /** The index in `items` of the last free-text variable; -1 when there is none. */
  free: number;
  /**
   * Sticky; matches the items before the free variable or, in a stretch without one, all of them
   * up to the stretch's end (a quote or the end of the line). Null when there are no such items.
   */
  head: RegExp | null;
  /** Sticky; the items after the free variable, up to the stretch's end. Null when there are none. */
  tail: RegExp | null;
  /** The literal the tail starts with ('' when it starts with a variable): where it may begin. */
  tailLiteral: string;
  /** The most characters the tail covers as nginx writes its values (TYPED's `longest`). */
  tailLongest: number;
  /** For explanations, built on the first: prefix expressions of the head and of the tail. */
  prefixes?: { head: RegExp[]; tail: RegExp[] };
}

interface StretchReader {
  /** The groups the first expression would have had; or the stretch that does not fit (-1: the quotes do not). */
  match(line: string): Groups | number;
  /** Why stretch `k` of `line` does not fit, and where that stretch ends. */
  explain(line: string, k: number): Diagnosis & { end: number };
}

/** Variables whose values are free text: anything but a quote or a line break (nginx escapes both). */
const isFreeText = (kind: Kind | null) => kind === 'text' || kind === 'host' || kind === 'request';
// $request as the free variable of its stretch: split like the first expression splits it.
const REQUEST_SPLIT = new RegExp(`^(?:${requestPattern('"')})$`);
// A stretch ends at a quote or at the end of the line (values hold no quote).
const STRETCH_END = '(?="|$)';

/**
 * The stretch reader: a second reading for lines the first expression refuses (see the top of this
 * file), built on the first such line.
 */
function stretchReader(parts: Part[], compiled: CompiledPart[], groupCount: number): StretchReader {
  // The format's stretches: its parts, literals cut at their quotes, between two quotes.
  const runs: Item[][] = [[]];
  parts.forEach((part, index) => {
    const c = compiled[index]!;
    if ('variable' in part) {
      runs.at(-1)!.push({ ...c, part });
      return;
    }
    part.literal.split('"').forEach((literal, k) => {
      if (k > 0) runs.push([]);
      if (literal !== '') runs.at(-1)!.push({ piece: escapeRegExp(literal), kind: null, group: 0, part: { literal } });
    });
  });
  const sticky = (items: Item[], end: string) => (items.length === 0 && end === '' ? null : new RegExp(items.map((i) => i.piece).join('') + end, 'y'));
  const longest = (item: Item) => {
    if (item.kind === null) return (item.part as { literal: string }).literal.length;
    return item.kind === 'address' ? ADDRESS_LONGEST : TYPED[item.kind as TypedKind].longest;
  };
  const stretches: Stretch[] = runs.map((items) => {
    let free = -1;
    items.forEach((item, k) => {
      if (isFreeText(item.kind)) free = k;
    });
    if (free === -1) return { items, free, head: sticky(items, STRETCH_END), tail: null, tailLiteral: '', tailLongest: 0 };
    const tail = items.slice(free + 1);
    return {
      items,
      free,
      head: sticky(items.slice(0, free), ''),
      tail: tail.length === 0 ? null : sticky(tail, STRETCH_END),
      tailLiteral: tail[0]?.kind === null ? (tail[0].part as { literal: string }).literal : '',
      tailLongest: tail.reduce((n, item) => n + longest(item), 0),
    };
  });
  const last = stretches.length - 1;

  /** Where the free variable's value may end: the tail's candidate starts, first to last. */
  function* tailStarts(s: Stretch, line: string, at: number, end: number): Generator<number> {
    // The tail covers at most tailLongest characters, so only that far back from the end is looked
    // at: each candidate costs at most that much, and a value of any length is read once (indexOf).
    const lowest = Math.max(at, end - s.tailLongest);
    if (s.tailLiteral === '') {
      for (let t = lowest; t <= end; t++) yield t;
      return;
    }
    for (let t = line.indexOf(s.tailLiteral, lowest); t !== -1 && t < end; t = line.indexOf(s.tailLiteral, t + 1)) yield t;
  }

  /** Matches the stretch [from, end) of `line` against `s`, filling `m`; false when it does not fit. */
  function matchStretch(s: Stretch, line: string, from: number, end: number, m: (string | undefined)[]): boolean {
    let at = from;
    if (s.head !== null) {
      s.head.lastIndex = from;
      const h = s.head.exec(line);
      if (h === null) return false;
      copyGroups(h, m, s.items);
      at = from + h[0].length;
    }
    if (s.free === -1) return true;
    // The free value runs up to the first place from which the tail fits.
    let valueEnd = end;
    if (s.tail !== null) {
      valueEnd = -1;
      for (const t of tailStarts(s, line, at, end)) {
        s.tail.lastIndex = t;
        const tail = s.tail.exec(line);
        if (tail === null) continue;
        copyGroups(tail, m, s.items.slice(s.free + 1));
        valueEnd = t;
        break;
      }
      if (valueEnd === -1) return false;
    }
    const { kind, group } = s.items[s.free]!;
    const value = line.slice(at, valueEnd);
    if (kind === 'request' && group !== 0) copyGroups(REQUEST_SPLIT.exec(value)!, m, [s.items[s.free]!]);
    else if (group !== 0) m[group] = value;
    return true;
  }

  return {
    match(line) {
      const m: (string | undefined)[] = new Array(groupCount + 1);
      let from = 0;
      for (let k = 0; k <= last; k++) {
        const quote = line.indexOf('"', from);
        // As many quotes as the format has, no more.
        if (k === last ? quote !== -1 : quote === -1) return -1;
        const end = k === last ? line.length : quote;
        if (!matchStretch(stretches[k]!, line, from, end, m)) return k;
        from = end + 1;
      }
      return m;
    },

    explain(line, k) {
      let from = 0;
      for (let j = 0; j < k; j++) from = line.indexOf('"', from) + 1;
      const quote = line.indexOf('"', from);
      const end = quote === -1 ? line.length : quote;
      const s = stretches[k]!;
      const headItems = s.free === -1 ? s.items : s.items.slice(0, s.free);
      const tailItems = s.items.slice(s.free + 1);
      s.prefixes ??= { head: prefixExpressions(headItems.map((i) => i.piece)), tail: prefixExpressions(tailItems.map((i) => i.piece)) };
      const endMismatch = (previous: Part | undefined, at: number) =>
        k === last ? `unexpected text after the last field at column ${at + 1}: ${snippet(line, at)}` : mismatch({ literal: '"' }, previous, line, at);
      const head = reach(s.prefixes.head, line, from);
      if (head.k < headItems.length) return { reason: mismatch(headItems[head.k]!.part, headItems[head.k - 1]?.part, line, head.at), at: head.at, end };
      if (s.free === -1) return { reason: endMismatch(headItems.at(-1)?.part, head.at), at: head.at, end };
      // The candidate from which the tail got furthest; with none where the tail can start, the
      // last place before (the tail is longer than it can be: one of its values is wrong).
      let best: { k: number; at: number } | null = null;
      for (const t of tailStarts(s, line, head.at, end)) {
        const r = reach(s.prefixes.tail, line, t);
        if (best === null || r.k > best.k || (r.k === best.k && r.at > best.at)) best = r;
      }
      const variable = s.items[s.free]!.part;
      const lowest = Math.max(head.at, end - s.tailLongest);
      const before = best === null && s.tailLiteral !== '' && lowest > 0 ? line.lastIndexOf(s.tailLiteral, lowest - 1) : -1;
      if (before >= head.at) best = reach(s.prefixes.tail, line, before);
      if (best === null) return { reason: `${mismatch(tailItems[0]!.part, variable, line, lowest)} (nowhere before column ${end + 1})`, at: lowest, end };
      if (best.k === tailItems.length) return { reason: endMismatch(tailItems.at(-1)!.part, best.at), at: best.at, end };
      return { reason: mismatch(tailItems[best.k]!.part, best.k === 0 ? variable : tailItems[best.k - 1]!.part, line, best.at), at: best.at, end };
    },
  };
}

/** Copies the groups of a match of `items` to `m`, numbered as the first expression numbers them. */
function copyGroups(match: RegExpExecArray, m: (string | undefined)[], items: Item[]): void {
  // The expression numbers groups in the order of the parts: a run of items has consecutive ones.
  const first = items.find((item) => item.group !== 0)?.group;
  if (first === undefined) return;
  for (let j = 1; j < match.length; j++) m[first + j - 1] = match[j];
}

/**
 * Explains why a line does not match: the first part of the format that no longer matches, with
 * its column. Built on the first failure only; a misconfigured format fails every line, so the
 * prefix expressions are compiled once, not per line.
 */
function diagnoser(parts: Part[], pieces: string[]): (line: string) => Diagnosis {
  const prefixes = prefixExpressions(pieces);
  return (line) => {
    if (line === '') return { reason: 'empty line', at: 0 };
    const { k, at } = reach(prefixes, line, 0);
    if (k === parts.length) return { reason: `unexpected text after the last field at column ${at + 1}: ${snippet(line, at)}`, at };
    return { reason: mismatch(parts[k]!, parts[k - 1], line, at), at };
  };
}

interface Diagnosis {
  reason: string;
  /** Where the line stops matching. */
  at: number;
}

/** The k-th matches pieces 0 to k (sticky: from `lastIndex`). */
const prefixExpressions = (pieces: string[]) => pieces.map((_, k) => new RegExp(`(?:${pieces.slice(0, k + 1).join('')})`, 'y'));

/** How far the parts of `prefixes` match from `from`: the first that does not (k), and where it starts. */
function reach(prefixes: RegExp[], line: string, from: number): { k: number; at: number } {
  let at = from;
  for (let k = 0; k < prefixes.length; k++) {
    prefixes[k]!.lastIndex = from;
    const m = prefixes[k]!.exec(line);
    if (m === null) return { k, at };
    at = from + m[0].length;
  }
  return { k: prefixes.length, at };
}

/** Why `part` (after `previous`) does not match at `at`. */
function mismatch(part: Part, previous: Part | undefined, line: string, at: number): string {
  const found = `found ${snippet(line, at)}`;
  if ('literal' in part) {
    const after = previous !== undefined && 'variable' in previous ? ` after $${previous.variable}` : '';
    return `expected ${JSON.stringify(part.literal)}${after} at column ${at + 1}, ${found}`;
  }
  const kind = KINDS.get(part.variable) ?? 'text';
  const expected = isFree(kind) ? 'a value' : TYPED[kind].expected;
  return `$${part.variable} at column ${at + 1}: expected ${expected}, ${found}`;
}

function snippet(line: string, at: number): string {
  if (at >= line.length) return 'the end of the line';
  const head = line.slice(at, at + 40);
  return JSON.stringify(head) + (line.length > at + 40 ? '…' : '');
}
