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
// The client each derived client was made from (derivedClient).
const bases = new WeakMap<ClickHouseClient, ClickHouseClient>();

/**
 * A client that behaves as `base` but for the methods `overrides` replaces (a request's reads,
 * scheduled and limited: src/reads/), and reads the same store: storeClient gives `base` back.
 */
export function derivedClient(base: ClickHouseClient, overrides: Partial<Pick<ClickHouseClient, 'query'>>): ClickHouseClient {
  const store = storeClient(base);
  const client = Object.assign(Object.create(store) as ClickHouseClient, overrides);
  bases.set(client, store);
  return client;
}

/** The client of the store `client` reads: what per-store state (caches, the chDB handle) is kept by. */
export const storeClient = (client: ClickHouseClient): ClickHouseClient => bases.get(client) ?? client;

/**
 * The chDB engine behind an embedded client, for the paths `@clickhouse/client` cannot offer
 * there (its insert turns the body into SQL text, its query buffers the whole result);
 * undefined for a ClickHouse server.
 */
export function chdbOf(client: ClickHouseClient): ChdbExtension | undefined {
  return chdbHandles.get(storeClient(client));
}

/**
 * The ClickHouse error code of an error, or undefined for any other error: chDB's native errors
 * carry `clickhouseCode`, `@clickhouse/client`'s ClickHouseError (of either mode: chDB's
 * connection bundles its own copy of the class) a numeric `code` string.
 */
export function clickhouseCode(err: unknown): number | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const { clickhouseCode: chdb, code } = err as { clickhouseCode?: unknown; code?: unknown };
  if (typeof chdb === 'number') return chdb;
  if (typeof code === 'string' && /^\d+$/.test(code)) return Number(code);
  return undefined;
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
  const connection = oneStatementAtATime(chdb) as unknown as NonNullable<Parameters<typeof createClient>[0]>['connection'];
  const client = createClient({ connection });
  chdbHandles.set(client, chdb.chdb);
  return client;
}

type ChdbConnection = ReturnType<typeof import('chdb/connection').createChdbConnection>;
const STATEMENTS = ['query', 'exec', 'command', 'insert'] as const;

/**
 * The embedded connection running one statement at a time, and after a statement that failed, a
 * `SELECT 1` whose answer is thrown away before the next one starts. chDB keeps the output of a
 * statement that fails part way (a limit reached while its rows were being written) and hands it to
 * the connection's next statement at the head of that one's answer: the rows of one user's stopped
 * read would appear in whatever read came next, another user's or a live tail's (bench/README,
 * "bench/fair-reads"). Statements with bound parameters already ran one at a time in chDB's own queue;
 * inserts through the engine's own handle (chdbOf) write no rows to hand on.
 */
function oneStatementAtATime(chdb: ChdbConnection): ChdbConnection {
  let tail: Promise<unknown> = Promise.resolve();
  const serialized = Object.fromEntries(
    STATEMENTS.map((name) => {
      const statement = (chdb[name] as (params: unknown) => Promise<unknown>).bind(chdb);
      const run = async (params: unknown) => {
        try {
          return await statement(params);
        } catch (err) {
          await chdb.chdb.queryAsync('SELECT 1', { format: 'CSV' }).catch(() => undefined);
          throw err;
        }
      };
      return [name, (params: unknown) => (tail = tail.then(() => run(params), () => run(params)))];
    }),
  );
  return new Proxy(chdb, {
    get(target, property) {
      if (property in serialized) return serialized[property as string];
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
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
