import { recordActivity, type ClientInfo } from '../../activity/store.js';
import type { Principal, Services } from '../../context.js';
import { resolveDomains } from '../../domains/service.js';
import { conflict, notFound } from '../../http/errors.js';
import { SILENCES_PER_USER } from '../limits.js';
import { nextWindow, windowAround } from '../recurrence.js';
import type { z } from '@hono/zod-openapi';
import type { CreateSilence, silenceSchema } from './schemas.js';
import { endSilence as endSilenceRow, findSilence, insertSilenceWithinCap, listSilences as listSilenceRows, type SilenceRow } from './store.js';

type Deps = Pick<Services, 'db'>;

export type Silence = z.infer<typeof silenceSchema>;

const iso = (ms: number) => new Date(ms).toISOString();

/** A silence as the API shows it at `nowMs`; a recurrence shows its current or next window. */
export function toSilence(row: SilenceRow, nowMs: number): Silence {
  let startsAt = row.starts_at === null ? null : new Date(row.starts_at).getTime();
  let endsAt = row.ends_at === null ? null : new Date(row.ends_at).getTime();
  if (row.recurrence !== null && row.ended_at === null) {
    const window = windowAround(row.recurrence, nowMs) ?? nextWindow(row.recurrence, nowMs);
    startsAt = window.startsAt;
    endsAt = window.endsAt;
  }
  const expired = row.ended_at !== null || (endsAt !== null && endsAt <= nowMs && row.recurrence === null);
  return {
    id: row.id,
    createdBy: row.created_by,
    domainIds: row.domain_ids ?? 'all',
    alertIds: row.alert_ids,
    startsAt: startsAt === null ? null : iso(startsAt),
    endsAt: endsAt === null ? null : iso(endsAt),
    recurrence: row.recurrence,
    comment: row.comment,
    state: expired ? 'expired' : startsAt !== null && startsAt <= nowMs ? 'active' : 'pending',
    endedAt: row.ended_at === null ? null : new Date(row.ended_at).toISOString(),
    createdAt: new Date(row.created_at).toISOString(),
  };
}

/** An administrator sees and ends every silence; another user its own. */
const ownerFilter = (principal: Principal): number | null => (principal.user.role === 'admin' ? null : principal.user.id);

/**
 * A silence over domains on which the caller may update alerts (alerts:update; each listed domain
 * must be visible, 404 otherwise; "all" means all of those, judged at each evaluation); at most
 * SILENCES_PER_USER in force or to come (409).
 */
export async function createSilence(deps: Deps, principal: Principal, body: CreateSilence, client: ClientInfo): Promise<Silence> {
  const ids = body.domainIds === 'all' ? null : body.domainIds;
  const domains = await resolveDomains(deps, principal, ids ?? [], ['alerts', 'update']);
  const silence = await addSilence(deps, principal.user.id, body);
  const over = ids === null ? 'every domain' : domains.length <= 3 ? domains.map((d) => d.name).join(', ') : `${domains.length} domains`;
  await recordActivity(deps.db, { userId: principal.user.id, action: 'silence.create', resource: `silences/${silence.id}`, details: `Silenced alerts on ${over}: ${body.comment.slice(0, 200)}` }, client);
  return silence;
}

/**
 * After the caller's rights were checked (createSilence, the command line): the silence, created
 * by `creatorId`, unless they already have SILENCES_PER_USER in force or to come (409).
 */
export async function addSilence(deps: Deps, creatorId: number, body: CreateSilence): Promise<Silence> {
  const ids = body.domainIds === 'all' ? null : body.domainIds;
  const now = new Date();
  const window = body.recurrence ? { recurrence: body.recurrence } : { startsAt: body.startsAt ? new Date(body.startsAt) : now, endsAt: new Date(body.endsAt!) };
  const row = await insertSilenceWithinCap(deps.db, creatorId, { domainIds: ids, alertIds: body.alertIds ?? null, window, comment: body.comment }, now, SILENCES_PER_USER);
  if (!row) throw conflict(`You already have ${SILENCES_PER_USER} silences in force or to come, the most a user may have; end one, or widen one, to add another`);
  return toSilence(row, now.getTime());
}

/** The caller's silences (an administrator's: everyone's) in force and to come, or past; alerts:read. */
export async function listSilences(deps: Deps, principal: Principal, state: 'active' | 'expired'): Promise<Silence[]> {
  await resolveDomains(deps, principal, [], ['alerts', 'read']);
  return silencesOf(deps, ownerFilter(principal), state);
}

/** After the caller's rights were checked: the silences of `creatorId` (everyone's when null) in force and to come, or past. */
export async function silencesOf(deps: Deps, creatorId: number | null, state: 'active' | 'expired'): Promise<Silence[]> {
  const now = new Date();
  return (await listSilenceRows(deps.db, creatorId, now, state === 'expired')).map((r) => toSilence(r, now.getTime()));
}

/** Ends a silence now (alerts:update); another user's silence is as unknown as a missing one. */
export async function endSilence(deps: Deps, principal: Principal, silenceId: number, client: ClientInfo): Promise<void> {
  await resolveDomains(deps, principal, [], ['alerts', 'update']);
  await finishSilence(deps, ownerFilter(principal), silenceId);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'silence.end', resource: `silences/${silenceId}`, details: `Ended silence ${silenceId}` }, client);
}

/**
 * After the caller's rights were checked (endSilence, the command line): ends a silence of
 * `creatorId` (anyone's when null) now; 404 for another user's or a missing one, 409 when it has
 * ended already.
 */
export async function finishSilence(deps: Deps, creatorId: number | null, silenceId: number): Promise<void> {
  const row = await findSilence(deps.db, silenceId);
  if (!row || (creatorId !== null && row.created_by !== creatorId)) throw notFound('Silence');
  if (!(await endSilenceRow(deps.db, silenceId, new Date()))) throw conflict('The silence has ended already');
}
