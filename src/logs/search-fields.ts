/**
 * Which search fields can match at all, for the two without a text index whose values are keys of
 * the rollups (src/rollups/builder.ts): the user agent and the referrer.
 *
 * A search on them reads every row of its range (0.4–0.7 s for 30 days of 10 million rows here).
 * But each value they hold in a built day or hour is one of that bucket's top-list keys in
 * access_rollups, so whether any row of the range can match is answered by the keys of its built
 * buckets and the raw rows of the rest, as the stats plan reads them (src/rollups/plan.ts): a few thousand key
 * rows and the partial hours at the range's ends. A field no row can match is left out of the
 * search, and a search left without fields reads nothing. The check only ever removes a field
 * that cannot match; what is searched is searched as before.
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { unionAll } from '../rollups/shared-sql.js';
import { planConditions, planWindow, queryBuildState, windowBuckets } from '../rollups/plan.js';
import { SEARCH_COLUMNS, searchMatches, searchPattern, type SearchField, type SearchRequest } from './store.js';

/** The rollup list (access_rollups.dim) of each field the check knows. */
const KEYED_DIMS: Partial<Record<SearchField, string>> = { userAgent: 'agent', referrer: 'referrer' };

/** The request's fields less the keyed ones no row of its range can match. */
export async function searchableFields(clickhouse: ClickHouseClient, request: SearchRequest): Promise<SearchField[]> {
  const keyed = [...new Set(request.fields)].flatMap((f) => {
    const dim = KEYED_DIMS[f];
    return dim ? [{ dim, column: SEARCH_COLUMNS.access_logs[f]! }] : [];
  });
  if (keyed.length === 0) return [...request.fields];
  const start = request.startDate.getTime();
  const end = request.endDate.getTime();
  // Without a whole hour built, the check would read what the search reads.
  const whole = windowBuckets(start, end);
  if (whole.hourFrom >= whole.hourTo) return [...request.fields];
  const plan = planWindow(start, end, await queryBuildState(clickhouse, request.domainId, start, end));
  if (plan.days.length + plan.hours.length === 0) return [...request.fields];
  const c = planConditions({ ...plan, listed: [] });
  const matches = (expression: string) => searchMatches(expression, '{pattern:String}');
  const query = unionAll([
    c.built &&
      `SELECT DISTINCT toString(dim) AS dim FROM access_rollups
  WHERE domain_id = {domainId:UInt32} AND dim IN {dims:Array(String)} AND (${c.built}) AND ${matches('key')}`,
    ...keyed.map(
      (k) =>
        c.raw &&
        `SELECT '${k.dim}' AS dim FROM (SELECT 1 FROM access_logs WHERE domain_id = {domainId:UInt32} AND (${c.raw}) AND ${matches(k.column)} LIMIT 1)`,
    ),
  ]);
  const params = { ...c.params, domainId: request.domainId, dims: keyed.map((k) => k.dim), pattern: searchPattern(request.query) };
  const found = new Set((await selectRows<{ dim: string }>(clickhouse, query, params)).map((r) => r.dim));
  return request.fields.filter((f) => !KEYED_DIMS[f] || found.has(KEYED_DIMS[f]));
}
