/**
 * The ingest pipeline: source → transform (parse, route, ids) → sink → acknowledgement.
 *
 * `pump` drives one source. It prepares the next batch while the previous one is being written
 * (ClickHouse works on its own threads, so parsing and inserting overlap on two cores), writes
 * batches strictly one after the other, and acknowledges each only after ClickHouse accepted it:
 * that acknowledgement is what moves a file's checkpoint (exactly once, with the batch's
 * deduplication token covering a replay).
 *
 * When ClickHouse (or Postgres, for ids) fails, the write is retried with capped exponential
 * back-off and nothing more is read meanwhile: the source's bounded in-flight window stops it, so
 * the file on disk is the buffer and memory stays flat whatever the backlog. An error that a retry
 * cannot cure (ClickHouse refusing the data itself) stops the source and is reported.
 */
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import type { BatchMember } from './checkpoints.js';
import type { Logger } from '../core/log.js';
import type { DomainDirectory } from './domains.js';
import { UnknownDomainError, type IdAllocator } from './ids.js';
import { dedupToken, isRetryableInsertError, writeRows } from './sinks/clickhouse.js';
import { decodeLines, domainsOf, emptyDecoded, toRows, type Decoded, type Decoder, type RejectCause, type Routing, type Rows } from './transforms/rows.js';
import type { LineChunk } from './types.js';

export interface Backoff {
  initialMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: Backoff = { initialMs: 250, maxMs: 10_000 };

/** What every source needs from the process. */
export interface PipelineDeps {
  clickhouse: ClickHouseClient;
  ids: IdAllocator;
  domains: DomainDirectory;
  log: Logger;
  backoff: Backoff;
  /** Aborted when the worker stops: waits and retries end, the batch in hand is left for a replay. */
  signal: AbortSignal;
  metrics?: IngestMetrics;
}

/**
 * What the process's metrics (src/metrics/) take from the worker: its counters, read at each
 * scrape (they are the ones `ingest stats` logs, never counted twice), and each batch's insert time.
 */
export interface IngestMetrics {
  followIngest(stats: () => SourceStats[]): void;
  insertTimed(source: string, seconds: number): void;
}

export type SourceState = 'starting' | 'waiting for domain' | 'running' | 'retrying' | 'stopped' | 'failed';

/** Counters of one source (docs/reference/ingest.md): what was read, stored, rejected, and how far behind it is. */
export interface SourceStats {
  /** `access /var/log/nginx/shop.access.log`, `syslog udp 127.0.0.1:5514`, … */
  name: string;
  state: SourceState;
  /** Lines read (including rejected ones). */
  read: number;
  /** Entries ClickHouse accepted. */
  inserted: number;
  /** Lines stored as rejects (do not parse, unknown domain, too long). */
  rejected: number;
  /** The same, by cause. */
  rejectedBy: Partial<Record<RejectCause, number>>;
  /** Bytes written to the source's files and not yet accepted by ClickHouse. */
  lagBytes: number;
  /** Files open: the followed one, and rotated ones still being finished (0 for syslog). */
  files: number;
  /** Failed writes retried so far. */
  retries: number;
  /** The last error met, for the operator; null once a write succeeds again. */
  lastError: string | null;
  /** The domains configured for the source (a file's `domain`, the syslog tags'); empty when its lines are routed by host. */
  domains: string[];
  /** When its lines were last stored under each domain, epoch ms by domain id (health-report.ts). */
  lastStoredByDomain: Record<number, number>;
}

export function newStats(name: string, domains: string[] = []): SourceStats {
  return { name, state: 'starting', read: 0, inserted: 0, rejected: 0, rejectedBy: {}, lagBytes: 0, files: 0, retries: 0, lastError: null, domains, lastStoredByDomain: {} };
}

/** Resolves after `ms`, or early (false) when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (slept: boolean) => {
      clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
      resolve(slept);
    };
    const onAbort = () => done(false);
    const timer = setTimeout(() => done(true), ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/** Raised to end a pump when the worker stops in the middle of a wait or a retry. */
export class Stopped extends Error {
  constructor() {
    super('stopped');
  }
}

const describe = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0]!.slice(0, 500);

/**
 * Runs `attempt` until it succeeds, waiting with capped exponential back-off between failures
 * that `retryable` accepts; throws the first other error, or Stopped when the worker stops. The
 * state and errors are shown in the stats of every source the attempt serves (a shared batch
 * serves many).
 */
export async function retrying<T>(
  attempt: () => Promise<T>,
  what: string,
  served: SourceStats | readonly SourceStats[],
  deps: PipelineDeps,
  retryable: (err: unknown) => boolean = () => true,
): Promise<T> {
  const all = Array.isArray(served) ? (served as readonly SourceStats[]) : [served as SourceStats];
  // One log line per attempt whatever the number of sources: a shared batch serves a thousand.
  const sources = all.length === 1 ? all[0]!.name : `${all.length} sources`;
  let delay = deps.backoff.initialMs;
  for (;;) {
    if (deps.signal.aborted) throw new Stopped();
    try {
      const result = await attempt();
      if (all.some((stats) => stats.state === 'retrying')) deps.log.info({ source: sources }, `${what}: succeeded again`);
      for (const stats of all) {
        if (stats.state === 'retrying') stats.state = 'running';
        stats.lastError = null;
      }
      return result;
    } catch (err) {
      if (err instanceof Stopped || !retryable(err)) throw err;
      for (const stats of all) {
        stats.retries++;
        stats.lastError = `${what}: ${describe(err)}`;
        stats.state = 'retrying';
      }
      deps.log.warn({ source: sources, err: describe(err), retryInMs: delay }, `${what} failed: retrying`);
      if (!(await sleep(delay, deps.signal))) throw new Stopped();
      delay = Math.min(delay * 2, deps.backoff.maxMs);
    }
  }
}

/**
 * Where a file's lines go: to a domain by name, registered the first time it is met when
 * `register` names its owner (a source's `register`, for names its paths give); to each line's
 * host (domain null); or nowhere (`rejected`: why every line is a reject).
 */
export type FileRoute = { domain: string | null; register?: string | null } | { rejected: string };

/**
 * The routing of a file's lines. A fixed domain that is not registered is waited for (nothing is
 * read meanwhile: a source may be configured before its domain exists,
 * docs/reference/ingest.md#domains); the wait ends within a second of the registration
 * (domains.ts). Host routing needs no wait.
 */
export async function routingFor(route: FileRoute, stats: SourceStats, deps: PipelineDeps): Promise<Routing> {
  if ('rejected' in route) return { rejected: route.rejected };
  const { domain, register } = route;
  if (domain === null) return { byHost: deps.domains };
  await retrying(() => deps.domains.refresh(), 'reading the registered domains', stats, deps);
  let domainId = deps.domains.idOf(domain);
  if (domainId === undefined && register) domainId = await retrying(() => deps.domains.register(domain, register), 'registering the domain', stats, deps);
  if (domainId === undefined) {
    deps.log.warn({ source: stats.name, domain }, 'domain not registered: waiting for it, reading nothing');
    stats.state = 'waiting for domain';
    domainId = await deps.domains.waitFor(domain, deps.signal);
    if (domainId === undefined) throw new Stopped();
    deps.log.info({ source: stats.name, domain }, 'domain registered: reading');
  }
  stats.state = 'running';
  return { domainId };
}

/** Rows of a batch with the token that makes its replay deduplicate. */
export interface Prepared {
  rows: Rows;
  token: string;
  /** Lines the batch read. */
  lines: number;
  /** Access lines ClickHouse parses as it inserts them (staged-chunks.ts), written before `rows`. */
  staged?: StagedRows;
}

/**
 * Access lines of one domain that ClickHouse parses as it inserts them (staged-chunks.ts). `write`
 * inserts them under their own token, or returns them read by the parser when the engine refused
 * them (written then under the batch's token with `-parsed`).
 */
export interface StagedRows {
  domainId: number;
  /** Lines sent. */
  length: number;
  write(): Promise<Rows | null>;
  /** Set once written: the lines as the parser read them, when the engine refused them. */
  parsed?: Rows | null;
}

/**
 * Gives a decoded batch its ids. A domain deleted since the lines were routed fails the id
 * allocation; the batch is then routed again from a fresh directory (`decode` runs again).
 */
export async function withIds(
  decode: () => Promise<Decoded>,
  identity: string,
  range: [start: number, end: number],
  stats: SourceStats,
  deps: PipelineDeps,
): Promise<Rows> {
  for (;;) {
    const decoded = await decode();
    try {
      const idOf = await retrying(
        () => deps.ids.forBatch(identity, domainsOf(decoded), range[0], range[1]),
        'allocating entry ids in Postgres',
        stats,
        deps,
        (err) => !(err instanceof UnknownDomainError),
      );
      return toRows(decoded, idOf);
    } catch (err) {
      if (!(err instanceof UnknownDomainError)) throw err;
      deps.log.warn({ source: stats.name, domainId: err.domainId }, 'a domain was deleted while its lines were being routed: routing them again');
      await retrying(() => deps.domains.refresh(0), 'reading the registered domains', stats, deps);
    }
  }
}

/** How a chunk of file lines becomes a batch: its kind, parser, route and line limit. */
export interface ChunkInput {
  decoder: Decoder;
  route: FileRoute;
  maxLineBytes: number;
}

/** Parses, routes and numbers the lines of one file chunk. */
export async function prepareChunk(chunk: LineChunk, input: ChunkInput, stats: SourceStats, deps: PipelineDeps): Promise<Prepared> {
  const decode = async () => {
    const routing = await routingFor(input.route, stats, deps);
    const decoded = emptyDecoded();
    await decodeLines(decoded, chunk.lines, chunk.overlong, input.decoder, routing, { source: chunk.path, identity: chunk.identity }, input.maxLineBytes);
    return decoded;
  };
  const rows = await withIds(decode, chunk.identity, [chunk.startOffset, chunk.endOffset], stats, deps);
  return { rows, token: dedupToken(chunk.identity, chunk.startOffset, chunk.endOffset), lines: chunk.lines.length + chunk.overlong.length };
}

/** Writes rows under `token` until ClickHouse accepts them; a refusal of the data itself is thrown. */
export async function writeAccepted(rows: Rows, token: string, served: SourceStats | readonly SourceStats[], label: string, deps: PipelineDeps): Promise<void> {
  const write = async () => {
    const started = performance.now();
    await writeRows(deps.clickhouse, rows, token);
    deps.metrics?.insertTimed(label, (performance.now() - started) / 1000);
  };
  await retrying(write, 'writing to ClickHouse', served, deps, isRetryableInsertError);
}

/** Counts a written batch in its source's stats, its staged lines as the engine or the parser stored them. */
export function countWritten(batch: Prepared, stats: SourceStats): void {
  stats.read += batch.lines;
  const now = Date.now();
  const parsed = batch.staged?.parsed ?? null;
  for (const rows of parsed === null ? [batch.rows] : [batch.rows, parsed]) {
    stats.inserted += rows.access.length + rows.error.length;
    stats.rejected += rows.rejects.length;
    for (const { cause } of rows.rejects) stats.rejectedBy[cause] = (stats.rejectedBy[cause] ?? 0) + 1;
    for (const id of rows.access.domains) stats.lastStoredByDomain[id] = now;
    for (const { domainId } of rows.error) stats.lastStoredByDomain[domainId] = now;
  }
  if (batch.staged && parsed === null) {
    stats.inserted += batch.staged.length;
    stats.lastStoredByDomain[batch.staged.domainId] = now;
  }
}

/** Writes a batch until ClickHouse accepts it; a refusal of the data itself is thrown. */
export async function writeBatch(batch: Prepared, stats: SourceStats, deps: PipelineDeps): Promise<void> {
  const { staged } = batch;
  if (staged) {
    const parsed = (staged.parsed = await retrying(() => staged.write(), 'writing to ClickHouse', stats, deps, isRetryableInsertError));
    if (parsed !== null) await writeAccepted(parsed, `${batch.token}-parsed`, stats, stats.name, deps);
  }
  await writeAccepted(batch.rows, batch.token, stats, stats.name, deps);
  deps.log.debug({ source: stats.name, lines: batch.lines, token: batch.token }, 'batch written');
  countWritten(batch, stats);
}

/**
 * Drives `items` through prepare → write → commit, one batch written at a time, the next one
 * prepared meanwhile. Ends when the items end or the worker stops (the batch in hand is then
 * neither written nor committed: its source replays it). Any other error ends it with that error.
 */
export async function pump<T>(
  items: AsyncIterable<T>,
  steps: { prepare(item: T): Promise<Prepared>; commit(item: T, batch: Prepared): Promise<void> },
  stats: SourceStats,
  deps: PipelineDeps,
): Promise<void> {
  // The insert under way, and the chain of commits (each after its own insert and the previous
  // commit): a batch's checkpoint is written (an fsync) while the next batch is inserted, and
  // checkpoints still move in order and only past accepted batches.
  let writing: Promise<void> | null = null;
  let committed: Promise<void> = Promise.resolve();
  const commitFailures: unknown[] = [];
  try {
    for await (const item of items) {
      const batch = await steps.prepare(item);
      if (writing) await writing;
      // A commit that failed (a checkpoint not written) stops the source before more is inserted.
      if (commitFailures.length > 0) throw commitFailures[0];
      const inserted = writeBatch(batch, stats, deps);
      // Awaited later: a failure meanwhile is not an unhandled rejection.
      inserted.catch(() => {});
      writing = inserted;
      const previous = committed;
      committed = (async () => {
        await previous;
        await inserted;
        await steps.commit(item, batch);
      })();
      committed.catch((err: unknown) => commitFailures.push(err));
    }
    if (writing) await writing;
    await committed;
  } catch (err) {
    if (!(err instanceof Stopped)) throw err;
  } finally {
    // Stopped while preparing: the write under way still finishes (or stops) before the stores close.
    await writing?.catch(() => {});
    await committed.catch(() => {});
  }
}

/** A prepared chunk handed to a sink that writes chunks of many sources together (shared-batches.ts). */
export interface Submission extends BatchMember {
  prepared: Prepared;
  stats: SourceStats;
  /** Since when the chunk's lines have been waiting at the latest (LineChunk.waitingSince); absent: since it is submitted. */
  waitingSince?: number;
  /**
   * Moves the chunk's checkpoint (its follower's acknowledgement). Called once the insert holding
   * the chunk was accepted, with the other chunks of that insert in one checkpoint write: it must
   * make its change to the checkpoint store before it first awaits.
   */
  commit(): Promise<void>;
}

export interface BatchSink {
  /** Resolves once the insert holding the chunk was accepted and its checkpoint written. */
  submit(submission: Submission): Promise<void>;
  /** The caller can read nothing more until its chunks are written: write without waiting for more. */
  hurry(): void;
}

/**
 * Drives `items` through prepare → a shared sink, which writes and commits. Several chunks of the
 * source may wait in the sink at once, up to `window` (the source's own bound on unacknowledged
 * chunks); when the source reaches it, the sink is hurried. Ends when the items end or the worker
 * stops; the first error of a chunk ends it with that error.
 */
export async function pumpInto<T>(
  items: AsyncIterable<T>,
  steps: { prepare(item: T): Promise<Prepared>; submission(item: T, batch: Prepared): Submission },
  sink: BatchSink,
  window: number,
): Promise<void> {
  const iterator = items[Symbol.asyncIterator]();
  // The first chunk's error. It ends the source even while it waits for lines or room: the
  // iterator is ended (a follower closes), so the read it waits in returns. (Racing every read
  // against a promise of the failure instead kept each read's result alive as long as the source ran.)
  const failure: { happened: boolean; err: unknown } = { happened: false, err: undefined };
  const unsettled = new Set<Promise<void>>();
  const fail = (err: unknown) => {
    if (failure.happened) return;
    Object.assign(failure, { happened: true, err });
    void iterator.return?.();
  };
  try {
    for (;;) {
      const next = await iterator.next();
      if (failure.happened) throw failure.err;
      if (next.done) break;
      const batch = await steps.prepare(next.value);
      if (failure.happened) throw failure.err;
      const done = sink.submit(steps.submission(next.value, batch));
      unsettled.add(done);
      done.then(
        () => unsettled.delete(done),
        (err: unknown) => {
          unsettled.delete(done);
          fail(err);
        },
      );
      if (unsettled.size >= window) sink.hurry();
    }
    await Promise.all(unsettled);
  } catch (err) {
    if (!(err instanceof Stopped)) throw err;
  } finally {
    await Promise.allSettled(unsettled);
  }
}
