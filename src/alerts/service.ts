import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { resolveDomain } from '../domains/service.js';
import { ApiError, notFound } from '../http/errors.js';
import type { Action } from '../users/permissions.js';
import { definitionProblems, type AlertDefinition } from './schemas.js';
import { definitionOf, deleteAlert as deleteAlertRow, findAlert, insertAlert, listAlerts as listAlertRows, toAlert, updateAlert as updateAlertRow, type Alert } from './store.js';

type Deps = Pick<Services, 'db'>;

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

export async function createAlert(deps: Deps, principal: Principal, domainId: number, definition: AlertDefinition, client: ClientInfo): Promise<Alert> {
  const domain = await domainFor(deps, principal, domainId, 'create');
  const row = await insertAlert(deps.db, domainId, principal.user.id, normalised(definition));
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
  const row = await updateAlertRow(deps.db, domainId, alertId, merged);
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
