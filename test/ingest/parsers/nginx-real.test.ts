import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { compileAccessFormat } from '../../../ingest/parsers/access-format.js';
import { parseErrorLine } from '../../../ingest/parsers/error-log.js';
import { DEFAULT_CUT_LIMITS, LineCutter } from '../../../ingest/sources/line-cutter.js';
import type { AccessEntry, ErrorEntry, ErrorLevel } from '../../../core/entries.js';
import { loggedText, splitRequest } from '../../support/nginx-logged.js';

// The parsers against lines a real nginx wrote (test/fixtures/nginx, made by capture.sh there; see
// its README). Each parsed entry is compared with what requests.json says the client sent, never
// with another reading of the same line: the expectations below are built from the request and
// nginx's documented behaviour, and the only things read from the log itself are the values the
// client does not choose (times, sizes, $request_time, $connection), taken by splitting the
// verbose format, whose numbers come first, on spaces.

const DIR = new URL('../../fixtures/nginx/', import.meta.url);
const fixture = (name: string) => fs.readFileSync(new URL(name, DIR));

interface Capture {
  nginx: string;
  timezone: string;
  ports: { site: number; backend: number; dead: number; debug: number };
  servers: Record<string, string>;
  ipv6: boolean;
  formats: { file: string; name: string | null; format: string }[];
  errorLogs: { file: string; level: string }[];
}
// Byte strings in requests.json: one character per byte (U+0000–U+00FF).
interface Sent { n: number; name: string; client: string; port: number; status: number }
interface CurlRequest extends Sent {
  raw: null;
  method: string;
  target: string;
  protocol: string;
  /** Headers as sent; null: not sent. */
  host: string | null;
  userAgent: string | null;
  referer: string | null;
  xForwardedFor: string | null;
  user: string | null;
}
/** Bytes written as they are on a new connection. */
interface RawRequest extends Sent { raw: string }
type Request = CurlRequest | RawRequest;

const capture = JSON.parse(fixture('formats.json').toString('utf8')) as Capture;
const requests = JSON.parse(fixture('requests.json').toString('utf8')) as Request[];

/** A file's lines, cut at \n and decoded as UTF-8 like the file follower does (line-cutter.ts). */
function linesOf(name: string): string[] {
  const buf = fixture(name);
  const lines: string[] = [];
  for (let from = 0, nl = buf.indexOf(10); nl !== -1; from = nl + 1, nl = buf.indexOf(10, from)) lines.push(buf.toString('utf8', from, nl));
  return lines;
}

/** An error log's entries, cut like the file readers cut them (a line that begins no entry continues the one before). */
function entriesOf(name: string): string[] {
  const cutter = new LineCutter(DEFAULT_CUT_LIMITS, 'error-log');
  cutter.begin(0);
  expect(cutter.feed(fixture(name), 0)).toBe(-1);
  const cut = cutter.cut();
  expect(cut.overlong).toEqual([]);
  return cut.lines.map((l) => l.text);
}

const bytes = (s: string) => Buffer.from(s, 'latin1');

/** A header's value in an entry: "" when it was not sent or was `-` (nginx logs both as -). */
const headerText = (value: string | null) => (value === null || value === '-' ? '' : loggedText(value));

/** The request line as the client sent it (nginx skips CRLFs before it), as bytes in a latin1 string. */
function requestLine(r: Request): string {
  if (r.raw === null) return `${r.method} ${r.target} ${r.protocol}`;
  const line = r.raw.replace(/^(?:\r?\n)+/, '');
  const end = line.search(/\r?\n/);
  return end === -1 ? line : line.slice(0, end);
}

const serverName = (r: Request) => capture.servers[String(r.port)]!;

/** $host: the Host header lower-cased without its port, or the server's name when none was read. */
function expectedHost(r: Request): string {
  if (r.raw !== null || r.host === null) return serverName(r);
  const host = loggedText(r.host).toLowerCase();
  return host.startsWith('[') ? host.slice(0, host.indexOf(']') + 1) : host.replace(/:\d+$/, '');
}

/** The values the client does not choose, from the verbose format (numbers first, see capture.sh). */
const verboseLines = linesOf('access-verbose.log');
const measured = verboseLines.map((line) => {
  const [msec, requestTime, status, bodyBytes, , connection] = line.split(' ');
  return { msec: Number(msec), requestTime: Number(requestTime), status: Number(status), bodyBytes: Number(bodyBytes), connection: Number(connection) };
});

function expectedEntry(r: Request, i: number, format: { hasTimes: boolean; hasHost: boolean }): AccessEntry {
  const m = measured[i]!;
  const request = r.raw === null ? { method: r.method, url: loggedText(r.target), protocol: r.protocol } : splitRequest(requestLine(r));
  return {
    // $msec has milliseconds; $time_local has seconds, the same second ($msec is not rounded).
    timestamp: format.hasTimes ? Math.round(m.msec * 1000) : Math.floor(m.msec) * 1000,
    ipAddress: r.client,
    ...request,
    statusCode: r.status,
    responseSize: m.bodyBytes,
    referrer: r.raw === null ? headerText(r.referer) : '',
    userAgent: r.raw === null ? headerText(r.userAgent) : '',
    responseTime: format.hasTimes ? Math.round(m.requestTime * 1000) : null,
    host: format.hasHost ? expectedHost(r) : null,
  };
}

/*
 * The verbose format has $request_method, $request_uri and $server_protocol besides $request. For
 * a request line nginx refuses (400) it logs those three as `-` and the line in $request: method,
 * url and protocol must come from $request, as they do with combined and main.
 */

describe('the capture', () => {
  it('one line per request in every access log, every format captured', () => {
    expect(capture.formats.map((f) => f.file)).toEqual(['access-combined.log', 'access-main.log', 'access-verbose.log']);
    for (const f of capture.formats) expect(linesOf(f.file)).toHaveLength(requests.length);
    expect(requests.map((r) => r.n)).toEqual(requests.map((_, i) => i + 1));
  });

  it('holds the cases it is meant to hold', () => {
    const names = new Set(requests.map((r) => r.name));
    for (const name of ['upstream-dead', 'missing', 'long-url', 'tls-handshake', 'http09', 'empty-ua-referer', 'no-ua-no-referer', 'dash-fields', 'head', 'options', 'post-proxied']) {
      expect(names).toContain(name);
    }
    if (capture.ipv6) expect(requests.some((r) => r.client === '::1')).toBe(true);
    // $upstream_response_time as a single value, a list of tries (", "), a list across an
    // internal redirect (" : ") and "-" without an upstream.
    // After [$time_local]: $time_iso8601 $host $server_name $request_method $server_protocol.
    const upstream = verboseLines.map((line) => /\] \S+ \S+ \S+ \S+ \S+ (.*?) "/.exec(line)![1]);
    expect(upstream).toContain('-');
    expect(upstream.some((u) => /^\d+\.\d{3}$/.test(u!))).toBe(true);
    expect(upstream.some((u) => /^\d+\.\d{3}, \d+\.\d{3}$/.test(u!))).toBe(true);
    expect(upstream.some((u) => /^\d+\.\d{3} : \d+\.\d{3}$/.test(u!))).toBe(true);
    const longUrl = requests.find((r) => r.name === 'long-url') as CurlRequest;
    expect(longUrl.target.length).toBeGreaterThan(4000);
  });
});

describe.each(capture.formats)('$file', ({ file, name, format }) => {
  const parse = compileAccessFormat(format);
  const lines = linesOf(file);
  const shape = { hasTimes: format.includes('$msec'), hasHost: format.includes('$host') };

  if (name !== null) {
    it(`the format nginx used is the named ${name}`, () => {
      const named = compileAccessFormat(name);
      for (const line of lines) expect(named(line)).toEqual(parse(line));
    });
  }

  requests.forEach((r, i) => {
    const line = lines[i]!;
    // $remote_user is unquoted in combined and main, and nginx does not escape spaces: `bob smith`
    // is read up to ` [`, where the rest of its stretch (` [$time_local] `) fits.
    it(`${r.n} ${r.name}`, () => {
      expect(parse(line)).toEqual({ ok: true, entry: expectedEntry(r, i, shape) });
    });
  });
});

// ---- error logs ---------------------------------------------------------------------------------

/** The folding of levels (docs/reference/logs.md#error-entries), written out independently of the parser. */
const FOLD: Record<string, ErrorLevel> = { emerg: 'error', alert: 'error', crit: 'error', error: 'error', warn: 'warn', notice: 'info', info: 'info', debug: 'debug' };

/** nginx's offset from UTC during the capture, as nginx itself wrote it in $time_iso8601. */
const offsetMs = (() => {
  const m = / \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d([+-])(\d\d):(\d\d) /.exec(verboseLines[0]!)!;
  return (m[1] === '-' ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3])) * 60_000;
})();

/** Requests by the number nginx gave their connection ($connection, `*N` in the error log). */
const byConnection = new Map(requests.map((r, i) => [measured[i]!.connection, r]));

type Context = Partial<Record<'client' | 'server' | 'request' | 'upstream' | 'host' | 'referrer', string>>;

/** The context as nginx appends it (ngx_http_log_error): fixed order, values not escaped. */
function contextText(c: Context): string {
  let s = `, client: ${c.client}, server: ${c.server}`;
  if (c.request !== undefined) s += `, request: "${c.request}"`;
  if (c.upstream !== undefined) s += `, upstream: "${c.upstream}"`;
  if (c.host !== undefined) s += `, host: "${c.host}"`;
  if (c.referrer !== undefined) s += `, referrer: "${c.referrer}"`;
  return s;
}

const utf8 = (latin1: string) => bytes(latin1).toString('utf8');

/**
 * The contexts nginx can have appended to a line of connection `conn`, from what its client sent:
 * before the request line (client, server), after it (request), after the headers (host and
 * referrer when sent), with the upstream of each server the request may have tried. Connections
 * without a request (capture.sh's probes while nginx starts) name the listening address.
 */
function contextsFor(conn: number | undefined): Context[] {
  const r = conn === undefined ? undefined : byConnection.get(conn);
  if (r === undefined) return conn === undefined ? [] : [{ client: '127.0.0.1', server: `127.0.0.1:${capture.ports.site}` }];
  const base: Context = { client: r.client, server: serverName(r) };
  const withRequest: Context = { ...base, request: utf8(requestLine(r)) };
  const headers: Context = {};
  if (r.raw === null && r.host !== null) headers.host = utf8(r.host);
  if (r.raw === null && r.referer !== null) headers.referrer = utf8(r.referer);
  const target = r.raw === null ? utf8(r.target) : '';
  const upstreams = [`127.0.0.1:${capture.ports.dead}`, `[::1]:${capture.ports.dead}`].map((addr) => ({ ...withRequest, upstream: `http://${addr}${target}`, ...headers }));
  return [base, withRequest, { ...withRequest, ...headers }, ...upstreams];
}

const HEAD = /^(\d{4})\/(\d\d)\/(\d\d) (\d\d):(\d\d):(\d\d) \[([a-z]+)\] \d+#\d+: (?:\*(\d+) )?/;

/**
 * The entry nginx meant: the level folded, the time in nginx's zone, the body after `*N `, split
 * into message and the longest context nginx can have appended that ends the line. Debug lines
 * never get a context (ngx_log_error_core calls the context handler for other levels only). A
 * line cut at 2048 bytes keeps its whole body as the message (error-log.ts documents this).
 */
function expectedError(line: string, head: RegExpExecArray): ErrorEntry {
  const [, y, mo, d, h, mi, s, level, conn] = head;
  const body = line.slice(head[0].length);
  const candidates = level === 'debug' ? [] : contextsFor(conn === undefined ? undefined : Number(conn));
  let best: { context: Context; text: string } | undefined;
  for (const context of candidates) {
    const text = contextText(context);
    if (body.endsWith(text) && (best === undefined || text.length > best.text.length)) best = { context, text };
  }
  return {
    timestamp: Date.UTC(Number(y), Number(mo) - 1, Number(d), Number(h), Number(mi), Number(s)) - offsetMs,
    level: FOLD[level!]!,
    message: best === undefined ? body : body.slice(0, body.length - best.text.length),
    context: best?.context ?? {},
  };
}

/*
 * Two requests forge a context, and must not get one (see error-log.ts):
 * - `forged-error-context` sent the request line `GET /x", host: "forged.example HTTP/1.1`; nginx
 *   refused it before reading headers and logged `request: "GET /x", host: "forged.example HTTP/1.1"`:
 *   one request value, no host.
 * - `debug-forged-ua` sent a User-Agent holding `, client: 203.0.113.66, server: forged.example`;
 *   nginx's debug line `http header: "User-Agent: …"` carries no context at all.
 */

describe.each(capture.errorLogs)('$file', ({ file }) => {
  const entries = entriesOf(file);

  it('every line is an entry or continues one', () => {
    expect(entries.every((entry) => HEAD.test(entry))).toBe(true);
    expect(entries.join('\n') + '\n').toBe(fixture(file).toString('utf8'));
  });

  entries.forEach((entry, i) => {
    const head = HEAD.exec(entry)!;
    it(`${file} entry ${i + 1} ${JSON.stringify(entry.slice(20, 90))}`, () => {
      expect(parseErrorLine(entry, capture.timezone)).toEqual({ ok: true, entry: expectedError(entry, head), contextAmbiguous: false });
    });
  });

  if (file === 'error-debug.log') {
    // nginx's debug log writes the response header it sends as one message, CRLFs and all.
    it('the response header nginx sent is one entry, its CRLFs in the message', () => {
      const header = entries.find((e) => / HTTP\/1\.1 204 No Content\r\n/.test(e))!;
      expect(header).toMatch(/\*\d+ HTTP\/1\.1 204 No Content\r\nServer: nginx\/[\d.]+\r\nDate: [^\r]+\r\nConnection: keep-alive\r\n$/);
    });
  }
});

describe('error-log coverage', () => {
  const heads = capture.errorLogs.flatMap(({ file }) => entriesOf(file).map((line) => ({ line, head: HEAD.exec(line)! })));

  it('nginx levels notice, info, warn, error and debug, each folded', () => {
    expect(new Set(heads.map(({ head }) => head[7]))).toEqual(new Set(['notice', 'info', 'warn', 'error', 'debug']));
  });

  it('every context key, a cut line, and lines of every kind the capture provoked', () => {
    const keys = new Set(heads.flatMap(({ line, head }) => Object.keys(expectedError(line, head).context)));
    expect(keys).toEqual(new Set(['client', 'server', 'request', 'upstream', 'host', 'referrer']));
    const messages = heads.map(({ line, head }) => expectedError(line, head).message);
    for (const pattern of [/^open\(\) ".*" failed \(2: No such file or directory\)$/, /^connect\(\) failed \(111: Connection refused\) while connecting to upstream$/, /^client sent invalid method while reading client request line$/, /^a client request body is buffered to a temporary file /, /^client .* closed keepalive connection$/]) {
      expect(messages.some((m) => pattern.test(m))).toBe(true);
    }
    // The long URL's 404 line, cut by nginx at 2048 bytes (NGX_MAX_ERROR_STR) in its request.
    const cut = heads.find(({ line }) => line.includes('request: "GET /long?q='))!;
    expect(Buffer.byteLength(cut.line) + 1).toBe(2048);
    expect(expectedError(cut.line, cut.head).context).toEqual({});
  });
});
