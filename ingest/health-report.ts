/**
 * The worker's sources as a domain's ingest health shows them (GET /api/domains/:domainId/ingest):
 * each worker publishes its sources' state and lag to Postgres every few seconds
 * (sql/postgres/012_ingest_sources.sql), because the API may run in other processes, on other hosts,
 * than the workers that follow a domain's files.
 *
 * A report is one statement whatever the number of sources (a thousand followed files are a
 * thousand rows): it marks the worker as heard from, writes the sources whose figures changed,
 * deletes those no longer in its config, and deletes the workers silent for a day.
 */
import { DAY_MS } from '../core/durations.js';
import os from 'node:os';
import path from 'node:path';
import type { Db } from '../core/db/postgres.js';
import { sql } from '../core/db/sql.js';
import type { Logger } from '../core/log.js';
import type { SourceStats } from './pipeline.js';

/** How often a worker reports. */
export const HEALTH_REPORT_MS = 5_000;
/** A worker whose last report is older than this is shown as not reporting (stopped, or cut off from Postgres). */
export const SILENT_AFTER_MS = 30_000;
/** A source is counted as feeding a domain its lines went to (routed by $host) for this long. */
const FEEDS_FOR_MS = DAY_MS;

/** A worker's name in the reports: its host and checkpoint directory, the same across restarts, so a restart replaces its rows. */
export function workerId(checkpointDir: string): string {
  return `${os.hostname()}:${path.resolve(checkpointDir)}`;
}

/** A source's row of ingest_sources. */
interface SourceReport {
  name: string;
  domains: string[];
  stored_domain_ids: number[];
  state: string;
  lag_bytes: number;
}

function reportOf(stats: SourceStats, now: number): SourceReport {
  const fed = Object.entries(stats.lastStoredByDomain).filter(([, at]) => now - at < FEEDS_FOR_MS);
  return { name: stats.name, domains: stats.domains, stored_domain_ids: fed.map(([id]) => Number(id)), state: stats.state, lag_bytes: stats.lagBytes };
}

/** Writes one report of `worker`'s sources. */
export async function publishSources(db: Db, worker: string, sources: readonly SourceStats[], now = Date.now()): Promise<void> {
  const rows = JSON.stringify(sources.map((s) => reportOf(s, now)));
  await db.query(sql`
    with worker as (
      insert into ingest_workers (id, reported_at) values (${worker}, now())
      on conflict (id) do update set reported_at = excluded.reported_at
      returning id
    ), incoming as (
      select * from jsonb_to_recordset(${rows}::text::jsonb) as r(name text, domains text[], stored_domain_ids integer[], state text, lag_bytes bigint)
    ), gone as (
      delete from ingest_sources s where s.worker_id = ${worker} and not exists (select from incoming i where i.name = s.name)
    ), silent as (
      delete from ingest_workers where reported_at < now() - interval '1 day' and id <> ${worker}
    )
    insert into ingest_sources as s (worker_id, name, domains, stored_domain_ids, state, lag_bytes)
    select worker.id, i.name, i.domains, i.stored_domain_ids, i.state, i.lag_bytes from incoming i cross join worker
    on conflict (worker_id, name) do update
      set domains = excluded.domains, stored_domain_ids = excluded.stored_domain_ids, state = excluded.state, lag_bytes = excluded.lag_bytes
      where (s.domains, s.stored_domain_ids, s.state, s.lag_bytes) is distinct from (excluded.domains, excluded.stored_domain_ids, excluded.state, excluded.lag_bytes)`);
}

export interface HealthReport {
  /** Stops reporting, after one last report (the sources' final states). */
  stop(): Promise<void>;
}

/**
 * Reports `snapshot()` (the worker's stats) every `intervalMs` until stopped. A failed report (Postgres
 * down) is logged once until one succeeds again; the worker goes on either way.
 */
export function startHealthReport(db: Db, log: Logger, worker: string, snapshot: () => SourceStats[], intervalMs = HEALTH_REPORT_MS): HealthReport {
  let failing = false;
  let stopped = false;
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<void> = Promise.resolve();
  const report = async () => {
    try {
      await publishSources(db, worker, snapshot());
      if (failing) log.info({ worker }, 'ingest health report written again');
      failing = false;
    } catch (err) {
      if (!failing) log.warn({ worker, err: err instanceof Error ? err.message : String(err) }, 'ingest health report failed: retrying at each interval');
      failing = true;
    }
  };
  const next = () => {
    running = report().then(() => {
      if (stopped) return;
      timer = setTimeout(next, intervalMs);
      timer.unref();
    });
  };
  next();
  return {
    async stop() {
      if (stopped) return running;
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
      running = report();
      return running;
    },
  };
}
