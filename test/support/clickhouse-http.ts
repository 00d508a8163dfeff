import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import zlib from 'node:zlib';
import { Session } from 'chdb';

/**
 * A small ClickHouse HTTP interface in front of a chDB session, for tests of server mode
 * (CLICKHOUSE_URL) on a machine without a ClickHouse server. It answers what `@clickhouse/client`
 * sends (query, command, exec, insert, ping) the way a server does: the query in the `query`
 * URL parameter and/or the POST body, settings and `param_<name>` values as URL parameters, the
 * result in the requested format with the X-ClickHouse-* headers, errors as ClickHouse text with
 * X-ClickHouse-Exception-Code. The engine is real ClickHouse (chDB is ClickHouse in-process), so
 * SQL, formats, deduplication and error codes are the server's own.
 *
 * stop() closes the port (the client then sees ECONNREFUSED, as with a server that is down) and
 * drops open connections; the chDB data stays, and start() listens again on the same port.
 * chDB binds one data directory per process: a test file using this must not also open an
 * embedded tailhouse ClickHouse.
 */
export interface ClickhouseHttp {
  /** `http://127.0.0.1:<port>`, the same across stop()/start(). */
  readonly url: string;
  readonly port: number;
  /** HTTP requests received so far, pings and failNext() answers included. */
  readonly requests: number;
  /** Closes the port and every open connection. */
  stop(): Promise<void>;
  /** Listens again on the same port. */
  start(): Promise<void>;
  /** stop(), then closes the chDB session. */
  close(): Promise<void>;
  /**
   * Answers the next `count` requests with HTTP `status` (a proxy-style text body, no ClickHouse
   * code), without running them; with `only`, the next requests whose query it matches.
   */
  failNext(count: number, status?: number, only?: RegExp): void;
}

export async function startClickhouseHttp(options: { dataDir: string; port?: number }): Promise<ClickhouseHttp> {
  fs.mkdirSync(options.dataDir, { recursive: true });
  const session = new Session(options.dataDir);
  // Insert bodies are spooled here for INSERT … FROM INFILE (see execute).
  const spool = path.join(options.dataDir, 'http-spool');
  fs.rmSync(spool, { recursive: true, force: true });
  fs.mkdirSync(spool);
  const version = (await session.queryAsync('SELECT version()', { format: 'TabSeparatedRaw' })).text().trim();

  let server: http.Server | undefined;
  let port = options.port ?? 0;
  let requests = 0;
  let spoolSeq = 0;
  const failing: { left: number; status: number; only: RegExp | null } = { left: 0, status: 503, only: null };
  // One request at a time: settings and `database` are applied to the shared session with SET
  // and USE around a query, which concurrent requests would see.
  let queue: Promise<unknown> = Promise.resolve();

  const run = (sql: string, params: Record<string, string | null>, format: string) =>
    Object.keys(params).length > 0 ? session.queryBindAsync(sql, params, { format }) : session.queryAsync(sql, { format });

  async function execute(search: URLSearchParams, body: Buffer): Promise<Reply> {
    const query = search.get('query') ?? '';
    const settings = [...search].filter(([name]) => isSetting(name));
    const format = search.get('default_format') ?? 'TabSeparated';
    const database = search.get('database');
    const insert = INSERT_FORMAT.exec(query);
    const fromInput = insert ? null : INSERT_FROM_INPUT.exec(query);

    let sql: string;
    let result: Awaited<ReturnType<typeof run>>;
    if (fromInput) {
      const file = path.join(spool, `insert-${++spoolSeq}`);
      fs.writeFileSync(file, body);
      const [, head, structure, tail, dataFormat] = fromInput;
      sql = `${head!.replace(/input\($/i, `file(${sqlString(file)}, '${dataFormat}', `)}${structure}${tail}`;
      try {
        result = await inScope(settings, database, () => run(sql, boundParams(sql, search), format));
      } finally {
        fs.rmSync(file, { force: true });
      }
    } else if (insert) {
      // The client's insert: `INSERT INTO t (cols) FORMAT X` in the URL, the data as the body. chDB
      // reads the body from a file, as the sink does in embedded mode (ingest/sinks/clickhouse.ts);
      // the request's settings become the statement's SETTINGS, scoped to it as on a server.
      const file = path.join(spool, `insert-${++spoolSeq}`);
      fs.writeFileSync(file, body);
      const clause = settings.length > 0 ? ` SETTINGS ${settingList(settings)}` : '';
      sql = `INSERT INTO ${insert[1]} FROM INFILE ${sqlString(file)}${clause} FORMAT ${insert[2]}`;
      try {
        result = await inScope([], database, () => run(sql, boundParams(query, search), format));
      } finally {
        fs.rmSync(file, { force: true });
      }
    } else {
      // As the server does: the URL query, a line feed, then the body (SQL, or inline data).
      sql = query && body.length > 0 ? `${query}\n${body.toString()}` : query || body.toString();
      if (sql.trim() === '') throw new Error('Code: 62. DB::Exception: Empty query. (SYNTAX_ERROR)');
      result = await inScope(settings, database, () => run(sql, boundParams(sql, search), format));
    }

    const written = /^\s*INSERT\b/i.test(sql);
    const rows = String(result.rowsRead);
    const bytes = String(result.bytesRead);
    const summary = {
      read_rows: written ? '0' : rows,
      read_bytes: written ? '0' : bytes,
      written_rows: written ? rows : '0',
      written_bytes: written ? bytes : '0',
      total_rows_to_read: '0',
      result_rows: '0',
      result_bytes: '0',
      elapsed_ns: String(Math.round(result.elapsed * 1e9)),
    };
    const outputFormat = /\bFORMAT\s+(\w+)\s*;?\s*$/i.exec(sql)?.[1] ?? format;
    return {
      status: 200,
      headers: {
        'Content-Type': /^JSON/i.test(outputFormat) ? 'application/json; charset=UTF-8' : 'text/plain; charset=UTF-8',
        'X-ClickHouse-Format': outputFormat,
        'X-ClickHouse-Summary': JSON.stringify(summary),
      },
      body: Buffer.from(result.bytes()),
    };
  }

  /** Runs `fn` with the request's settings and database applied to the session, then undoes them. */
  async function inScope<T>(settings: [string, string][], database: string | null, fn: () => Promise<T>): Promise<T> {
    if (settings.length > 0) await session.queryAsync(`SET ${settingList(settings)}`);
    try {
      if (database) await session.queryAsync(`USE ${quoteIdentifier(database)}`);
      return await fn();
    } finally {
      if (database) await session.queryAsync('USE default');
      if (settings.length > 0) await session.queryAsync(`SET ${settings.map(([name]) => `${name} = DEFAULT`).join(', ')}`);
    }
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    requests++;
    const url = new URL(req.url ?? '/', 'http://localhost');
    const search = url.searchParams;
    // enable_http_compression asks for a compressed answer, in an encoding from Accept-Encoding.
    const encoding = search.get('enable_http_compression') === '1' ? acceptedEncoding(req.headers['accept-encoding']) : undefined;
    const queryId = search.get('query_id') || randomUUID();
    let reply: Reply;
    try {
      // The whole body first, even for an answer that ignores it: the client is still sending.
      const body = decodeBody(await readAll(req), req.headers['content-encoding']);
      if (failing.left > 0 && (failing.only === null || failing.only.test(search.get('query') ?? ''))) {
        failing.left--;
        reply = { status: failing.status, headers: { 'Content-Type': 'text/plain' }, body: Buffer.from(`${http.STATUS_CODES[failing.status] ?? 'Error'} (failNext)\n`) };
      } else if (url.pathname === '/ping' || (req.method === 'GET' && url.pathname === '/' && !search.has('query'))) {
        reply = { status: 200, headers: { 'Content-Type': 'text/plain; charset=UTF-8' }, body: Buffer.from('Ok.\n') };
      } else if ((req.headers['content-type'] ?? '').startsWith('multipart/form-data')) {
        throw new Error('Code: 48. DB::Exception: multipart query parameters are not supported by this test server. (NOT_IMPLEMENTED)');
      } else {
        const next = queue.then(() => execute(search, body));
        queue = next.catch(() => {});
        reply = await next;
      }
    } catch (err) {
      reply = errorReply(err, version);
    }
    reply.headers['X-ClickHouse-Query-Id'] = queryId;
    let out = reply.body;
    if (encoding) {
      out = encoding === 'br' ? zlib.brotliCompressSync(out) : encoding === 'deflate' ? zlib.deflateSync(out) : zlib.gzipSync(out);
      reply.headers['Content-Encoding'] = encoding;
    }
    res.writeHead(reply.status, { ...reply.headers, 'Content-Length': out.length }).end(out);
  }

  async function start(): Promise<void> {
    if (server) return;
    const s = http.createServer((req, res) => {
      // A client that went away mid-request (or stop()) leaves nothing to answer.
      handle(req, res).catch(() => res.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => {
        s.off('error', reject);
        resolve();
      });
    });
    port = (s.address() as AddressInfo).port;
    server = s;
  }

  async function stop(): Promise<void> {
    const s = server;
    if (!s) return;
    server = undefined;
    await new Promise<void>((resolve) => {
      s.close(() => resolve());
      // Kept-alive sockets too: a server that is down answers nothing on them either.
      s.closeAllConnections();
    });
    // Give clients a moment to read the close of their pooled sockets, so that their next request
    // connects anew and is refused; one sent in that instant may still fail with ECONNRESET (or
    // "socket hang up"), as with a real server going down.
    await new Promise((resolve) => setTimeout(resolve, 20));
  }

  await start();
  return {
    get url() {
      return `http://127.0.0.1:${port}`;
    },
    get port() {
      return port;
    },
    get requests() {
      return requests;
    },
    start,
    stop,
    async close() {
      await stop();
      await queue;
      session.close();
      fs.rmSync(spool, { recursive: true, force: true });
    },
    failNext(count, status = 503, only) {
      failing.left = count;
      failing.status = status;
      failing.only = only ?? null;
    },
  };
}

interface Reply {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
}

// What `@clickhouse/client`'s insert (and exec with values) puts in the URL: `INSERT INTO t`,
// optionally `(a, b)` or `(* EXCEPT (a))`, then `FORMAT X`. Anything else runs as SQL text.
const INSERT_FORMAT = /^\s*INSERT\s+INTO\s+([\w.`"]+(?:\s*\((?:[^()]|\([^()]*\))*\))?)\s+FORMAT\s+(\w+)\s*;?\s*$/is;
// An `INSERT … SELECT … FROM input('structure') … FORMAT X` whose data is the body: the server's
// input() table function, which chDB reads as file() of the spooled body.
const INSERT_FROM_INPUT = /^(\s*INSERT\s+INTO\s.*?\binput\()('(?:[^'\\]|\\.)*')(\).*?)\s+FORMAT\s+(\w+)\s*;?\s*$/is;

// URL parameters of the HTTP interface that are not settings of the query (or are settings the
// HTTP layer consumes: chDB has no HTTP layer and rejects them).
const NOT_SETTINGS = new Set([
  'query',
  'query_id',
  'database',
  'default_format',
  'session_id',
  'session_timeout',
  'session_check',
  'role',
  'user',
  'password',
  'quota_key',
  'compress',
  'decompress',
  'buffer_size',
  'wait_end_of_query',
  'enable_http_compression',
  'send_progress_in_http_headers',
]);

const isSetting = (name: string) => !name.startsWith('param_') && !name.startsWith('http_') && !NOT_SETTINGS.has(name);

/** `a = 1, b = 'x'`: URL values are text; a number stays a number literal. */
function settingList(settings: [string, string][]): string {
  return settings
    .map(([name, value]) => {
      if (!/^\w+$/.test(name)) throw new Error(`Code: 115. DB::Exception: Unknown setting '${name}'. (UNKNOWN_SETTING)`);
      return `${name} = ${/^-?\d+(\.\d+)?$/.test(value) ? value : sqlString(value)}`;
    })
    .join(', ');
}

const sqlString = (s: string) => `'${s.replace(/[\\']/g, (c) => `\\${c}`)}'`;
const quoteIdentifier = (s: string) => `\`${s.replace(/[\\`]/g, (c) => `\\${c}`)}\``;

/**
 * The `param_<name>` values, ready for chDB's queryBindAsync. The client sends each value in
 * ClickHouse's text form (client-common format_query_params): a scalar TSV-escaped (`\'`, `\\`,
 * `\t`, `\n`, `\r`; `\N` for NULL), an Array/Tuple/Map as a literal whose strings are quoted
 * and escaped the same way. chDB's binder takes JS values and TSV-escapes a string itself
 * (chdb/dist/serialize.js formatParamValue) without escaping `'`. So the client's escaping is
 * undone and chDB's redone; inside a composite literal `\'` becomes `''`, which the engine reads
 * as the same quote and which survives chDB's escaping. The type comes from the query's `{name:Type}`.
 */
function boundParams(sql: string, search: URLSearchParams): Record<string, string | null> {
  const types = new Map<string, string>();
  for (const m of sql.matchAll(/\{\s*(\w+)\s*:\s*([^{}]+?)\s*\}/g)) types.set(m[1]!, m[2]!);
  const params: Record<string, string | null> = {};
  for (const [key, wire] of search) {
    if (!key.startsWith('param_')) continue;
    const name = key.slice('param_'.length);
    const composite = /^(Array|Tuple|Map|Nested)\s*\(/i.test(types.get(name) ?? '');
    params[name] = wire === '\\N' ? null : unescapeTsv(wire, composite ? "''" : "'");
  }
  return params;
}

const TSV_UNESCAPES: Record<string, string> = { t: '\t', n: '\n', r: '\r', '0': '\0', b: '\b', f: '\f', a: '\x07', v: '\v', e: '\x1b' };

function unescapeTsv(s: string, quote: string): string {
  return s.replace(/\\([\s\S])/g, (_, c: string) => (c === "'" ? quote : (TSV_UNESCAPES[c] ?? c)));
}

async function readAll(req: http.IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

/** Request bodies compressed by the client (`compression.request`). */
function decodeBody(body: Buffer, encoding: string | undefined): Buffer {
  switch (encoding?.toLowerCase()) {
    case undefined:
    case '':
    case 'identity':
      return body;
    case 'gzip':
      return zlib.gunzipSync(body);
    case 'deflate':
      return zlib.inflateSync(body);
    case 'br':
      return zlib.brotliDecompressSync(body);
    default:
      throw new Error(`Code: 432. DB::Exception: Unknown compression method: ${encoding}. (UNKNOWN_COMPRESSION_METHOD)`);
  }
}

function acceptedEncoding(header: string | undefined): string | undefined {
  const offered = (header ?? '').split(',').map((e) => e.trim().split(';')[0]!.toLowerCase());
  return ['gzip', 'deflate', 'br'].find((e) => offered.includes(e));
}

// The HTTP status ClickHouse answers an exception with (src/Server/HTTP/exceptionCodeToHTTPStatus.cpp).
const BAD_REQUEST = new Set([
  'BAD_ARGUMENTS',
  'CANNOT_COMPILE_REGEXP',
  'DUPLICATE_COLUMN',
  'ILLEGAL_COLUMN',
  'UNKNOWN_ELEMENT_IN_AST',
  'UNKNOWN_TYPE_OF_AST_NODE',
  'THERE_IS_NO_COLUMN',
  'TOO_DEEP_AST',
  'TOO_BIG_AST',
  'UNEXPECTED_AST_STRUCTURE',
  'SYNTAX_ERROR',
  'INCORRECT_DATA',
  'TYPE_MISMATCH',
  'VALUE_IS_OUT_OF_RANGE_OF_DATA_TYPE',
]);
const NOT_FOUND = new Set(
  ['TABLE', 'FUNCTION', 'IDENTIFIER', 'TYPE', 'STORAGE', 'DATABASE', 'SETTING', 'DIRECTION_OF_SORTING', 'AGGREGATE_FUNCTION', 'FORMAT', 'DATABASE_ENGINE', 'TYPE_OF_QUERY', 'ROLE'].map(
    (s) => `UNKNOWN_${s}`,
  ),
);

function httpStatus(type: string): number {
  if (type.startsWith('CANNOT_PARSE_') || BAD_REQUEST.has(type)) return 400;
  if (NOT_FOUND.has(type)) return 404;
  if (type === 'NOT_IMPLEMENTED') return 501;
  if (type === 'TIMEOUT_EXCEEDED') return 408;
  return 500;
}

/** ClickHouse's error text: `Code: N. DB::Exception: … (TYPE) (version V)`, which the client parses into a ClickHouseError. */
function errorReply(err: unknown, version: string): Reply {
  const message = err instanceof Error ? err.message : String(err);
  // chDB's own errors (a bad binding, a closed session) carry no ClickHouse code: report them as
  // the server does an unexpected exception.
  const text = /^Code: \d+\./.test(message) ? message : `Code: 1001. DB::Exception: ${message}. (STD_EXCEPTION)`;
  const code = /^Code: (\d+)\./.exec(text)![1]!;
  const type = /\(([A-Z0-9_]+)\)\s*$/.exec(text)?.[1] ?? '';
  return {
    status: httpStatus(type),
    headers: { 'Content-Type': 'text/plain; charset=UTF-8', 'X-ClickHouse-Exception-Code': code },
    body: Buffer.from(`${text} (version ${version})\n`),
  };
}
