import fs from 'node:fs/promises';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import postgres from 'postgres';
import { makePrivate } from '../private-files.js';
import { compile, type SqlFragment } from './sql.js';

/**
 * The relational store as the rest of tailhouse sees it: bound-parameter queries and
 * transactions. Two implementations, one SQL dialect: PGlite (embedded) and a Postgres server.
 */
export interface Db {
  query<Row = Record<string, unknown>>(fragment: SqlFragment): Promise<Row[]>;
  /** Runs a script of several statements without parameters (migrations only). */
  exec(script: string): Promise<void>;
  /** Runs work in a transaction; called on a transaction's handle, it joins that transaction. */
  transaction<T>(work: (tx: Db) => Promise<T>): Promise<T>;
  close(): Promise<void>;
  readonly kind: 'pglite' | 'postgres';
}

export function isUniqueViolation(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { code?: unknown }).code === '23505';
}

export async function openPglite(dataDir: string): Promise<Db> {
  await fs.mkdir(dataDir, { recursive: true });
  // Postgres' default 128 MB of shared buffers is resident memory in PGlite's WebAssembly heap, far
  // more than the identity tables need: 16 MB takes about 140 MB off every embedded process.
  const pg = await PGlite.create({ dataDir, postgresqlconf: ['shared_buffers=16MB'] });
  // Its WebAssembly file system applies a umask of its own (022) and then sets each new file's
  // mode itself, whatever the process's: the files of a new database come out 0666, the relation
  // cache's 0644. Those are all written while it starts; what it writes later, Postgres asks 0600 for.
  makePrivate(dataDir);
  type Queryable = Pick<PGlite, 'query' | 'exec'>;
  const wrap = (handle: Queryable, transaction: Db['transaction']): Db => ({
    kind: 'pglite',
    async query<Row>(fragment: SqlFragment) {
      const { text, values } = compile(fragment);
      const result = await handle.query<Row>(text, values);
      return result.rows;
    },
    async exec(script: string) {
      await handle.exec(script);
    },
    transaction,
    close: () => pg.close(),
  });
  return wrap(pg, (work) =>
    pg.transaction((tx) => {
      const inner: Db = wrap(tx, (nested) => nested(inner));
      return work(inner);
    }),
  );
}

export async function openPostgres(url: string, options: { max?: number } = {}): Promise<Db> {
  const client = postgres(url, {
    max: options.max ?? 10,
    onnotice: () => {},
    // Dates come back as Date, bigint as string; stores convert what they need.
    connection: { application_name: 'tailhouse' },
  });
  type Handle = postgres.Sql | postgres.TransactionSql;
  const wrap = (handle: Handle, transaction: Db['transaction']): Db => ({
    kind: 'postgres',
    async query<Row>(fragment: SqlFragment) {
      const { text, values } = compile(fragment);
      const rows = await handle.unsafe(text, values as postgres.ParameterOrJSON<never>[], { prepare: true });
      return rows as unknown as Row[];
    },
    async exec(script: string) {
      await handle.unsafe(script);
    },
    transaction,
    close: () => client.end({ timeout: 5 }),
  });
  // Ensure the server answers now, so a wrong URL fails at start rather than at the first request.
  await client`select 1`;
  return wrap(client, (work) =>
    client.begin((tx) => {
      const inner: Db = wrap(tx, (nested) => nested(inner));
      return work(inner);
    }) as Promise<never>,
  );
}

export function openDb(options: { databaseUrl?: string; dataDir: string }): Promise<Db> {
  return options.databaseUrl ? openPostgres(options.databaseUrl) : openPglite(path.join(options.dataDir, 'postgres'));
}
