/**
 * POST /api/logs/query: the domains the caller may read, then parse → run → shape.
 */
import type { Principal, Services } from '../../context.js';
import { resolveDomains } from '../../domains/service.js';
import { parseQuery } from './parse.js';
import { runQuery } from './run.js';
import type { QueryBody } from './schemas.js';
import { shapeAnswer, type QueryAnswer } from './shape.js';

type Deps = Pick<Services, 'db' | 'clickhouse' | 'config'>;

/** The figures the body asks for over the domains it names (each must be visible, else 404) or every domain the caller sees; needs logs:read. */
export async function queryLogs(deps: Deps, principal: Principal, body: QueryBody, now = Date.now()): Promise<QueryAnswer> {
  const domains = await resolveDomains(deps, principal, body.domains, ['logs', 'read']);
  const query = parseQuery(body, { now, retentionDays: deps.config.logRetentionDays, domains });
  return shapeAnswer(query, await runQuery(deps.clickhouse, query));
}
