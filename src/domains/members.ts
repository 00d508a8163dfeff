/**
 * Members of a domain (docs/reference/domains.md#members): the owner and administrators give users
 * a role on it (viewer or editor), change it and take it back; a member may leave. Every grant,
 * change and revocation is in the acting user's activity. A revocation takes effect at once: the
 * next request answers 404 (every guard reads the grants, store.ts grantsOf), the process's open
 * live tails of the domain are checked again now (`watchers`; other processes' within their
 * re-check), a download link stops, the user's rules stop covering the domain and their pending
 * notifications no longer name it.
 */
import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { invalidField, notFound } from '../http/errors.js';
import { findUserById } from '../users/store.js';
import { deleteMember, findMember, forgetLostDomains, groupsSeeing, listMembers, toMember, upsertMember, type GroupSeeing, type Member } from './members-store.js';
import type { AccessWatchers } from './access.js';
import { resolveDomain } from './service.js';
import type { DomainRow, MemberRole } from './store.js';

type Deps = Pick<Services, 'db'>;

/** Whether the caller may learn members' names and e-mail addresses (toMember): an administrator. */
export const revealsMembers = (principal: Principal): boolean => principal.user.role === 'admin';

/** The domain if the caller may manage its members: 404 unless it sees the domain, 403 unless it owns it or is an administrator. */
export const managedDomain = (deps: Deps, principal: Principal, domainId: number) => resolveDomain(deps, principal, domainId, undefined, 'owner');

/** GET /api/domains/:domainId/members: its members, and the groups that see it (src/groups). */
export async function listDomainMembers(deps: Deps, principal: Principal, domainId: number): Promise<{ members: Member[]; groups: GroupSeeing[] }> {
  const domain = await managedDomain(deps, principal, domainId);
  const members = (await listMembers(deps.db, domain.id)).map((row) => toMember(row, revealsMembers(principal)));
  return { members, groups: await groupsSeeing(deps.db, domain.id) };
}

/**
 * After the caller's rights were checked (the API, the command line): gives `userId` the role on
 * the domain, recorded in the activity of `actorId`; 422 for an unknown user or the owner.
 * `created`: it was not a member before. `reveal`: the answer and the activity name the user by
 * its e-mail address (an administrator, the command line), else by its id.
 */
export async function grantRole(
  deps: Deps,
  domain: DomainRow,
  grant: { userId: number; role: MemberRole },
  actorId: number | null,
  client: ClientInfo,
  reveal: boolean,
  watchers?: AccessWatchers,
): Promise<{ member: Member; created: boolean }> {
  const user = await findUserById(deps.db, grant.userId);
  if (!user) throw invalidField('userId', 'no user has this id');
  if (domain.owner_id === user.id) throw invalidField('userId', 'is the owner of the domain, who holds every role on it');
  const before = await deps.db.transaction(async (tx) => {
    const { before } = await upsertMember(tx, domain.id, user.id, grant.role, actorId);
    if (before === grant.role) return before;
    // An editor made a viewer no longer silences the domain's alerts: its silences are judged at each evaluation.
    const who = reveal ? user.email : `user ${user.id}`;
    const details = before === null ? `Shared domain ${domain.name} with ${who} as ${grant.role}` : `Changed the role of ${who} on domain ${domain.name} from ${before} to ${grant.role}`;
    if (actorId !== null) {
      await recordActivity(tx, { userId: actorId, action: before === null ? 'domain.member_add' : 'domain.member_role', resource: `domains/${domain.id}/members/${user.id}`, details }, client);
    }
    return before;
  });
  if (before !== null && before !== grant.role) await watchers?.recheckDomains([domain.id]);
  return { member: toMember((await findMember(deps.db, domain.id, user.id))!, reveal), created: before === null };
}

/** POST /api/domains/:domainId/members: adds a member or changes its role (the owner, administrators). */
export async function shareDomain(
  deps: Deps,
  principal: Principal,
  domainId: number,
  grant: { userId: number; role: MemberRole },
  client: ClientInfo,
  watchers?: AccessWatchers,
): Promise<{ member: Member; created: boolean }> {
  const domain = await managedDomain(deps, principal, domainId);
  return grantRole(deps, domain, grant, principal.user.id, client, revealsMembers(principal), watchers);
}

/**
 * After the caller's rights were checked: ends `userId`'s membership of the domain (404 "Member
 * not found" when it is none), takes the domain out of its rules' pending notifications, and
 * records it in the activity of `actorId`; then checks the domain's open tails again.
 */
export async function revokeRole(deps: Deps, domain: DomainRow, userId: number, actorId: number | null, client: ClientInfo, reveal: boolean, watchers?: AccessWatchers): Promise<void> {
  await deps.db.transaction(async (tx) => {
    const before = await deleteMember(tx, domain.id, userId);
    if (before === null) throw notFound('Member');
    await forgetLostDomains(tx, [userId]);
    if (actorId === null) return;
    const email = (reveal ? (await findUserById(tx, userId))?.email : undefined) ?? `user ${userId}`;
    const details = actorId === userId ? `Left domain ${domain.name} (was ${before})` : `Removed ${email} (${before}) from domain ${domain.name}`;
    await recordActivity(tx, { userId: actorId, action: 'domain.member_remove', resource: `domains/${domain.id}/members/${userId}`, details }, client);
  });
  await watchers?.recheckDomains([domain.id]);
}

/**
 * DELETE /api/domains/:domainId/members/:userId: the owner and administrators remove a member; a
 * member may remove itself (leave the domain).
 */
export async function unshareDomain(deps: Deps, principal: Principal, domainId: number, userId: number, client: ClientInfo, watchers?: AccessWatchers): Promise<void> {
  const leaving = userId === principal.user.id;
  const domain = leaving ? await resolveDomain(deps, principal, domainId) : await managedDomain(deps, principal, domainId);
  await revokeRole(deps, domain, userId, principal.user.id, client, revealsMembers(principal), watchers);
}
