import type { ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Principal, Services } from '../context.js';
import { daysHoldingRows, rowSlices } from '../exports/stream.js';
import { resolveDomain } from '../domains/service.js';
import { pagination, type Pagination } from '../http/envelope.js';
import { timeQuery } from '../metrics/registry.js';
import { withReads } from '../reads/client.js';
import { accessFiltersSet, accessWhere, errorFiltersSet, errorWhere, type TimeRange } from './filters.js';
import { statusCountsQuery } from './hour-counts.js';
import { searchScope } from './search-fields.js';
import type { AccessListQuery, ErrorListQuery, RejectsListQuery, SearchBody } from './schemas.js';
import {
  countSearchMatches,
  listAccessEntries,
  listErrorEntries,
  listRejects,
  searchEntries,
  type AccessEntry,
  type ErrorEntry,
  type PageOf,
  type PageRequest,
  type RejectedLine,
  type SearchEntry,
  type SearchRequest,
} from './store.js';

type Deps = Pick<Services, 'db' | 'clickhouse' | 'reads' | 'metrics'>;

export interface LogPage<T> {
  logs: T[];
  pagination: Pagination;
}

const offsetOf = (q: { page: number; limit: number }) => (q.page - 1) * q.limit;

/** Access entries of a domain the caller sees (else 404), with `logs: read` (else 403). */
export async function listAccessLogs(deps: Deps, principal: Principal, domainId: number, query: AccessListQuery): Promise<LogPage<AccessEntry>> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const set = accessFiltersSet(query);
  const keyOnly = set.length === 0;
  // A status filter alone is counted per hour from the status codes each insert counted (hour-counts.ts).
  const statusOnly = set.length === 1 && set[0] === 'statusCode';
  const matchesByHour = statusOnly && query.statusCode ? (statusCountsQuery(domainId, query.statusCode, query) ?? undefined) : undefined;
  const rowsByHour = keyOnly ? { domainId, endDate: query.endDate } : undefined;
  const page = { offset: offsetOf(query), limit: query.limit, keyOnly, matchesByHour, rowsByHour };
  const { rows, total } = await timeQuery(deps.metrics, 'listing', () => withReads(deps, principal, 'listing', (clickhouse) => listAccessEntries(clickhouse, accessWhere(domainId, query), page)));
  return { logs: rows, pagination: pagination(query.page, query.limit, total) };
}

export async function listErrorLogs(deps: Deps, principal: Principal, domainId: number, query: ErrorListQuery): Promise<LogPage<ErrorEntry>> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const page = { offset: offsetOf(query), limit: query.limit, keyOnly: errorFiltersSet(query).length === 0 };
  const { rows, total } = await timeQuery(deps.metrics, 'listing', () => withReads(deps, principal, 'listing', (clickhouse) => listErrorEntries(clickhouse, errorWhere(domainId, query), page)));
  return { logs: rows, pagination: pagination(query.page, query.limit, total) };
}

/**
 * The lines of a domain the ingest could not store (does not parse, time out of range, too long),
 * newest first, so that its owner can fix its log_format: a domain the caller sees, with `logs: read`.
 * Lines routed by their host to no registered domain belong to none and are not listed here.
 */
export async function listRejectedLines(deps: Deps, principal: Principal, domainId: number, query: RejectsListQuery): Promise<{ rejects: RejectedLine[]; pagination: Pagination }> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const { rows, total } = await withReads(deps, principal, 'listing', (clickhouse) => listRejects(clickhouse, domainId, query, { offset: offsetOf(query), limit: query.limit }));
  return { rejects: rows, pagination: pagination(query.page, query.limit, total) };
}

/** Access and error entries whose searched fields contain `query`, case-insensitively; `endDate` defaults to now. */
export async function searchLogs(deps: Deps, principal: Principal, domainId: number, body: SearchBody, now = new Date()): Promise<LogPage<SearchEntry>> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const request = { domainId, query: body.query, fields: body.fields, startDate: body.startDate, endDate: body.endDate ?? now };
  const inPlace: InPlace = (read) => withReads(deps, principal, 'search', read);
  const { rows, total } = await timeQuery(deps.metrics, 'search', () => searchBySlices(inPlace, deps.reads.sliceRows, request, { offset: offsetOf(body), limit: body.limit }));
  return { logs: rows, pagination: pagination(body.page, body.limit, total) };
}

/** Runs `read` in a place of the fair queue of its own. */
type InPlace = <T>(read: (clickhouse: ClickHouseClient) => Promise<T>) => Promise<T>;

/**
 * A search's page and exact count, read in slices of whole UTC days (rowSlices: a day, or days
 * holding `sliceRows` rows together), newest first, each slice in a place of its own: between two
 * slices another user's dashboard reads, where one read of 30 days held it for the whole search
 * (bench/README, "bench/fair-reads"). Slices partition the range to the millisecond and the order
 * is the timestamp's, so the slices' matches in turn are the matches of one read in its order: the
 * page is the matches `offset` to `offset + limit` of that sequence, taken from the slices that
 * hold them; the slices before the page and after it only count. Each slice sees the rows stored
 * when it is read, as each statement of a request always did.
 */
async function searchBySlices(inPlace: InPlace, sliceRows: number, request: SearchRequest, page: PageRequest): Promise<PageOf<SearchEntry>> {
  const { scope, days } = await inPlace(async (clickhouse) => ({
    // Fields no row of the range can match are not searched, nor access rows where none can (search-fields.ts).
    scope: await searchScope(clickhouse, request),
    days: await daysHoldingRows(clickhouse, request.domainId, ['access', 'error'], request),
  }));
  const rows: SearchEntry[] = [];
  let total = 0;
  const slices = rowSlices(days, request, sliceRows);
  for (const [i, slice] of slices.entries()) {
    const part = { ...request, ...scope, ...slice, accessRanges: scope.accessRanges && clipped(scope.accessRanges, slice) };
    // The slice's matches newer than the page, and the page's rows still wanted.
    const skip = Math.max(0, page.offset - total);
    const wanted = page.limit - rows.length;
    total += await inPlace(async (clickhouse) => {
      if (wanted === 0) return countSearchMatches(clickhouse, part);
      // Counted first where the page may lie in a later slice: searchEntries would find no row
      // there and count again. The last slice is where the page is, if anywhere.
      if (skip > 0 && i < slices.length - 1) {
        const count = await countSearchMatches(clickhouse, part);
        if (count <= skip) return count;
      }
      const found = await searchEntries(clickhouse, part, { offset: skip, limit: wanted });
      rows.push(...found.rows);
      return found.total;
    });
  }
  return { rows, total };
}

/** Half-open ranges [from, to) of epoch ms cut to a range whose ends are both included. */
const clipped = (ranges: readonly [number, number][], range: Required<TimeRange>): [number, number][] =>
  ranges.flatMap(([from, to]): [number, number][] => {
    const start = Math.max(from, range.startDate.getTime());
    const end = Math.min(to, range.endDate.getTime() + 1);
    return start < end ? [[start, end]] : [];
  });
