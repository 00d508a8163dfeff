/**
 * SQL fragments shared by the stats reader (src/stats/window.ts), the window plan (plan.ts), the short lists it keeps (short-lists.ts),
 * the status counts (hour-counts.ts), the search check (search-fields.ts) and the rollup builder
 * (builder.ts), so that none of them imports another for its SQL.
 */

/** The given SELECTs as one UNION ALL, leaving out the pieces a plan does not have. */
export const unionAll = (selects: (string | null | false)[]) => selects.filter((q): q is string => typeof q === 'string').join('\nUNION ALL\n');

/**
 * `column` is one of the bucket starts (seconds) of the Array(UInt32) parameter `param`. The range
 * around the IN lets the primary key narrow the read: ClickHouse does not derive one from an IN
 * over an array expression (measured: 71 of 302 granules read instead of 3).
 */
export const inBuckets = (column: string, param: string) =>
  `(${column} >= toDateTime(arrayMin({${param}:Array(UInt32)}), 'UTC') AND ${column} <= toDateTime(arrayMax({${param}:Array(UInt32)}), 'UTC')` +
  ` AND ${column} IN arrayMap(x -> toDateTime(x, 'UTC'), {${param}:Array(UInt32)}))`;

/**
 * Per bucket (`keys`, columns of access_tops) among the rows `where` picks: the requests its short
 * top lists were built for, as `version`; 0 unless all four lists are there, else the oldest
 * list's (each list counts with its newest build). Shared by the readers' build state (plan.ts) and
 * the builder's search for buckets to build again (builder.ts).
 */
export const topsVersions = (keys: string, where: string) => `
  SELECT ${keys}, if(count() = 4, min(requests), 0) AS version
  FROM (
    SELECT ${keys}, dim, argMax(built_requests, built_at) AS requests FROM access_tops
    WHERE ${where}
    GROUP BY ${keys}, dim
  )
  GROUP BY ${keys}`;
