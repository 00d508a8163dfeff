/**
 * What a search must read, from the fields whose values are keys of the rollups
 * (src/rollups/builder.ts) and that have no text index: the user agent and the referrer.
 *
 * A search on them would read every access row of its range (0.4–0.7 s for 30 days of 10 million
 * rows here). But every value they hold in a built day or hour is one of that bucket's keys in
 * access_rollups: the lists there hold each distinct value of the bucket's rows (the short top
 * lists of access_tops are the ones cut to a top 100). So the keys of the range's built buckets,
 * and the raw rows of the rest as the stats plan reads them (src/rollups/plan.ts: the partial hours
 * at the range's ends, and the hours not built or written to since), tell
 *
 * - which fields can match at all: a field no row can match is left out of the search, and a
 *   search left without fields reads nothing;
 * - where access rows can match: the built buckets holding a matching key and, when a raw row
 *   matches, the raw ranges; the access rows are read there only. That holds only while every
 *   access field searched is keyed: a row matching `url` (searched through its text index,
 *   sql/clickhouse/003) or `ipAddress` may lie in any hour, so with them the access rows of the
 *   whole range are read.
 *
 * The url is a key of the rollups too, but its keys are about as many as its rows (most URLs are
 * seen once), and reading them took longer than the text index takes (bench/README, "Issue 17").
 *
 * The answer only ever leaves out what cannot match; what is searched is matched as before.
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { unionAll } from '../rollups/shared-sql.js';
import { DAY_MS, HOUR_MS } from '../../core/durations.js';
import { planConditions, planWindow, queryBuildState, windowBuckets } from '../rollups/plan.js';
import { SEARCH_COLUMNS, searchMatches, searchPattern, type SearchField, type SearchRequest } from './store.js';

/** The rollup list (access_rollups.dim) of each field the check knows. */
const KEYED_DIMS: Partial<Record<SearchField, string>> = { userAgent: 'agent', referrer: 'referrer' };

/**
 * Time ranges of access_logs read at most: beyond this many, the nearest ones are joined (reading
 * the hours between them too). Each range is two parameters and a condition repeated in each of the
 * search's subqueries; a range is a run of matching days or hours, so a rare needle over a month
 * of built days stays far below.
 */
const MAX_RANGES = 64;

/** What a search reads: its fields, and where in access_logs (both as SearchRequest takes them). */
export type SearchScope = Pick<SearchRequest, 'fields' | 'accessRanges'>;

/** The request's fields less the keyed ones no row of its range can match, and the ranges of access_logs that can hold a match. */
export async function searchScope(clickhouse: ClickHouseClient, request: SearchRequest): Promise<SearchScope> {
  const everything: SearchScope = { fields: [...request.fields], accessRanges: null };
  const keyed = [...new Set(request.fields)].flatMap((f) => {
    const dim = KEYED_DIMS[f];
    return dim ? [{ dim, column: SEARCH_COLUMNS.access_logs[f]! }] : [];
  });
  if (keyed.length === 0) return everything;
  const start = request.startDate.getTime();
  const end = request.endDate.getTime();
  // Without a whole hour built, the check would read what the search reads.
  const whole = windowBuckets(start, end);
  if (whole.hourFrom >= whole.hourTo) return everything;
  const plan = planWindow(start, end, await queryBuildState(clickhouse, request.domainId, start, end));
  if (plan.days.length + plan.hours.length === 0) return everything;
  const c = planConditions({ ...plan, listed: [] });
  const matches = (expression: string) => searchMatches(expression, '{pattern:String}');
  // (list, unit, start) of each built bucket with a matching key; (list, 'raw', 0) when a raw row
  // matches. Named apart from the columns: an alias would shadow its column in WHERE.
  const query = unionAll([
    c.built &&
      `SELECT DISTINCT toString(dim) AS list, toString(span) AS unit, toUnixTimestamp(bucket) AS start FROM access_rollups
  WHERE domain_id = {domainId:UInt32} AND dim IN {dims:Array(String)} AND (${c.built}) AND ${matches('key')}`,
    ...keyed.map(
      (k) =>
        c.raw &&
        `SELECT '${k.dim}' AS list, 'raw' AS unit, toUInt32(0) AS start FROM (SELECT 1 FROM access_logs WHERE domain_id = {domainId:UInt32} AND (${c.raw}) AND ${matches(k.column)} LIMIT 1)`,
    ),
  ]);
  const params = { ...c.params, domainId: request.domainId, dims: keyed.map((k) => k.dim), pattern: searchPattern(request.query) };
  const found = await selectRows<{ list: string; unit: 'day' | 'hour' | 'raw'; start: number | string }>(clickhouse, query, params);
  const dims = new Set(found.map((r) => r.list));
  const fields = request.fields.filter((f) => !KEYED_DIMS[f] || dims.has(KEYED_DIMS[f]));
  if (fields.some((f) => SEARCH_COLUMNS.access_logs[f] && !KEYED_DIMS[f])) return { fields, accessRanges: null };
  const ranges = found.flatMap(({ unit, start }): [number, number][] => {
    if (unit === 'raw') return plan.raw;
    const from = Number(start) * 1000;
    return [[from, from + (unit === 'day' ? DAY_MS : HOUR_MS)]];
  });
  return { fields, accessRanges: atMost(MAX_RANGES, union(ranges)) };
}

/** The union of half-open ranges, as disjoint ranges in time order (touching ones joined). */
function union(ranges: [number, number][]): [number, number][] {
  const out: [number, number][] = [];
  for (const [from, to] of [...ranges].sort((a, b) => a[0] - b[0])) {
    const last = out[out.length - 1];
    if (last && from <= last[1]) last[1] = Math.max(last[1], to);
    else out.push([from, to]);
  }
  return out;
}

/** Disjoint ranges in time order, at most `max` of them: the smallest gaps between them closed. */
function atMost(max: number, ranges: [number, number][]): [number, number][] {
  if (ranges.length <= max) return ranges;
  // Gap i lies after range i; the max − 1 widest stay open.
  const open = new Set(
    ranges
      .slice(1)
      .map((r, i) => ({ i, gap: r[0] - ranges[i]![1] }))
      .sort((a, b) => b.gap - a.gap)
      .slice(0, max - 1)
      .map((g) => g.i),
  );
  const out: [number, number][] = [];
  ranges.forEach(([from, to], i) => {
    if (i === 0 || open.has(i - 1)) out.push([from, to]);
    else out[out.length - 1]![1] = to;
  });
  return out;
}
