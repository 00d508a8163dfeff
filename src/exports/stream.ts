/**
 * ClickHouse → CSV / NDJSON, in constant memory.
 *
 * ClickHouse writes the file itself: the query selects the entry's fields in the specification's
 * order and asks for `CSV` or `JSONEachRow` with settings that give the listing's formats
 * (below), so this process only forwards bytes, a block at a time, as fast as the reader takes
 * them. Writing rows in JavaScript (parse each row, format it again) measured 170,000–200,000
 * rows/s; forwarding ClickHouse's own writer runs at the engine's speed (bench/export.ts), with
 * nothing per row on the event loop. The only text made here is the CSV header row.
 *
 * One code path, two transports for the bytes: chDB's streaming cursor in embedded mode
 * (`@clickhouse/client`'s query over chDB would buffer the whole result first), the HTTP response
 * body of `exec` with a ClickHouse server. Either way a chunk is fetched only when the previous
 * one has been handed on (plus one read ahead), so memory holds a block or two whatever the size
 * of the export, and a slow reader holds back the query rather than filling memory.
 *
 * CSV (RFC 4180): ClickHouse quotes every string and date, doubles quotes, keeps line breaks
 * inside the quotes; records end with CRLF; NULL (a missing responseTime) is an empty field; the
 * error context is its JSON text. Strings a spreadsheet could take for a formula (starting with
 * `=`, `+`, `-`, `@`, tab or carriage return) get a leading `'`, in the query itself. Numbers
 * need none: ids, codes, sizes and times are never negative.
 * NDJSON: one JSON object per line, keys in the specification's order, values raw.
 * Both: ids and sizes as plain numbers (all below 2^53), times as `2026-11-21T08:15:30.123Z`
 * (DateTime64(3, 'UTC') columns), responseTime in ms or null.
 */
import { chdbOf, type ClickHouseClient } from '../db/clickhouse.js';
import { accessWhere, errorWhere, type AccessFilters, type ErrorFilters, type TimeRange } from '../logs/filters.js';
import type { ExportFormat, ExportType } from './store.js';

/** The entry fields of the specification, in its order: the CSV header and the NDJSON keys. */
export const ACCESS_FIELDS = ['id', 'timestamp', 'ipAddress', 'method', 'url', 'protocol', 'statusCode', 'responseSize', 'referrer', 'userAgent', 'responseTime'] as const;
export const ERROR_FIELDS = ['id', 'timestamp', 'level', 'message', 'context'] as const;

export const fieldsOf = (type: ExportType): readonly string[] => (type === 'access' ? ACCESS_FIELDS : ERROR_FIELDS);

/** A string expression with a leading `'` when it starts like a spreadsheet formula. */
const neutralised = (expr: string) => `if(${expr} != '' AND position('=+-@\\t\\r', substring(${expr}, 1, 1)) > 0, concat('''', ${expr}), ${expr})`;

/**
 * The SELECT list per type and format, the columns of sql/clickhouse/002_logs.sql. NDJSON keys
 * come from the names: a column whose field has another name gets that name as an alias. No alias
 * is the name of a column (ClickHouse lets aliases shadow columns, also in WHERE), and the CSV
 * expressions carry none.
 */
const SELECT: Record<ExportType, Record<ExportFormat, string>> = {
  access: {
    csv: [
      'id',
      'timestamp',
      neutralised('ip_address'),
      neutralised('method'),
      neutralised('url'),
      neutralised('protocol'),
      'status_code',
      'response_size',
      neutralised('referrer'),
      neutralised('user_agent'),
      'response_time',
    ].join(', '),
    json: 'id, timestamp, ip_address AS ipAddress, method, url, protocol, status_code AS statusCode, response_size AS responseSize, referrer, user_agent AS userAgent, response_time AS responseTime',
  },
  error: {
    csv: ['id', 'timestamp', neutralised('level'), neutralised('message'), neutralised('toJSONString(context)')].join(', '),
    json: 'id, timestamp, level, message, context',
  },
};

const CLICKHOUSE_FORMAT: Record<ExportFormat, string> = { csv: 'CSV', json: 'JSONEachRow' };

/**
 * The output settings described above; `optimize_read_in_order` reads the sorting key
 * (domain_id, timestamp, id) backwards instead of sorting, so the engine holds no more than the
 * reader does either. Reading in order opens every daily part at once and by default buffers
 * ahead in each (`read_in_order_use_buffering`): without that buffer and with smaller blocks, a
 * 10M-row export over 31 days grew the server by 291 MB instead of 1,136 MB, at the same speed
 * (bench/query).
 */
const SETTINGS = [
  'output_format_json_quote_64bit_integers = 0',
  'output_format_json_escape_forward_slashes = 0',
  'output_format_json_validate_utf8 = 1',
  "date_time_output_format = 'iso'",
  'output_format_csv_crlf_end_of_line = 1',
  "format_csv_null_representation = ''",
  'optimize_read_in_order = 1',
  'read_in_order_use_buffering = 0',
  'max_block_size = 8192',
].join(', ');

export interface ClickhouseQuery {
  sql: string;
  params: Record<string, unknown>;
  /** The ClickHouse output format the transport asks for. */
  format: string;
}

export type ExportSelection = { type: 'access'; filters: AccessFilters } | { type: 'error'; filters: ErrorFilters };

const whereOf = (domainId: number, selection: ExportSelection, range: Required<TimeRange>) =>
  selection.type === 'access' ? accessWhere(domainId, { ...selection.filters, ...range }) : errorWhere(domainId, { ...selection.filters, ...range });

const tableOf = (type: ExportType) => (type === 'access' ? 'access_logs' : 'error_logs');

/** The export's rows in the file's format, newest first (ties: higher id first), filtered as the listing filters. */
export function exportQuery(domainId: number, selection: ExportSelection, range: Required<TimeRange>, format: ExportFormat): ClickhouseQuery {
  const { where, params } = whereOf(domainId, selection, range);
  return {
    sql: `SELECT ${SELECT[selection.type][format]} FROM ${tableOf(selection.type)} WHERE ${where} ORDER BY timestamp DESC, id DESC SETTINGS ${SETTINGS}`,
    params,
    format: CLICKHOUSE_FORMAT[format],
  };
}

/** How many rows `exportQuery` gives (a JSONEachRow row `{ n }`). */
export function exportCountQuery(domainId: number, selection: ExportSelection, range: Required<TimeRange>): ClickhouseQuery {
  const { where, params } = whereOf(domainId, selection, range);
  return { sql: `SELECT count() AS n FROM ${tableOf(selection.type)} WHERE ${where}`, params, format: 'JSONEachRow' };
}

/**
 * Fetches the next item while the current one is being used, so the engine and this process work
 * at the same time; at most one item waits. Ending early waits for that fetch, then closes.
 */
async function* readAhead<T>(source: AsyncIterable<T>): AsyncGenerator<T> {
  const it = source[Symbol.asyncIterator]();
  let next = it.next();
  let finished = false;
  try {
    for (;;) {
      const item = await next;
      if (item.done) {
        finished = true;
        return;
      }
      next = it.next();
      yield item.value;
    }
  } finally {
    if (!finished) {
      await next.catch(() => undefined);
      await it.return?.(undefined).catch(() => undefined);
    }
  }
}

/**
 * The raw bytes of a query's result, each chunk fetched when the previous one has been taken.
 * Ending the iteration early (`return()`, a reader that went away) cancels the query.
 */
export async function* queryBytes(clickhouse: ClickHouseClient, query: ClickhouseQuery): AsyncGenerator<Uint8Array> {
  const chdb = chdbOf(clickhouse);
  if (chdb) {
    // A session of its own on the same data directory: chDB allows one open cursor per
    // connection, and such connections share the engine and its data but not query state, so
    // downloads run side by side and beside the client's own queries. The client's extension
    // handle streams without bound parameters; the Session has queryStreamBind, so no input
    // enters the SQL. Loaded here only, as in src/db/clickhouse.ts: a server-mode process never maps libchdb.
    const { Session } = await import('chdb');
    const session = new Session(chdb.session.path);
    try {
      const stream = session.queryStreamBind(query.sql, query.params, { format: query.format });
      for await (const chunk of readAhead(stream)) yield chunk.raw();
    } finally {
      session.close();
    }
    return;
  }
  const result = await clickhouse.exec({ query: `${query.sql} FORMAT ${query.format}`, query_params: query.params });
  try {
    for await (const chunk of result.stream) yield chunk as Uint8Array;
  } finally {
    result.stream.destroy();
  }
}

/** A reader that takes nothing for this long gives up its download (and its ClickHouse query). */
export const READER_IDLE_MS = 120_000;

export interface ExportBodyEnd {
  /** Bytes handed to the reader. */
  bytes: number;
  error?: unknown;
}

/**
 * The download body: the CSV header row (for CSV), then the result's bytes as they come. The query
 * runs, and its first chunk is fetched, before this returns, so a failing query is an error of
 * the request rather than a cut download; after that each pull hands on one more chunk.
 * `onEnd` runs once: when the rows are done, the reader cancels or stays idle for `idleMs`, or
 * a later chunk fails (with the error).
 */
export async function openExportBody(
  source: AsyncIterable<Uint8Array>,
  type: ExportType,
  format: ExportFormat,
  onEnd: (end: ExportBodyEnd) => void,
  idleMs = READER_IDLE_MS,
): Promise<ReadableStream<Uint8Array>> {
  const chunks = source[Symbol.asyncIterator]();
  let bytes = 0;
  let done = false;
  let ended = false;
  let idle: NodeJS.Timeout | undefined;
  /** Stops the query (if still running) and reports the end, once. */
  const finish = async (error?: unknown) => {
    done = true;
    clearTimeout(idle);
    await chunks.return?.(undefined).catch(() => {});
    if (ended) return;
    ended = true;
    onEnd(error === undefined ? { bytes } : { bytes, error });
  };

  const queue: Uint8Array[] = [];
  if (format === 'csv') queue.push(new TextEncoder().encode(`${fieldsOf(type).join(',')}\r\n`));
  try {
    const first = await chunks.next();
    if (first.done) done = true;
    else queue.push(first.value);
  } catch (err) {
    await finish(err);
    throw err;
  }

  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const waitForReader = () => {
    clearTimeout(idle);
    idle = setTimeout(() => {
      const error = new Error(`download reader idle for ${idleMs} ms`);
      void finish(error).then(() => controller.error(error));
    }, idleMs).unref();
  };
  const hand = (c: ReadableStreamDefaultController<Uint8Array>, chunk: Uint8Array) => {
    bytes += chunk.length;
    c.enqueue(chunk);
    waitForReader();
  };
  return new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
        waitForReader();
      },
      async pull(c) {
        clearTimeout(idle);
        try {
          const queued = queue.shift();
          if (queued) return hand(c, queued);
          while (!done) {
            const next = await chunks.next();
            if (next.done) break;
            if (next.value.length > 0) return hand(c, next.value);
          }
          c.close();
          await finish();
        } catch (err) {
          await finish(err);
          c.error(err);
        }
      },
      async cancel() {
        await finish();
      },
    },
    // Nothing is queued ahead of the reader beyond the chunk read ahead: a slow client holds back the query.
    { highWaterMark: 0 },
  );
}
