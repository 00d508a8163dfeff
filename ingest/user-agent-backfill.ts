/**
 * Classifies the access rows stored without their user agent's class: those written before
 * migration 010 (sql/clickhouse/010_agent_classes.sql), or by a writer other than the sink (an
 * INSERT … SELECT of a bench or a test). Such a row has agent_class = 0, which the sink never writes.
 *
 * One daily partition at a time, newest first: the distinct user agents of its unclassified rows
 * are classified here, in JavaScript, by the ingest's own classifier; their classes written to
 * `agent_classes` and their numbers to `user_agent_classes` (a Join table, in memory); and one
 * mutation sets the partition's agent_class from it by joinGet. A mutation rewrites only that
 * column of the partition's parts, and the partition bounds its size and the wait. Rows a writer
 * adds meanwhile are classified by the sink already; a row whose agent is not in the table (stored
 * by another writer after the agents were read) keeps agent_class = 0 and is classified the next time.
 *
 * `serve` runs it once at start, in the background, one process per database (a lease); `tailhouse
 * migrate` runs it to the end before it exits.
 */
import os from 'node:os';
import { randomUUID } from 'node:crypto';
import type { ClickHouseClient } from '../core/db/clickhouse.js';
import { selectRows } from '../core/db/clickhouse.js';
import { claimLease, releaseLease } from '../core/db/leases.js';
import type { Db } from '../core/db/postgres.js';
import type { Logger } from '../core/log.js';
import { storeAgentClasses } from './sinks/clickhouse.js';
import { UserAgentClasses } from './transforms/user-agent.js';

export interface BackfillDeps {
  clickhouse: ClickHouseClient;
  log: Logger;
  /** Whether this process may go on (the lease); asked before each partition. */
  claim: () => Promise<boolean>;
  /** Stops before the next partition. */
  signal?: AbortSignal;
  /** The classifier (a fresh cache by default: the agents of old rows are mostly not the live ones). */
  classes?: UserAgentClasses;
}

export interface BackfillResult {
  partitions: number;
  rows: number;
  /** Distinct user agents classified, counted per partition. */
  agents: number;
  /** False when it stopped early: signal, or the lease held by another process. */
  complete: boolean;
}

// Agents read, classified and written to the Join table this many at a time.
const PAGE = 10_000;

/** Classifies every unclassified access row, partition by partition. */
export async function backfillUserAgentClasses(deps: BackfillDeps): Promise<BackfillResult> {
  const { clickhouse, log } = deps;
  const classes = deps.classes ?? new UserAgentClasses();
  const result: BackfillResult = { partitions: 0, rows: 0, agents: 0, complete: false };
  const pending = await selectRows<{ partition: string; rows: string }>(
    clickhouse,
    "SELECT _partition_id AS partition, count() AS rows FROM access_logs WHERE agent_class = 0 GROUP BY partition ORDER BY partition DESC",
    {},
  );
  if (pending.length === 0) return { ...result, complete: true };
  const [current] = await selectRows<{ database: string }>(clickhouse, 'SELECT currentDatabase() AS database', {});
  const table = `${current!.database}.user_agent_classes`;
  log.info({ partitions: pending.length, rows: pending.reduce((n, p) => n + Number(p.rows), 0) }, 'classifying the user agents of access rows stored without their class');
  let filled = false;
  try {
    for (const { partition, rows } of pending) {
      if (deps.signal?.aborted || !(await deps.claim())) break;
      await clickhouse.command({ query: 'TRUNCATE TABLE user_agent_classes' });
      filled = true;
      // The partition's agents in pages, so that memory here stays bounded however many there are.
      for (let after: string | null = null, more = true; more; ) {
        const page: { user_agent: string }[] = await selectRows<{ user_agent: string }>(
          clickhouse,
          "SELECT DISTINCT user_agent FROM access_logs WHERE _partition_id = {partition:String} AND agent_class = 0" +
            `${after === null ? '' : ' AND user_agent > {after:String}'} ORDER BY user_agent LIMIT {page:UInt32}`,
          { partition, after, page: PAGE },
        );
        if (page.length === 0) break;
        const values = page.map(({ user_agent }) => ({ user_agent, agent_class: classes.of(user_agent).id }));
        await storeAgentClasses(clickhouse);
        await clickhouse.insert({ table: 'user_agent_classes', values, format: 'JSONEachRow' });
        result.agents += page.length;
        after = page.at(-1)!.user_agent;
        more = page.length === PAGE;
      }
      // mutations_sync = 2: the statement returns once the partition's parts are rewritten. A SETTINGS
      // clause, not clickhouse_settings, which chDB turns into a SET that stays on the session for
      // every later statement of the process (src/rollups/builder.ts, BUILD_SETTINGS).
      await clickhouse.command({
        query:
          "ALTER TABLE access_logs UPDATE agent_class = joinGet({table:String}, 'agent_class', user_agent)" +
          ' IN PARTITION ID {partition:String} WHERE agent_class = 0 SETTINGS mutations_sync = 2',
        query_params: { table, partition },
      });
      result.partitions++;
      result.rows += Number(rows);
    }
    result.complete = result.partitions === pending.length;
    return result;
  } finally {
    // The table only serves the mutations: its memory goes back.
    if (filled) await clickhouse.command({ query: 'TRUNCATE TABLE user_agent_classes' });
    log.info(result, result.complete ? 'user agents of earlier access rows classified' : 'classifying the user agents of earlier access rows stopped before the end; the next start goes on');
  }
}

const LEASE = 'user-agent-backfill';
// Renewed before each partition, whose mutation takes far less.
const LEASE_MS = 15 * 60_000;

/**
 * Runs the backfill from now, in the background, when no other process of the database holds its
 * lease. `done` rejects when it fails (`serve` logs it, `migrate` fails: the rows keep agent_class = 0
 * until a later run); `stop` waits for the partition being rewritten.
 */
export function startUserAgentBackfill(deps: { db: Db; clickhouse: ClickHouseClient; log: Logger }): { done: Promise<BackfillResult>; stop: () => Promise<void> } {
  const abort = new AbortController();
  const holder = `${os.hostname()}:${process.pid}:${randomUUID()}`;
  const done = (async () => {
    try {
      return await backfillUserAgentClasses({ clickhouse: deps.clickhouse, log: deps.log, claim: () => claimLease(deps.db, LEASE, holder, LEASE_MS), signal: abort.signal });
    } finally {
      await releaseLease(deps.db, LEASE, holder).catch((err: unknown) => deps.log.warn({ err }, 'user agent backfill lease not released'));
    }
  })();
  return {
    done,
    stop: async () => {
      abort.abort();
      await done.catch(() => {});
    },
  };
}
