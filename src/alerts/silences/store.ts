import type { Db } from '../../../core/db/postgres.js';
import { intArray, sql } from '../../../core/db/sql.js';
import { domainsReachedBy } from '../../domains/store.js';
import type { Recurrence } from '../recurrence.js';

const intArrayOrNull = (ids: readonly number[] | null) => (ids === null ? sql`null::integer[]` : intArray(ids));

export interface SilenceRow {
  id: number;
  created_by: number;
  /** null: every domain the creator may update alerts on, judged at evaluation. */
  domain_ids: number[] | null;
  /** null: every alert. */
  alert_ids: number[] | null;
  starts_at: Date | null;
  ends_at: Date | null;
  recurrence: Recurrence | null;
  comment: string;
  ended_at: Date | null;
  created_at: Date;
}

export interface NewSilence {
  domainIds: number[] | null;
  alertIds: number[] | null;
  window: { startsAt: Date; endsAt: Date } | { recurrence: Recurrence };
  comment: string;
}

/** The per-user advisory lock namespace under which a user's silences are counted and one is added. */
const USER_SILENCES_LOCK = 74_182_313;

/** In force or to come at `at`: not ended through the API, and a recurrence or a window not over. */
const live = (at: Date) => sql`s.ended_at is null and (s.recurrence is not null or s.ends_at > ${at})`;

/** Adds a silence unless its creator already has `max` in force or to come: null then (counted under a per-user lock). */
export async function insertSilenceWithinCap(db: Db, userId: number, s: NewSilence, at: Date, max: number): Promise<SilenceRow | null> {
  return db.transaction(async (tx) => {
    await tx.query(sql`select pg_advisory_xact_lock(${USER_SILENCES_LOCK}::int, ${userId}::int)`);
    const [held] = await tx.query<{ n: number }>(sql`select count(*)::int as n from alert_silences s where s.created_by = ${userId} and ${live(at)}`);
    if ((held?.n ?? 0) >= max) return null;
    const fixed = 'startsAt' in s.window ? s.window : null;
    const recurrence = 'recurrence' in s.window ? JSON.stringify(s.window.recurrence) : null;
    const [row] = await tx.query<SilenceRow>(sql`
      insert into alert_silences (created_by, domain_ids, alert_ids, starts_at, ends_at, recurrence, comment)
      values (${userId}, ${intArrayOrNull(s.domainIds)}, ${intArrayOrNull(s.alertIds)}, ${fixed?.startsAt ?? null}, ${fixed?.endsAt ?? null},
              ${recurrence}::text::jsonb, ${s.comment})
      returning *`);
    return row!;
  });
}

/**
 * Silences in force or to come (`expired` false) or past (true) at `at`, among those of
 * `creatorId` (every user's when null: an administrator), newest first.
 */
export async function listSilences(db: Db, creatorId: number | null, at: Date, expired: boolean): Promise<SilenceRow[]> {
  const whose = creatorId === null ? sql`true` : sql`s.created_by = ${creatorId}`;
  const when = expired ? sql`not (${live(at)})` : live(at);
  return db.query<SilenceRow>(sql`select s.* from alert_silences s where ${whose} and ${when} order by s.id desc limit 1000`);
}

export async function findSilence(db: Db, id: number): Promise<SilenceRow | undefined> {
  const [row] = await db.query<SilenceRow>(sql`select * from alert_silences where id = ${id}`);
  return row;
}

/** Ends a silence at `at` (it stays listed as expired); false when it had ended already. */
export async function endSilence(db: Db, id: number, at: Date): Promise<boolean> {
  const rows = await db.query(sql`update alert_silences s set ended_at = ${at} where s.id = ${id} and ${live(at)} returning id`);
  return rows.length > 0;
}

/** A live silence as evaluation and the API's states match it: the domains it covers now, resolved. */
export interface SilenceMatcher {
  id: number;
  alertIds: readonly number[] | null;
  domainIds: ReadonlySet<number>;
  startsAtMs: number | null;
  endsAtMs: number | null;
  recurrence: Recurrence | null;
}

/**
 * The silences in force or to come at `at`, each with the domains it covers now: those it names,
 * or every domain, among those on which its creator (an active user) is an editor at least
 * (domainsReachedBy), so that a silence never reaches a domain its creator could not silence now.
 */
export async function liveSilences(db: Db, at: Date): Promise<SilenceMatcher[]> {
  const rows = await db.query<{ id: number; alert_ids: number[] | null; starts_at: Date | null; ends_at: Date | null; recurrence: Recurrence | null; domains: number[] }>(sql`
    select s.id, s.alert_ids, s.starts_at, s.ends_at, s.recurrence,
           array(select r.domain_id from ${domainsReachedBy(sql`u`, 'editor')} r where s.domain_ids is null or r.domain_id = any(s.domain_ids)) as domains
    from alert_silences s join users u on u.id = s.created_by and u.active
    where ${live(at)}
    order by s.id`);
  return rows.map((r) => ({
    id: r.id,
    alertIds: r.alert_ids,
    domainIds: new Set(r.domains.map(Number)),
    startsAtMs: r.starts_at === null ? null : new Date(r.starts_at).getTime(),
    endsAtMs: r.ends_at === null ? null : new Date(r.ends_at).getTime(),
    recurrence: r.recurrence,
  }));
}
