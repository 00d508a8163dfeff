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
import { HOUR_MS } from '../core/durations.js';
import { randomUUID } from 'node:crypto';
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import type { Db } from '../core/db/postgres.js';
import type { Logger } from '../core/log.js';
import { CheckpointStore, checkpointDir } from './checkpoints.js';
import type { FileSource, IngestConfig, StartAt, SyslogConfig, SyslogRoute } from './config.js';
import { ConfigError } from '../core/config.js';
import { userIdByEmail } from './domain-store.js';
import { createDomainDirectory } from './domains.js';
import { startHealthReport, workerId } from './health-report.js';
import { createIdAllocator } from './ids.js';
import { compileAccessFormat, type AccessLineParser } from './parsers/access-format.js';
import { DEFAULT_BACKOFF, newStats, prepareChunk, pump, pumpInto, routingFor, withIds, type Backoff, type BatchSink, type FileRoute, type IngestMetrics, type PipelineDeps, type Prepared, type SourceStats } from './pipeline.js';
import { dedupToken } from './sinks/clickhouse.js';
import { SharedBatches } from './shared-batches.js';
import { compileFilePattern, isPattern, PatternWatch, pruneLetGo, type FilePattern, type PatternMatch } from './sources/file-pattern.js';
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
  await checkOwners(config, options.db);
  const checkpoints = await CheckpointStore.open(checkpointDir(options.dataDir), log);
  /** The syslog listener; followed files are in `followed` below. */
  const running: { stats: SourceStats; done: Promise<void>; close(): Promise<void> }[] = [];

  const listener = config.syslog ? await listenSyslog({ udp: config.syslog.udp, tcp: config.syslog.tcp, timezone: config.syslog.timezone }) : null;
  if (listener && config.syslog) {
    const stats = newStats(`syslog ${[listener.udpAddress && 'udp', listener.tcpAddress && 'tcp'].filter(Boolean).join('+')}`, [...new Set([...config.syslog.tags.values()].flatMap((r) => r.domain ?? []))]);
    const done = supervise(runSyslog(listener, config.syslog, stats, deps), stats, log);
    running.push({ stats, done, close: () => listener.close() });
  }
  const batchDelayMs = options.batchDelayMs ?? DEFAULT_BATCH_DELAY_MS;
  // A file's chunk waits in the shared batch anyway: reading a busy file more often than twice per
  // batch would only make more, smaller chunks (a thousand files, each written a line at a time,
  // made thousands a second), each with its own reads, parse, checkpoint entry and acknowledgement.
  // bench/follow-many: a quarter of the batch's delay kept a worker following 1,000 files at 1.0
  // core, half of it at 0.84, and a line waits at most half a second more.
  const gatherMs = Math.floor(batchDelayMs / 2);
  const patterns = await Promise.all(config.sources.flatMap((source) => (['access', 'error'] as const).flatMap((kind) => {
    const file = source[kind];
    return file !== null && isPattern(file) ? [openPattern(source, kind, file, checkpoints, log)] : [];
  })));
  const fixed = config.sources.flatMap((source) => (['access', 'error'] as const).flatMap((kind): FileInput[] => {
    const file = source[kind];
    return file === null || isPattern(file) ? [] : [{ kind, path: file, source, pattern: null, route: { domain: source.domain }, startAt: source.startAt }];
  }));
  const initial = [...fixed, ...patterns.flatMap((p) => p.initial)];
  /** Followed path → its follower; a path two sources match is followed by the first. */
  const followed = new Map<string, { input: FileInput; tail: FileTail; stats: SourceStats; done: Promise<void> }>();
  const shared = new SharedBatches(checkpoints, deps, { maxDelayMs: batchDelayMs, maxBytes: SHARED_BATCH_BYTES, sources: new Set(initial.map((f) => f.path)) });
  const follow = (input: FileInput) => {
    if (followed.has(input.path)) return;
    const tail = new FileTail({ path: input.path, checkpoints, log, startAt: input.startAt, maxInFlight: FILE_WINDOW, pollMs: options.pollMs, gatherMs, rotatedIdleMs: options.rotatedIdleMs, framing: input.kind === 'error' ? 'error-log' : 'line' });
    const stats = newStats(`${input.kind} ${input.path}`, 'domain' in input.route && input.route.domain !== null ? [input.route.domain] : []);
    const done = supervise(runFile(tail, input, shared, stats, deps), stats, log);
    followed.set(input.path, { input, tail, stats, done });
  };
  for (const input of initial) follow(input);
  for (const pattern of patterns) {
    pattern.watch.start({
      added: (match) => {
        const input = pattern.inputOf(match, 'beginning');
        if (followed.has(input.path)) return;
        log.info({ path: input.path, route: input.route }, 'following a new file the pattern matches');
        follow(input);
      },
      // A removed file is read to its end (the follower keeps it open) before it is let go.
      gone: async (path) => {
        const f = followed.get(path);
        if (!f || f.input.pattern !== pattern.watch.pattern.pattern) return true;
        const { openFiles, inFlight } = f.tail.stats();
        if (openFiles > 0 || inFlight > 0) return false;
        // Not waited for: a file that went before its domain was registered has a run still waiting for it (until the stop).
        await f.tail.close();
        if (followed.get(path) === f) followed.delete(path);
        log.info({ path, source: f.stats.name }, 'the file is gone and was read to its end: no longer followed');
        return true;
      },
    });
  }
  log.info({ files: followed.size, syslog: running.length > 0, patterns: patterns.map((p) => p.watch.pattern.pattern) }, 'ingest started');
  const pruning = patterns.length > 0 ? startPruningLetGo(checkpoints, patterns.map((p) => p.watch.pattern), () => new Set([...followed.values()].map((f) => f.tail.source)), log) : null;

  const snapshot = () => [
    ...running.map((r) => copyOf(r.stats)),
    ...[...followed.values()].map((f) => {
      const { lagBytes, openFiles } = f.tail.stats();
      return { ...copyOf(f.stats), lagBytes, files: openFiles };
    }),
  ];
  options.metrics?.followIngest(snapshot);
  const statsLine = statsLineWriter();
  const timer = options.statsIntervalMs > 0 ? setInterval(() => log.info(statsLine(snapshot()), 'ingest stats'), options.statsIntervalMs) : null;
  timer?.unref();
  const health = startHealthReport(options.db, log, workerId(checkpointDir(options.dataDir)), snapshot, options.healthReportMs);

  let closing: Promise<void> | null = null;
  return {
    stats: snapshot,
    syslog: listener ? { udpAddress: listener.udpAddress, tcpAddress: listener.tcpAddress } : null,
    close() {
      closing ??= (async () => {
        if (timer) clearInterval(timer);
        await pruning?.stop();
        abort.abort();
        await Promise.all(patterns.map((p) => p.watch.stop()));
        await shared.close();
        const all = [...running, ...[...followed.values()].map((f) => ({ close: () => f.tail.close(), done: f.done }))];
        await Promise.all(all.map((r) => r.close()));
        await Promise.all(all.map((r) => r.done));
        // The last batch's checkpoints and the removal of its manifest go to disk in a write its
        // writer does not wait for (shared-batches.ts `settle`), and `ingest` exits as soon as this
        // resolves (stopOnSignals): without this, a clean stop could leave a batch to replay. A
        // write that fails here (its sources failed on it already) leaves that replay, which is safe.
        await checkpoints.flush().catch((err: unknown) =>
          log.warn({ err: err instanceof Error ? err.message : String(err) }, 'checkpoints not written at the stop: the next start replays the batches since the last write (ClickHouse deduplicates them)'),
        );
        await health.stop();
        log.info(statsLineWriter()(snapshot()), 'ingest stopped');
      })();
      return closing;
    },
  };
}

/** How often, and after how long unchanged, the checkpoints of files patterns let go are pruned. */
const PRUNE_LET_GO_MS = HOUR_MS;
const LET_GO_UNCHANGED_MS = 24 * HOUR_MS;

/** pruneLetGo at the start and every PRUNE_LET_GO_MS; `stop` waits for a sweep under way. */
function startPruningLetGo(checkpoints: CheckpointStore, patterns: FilePattern[], followedSources: () => ReadonlySet<string>, log: Logger): { stop(): Promise<void> } {
  let sweeping: Promise<unknown> = Promise.resolve();
  const sweep = () => {
    sweeping = pruneLetGo(checkpoints, patterns, followedSources(), LET_GO_UNCHANGED_MS).catch((err: unknown) =>
      log.warn({ err: err instanceof Error ? err.message : String(err) }, 'pruning the checkpoints of files no longer followed failed: trying again later'),
    );
  };
  sweep();
  const timer = setInterval(sweep, PRUNE_LET_GO_MS);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await sweeping;
    },
  };
}

/** A source's `register.owner` must be a user: the worker does not start otherwise. */
async function checkOwners(config: IngestConfig, db: Db): Promise<void> {
  const problems: string[] = [];
  for (const [i, source] of config.sources.entries()) {
    if (source.register && (await userIdByEmail(db, source.register.owner)) === undefined) {
      problems.push(`ingest config ${config.path}: sources[${i}].register.owner: ${source.register.owner} is no user (tailhouse users create --email ${source.register.owner})`);
    }
  }
  if (problems.length > 0) throw new ConfigError(problems);
}

/** A source's counters as they are now, for the log, the metrics and the health report. */
/**
 * The `ingest stats` log line: totals over every source, and the sources whose counters changed
 * since the previous line (all of them in the first), without their domains. At 1,000 followed
 * files a line with every source and its domains took 304 KiB a minute; the per-domain figures are
 * in the health reports and /metrics.
 */
export function statsLineWriter(): (sources: readonly SourceStats[]) => { totals: Record<string, number>; sources: Omit<SourceStats, 'domains' | 'lastStoredByDomain'>[] } {
  const logged = new Map<string, string>();
  return (sources) => {
    const totals = { sources: sources.length, running: 0, read: 0, inserted: 0, rejected: 0, lagBytes: 0 };
    const changed: Omit<SourceStats, 'domains' | 'lastStoredByDomain'>[] = [];
    for (const { domains: _domains, lastStoredByDomain: _last, ...counters } of sources) {
      if (counters.state === 'running') totals.running++;
      totals.read += counters.read;
      totals.inserted += counters.inserted;
      totals.rejected += counters.rejected;
      totals.lagBytes += counters.lagBytes;
      const json = JSON.stringify(counters);
      if (logged.get(counters.name) === json) continue;
      logged.set(counters.name, json);
      changed.push(counters);
    }
    // Files let go are no longer sources: forget them, or the map grows with every removed file.
    if (logged.size > sources.length) {
      const current = new Set(sources.map((source) => source.name));
      for (const name of logged.keys()) if (!current.has(name)) logged.delete(name);
    }
    return { totals, sources: changed };
  };
}

const copyOf = (stats: SourceStats): SourceStats => ({ ...stats, rejectedBy: { ...stats.rejectedBy }, lastStoredByDomain: { ...stats.lastStoredByDomain } });

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

/** One file to follow: a source's file, or a file one of its patterns matched. */
interface FileInput {
  kind: LogKind;
  path: string;
  source: FileSource;
  /** The pattern that matched it; null for a file the config names. */
  pattern: string | null;
  route: FileRoute;
  /** Where the file starts when it has no checkpoint. */
  startAt: StartAt;
}

/**
 * A source's pattern, scanned once: the files it matches now, and its watch for those that come and
 * go. `startAt` applies to the files found at the pattern's first start only: a file that appears
 * later (while running, or while the worker was stopped) is a new virtual host, read from its
 * beginning. The pattern's first start is recorded in the checkpoint store once it has begun.
 */
async function openPattern(source: FileSource, kind: LogKind, file: string, checkpoints: CheckpointStore, log: Logger) {
  const watch = new PatternWatch(compileFilePattern(file), log);
  const inputOf = (match: PatternMatch, startAt: StartAt): FileInput => ({
    kind,
    path: match.path,
    source,
    pattern: file,
    route: match.invalid !== null ? { rejected: match.invalid } : { domain: match.domain ?? source.domain, register: source.register?.owner ?? null },
    startAt,
  });
  const key = `pattern ${kind} ${file}`;
  const firstStart = checkpoints.knownUntil(key) === undefined;
  const startedAt = Date.now();
  const { matches } = await watch.scan();
  checkpoints.noteKnownUntil(key, startedAt);
  await checkpoints.flush();
  return { watch, inputOf, initial: matches.map((m) => inputOf(m, firstStart ? source.startAt : 'beginning')) };
}

async function runFile(tail: FileTail, file: FileInput, sink: BatchSink, stats: SourceStats, deps: PipelineDeps): Promise<void> {
  const input = { decoder: decoderOf(file.kind, file.source), route: file.route, maxLineBytes: DEFAULT_CUT_LIMITS.maxLineBytes };
  // The follower claims its files first (writes their checkpoints, reads nothing): a generation that
  // rotates away while the domain is still unregistered, or before a kill, is then known and read.
  await tail.start();
  // A source whose domain is not registered yet reads nothing until it is (or registers it).
  await routingFor(file.route, stats, deps);
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
