/**
 * Invitations to a domain by e-mail address (docs/reference/domains.md#invitations). The owner or
 * an administrator names an address and a role; whether or not the address has an account, the
 * same happens and the same answer comes back: an invitation is stored (a one-use link,
 * src/auth/links.ts, valid INVITATION_TTL_S) and mailed in the background, and recorded in the
 * inviter's activity by address only. Giving an existing account the membership at once would
 * tell the inviter, through the members' list, that the address is registered; so the membership
 * comes when the link is used: to the address's account if one exists by then (its password and
 * name stay as they are; it signs in as usual), else to an account created with the name and
 * password given. An invitation stands for its inviter's right: it is void once the inviter no
 * longer manages the domain.
 */
import { recordActivity, type ClientInfo } from '../activity/store.js';
import { redeemLink, newLink } from '../auth/links.js';
import { hashPassword } from '../auth/passwords.js';
import { beginAttempt } from '../auth/throttle.js';
import type { Principal, Services } from '../context.js';
import { DAY_MS } from '../../core/durations.js';
import { isUniqueViolation } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { conflict, invalidField, notFound } from '../http/errors.js';
import type { Mail } from '../mail/mailer.js';
import { findUserByEmail, insertUser } from '../users/store.js';
import { deleteInvitation, findLiveInvitation, listInvitations, spendInvitation, toInvitation, upsertInvitation, type Invitation } from './invitations-store.js';
import { findMember, upsertMember } from './members-store.js';
import { managedDomain } from './members.js';
import type { DomainRow, MemberRole } from './store.js';

type Deps = Pick<Services, 'db' | 'log' | 'mailer' | 'config'>;

/** How long an invitation's link works: a week, the time a new colleague may take to open it. */
export const INVITATION_TTL_S = (7 * DAY_MS) / 1000;

/** The page an invitation links to; `account=existing` leaves out the name and password fields. */
const ACCEPT_PAGE = '/accept-invitation';

/**
 * Sends a mail after the answer: the request's time does not depend on which mail it is, nor on
 * the mail server. A failure is logged with the invitation's id, never the body (it holds the link).
 */
function sendInBackground(deps: Deps, mail: Mail, context: Record<string, unknown>): void {
  void deps.mailer.send(mail).catch((err: unknown) => deps.log.error({ err: (err as Error).message, ...context }, 'invitation e-mail could not be sent'));
}

/**
 * POST /api/domains/:domainId/members with `email`: invites the address (the owner, admins; at
 * most THROTTLES.invitation a window per inviter, as each sends a mail to a typed address). The
 * same steps whether or not the address has an account; only the mail's wording differs.
 */
export async function inviteMember(deps: Deps, principal: Principal, domainId: number, invite: { email: string; role: MemberRole }, client: ClientInfo): Promise<void> {
  const domain = await managedDomain(deps, principal, domainId);
  const quota = await beginAttempt(deps.db, [{ scope: 'invitation', key: String(principal.user.id) }], { refusal: 'Too many invitations; try again later' });
  const account = await findUserByEmail(deps.db, invite.email);
  const link = newLink(deps.config.baseUrl, ACCEPT_PAGE, INVITATION_TTL_S);
  const invitation = await deps.db.transaction(async (tx) => {
    const row = await upsertInvitation(tx, { domainId: domain.id, email: invite.email, role: invite.role, hash: link.hash, invitedBy: principal.user.id, expiresAt: link.expiresAt });
    const details = `Invited ${invite.email} to domain ${domain.name} as ${invite.role}`;
    await recordActivity(tx, { userId: principal.user.id, action: 'domain.member_invite', resource: `domains/${domain.id}/invitations/${row.id}`, details }, client);
    return row;
  });
  await quota.succeeded();
  sendInBackground(deps, invitationMail(deps, domain, invite, principal, link.url, account !== undefined), { domainId: domain.id, invitationId: invitation.id });
}

function invitationMail(deps: Deps, domain: DomainRow, invite: { email: string; role: MemberRole }, inviter: Principal, url: string, hasAccount: boolean): Mail {
  const who = inviter.user.name ? `${inviter.user.name} (${inviter.user.email})` : inviter.user.email;
  const what = invite.role === 'editor' ? 'read its logs, statistics and alerts and change its alerts' : 'read its logs, statistics and alerts';
  const lines = [
    'Hello,',
    '',
    `${who} invited you to the domain ${domain.name} on tailhouse (${deps.config.baseUrl}) as ${invite.role === 'editor' ? 'an editor' : 'a viewer'}: you will ${what}.`,
    '',
    ...(hasAccount
      ? ['This address already has a tailhouse account. Open this link within 7 days to accept; then sign in as usual:', '', `${url}&account=existing`]
      : ['Open this link within 7 days to create your account (you choose your name and password) and join:', '', url]),
    '',
    'The link works once. If you did not expect this message, you can ignore it.',
  ];
  return { to: invite.email, subject: `[tailhouse] You are invited to ${domain.name}`, text: lines.join('\r\n') };
}

/** GET /api/domains/:domainId/invitations: the pending ones (the owner, admins). */
export async function listDomainInvitations(deps: Deps, principal: Principal, domainId: number): Promise<Invitation[]> {
  const domain = await managedDomain(deps, principal, domainId);
  return (await listInvitations(deps.db, domain.id)).map(toInvitation);
}

/** DELETE /api/domains/:domainId/invitations/:invitationId: withdraws a pending one; its link stops working. */
export async function withdrawInvitation(deps: Deps, principal: Principal, domainId: number, invitationId: number, client: ClientInfo): Promise<void> {
  const domain = await managedDomain(deps, principal, domainId);
  await deps.db.transaction(async (tx) => {
    const row = await deleteInvitation(tx, domain.id, invitationId);
    if (!row) throw notFound('Invitation');
    const details = `Withdrew the invitation of ${row.email} to domain ${domain.name}`;
    await recordActivity(tx, { userId: principal.user.id, action: 'domain.invitation_withdraw', resource: `domains/${domain.id}/invitations/${row.id}`, details }, client);
  });
}

export interface Acceptance {
  email: string;
  domain: string;
  role: MemberRole;
  /** Whether the link created the account (else the domain went to the address's account). */
  created: boolean;
}

/**
 * POST /api/invitations/accept: spends the link and makes the address's account a member in the
 * invitation's role, creating the account (a `user`, active, the default permissions) when the
 * address has none; then `password` is required. An account that exists keeps its password and
 * name (those given are not used) and a membership it already has keeps its role. Unknown, used,
 * withdrawn, expired links and those whose inviter no longer manages the domain are refused alike.
 */
export async function acceptInvitation(deps: Deps, body: { token: string; name?: string | undefined; password?: string | undefined }, client: ClientInfo): Promise<Acceptance> {
  const passwordRequired = () => invalidField('password', 'is required to create your account');
  return redeemLink(deps.db, client, body.token, {
    noun: 'Invitation link',
    find: findLiveInvitation,
    prepare: async (invitation) => {
      if (await findUserByEmail(deps.db, invitation.email)) return null;
      if (body.password === undefined) throw passwordRequired();
      return hashPassword(body.password);
    },
    spend: async (tx, hash, passwordHash) => {
      const invitation = await spendInvitation(tx, hash);
      if (!invitation) return undefined;
      const [domain] = await tx.query<DomainRow>(sql`select * from domains where id = ${invitation.domain_id}`);
      let user = await findUserByEmail(tx, invitation.email);
      const created = user === undefined;
      if (user === undefined) {
        // The account was deleted since the link was looked up: a password is needed after all.
        if (passwordHash === null) throw passwordRequired();
        try {
          user = await insertUser(tx, { name: body.name ?? '', email: invitation.email, passwordHash, role: 'user', active: true });
        } catch (err) {
          // Created meanwhile by another request; the link is not spent, and works again.
          if (isUniqueViolation(err)) throw conflict('Email already in use; open the link again');
          throw err;
        }
        await recordActivity(tx, { userId: user.id, action: 'user.create', resource: `users/${user.id}`, details: `Created the account through an invitation to domain ${domain!.name}` }, client);
      }
      if (domain!.owner_id !== user.id && !(await findMember(tx, domain!.id, user.id))) {
        await upsertMember(tx, domain!.id, user.id, invitation.role, invitation.invited_by);
        const details = `Joined domain ${domain!.name} as ${invitation.role} through an invitation from user ${invitation.invited_by}`;
        await recordActivity(tx, { userId: user.id, action: 'domain.invitation_accept', resource: `domains/${domain!.id}/members/${user.id}`, details }, client);
      }
      return { email: user.email, domain: domain!.name, role: invitation.role, created };
    },
  });
}
