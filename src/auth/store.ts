import type { Db } from '../../core/db/postgres.js';
import { join, sql } from '../../core/db/sql.js';

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

export async function revokeApiToken(db: Db, id: number, userId?: number): Promise<boolean> {
  const owner = userId === undefined ? sql`true` : sql`user_id = ${userId}`;
  return (await db.query(sql`update api_tokens set revoked_at = now() where id = ${id} and ${owner} and revoked_at is null returning id`)).length > 0;
}

// --- password reset links ---

export async function insertPasswordReset(db: Db, reset: { userId: number; hash: string; expiresAt: Date }): Promise<void> {
  await db.query(sql`insert into password_resets (user_id, token_hash, expires_at) values (${reset.userId}, ${reset.hash}, ${reset.expiresAt})`);
}

/** Voids every reset link of the user not yet used (a newer link, a new password or e-mail). */
export async function cancelPasswordResets(db: Db, userId: number): Promise<void> {
  await db.query(sql`delete from password_resets where user_id = ${userId} and used_at is null`);
}

/** Whether a reset token is live (unknown, used and expired ones are not): a lookup, nothing spent. */
export async function isLivePasswordReset(db: Db, hash: string): Promise<boolean> {
  const rows = await db.query(sql`select 1 from password_resets where token_hash = ${hash} and used_at is null and expires_at > now()`);
  return rows.length > 0;
}

/** Spends a live reset token once; undefined for an unknown, used or expired one. */
export async function spendPasswordReset(db: Db, hash: string): Promise<number | undefined> {
  const [row] = await db.query<{ user_id: number }>(sql`
    update password_resets set used_at = now()
    where token_hash = ${hash} and used_at is null and expires_at > now() returning user_id`);
  return row?.user_id;
}

// --- throttles (policy in throttle.ts) ---

export interface ThrottleKey {
  scope: string;
  key: string;
}

export interface ThrottleCount extends ThrottleKey {
  /** failed attempts of the current window */
  failures: number;
  /** attempts under way, this one included */
  inFlight: number;
  /** seconds until the current window ends */
  freeIn: number;
}

/**
 * Counts one attempt under way against each key, in one statement: each row is locked while it is
 * incremented, so N concurrent attempts see N distinct counts. A window older than `windowS`
 * starts again empty (attempts still under way from before it are forgotten: at a boundary the
 * new window may see a few more). Rows are locked in the order given; every caller lists its
 * scopes in one global order (see throttle.ts), so two attempts cannot wait on each other.
 */
export async function reserveAttempt(db: Db, keys: ThrottleKey[], windowS: number): Promise<ThrottleCount[]> {
  const rows = join(keys.map((k) => sql`(${k.scope}, ${k.key})`), sql`, `);
  const expired = sql`t.window_start <= now() - make_interval(secs => ${windowS})`;
  const counted = await db.query<{ scope: string; key: string; failures: number; in_flight: number; free_in: number }>(sql`
    insert into auth_throttles as t (scope, key, window_start, failures, in_flight)
    select scope, key, now(), 0, 1 from (values ${rows}) as v (scope, key)
    on conflict (scope, key) do update set
      window_start = case when ${expired} then now() else t.window_start end,
      failures = case when ${expired} then 0 else t.failures end,
      in_flight = case when ${expired} then 1 else t.in_flight + 1 end
    returning scope, key, failures, in_flight, extract(epoch from window_start + make_interval(secs => ${windowS}) - now())::float8 as free_in`);
  return counted.map((r) => ({ scope: r.scope, key: r.key, failures: Number(r.failures), inFlight: Number(r.in_flight), freeIn: Number(r.free_in) }));
}

/** The current windows' counts of some keys, read only (keys without a current window are left out). */
export async function readThrottles(db: Db, keys: ThrottleKey[], windowS: number): Promise<Omit<ThrottleCount, 'freeIn'>[]> {
  const wanted = join(keys.map((k) => sql`(${k.scope}, ${k.key})`), sql`, `);
  const rows = await db.query<{ scope: string; key: string; failures: number; in_flight: number }>(sql`
    select scope, key, failures, in_flight from auth_throttles
    where (scope, key) in (${wanted}) and window_start > now() - make_interval(secs => ${windowS})`);
  return rows.map((r) => ({ scope: r.scope, key: r.key, failures: Number(r.failures), inFlight: Number(r.in_flight) }));
}

/**
 * Ends an attempt counted by reserveAttempt, in one statement: it leaves `in_flight` of each key,
 * whose `failures` grows by one (`count`), is cleared (`clear`) or stays (`none`). The rows are
 * locked in the order given, as reserveAttempt locks them, so the two cannot wait on each other.
 */
export async function settleAttempt(db: Db, outcomes: (ThrottleKey & { failures: 'count' | 'clear' | 'none' })[]): Promise<void> {
  const rows = join(
    outcomes.map((o, i) => sql`(${i}::int, ${o.scope}, ${o.key}, ${o.failures})`),
    sql`, `,
  );
  await db.query(sql`
    with outcome (ord, scope, key, failures) as (values ${rows}),
    locked as (
      select t.scope, t.key, outcome.failures from auth_throttles t join outcome on t.scope = outcome.scope and t.key = outcome.key
      order by outcome.ord for update of t
    )
    update auth_throttles t set
      failures = case locked.failures when 'count' then t.failures + 1 when 'clear' then 0 else t.failures end,
      in_flight = greatest(t.in_flight - 1, 0)
    from locked where t.scope = locked.scope and t.key = locked.key`);
}

/**
 * Counts one failure against a key, in one statement, and returns the window's failures, this one
 * included: for checks too cheap to guard (a token lookup), counted after them. A key already past
 * `max` is only read, not written again: a flood from one client then costs no row versions.
 */
export async function countFailure(db: Db, key: ThrottleKey, windowS: number, max: number): Promise<{ failures: number; freeIn: number }> {
  const window = sql`make_interval(secs => ${windowS})`;
  const expired = sql`t.window_start <= now() - ${window}`;
  const [row] = await db.query<{ failures: number; free_in: number }>(sql`
    with past as (
      select failures, window_start from auth_throttles
      where scope = ${key.scope} and key = ${key.key} and failures > ${max} and window_start > now() - ${window}
    ), counted as (
      insert into auth_throttles as t (scope, key, window_start, failures, in_flight)
      select ${key.scope}, ${key.key}, now(), 1, 0 where not exists (select 1 from past)
      on conflict (scope, key) do update set
        window_start = case when ${expired} then now() else t.window_start end,
        failures = case when ${expired} then 1 else t.failures + 1 end,
        in_flight = case when ${expired} then 0 else t.in_flight end
      returning failures, window_start
    )
    select failures, extract(epoch from window_start + ${window} - now())::float8 as free_in
    from (select failures, window_start from counted union all select failures, window_start from past) as now_counted`);
  return { failures: Number(row!.failures), freeIn: Number(row!.free_in) };
}

/** Drops counters whose window is over; rows another statement holds are left for next time. */
export async function pruneThrottles(db: Db, windowS: number): Promise<void> {
  await db.query(sql`
    delete from auth_throttles t using (
      select scope, key from auth_throttles where window_start < now() - make_interval(secs => ${windowS})
      limit 1000 for update skip locked
    ) old
    where t.scope = old.scope and t.key = old.key`);
}

// --- addresses an account signed in from ---

export const KNOWN_ADDRESS_TTL_DAYS = 30;

/** Whether the account with this e-mail signed in from the address within KNOWN_ADDRESS_TTL_DAYS. */
export async function isKnownLoginAddress(db: Db, email: string, address: string): Promise<boolean> {
  const rows = await db.query(sql`
    select 1 from login_known_addresses k join users u on u.id = k.user_id
    where u.email = ${email} and k.address = ${address} and k.last_login_at > now() - make_interval(days => ${KNOWN_ADDRESS_TTL_DAYS})`);
  return rows.length > 0;
}
