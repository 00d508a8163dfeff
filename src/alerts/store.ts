import type { Db } from '../../core/db/postgres.js';
import { selectPage, type PageRequest } from '../../core/db/paging.js';
import { intArray, sql } from '../../core/db/sql.js';
import { domainsReachedBy, visibleToUser } from '../domains/store.js';
import { dropPendingEvents } from './outbox.js';
import type { AlertDefinition, AlertScope, Condition, FilterTuple, NotificationMethod, Operator } from './schemas.js';


export type AlertState = 'ok' | 'firing';

export interface AlertRow {
  id: number;
  /** A domain's alert: its domain; a rule over many domains: null. */
  domain_id: number | null;
  scope: 'domain' | 'domains' | 'all';
  scope_domain_ids: number[] | null;
  filters: FilterTuple[];
  name: string;
  condition: Condition;
  operator: Operator;
  threshold: number;
  duration: number;
  notification_method: NotificationMethod;
  notification_target: string;
  enabled: boolean;
  created_by: number | null;
  last_delivery_error: string | null;
  last_delivered_at: Date | null;
  created_at: Date;
  updated_at: Date;
  /** Of its domains' states (alert_states): how many fire, and when one last started to. */
  firing: number;
  last_triggered_at: Date | null;
}

export interface Alert extends AlertDefinition {
  id: number;
  /** A domain's alert: its domain; a rule: null. */
  domainId: number | null;
  scope: AlertScope;
  /** Who created it (null: a deleted user). */
  createdBy: number | null;
  /** firing when it fires on any domain it covers. */
  state: AlertState;
  lastTriggeredAt: string | null;
  /** Beyond the specification: the last failed delivery's error, cleared by the next success. */
  lastDeliveryError: string | null;
  /** Beyond the specification: when a notification was last delivered. */
  lastDeliveredAt: string | null;
  createdAt: string;
}

const isoOrNull = (d: Date | null) => (d === null ? null : new Date(d).toISOString());

const scopeOf = (row: Pick<AlertRow, 'scope' | 'domain_id' | 'scope_domain_ids'>): AlertScope =>
  row.scope === 'all' ? { domains: 'all' } : { domainIds: row.scope === 'domain' ? [row.domain_id!] : [...row.scope_domain_ids!] };

/** The fields a create takes whole and an update in part, as the API shows them. */
export const definitionOf = (row: AlertRow): AlertDefinition => ({
  name: row.name,
  condition: row.condition,
  operator: row.operator,
  threshold: Number(row.threshold),
  duration: row.duration,
  filters: row.filters,
  notificationMethod: row.notification_method,
  notificationTarget: row.notification_target,
  enabled: row.enabled,
});

export const toAlert = (row: AlertRow): Alert => ({
  id: row.id,
  domainId: row.domain_id,
  scope: scopeOf(row),
  ...definitionOf(row),
  createdBy: row.created_by,
  state: row.firing > 0 ? 'firing' : 'ok',
  lastTriggeredAt: isoOrNull(row.last_triggered_at),
  lastDeliveryError: row.last_delivery_error,
  lastDeliveredAt: isoOrNull(row.last_delivered_at),
  createdAt: new Date(row.created_at).toISOString(),
});

/** The user who sets an alert's definition, as named when they do: what its notifications say. */
export interface Configurer {
  id: number;
  name: string;
  email: string;
}

/** alerts a, with its states' summary (AlertRow.firing, last_triggered_at). */
const ALERT_COLUMNS = sql`
  a.*, coalesce(s.firing, 0)::int as firing, s.last_triggered_at
  from alerts a left join lateral (
    select count(*) filter (where st.state = 'firing') as firing, max(st.last_triggered_at) as last_triggered_at
    from alert_states st where st.alert_id = a.id
  ) s on true`;

/**
 * The namespace of the per-domain advisory lock (two-key form: namespace, domain id) under which
 * a domain's alerts are counted and one is added, and of the per-user one (namespace + 2) for a
 * user's rules and silences; the single-key locks (migrations, bootstrap, evaluator) live in a
 * separate key space.
 */
const DOMAIN_ALERTS_LOCK = 74_182_310;
export const USER_RULES_LOCK = 74_182_312;

/** Where a new alert applies: one domain (a domain's alert), or a rule's scope. */
export type Placement = { domainId: number } | { scope: AlertScope };

/**
 * Adds an alert unless its owner already holds `max`: a domain's alerts (per domain), or the
 * rules its creator made (per user); null then. The count and the insert run in one transaction
 * under an advisory lock, so concurrent creations (any process) never overshoot.
 */
export async function insertAlertWithinCap(db: Db, placement: Placement, by: Configurer, d: AlertDefinition, max: number): Promise<AlertRow | null> {
  return db.transaction(async (tx) => {
    const onDomain = 'domainId' in placement;
    if (onDomain) {
      await tx.query(sql`select pg_advisory_xact_lock(${DOMAIN_ALERTS_LOCK}::int, ${placement.domainId}::int)`);
      const [held] = await tx.query<{ n: number }>(sql`select count(*)::int as n from alerts where domain_id = ${placement.domainId}`);
      if ((held?.n ?? 0) >= max) return null;
    } else {
      await tx.query(sql`select pg_advisory_xact_lock(${USER_RULES_LOCK}::int, ${by.id}::int)`);
      const [held] = await tx.query<{ n: number }>(sql`select count(*)::int as n from alerts where domain_id is null and created_by = ${by.id}`);
      if ((held?.n ?? 0) >= max) return null;
    }
    const scope = onDomain ? 'domain' : 'domains' in placement.scope ? 'all' : 'domains';
    const domainId = onDomain ? placement.domainId : null;
    const listed = !onDomain && 'domainIds' in placement.scope ? intArray(placement.scope.domainIds) : sql`null`;
    const [row] = await tx.query<{ id: number }>(sql`
      insert into alerts (domain_id, scope, scope_domain_ids, filters, name, condition, operator, threshold, duration, notification_method, notification_target, enabled,
                          created_by, configured_by, configured_by_name, configured_by_email)
      values (${domainId}, ${scope}, ${listed}, ${JSON.stringify(d.filters)}::text::jsonb, ${d.name}, ${d.condition}, ${d.operator}, ${d.threshold}, ${d.duration},
              ${d.notificationMethod}, ${d.notificationTarget}, ${d.enabled}, ${by.id}, ${by.id}, ${by.name}, ${by.email})
      returning id`);
    return (await selectAlert(tx, row!.id))!;
  });
}

async function selectAlert(db: Db, id: number): Promise<AlertRow | undefined> {
  const [row] = await db.query<AlertRow>(sql`select ${ALERT_COLUMNS} where a.id = ${id}`);
  return row;
}

export async function listAlerts(db: Db, domainId: number): Promise<AlertRow[]> {
  return db.query<AlertRow>(sql`select ${ALERT_COLUMNS} where a.domain_id = ${domainId} order by a.id`);
}

/**
 * The alerts a user may read in the list of all alerts: the domains' alerts of `domainIds` (those
 * the user sees) and the rules `creatorId` made (every rule when null: an administrator).
 */
export async function listVisibleAlerts(db: Db, domainIds: readonly number[], creatorId: number | null): Promise<AlertRow[]> {
  const rules = creatorId === null ? sql`a.domain_id is null` : sql`(a.domain_id is null and a.created_by = ${creatorId})`;
  return db.query<AlertRow>(sql`select ${ALERT_COLUMNS} where a.domain_id = any(${intArray(domainIds)}) or ${rules} order by a.id`);
}

/** The alert by id, of either kind. */
export const findAlertById = (db: Db, alertId: number) => selectAlert(db, alertId);

/** The alert if it belongs to the domain: another domain's alert id is as unknown as a missing one. */
export async function findAlert(db: Db, domainId: number, alertId: number): Promise<AlertRow | undefined> {
  const row = await selectAlert(db, alertId);
  return row?.domain_id === domainId ? row : undefined;
}

/** Replaces the definition (and a rule's scope); `by` becomes the alert's configurer (what its notifications name). */
export async function updateAlert(db: Db, alertId: number, d: AlertDefinition, scope: AlertScope | null, by: Configurer): Promise<AlertRow | undefined> {
  return db.transaction(async (tx) => {
    const scopeSet =
      scope === null
        ? sql``
        : 'domains' in scope
          ? sql`, scope = 'all', scope_domain_ids = null`
          : sql`, scope = 'domains', scope_domain_ids = ${intArray(scope.domainIds)}`;
    const rows = await tx.query<{ id: number }>(sql`
      update alerts
      set name = ${d.name}, condition = ${d.condition}, operator = ${d.operator}, threshold = ${d.threshold}, duration = ${d.duration},
          filters = ${JSON.stringify(d.filters)}::text::jsonb, notification_method = ${d.notificationMethod}, notification_target = ${d.notificationTarget},
          enabled = ${d.enabled}, updated_at = now(), configured_by = ${by.id}, configured_by_name = ${by.name}, configured_by_email = ${by.email} ${scopeSet}
      where id = ${alertId}
      returning id`);
    return rows.length === 0 ? undefined : selectAlert(tx, alertId);
  });
}

/** Deletes the alert, and its events from the notifications not sent yet (its states go with it). */
export async function deleteAlert(db: Db, alertId: number): Promise<boolean> {
  return db.transaction(async (tx) => {
    const rows = await tx.query(sql`delete from alerts where id = ${alertId} returning id`);
    if (rows.length > 0) await dropPendingEvents(tx, { alertId });
    return rows.length > 0;
  });
}

// ---------------------------------------------------------------------------------------------
// Per-domain states, as the API shows them
// ---------------------------------------------------------------------------------------------

export interface DomainStateRow {
  alert_id: number;
  domain_id: number;
  domain_name: string;
  state: AlertState;
  state_changed_at: Date | null;
}

/** The states of `alertIds` on the domains among `domainIds` (those the reader sees), by alert and domain. */
export async function statesOf(db: Db, alertIds: readonly number[], domainIds: readonly number[], onlyFiring = false): Promise<DomainStateRow[]> {
  return db.query<DomainStateRow>(sql`
    select s.alert_id, s.domain_id, d.name as domain_name, s.state, s.state_changed_at
    from alert_states s join domains d on d.id = s.domain_id
    join alerts a on a.id = s.alert_id
    where s.alert_id = any(${intArray(alertIds)}) and s.domain_id = any(${intArray(domainIds)})
      and ${onlyFiring ? sql`s.state = 'firing' and a.enabled` : sql`true`}
    order by s.alert_id, s.domain_id`);
}

/** The domains an alert covers now (its domain, its list, or every domain its creator sees), among `domainIds`. */
export async function coveredDomains(db: Db, alertId: number, domainIds: readonly number[]): Promise<{ id: number; name: string }[]> {
  return db.query<{ id: number; name: string }>(sql`
    select d.id, d.name from (${PAIRS}) p join domains d on d.id = p.domain_id
    where p.alert_id = ${alertId} and d.id = any(${intArray(domainIds)})
    order by d.id`);
}

/** The rules (not domains' alerts) covering a domain now, among the rules `creatorId` made (every rule when null). */
export async function rulesCovering(db: Db, domainId: number, creatorId: number | null): Promise<AlertRow[]> {
  const mine = creatorId === null ? sql`true` : sql`a.created_by = ${creatorId}`;
  return db.query<AlertRow>(sql`
    select ${ALERT_COLUMNS}
    where a.domain_id is null and ${mine} and a.id in (select p.alert_id from (${PAIRS}) p where p.domain_id = ${domainId})
    order by a.id`);
}

/** The last round's values: {"alertId": {"domainId": value}}. */
export async function lastValues(db: Db): Promise<Record<string, Record<string, number | null>>> {
  const [row] = await db.query<{ last_values: Record<string, Record<string, number | null>> }>(sql`select last_values from alert_evaluator where id = 1`);
  return row?.last_values ?? {};
}

// ---------------------------------------------------------------------------------------------
// Evaluation (src/alerts/evaluator.ts)
// ---------------------------------------------------------------------------------------------

/**
 * Every enabled alert's (alert, domain) pairs: a domain's alert with its domain; a rule with each
 * domain of its scope that its creator, an active user, sees now (domainsReachedBy, the one rule
 * of who sees what, read from the creator's grants). Two branches, each joined on what it can use
 * an index for.
 */
const PAIRS = sql`
  select a.id as alert_id, a.domain_id from alerts a where a.enabled and a.domain_id is not null
  union all
  select a.id, r.domain_id from alerts a
  join users u on u.id = a.created_by and u.active
  join lateral ${domainsReachedBy(sql`u`)} r on a.scope = 'all' or r.domain_id = any(a.scope_domain_ids)
  where a.enabled and a.domain_id is null`;

/** The advisory lock of the evaluator's transactions (migrations hold …0001, the bootstrap …0002). */
const EVALUATOR_LOCK = 7418230005;

/**
 * The first transaction of a round: the advisory lock if free (else another process is claiming or
 * applying a round this instant: skip), then the claim of the round ledger, which succeeds only if
 * the last claimed round is older than `intervalStart` (the start of the interval `at` falls in):
 * one round per interval whichever process ticks first. A ledger nobody claimed for `staleAfterS`
 * seconds of the database's own clock is taken whatever it says, so a process whose clock once ran
 * far ahead cannot stop evaluation until real time catches up.
 */
export async function claimRound(tx: Db, round: { at: Date; intervalStart: Date; holder: string; staleAfterS: number }): Promise<'claimed' | 'busy' | 'taken'> {
  const [lock] = await tx.query<{ locked: boolean }>(sql`select pg_try_advisory_xact_lock(${EVALUATOR_LOCK}) as locked`);
  if (!lock?.locked) return 'busy';
  const rows = await tx.query(sql`
    update alert_evaluator set round_at = ${round.at}, holder = ${round.holder}, claimed_db_at = now()
    where id = 1 and (round_at is null or round_at < ${round.intervalStart} or claimed_db_at < now() - make_interval(secs => ${round.staleAfterS}))
    returning id`);
  return rows.length > 0 ? 'claimed' : 'taken';
}

/**
 * Waits until no round is being applied, and holds the next one off until the caller's transaction
 * ends: a revocation (src/domains/members-store.ts) then either precedes an apply, which sees it
 * (saveStates), or follows one, whose notifications it can still take the domain out of.
 */
export async function holdEvaluatorApply(tx: Db): Promise<void> {
  await tx.query(sql`select pg_advisory_xact_lock(${EVALUATOR_LOCK})`);
}

/**
 * The second transaction of a round: waits for the advisory lock (held only by short transactions,
 * never across ClickHouse or delivery), then checks that the ledger still holds this round; false:
 * another round was claimed while this one measured, and its newer figures apply instead.
 */
export async function lockRoundForApply(tx: Db, round: { at: Date; holder: string }): Promise<boolean> {
  await tx.query(sql`set local lock_timeout = '10s'`);
  await tx.query(sql`select pg_advisory_xact_lock(${EVALUATOR_LOCK})`);
  const [row] = await tx.query<{ current: boolean }>(sql`
    select round_at = ${round.at} and holder = ${round.holder} as current from alert_evaluator where id = 1`);
  return row?.current === true;
}

/**
 * What a round needs of an enabled alert on one domain it covers: the alert's definition and
 * target, its version (updated_at), the domain's name, and the pair's state machine.
 *
 * Read once, in the claim transaction, under the evaluator's advisory lock. Only a round's apply
 * writes the states, and an apply goes ahead only if the ledger still holds its own round; after
 * this claim, that is this round alone (an older round's apply finds the ledger moved on, and one
 * that was applying at the claim held the lock, so the claim found it busy). So the states read
 * here are still current when this round applies, without re-reading or row-locking them. A PUT
 * or DELETE in between is caught by saveEvaluations.
 */
export interface EvaluationPair {
  alert_id: number;
  domain_id: number;
  domain_name: string;
  name: string;
  condition: Condition;
  operator: Operator;
  threshold: number;
  duration: number;
  filters: FilterTuple[];
  notification_method: NotificationMethod;
  notification_target: string;
  configured_by_name: string | null;
  configured_by_email: string | null;
  /** A rule's creator; null: a domain's alert. */
  rule_owner: number | null;
  updated_at: Date;
  /** Null: a pair without a state row yet (a new alert, or a domain new to a rule's scope): ok. */
  state: AlertState | null;
  state_changed_at: Date | null;
  last_triggered_at: Date | null;
  notified_state: AlertState | null;
  last_notified_at: Date | null;
}

/**
 * Every enabled alert's pairs with their states, and the states of those alerts' pairs that no
 * longer are any (a domain that left a rule's scope: dropLeftStates forgets them).
 *
 * Read in four small answers and joined here: the alerts' definitions once each, each pair as two
 * integers, the states that exist, and the domains' names. Selecting a row of 20 columns per pair
 * (each alert's text repeated for each of its domains) cost 0.6–2 s at 10,000 pairs in PGlite,
 * moving rows into JavaScript, where the join itself takes 80 ms (bench/README, "bench/alerts").
 */
export async function evaluationPairs(db: Db): Promise<{ pairs: EvaluationPair[]; left: { alertId: number; domainId: number }[] }> {
  type AlertDefinitionRow = Omit<EvaluationPair, 'domain_id' | 'domain_name' | 'state' | 'state_changed_at' | 'last_triggered_at' | 'notified_state' | 'last_notified_at'>;
  const alerts = await db.query<AlertDefinitionRow>(sql`
    select a.id as alert_id, a.name, a.condition, a.operator, a.threshold, a.duration, a.filters, a.notification_method, a.notification_target,
           a.configured_by_name, a.configured_by_email, a.updated_at, case when a.domain_id is null then a.created_by end as rule_owner
    from alerts a where a.enabled order by a.id`);
  if (alerts.length === 0) return { pairs: [], left: [] };
  const [pairs] = await db.query<{ alert_ids: number[] | null; domain_ids: number[] | null }>(sql`
    select array_agg(p.alert_id order by p.alert_id, p.domain_id) as alert_ids, array_agg(p.domain_id order by p.alert_id, p.domain_id) as domain_ids
    from (${PAIRS}) p`);
  const states = await db.query<{ alert_id: number; domain_id: number; state: AlertState; state_changed_at: Date | null; last_triggered_at: Date | null; notified_state: AlertState; last_notified_at: Date | null }>(sql`
    select s.* from alert_states s join alerts a on a.id = s.alert_id where a.enabled`);
  const names = new Map((await db.query<{ id: number; name: string }>(sql`select id, name from domains`)).map((d) => [d.id, d.name]));
  const alertById = new Map(alerts.map((a) => [a.alert_id, a]));
  const stateOf = new Map(states.map((st) => [`${st.alert_id}:${st.domain_id}`, st]));
  const alertIds = pairs?.alert_ids ?? [];
  const domainIds = pairs?.domain_ids ?? [];
  const result: EvaluationPair[] = alertIds.map((alertId, i) => {
    const domainId = domainIds[i]!;
    const key = `${alertId}:${domainId}`;
    const st = stateOf.get(key);
    stateOf.delete(key);
    return {
      ...alertById.get(alertId)!,
      domain_id: domainId,
      domain_name: names.get(domainId)!,
      state: st?.state ?? null,
      state_changed_at: st?.state_changed_at ?? null,
      last_triggered_at: st?.last_triggered_at ?? null,
      notified_state: st?.notified_state ?? null,
      last_notified_at: st?.last_notified_at ?? null,
    };
  });
  const left = [...stateOf.values()].map((st) => ({ alertId: st.alert_id, domainId: st.domain_id }));
  return { pairs: result, left };
}

/** One pair's outcome of a round that is to be persisted. */
export interface StateWrite {
  alertId: number;
  domainId: number;
  /** The alert's updated_at as the round read it: a pair of an alert changed since (PUT) is left alone. */
  version: Date;
  state: AlertState;
  stateChangedAt: Date | null;
  lastTriggeredAt: Date | null;
  notifiedState: AlertState;
  lastNotifiedAt: Date | null;
}

const iso = (d: Date | null) => (d === null ? null : d.toISOString());

/**
 * Writes a round's changed pairs in one statement and returns the pairs written ("alertId:domainId").
 * A pair whose alert changed (updated_at), was disabled or deleted after the states were read, or
 * whose domain was deleted since (a rule's pair: its state row would break the round on its
 * foreign key), or a rule's pair whose creator no longer sees the domain (a membership revoked
 * while the round measured; visibleToUser, as evaluationPairs), is skipped: the caller enqueues notifications and history only for the pairs returned, so a state
 * change is never notified without being recorded.
 */
export async function saveStates(tx: Db, writes: StateWrite[]): Promise<Set<string>> {
  if (writes.length === 0) return new Set();
  const json = JSON.stringify(
    writes.map((w) => ({
      alert_id: w.alertId,
      domain_id: w.domainId,
      version: iso(w.version),
      state: w.state,
      state_changed_at: iso(w.stateChangedAt),
      last_triggered_at: iso(w.lastTriggeredAt),
      notified_state: w.notifiedState,
      last_notified_at: iso(w.lastNotifiedAt),
    })),
  );
  const rows = await tx.query<{ alert_id: number; domain_id: number }>(sql`
    insert into alert_states as s (alert_id, domain_id, state, state_changed_at, last_triggered_at, notified_state, last_notified_at)
    select w.alert_id, w.domain_id, w.state, w.state_changed_at, w.last_triggered_at, w.notified_state, w.last_notified_at
    from jsonb_to_recordset(${json}::text::jsonb) as w(
      alert_id int, domain_id int, version timestamptz, state text, state_changed_at timestamptz, last_triggered_at timestamptz,
      notified_state text, last_notified_at timestamptz)
    join alerts a on a.id = w.alert_id and a.updated_at = w.version and a.enabled
    join domains d on d.id = w.domain_id
    left join users u on u.id = a.created_by
    where a.domain_id is not null or (u.active and ${visibleToUser(sql`u`, sql`d`)})
    order by w.alert_id, w.domain_id
    on conflict (alert_id, domain_id) do update
    set state = excluded.state, state_changed_at = excluded.state_changed_at, last_triggered_at = excluded.last_triggered_at,
        notified_state = excluded.notified_state, last_notified_at = excluded.last_notified_at
    returning s.alert_id, s.domain_id`);
  return new Set(rows.map((r) => `${r.alert_id}:${r.domain_id}`));
}

/**
 * Forgets the states of pairs a round no longer evaluates (a domain that left a rule's scope, or
 * that its creator no longer sees; evaluationPairs finds them): its next appearance starts from ok.
 */
export async function dropLeftStates(tx: Db, left: readonly { alertId: number; domainId: number }[]): Promise<void> {
  if (left.length === 0) return;
  await tx.query(sql`
    delete from alert_states s
    using jsonb_to_recordset(${JSON.stringify(left.map((e) => ({ a: e.alertId, d: e.domainId })))}::text::jsonb) as e(a int, d int)
    where e.a = s.alert_id and e.d = s.domain_id`);
}

/** Keeps the round's values for the API (lastValues). */
export async function saveLastValues(tx: Db, values: Record<string, Record<string, number | null>>): Promise<void> {
  await tx.query(sql`update alert_evaluator set last_values = ${JSON.stringify(values)}::text::jsonb where id = 1`);
}

// ---------------------------------------------------------------------------------------------
// History
// ---------------------------------------------------------------------------------------------

export interface HistoryEntry {
  alertId: number;
  alertName: string;
  /** A rule's creator; null: a domain's alert. */
  ruleOwner: number | null;
  domainId: number;
  from: AlertState;
  to: AlertState;
  at: Date;
  value: number | null;
  notified: boolean;
  silenceId: number | null;
}

export async function recordHistory(tx: Db, entries: HistoryEntry[]): Promise<void> {
  if (entries.length === 0) return;
  const json = JSON.stringify(
    entries.map((e) => ({ alert_id: e.alertId, alert_name: e.alertName, rule_owner: e.ruleOwner, domain_id: e.domainId, from_state: e.from, to_state: e.to, at: e.at.toISOString(), value: e.value, notified: e.notified, silence_id: e.silenceId })),
  );
  await tx.query(sql`
    insert into alert_history (alert_id, alert_name, rule_owner, domain_id, from_state, to_state, at, value, notified, silence_id)
    select h.alert_id, h.alert_name, h.rule_owner, h.domain_id, h.from_state, h.to_state, h.at, h.value, h.notified, h.silence_id
    from jsonb_to_recordset(${json}::text::jsonb) as h(alert_id int, alert_name text, rule_owner int, domain_id int, from_state text, to_state text, at timestamptz,
      value double precision, notified boolean, silence_id int)
    order by h.alert_id, h.domain_id`);
}

export interface HistoryRow {
  id: string | number;
  alert_id: number;
  alert_name: string;
  domain_id: number;
  domain_name: string;
  from_state: AlertState;
  to_state: AlertState;
  at: Date;
  value: number | null;
  notified: boolean;
  silence_id: number | null;
}

/**
 * A page of the history of `domainIds` (newest first) and its total: the domains' alerts' entries,
 * and the rules' of `ruleOwner` (every rule's when null: an administrator).
 */
export function historyPage(db: Db, domainIds: readonly number[], ruleOwner: number | null, page: PageRequest): Promise<{ rows: HistoryRow[]; total: number }> {
  const rules = ruleOwner === null ? sql`true` : sql`(h.rule_owner is null or h.rule_owner = ${ruleOwner})`;
  return selectPage<HistoryRow>(db, {
    columns: sql`h.*, d.name as domain_name`,
    table: sql`alert_history h join domains d on d.id = h.domain_id`,
    where: sql`h.domain_id = any(${intArray(domainIds)}) and ${rules}`,
    orderBy: sql`h.id desc`,
    ...page,
  });
}

/** Deletes history older than `before`; returns how many entries went. */
export async function pruneHistory(db: Db, before: Date): Promise<number> {
  const rows = await db.query(sql`delete from alert_history where at < ${before} returning id`);
  return rows.length;
}
