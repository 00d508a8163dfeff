/**
 * Who sees a domain, for those who manage it (its owner, administrators): its members, whose role
 * changes here or who are removed (confirmed); inviting an address, or adding a user by id; the
 * invitations not used yet, withdrawn here; and the groups that see it (administrators manage
 * those on the administration page). Only an administrator learns members' names and addresses:
 * the API gives an owner their user ids (docs/reference/domains.md#members).
 */
import { api } from '../api.js';
import { useChanges } from '../changes.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { FieldForm } from '../components/FieldForm.js';
import { RoleSelect, roleName, type Role } from '../components/RoleSelect.js';
import { EntryTable } from '../components/EntryTable.js';
import type { GroupSeeing, Invitation, Member } from '../data/types.js';
import { useData } from '../data/use-data.js';
import { counted, utcCell } from '../format.js';

/** Who gave a role or sent an invitation: null when unknown (the command line, a user deleted since). */
const giver = (id: number | null, me: number) => (id === null ? '–' : id === me ? 'you' : `user ${id}`);
const who = (m: Member) => m.email ?? `user ${m.userId}`;

function MembersTable({ members, me, onRole, onRemove }: { members: Member[]; me: number; onRole: (m: Member, role: Role) => void; onRemove: (m: Member) => void }) {
  return (
    <EntryTable
      label="Members"
      kind="members"
      caption={`${counted(members.length, 'member')}, besides the owner`}
      name={{
        header: 'Member',
        cell: (m) => (
          <>
            {who(m)}
            {m.name && <span class="hint"> · {m.name}</span>}
          </>
        ),
      }}
      columns={[
        { header: 'Role', cell: (m) => <RoleSelect label={`Role of ${who(m)}`} value={m.role} onChange={(role) => onRole(m, role)} /> },
        { header: 'Given by', cell: (m) => giver(m.grantedBy, me) },
        { header: 'Since (UTC)', cell: (m) => utcCell(m.updatedAt), class: 'nowrap' },
      ]}
      action={{ header: 'Remove', text: 'Remove', label: (m) => `Remove ${who(m)}`, onClick: onRemove }}
      entries={members}
    />
  );
}

function InvitationsTable({ invitations, me, onWithdraw }: { invitations: Invitation[]; me: number; onWithdraw: (i: Invitation) => void }) {
  return (
    <EntryTable
      label="Pending invitations"
      kind="invitations"
      caption={`${counted(invitations.length, 'invitation')} not used yet`}
      name={{ header: 'Address', cell: (i) => i.email }}
      columns={[
        { header: 'Role', cell: (i) => i.role },
        { header: 'Invited by', cell: (i) => giver(i.invitedBy, me) },
        { header: 'Link valid until (UTC)', cell: (i) => utcCell(i.expiresAt), class: 'nowrap' },
      ]}
      action={{ header: 'Withdraw', text: 'Withdraw', label: (i) => `Withdraw the invitation of ${i.email}`, onClick: onWithdraw }}
      entries={invitations}
    />
  );
}

function Groups({ groups }: { groups: GroupSeeing[] }) {
  if (groups.length === 0) return <p class="hint">No group sees this domain.</p>;
  return (
    <ul class="plain groups">
      {groups.map((g) => (
        <li>
          <strong class="name">{g.name}</strong>: {g.role}
          {g.allDomains ? ', on every domain' : ''}
        </li>
      ))}
    </ul>
  );
}

/** `me`: the signed-in user's id. Another domain's shows anew: the domain's page is drawn again once its name is read. */
export function Members({ id, domain, me }: { id: number; domain: string; me: number }) {
  const read = useData([id], (signal) =>
    Promise.all([
      api<{ members: Member[]; groups: GroupSeeing[] }>('GET', `/api/domains/${id}/members`, undefined, signal),
      api<{ invitations: Invitation[] }>('GET', `/api/domains/${id}/invitations`, undefined, signal),
    ]),
  );
  const [members, pending] = read.data ?? [null, null];
  const invitations = pending?.invitations ?? null;
  const { act, error: changeError, notice } = useChanges(read.reload);
  const error = changeError ?? read.error;
  const path = `/api/domains/${id}`;
  return (
    <section class="members" aria-label="Members">
      <p class="hint">A viewer reads the domain's logs, statistics and alerts; an editor also changes its alerts and silences.</p>
      <p class="notice" aria-live="polite">
        {notice}
      </p>
      {error !== null && <ErrorMessage error={error} />}

      <h2>Members</h2>
      {members === null && error === null && <p aria-live="polite">Loading…</p>}
      {members !== null && members.members.length === 0 && <p class="hint">No member yet: only the owner and administrators see {domain}.</p>}
      {members !== null && members.members.length > 0 && (
        <MembersTable
          members={members.members}
          me={me}
          onRole={(m, role) => act(`${who(m)} is now ${roleName(role)}`, () => api('POST', `${path}/members`, { userId: m.userId, role }))}
          onRemove={(m) => {
            if (window.confirm(`Remove ${who(m)} from ${domain}? They stop seeing it at once.`)) act(`${who(m)} removed`, () => api('DELETE', `${path}/members/${m.userId}`));
          }}
        />
      )}

      <h2>Invite</h2>
      <p class="hint">A link valid 7 days is e-mailed to the address; it makes the address's account a member, creating one when there is none.</p>
      <FieldForm
        name="Invite by e-mail"
        id="share-email"
        field="email"
        label="E-mail"
        input={{ type: 'email' }}
        role="viewer"
        button="Send invitation"
        onSubmit={async (email, role) => act((await api<{ message: string }>('POST', `${path}/members`, { email, role })).message)}
      />
      <h2>Add by user id</h2>
      <FieldForm
        name="Add by user id"
        id="share-userId"
        field="userId"
        label="User id"
        input={{ inputMode: 'numeric' }}
        role="viewer"
        button="Add member"
        // A user id that is no number goes as null, which the API refuses at the field.
        onSubmit={async (userId, role) => {
          const member = await api<Member>('POST', `${path}/members`, { userId: Number(userId), role });
          await act(`${who(member)} is now ${roleName(member.role)}`);
        }}
      />

      <h2>Pending invitations</h2>
      {invitations === null && error === null && <p aria-live="polite">Loading…</p>}
      {invitations !== null && invitations.length === 0 && <p class="hint">No invitation waiting.</p>}
      {invitations !== null && invitations.length > 0 && (
        <InvitationsTable
          invitations={invitations}
          me={me}
          onWithdraw={(i) => {
            if (window.confirm(`Withdraw the invitation of ${i.email}? Its link stops working.`)) act(`Invitation of ${i.email} withdrawn`, () => api('DELETE', `${path}/invitations/${i.id}`));
          }}
        />
      )}

      <h2>Groups</h2>
      <p class="hint">Their members see the domain in the group's role. Administrators manage groups on the administration page.</p>
      {members !== null && <Groups groups={members.groups} />}
    </section>
  );
}
