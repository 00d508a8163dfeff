import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { resolveDomain, resolveDomains } from '../domains/service.js';
import { ApiError, notFound } from '../http/errors.js';
import type { Action } from '../users/permissions.js';
import { nonPublicAddressOf, nonPublicRange, systemResolve, webhookAddressRule, type AddressRule, type ResolveAll } from './addresses.js';
import { ALERTS_PER_DOMAIN } from './limits.js';
import { definitionProblems, type AlertDefinition } from './schemas.js';
import {
  definitionOf,
  deleteAlert as deleteAlertRow,
  findAlert,
  insertAlertWithinCap,
  listAlerts as listAlertRows,
  listFiringAlerts as listFiringAlertRows,
  toAlert,
  updateAlert as updateAlertRow,
  type Alert,
  type Configurer,
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

const resource = (domainId: number, alertId: number) => `domains/${domainId}/alerts/${alertId}`;

export async function listAlerts(deps: Deps, principal: Principal, domainId: number): Promise<Alert[]> {
  await domainFor(deps, principal, domainId, 'read');
  return (await listAlertRows(deps.db, domainId)).map(toAlert);
}

/** The enabled alerts firing now on every domain the caller sees (the fleet's view); needs alerts:read. */
export async function listFiringAlerts(deps: Deps, principal: Principal): Promise<(Alert & { domainId: number })[]> {
  const domains = await resolveDomains(deps, principal, undefined, ['alerts', 'read']);
  return (await listFiringAlertRows(deps.db, domains.map((d) => d.id))).map((row) => ({ ...toAlert(row), domainId: row.domain_id }));
}

export async function createAlert(deps: Deps, principal: Principal, domainId: number, definition: AlertDefinition, client: ClientInfo): Promise<Alert> {
  const domain = await domainFor(deps, principal, domainId, 'create');
  const wanted = normalised(definition);
  await targetProblems(deps, wanted);
  const row = await insertAlertWithinCap(deps.db, domainId, configurerOf(principal), wanted, ALERTS_PER_DOMAIN);
  if (!row) throw new ApiError(409, `The domain already has ${ALERTS_PER_DOMAIN} alerts, the most a domain may have; delete one to add another`);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.create', resource: resource(domainId, row.id), details: `Created alert "${row.name}" on ${domain.name}` }, client);
  return toAlert(row);
}

/** Changes any fields; the merged definition must pass the same rules as a new one. */
export async function updateAlert(
  deps: Deps,
  principal: Principal,
  domainId: number,
  alertId: number,
  patch: Partial<AlertDefinition>,
  client: ClientInfo,
): Promise<Alert> {
  const domain = await domainFor(deps, principal, domainId, 'update');
  const current = await findAlert(deps.db, domainId, alertId);
  if (!current) throw notFound('Alert');
  const defined = Object.fromEntries(Object.entries(patch).filter(([, v]) => v !== undefined)) as Partial<AlertDefinition>;
  const merged = normalised({ ...definitionOf(current), ...defined });
  const problems = definitionProblems(merged);
  if (Object.keys(problems).length > 0) throw new ApiError(422, 'Validation failed', problems);
  // Checked when the target is set, as on creation; an alert whose name resolves elsewhere since
  // can still be changed or disabled (delivery refuses a non-public address at every attempt).
  if (defined.notificationTarget !== undefined || defined.notificationMethod !== undefined) await targetProblems(deps, merged);
  const row = await updateAlertRow(deps.db, domainId, alertId, merged, configurerOf(principal));
  if (!row) throw notFound('Alert');
  const changed = Object.keys(defined).join(', ') || 'nothing';
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.update', resource: resource(domainId, alertId), details: `Changed ${changed} of alert "${row.name}" on ${domain.name}` }, client);
  return toAlert(row);
}

export async function deleteAlert(deps: Deps, principal: Principal, domainId: number, alertId: number, client: ClientInfo): Promise<void> {
  const domain = await domainFor(deps, principal, domainId, 'delete');
  const current = await findAlert(deps.db, domainId, alertId);
  if (!current || !(await deleteAlertRow(deps.db, domainId, alertId))) throw notFound('Alert');
  await recordActivity(deps.db, { userId: principal.user.id, action: 'alert.delete', resource: resource(domainId, alertId), details: `Deleted alert "${current.name}" on ${domain.name}` }, client);
}
