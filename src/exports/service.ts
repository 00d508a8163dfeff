import { createHash, randomBytes } from 'node:crypto';
import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Db } from '../../core/db/postgres.js';
import { resolveDomain } from '../domains/service.js';
import { ApiError, invalidField } from '../http/errors.js';
import { withReads } from '../reads/client.js';
import { selectionOf, type ExportRequest } from './schemas.js';
import { deleteExpiredExports, findDownload, insertExport, lockExportQuota, recentExports, type ExportFormat } from './store.js';
import { daysHoldingRows, exportBytes, exportCountQuery, openExportBody, READER_PACE, rowSlices, SlowReaderError, type ClickhouseQuery, type ExportBodyEnd, type ExportPlan, type ReaderPace } from './stream.js';
import { MINUTE_MS, HOUR_MS, DAY_MS } from '../../core/durations.js';

export interface ExportLimits {
  /** Rows one export may hold, counted when it is created (the stream itself needs no bound). */
  maxRows: number;
  /** Exports one user may create per hour (429 with Retry-After beyond). */
  perUserPerHour: number;
  /** Downloads streaming at once in this process (429 with Retry-After beyond). */
  concurrentDownloads: number;
  /**
   * Downloads of one user's exports streaming at once in this process (429 with Retry-After
   * beyond), fewer than `concurrentDownloads`: one user never holds every slot. A link needs no
   * bearer, so a download counts against the export's creator, whoever fetches it.
   */
  concurrentDownloadsPerUser: number;
  /** The slowest a reader may take a download before it is cut (see ReaderPace). */
  readerPace: ReaderPace;
  /** How long an expired record is kept, so that its link answers 410 rather than 404. */
  keepExpiredMs: number;
}

export const EXPORT_LIMITS: ExportLimits = {
  maxRows: 50_000_000,
  perUserPerHour: 30,
  concurrentDownloads: 4,
  concurrentDownloadsPerUser: 2,
  readerPace: READER_PACE,
  keepExpiredMs: 7 * DAY_MS,
};

const SWEEP_EVERY_MS = 10 * MINUTE_MS;

type CreateDeps = Pick<Services, 'db' | 'clickhouse' | 'reads' | 'config' | 'log'>;
type DownloadDeps = Pick<Services, 'db' | 'clickhouse' | 'log' | 'metrics'>;

export interface ExportResult {
  downloadUrl: string;
  expiresAt: string;
}

const EXTENSIONS: Record<ExportFormat, string> = { csv: 'csv', json: 'ndjson' };
const CONTENT_TYPES: Record<ExportFormat, string> = { csv: 'text/csv; charset=utf-8; header=present', json: 'application/x-ndjson; charset=utf-8' };
const FORMAT_NAMES: Record<ExportFormat, string> = { csv: 'CSV', json: 'NDJSON' };

/** `<token>.<ext>`: 32 random bytes in base64url (43 characters), then the format's extension. */
const FILE_NAME = /^([A-Za-z0-9_-]{43})\.(csv|ndjson)$/;

const hashToken = (token: string) => createHash('sha256').update(token).digest('hex');

const downloadNotFound = () => new ApiError(404, 'Download not found');
const downloadExpired = () => new ApiError(410, 'Download link expired');
const tooMany = (message: string, retryAfterS: number) => new ApiError(429, message, undefined, { 'Retry-After': String(Math.max(1, Math.ceil(retryAfterS))) });

async function countRows(clickhouse: ClickHouseClient, query: ClickhouseQuery): Promise<number> {
  const [row] = await selectRows<{ n: string | number }>(clickhouse, query.sql, query.params);
  return Number(row?.n ?? 0);
}

/**
 * Creates an export: checks the domain (404 unless visible, 403 without `logs: read`), fixes
 * `endDate` (default now), holds the user to the hourly limit and the size limit, stores the
 * record with the hash of a new random token, records `export.create`, and answers the link.
 */
export async function createExport(
  deps: CreateDeps,
  principal: Principal,
  domainId: number,
  body: ExportRequest,
  client: ClientInfo,
  options: { limits?: ExportLimits; now?: Date } = {},
): Promise<ExportResult> {
  const limits = options.limits ?? EXPORT_LIMITS;
  const now = options.now ?? new Date();
  const domain = await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const endDate = body.endDate ?? now;
  if (endDate < body.startDate) throw invalidField('startDate', 'must not be after endDate, which defaults to now');

  const userId = principal.user.id;
  const since = new Date(now.getTime() - HOUR_MS);
  const overQuota = (recent: { count: number; oldest: Date | null }) => {
    if (recent.count < limits.perUserPerHour) return null;
    const freeAt = (recent.oldest ?? now).getTime() + HOUR_MS;
    return tooMany(`Too many exports: at most ${limits.perUserPerHour} an hour`, (freeAt - now.getTime()) / 1000);
  };
  // A first look, so that a user over the limit costs no ClickHouse count; what decides is the
  // count taken again under the user's lock, right before the insert.
  const early = overQuota(await recentExports(deps.db, userId, since));
  if (early) throw early;

  const range = { startDate: body.startDate, endDate };
  // A slice of days at a time, each in a place of its own, so that another user's dashboard reads between two (src/reads/scheduler.ts).
  const days = await withReads(deps, principal, 'export', (clickhouse) => daysHoldingRows(clickhouse, domain.id, [body.selection.type], range));
  let rows = 0;
  for (const slice of rowSlices(days, range, deps.reads.sliceRows)) {
    rows += await withReads(deps, principal, 'export', (clickhouse) => countRows(clickhouse, exportCountQuery(domain.id, body.selection, slice)));
  }
  if (rows > limits.maxRows) {
    throw invalidField('startDate', `the export would hold ${rows} entries, more than the limit of ${limits.maxRows}: narrow the date range or the filters`);
  }

  const token = randomBytes(32).toString('base64url');
  // Count, insert and activity in one short transaction under the user's lock: concurrent
  // creations of one user (any process) are counted one after the other, so none overshoots.
  const record = await deps.db.transaction(async (tx) => {
    await lockExportQuota(tx, userId);
    const refusal = overQuota(await recentExports(tx, userId, since));
    if (refusal) throw refusal;
    const inserted = await insertExport(tx, {
      domainId: domain.id,
      userId,
      type: body.type,
      format: body.format,
      filters: body.filters,
      startDate: body.startDate,
      endDate,
      tokenHash: hashToken(token),
      expiresAt: new Date(now.getTime() + deps.config.exportTtlS * 1000),
    });
    await recordActivity(
      tx,
      {
        userId,
        action: 'export.create',
        resource: `domains/${domain.id}/exports/${inserted.id}`,
        details: `Exported ${rows} ${body.type} log entries of ${domain.name} as ${FORMAT_NAMES[body.format]} (${body.startDate.toISOString()} to ${endDate.toISOString()})`,
      },
      client,
    );
    return inserted;
  });
  await sweepNowAndThen(deps, now, limits);
  return {
    downloadUrl: `${deps.config.baseUrl}/api/downloads/${token}.${EXTENSIONS[body.format]}`,
    expiresAt: new Date(record.expires_at).toISOString(),
  };
}

/** Deletes the records that expired more than `keepExpiredMs` before `now`; returns how many. */
export function sweepExpiredExports(db: Db, now = new Date(), limits: Pick<ExportLimits, 'keepExpiredMs'> = EXPORT_LIMITS): Promise<number> {
  return deleteExpiredExports(db, new Date(now.getTime() - limits.keepExpiredMs));
}

let lastSweep = 0;
/** The sweep rides on export creation, at most every 10 minutes per process: no timer to own. */
async function sweepNowAndThen(deps: Pick<Services, 'db' | 'log'>, now: Date, limits: ExportLimits): Promise<void> {
  if (now.getTime() - lastSweep < SWEEP_EVERY_MS) return;
  lastSweep = now.getTime();
  try {
    const removed = await sweepExpiredExports(deps.db, now, limits);
    if (removed > 0) deps.log.info({ removed }, 'expired exports removed');
  } catch (err) {
    deps.log.warn({ err }, 'sweep of expired exports failed');
  }
}

export interface Download {
  /** For Content-Disposition: `<domain>-<type>-<created, compact UTC>.<ext>`. */
  filename: string;
  contentType: string;
  /** Null for `headOnly`: the checks were made, no query ran. */
  stream: ReadableStream<Uint8Array> | null;
}

let activeDownloads = 0;
/** Downloads streaming in this process right now, by the user whose export they are. */
const activeByUser = new Map<number, number>();

/** Downloads streaming in this process right now. */
export const downloadsInProgress = () => activeDownloads;

/**
 * Takes a download slot of the process for an export of `userId`, or refuses with 429 when the
 * process's slots or the user's share of them are all taken; returns the slot's release.
 */
function takeDownloadSlot(userId: number, limits: ExportLimits): () => void {
  if (activeDownloads >= limits.concurrentDownloads) throw tooMany('Too many downloads in progress; try again shortly', 5);
  const ofUser = activeByUser.get(userId) ?? 0;
  if (ofUser >= limits.concurrentDownloadsPerUser) {
    throw tooMany(`Too many downloads of this user's exports in progress (at most ${limits.concurrentDownloadsPerUser} at once); try again when one ends`, 5);
  }
  activeDownloads++;
  activeByUser.set(userId, ofUser + 1);
  return () => {
    activeDownloads--;
    const left = (activeByUser.get(userId) ?? 1) - 1;
    if (left > 0) activeByUser.set(userId, left);
    else activeByUser.delete(userId);
  };
}

/**
 * Opens the download behind a file name: 404 when the name is malformed, unknown, of another
 * format, or its creator may no longer read the domain's logs; 410 once it has expired. The
 * query runs now, with the filters and range fixed at creation, and streams as it is read.
 */
export async function openDownload(deps: DownloadDeps, file: string, options: { limits?: ExportLimits; now?: Date; headOnly?: boolean } = {}): Promise<Download> {
  const limits = options.limits ?? EXPORT_LIMITS;
  const now = options.now ?? new Date();
  const match = FILE_NAME.exec(file);
  if (!match) throw downloadNotFound();
  const record = await findDownload(deps.db, hashToken(match[1]!));
  if (!record || EXTENSIONS[record.format] !== match[2] || !record.allowed) throw downloadNotFound();
  if (new Date(record.expires_at).getTime() <= now.getTime()) throw downloadExpired();
  const stamp = new Date(record.created_at).toISOString().replace(/[-:]/g, '').replace(/\.\d+Z$/, 'Z');
  const head = { filename: `${record.domain_name}-${record.type}-${stamp}.${EXTENSIONS[record.format]}`, contentType: CONTENT_TYPES[record.format] };
  if (options.headOnly) return { ...head, stream: null };
  const freeSlot = takeDownloadSlot(record.user_id, limits);

  const started = performance.now();
  const log = deps.log.child({ exportId: record.id, domainId: record.domain_id, userId: record.user_id });
  let released = false;
  const release = (result: ExportBodyEnd) => {
    if (released) return;
    released = true;
    freeSlot();
    const ms = Math.round(performance.now() - started);
    // An export's ClickHouse read is its whole stream: it runs as the reader reads.
    deps.metrics?.queryTimed('export', ms / 1000);
    if (result.error === undefined) log.info({ bytes: result.bytes, ms }, 'export downloaded');
    else if (result.error instanceof SlowReaderError) log.warn({ reason: 'slow reader', error: result.error.message, bytes: result.bytes, ms }, 'export download cut');
    else log.warn({ err: result.error, bytes: result.bytes, ms }, 'export download failed');
  };
  try {
    const plan: ExportPlan = {
      domainId: record.domain_id,
      selection: selectionOf(record.type, record.filters),
      range: { startDate: new Date(record.start_date), endDate: new Date(record.end_date) },
      format: record.format,
    };
    const stream = await openExportBody((signal) => exportBytes(deps.clickhouse, plan, signal), record.type, record.format, release, limits.readerPace);
    return { ...head, stream };
  } catch (err) {
    release({ bytes: 0, error: err });
    throw err;
  }
}
