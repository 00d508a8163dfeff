/**
 * Administration's groups (docs/reference/groups.md): every group with its members and the
 * domains it sees; a new group; and the group chosen (in the URL, `group`): renamed, deleted
 * (confirmed), members added from the users and removed, a role granted on chosen domains or on
 * all of them, changed in place, and revoked.
 */
import { useState } from 'preact/hooks';
import { allPages, api, ApiError } from '../api.js';
import { useChanges } from '../changes.js';
import { DomainPicker, type Domain } from '../components/DomainPicker.js';
import { ErrorMessage, FormErrors } from '../components/ErrorMessage.js';
import { FieldForm } from '../components/FieldForm.js';
import { RoleSelect, type Role } from '../components/RoleSelect.js';
import { EntryTable } from '../components/EntryTable.js';
import { Scroll } from '../components/Scroll.js';
import { counted, utcCell } from '../format.js';
import { allDomains } from '../data/reads.js';
import type { Grant, Group, GroupMember, User } from '../data/types.js';
import { useData } from '../data/use-data.js';
import { navigate, withQuery, type Location } from '../router.js';

const grantName = (grant: Grant) => grant.name ?? 'All domains';
/** The grant's domain as the API's paths name it. */
const grantPath = (grant: Grant) => grant.domainId ?? 'all';
const memberName = (m: GroupMember) => (m.name ? `${m.email} · ${m.name}` : m.email);

/** One a line: addresses and domain names are not to be broken, and the table scrolls sideways where they do not fit. */
function Listed({ items }: { items: string[] }) {
  if (items.length === 0) return <>none</>;
  return (
    <ul class="plain">
      {items.map((item) => (
        <li>{item}</li>
      ))}
    </ul>
  );
}

function GroupsTable({ groups, selected, location }: { groups: Group[]; selected: number | null; location: Location }) {
  return (
    <Scroll label="Groups">
      <table class="entries groups">
        <caption>{counted(groups.length, 'group')}</caption>
        <thead>
          <tr>
            <th scope="col">Group</th>
            <th scope="col">Members</th>
            <th scope="col">Domains</th>
          </tr>
        </thead>
        <tbody>
          {groups.map((g) => (
            <tr aria-current={g.id === selected ? 'true' : undefined}>
              <th scope="row" class="name">
                <button type="button" class="entry" onClick={() => navigate(withQuery(location, { group: g.id }))}>
                  {g.name}
                </button>
              </th>
              <td>
                <Listed items={g.members.map((m) => m.email)} />
              </td>
              <td>
                <Listed items={g.domains.map((d) => `${grantName(d)} (${d.role})`)} />
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </Scroll>
  );
}

/** Grants the group a role on the domains chosen, or on all of them; the API's message for `domains` at the picker. */
function GrantForm({ group, domains, onGranted }: { group: Group; domains: Domain[] | null; onGranted: (text: string) => Promise<void> }) {
  const [which, setWhich] = useState<'all' | number[]>([]);
  const [role, setRole] = useState<Role>('viewer');
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await api('POST', `/api/groups/${group.id}/domains`, { domains: which, role });
      setWhich([]);
      setError(null);
      const what = which === 'all' ? 'all domains' : counted(which.length, 'domain');
      await onGranted(`${group.name} is ${role} on ${what}`);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="grant-form" onSubmit={submit} noValidate aria-label="Grant a role">
      <DomainPicker
        id="grant-domains"
        legend="Grant a role on"
        allLabel="All domains, those added later too"
        value={which}
        domains={domains}
        onChange={setWhich}
        error={error instanceof ApiError ? error.details.domains : undefined}
      />
      <div class="inline-form fields">
        <div class="field">
          <label for="grant-role">Role</label>
          <RoleSelect id="grant-role" value={role} onChange={setRole} />
        </div>
        <button type="submit">Grant</button>
      </div>
      <FormErrors error={error} atFields={['domains']} />
    </form>
  );
}

interface DetailProps {
  group: Group;
  users: User[] | null;
  domains: Domain[] | null;
  /** useChanges's: a change, then the groups as stored. */
  act: (done: string, work?: () => Promise<unknown>) => Promise<void>;
  onDeleted: () => void;
}

function GroupDetail({ group, users, domains, act, onDeleted }: DetailProps) {
  const path = `/api/groups/${group.id}`;
  const inGroup = new Set(group.members.map((m) => m.userId));
  const addable = (users ?? []).filter((u) => !inGroup.has(u.id)).sort((a, b) => a.email.localeCompare(b.email));
  return (
    <section class="group-detail" aria-labelledby="group-title">
      <h2 id="group-title">{group.name}</h2>
      <div class="actions">
        <FieldForm
          key={`${group.id} ${group.name}`}
          name="Rename the group"
          id="group-name"
          field="name"
          label="Name"
          initial={group.name}
          button="Rename"
          onSubmit={async (name) => {
            await api('PUT', path, { name });
            await act(`Renamed to ${name.trim()}`);
          }}
        />
        <button
          type="button"
          onClick={() => {
            if (window.confirm(`Delete the group ${group.name}? Its members lose what it gave them at once.`)) act(`Group ${group.name} deleted`, () => api('DELETE', path).then(onDeleted));
          }}
        >
          Delete the group
        </button>
      </div>

      <h3>Members</h3>
      {group.members.length === 0 ? (
        <p class="hint">No member yet.</p>
      ) : (
        <EntryTable
          label={`Members of ${group.name}`}
          kind="group-members"
          name={{ header: 'Member', cell: memberName }}
          columns={[{ header: 'Added (UTC)', cell: (m) => utcCell(m.addedAt), class: 'nowrap' }]}
          action={{
            header: 'Remove',
            text: 'Remove',
            label: (m) => `Remove ${m.email} from ${group.name}`,
            onClick: (m) => act(`${m.email} removed from ${group.name}`, () => api('DELETE', `${path}/members/${m.userId}`)),
          }}
          entries={group.members}
        />
      )}
      {users === null ? (
        <p aria-live="polite">Loading the users…</p>
      ) : (
        <FieldForm
          name="Add a member"
          id="group-member"
          field="userId"
          label="User"
          options={addable.map((u) => ({ value: String(u.id), label: u.name ? `${u.email} (${u.name})` : u.email }))}
          button="Add to the group"
          onSubmit={async (userId) => {
            await api('POST', `${path}/members`, { userId: Number(userId) });
            await act(`${users.find((u) => u.id === Number(userId))?.email ?? `User ${userId}`} added to ${group.name}`);
          }}
        />
      )}

      <h3>Domains</h3>
      {group.domains.length === 0 ? (
        <p class="hint">No domain yet: the group gives its members nothing.</p>
      ) : (
        <EntryTable
          label={`Domains of ${group.name}`}
          kind="grants"
          name={{ header: 'Domain', cell: grantName }}
          columns={[
            {
              header: 'Role',
              cell: (grant) => (
                <RoleSelect
                  label={`Role on ${grantName(grant)}`}
                  value={grant.role}
                  onChange={(role) => act(`${group.name} is ${role} on ${grant.name ?? 'all domains'}`, () => api('POST', `${path}/domains`, { domains: grant.domainId === null ? 'all' : [grant.domainId], role }))}
                />
              ),
            },
            { header: 'Granted (UTC)', cell: (grant) => utcCell(grant.grantedAt), class: 'nowrap' },
          ]}
          action={{
            header: 'Revoke',
            text: 'Revoke',
            label: (grant) => `Revoke ${grantName(grant)}`,
            onClick: (grant) => act(`${grantName(grant)} revoked`, () => api('DELETE', `${path}/domains/${grantPath(grant)}`)),
          }}
          entries={group.domains}
        />
      )}
      <GrantForm group={group} domains={domains} onGranted={act} />
    </section>
  );
}

export function Groups({ location }: { location: Location }) {
  const selected = Number(location.query.get('group')) || null;
  const read = useData([], (signal) => api<{ groups: Group[] }>('GET', '/api/groups', undefined, signal));
  const usersRead = useData([], (signal) => allPages<'users', User>('/api/users', 'users', signal));
  const domainsRead = useData([], (signal) => allDomains(false, signal));
  const groups = read.data?.groups ?? null;
  const { act, error: changeError, notice } = useChanges(read.reload);
  const error = changeError ?? read.error ?? usersRead.error ?? domainsRead.error;
  const group = groups?.find((g) => g.id === selected) ?? null;
  return (
    <>
      <p class="hint">A group gives each of its members a role on its domains, or on every domain: a support team reads every customer's domain without being an administrator.</p>
      <FieldForm
        name="New group"
        id="new-group"
        field="name"
        label="Group name"
        button="Create group"
        onSubmit={async (name) => {
          const made = await api<Group>('POST', '/api/groups', { name });
          await act(`Group ${made.name} created`);
          navigate(withQuery(location, { group: made.id }));
        }}
      />
      <p class="notice" aria-live="polite">
        {notice}
      </p>
      {error !== null && <ErrorMessage error={error} />}
      {groups === null && error === null && <p aria-live="polite">Loading…</p>}
      {groups !== null && groups.length === 0 && <p class="hint">No group yet.</p>}
      {groups !== null && groups.length > 0 && <GroupsTable groups={groups} selected={selected} location={location} />}
      {/* Keyed: another group's forms start empty. */}
      {group && <GroupDetail key={group.id} group={group} users={usersRead.data} domains={domainsRead.data} act={act} onDeleted={() => navigate(withQuery(location, { group: null }))} />}
    </>
  );
}
