/**
 * SQL fragments shared by the stats reader (src/stats/window.ts), the window plan (plan.ts), the short lists it keeps (short-lists.ts),
 * the status counts (hour-counts.ts), the search check (search-fields.ts) and the rollup builder
 * (builder.ts), so that none of them imports another for its SQL.
 */
import { SHORT_LISTS } from '../stats/registry.js';

/** The given SELECTs as one UNION ALL, leaving out the pieces a plan does not have. */
export const unionAll = (selects: (string | null | false)[]) => selects.filter((q): q is string => typeof q === 'string').join('\nUNION ALL\n');

/**
 * `column` is one of the bucket starts (seconds) of the Array(UInt32) parameter `param`. The range
 * around the IN lets the primary key narrow the read: ClickHouse does not derive one from an IN
 * over an array expression (bench/README, "Figures behind the code's choices").
 */
export const inBuckets = (column: string, param: string) =>
  `(${column} >= toDateTime(arrayMin({${param}:Array(UInt32)}), 'UTC') AND ${column} <= toDateTime(arrayMax({${param}:Array(UInt32)}), 'UTC')` +
  ` AND ${column} IN arrayMap(x -> toDateTime(x, 'UTC'), {${param}:Array(UInt32)}))`;

/**
 * Per bucket (`keys`, columns of access_tops) among the rows `where` picks: the requests its short
 * lists were built for, as `version`; 0 unless every short list of the registry (SHORT_LISTS) is
 * there, else the oldest list's (each list counts with its newest build). Shared by the readers'
 * build state (plan.ts) and the builder's search for buckets to build again (builder.ts).
 */
export const topsVersions = (keys: string, where: string) => `
  SELECT ${keys}, if(count() = ${SHORT_LISTS.length}, min(requests), 0) AS version
  FROM (
    SELECT ${keys}, dim, by, argMax(built_requests, built_at) AS requests FROM access_tops
    WHERE ${where}
    GROUP BY ${keys}, dim, by
  )
  GROUP BY ${keys}`;

/** A list counted per key: its number (access_rollups.dim's Enum value), its key over access_logs rows, whether its empty key is left out. */
export interface CountedList {
  number: number;
  key: string;
  skipEmpty: boolean;
}

/**
 * Every row of `rows` (a FROM … WHERE … over access_logs) counted once per list of `lists`, per
 * `groups` (alias → SQL over the rows) and key: the columns `groups`' aliases, `list` (Int8),
 * `key` (String), `requests` and `sums`' aliases (alias → an aggregate over the rows), without the
 * empty keys of the lists that skip them. One read and
 * one GROUPING SETS aggregation, a hash table per list: an ARRAY JOIN of a (list, key) tuple per
 * list, copying each row once per list into one table, was slower (bench/README, "Issue 14").
 */
export function countedPerList(lists: readonly CountedList[], groups: Readonly<Record<string, string>>, rows: string, sums: Readonly<Record<string, string>> = {}): string {
  const aliases = Object.keys(groups);
  const sumAliases = Object.keys(sums);
  const keys = lists.map((_, i) => `list_key_${i}`);
  // grouping(…) has bit n-1-i clear when the i-th argument is in the row's set (standard SQL).
  const setOf = (i: number) => (2 ** lists.length - 1) ^ (1 << (lists.length - 1 - i));
  const skipped = lists.filter((l) => l.skipEmpty).map((l) => l.number);
  // The rows' columns pass through for the sums; the groups are named apart from them (g_<alias>).
  const grouped = aliases.map((a) => `g_${a}`);
  return `
  SELECT ${[...aliases, 'list', 'key', 'requests', ...sumAliases].join(', ')}
  FROM (
    SELECT ${[
      ...aliases.map((a) => `g_${a} AS ${a}`),
      `grouping(${keys.join(', ')}) AS list_set`,
      `toInt8(multiIf(${lists.map((l, i) => `list_set = ${setOf(i)}, ${l.number}`).join(', ')}, 0)) AS list`,
      `multiIf(${lists.map((_, i) => `list_set = ${setOf(i)}, ${keys[i]}`).join(', ')}, '') AS key`,
      'count() AS requests',
      ...sumAliases.map((a) => `${sums[a]} AS ${a}`),
    ].join(',\n           ')}
    FROM (SELECT ${[...aliases.map((a) => `${groups[a]} AS g_${a}`), ...lists.map((l, i) => `${l.key} AS ${keys[i]}`), ...(sumAliases.length > 0 ? ['*'] : [])].join(', ')} FROM ${rows})
    GROUP BY GROUPING SETS (${keys.map((k) => `(${[...grouped, k].join(', ')})`).join(', ')})
  )${skipped.length > 0 ? `\n  WHERE NOT (list IN (${skipped.join(', ')}) AND key = '')` : ''}`;
}
