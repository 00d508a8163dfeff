/**
 * `tailhouse import FILE… --domain NAME`: backfills finished logs (rotated, archived, `.gz`) through
 * the same pipeline as the live worker. Idempotent: a file's progress is checkpointed under an
 * identity made of the import's domain and kind and the file's first line, so importing it again
 * (or its compressed copy) resumes where the last run ended, which for a finished file is its end;
 * a run interrupted by a crash resumes at its checkpoint, and ClickHouse deduplicates the batch
 * that was in flight.
 */
import { DAY_MS } from '../core/durations.js';
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import type { Db } from '../core/db/postgres.js';
import type { Logger } from '../core/log.js';
import { CheckpointStore, checkpointDir } from './checkpoints.js';
import { createDomainDirectory } from './domains.js';
import { createIdAllocator } from './ids.js';
import { compileAccessFormat } from './parsers/access-format.js';
import { DEFAULT_BACKOFF, newStats, prepareChunk, pump, type Backoff, type PipelineDeps } from './pipeline.js';
import { openFileRead } from './sources/file-read.js';
import { DEFAULT_CUT_LIMITS, linesIn, type CutLimits } from './sources/line-cutter.js';
import { openStagedWriter, type StagedWriter } from './sinks/clickhouse-staged.js';
import { prepareStagedChunk } from './staged-chunks.js';
import { accessDecoder, entriesOlderThan, errorDecoder, type LogKind } from './transforms/rows.js';
import { stagedReadingOf } from './transforms/staged-rows.js';
import { userAgentClasses } from './transforms/user-agent.js';

export interface ImportOptions {
  /** The registered domain of every line, or null to route each access line by its `$host`. */
  domain: string | null;
  type: LogKind;
  /** Access logs: `combined`, `main` or a log_format string. */
  format: string;
  /** Error logs: the zone of their times. */
  timezone: string;
  limits?: CutLimits;
  /**
   * Access lines of one domain in a format transforms/staged-rows.ts reads are parsed by ClickHouse
   * (default); false: every line by the JavaScript parser.
   */
  parseInEngine?: boolean;
}

export interface ImportDeps {
  db: Db;
  clickhouse: ClickHouseClient;
  log: Logger;
  dataDir: string;
  signal: AbortSignal;
  /** LOG_RETENTION_DAYS: older entries are dropped by the tables' TTL as soon as they land. */
  retentionDays: number;
  backoff?: Backoff;
  /** Progress: bytes read from disk of all files so far, and lines imported. */
  onProgress?: (diskBytes: number, lines: number) => void;
}

export interface FileSummary {
  path: string;
  compressed: boolean;
  /** Lines read this run (entries and rejects). */
  lines: number;
  inserted: number;
  rejected: number;
  /** Bytes (uncompressed) an earlier import already took: this run started after them. */
  skippedBytes: number;
  /** Bytes after the last complete line: not imported. */
  trailingBytes: number;
  /** Entries stored that are older than the retention: the TTL removes them at once. */
  expired: number;
}

export interface ImportSummary {
  files: FileSummary[];
  lines: number;
  inserted: number;
  rejected: number;
  elapsedMs: number;
  /** Stopped before the end (SIGINT): a new run continues. */
  interrupted: boolean;
}

export class ImportError extends Error {}

/**
 * Chunks of a staged import: larger than the parser's batches, since each is a statement that
 * pays for its parallel parse's start; its rows still reach the table as one block (below the
 * engine's min_insert_block_size_rows and _bytes).
 */
export const STAGED_CUT_LIMITS: Omit<CutLimits, 'maxLineBytes'> = { chunkMaxLines: 200_000, chunkMaxBytes: 48 * 1024 * 1024 };

export async function importFiles(files: string[], options: ImportOptions, deps: ImportDeps): Promise<ImportSummary> {
  const started = performance.now();
  const log = deps.log.child({ component: 'import' });
  const domains = createDomainDirectory(deps.db, { log });
  await domains.refresh();
  if (options.domain !== null && domains.idOf(options.domain) === undefined) {
    throw new ImportError(`domain ${options.domain} is not registered: add it first (tailhouse domains add ${options.domain})`);
  }
  const decoder = options.type === 'access' ? accessDecoder(compileAccessFormat(options.format)) : errorDecoder(options.timezone);
  if (options.domain === null && decoder.kind === 'access' && !decoder.parse.hasHost) {
    throw new ImportError('the format has no $host or $server_name to route lines by: give --domain');
  }
  const pipeline: PipelineDeps = { clickhouse: deps.clickhouse, ids: createIdAllocator(deps.db), domains, log, backoff: deps.backoff ?? DEFAULT_BACKOFF, signal: deps.signal };
  const checkpoints = await CheckpointStore.open(checkpointDir(deps.dataDir), log);
  const reading = decoder.kind === 'access' && options.domain !== null && options.parseInEngine !== false ? stagedReadingOf(decoder.parse.shape) : null;
  const limits = options.limits ?? (reading === null ? DEFAULT_CUT_LIMITS : { ...DEFAULT_CUT_LIMITS, ...STAGED_CUT_LIMITS });
  const input = { decoder, route: { domain: options.domain }, maxLineBytes: limits.maxLineBytes };
  const source = `import ${options.type} ${options.domain ?? '$host'}`;
  const retainedFrom = Date.now() - deps.retentionDays * DAY_MS;
  const writer: StagedWriter | null = reading === null ? null : await openStagedWriter(deps.clickhouse, reading);
  const staged = reading === null || writer === null ? null : { ...input, reading, writer, classes: userAgentClasses, classified: new Set<string>(), retainedFromMs: retainedFrom };
  try {
    const summaries: FileSummary[] = [];
    let diskBytes = 0;
    let lines = 0;
    for (const file of files) {
      if (deps.signal.aborted) break;
      const read = await openFileRead({ path: file, source, checkpoints, limits, framing: decoder.kind === 'error' ? 'error-log' : staged === null ? 'line' : 'line-bytes', onDiskBytes: (n) => deps.onProgress?.((diskBytes += n), lines) });
      const stats = newStats(`${options.type} ${file}`);
      let expired = 0;
      await pump(
        read,
        {
          prepare: (chunk) => (staged === null ? prepareChunk(chunk, input, stats, pipeline) : prepareStagedChunk(chunk, staged, stats, pipeline)),
          commit: async (chunk, batch) => {
            await read.ack(chunk);
            expired += entriesOlderThan(batch.rows, retainedFrom) + (batch.staged?.parsed ? entriesOlderThan(batch.staged.parsed, retainedFrom) : 0);
            lines += linesIn(chunk);
            deps.onProgress?.(diskBytes, lines);
          },
        },
        stats,
        pipeline,
      );
      const summary: FileSummary = {
        path: file,
        compressed: read.compressed,
        lines: stats.read,
        inserted: stats.inserted,
        rejected: stats.rejected,
        skippedBytes: read.resumeAt,
        trailingBytes: read.trailingBytes(),
        expired,
      };
      summaries.push(summary);
      log.info(summary, 'file imported');
      if (expired > 0) log.warn({ path: file, entries: expired, retentionDays: deps.retentionDays }, 'entries older than the retention were dropped by it at once');
      if (summary.trailingBytes > 0 && !deps.signal.aborted) {
        log.warn({ path: file, bytes: summary.trailingBytes }, 'the file ends without a newline: its last line was not imported');
      }
    }
    const total = (key: 'lines' | 'inserted' | 'rejected') => summaries.reduce((n, s) => n + s[key], 0);
    return {
      files: summaries,
      lines: total('lines'),
      inserted: total('inserted'),
      rejected: total('rejected'),
      elapsedMs: performance.now() - started,
      interrupted: deps.signal.aborted,
    };
  } finally {
    await writer?.close().catch((err: unknown) => log.warn({ err: String(err) }, 'the table of user agent classes was not dropped: the next import drops it'));
  }
}
