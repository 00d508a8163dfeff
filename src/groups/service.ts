/**
 * Groups (docs/reference/groups.md): administrators gather users in a group and give it a role on
 * domains, or on every domain, at once. What a member of a group then sees is decided with every
 * other grant by one rule (grantsOf, src/domains/store.ts). The functions here run after the
 * caller's right was checked (adminOnly for the API, the operator's shell for the command line);
 * each change is recorded in the activity of `actor.userId` when there is one, and a change that
 * takes domains away takes effect at once, as a revoked membership does (forgetLostDomains; the
 * process's open live tails are checked again).
 */
import { recordActivity, type ClientInfo } from '../activity/store.js';
import type { Principal, Services } from '../context.js';
import { isUniqueViolation, type Db } from '../../core/db/postgres.js';
import type { AccessWatchers } from '../domains/access.js';
import { forgetLostDomains } from '../domains/members-store.js';
import type { MemberRole } from '../domains/store.js';
import { conflict, forbidden, invalidField, notFound } from '../http/errors.js';
import { findUserById } from '../users/store.js';
import * as store from './store.js';
import type { Group } from './store.js';

export type GroupDeps = Pick<Services, 'db'> & { watchers?: AccessWatchers | undefined };

/** Who changes a group: the user in whose activity it is recorded (null: the command line without `--as`), and from where. */
export interface GroupActor {
  userId: number | null;
  client: ClientInfo;
}

/** Groups are the administrators' (403 for anyone else, who learns nothing of them). */
export function adminOnly(principal: Principal): void {
  if (principal.user.role !== 'admin') throw forbidden();
}

/** The caller of a change to a group, once it is known to be an administrator. */
export function actorOf(principal: Principal, client: ClientInfo): GroupActor {
  adminOnly(principal);
  return { userId: principal.user.id, client };
}

const groupExists = () => conflict('Group already exists');

async function record(db: Db, actor: GroupActor, action: string, resource: string, details: string): Promise<void> {
  if (actor.userId !== null) await recordActivity(db, { userId: actor.userId, action, resource, details }, actor.client);
}

export const listGroups = (deps: GroupDeps): Promise<Group[]> => store.listGroups(deps.db);

export async function getGroup(deps: GroupDeps, groupId: number): Promise<Group> {
  const group = await store.findGroup(deps.db, groupId);
  if (!group) throw notFound('Group');
  return group;
}

export async function createGroup(deps: GroupDeps, actor: GroupActor, name: string): Promise<Group> {
  try {
    const id = await deps.db.transaction(async (tx) => {
      const id = await store.insertGroup(tx, name);
      await record(tx, actor, 'group.create', `groups/${id}`, `Created group ${name}`);
      return id;
    });
    return getGroup(deps, id);
  } catch (err) {
    if (isUniqueViolation(err)) throw groupExists();
    throw err;
  }
}

export async function renameGroup(deps: GroupDeps, actor: GroupActor, groupId: number, name: string): Promise<Group> {
  const before = await getGroup(deps, groupId);
  try {
    await deps.db.transaction(async (tx) => {
      if (!(await store.renameGroup(tx, groupId, name))) throw notFound('Group');
      await record(tx, actor, 'group.update', `groups/${groupId}`, `Renamed group ${before.name} to ${name}`);
    });
  } catch (err) {
    if (isUniqueViolation(err)) throw groupExists();
    throw err;
  }
  return getGroup(deps, groupId);
}

/** After a change that took domains from members of a group has committed: the open live tails of the domains it reached are checked again. */
async function recheck(deps: GroupDeps, reach: number[] | 'all'): Promise<void> {
  await deps.watchers?.recheckDomains(reach);
}

export async function deleteGroup(deps: GroupDeps, actor: GroupActor, groupId: number): Promise<void> {
  const group = await getGroup(deps, groupId);
  await deps.db.transaction(async (tx) => {
    const members = await store.deleteGroup(tx, groupId);
    if (members === null) throw notFound('Group');
    await forgetLostDomains(tx, members);
    await record(tx, actor, 'group.delete', `groups/${groupId}`, `Deleted group ${group.name} (${members.length} members, ${group.domains.length} grants)`);
  });
  await recheck(deps, store.reachOf(group));
}

/** Adds the user to the group; `created`: it was not a member. 422 on `userId` for an unknown user. */
export async function addMember(deps: GroupDeps, actor: GroupActor, groupId: number, userId: number): Promise<{ group: Group; created: boolean }> {
  const group = await getGroup(deps, groupId);
  const user = await findUserById(deps.db, userId);
  if (!user) throw invalidField('userId', 'no user has this id');
  const created = await deps.db.transaction(async (tx) => {
    const added = await store.addGroupMember(tx, groupId, userId);
    if (added) await record(tx, actor, 'group.member_add', `groups/${groupId}/members/${userId}`, `Added ${user.email} to group ${group.name}`);
    return added;
  });
  return { group: await getGroup(deps, groupId), created };
}

/** Takes the user out of the group: 404 "Member not found" when it is none. */
export async function removeMember(deps: GroupDeps, actor: GroupActor, groupId: number, userId: number): Promise<void> {
  const group = await getGroup(deps, groupId);
  await deps.db.transaction(async (tx) => {
    if (!(await store.removeGroupMember(tx, groupId, userId))) throw notFound('Member');
    await forgetLostDomains(tx, [userId]);
    const email = (await findUserById(tx, userId))?.email ?? `user ${userId}`;
    await record(tx, actor, 'group.member_remove', `groups/${groupId}/members/${userId}`, `Removed ${email} from group ${group.name}`);
  });
  await recheck(deps, store.reachOf(group));
}

/**
 * Gives the group `role` on the domains (`all`: on every domain, those registered later too), or
 * changes the role of its grants there; 422 on `domains` naming the ids that are no domain.
 */
export async function grantDomains(deps: GroupDeps, actor: GroupActor, groupId: number, domains: readonly number[] | 'all', role: MemberRole): Promise<Group> {
  const group = await getGroup(deps, groupId);
  await deps.db.transaction(async (tx) => {
    const { unknown, changed } = await store.grantGroup(tx, groupId, domains === 'all' ? null : domains, role);
    if (unknown.length > 0) throw invalidField('domains', `no domain has the id ${unknown.slice(0, 10).join(', ')}${unknown.length > 10 ? ', …' : ''}`);
    const what = domains === 'all' ? 'every domain' : domains.length === 1 ? `domain ${domains[0]}` : `${domains.length} domains`;
    if (changed > 0) await record(tx, actor, 'group.grant', `groups/${groupId}/domains`, `Gave group ${group.name} the role ${role} on ${what}`);
  });
  // A grant lowered to viewer ends nothing open: a viewer still tails; silences are judged at each evaluation.
  return getGroup(deps, groupId);
}

/** Ends the group's grant on a domain, or on every domain (`all`): 404 "Grant not found" when it holds none. */
export async function revokeDomain(deps: GroupDeps, actor: GroupActor, groupId: number, domainId: number | 'all'): Promise<void> {
  const group = await getGroup(deps, groupId);
  await deps.db.transaction(async (tx) => {
    if (!(await store.revokeGroup(tx, groupId, domainId === 'all' ? null : domainId))) throw notFound('Grant');
    await forgetLostDomains(tx, await store.groupMemberIds(tx, groupId));
    const what = domainId === 'all' ? 'every domain' : `domain ${domainId}`;
    await record(tx, actor, 'group.revoke', `groups/${groupId}/domains/${domainId}`, `Took group ${group.name}'s role on ${what} away`);
  });
  await recheck(deps, domainId === 'all' ? 'all' : [domainId]);
}
