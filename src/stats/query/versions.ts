/**
 * The data version of what queries read, for the answer cache (cache.ts): one statement for all
 * the queries of a request, whatever their count.
 *
 * Every stored access row is counted, in the insert that stores it, in access_hour_rows (its
 * domain and hour: `rows`, and `last_insert`, the insert's time). Counts only grow inside the
 * retention (a late line adds to its hour; deduplicated retries add nothing), so the sum of the
 * counts over a query's domains and hours, with the latest insert among them, changes whenever a
 * row is stored where the query reads, from any process, and stays while none is. The rows of
 * access_logs change otherwise only by mutations (the user-agent backfill rewrites a column of old
 * rows): the finished mutations of access_logs are part of every version.
 *
 * The same read gives the rows counted per whole hour that planning a read from the rollups
 * checks (known-plans.ts), so a batch's queries plan without a statement of their own.
 */
import { selectRows, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { queryDomainsHourRows, windowBuckets, type HourRows } from '../../rollups/plan.js';
import { unionAll } from '../../rollups/shared-sql.js';
import type { Query } from './parse.js';
import { readRange, type HourRowsReader } from './run.js';
import { HOUR_MS } from '../../../core/durations.js';

/** The scope of the mutations' row. */
const MUTATIONS = 4_294_967_295;

export interface Versions {
  /** Each query's data version, in the order given. */
  of: string[];
  /** The rows per whole hour of a query's read range, from the same read (queryDomainsHourRows otherwise). */
  hourRows: HourRowsReader;
}

interface Scope {
  domainIds: number[];
  start: number;
  end: number;
  /** Rows per hour start (ms) and the latest insert among them (ms). */
  hours: Map<number, number>;
  lastInsert: number;
}

const scopeKey = (domainIds: number[], start: number, end: number) => `${domainIds.join(',')}|${start}|${end}`;

/** The versions of `queries`' reads, as one statement over access_hour_rows (and the mutations of access_logs). */
export async function readVersions(clickhouse: ClickHouseClient, queries: Query[]): Promise<Versions> {
  const scopes = new Map<string, Scope>();
  const scopeOf = queries.map((query) => {
    const { start, end } = readRange(query);
    const domainIds = query.domains.map((d) => d.id);
    const key = scopeKey(domainIds, start, end);
    if (!scopes.has(key)) scopes.set(key, { domainIds, start, end, hours: new Map(), lastInsert: 0 });
    return scopes.get(key)!;
  });
  const list = [...scopes.values()];
  const params: Record<string, unknown> = {};
  const selects = list.map((s, i) => {
    Object.assign(params, { [`d${i}`]: s.domainIds, [`f${i}`]: Math.floor(s.start / HOUR_MS) * 3_600, [`t${i}`]: Math.floor(s.end / HOUR_MS) * 3_600 });
    return `SELECT toUInt32(${i}) AS scope, toUnixTimestamp(hour) AS bucket, sum(rows) AS n, toInt64(toUnixTimestamp64Milli(max(last_insert))) AS at
FROM access_hour_rows WHERE domain_id IN {d${i}:Array(UInt32)} AND hour >= toDateTime({f${i}:UInt32}, 'UTC') AND hour <= toDateTime({t${i}:UInt32}, 'UTC')
GROUP BY hour`;
  });
  selects.push(`SELECT toUInt32(${MUTATIONS}), toUInt32(0), toUInt64(countIf(is_done)), toInt64(toUnixTimestamp(maxIf(create_time, is_done)))
FROM system.mutations WHERE database = currentDatabase() AND table = 'access_logs'`);
  let mutations = '';
  type Row = { scope: number | string; bucket: number | string; n: number | string; at: number | string };
  for (const row of await selectRows<Row>(clickhouse, unionAll(selects), params)) {
    if (Number(row.scope) === MUTATIONS) {
      mutations = `${row.n}:${row.at}`;
      continue;
    }
    const scope = list[Number(row.scope)]!;
    scope.hours.set(Number(row.bucket) * 1000, Number(row.n));
    scope.lastInsert = Math.max(scope.lastInsert, Number(row.at));
  }
  const versionOf = (s: Scope) => `${[...s.hours.values()].reduce((a, b) => a + b, 0)}:${s.lastInsert}:${mutations}`;
  return {
    of: scopeOf.map(versionOf),
    hourRows: (domainIds, start, end) => {
      const scope = scopes.get(scopeKey(domainIds, start, end));
      if (!scope) return queryDomainsHourRows(clickhouse, domainIds, start, end);
      // queryDomainsHourRows's answer: the whole hours of the range that hold rows.
      const b = windowBuckets(start, end);
      const rows: HourRows = new Map();
      for (const [hour, n] of scope.hours) if (hour >= b.hourFrom && hour < b.hourTo && n > 0) rows.set(hour, n);
      return Promise.resolve(rows);
    },
  };
}
