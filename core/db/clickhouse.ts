import fs from 'node:fs/promises';
import path from 'node:path';
import { ClickHouseLogLevel, createClient, TupleParam, type ClickHouseClient, type QueryParams } from '@clickhouse/client';
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
 * Sessions of the embedded engine that the reads of requests run on side by side, one statement
 * on each at a time; READS_IN_FLIGHT replaces it (and createReads lets as many requests in).
 */
export const EMBEDDED_READ_SESSIONS = 4;

/** max_query_size of the read sessions, whose statements carry their values (withLiterals). */
const READ_MAX_QUERY_BYTES = 2 ** 30;

// The client each embedded store client's requests read through (requestReads).
const readClients = new WeakMap<ClickHouseClient, ClickHouseClient>();

/**
 * The client the reads of requests go through. Embedded: each statement on a free Session of a pool
 * of the store's own (one statement on each at a time, drained after a failure: sessionPool), its
 * parameters written as literals (withLiterals), because chDB runs the statements with bound
 * parameters one at a time in the whole process, whatever their session; side by side, more
 * dashboard views answered per second (bench/README, "bench/engine-concurrency"). A server's
 * client, and any client derived from the store's, is returned as it is: bound parameters.
 */
export const requestReads = (client: ClickHouseClient): ClickHouseClient => readClients.get(client) ?? client;

/**
 * One `@clickhouse/client` API for both modes: a ClickHouse server at CLICKHOUSE_URL, or the
 * in-process chDB engine under DATA_DIR/clickhouse (one process per data directory).
 */
export async function openClickhouse(options: { clickhouseUrl?: string; dataDir: string; readsInFlight?: number }, log?: Logger): Promise<ClickHouseClient> {
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
  const chdb = createChdbConnection({ path: dir });
  const client = createClient({ connection: asConnection(sessionPool([chdb])) });
  // Sessions on the same path share the engine and its data; each has its own output. Opened by the
  // first read of a request: a command that serves none (import, migrate, domains add) never pays
  // for them (about 0.1 s each).
  let reads: Promise<ClickHouseClient> | null = null;
  const openReads = async () => {
    const sessions = Array.from({ length: options.readsInFlight ?? EMBEDDED_READ_SESSIONS }, () => createChdbConnection({ path: dir }));
    // A bound value is not part of the statement's text, a literal is: the page of a compare names up
    // to 10,000 groups (URLs of up to 64 KB), which the text's own limit (256 KB) must not refuse.
    for (const session of sessions) await session.chdb.queryAsync(`SET max_query_size = ${READ_MAX_QUERY_BYTES}`);
    return createClient({ connection: asConnection(sessionPool(sessions)) });
  };
  // A failed opening is tried again by the next read.
  const readClient = () =>
    (reads ??= openReads().catch((err: unknown) => {
      reads = null;
      throw err;
    }));
  readClients.set(
    client,
    derivedClient(client, {
      query: async (params: QueryParams) => (await readClient()).query({ ...params, query: withLiterals(params.query, params.query_params ?? {}), query_params: undefined }),
    } as Pick<ClickHouseClient, 'query'>),
  );
  const closeStore = client.close.bind(client);
  client.close = async () => {
    if (reads) await (await reads).close();
    await closeStore();
  };
  chdbHandles.set(client, chdb.chdb);
  return client;
}

type ChdbConnection = ReturnType<typeof import('chdb/connection').createChdbConnection>;
// chdb bundles its own copy of @clickhouse/client-common's types; the objects are compatible.
const asConnection = (connection: ChdbConnection) => connection as unknown as NonNullable<Parameters<typeof createClient>[0]>['connection'];
const STATEMENTS = ['query', 'exec', 'command', 'insert'] as const;

/**
 * One connection over embedded `sessions` (on one path): each statement on a free session, the
 * one freed last first, a session running one statement at a time and, after a statement that
 * failed, a `SELECT 1` whose answer is thrown away before it takes the next one. chDB keeps the
 * output of a statement that fails part way (a limit reached while its rows were being written) and
 * hands it to the session's next statement at the head of that one's answer: the rows of one
 * user's stopped read would appear in whatever read came next on that session, another user's or a
 * live tail's (bench/README, "bench/fair-reads"); each session has its own output, so another
 * session's statements never see them. Inserts through the engine's own handle (chdbOf) write no
 * rows to hand on.
 */
function sessionPool(sessions: ChdbConnection[]): ChdbConnection {
  const free = [...sessions];
  const waiting: ((session: ChdbConnection) => void)[] = [];
  const take = () => (free.length > 0 ? Promise.resolve(free.pop()!) : new Promise<ChdbConnection>((resolve) => waiting.push(resolve)));
  const give = (session: ChdbConnection) => {
    const next = waiting.shift();
    if (next) next(session);
    else free.push(session);
  };
  const statements = Object.fromEntries(
    STATEMENTS.map((name) => [
      name,
      async (params: unknown) => {
        const session = await take();
        try {
          return await (session[name] as (params: unknown) => Promise<unknown>).call(session, params);
        } catch (err) {
          await session.chdb.queryAsync('SELECT 1', { format: 'CSV' }).catch(() => undefined);
          throw err;
        } finally {
          give(session);
        }
      },
    ]),
  );
  return new Proxy(sessions[0]!, {
    get(target, property) {
      if (property in statements) return statements[property as string];
      if (property === 'close') return async () => void (await Promise.all(sessions.map((session) => session.close())));
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

// The integer types a value may be written as, with their bounds.
const INTEGER_BOUNDS: Record<string, [bigint, bigint]> = {
  UInt8: [0n, 2n ** 8n - 1n],
  UInt16: [0n, 2n ** 16n - 1n],
  UInt32: [0n, 2n ** 32n - 1n],
  UInt64: [0n, 2n ** 64n - 1n],
  Int8: [-(2n ** 7n), 2n ** 7n - 1n],
  Int16: [-(2n ** 15n), 2n ** 15n - 1n],
  Int32: [-(2n ** 31n), 2n ** 31n - 1n],
  Int64: [-(2n ** 63n), 2n ** 63n - 1n],
};

// Escapes of a quoted ClickHouse string: `\` and `'` end or change the literal; NUL and the control characters, for a readable statement.
const STRING_ESCAPES: Record<string, string> = { '\\': '\\\\', "'": "\\'", '\0': '\\0', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/** `a, b` of `Tuple(a, b)`: the commas outside parentheses. */
function tupleTypes(list: string): string[] {
  const types: string[] = [];
  let depth = 0;
  let from = 0;
  for (let i = 0; i < list.length; i++) {
    if (list[i] === '(') depth++;
    else if (list[i] === ')') depth--;
    else if (list[i] === ',' && depth === 0) {
      types.push(list.slice(from, i).trim());
      from = i + 1;
    }
  }
  return [...types, list.slice(from).trim()];
}

/** `value` as a ClickHouse literal of `type`; throws unless it is one. */
function literal(type: string, value: unknown): string {
  const composite = /^(Array|Tuple)\((.+)\)$/.exec(type);
  if (composite?.[1] === 'Array') {
    if (!Array.isArray(value)) throw new TypeError(`withLiterals: ${type} needs an array`);
    return `[${value.map((item) => literal(composite[2]!, item)).join(', ')}]`;
  }
  if (composite?.[1] === 'Tuple') {
    const types = tupleTypes(composite[2]!);
    if (!(value instanceof TupleParam) || value.values.length !== types.length) throw new TypeError(`withLiterals: ${type} needs a TupleParam of ${types.length} values`);
    return `tuple(${value.values.map((item, i) => literal(types[i]!, item)).join(', ')})`;
  }
  if (type === 'String') {
    if (typeof value !== 'string') throw new TypeError('withLiterals: String needs a string');
    return `'${value.replace(/[\\'\0\b\f\n\r\t]/g, (c) => STRING_ESCAPES[c]!)}'`;
  }
  const bounds = INTEGER_BOUNDS[type];
  if (!bounds) throw new TypeError(`withLiterals: no literal for ${type}`);
  // Also as decimal strings, as the bound path takes them (a 64-bit one beyond 2^53 can only come so).
  const n = typeof value === 'bigint' ? value : Number.isSafeInteger(value) ? BigInt(value as number) : typeof value === 'string' && /^-?\d{1,20}$/.test(value) ? BigInt(value) : undefined;
  if (n === undefined || n < bounds[0] || n > bounds[1]) throw new TypeError(`withLiterals: ${String(value)} is not a ${type}`);
  return String(n);
}

/**
 * `query` with each `{name:Type}` placeholder written as its value of `params`, a literal of that
 * type: the one place where values enter SQL text (requestReads). Types: String, (U)Int8–64, and
 * Array(…) and Tuple(…) of them, the ones src/ binds; any other type, a value not of its type (an
 * integer out of its type's range included) or a placeholder without a value throws. The literal
 * is CAST to the placeholder's type, so that it types the expression as the bound value would.
 */
export function withLiterals(query: string, params: Record<string, unknown>): string {
  return query.replace(/\{([A-Za-z_]\w*):([^{}]+)\}/g, (_, name: string, type: string) => {
    if (!Object.hasOwn(params, name)) throw new TypeError(`withLiterals: no value for {${name}:${type}}`);
    return `CAST(${literal(type, params[name])} AS ${type})`;
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
