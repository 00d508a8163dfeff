import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { loadJwtSecret } from './auth/tokens.js';
import type { Config } from '../core/config.js';
import type { Services } from './context.js';
import { lockDataDir, type DataDirLock } from './data-dir-lock.js';
import { secureDataDir } from './data-dir-perms.js';
import { migrateClickhouse, openClickhouse, type ClickHouseClient } from '../core/db/clickhouse.js';
import { migratePostgres } from '../core/db/migrate.js';
import { openDb, type Db } from '../core/db/postgres.js';
import { sql } from '../core/db/sql.js';
import type { Logger } from '../core/log.js';
import { createMailer } from './mail/mailer.js';
import { createReads } from './reads/client.js';
import { createUserRecord } from './users/service.js';

export interface Runtime extends Services {
  /** The DATA_DIR lock in embedded mode (its socket can take CLI commands: src/control/server.ts); null in server mode. */
  lock: DataDirLock | null;
  close(): Promise<void>;
}

/**
 * On an empty user table, creates the first administrator: ADMIN_EMAIL with ADMIN_PASSWORD, or a
 * random password written once to standard output. Never touches an existing installation.
 */
export async function bootstrapAdmin(db: Db, config: Config, log: Logger, announce: (line: string) => void): Promise<void> {
  await db.transaction(async (tx) => {
    await tx.query(sql`select pg_advisory_xact_lock(7418230002)`);
    const [row] = await tx.query<{ n: number }>(sql`select count(*)::int as n from users`);
    if (row && row.n > 0) return;
    const password = config.adminPassword ?? randomBytes(12).toString('base64url');
    const admin = await createUserRecord(tx, { name: 'Administrator', email: config.adminEmail, password, role: 'admin', active: true });
    log.info({ userId: admin.id, email: admin.email }, 'first administrator created');
    if (!config.adminPassword) {
      announce(`tailhouse: first administrator ${admin.email} created with password ${password} (shown once; change it after signing in)`);
    }
  });
}

/** Both stores, migrated, with what the migrations applied and one close for all. */
export interface Stores {
  db: Db;
  clickhouse: ClickHouseClient;
  applied: { postgres: number; clickhouse: number };
  lock: DataDirLock | null;
  /** Closes what was opened, in reverse order; closing twice is harmless. */
  close(): Promise<void>;
  /** Runs on close, before the stores close (for what was opened on top of them). */
  onClose(closer: () => Promise<void> | void): void;
}

/**
 * Refuses a DATA_DIR other users may reach (src/data-dir-perms.ts), locks it when an embedded store
 * is in use, opens both stores and applies their pending migrations: the common start of `serve`,
 * the other commands and `migrate`.
 */
export async function openStores(config: Config, log: Logger): Promise<Stores> {
  const embedded = !config.databaseUrl || !config.clickhouseUrl;
  // In server mode DATA_DIR holds only the outbox and the ingest checkpoints, and is made when first needed.
  secureDataDir(config.dataDir, log, { create: embedded });
  // The embedded stores bind DATA_DIR to one process (src/data-dir-lock.ts).
  const lock = embedded ? await lockDataDir(config.dataDir) : null;
  const closers: (() => Promise<void> | void)[] = [() => lock?.release()];
  // Closing twice (a signal during shutdown, a test's cleanup) is harmless.
  let closing: Promise<void> | undefined;
  const close = () =>
    (closing ??= (async () => {
      for (const closer of closers.reverse()) await closer();
    })());
  try {
    const db = await openDb(config);
    closers.push(() => db.close());
    const postgres = await migratePostgres(db, log);
    const clickhouse = await openClickhouse(config, log);
    closers.push(() => clickhouse.close());
    const applied = { postgres, clickhouse: await migrateClickhouse(clickhouse, log, { LOG_RETENTION_DAYS: config.logRetentionDays }) };
    return { db, clickhouse, applied, lock, close, onClose: (closer) => closers.push(closer) };
  } catch (err) {
    await close();
    throw err;
  }
}

/** Opens both stores (applying migrations), the mailer and the token secret. */
export async function openRuntime(config: Config, log: Logger, announce: (line: string) => void = (l) => process.stdout.write(`${l}\n`)): Promise<Runtime> {
  const { db, clickhouse, lock, close, onClose } = await openStores(config, log);
  try {
    const jwtSecret = await loadJwtSecret(config.jwtSecret, config.dataDir);
    const mailer = createMailer({ smtpUrl: config.smtpUrl, from: config.mailFrom, outboxDir: path.join(config.dataDir, 'outbox'), log });
    onClose(() => mailer.close());
    await bootstrapAdmin(db, config, log, announce);
    return { config, log, db, clickhouse, mailer, jwtSecret, reads: createReads(config), lock, close };
  } catch (err) {
    await close();
    throw err;
  }
}
