import type { Db } from '../db/postgres.js';
import { sql } from '../db/sql.js';

export interface RefreshTokenRow {
  id: string | number;
  user_id: number;
  family: string;
  expires_at: Date;
  used_at: Date | null;
  revoked_at: Date | null;
}

export async function insertRefreshToken(db: Db, token: { userId: number; family: string; hash: string; expiresAt: Date }): Promise<void> {
  await db.query(sql`
    insert into refresh_tokens (user_id, family, token_hash, expires_at)
    values (${token.userId}, ${token.family}, ${token.hash}, ${token.expiresAt})`);
}

/**
 * Spends a live token: marks it used and returns it, or undefined when it is unknown, already
 * spent or revoked. Row locking makes the check and the mark one step, so a token rotates once.
 */
export async function spendRefreshToken(db: Db, hash: string): Promise<RefreshTokenRow | undefined> {
  const [row] = await db.query<RefreshTokenRow>(sql`
    update refresh_tokens set used_at = now()
    where token_hash = ${hash} and used_at is null and revoked_at is null
    returning *`);
  return row;
}

export async function revokeFamily(db: Db, family: string): Promise<void> {
  await db.query(sql`update refresh_tokens set revoked_at = now() where family = ${family} and revoked_at is null`);
}

export async function findRefreshToken(db: Db, hash: string): Promise<RefreshTokenRow | undefined> {
  const [row] = await db.query<RefreshTokenRow>(sql`select * from refresh_tokens where token_hash = ${hash}`);
  return row;
}

// --- personal access tokens ---

export interface ApiTokenRow {
  id: number;
  user_id: number;
  name: string;
  last_used_at: Date | null;
  revoked_at: Date | null;
  created_at: Date;
}

export async function insertApiToken(db: Db, token: { userId: number; name: string; hash: string }): Promise<ApiTokenRow> {
  const [row] = await db.query<ApiTokenRow>(sql`
    insert into api_tokens (user_id, name, token_hash) values (${token.userId}, ${token.name}, ${token.hash})
    returning id, user_id, name, last_used_at, revoked_at, created_at`);
  return row!;
}

/** The owner of a live token, marking it used. */
export async function useApiToken(db: Db, hash: string): Promise<number | undefined> {
  const [row] = await db.query<{ user_id: number }>(sql`
    update api_tokens set last_used_at = now() where token_hash = ${hash} and revoked_at is null returning user_id`);
  return row?.user_id;
}

export async function listApiTokens(db: Db, userId: number): Promise<ApiTokenRow[]> {
  return db.query<ApiTokenRow>(sql`
    select id, user_id, name, last_used_at, revoked_at, created_at from api_tokens where user_id = ${userId} order by id`);
}

export async function revokeApiToken(db: Db, id: number): Promise<boolean> {
  return (await db.query(sql`update api_tokens set revoked_at = now() where id = ${id} and revoked_at is null returning id`)).length > 0;
}

// --- password reset links ---

export async function insertPasswordReset(db: Db, reset: { userId: number; hash: string; expiresAt: Date }): Promise<void> {
  await db.query(sql`insert into password_resets (user_id, token_hash, expires_at) values (${reset.userId}, ${reset.hash}, ${reset.expiresAt})`);
}

/** Spends a live reset token once; undefined for an unknown, used or expired one. */
export async function spendPasswordReset(db: Db, hash: string): Promise<number | undefined> {
  const [row] = await db.query<{ user_id: number }>(sql`
    update password_resets set used_at = now()
    where token_hash = ${hash} and used_at is null and expires_at > now() returning user_id`);
  return row?.user_id;
}

// --- login throttling ---

export const THROTTLE_WINDOW_S = 15 * 60;
export const THROTTLE_MAX_FAILURES = 10;

/**
 * Seconds until the client may try again, or 0: blocked while the e-mail or the address has
 * THROTTLE_MAX_FAILURES failures in the window, until the oldest of those leaves it.
 */
export async function throttleDelay(db: Db, email: string, ipAddress: string): Promise<number> {
  const [row] = await db.query<{ by_email: number; by_ip: number; email_free_in: number | null; ip_free_in: number | null }>(sql`
    with recent as (
      select email, ip_address, failed_at from login_failures
      where (email = ${email} or ip_address = ${ipAddress}) and failed_at > now() - make_interval(secs => ${THROTTLE_WINDOW_S})
    )
    select
      count(*) filter (where email = ${email})::int as by_email,
      count(*) filter (where ip_address = ${ipAddress})::int as by_ip,
      extract(epoch from min(failed_at) filter (where email = ${email}) + make_interval(secs => ${THROTTLE_WINDOW_S}) - now())::float8 as email_free_in,
      extract(epoch from min(failed_at) filter (where ip_address = ${ipAddress}) + make_interval(secs => ${THROTTLE_WINDOW_S}) - now())::float8 as ip_free_in
    from recent`);
  if (!row) return 0;
  const waits = [
    row.by_email >= THROTTLE_MAX_FAILURES ? Number(row.email_free_in) : 0,
    row.by_ip >= THROTTLE_MAX_FAILURES ? Number(row.ip_free_in) : 0,
  ];
  return Math.max(0, Math.ceil(Math.max(...waits)));
}

export async function recordLoginFailure(db: Db, email: string, ipAddress: string): Promise<void> {
  await db.query(sql`insert into login_failures (email, ip_address) values (${email}, ${ipAddress})`);
  // Keep the table to the window's size.
  await db.query(sql`delete from login_failures where failed_at < now() - make_interval(secs => ${THROTTLE_WINDOW_S})`);
}

export async function clearLoginFailures(db: Db, email: string): Promise<void> {
  await db.query(sql`delete from login_failures where email = ${email}`);
}
