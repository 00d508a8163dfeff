import type { Principal, Services } from '../context.js';
import { resolveDomain } from '../domains/service.js';
import { pagination, type Pagination } from '../http/envelope.js';
import { timeQuery } from '../metrics/registry.js';
import { withReads } from '../reads/client.js';
import { accessFiltersSet, accessWhere, errorFiltersSet, errorWhere } from './filters.js';
import { statusCountsQuery } from './hour-counts.js';
import { searchScope } from './search-fields.js';
import type { AccessListQuery, ErrorListQuery, SearchBody } from './schemas.js';
import { listAccessEntries, listErrorEntries, searchEntries, type AccessEntry, type ErrorEntry, type SearchEntry } from './store.js';

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

/** Access and error entries whose searched fields contain `query`, case-insensitively; `endDate` defaults to now. */
export async function searchLogs(deps: Deps, principal: Principal, domainId: number, body: SearchBody, now = new Date()): Promise<LogPage<SearchEntry>> {
  await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  const request = { domainId, query: body.query, fields: body.fields, startDate: body.startDate, endDate: body.endDate ?? now };
  const { rows, total } = await timeQuery(deps.metrics, 'search', () =>
    withReads(deps, principal, 'search', async (clickhouse) => {
      // Fields no row of the range can match are not searched, nor access rows where none can (search-fields.ts).
      const scope = await searchScope(clickhouse, request);
      return searchEntries(clickhouse, { ...request, ...scope }, { offset: offsetOf(body), limit: body.limit });
    }),
  );
  return { logs: rows, pagination: pagination(body.page, body.limit, total) };
}
