/**
 * SQL over rollup buckets shared by the stats reader (stats.ts), the short lists it keeps
 * (short-lists.ts) and the rollup builder (rollups.ts).
 */

/**
 * `column` is one of the bucket starts (seconds) of the Array(UInt32) parameter `param`. The range
 * around the IN lets the primary key narrow the read: ClickHouse does not derive one from an IN
 * over an array expression (measured: 71 of 302 granules read instead of 3).
 */
export const inBuckets = (column: string, param: string) =>
  `(${column} >= toDateTime(arrayMin({${param}:Array(UInt32)}), 'UTC') AND ${column} <= toDateTime(arrayMax({${param}:Array(UInt32)}), 'UTC')` +
  ` AND ${column} IN arrayMap(x -> toDateTime(x, 'UTC'), {${param}:Array(UInt32)}))`;
