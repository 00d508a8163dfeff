/**
 * Leases in Postgres (sql/postgres/007_job_leases.sql) for background jobs that one process of
 * many should run at a time, when the job's rounds are too long to hold a transaction-scoped
 * advisory lock across them (in embedded mode that transaction would block every other query).
 */
import type { Db } from './postgres.js';
import { sql } from './sql.js';

/**
 * Takes or renews the lease `name` for `holder` until `ttlMs` from now; false while another
 * holder's lease is still valid. Postgres's clock decides expiry, so processes need no common clock.
 */
export async function claimLease(db: Db, name: string, holder: string, ttlMs: number): Promise<boolean> {
  const rows = await db.query<{ holder: string }>(sql`
    INSERT INTO job_leases (name, holder, expires_at)
    VALUES (${name}, ${holder}, now() + make_interval(secs => ${ttlMs / 1000}))
    ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE job_leases.holder = excluded.holder OR job_leases.expires_at < now()
    RETURNING holder`);
  return rows.length === 1;
}

/** Gives the lease up (on shutdown), so another process need not wait for it to expire. */
export async function releaseLease(db: Db, name: string, holder: string): Promise<void> {
  await db.query(sql`DELETE FROM job_leases WHERE name = ${name} AND holder = ${holder}`);
}
