/**
 * Job leases (core/db/leases.ts, sql/postgres/007): one holder at a time, renewal by the holder,
 * takeover after expiry or release. On PGlite, and on the real Postgres when DATABASE_URL is set.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimLease, releaseLease } from '../../../core/db/leases.js';
import { sql } from '../../../core/db/sql.js';
import { startTestApp, type TestApp } from '../../support/app.js';

let t: TestApp;
beforeAll(async () => {
  t = await startTestApp();
}, 60_000);
afterAll(async () => {
  await t?.close();
});

describe('claimLease', () => {
  it('one holder at a time; the holder renews; another takes over once it expired', async () => {
    const db = t.runtime.db;
    expect(await claimLease(db, 'job-a', 'one', 60_000)).toBe(true);
    expect(await claimLease(db, 'job-a', 'two', 60_000)).toBe(false);
    expect(await claimLease(db, 'job-a', 'one', 60_000)).toBe(true);
    // Another job's lease is its own.
    expect(await claimLease(db, 'job-b', 'two', 60_000)).toBe(true);
    // The holder stops renewing: its lease runs out (moved into the past here) and 'two' takes it.
    await db.query(sql`UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE name = 'job-a'`);
    expect(await claimLease(db, 'job-a', 'two', 60_000)).toBe(true);
    expect(await claimLease(db, 'job-a', 'one', 60_000)).toBe(false);
  });

  it('a released lease is free at once; releasing another holder’s lease does nothing', async () => {
    const db = t.runtime.db;
    expect(await claimLease(db, 'job-c', 'one', 60_000)).toBe(true);
    await releaseLease(db, 'job-c', 'two');
    expect(await claimLease(db, 'job-c', 'two', 60_000)).toBe(false);
    await releaseLease(db, 'job-c', 'one');
    expect(await claimLease(db, 'job-c', 'two', 60_000)).toBe(true);
  });

  it('holder names with SQL metacharacters are plain values', async () => {
    const db = t.runtime.db;
    const hostile = "x'); DELETE FROM job_leases; --";
    expect(await claimLease(db, 'job-d', hostile, 60_000)).toBe(true);
    expect(await claimLease(db, 'job-d', 'other', 60_000)).toBe(false);
    expect((await db.query<{ holder: string }>(sql`SELECT holder FROM job_leases WHERE name = 'job-d'`))[0]!.holder).toBe(hostile);
  });
});
