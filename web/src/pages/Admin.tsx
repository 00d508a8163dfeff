/**
 * Administration (administrators only; the navigation hides it from others and the API refuses
 * them anyway): users (create, edit, deactivate, reset password by e-mail, delete), a user's
 * permissions and activity, domains (add, change the owner, delete after typing its name), and
 * groups (pages/Groups.tsx). The tab, the user or group shown and the pages are in the URL.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, type User } from '../api.js';
import { ErrorMessage, FormErrors } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import { utcTime } from '../format.js';
import { navigate, withQuery, type Location } from '../router.js';
import { Groups } from './Groups.js';

interface FullUser extends User {
  active: boolean;
  lastLoginAt: string | null;
}
interface Domain {
  id: number;
  name: string;
  ownerId: number | null;
}
interface Page<T> {
  items: T[];
  pages: number;
  total: number;
}
const RESOURCES = ['users', 'domains', 'logs', 'alerts'] as const;
const ACTIONS = ['read', 'create', 'update', 'delete'] as const;
function NewUser({ onCreated }: { onCreated: () => void }) {
  const [draft, setDraft] = useState({ email: '', name: '', password: '', role: 'user' });
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await api('POST', '/api/users', draft);
      setDraft({ email: '', name: '', password: '', role: 'user' });
      setError(null);
      onCreated();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="inline-form" onSubmit={submit} aria-label="New user">
      <label for="new-email">E-mail</label>
      <input id="new-email" type="email" value={draft.email} onInput={(e) => setDraft({ ...draft, email: e.currentTarget.value })} />
      <label for="new-name">Name</label>
      <input id="new-name" value={draft.name} onInput={(e) => setDraft({ ...draft, name: e.currentTarget.value })} />
      <label for="new-password">Password</label>
      <input id="new-password" type="password" autocomplete="new-password" value={draft.password} onInput={(e) => setDraft({ ...draft, password: e.currentTarget.value })} />
      <label for="new-role">Role</label>
      <select id="new-role" value={draft.role} onChange={(e) => setDraft({ ...draft, role: e.currentTarget.value })}>
        <option value="user">user</option>
        <option value="admin">admin</option>
      </select>
      <button type="submit">Create user</button>
      <FormErrors error={error} />
    </form>
  );
}

function UserDetail({ id, onChanged }: { id: number; onChanged: () => void }) {
  const [user, setUser] = useState<FullUser | null>(null);
  const [rights, setRights] = useState<Set<string>>(new Set());
  const [activity, setActivity] = useState<{ action: string; details: string; ipAddress: string; timestamp: string }[]>([]);
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  // The name and e-mail as edited, and what the API said of them (shown at that form).
  const [edit, setEdit] = useState({ email: '', name: '' });
  const [editError, setEditError] = useState<unknown>(null);
  /** The user, their permissions and activity; `resetEdit` also puts the stored name and e-mail into the edit form (not after other saves: what is being typed there stays). */
  const load = async (resetEdit: boolean) => {
    try {
      const [u, p, a] = await Promise.all([
        api<FullUser>('GET', `/api/users/${id}`),
        api<{ permissions: { resource: string; actions: string[] }[] }>('GET', `/api/users/${id}/permissions`),
        api<{ activities: { action: string; details: string; ipAddress: string; timestamp: string }[] }>('GET', `/api/users/${id}/activity?limit=20`),
      ]);
      setUser(u);
      if (resetEdit) setEdit({ email: u.email, name: u.name });
      setRights(new Set(p.permissions.flatMap((entry) => entry.actions.map((action) => `${entry.resource}:${action}`))));
      setActivity(a.activities);
    } catch (err) {
      setError(err);
    }
  };
  useEffect(() => {
    setUser(null);
    setError(null);
    setEditError(null);
    setNotice(null);
    load(true);
  }, [id]);
  /** Runs a save, then shows the user as stored and `done` (once the page shows what was saved). */
  const act = async (work: () => Promise<unknown>, done: string, { showError = setError, resetEdit = false } = {}) => {
    try {
      await work();
      setError(null);
      setEditError(null);
      await load(resetEdit);
      setNotice(done);
      onChanged();
    } catch (err) {
      showError(err);
    }
  };
  if (!user) return error ? <ErrorMessage error={error} /> : <p aria-live="polite">Loading…</p>;
  const toggle = (key: string) => {
    const next = new Set(rights);
    if (next.has(key)) next.delete(key);
    else next.add(key);
    setRights(next);
  };
  const permissions = RESOURCES.map((resource) => ({ resource, actions: ACTIONS.filter((a) => rights.has(`${resource}:${a}`)) })).filter((e) => e.actions.length > 0);
  return (
    <section class="user-detail" aria-label={`User ${user.email}`}>
      <h2>{user.email}</h2>
      <p>
        {user.name || '(no name)'} · {user.role} · {user.active ? 'active' : 'deactivated'} · last sign-in {utcTime(user.lastLoginAt)}
      </p>
      <form
        class="inline-form"
        aria-label="Edit user"
        onSubmit={(e) => {
          e.preventDefault();
          act(() => api('PUT', `/api/users/${id}`, edit), 'Saved', { showError: setEditError, resetEdit: true });
        }}
      >
        <label for="edit-email">E-mail</label>
        <input id="edit-email" type="email" value={edit.email} onInput={(e) => setEdit({ ...edit, email: e.currentTarget.value })} />
        <label for="edit-name">Name</label>
        <input id="edit-name" value={edit.name} onInput={(e) => setEdit({ ...edit, name: e.currentTarget.value })} />
        <button type="submit">Save</button>
        <FormErrors error={editError} />
      </form>
      <div class="actions">
        <button type="button" onClick={() => act(() => api('PUT', `/api/users/${id}`, { active: !user.active }), user.active ? 'Deactivated' : 'Activated')}>
          {user.active ? 'Deactivate' : 'Activate'}
        </button>
        <button type="button" onClick={() => act(() => api('PUT', `/api/users/${id}`, { role: user.role === 'admin' ? 'user' : 'admin' }), 'Role changed')}>
          {user.role === 'admin' ? 'Make user' : 'Make admin'}
        </button>
        <button type="button" onClick={() => act(() => api('POST', `/api/users/${id}/reset-password`, { email: user.email }), 'A reset link was e-mailed')}>
          E-mail a password reset link
        </button>
        <button
          type="button"
          onClick={() => {
            if (window.confirm(`Delete the user ${user.email}?`)) act(() => api('DELETE', `/api/users/${id}`), 'Deleted');
          }}
        >
          Delete
        </button>
      </div>
      {notice && <p aria-live="polite">{notice}</p>}
      <FormErrors error={error} />
      {user.role === 'admin' ? (
        <p class="hint">An administrator may do everything; permissions apply to users.</p>
      ) : (
        <form
          onSubmit={(e) => {
            e.preventDefault();
            act(() => api('PUT', `/api/users/${id}/permissions`, { permissions }), 'Permissions saved');
          }}
        >
          <Scroll label="Permissions">
            <table class="permissions">
              <caption>Permissions</caption>
              <thead>
                <tr>
                  <th scope="col">Resource</th>
                  {ACTIONS.map((a) => (
                    <th scope="col">{a}</th>
                  ))}
                </tr>
              </thead>
              <tbody>
                {RESOURCES.map((resource) => (
                  <tr>
                    <th scope="row">{resource}</th>
                    {ACTIONS.map((action) => (
                      <td>
                        <input type="checkbox" aria-label={`${resource} ${action}`} checked={rights.has(`${resource}:${action}`)} onChange={() => toggle(`${resource}:${action}`)} />
                      </td>
                    ))}
                  </tr>
                ))}
              </tbody>
            </table>
          </Scroll>
          <button type="submit">Save permissions</button>
        </form>
      )}
      <Scroll label="Recent activity">
        <table class="entries">
          <caption>Recent activity</caption>
          <thead>
            <tr>
              <th scope="col">Time (UTC)</th>
              <th scope="col">Action</th>
              <th scope="col">Details</th>
              <th scope="col">Client</th>
            </tr>
          </thead>
          <tbody>
            {activity.map((a) => (
              <tr>
                <td>{a.timestamp.replace('T', ' ').slice(0, 19)}</td>
                <td>{a.action}</td>
                <td class="wide">{a.details}</td>
                <td>{a.ipAddress}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
    </section>
  );
}

function Users({ location }: { location: Location }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  const selected = Number(location.query.get('user')) || null;
  const [list, setList] = useState<Page<FullUser> | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [version, setVersion] = useState(0);
  useEffect(() => {
    api<{ users: FullUser[]; pagination: { pages: number; total: number } }>('GET', `/api/users?limit=50&page=${page}`).then(
      (data) => setList({ items: data.users, pages: data.pagination.pages, total: data.pagination.total }),
      setError,
    );
  }, [page, version]);
  return (
    <>
      <NewUser onCreated={() => setVersion(version + 1)} />
      {error !== null && <ErrorMessage error={error} />}
      {list && (
        <Scroll label="Users">
          <table class="entries">
            <caption>{list.total} users</caption>
            <thead>
              <tr>
                <th scope="col">E-mail</th>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col">State</th>
                <th scope="col">Last sign-in</th>
              </tr>
            </thead>
            <tbody>
              {list.items.map((u) => (
                <tr aria-current={u.id === selected ? 'true' : undefined}>
                  <th scope="row">
                    <button type="button" class="entry" onClick={() => navigate(withQuery(location, { user: u.id }))}>
                      {u.email}
                    </button>
                  </th>
                  <td>{u.name}</td>
                  <td>{u.role}</td>
                  <td>{u.active ? 'active' : 'deactivated'}</td>
                  <td>{utcTime(u.lastLoginAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      {list && <Pager page={page} pages={list.pages} location={location} />}
      {selected !== null && <UserDetail id={selected} onChanged={() => setVersion(version + 1)} />}
    </>
  );
}

function Domains({ location }: { location: Location }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  const [list, setList] = useState<Page<Domain> | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [version, setVersion] = useState(0);
  const [draft, setDraft] = useState({ name: '', owner: '' });
  useEffect(() => {
    api<{ domains: Domain[]; pagination: { pages: number; total: number } }>('GET', `/api/domains?limit=50&page=${page}`).then(
      (data) => setList({ items: data.domains, pages: data.pagination.pages, total: data.pagination.total }),
      setError,
    );
  }, [page, version]);
  const act = async (work: () => Promise<unknown>) => {
    try {
      await work();
      setError(null);
      setVersion(version + 1);
    } catch (err) {
      setError(err);
    }
  };
  const owner = (text: string) => (text.trim() === '' ? null : Number(text));
  return (
    <>
      <form
        class="inline-form"
        aria-label="New domain"
        onSubmit={(e) => {
          e.preventDefault();
          act(async () => {
            await api('POST', '/api/domains', { name: draft.name, ownerId: owner(draft.owner) });
            setDraft({ name: '', owner: '' });
          });
        }}
      >
        <label for="domain-name">Domain</label>
        <input id="domain-name" value={draft.name} placeholder="shop.example.com" onInput={(e) => setDraft({ ...draft, name: e.currentTarget.value })} />
        <label for="domain-owner">Owner (user id)</label>
        <input id="domain-owner" inputMode="numeric" value={draft.owner} onInput={(e) => setDraft({ ...draft, owner: e.currentTarget.value })} />
        <button type="submit">Add domain</button>
      </form>
      <FormErrors error={error} />
      {list && (
        <Scroll label="Domains">
          <table class="entries">
            <caption>{list.total} domains</caption>
            <thead>
              <tr>
                <th scope="col">Domain</th>
                <th scope="col">Owner (user id)</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.items.map((d) => (
                <tr>
                  <th scope="row">{d.name}</th>
                  <td>
                    <input
                      aria-label={`Owner of ${d.name}`}
                      inputMode="numeric"
                      value={d.ownerId ?? ''}
                      onChange={(e) => act(() => api('PUT', `/api/domains/${d.id}`, { ownerId: owner(e.currentTarget.value) }))}
                    />
                  </td>
                  <td>
                    <button
                      type="button"
                      onClick={() => {
                        // Deleting a domain deletes its logs: the name must be typed.
                        if (window.prompt(`Deleting ${d.name} deletes its logs and alerts. Type the domain's name to delete it:`) === d.name) act(() => api('DELETE', `/api/domains/${d.id}`));
                      }}
                    >
                      Delete
                    </button>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      {list && <Pager page={page} pages={list.pages} location={location} />}
    </>
  );
}

const TABS = { users: 'Users', domains: 'Domains', groups: 'Groups' };
type Tab = keyof typeof TABS;

export function Admin({ user, location }: { user: User; location: Location }) {
  const asked = location.query.get('tab') ?? '';
  const tab: Tab = Object.hasOwn(TABS, asked) ? (asked as Tab) : 'users';
  if (user.role !== 'admin') {
    return (
      <main>
        <h1>Administration</h1>
        <p class="error" role="alert">
          Administration is for administrators.
        </p>
      </main>
    );
  }
  return (
    <main>
      <h1>Administration</h1>
      <div class="tabs" role="group" aria-label="What to administer">
        {(Object.keys(TABS) as Tab[]).map((t) => (
          <button type="button" aria-pressed={tab === t} onClick={() => navigate(t === 'users' ? location.path : `${location.path}?tab=${t}`)}>
            {TABS[t]}
          </button>
        ))}
      </div>
      {tab === 'users' && <Users location={location} />}
      {tab === 'domains' && <Domains location={location} />}
      {tab === 'groups' && <Groups location={location} />}
    </main>
  );
}
