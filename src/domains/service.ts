import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { deleteDomainData } from '../../core/db/domain-data.js';
import { isUniqueViolation } from '../../core/db/postgres.js';
import { conflict, forbidden, invalidField, notFound } from '../http/errors.js';
import { withReads } from '../reads/client.js';
import type { Action, Resource } from '../users/permissions.js';
import { findUserById } from '../users/store.js';
import { lastLines, sourcesFeeding, storingFigures, type FeedingSource, type LastLine, type LineCounts, type StoringFigures } from './ingest-store.js';
import { domainIdsOf } from '../../ingest/domain-store.js';
import { domainNameField } from './schemas.js';
import {
  deleteDomain as deleteDomainRow,
  findDomainAccess,
  findVisibleDomain,
  insertDomain,
  insertNewDomains,
  listDomains as listDomainRows,
  toDomain,
  updateDomain as updateDomainRow,
  reachableDomains,
  type Domain,
  type DomainName,
  type DomainRole,
  type DomainRow,
  type Visibility,
} from './store.js';
import { atLeast, roleNeeded, type AccessWatchers } from './access.js';
import { afterOwnerChange } from './members-store.js';

type Deps = Pick<Services, 'db'>;
type DeleteDeps = Pick<Services, 'db' | 'clickhouse' | 'log'>;
/** Reads of ingest health: ClickHouse through the request queue, and INGEST_STALE_S. */
type IngestDeps = Pick<Services, 'db' | 'clickhouse' | 'reads'> & { config: Pick<Services['config'], 'ingestStaleS'> };

/** Whose domains the caller sees: every one (an administrator), or those it holds a grant on (store.ts, grantsOf). */
export const visibilityOf = (principal: Principal): Visibility =>
  principal.user.role === 'admin' ? { all: true } : { all: false, userId: principal.user.id };

/**
 * The guard of every per-domain route: the domain behind `domainId` if this caller may see it
 * (404 "Domain not found" otherwise, exactly as for an unknown id), then, if asked, 403 unless
 * the caller holds `resource:action` and its role on the domain allows it (roleNeeded: a viewer
 * reads, an editor also changes alerts and silences; `least` asks for another role). The
 * caller's role comes with the domain.
 */
export async function resolveDomain(
  deps: Deps,
  principal: Principal,
  domainId: number,
  needs?: [Resource, Action],
  least: DomainRole = needs ? roleNeeded(...needs) : 'viewer',
): Promise<DomainRow & { role: DomainRole }> {
  const domain = await findDomainAccess(deps.db, domainId, visibilityOf(principal));
  if (!domain) throw notFound('Domain');
  if (needs && !principal.permissions.can(needs[0], needs[1])) throw forbidden();
  if (!atLeast(domain.role, least)) throw forbidden();
  return domain;
}

/**
 * The guard of a read or change over several domains: those of `ids` if the caller sees every one
 * (404 "Domain not found" otherwise, as resolveDomain), then 403 unless the caller holds
 * `resource:action` and its role on each allows it; without `ids`, every domain where its role
 * allows it. `least`: the role needed, when not the one roleNeeded gives (a fleet rule is its
 * creator's, and covers domains it reads).
 */
export async function resolveDomains(
  deps: Deps,
  principal: Principal,
  ids: readonly number[] | undefined,
  needs: [Resource, Action],
  least: DomainRole = roleNeeded(...needs),
): Promise<DomainName[]> {
  const domains = await reachableDomains(deps.db, visibilityOf(principal), ids);
  if (ids && domains.length < new Set(ids).size) throw notFound('Domain');
  if (!principal.permissions.can(needs[0], needs[1])) throw forbidden();
  if (ids && domains.some((d) => !atLeast(d.role, least))) throw forbidden();
  return domains.filter((d) => atLeast(d.role, least)).map(({ id, name }) => ({ id, name }));
}

const domainExists = () => conflict('Domain already exists');

async function checkOwner(deps: Deps, ownerId: number | null | undefined): Promise<void> {
  if (ownerId != null && !(await findUserById(deps.db, ownerId))) throw invalidField('ownerId', 'no user has this id');
}

/** A domain's last log line as the API gives it (src/domains/schemas.ts, lastLineSchema). */
export interface LastLineHealth {
  lastLineAt: string | null;
  secondsSinceLastLine: number | null;
  stale: boolean;
  staleAfterS: number;
}

/** Whether `last` (undefined: never) is longer ago than INGEST_STALE_S. */
function lastLineHealth(last: LastLine | undefined, staleAfterS: number): LastLineHealth {
  if (!last) return { lastLineAt: null, secondsSinceLastLine: null, stale: false, staleAfterS };
  const ageMs = Math.max(0, last.ageMs);
  return { lastLineAt: new Date(last.at).toISOString(), secondsSinceLastLine: ageMs / 1000, stale: ageMs > staleAfterS * 1000, staleAfterS };
}

/**
 * A page of the domains the caller sees; with `ingest`, each with its last log line (the fleet's
 * column, one read for the page), or null without `domains: read`.
 */
export async function listDomains(
  deps: IngestDeps,
  principal: Principal,
  filter: { page: number; limit: number; search?: string | undefined; ingest?: boolean | undefined },
): Promise<{ domains: (Domain & { ingest?: LastLineHealth | null })[]; total: number }> {
  const page = await listDomainRows(deps.db, filter, visibilityOf(principal));
  if (!filter.ingest) return page;
  if (!principal.permissions.can('domains', 'read')) return { ...page, domains: page.domains.map((d) => ({ ...d, ingest: null })) };
  const last = await withReads(deps, principal, 'listing', (clickhouse) => lastLines(clickhouse, page.domains.map((d) => d.id)));
  return { ...page, domains: page.domains.map((d) => ({ ...d, ingest: lastLineHealth(last.get(d.id), deps.config.ingestStaleS) })) };
}

export interface IngestHealth extends LastLineHealth {
  lastAccessLineAt: string | null;
  lastErrorLineAt: string | null;
  stored: LineCounts;
  rejected: StoringFigures['rejected'];
  sources: FeedingSource[];
}

/** A domain's ingest health (docs/reference/domains.md#ingest-health): a domain the caller sees (else 404), with `domains: read` (else 403). */
export async function getIngestHealth(deps: IngestDeps, principal: Principal, domainId: number): Promise<IngestHealth> {
  const domain = await resolveDomain(deps, principal, domainId, ['domains', 'read']);
  const figures = await withReads(deps, principal, 'listing', (clickhouse) => storingFigures(clickhouse, domain.id));
  const lastAt = Math.max(figures.lastAccess ?? -1, figures.lastError ?? -1);
  const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());
  return {
    lastAccessLineAt: iso(figures.lastAccess),
    lastErrorLineAt: iso(figures.lastError),
    ...lastLineHealth(lastAt < 0 ? undefined : { at: lastAt, ageMs: figures.now - lastAt }, deps.config.ingestStaleS),
    stored: figures.stored,
    rejected: figures.rejected,
    sources: await sourcesFeeding(deps.db, domain),
  };
}

export async function getDomain(deps: Deps, principal: Principal, domainId: number): Promise<Domain> {
  const domain = await resolveDomain(deps, principal, domainId);
  return toDomain(domain, domain.role);
}

/** Admins create any domain, owned by anyone or no one; `domains:create` creates one's own. */
export async function createDomain(
  deps: Deps,
  principal: Principal,
  body: { name: string; ownerId?: number | null | undefined },
  client: ClientInfo,
): Promise<Domain> {
  const admin = principal.user.role === 'admin';
  if (!admin && !principal.permissions.can('domains', 'create')) throw forbidden();
  if (!admin && body.ownerId != null && body.ownerId !== principal.user.id) throw forbidden();
  const ownerId = admin ? (body.ownerId ?? null) : principal.user.id;
  await checkOwner(deps, ownerId);
  let row: DomainRow;
  try {
    row = await insertDomain(deps.db, { name: body.name, ownerId });
  } catch (err) {
    if (isUniqueViolation(err)) throw domainExists();
    throw err;
  }
  await recordActivity(deps.db, { userId: principal.user.id, action: 'domain.create', resource: `domains/${row.id}`, details: `Created domain ${row.name}` }, client);
  return toDomain(row);
}

/** Where a name refused by checkDomainNames lies in the list, and why it was refused. */
export interface InvalidName {
  index: number;
  reason: string;
}

/**
 * The names given to a bulk add, checked as a single create checks them: `names`, normalised in
 * the order given (what registerDomains takes once `invalid` is empty), and the invalid ones.
 */
export function checkDomainNames(given: readonly string[]): { names: string[]; invalid: InvalidName[] } {
  const names: string[] = [];
  const invalid: InvalidName[] = [];
  given.forEach((text, index) => {
    const parsed = domainNameField.safeParse(text);
    if (parsed.success) names.push(parsed.data);
    else invalid.push({ index, reason: parsed.error.issues[0]?.message ?? 'is invalid' });
  });
  return { names, invalid };
}

export interface BulkNameResult {
  name: string;
  /** exists: registered before and left as it is, its owner too; duplicate: given earlier in the same list. */
  status: 'created' | 'exists' | 'duplicate';
  id: number;
}

export interface BulkDomainsResult {
  /** One per name, in the order given. */
  results: BulkNameResult[];
  counts: Record<BulkNameResult['status'], number>;
}

/**
 * After the caller's rights were checked and the names passed checkDomainNames (the API, the
 * command line): registers those not taken, owned by `ownerId`, in one transaction (the caller's,
 * when it passes one), with one insert statement whatever their number.
 */
export async function registerDomains(deps: Deps, names: readonly string[], ownerId: number | null): Promise<BulkDomainsResult> {
  const distinct = [...new Set(names)];
  const { created, ids } = await deps.db.transaction(async (tx) => {
    await checkOwner({ db: tx }, ownerId);
    const inserted = await insertNewDomains(tx, distinct, ownerId);
    const created = new Set(inserted.map((d) => d.name));
    const ids = await domainIdsOf(tx, distinct.filter((name) => !created.has(name)));
    for (const d of inserted) ids.set(d.name, d.id);
    return { created, ids };
  });
  const counts = { created: 0, exists: 0, duplicate: 0 };
  const seen = new Set<string>();
  const results = names.map((name): BulkNameResult => {
    const status = seen.has(name) ? 'duplicate' : created.has(name) ? 'created' : 'exists';
    seen.add(name);
    counts[status]++;
    // Every name has an id: insertNewDomains locked those it did not insert.
    return { name, status, id: ids.get(name)! };
  });
  return { results, counts };
}

/** The positions of the invalid names by reason, as one message on `names`: "[3], [7]: must be a host name …". */
function invalidNamesMessage(invalid: readonly InvalidName[]): string {
  const positions = new Map<string, string[]>();
  for (const { index, reason } of invalid) {
    const list = positions.get(reason) ?? [];
    list.push(`[${index}]`);
    positions.set(reason, list);
  }
  return [...positions].map(([reason, list]) => `${list.join(', ')}: ${reason}`).join('; ');
}

/**
 * Admins only: many domains at once. All or nothing: one invalid name refuses the whole request
 * (422 naming every invalid one), so a list is never half registered and can be corrected and
 * sent again; names already registered are reported, not refused, which makes sending it again
 * harmless. The domains and the one activity entry are written in one transaction.
 */
export async function addDomains(
  deps: Deps,
  principal: Principal,
  body: { names: readonly string[]; ownerId?: number | null | undefined },
  client: ClientInfo,
): Promise<BulkDomainsResult> {
  if (principal.user.role !== 'admin') throw forbidden();
  const { names, invalid } = checkDomainNames(body.names);
  if (invalid.length > 0) throw invalidField('names', invalidNamesMessage(invalid));
  return deps.db.transaction(async (tx) => {
    const result = await registerDomains({ db: tx }, names, body.ownerId ?? null);
    const { created, exists, duplicate } = result.counts;
    const details = `Registered domains at once: ${created} created, ${exists} already registered, ${duplicate} repeated in the list`;
    await recordActivity(tx, { userId: principal.user.id, action: 'domain.bulk_create', resource: 'domains', details }, client);
    return result;
  });
}

/**
 * PUT /api/domains/:domainId: administrators rename a domain and change its owner; its owner may
 * hand it over to another user (`ownerId` alone), which ends its own access unless it is given a
 * role again. The previous owner's open tails of the domain are checked again at once.
 */
export async function updateDomain(
  deps: Deps,
  principal: Principal,
  domainId: number,
  patch: { name?: string | undefined; ownerId?: number | null | undefined },
  client: ClientInfo,
  watchers?: AccessWatchers,
): Promise<Domain> {
  const domain = await resolveDomain(deps, principal, domainId);
  const handOver = principal.user.role !== 'admin';
  // The owner hands over to someone else; nothing else (renaming, clearing the owner) is its to do.
  if (handOver && (domain.role !== 'owner' || patch.name !== undefined || patch.ownerId == null || patch.ownerId === principal.user.id)) throw forbidden();
  const row = await applyDomainPatch(deps, domainId, patch);
  const changed = (['name', 'ownerId'] as const).filter((f) => patch[f] !== undefined).join(' and ') || 'nothing';
  // An owner who is no administrator learns no address by handing a domain over (as with members).
  const newOwner = principal.user.role === 'admin' ? (await findUserById(deps.db, row.owner_id!))?.email : undefined;
  const details = handOver ? `Handed domain ${row.name} over to ${newOwner ?? `user ${row.owner_id}`}` : `Changed ${changed} of domain ${row.name}`;
  await recordActivity(deps.db, { userId: principal.user.id, action: 'domain.update', resource: `domains/${domainId}`, details }, client);
  if (domain.owner_id !== row.owner_id) await watchers?.recheckDomains([domainId]);
  return toDomain(row);
}

/**
 * After the caller's rights were checked: renames or reassigns the domain (the API, the command
 * line). A new owner's membership ends (the owner holds every role), and the previous owner loses
 * the domain as a revoked member does (afterOwnerChange).
 */
export async function applyDomainPatch(deps: Deps, domainId: number, patch: { name?: string | undefined; ownerId?: number | null | undefined }): Promise<DomainRow> {
  await checkOwner(deps, patch.ownerId);
  let row: DomainRow | undefined;
  try {
    row = await deps.db.transaction(async (tx) => {
      const before = await findVisibleDomain(tx, domainId, { all: true });
      const after = await updateDomainRow(tx, domainId, patch);
      if (before && after) await afterOwnerChange(tx, domainId, before.owner_id, after.owner_id);
      return after;
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw domainExists();
    throw err;
  }
  if (!row) throw notFound('Domain');
  return row;
}

/**
 * After the caller's rights were checked: deletes the domain and everything of it: its log rows in
 * ClickHouse first (should that fail, the domain is still there and the delete can be repeated),
 * then the domain, whose Postgres rows go with it (foreign keys cascade).
 */
export async function removeDomain(deps: DeleteDeps, domain: DomainRow): Promise<void> {
  await deleteDomainData(deps.clickhouse, domain.id);
  await deleteDomainRow(deps.db, domain.id);
  deps.log.info({ domainId: domain.id, domain: domain.name }, 'domain and its logs deleted');
}

export async function deleteDomain(deps: DeleteDeps, principal: Principal, domainId: number, client: ClientInfo): Promise<void> {
  const domain = await resolveDomain(deps, principal, domainId);
  if (principal.user.role !== 'admin') throw forbidden();
  await removeDomain(deps, domain);
  await recordActivity(deps.db, { userId: principal.user.id, action: 'domain.delete', resource: `domains/${domainId}`, details: `Deleted domain ${domain.name}` }, client);
}
