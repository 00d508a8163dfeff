/**
 * A domain's ingest health as stored: the storing counts of ClickHouse (sql/clickhouse/014_ingest_health.sql)
 * and the sources the workers report to Postgres (sql/postgres/012_ingest_sources.sql,
 * ingest/health-report.ts). Times are those of the store that wrote them: ClickHouse's clock for the
 * lines, Postgres' for the reports; ages are taken on the same clock as the time they measure from.
 */
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import type { Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { SILENT_AFTER_MS } from '../../ingest/health-report.js';

/** When a domain's last line was stored (epoch ms), and how long ago that was when read. */
export interface LastLine {
  at: number;
  ageMs: number;
}

type Count = string | number;

/** The last line (access or error, the later) of each of `domainIds` that has one. */
export async function lastLines(clickhouse: ClickHouseClient, domainIds: readonly number[]): Promise<Map<number, LastLine>> {
  if (domainIds.length === 0) return new Map();
  const rows = await selectRows<{ domain_id: number; at: Count; now_ms: Count }>(
    clickhouse,
    'SELECT domain_id, toUnixTimestamp64Milli(max(last_stored)) AS at, toUnixTimestamp64Milli(now64(3)) AS now_ms FROM ingest_domain_last WHERE domain_id IN {ids:Array(UInt32)} GROUP BY domain_id',
    { ids: domainIds },
  );
  return new Map(rows.map((r) => [Number(r.domain_id), { at: Number(r.at), ageMs: Number(r.now_ms) - Number(r.at) }]));
}

// The windows: this minute and the 59 before it, this minute and the 1,439 before it. Lines are
// counted per minute of storing, so both the stored and the rejected lines are counted by it.
const HOUR_START = 'toStartOfMinute(now()) - INTERVAL 59 MINUTE';
const DAY_START = 'toStartOfMinute(now()) - INTERVAL 1439 MINUTE';

export interface LineCounts {
  lastHour: number;
  lastDay: number;
}

export interface StoringFigures {
  /** When the last access and error lines were stored, epoch ms; null: never. */
  lastAccess: number | null;
  lastError: number | null;
  /** ClickHouse's time when they were read, epoch ms. */
  now: number;
  stored: LineCounts;
  /** By cause; a null cause: rejected before causes were recorded (migration 014). */
  rejected: LineCounts & { byCause: (LineCounts & { cause: string | null })[] };
}

/** A domain's storing figures, in three small reads (a few thousand minute rows, the day's rejects by their key). */
export async function storingFigures(clickhouse: ClickHouseClient, domainId: number): Promise<StoringFigures> {
  const params = { d: domainId };
  const last = await selectRows<{ kind: 'access' | 'error'; at: Count }>(
    clickhouse,
    'SELECT kind, toUnixTimestamp64Milli(max(last_stored)) AS at FROM ingest_domain_last WHERE domain_id = {d:UInt32} GROUP BY kind',
    params,
  );
  const [stored] = await selectRows<{ now_ms: Count; last_hour: Count; last_day: Count }>(
    clickhouse,
    `SELECT toUnixTimestamp64Milli(now64(3)) AS now_ms, sumIf(lines, minute >= ${HOUR_START}) AS last_hour, sum(lines) AS last_day ` +
      `FROM ingest_domain_minutes WHERE domain_id = {d:UInt32} AND minute >= ${DAY_START}`,
    params,
  );
  const byCause = await selectRows<{ cause: string; last_hour: Count; last_day: Count }>(
    clickhouse,
    `SELECT cause, countIf(time >= ${HOUR_START}) AS last_hour, count() AS last_day ` +
      `FROM ingest_rejects WHERE domain_id = {d:UInt32} AND time >= ${DAY_START} GROUP BY cause ORDER BY last_day DESC, cause`,
    params,
  );
  const lastOf = (kind: 'access' | 'error') => {
    const row = last.find((r) => r.kind === kind);
    return row ? Number(row.at) : null;
  };
  const causes = byCause.map((r) => ({ cause: r.cause === '' ? null : r.cause, lastHour: Number(r.last_hour), lastDay: Number(r.last_day) }));
  return {
    lastAccess: lastOf('access'),
    lastError: lastOf('error'),
    now: Number(stored!.now_ms),
    stored: { lastHour: Number(stored!.last_hour), lastDay: Number(stored!.last_day) },
    rejected: { lastHour: causes.reduce((n, c) => n + c.lastHour, 0), lastDay: causes.reduce((n, c) => n + c.lastDay, 0), byCause: causes },
  };
}

/** A source feeding a domain, as its worker last reported it. */
export interface FeedingSource {
  name: string;
  state: string;
  lagBytes: number;
  reportedAt: string;
  /** False when its worker has not reported for SILENT_AFTER_MS: the figures are its last. */
  reporting: boolean;
}

/**
 * The sources feeding a domain: those configured for its name, and those whose lines were stored
 * under it in the last day (routed by their $host), of every worker, by name.
 */
export async function sourcesFeeding(db: Db, domain: { id: number; name: string }): Promise<FeedingSource[]> {
  const rows = await db.query<{ name: string; state: string; lag_bytes: number; reported_at: Date; reporting: boolean }>(sql`
    select s.name, s.state, s.lag_bytes::float8 as lag_bytes, w.reported_at, w.reported_at > now() - make_interval(secs => ${SILENT_AFTER_MS / 1000}) as reporting
    from ingest_sources s join ingest_workers w on w.id = s.worker_id
    where ${domain.name}::text = any(s.domains) or ${domain.id}::integer = any(s.stored_domain_ids)
    order by s.name, s.worker_id`);
  return rows.map((r) => ({ name: r.name, state: r.state, lagBytes: Number(r.lag_bytes), reportedAt: new Date(r.reported_at).toISOString(), reporting: r.reporting }));
}
