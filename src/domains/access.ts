/**
 * What a role on a domain lets its holder do (docs/reference/domains.md#members). Whether a user
 * holds a role at all, and which, is decided by one SQL rule (grantsOf, store.ts); this is what
 * the role then allows, and the user's own permissions stay the ceiling: a role grants nothing
 * they deny (resolveDomain checks both).
 */
import type { Action, Resource } from '../users/permissions.js';
import { rankOf, type DomainRole } from './store.js';

/**
 * The least role an action on a domain's things needs: reading anything of it (its logs,
 * statistics, exports, live tail, ingest health, alerts) a viewer; changing its alerts and
 * silences an editor; anything else (its members, handing it over) its owner.
 */
export function roleNeeded(resource: Resource, action: Action): DomainRole {
  if (action === 'read') return 'viewer';
  if (resource === 'alerts') return 'editor';
  return 'owner';
}

/** Whether `role` is at least `least`. */
export const atLeast = (role: DomainRole, least: DomainRole): boolean => rankOf(role) >= rankOf(least);

/** What holds access that must be checked again when a role on domains ends or changes: the live tails (TailHub). */
export interface AccessWatchers {
  /** `all`: every domain (a group's grant on every domain ended). */
  recheckDomains(domainIds: readonly number[] | 'all'): Promise<void>;
}
