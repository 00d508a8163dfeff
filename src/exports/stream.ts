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
 * A download is one query per UTC day (partition) of the range, newest first, run one after the
 * other and written as one file (`exportBytes`): the rows and their order are those of a single
 * query, but the engine has one day's parts open at a time instead of all of them.
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
import { chdbOf, selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { accessWhere, errorWhere, type AccessFilters, type ErrorFilters, type TimeRange } from '../logs/filters.js';
import type { ExportFormat, ExportType } from './store.js';
import { DAY_MS } from '../../core/durations.js';

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
 * reader does either. Reading in order opens every part the query covers at once (which is why a
 * download runs one query per day, see `exportBytes`) and by default buffers ahead in each
 * (`read_in_order_use_buffering`): without that buffer and with smaller blocks, a 10M-row export
 * over 31 days in one query grew the server by 291 MB instead of 1,136 MB, at the same speed
 * (bench/query). Parallel formatting keeps several formatted blocks in flight on other threads;
 * a day's single stream gains no speed from it, and without it a first NDJSON download of 1M
 * rows over 31 days grew the server by 75–89 MB instead of 100–108 (bench/export).
 */
const SETTINGS = [
  'output_format_json_quote_64bit_integers = 0',
  'output_format_json_escape_forward_slashes = 0',
  'output_format_json_validate_utf8 = 1',
  "date_time_output_format = 'iso'",
  'output_format_csv_crlf_end_of_line = 1',
  "format_csv_null_representation = ''",
  'output_format_parallel_formatting = 0',
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

/** What one download holds: the export record's domain, type and filters, range, and format. */
export interface ExportPlan {
  domainId: number;
  selection: ExportSelection;
  range: Required<TimeRange>;
  format: ExportFormat;
}

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

// ---------------------------------------------------------------------------------------------
// Slices: one UTC day (one partition) per query
// ---------------------------------------------------------------------------------------------


/**
 * The UTC days (days since 1970-01-01) that hold rows of the domain in the range in any of the
 * tables of `types`, newest first, with their rows (a JSONEachRow row `{ day, rows }` each). The
 * tables are partitioned by `toDate(timestamp)` of a UTC column, so each day is one partition.
 * Only the domain and the range are asked, not the other filters: that reads the key columns alone
 * (about 30 ms for a million rows, 150 ms for ten million), where the filters would read their
 * columns twice; a day whose rows all fail the filters costs one quick empty query. Each day's
 * query sees the rows stored when it starts, as a single query would when it started; a day
 * without rows when the days were listed is not read.
 */
export function daysQuery(domainId: number, types: readonly ExportType[], range: Required<TimeRange>): ClickhouseQuery {
  const arms = types.map((type, i) => {
    const prefix = `d${i}`;
    return { type, ...(type === 'access' ? accessWhere(domainId, range, prefix) : errorWhere(domainId, range, prefix)) };
  });
  const union = arms.map((a) => `SELECT toUInt32(toDate(timestamp)) AS day, count() AS n FROM ${tableOf(a.type)} WHERE ${a.where} GROUP BY day`).join(' UNION ALL ');
  return { sql: `SELECT day, sum(n) AS rows FROM (${union}) GROUP BY day ORDER BY day DESC`, params: Object.assign({}, ...arms.map((a) => a.params)), format: 'JSONEachRow' };
}

/** A day of `daysQuery`'s, and its rows. */
export interface DayRows {
  day: number;
  rows: number;
}

/** The days of `daysQuery`. */
export async function daysHoldingRows(clickhouse: ClickHouseClient, domainId: number, types: readonly ExportType[], range: Required<TimeRange>, signal?: AbortSignal): Promise<DayRows[]> {
  const query = daysQuery(domainId, types, range);
  return (await selectRows<{ day: number | string; rows: number | string }>(clickhouse, query.sql, query.params, signal)).map((r) => ({ day: Number(r.day), rows: Number(r.rows) }));
}

/**
 * daySlices' slices, neighbours joined while together they hold at most `maxRows` rows (a day
 * holding more is a slice alone): still newest first, still every row in exactly one, so read in
 * turn they give the rows of one query in its order, in fewer statements where days are small.
 */
export function rowSlices(days: readonly DayRows[], range: Required<TimeRange>, maxRows: number): Required<TimeRange>[] {
  const rowsOf = new Map(days.map((d) => [d.day, d.rows]));
  const slices: (Required<TimeRange> & { rows: number })[] = [];
  for (const slice of daySlices([...rowsOf.keys()], range)) {
    const rows = rowsOf.get(Math.floor(slice.startDate.getTime() / DAY_MS))!;
    const last = slices[slices.length - 1];
    if (last && last.rows + rows <= maxRows) Object.assign(last, { startDate: slice.startDate, rows: last.rows + rows });
    else slices.push({ ...slice, rows });
  }
  return slices.map(({ startDate, endDate }) => ({ startDate, endDate }));
}

/**
 * The range cut at UTC midnights into the given days, newest first, each slice with both ends
 * included to the millisecond like the range itself: a row at 00:00:00.000 belongs to the day it
 * starts, one at 23:59:59.999 to the day it ends, so every row of the range is in exactly one
 * slice. Rows that tie on the timestamp share a day, so the slices read newest first, each in
 * `exportQuery`'s order, give the rows in the order of one query over the whole range. Days
 * outside the range give no slice.
 */
export function daySlices(days: readonly number[], range: Required<TimeRange>): Required<TimeRange>[] {
  const start = range.startDate.getTime();
  const end = range.endDate.getTime();
  const slices: Required<TimeRange>[] = [];
  for (const day of [...days].sort((a, b) => b - a)) {
    const from = Math.max(start, day * DAY_MS);
    const to = Math.min(end, (day + 1) * DAY_MS - 1);
    if (from <= to) slices.push({ startDate: new Date(from), endDate: new Date(to) });
  }
  return slices;
}

// ---------------------------------------------------------------------------------------------
// Transports
// ---------------------------------------------------------------------------------------------

/** The raw bytes of one query, each chunk fetched when the previous one has been taken; ending the iteration early cancels the query. */
export type QueryBytes = (query: ClickhouseQuery) => AsyncGenerator<Uint8Array>;

interface Transport {
  bytes: QueryBytes;
  close(): void;
}

/**
 * Where a download's queries run, one after the other. Embedded: a chDB Session of its own on the
 * same data directory. chDB allows one open cursor per connection, and such connections share the
 * engine and its data but not query state, so downloads run side by side and beside the client's
 * own queries; the client's extension handle streams without bound parameters, the Session has
 * queryStreamBind, so no input enters the SQL. One Session serves all the slices in turn. Loaded
 * here only, as in core/db/clickhouse.ts: a server-mode process never maps libchdb. Server: the
 * HTTP response body of `exec`, one request per slice.
 */
async function openTransport(clickhouse: ClickHouseClient, signal: AbortSignal): Promise<Transport> {
  const chdb = chdbOf(clickhouse);
  if (chdb) {
    const { Session } = await import('chdb');
    const session = new Session(chdb.session.path);
    return {
      async *bytes(query) {
        // The signal ends the stream between chunks; leaving the loop early cancels it.
        const stream = session.queryStreamBind(query.sql, query.params, { format: query.format, signal });
        for await (const chunk of stream) yield chunk.raw();
      },
      close: () => session.close(),
    };
  }
  return {
    async *bytes(query) {
      // Until the response starts the signal cancels the request; from then on the client no
      // longer listens to it, and destroying the body does: the connection closes and the server
      // cancels the query, also while a chunk is awaited.
      const result = await clickhouse.exec({ query: `${query.sql} FORMAT ${query.format}`, query_params: query.params, abort_signal: signal });
      const stop = () => result.stream.destroy();
      signal.addEventListener('abort', stop, { once: true });
      if (signal.aborted) stop();
      try {
        for await (const chunk of result.stream) yield chunk as Uint8Array;
      } finally {
        signal.removeEventListener('abort', stop);
        result.stream.destroy();
      }
    },
    close: () => {},
  };
}

/**
 * The bytes of each query in turn, one query open at a time: the next starts only when the
 * previous one has given its last chunk, and none starts once `signal` is aborted. Ending the
 * iteration early ends the current query (and so cancels it).
 */
export async function* concatenated(queries: Iterable<ClickhouseQuery>, bytes: QueryBytes, signal: AbortSignal): AsyncGenerator<Uint8Array> {
  for (const query of queries) {
    if (signal.aborted) return;
    yield* bytes(query);
  }
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
 * The download's rows as bytes, newest first: one query per UTC day that holds rows of the domain
 * in the range (see `daysQuery`), concatenated. Why not one query: reading in key order
 * opens a stream on every part the range covers at once, so one query over 31 daily partitions
 * grew the server by 240–260 MB for 1 million rows and 530 MB for 10 million, one day at a time
 * by 70–100 MB for either (bench/export, bench/README.md). The rows and
 * their order are those of the one query. The next chunk is read ahead, across a slice's end too,
 * so the next day's query starts while the reader takes the last chunk of the previous one.
 * Aborting `signal` cancels the query under way and starts no further one.
 */
export async function* exportBytes(clickhouse: ClickHouseClient, plan: ExportPlan, signal: AbortSignal): AsyncGenerator<Uint8Array> {
  const days = await daysHoldingRows(clickhouse, plan.domainId, [plan.selection.type], plan.range, signal);
  const queries = daySlices(days.map((d) => d.day), plan.range).map((range) => exportQuery(plan.domainId, plan.selection, range, plan.format));
  if (queries.length === 0) return;
  const transport = await openTransport(clickhouse, signal);
  try {
    yield* readAhead(concatenated(queries, transport.bytes, signal));
  } finally {
    transport.close();
  }
}

/**
 * How fast a download's reader must take the file. Over every `windowMs` of the reader's own time
 * (time during which a piece of the file was ready for it, not time spent waiting for ClickHouse)
 * it must take at least `minBytesPerS × windowMs / 1000` bytes, else the download is cut and its
 * slot freed: a reader that trickles, not only one gone silent, gives its slot back.
 */
export interface ReaderPace {
  minBytesPerS: number;
  windowMs: number;
}

/**
 * 16 KiB/s (128 kbit/s) over 30 s windows: below any mobile or broadband link in use, so a real
 * client is never cut, while a reader slower than that would hold a download slot (and a
 * ClickHouse query) for hours on a file of a hundred megabytes. A silent reader is cut after 30
 * to 60 s of silence (the window it falls silent in still counts what it took before).
 */
export const READER_PACE: ReaderPace = { minBytesPerS: 16 * 1024, windowMs: 30_000 };

/**
 * The most handed to the reader at once. A result block is about a megabyte; handed whole, a
 * reader at the minimum pace would take a minute over one, and its pace would show only block by
 * block. Pieces are views of the block (no copy).
 */
export const PIECE_BYTES = 64 * 1024;

/** Why a download was cut: its reader took too little in a window of its own time. */
export class SlowReaderError extends Error {
  constructor(
    readonly bytes: number,
    readonly windowMs: number,
    readonly minBytesPerS: number,
  ) {
    super(`download reader took ${bytes} bytes in ${windowMs} ms, below the minimum of ${minBytesPerS} bytes/s`);
  }
}

export interface ExportBodyEnd {
  /** Bytes handed to the reader. */
  bytes: number;
  error?: unknown;
}

/**
 * The download body: the CSV header row (for CSV), then the result's bytes as they come, in
 * pieces of at most PIECE_BYTES. `open` starts the source; its signal is aborted when the body
 * ends early, before the source is closed, so that a query under way stops at once where the
 * transport allows. The query runs, and its first chunk is fetched, before this returns, so a
 * failing query is an error of the request rather than a cut download; after that each pull
 * hands on one more piece.
 *
 * The reader's pace (`pace`, see ReaderPace) is measured on its own clock: from the moment a
 * piece is handed to it (or the body is opened) until it asks for the next one. Waiting for the
 * next chunk of the query does not count, so a slow query never gets its reader cut.
 * `onEnd` runs once: when the rows are done, the reader cancels or is cut for its pace (with a
 * SlowReaderError), or a later chunk fails (with the error).
 */
export async function openExportBody(
  open: (signal: AbortSignal) => AsyncIterable<Uint8Array>,
  type: ExportType,
  format: ExportFormat,
  onEnd: (end: ExportBodyEnd) => void,
  pace: ReaderPace = READER_PACE,
): Promise<ReadableStream<Uint8Array>> {
  const abort = new AbortController();
  const chunks = open(abort.signal)[Symbol.asyncIterator]();
  let bytes = 0;
  /** The source gave its last chunk, or was stopped. */
  let done = false;
  let ended = false;
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const clock = readerClock(pace, (error) => void finish(error).then(() => controller.error(error)));
  /** Stops the query (if still running) and reports the end, once. */
  const finish = async (error?: unknown) => {
    const early = !done;
    done = true;
    clock.stop();
    if (early) abort.abort();
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

  /** Hands the reader the next piece of the queue's first chunk; its turn starts. */
  const handNext = (c: ReadableStreamDefaultController<Uint8Array>) => {
    const chunk = queue.shift()!;
    const piece = chunk.length > PIECE_BYTES ? chunk.subarray(0, PIECE_BYTES) : chunk;
    if (piece !== chunk) queue.unshift(chunk.subarray(PIECE_BYTES));
    bytes += piece.length;
    c.enqueue(piece);
    clock.handed(piece.length);
  };
  return new ReadableStream<Uint8Array>(
    {
      start(c) {
        controller = c;
        clock.handed(0);
      },
      async pull(c) {
        if (!clock.asked()) return;
        try {
          if (queue.length > 0) return handNext(c);
          while (!done) {
            const next = await chunks.next();
            if (next.done) done = true;
            else if (next.value.length > 0) {
              queue.push(next.value);
              return handNext(c);
            }
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

interface ReaderClock {
  /** A piece of `size` bytes was handed to the reader: its turn starts. */
  handed(size: number): void;
  /** The reader asks for more: its turn ends. False if it was cut meanwhile. */
  asked(): boolean;
  stop(): void;
}

/**
 * The reader's clock for ReaderPace: consecutive windows of the reader's own time, each of which
 * must see at least the pace's bytes. A timer ends a window that runs out during the reader's
 * turn (a reader that stalls never asks again); a turn that ends past the window's end closes it
 * at once.
 */
function readerClock(pace: ReaderPace, cut: (error: SlowReaderError) => void): ReaderClock {
  const minBytes = (pace.minBytesPerS * pace.windowMs) / 1000;
  let usedMs = 0;
  let windowBytes = 0;
  let turnStart: number | null = null;
  let timer: NodeJS.Timeout | undefined;
  let stopped = false;
  /** Adds the turn so far to the window; true while the reader keeps its pace. */
  const settle = (): boolean => {
    if (stopped) return false;
    const now = performance.now();
    if (turnStart !== null) {
      usedMs += now - turnStart;
      turnStart = now;
    }
    if (usedMs < pace.windowMs) return true;
    if (windowBytes < minBytes) {
      stop();
      cut(new SlowReaderError(windowBytes, pace.windowMs, pace.minBytesPerS));
      return false;
    }
    usedMs = 0;
    windowBytes = 0;
    return true;
  };
  const arm = () => {
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (settle()) arm();
    }, pace.windowMs - usedMs).unref();
  };
  const stop = () => {
    stopped = true;
    clearTimeout(timer);
  };
  return {
    handed(size) {
      if (stopped) return;
      windowBytes += size;
      turnStart = performance.now();
      arm();
    },
    asked() {
      clearTimeout(timer);
      const keeping = settle();
      turnStart = null;
      return keeping;
    },
    stop,
  };
}
