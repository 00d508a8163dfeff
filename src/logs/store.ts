import type { ClickHouseClient } from '../db/clickhouse.js';

/** The ClickHouse tables holding a domain's rows (sql/clickhouse/002_logs.sql). */
const DOMAIN_TABLES = ['access_logs', 'error_logs', 'ingest_rejects'] as const;

/**
 * Deletes every log row of a domain. Lightweight deletes hide the rows at once and leave the
 * rewrite to merges; the table names are constants, the id a bound parameter.
 */
export async function deleteDomainLogs(clickhouse: ClickHouseClient, domainId: number): Promise<void> {
  for (const table of DOMAIN_TABLES) {
    await clickhouse.command({ query: `DELETE FROM ${table} WHERE domain_id = {domainId:UInt32}`, query_params: { domainId } });
  }
}
