/**
 * The ingest worker: every input of an ingest config (docs/reference/ingest.md) running at once, each file and
 * the syslog listener through its own pump (pipeline.ts), sharing the checkpoint store, the domain
 * directory and the id allocator. The files' chunks are written together, in shared batches
 * (shared-batches.ts): one insert a second or so, however many files are followed.
 * `tailhouse ingest` runs it alone; `serve` runs it beside the API when INGEST_CONFIG is set.
 *
 * A source that fails for good (ClickHouse refusing its data, a checkpoint that cannot be written)
 * stops alone and says so in the log and in its stats; the others go on.
 */
import { randomUUID } from 'node:crypto';
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import type { Db } from '../core/db/postgres.js';
import type { Logger } from '../core/log.js';
import { CheckpointStore, checkpointDir } from './checkpoints.js';
import type { FileSource, IngestConfig, SyslogConfig, SyslogRoute } from './config.js';
import { createDomainDirectory } from './domains.js';
import { startHealthReport, workerId } from './health-report.js';
import { createIdAllocator } from './ids.js';
import { compileAccessFormat, type AccessLineParser } from './parsers/access-format.js';
import { DEFAULT_BACKOFF, newStats, prepareChunk, pump, pumpInto, routingFor, withIds, type Backoff, type BatchSink, type IngestMetrics, type PipelineDeps, type Prepared, type SourceStats } from './pipeline.js';
import { dedupToken } from './sinks/clickhouse.js';
import { SharedBatches } from './shared-batches.js';
import { FileTail } from './sources/file-tail.js';
import { DEFAULT_CUT_LIMITS } from './sources/line-cutter.js';
import { listenSyslog, type SyslogEvent, type SyslogListener, type SyslogMessage } from './sources/syslog.js';
import type { LineChunk } from './types.js';
import { accessDecoder, decodeLines, emptyDecoded, errorDecoder, rejectRow, type Decoded, type Decoder, type LogKind, type RejectCause } from './transforms/rows.js';

export interface IngestWorkerOptions {
  db: Db;
  clickhouse: ClickHouseClient;
  log: Logger;
  /** Checkpoints live in DATA_DIR/ingest. */
  dataDir: string;
  /** How often the counters are logged (`ingest stats`); 0 turns it off. */
  statsIntervalMs: number;
  backoff?: Backoff;
  /** How long the files' chunks wait for others to share an insert with (INGEST_BATCH_MS). */
  batchDelayMs?: number;
  /** File follower tuning, for tests. */
  pollMs?: number;
  rotatedIdleMs?: number;
  metrics?: IngestMetrics;
  /** How often the sources are published for the API's ingest health (health-report.ts); for tests. */
  healthReportMs?: number;
}

/** INGEST_BATCH_MS's default: about one insert a second per table, and lines in ClickHouse within about 1.5 s. */
export const DEFAULT_BATCH_DELAY_MS = 1_000;
// A shared batch is flushed before its deadline once it holds this much: large enough to be cheap
// to merge, small enough that one insert block stays a few tens of megabytes.
const SHARED_BATCH_BYTES = 8 << 20;
// Chunks of one file that may wait unacknowledged: a batch being written, the next filling up.
const FILE_WINDOW = 6;

export interface IngestWorker {
  /** Counters per source. */
  stats(): SourceStats[];
  /** The bound syslog addresses (port 0 in the config picks a free port). */
  readonly syslog: Pick<SyslogListener, 'udpAddress' | 'tcpAddress'> | null;
  /** Stops reading, lets the batches being written finish, closes the files and listeners. */
  close(): Promise<void>;
}

/** Starts every input of `config`; a syslog address that cannot be bound fails the start. */
export async function startIngest(config: IngestConfig, options: IngestWorkerOptions): Promise<IngestWorker> {
  const log = options.log.child({ component: 'ingest' });
  const abort = new AbortController();
  const deps: PipelineDeps = {
    clickhouse: options.clickhouse,
    ids: createIdAllocator(options.db),
    domains: createDomainDirectory(options.db, { log }),
    log,
    backoff: options.backoff ?? DEFAULT_BACKOFF,
    signal: abort.signal,
    metrics: options.metrics,
  };
  const checkpoints = await CheckpointStore.open(checkpointDir(options.dataDir), log);
  const running: { stats: SourceStats; done: Promise<void>; close(): Promise<void>; files?: () => { lagBytes: number; openFiles: number } }[] = [];

  const listener = config.syslog ? await listenSyslog({ udp: config.syslog.udp, tcp: config.syslog.tcp, timezone: config.syslog.timezone }) : null;
  if (listener && config.syslog) {
    const stats = newStats(`syslog ${[listener.udpAddress && 'udp', listener.tcpAddress && 'tcp'].filter(Boolean).join('+')}`, [...new Set([...config.syslog.tags.values()].flatMap((r) => r.domain ?? []))]);
    const done = supervise(runSyslog(listener, config.syslog, stats, deps), stats, log);
    running.push({ stats, done, close: () => listener.close() });
  }
  const files = config.sources.flatMap((source) => (['access', 'error'] as const).flatMap((kind) => (source[kind] === null ? [] : [{ source, kind, file: source[kind] }])));
  const batchDelayMs = options.batchDelayMs ?? DEFAULT_BATCH_DELAY_MS;
  // A file's chunk waits in the shared batch anyway: reading a busy file more often than twice per
  // batch would only make more, smaller chunks (a thousand files, each written a line at a time,
  // made thousands a second), each with its own reads, parse, checkpoint entry and acknowledgement.
  // bench/follow-many: a quarter of the batch's delay kept a worker following 1,000 files at 1.0
  // core, half of it at 0.84, and a line waits at most half a second more.
  const gatherMs = Math.floor(batchDelayMs / 2);
  const tails = files.map(({ source, kind, file }) => new FileTail({ path: file, checkpoints, log, startAt: source.startAt, maxInFlight: FILE_WINDOW, pollMs: options.pollMs, gatherMs, rotatedIdleMs: options.rotatedIdleMs, framing: kind === 'error' ? 'error-log' : 'line' }));
  const shared = new SharedBatches(checkpoints, deps, { maxDelayMs: batchDelayMs, maxBytes: SHARED_BATCH_BYTES, sources: new Set(tails.map((t) => t.source)) });
  files.forEach(({ source, kind, file }, i) => {
    const tail = tails[i]!;
    const stats = newStats(`${kind} ${file}`, source.domain === null ? [] : [source.domain]);
    const done = supervise(runFile(tail, source, kind, shared, stats, deps), stats, log);
    running.push({ stats, done, close: () => tail.close(), files: () => tail.stats() });
  });
  log.info({ sources: running.map((r) => r.stats.name) }, 'ingest started');

  const snapshot = () =>
    running.map((r) => {
      if (r.files) {
        const { lagBytes, openFiles } = r.files();
        Object.assign(r.stats, { lagBytes, files: openFiles });
      }
      return { ...r.stats, rejectedBy: { ...r.stats.rejectedBy }, lastStoredByDomain: { ...r.stats.lastStoredByDomain } };
    });
  options.metrics?.followIngest(snapshot);
  const timer = options.statsIntervalMs > 0 ? setInterval(() => log.info({ sources: snapshot() }, 'ingest stats'), options.statsIntervalMs) : null;
  timer?.unref();
  const health = startHealthReport(options.db, log, workerId(checkpointDir(options.dataDir)), snapshot, options.healthReportMs);

  let closing: Promise<void> | null = null;
  return {
    stats: snapshot,
    syslog: listener ? { udpAddress: listener.udpAddress, tcpAddress: listener.tcpAddress } : null,
    close() {
      closing ??= (async () => {
        if (timer) clearInterval(timer);
        abort.abort();
        await shared.close();
        await Promise.all(running.map((r) => r.close()));
        await Promise.all(running.map((r) => r.done));
        await health.stop();
        log.info({ sources: snapshot() }, 'ingest stopped');
      })();
      return closing;
    },
  };
}

/** Records how a source ended; never rejects, so one source's failure leaves the others running. */
async function supervise(run: Promise<void>, stats: SourceStats, log: Logger): Promise<void> {
  try {
    await run;
    stats.state = 'stopped';
  } catch (err) {
    stats.state = 'failed';
    stats.lastError = err instanceof Error ? err.message : String(err);
    log.error({ source: stats.name, err: stats.lastError }, 'source stopped by an error that retrying cannot cure; the others go on');
  }
}

/** Parsers by format string: compiling one is a few hundred microseconds, and routes share them. */
const parsers = new Map<string, AccessLineParser>();
function accessParser(format: string): AccessLineParser {
  let parse = parsers.get(format);
  if (!parse) parsers.set(format, (parse = compileAccessFormat(format)));
  return parse;
}

function decoderOf(kind: LogKind, route: { format: string; timezone: string }): Decoder {
  return kind === 'access' ? accessDecoder(accessParser(route.format)) : errorDecoder(route.timezone);
}

async function runFile(tail: FileTail, source: FileSource, kind: LogKind, sink: BatchSink, stats: SourceStats, deps: PipelineDeps): Promise<void> {
  const input = { decoder: decoderOf(kind, source), domain: source.domain, maxLineBytes: DEFAULT_CUT_LIMITS.maxLineBytes };
  // The follower claims its files first (writes their checkpoints, reads nothing): a generation that
  // rotates away while the domain is still unregistered, or before a kill, is then known and read.
  await tail.start();
  // A source whose domain is not registered yet reads nothing until it is.
  await routingFor(source.domain, stats, deps);
  const steps = {
    prepare: (chunk: LineChunk) => prepareChunk(chunk, input, stats, deps),
    submission: (chunk: LineChunk, prepared: Prepared) => ({
      source: tail.source,
      identity: chunk.identity,
      start: chunk.startOffset,
      end: chunk.endOffset,
      waitingSince: chunk.waitingSince,
      prepared,
      stats,
      commit: () => tail.ack(chunk),
    }),
  };
  await pumpInto(tail, steps, sink, FILE_WINDOW);
}

/**
 * Syslog messages have no file and no offset to derive ids from: each run of the listener is a
 * source of its own (a random identity) and a message's offset is its number within the run. Ids
 * stay unique; a message sent twice (a relay's retry) is stored twice. See ingest/README.md for
 * what each transport guarantees.
 */
async function runSyslog(listener: SyslogListener, config: SyslogConfig, stats: SourceStats, deps: PipelineDeps): Promise<void> {
  const identity = `syslog-${randomUUID()}`;
  let sequence = 0;
  const prepare = async (events: SyslogEvent[]): Promise<Prepared> => {
    const start = sequence;
    sequence += events.length;
    // Logged here, once: decoding may run again (a domain deleted meanwhile, see withIds).
    for (const e of events) {
      if (e.kind === 'dropped') deps.log.warn({ source: stats.name, count: e.count, bytes: e.bytes }, 'syslog datagrams dropped: the buffer was full (UDP cannot push back)');
    }
    const rows = await withIds(() => decodeSyslog(events, start, identity, config, deps), identity, [start, sequence], stats, deps);
    return { rows, token: dedupToken(identity, start, sequence), lines: events.filter((e) => e.kind !== 'dropped').length };
  };
  stats.state = 'running';
  await pump(listener, { prepare, commit: async () => {} }, stats, deps);
}

async function decodeSyslog(events: SyslogEvent[], start: number, identity: string, config: SyslogConfig, deps: PipelineDeps): Promise<Decoded> {
  const decoded = emptyDecoded();
  const byTag = new Map<string, { route: SyslogRoute; lines: { text: string; offset: number }[] }>();
  events.forEach((event, i) => {
    const offset = start + i;
    if (event.kind === 'dropped') return;
    const rejectAs = (cause: RejectCause, reason: string, line: string) =>
      decoded.rejects.push(rejectRow({ source: `syslog ${event.transport} ${event.peer}`, identity }, 'access', null, offset, line, cause, reason));
    if (event.kind === 'malformed') return rejectAs('not_syslog', `not a syslog message: ${event.reason}`, event.raw);
    const route = config.tags.get(event.tag);
    if (!route) return rejectAs('unknown_syslog_tag', `unknown syslog tag ${JSON.stringify(event.tag)}: not in syslog.tags`, rawOf(event));
    let group = byTag.get(event.tag);
    if (!group) byTag.set(event.tag, (group = { route, lines: [] }));
    group.lines.push({ text: event.message, offset });
  });
  for (const [tag, { route, lines }] of byTag) {
    const origin = { source: `syslog tag ${tag}`, identity };
    if (route.domain !== null && deps.domains.idOf(route.domain) === undefined) await deps.domains.refresh(1_000);
    const domainId = route.domain === null ? null : deps.domains.idOf(route.domain);
    if (domainId === undefined) {
      // Datagrams cannot wait for the domain to be registered: they are kept as rejects.
      for (const line of lines) decoded.rejects.push(rejectRow(origin, route.type, null, line.offset, line.text, 'unknown_domain', `domain ${JSON.stringify(route.domain)} is not registered`));
      continue;
    }
    const routing = domainId === null ? { byHost: deps.domains } : { domainId };
    await decodeLines(decoded, lines, [], decoderOf(route.type, route), routing, origin, Infinity);
  }
  return decoded;
}

/** A message as it was received, for the rejects. */
function rawOf(m: SyslogMessage): string {
  return `${m.hostname === null ? '' : `${m.hostname} `}${m.tag}: ${m.message}`;
}
