/**
 * POST /api/logs/query: the domains the caller may read, then parse → run → shape; a later page
 * of a long series is cut from the series its first page computed (series-pages.ts).
 */
import type { Principal, Services } from '../../context.js';
import { resolveDomains } from '../../domains/service.js';
import { timeQuery } from '../../metrics/registry.js';
import { withReads } from '../../reads/client.js';
import { parseQuery } from './parse.js';
import { runQuery } from './run.js';
import type { QueryBody } from './schemas.js';
import { keepSeries, keptSeries, seriesKey } from './series-pages.js';
import { answerOf, orderGroups, type QueryAnswer } from './shape.js';

type Deps = Pick<Services, 'db' | 'clickhouse' | 'reads' | 'config' | 'metrics'>;

/** The figures the body asks for over the domains it names (each must be visible, else 404) or every domain the caller sees; needs logs:read. */
export async function queryLogs(deps: Deps, principal: Principal, body: QueryBody, now = Date.now()): Promise<QueryAnswer> {
  const domains = await resolveDomains(deps, principal, body.domains, ['logs', 'read']);
  const key = seriesKey(body, domains.map((d) => d.id));
  const kept = body.page > 1 ? keptSeries(deps.clickhouse, key, now) : undefined;
  if (kept) return answerOf({ ...kept.query, page: body.page }, kept.ordered);
  const query = parseQuery(body, { now, retentionDays: deps.config.logRetentionDays, domains });
  const ordered = orderGroups(query, await timeQuery(deps.metrics, 'query', () => withReads(deps, principal, 'stats', (clickhouse) => runQuery(clickhouse, query, deps.config.statsRollupMinRows))));
  keepSeries(deps.clickhouse, key, { query, ordered, at: now });
  return answerOf(query, ordered);
}
