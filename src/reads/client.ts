/**
 * How a request reads ClickHouse (`withReads`): it waits for a place in the process's fair queue
 * (scheduler.ts) as its user, holds it while its statements run, and reads through a client whose
 * every statement carries the limits of the request's class as a SETTINGS clause; a statement
 * stopped by a limit answers 503 (422 for a statement too long to parse) with what to change,
 * never 500 and never minutes.
 *
 * A place is a request's, not a statement's: a request of several statements (a build state, then
 * the query) waits once, so another user's request waits for at most one request of each user
 * ahead of it. Given per statement, the second statement of a light request queued again behind a
 * heavy one, and a two-statement query waited for two heavy ones (bench/README, "bench/fair-reads").
 * The exception is a long read (a search, an export's count): it runs as slices of a day, each
 * `withReads` of its own, so that a dashboard waits for one slice and not the whole read.
 *
 * | class     | for                                              |
 * |-----------|--------------------------------------------------|
 * | `stats`   | GET …/stats, POST /api/logs/query (the dashboard) |
 * | `listing` | the access and error listings                    |
 * | `search`  | POST …/search                                    |
 * | `export`  | an export's count when it is created             |
 *
 * Every class has READ_TIMEOUT_S and READ_MAX_MEMORY_MB today; the scheduler orders waiting
 * requests by class (stats, then listing, then search and export; scheduler.ts). A download
 * streams on a chDB session of its own (src/exports/stream.ts), outside this queue: its limits
 * are the per-user cap of downloads and the reader's pace.
 *
 * The limits go in the statement's own SETTINGS clause, never in `clickhouse_settings`: chDB
 * turns those into SET statements that stay on the process's session (docs/architecture.md, "One
 * trap of the embedded engine").
 */
import type { QueryParams } from '@clickhouse/client';
import type { Config } from '../../core/config.js';
import { clickhouseCode, derivedClient, EMBEDDED_READ_SESSIONS, requestReads, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { ApiError } from '../http/errors.js';
import { ReadScheduler, type ReadClass } from './scheduler.js';

export interface ReadLimits {
  /** max_execution_time of one statement, seconds. */
  timeoutS: number;
  /** max_memory_usage of one statement, bytes. */
  maxMemoryBytes: number;
}

/** ClickHouse's error codes for a statement stopped by a limit of its own. */
const TIMEOUT_EXCEEDED = 159;
const MEMORY_LIMIT_EXCEEDED = 241;
const SYNTAX_ERROR = 62;

/**
 * `sql` with `settings` added to its SETTINGS clause, or given one. A statement's own clause is
 * its last one when nothing but settings follow it (the statements of src/ end there, never in a
 * FORMAT, which the client adds after).
 */
export function withSettings(sql: string, settings: Record<string, number>): string {
  const list = Object.entries(settings)
    .map(([name, value]) => `${name} = ${value}`)
    .join(', ');
  return /\bSETTINGS\s+\w+\s*=\s*[^()]*$/.test(sql) ? `${sql}, ${list}` : `${sql}\nSETTINGS ${list}`;
}

const settingsOf = (limits: ReadLimits) => ({ max_execution_time: limits.timeoutS, max_memory_usage: limits.maxMemoryBytes });

/** A statement stopped by a limit, as the caller's answer; anything else as it is. */
export function readError(err: unknown, limits: ReadLimits): unknown {
  const narrower = 'ask for a shorter window, fewer dimensions or narrower filters';
  switch (clickhouseCode(err)) {
    case TIMEOUT_EXCEEDED:
      return new ApiError(503, `The read took longer than its limit of ${limits.timeoutS} s (READ_TIMEOUT_S): ${narrower}`);
    case MEMORY_LIMIT_EXCEEDED:
      return new ApiError(503, `The read needed more memory than its limit of ${Math.round(limits.maxMemoryBytes / 2 ** 20)} MB (READ_MAX_MEMORY_MB): ${narrower}`);
    case SYNTAX_ERROR:
      if (/max query size exceeded/i.test(String((err as Error).message))) return new ApiError(422, 'Validation failed', { body: `makes a statement longer than ClickHouse accepts (max_query_size): ${narrower}` });
      return err;
    default:
      return err;
  }
}

type ResultOf = Awaited<ReturnType<ClickHouseClient['query']>>;

/** The result, its reads failing with readError's answers. */
function mappedWhenRead(result: ResultOf, limits: ReadLimits): ResultOf {
  const mapped = <T>(read: Promise<T>): Promise<T> =>
    read.catch((err: unknown) => {
      throw readError(err, limits);
    });
  return Object.assign(Object.create(result) as ResultOf, { json: () => mapped(result.json()), text: () => mapped(result.text()) });
}

/** A process's reads for requests: their queue, each class's limits, and the rows a slice of a long read spans at most. */
export interface Reads {
  scheduler: ReadScheduler;
  limits: Record<ReadClass, ReadLimits>;
  sliceRows: number;
}

/**
 * Rows of the domain a slice of a long read (a search, an export's count) spans at most: its
 * days, newest first, joined up to this many (a day holding more is a slice alone). Each slice is
 * a statement or two more: a 30-day search of 1M rows in day slices (31) took 3 times as long
 * as one read, in slices of 250,000 rows (5) about 1.4 times; a slice that size reads for less than
 * a dashboard view does (bench/README, "bench/fair-reads").
 */
const SLICE_ROWS = 250_000;

/** Requests of one user that may wait for a place before the next is refused with 429. */
const QUEUED_PER_USER = 64;

export function createReads(config: Pick<Config, 'readTimeoutS' | 'readMaxMemoryMb' | 'readsPerUser' | 'readsInFlight' | 'clickhouseUrl'>): Reads {
  const limits: ReadLimits = { timeoutS: config.readTimeoutS, maxMemoryBytes: config.readMaxMemoryMb * 2 ** 20 };
  // Embedded, one request in flight a read session of the engine's (requestReads).
  const inFlight = config.readsInFlight ?? (config.clickhouseUrl ? 8 : EMBEDDED_READ_SESSIONS);
  return {
    scheduler: new ReadScheduler({ inFlight, perUser: config.readsPerUser, queuedPerUser: QUEUED_PER_USER }),
    limits: { stats: limits, listing: limits, search: limits, export: limits },
    sliceRows: SLICE_ROWS,
  };
}

/** What a read needs of the services (src/context.ts names them; not imported, which would close a circle). */
export interface ReadDeps {
  clickhouse: ClickHouseClient;
  reads: Reads;
}

/** A client reading the store of `base` whose statements carry `limits`, and answer as readError says when one stops them. */
export function limitedClient(base: ClickHouseClient, limits: ReadLimits): ClickHouseClient {
  const settings = settingsOf(limits);
  return derivedClient(base, {
    async query(params: QueryParams) {
      try {
        return mappedWhenRead(await base.query({ ...params, query: withSettings(params.query, settings) }), limits);
      } catch (err) {
        throw readError(err, limits);
      }
    },
  } as Pick<ClickHouseClient, 'query'>);
}

/**
 * Runs `read`, the ClickHouse part of one request of `principal`'s, once a place is free for it,
 * with a client whose statements carry the limits of `cls`; the place is given back when `read` settles.
 */
export function withReads<T>(deps: ReadDeps, principal: { user: { id: number } }, cls: ReadClass, read: (clickhouse: ClickHouseClient) => Promise<T>): Promise<T> {
  const clickhouse = limitedClient(requestReads(deps.clickhouse), deps.reads.limits[cls]);
  return deps.reads.scheduler.run(principal.user.id, () => read(clickhouse), cls);
}
