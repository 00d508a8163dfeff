import fs from 'node:fs/promises';
import path from 'node:path';
import { ROOT } from '../paths.js';

export const SQL_DIR = path.join(ROOT, 'sql');

export interface Migration {
  version: number;
  name: string;
  script: string;
}

/** Reads `NNN_name.sql` files of a folder in version order; a gap or duplicate number is an error. */
export async function readMigrations(folder: string): Promise<Migration[]> {
  const files = (await fs.readdir(folder)).filter((f) => f.endsWith('.sql')).sort();
  const migrations: Migration[] = [];
  for (const file of files) {
    const match = /^(\d+)_([\w-]+)\.sql$/.exec(file);
    if (!match) throw new Error(`migration file name must look like 001_name.sql: ${path.join(folder, file)}`);
    const version = Number(match[1]);
    if (migrations.some((m) => m.version === version)) throw new Error(`two migrations numbered ${version} in ${folder}`);
    migrations.push({ version, name: match[2]!, script: await fs.readFile(path.join(folder, file), 'utf8') });
  }
  return migrations;
}

import type { Logger } from '../log.js';
import type { Db } from './postgres.js';
import { sql } from './sql.js';

/**
 * Applies the pending `sql/postgres` migrations, each once, in one transaction that holds an
 * advisory lock, so API processes starting together against one server do not race.
 */
export async function migratePostgres(db: Db, log: Logger, folder = path.join(SQL_DIR, 'postgres')): Promise<number> {
  const migrations = await readMigrations(folder);
  return db.transaction(async (tx) => {
    await tx.query(sql`select pg_advisory_xact_lock(7418230001)`);
    await tx.exec(`create table if not exists schema_migrations (
      version integer primary key,
      name text not null,
      applied_at timestamptz(3) not null default now()
    )`);
    const applied = new Set((await tx.query<{ version: number }>(sql`select version from schema_migrations`)).map((r) => r.version));
    let count = 0;
    for (const m of migrations) {
      if (applied.has(m.version)) continue;
      await tx.exec(m.script);
      await tx.query(sql`insert into schema_migrations (version, name) values (${m.version}, ${m.name})`);
      log.info({ store: 'postgres', version: m.version, migration: m.name }, 'migration applied');
      count++;
    }
    return count;
  });
}
