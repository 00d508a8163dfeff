import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { resolveDomain, resolveDomains } from '../domains/service.js';
import { ApiError, conflict, notFound } from '../http/errors.js';
import type { PageRequest } from '../../core/db/paging.js';
import type { Action } from '../users/permissions.js';
import { nonPublicAddressOf, nonPublicRange, systemResolve, webhookAddressRule, type AddressRule, type ResolveAll } from './addresses.js';
import { ALERTS_PER_DOMAIN, RULES_PER_USER } from './limits.js';
import type { z } from '@hono/zod-openapi';
import { definitionProblems, type AlertDefinition, type AlertScope, type historyEntrySchema } from './schemas.js';
import { silenceOf } from './silences/match.js';
import { liveSilences } from './silences/store.js';
import {
  coveredDomains,
  definitionOf,
  deleteAlert as deleteAlertRow,
  findAlert,
  findAlertById,
  historyPage,
  insertAlertWithinCap,
  lastValues,
  listAlerts as listAlertRows,
  listVisibleAlerts,
  rulesCovering,
  statesOf,
  toAlert,
  updateAlert as updateAlertRow,
  type Alert,
  type AlertRow,
  type Configurer,
  type DomainStateRow,
  type HistoryRow,
} from './store.js';

type Deps = Pick<Services, 'db' | 'config'>;


/** How long a webhook target's DNS answer is waited for when an alert is saved. */
const TARGET_LOOKUP_TIMEOUT_MS = 3_000;

/**
 * Why a webhook target is refused when an alert is created or changed (422 on
 * notificationTarget), or null: a literal non-public address, or a name that resolves now to any
 * non-public address (addresses.ts). A name that does not resolve now (not yet in DNS, or the
 * resolver is slow or down) is accepted: delivery checks the addresses again at every attempt,
 * and refusing would make an alert's creation depend on DNS being up.
 */
export async function webhookTargetProblem(target: string, resolve: ResolveAll = systemResolve, rule: AddressRule = nonPublicRange): Promise<string | null> {
  const host = new URL(target).hostname;
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<null>((resolveTimeout) => (timer = setTimeout(() => resolveTimeout(null), TARGET_LOOKUP_TIMEOUT_MS)));
  const internal = await Promise.race([nonPublicAddressOf(host, resolve, rule).catch(() => null), gaveUp]).finally(() => clearTimeout(timer));
  if (!internal) return null;
  const literal = internal.address === host.replace(/^\[|\]$/g, '');
  return literal
    ? `must reach a public address; ${host} is not one (${internal.range})`
    : `must reach a public address; ${host} resolves to ${internal.address} (${internal.range})`;
}

/** The definition's problems beyond its form: a webhook target that reaches no public address (nor one of WEBHOOK_ALLOW_NETWORKS). */
async function targetProblems(deps: Deps, d: AlertDefinition): Promise<void> {
  if (d.notificationMethod !== 'webhook') return;
  const problem = await webhookTargetProblem(d.notificationTarget, systemResolve, webhookAddressRule(deps.config.webhookAllowNetworks));
  if (problem) throw new ApiError(422, 'Validation failed', { notificationTarget: problem });
}

const configurerOf = (principal: Principal): Configurer => ({ id: principal.user.id, name: principal.user.name, email: principal.user.email });

/** The domain, if the caller sees it (else 404) and holds `alerts:action` (else 403). */
const domainFor = (deps: Deps, principal: Principal, domainId: number, action: Action) => resolveDomain(deps, principal, domainId, ['alerts', action]);

/** E-mail targets are stored as addresses are everywhere else: trimmed and lower-cased. */
const normalised = (d: AlertDefinition): AlertDefinition =>
  d.notificationMethod === 'email' ? { ...d, notificationTarget: d.notificationTarget.toLowerCase() } : d;

/** An alert as the activity log names it: a domain's alert under its domain. */
const resource = (row: Pick<AlertRow, 'id' | 'domain_id'>) => (row.domain_id === null ? `alerts/${row.id}` : `domains/${row.domain_id}/alerts/${row.id}`);

/** An administrator reads every rule; another user the rules it made. */
const ruleOwnerFilter = (principal: Principal): number | null => (principal.user.role === 'admin' ? null : principal.user.id);

/**
 * The alert behind an id if the caller may reach it with `action` (404 "Alert not found" otherwise,
 * as for an unknown id, then 403 without the permission): a domain's alert through its domain
 * (resolveDomain), a rule for its creator and administrators.
 */
async function reachableAlert(deps: Deps, principal: Principal, alertId: number, action: Action): Promise<AlertRow> {
  const row = await findAlertById(deps.db, alertId);
  if (!row) throw notFound('Alert');
  if (row.domain_id !== null) {
    await resolveDomain(deps, principal, row.domain_id, ['alerts', action]).catch((err: unknown) => {
      throw err instanceof ApiError && err.status === 404 ? notFound('Alert') : err;
    });
    return row;
  }
  const owner = ruleOwnerFilter(principal);
  if (owner !== null && row.created_by !== owner) throw notFound('Alert');
  await resolveDomains(deps, principal, [], ['alerts', action]);
  return row;
}

/** The domains' states of `rows` as the API shows them: value of the last round, since when, any silence holding them now. */
async function domainStates(deps: Deps, rows: DomainStateRow[], covered: Map<number, { id: number; name: string }[]> | null): Promise<Map<number, AlertDomainState[]>> {
  const [values, silences] = await Promise.all([lastValues(deps.db), liveSilences(deps.db, new Date())]);
  const now = Date.now();
  const byAlert = new Map<number, AlertDomainState[]>();
  const stateOf = new Map(rows.map((r) => [`${r.alert_id}:${r.domain_id}`, r]));
  const entry = (alertId: number, domainId: number, name: string): AlertDomainState => {
    const row = stateOf.get(`${alertId}:${domainId}`);
    return {
      domainId,
      domain: name,
      state: row?.state ?? 'ok',
      value: values[alertId]?.[domainId] ?? null,
      since: row?.state_changed_at ? new Date(row.state_changed_at).toISOString() : null,
      silencedBy: silenceOf(silences, alertId, domainId, now),
    };
  };
  if (covered) {
    for (const [alertId, domains] of covered) byAlert.set(alertId, domains.map((d) => entry(alertId, d.id, d.name)));
  } else {
    for (const r of rows) {
      const list = byAlert.get(r.alert_id) ?? [];
      list.push(entry(r.alert_id, r.domain_id, r.domain_name));
      byAlert.set(r.alert_id, list);
    }
  }
  return byAlert;
}

export interface AlertDomainState {
  domainId: number;
  domain: string;
  state: 'ok' | 'firing';
  value: number | null;
  since: string | null;
  silencedBy: number | null;
}

export async function listAlerts(deps: Deps, principal: Principal, domainId: number): Promise<Alert[]> {
  await domainFor(deps, principal, domainId, 'read');
  return (await listAlertRows(deps.db, domainId)).map(toAlert);
}

/**
 * Who reads the list of all alerts: the domains they see and whose rules they read (null: every
 * rule, as an administrator or the command line does).
 */
export interface AlertReader {
  domainIds: number[];
  ruleOwner: number | null;
}

/** The caller as a reader of alerts (alerts:read, 403 otherwise). */
async function readerOf(deps: Deps, principal: Principal): Promise<AlertReader> {
  const domainIds = (await resolveDomains(deps, principal, undefined, ['alerts', 'read'])).map((d) => d.id);
  return { domainIds, ruleOwner: ruleOwnerFilter(principal) };
}

/** Every alert the caller reads (alerts:read), with the domains each fires on. */
export async function listAllAlerts(deps: Deps, principal: Principal): Promise<(Alert & { domains: AlertDomainState[] })[]> {
  return alertsReadBy(deps, await readerOf(deps, principal));
}

/** After the reader's rights were checked (the API's caller, the command line): its alerts, with the domains each fires on. */
export async function alertsReadBy(deps: Deps, reader: AlertReader): Promise<(Alert & { domains: AlertDomainState[] })[]> {
  const rows = await listVisibleAlerts(deps.db, reader.domainIds, reader.ruleOwner);
  const states = await domainStates(deps, await statesOf(deps.db, rows.map((r) => r.id), reader.domainIds, true), null);
  return rows.map((row) => ({ ...toAlert(row), domains: states.get(row.id) ?? [] }));
}

/** One alert with every domain it covers (those the caller sees): state, value, since, silence. */
export async function getAlert(deps: Deps, principal: Principal, alertId: number): Promise<Alert & { domains: AlertDomainState[] }> {
  const row = await reachableAlert(deps, principal, alertId, 'read');
  const visible = (await resolveDomains(deps, principal, undefined, ['alerts', 'read'])).map((d) => d.id);
  const covered = await coveredDomains(deps.db, alertId, visible);
  const states = await domainStates(deps, await statesOf(deps.db, [alertId], visible), new Map([[alertId, covered]]));
  return { ...toAlert(row), domains: states.get(alertId) ?? [] };
}

export type FiringAlert = Alert & { alertId: number; domainId: number; domain: string; since: string | null; value: number | null; silencedBy: number | null };

/** The enabled alerts firing now on every domain the caller sees (the fleet's view): one entry per alert and domain; needs alerts:read. */
export async function listFiringAlerts(deps: Deps, principal: Principal): Promise<FiringAlert[]> {
  return firingReadBy(deps, await readerOf(deps, principal));
}

/** After the reader's rights were checked (the API's caller, the command line): the alerts firing now, one entry per alert and domain. */
export async function firingReadBy(deps: Deps, reader: AlertReader): Promise<FiringAlert[]> {
  const rows = await listVisibleAlerts(deps.db, reader.domainIds, reader.ruleOwner);
  const byId = new Map(rows.map((r) => [r.id, toAlert(r)]));
  const firing = await statesOf(deps.db, rows.map((r) => r.id), reader.domainIds, true);
  const states = await domainStates(deps, firing, null);
  return [...states.entries()]
    .flatMap(([alertId, list]) => list.map((s) => ({ ...byId.get(alertId)!, alertId, domainId: s.domainId, domain: s.domain, since: s.since, value: s.value, silencedBy: s.silencedBy })))
    .sort((a, b) => a.domainId - b.domainId || a.alertId - b.alertId);
}

/** The rules (not the domain's own alerts) covering a domain now, among those the caller reads. */
export async function rulesOfDomain(deps: Deps, principal: Principal, domainId: number): Promise<(Alert & { domains: AlertDomainState[] })[]> {
  const domain = await domainFor(deps, principal, domainId, 'read');
  const rows = await rulesCovering(deps.db, domainId, ruleOwnerFilter(principal));
  const covered = new Map(rows.map((r) => [r.id, [{ id: domain.id, name: domain.name }]]));
  const states = await domainStates(deps, await statesOf(deps.db, rows.map((r) => r.id), [domainId]), covered);
  return rows.map((row) => ({ ...toAlert(row), domains: states.get(row.id) ?? [] }));
}

export async function createAlert(deps: Deps, principal: Principal, domainId: number, definition: AlertDefinition, client: ClientInfo): Promise<Alert> {
  const domain = await domainFor(deps, principal, domainId, 'create');
  const wanted = normalised(definition);
  await targetProblems(deps, wanted);
  const row = await insertAlertWithinCap(deps.db, { domainId }, configurerOf(principal), wanted, ALERTS_PER_DOMAIN);
  if (!row) throw conflict(`The domain already has ${ALERTS_PER_DOMAIN} alerts, the most a domain may have; delete one to add another`);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.create', resource: resource(row), details: `Created alert "${row.name}" on ${domain.name}` }, client);
  return toAlert(row);
}

/**
 * The scope's domains must each be visible to the creator (404 "Domain not found" otherwise), in
 * any role: a rule is its creator's own, never the domain's, and watching a domain's figures is
 * reading them (a viewer may), as a rule over "all" covers every domain its creator sees.
 */
async function checkScope(deps: Deps, principal: Principal, scope: AlertScope, action: Action): Promise<string> {
  if ('domains' in scope) {
    await resolveDomains(deps, principal, [], ['alerts', action], 'viewer');
    return 'every domain its creator sees';
  }
  const domains = await resolveDomains(deps, principal, scope.domainIds, ['alerts', action], 'viewer');
  return domains.length <= 3 ? domains.map((d) => d.name).join(', ') : `${domains.length} domains`;
}

/** A rule over many domains (alerts:create); at most RULES_PER_USER per user (409). */
export async function createRule(deps: Deps, principal: Principal, body: AlertDefinition & { scope: AlertScope }, client: ClientInfo): Promise<Alert> {
  const { scope, ...definition } = body;
  const covers = await checkScope(deps, principal, scope, 'create');
  const wanted = normalised(definition);
  await targetProblems(deps, wanted);
  const row = await insertAlertWithinCap(deps.db, { scope }, configurerOf(principal), wanted, RULES_PER_USER);
  if (!row) throw conflict(`You already have ${RULES_PER_USER} rules, the most a user may have; delete one, or widen one's scope, to add another`);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.create', resource: resource(row), details: `Created rule "${row.name}" over ${covers}` }, client);
  return toAlert(row);
}

/** Changes any fields (and a rule's scope); the merged definition must pass the same rules as a new one. */
async function changeAlert(deps: Deps, principal: Principal, current: AlertRow, patch: Partial<AlertDefinition> & { scope?: AlertScope | undefined }, client: ClientInfo): Promise<Alert> {
  const { scope, ...fields } = patch;
  if (scope !== undefined && current.domain_id !== null) {
    throw new ApiError(422, 'Validation failed', { scope: "a domain's alert keeps its domain; define a rule with POST /api/logs/alerts to cover others" });
  }
  if (scope !== undefined) await checkScope(deps, principal, scope, 'update');
  const defined = Object.fromEntries(Object.entries(fields).filter(([, v]) => v !== undefined)) as Partial<AlertDefinition>;
  const merged = normalised({ ...definitionOf(current), ...defined });
  const problems = definitionProblems(merged);
  if (Object.keys(problems).length > 0) throw new ApiError(422, 'Validation failed', problems);
  // Checked when the target is set, as on creation; an alert whose name resolves elsewhere since
  // can still be changed or disabled (delivery refuses a non-public address at every attempt).
  if (defined.notificationTarget !== undefined || defined.notificationMethod !== undefined) await targetProblems(deps, merged);
  const row = await updateAlertRow(deps.db, current.id, merged, scope ?? null, configurerOf(principal));
  if (!row) throw notFound('Alert');
  const changed = Object.keys(patch).filter((k) => patch[k as keyof typeof patch] !== undefined).join(', ') || 'nothing';
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.update', resource: resource(current), details: `Changed ${changed} of alert "${row.name}"` }, client);
  return toAlert(row);
}

export async function updateAlert(deps: Deps, principal: Principal, domainId: number, alertId: number, patch: Partial<AlertDefinition>, client: ClientInfo): Promise<Alert> {
  await domainFor(deps, principal, domainId, 'update');
  const current = await findAlert(deps.db, domainId, alertId);
  if (!current) throw notFound('Alert');
  return changeAlert(deps, principal, current, patch, client);
}

export async function updateRule(deps: Deps, principal: Principal, alertId: number, patch: Partial<AlertDefinition> & { scope?: AlertScope | undefined }, client: ClientInfo): Promise<Alert> {
  return changeAlert(deps, principal, await reachableAlert(deps, principal, alertId, 'update'), patch, client);
}

async function removeAlert(deps: Deps, principal: Principal, current: AlertRow, client: ClientInfo): Promise<void> {
  if (!(await deleteAlertRow(deps.db, current.id))) throw notFound('Alert');
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.delete', resource: resource(current), details: `Deleted alert "${current.name}"` }, client);
}

export async function deleteAlert(deps: Deps, principal: Principal, domainId: number, alertId: number, client: ClientInfo): Promise<void> {
  await domainFor(deps, principal, domainId, 'delete');
  const current = await findAlert(deps.db, domainId, alertId);
  if (!current) throw notFound('Alert');
  await removeAlert(deps, principal, current, client);
}

export async function deleteRule(deps: Deps, principal: Principal, alertId: number, client: ClientInfo): Promise<void> {
  await removeAlert(deps, principal, await reachableAlert(deps, principal, alertId, 'delete'), client);
}

export type HistoryEntryView = z.infer<typeof historyEntrySchema>;

const historyView = (r: HistoryRow): HistoryEntryView => ({
  id: Number(r.id),
  alertId: r.alert_id,
  alertName: r.alert_name,
  domainId: r.domain_id,
  domain: r.domain_name,
  from: r.from_state,
  to: r.to_state,
  at: new Date(r.at).toISOString(),
  value: r.value,
  notified: r.notified,
  silencedBy: r.silence_id,
});

/** A page of the state changes (newest first) of one domain, or of every domain the caller sees; alerts:read. */
export async function alertHistory(deps: Deps, principal: Principal, domainId: number | null, page: PageRequest): Promise<{ entries: HistoryEntryView[]; total: number }> {
  const domainIds = domainId === null ? (await resolveDomains(deps, principal, undefined, ['alerts', 'read'])).map((d) => d.id) : [(await domainFor(deps, principal, domainId, 'read')).id];
  const { rows, total } = await historyPage(deps.db, domainIds, ruleOwnerFilter(principal), page);
  return { entries: rows.map(historyView), total };
}

