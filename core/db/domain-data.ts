import type { ClickHouseClient } from './clickhouse.js';

/**
 * Every ClickHouse table holding rows of a domain: its logs and rejects (sql/clickhouse/002_logs.sql),
 * what the stats derive from them, the hour counts and the rollups (005, 006), and its ingest
 * health's counts (014). A delete on access_logs does not reach the derived tables (their view
 * fires on inserts only), so a domain's data is deleted from each of them.
 */
const DOMAIN_TABLES = ['access_logs', 'error_logs', 'ingest_rejects', 'access_rollups', 'access_tops', 'access_hour_rows', 'ingest_domain_minutes', 'ingest_domain_last'] as const;

/**
 * Deletes every row of a domain. Lightweight deletes hide the rows at once and leave the rewrite to
 * merges; the table names are constants, the id a bound parameter.
 */
export async function deleteDomainData(clickhouse: ClickHouseClient, domainId: number): Promise<void> {
  for (const table of DOMAIN_TABLES) {
    await clickhouse.command({ query: `DELETE FROM ${table} WHERE domain_id = {domainId:UInt32}`, query_params: { domainId } });
  }
}
