/**
 * GET …/stats's query string: the window (a period, or startDate/endDate) and the filters, which are
 * the listing's (statusCode, ipAddress, url, method, same forms) and userAgent, referrer and bot;
 * turned into the statistics registry's filters (src/stats/query/filters.ts), so that the stats and
 * POST /api/logs/query match rows alike.
 */
import { z } from '@hono/zod-openapi';
import { checkDateOrder, dateRangeQuery } from '../http/query.js';
import { accessFilterQuery, filterText, type AccessFilters } from '../logs/filters.js';
import type { QueryFilter } from './query/filters.js';
import { STATS_PERIODS, type StatsWindow } from './periods.js';

const text = (what: string) => filterText.openapi({ description: `A case-insensitive substring of the ${what}` });

export const statsQuery = z
  .object({
    period: z
      .enum(STATS_PERIODS, { message: `must be one of ${STATS_PERIODS.join(', ')}` })
      .optional()
      .openapi({ description: 'The window: the last hour, day, 7 days or 30 days up to now (default 24h); or give startDate (and endDate) instead', example: '24h' }),
    ...dateRangeQuery(false),
    ...accessFilterQuery,
    userAgent: text('User-Agent header').optional(),
    referrer: text('Referer header').optional(),
    bot: z
      .enum(['true', 'false'], { message: 'must be true or false' })
      .transform((v) => v === 'true')
      .optional()
      .openapi({ type: 'string', enum: ['true', 'false'], description: "Only bots' requests (true) or only the others (false), by the user agent's class" }),
  })
  .superRefine(checkDateOrder)
  .superRefine((q, ctx) => {
    if (q.period && q.startDate) ctx.addIssue({ code: 'custom', path: ['period'], message: 'is not taken with startDate: give one or the other' });
    if (q.endDate && !q.startDate) ctx.addIssue({ code: 'custom', path: ['startDate'], message: 'is required with endDate' });
  });

export type StatsQuery = z.infer<typeof statsQuery>;

export const statsWindowOf = (q: StatsQuery): StatsWindow => (q.startDate ? { startDate: q.startDate, endDate: q.endDate } : { period: q.period ?? '24h' });

/** The query string's filters as the registry's: the listing's forms keep the listing's meaning. */
export function statsFiltersOf(q: StatsQuery & AccessFilters): QueryFilter[] {
  const filters: QueryFilter[] = [];
  const codes = q.statusCode?.flatMap((s) => ('code' in s ? [s.code] : [])) ?? [];
  const classes = q.statusCode?.flatMap((s) => ('class' in s ? [`${s.class}xx`] : [])) ?? [];
  if (codes.length > 0) filters.push({ op: 'is', dimension: 'statusCode', values: codes });
  if (classes.length > 0) filters.push({ op: 'is', dimension: 'statusClass', values: classes });
  if (q.method) filters.push({ op: 'is', dimension: 'method', values: q.method });
  // The listing's url: a case-sensitive substring, or with `*` a glob over the whole URL.
  if (q.url !== undefined) filters.push({ op: 'glob', dimension: 'url', values: [q.url.includes('*') ? q.url : `*${q.url}*`] });
  if (q.ipAddress) filters.push({ op: 'cidr', dimension: 'ipAddress', values: [q.ipAddress] });
  if (q.userAgent !== undefined) filters.push({ op: 'contains', dimension: 'userAgent', values: [q.userAgent] });
  if (q.referrer !== undefined) filters.push({ op: 'contains', dimension: 'referrer', values: [q.referrer] });
  if (q.bot !== undefined) filters.push({ op: 'is', dimension: 'bot', values: [q.bot] });
  return filters;
}
