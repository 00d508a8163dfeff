import fs from 'node:fs/promises';
import path from 'node:path';
import { ClickHouseLogLevel, createClient, type ClickHouseClient } from '@clickhouse/client';
import type { ChdbExtension } from 'chdb/connection';
import type { Logger } from '../log.js';
import { dropUncommittedDedupRecords } from './dedup-log-repair.js';
import { readMigrations, SQL_DIR } from './migrate.js';

export type { ChdbExtension, ClickHouseClient };

// chDB's own entry points (zero-copy raw inserts, streaming queries) of each embedded client.
const chdbHandles = new WeakMap<ClickHouseClient, ChdbExtension>();

/**
 * The chDB engine behind an embedded client, for the paths `@clickhouse/client` cannot offer
 * there (its insert turns the body into SQL text, its query buffers the whole result);
 * undefined for a ClickHouse server.
 */
export function chdbOf(client: ClickHouseClient): ChdbExtension | undefined {
  return chdbHandles.get(client);
}

/** The rows of a query with bound `{name:Type}` parameters, as JSON objects; `signal` cancels it. */
export async function selectRows<T>(clickhouse: ClickHouseClient, query: string, params: Record<string, unknown>, signal?: AbortSignal): Promise<T[]> {
  const result = await clickhouse.query({ query, query_params: params, format: 'JSONEachRow', abort_signal: signal });
  return result.json<T>();
}

/**
 * One page of a query ending in LIMIT, and how many rows it would give without the LIMIT (and
 * OFFSET), counted by the engine as it reads them (`exact_rows_before_limit`): a page's total needs
 * no window function over every row (`count() OVER ()` kept all 3.3 million URL groups of a 30-day
 * top list for its count) nor a second query past the last page.
 */
export async function selectPage<T>(clickhouse: ClickHouseClient, query: string, params: Record<string, unknown>): Promise<{ rows: T[]; total: number }> {
  const result = await clickhouse.query({ query, query_params: params, format: 'JSON', clickhouse_settings: { exact_rows_before_limit: 1 } });
  const answer = await result.json<T>();
  if (answer.rows_before_limit_at_least === undefined) throw new Error('selectPage: the query has no LIMIT, so ClickHouse counted no rows before it');
  return { rows: answer.data, total: Number(answer.rows_before_limit_at_least) };
}

/**
 * One `@clickhouse/client` API for both modes: a ClickHouse server at CLICKHOUSE_URL, or the
 * in-process chDB engine under DATA_DIR/clickhouse (one process per data directory).
 */
export async function openClickhouse(options: { clickhouseUrl?: string; dataDir: string }, log?: Logger): Promise<ClickHouseClient> {
  if (options.clickhouseUrl) {
    // The client's own log is unstructured text on stderr; failures reach ours through the callers.
    const client = createClient({ url: options.clickhouseUrl, request_timeout: 60_000, log: { level: ClickHouseLogLevel.OFF } });
    const ping = await client.ping();
    if (!ping.success) throw new Error(`ClickHouse at CLICKHOUSE_URL does not answer: ${String(ping.error)}`);
    return client;
  }
  const dir = path.join(options.dataDir, 'clickhouse');
  await fs.mkdir(dir, { recursive: true });
  // Before the engine loads the tables: a kill in the middle of an insert must not make its replay a no-op.
  for (const repair of await dropUncommittedDedupRecords(dir)) {
    if (repair.removed > 0) log?.warn({ table: repair.table, removed: repair.removed }, 'ClickHouse: removed the deduplication records of inserts a crash interrupted, so that their batches can land when sent again');
    if (repair.unreadable.length > 0) log?.warn({ table: repair.table, files: repair.unreadable }, 'ClickHouse: a deduplication log does not read as expected and was left as it is');
  }
  // Loaded here only: a server-mode process never maps libchdb (hundreds of MB of code).
  const { createChdbConnection } = await import('chdb/connection');
  // chdb bundles its own copy of @clickhouse/client-common's types; the objects are compatible.
  const chdb = createChdbConnection({ path: dir });
  const connection = chdb as unknown as NonNullable<Parameters<typeof createClient>[0]>['connection'];
  const client = createClient({ connection });
  chdbHandles.set(client, chdb.chdb);
  return client;
}

/** Values the ClickHouse migrations may name as `{{name}}`: validated configuration numbers, never user input. */
export type MigrationSettings = Record<string, number>;

function splitStatements(script: string): string[] {
  return script
    .split(/;\s*$/m)
    .map((s) => s.replace(/^\s*--.*$/gm, '').trim())
    .filter((s) => s.length > 0);
}

function fillSettings(statement: string, settings: MigrationSettings): string {
  return statement.replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
    const value = settings[name];
    if (value === undefined || !Number.isFinite(value)) throw new Error(`ClickHouse migration names unknown setting {{${name}}}`);
    return String(value);
  });
}

/**
 * Applies the pending `sql/clickhouse` migrations. The ledger table is itself migration 001; a
 * store without it has nothing applied yet. Statements use IF NOT EXISTS so a run interrupted
 * between a statement and its ledger row can be repeated.
 */
export async function migrateClickhouse(
  client: ClickHouseClient,
  log: Logger,
  settings: MigrationSettings = {},
  folder = path.join(SQL_DIR, 'clickhouse'),
): Promise<number> {
  const migrations = await readMigrations(folder);
  const exists = await client.query({ query: 'EXISTS TABLE schema_migrations', format: 'JSONEachRow' });
  const [row] = await exists.json<{ result: number }>();
  const applied = new Set<number>();
  if (row?.result) {
    const result = await client.query({ query: 'SELECT version FROM schema_migrations FINAL', format: 'JSONEachRow' });
    for (const r of await result.json<{ version: number }>()) applied.add(Number(r.version));
  }
  let count = 0;
  for (const m of migrations) {
    if (applied.has(m.version)) continue;
    for (const statement of splitStatements(m.script)) {
      await client.command({ query: fillSettings(statement, settings) });
    }
    await client.insert({ table: 'schema_migrations', values: [{ version: m.version, name: m.name }], format: 'JSONEachRow' });
    log.info({ store: 'clickhouse', version: m.version, migration: m.name }, 'migration applied');
    count++;
  }
  return count;
}
