/** Administration's user: edit, deactivate, change the role, e-mail a reset link, delete; their permissions and recent activity. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import type { Activity, Permissions, User } from '../data/types.js';
import { useData } from '../data/use-data.js';
import { utcTime } from '../format.js';
import { ErrorMessage, FormErrors } from './ErrorMessage.js';
import { Scroll } from './Scroll.js';

const RESOURCES = ['users', 'domains', 'logs', 'alerts'] as const;
const ACTIONS = ['read', 'create', 'update', 'delete'] as const;

/** The user `id` (keyed by it: another user's forms start empty); `onChanged` after each change saved. */
export function UserDetail({ id, onChanged }: { id: number; onChanged: () => void }) {
  const detail = useData([id], (signal) =>
    Promise.all([
      api<User>('GET', `/api/users/${id}`, undefined, signal),
      api<Permissions>('GET', `/api/users/${id}/permissions`, undefined, signal),
      api<{ activities: Activity[] }>('GET', `/api/users/${id}/activity?limit=20`, undefined, signal),
    ]),
  );
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  // The permissions ticked and the name and e-mail typed, null while they are the stored ones.
  const [ticked, setTicked] = useState<Set<string> | null>(null);
  const [typed, setTyped] = useState<{ email: string; name: string } | null>(null);
  const [editError, setEditError] = useState<unknown>(null);
  /** Runs a save, then shows the user as stored and `done` (once the page shows what was saved); `resetEdit` puts the stored name and e-mail back into the edit form (not after other saves: what is being typed there stays). */
  const act = async (work: () => Promise<unknown>, done: string, { showError = setError, resetEdit = false } = {}) => {
    try {
      await work();
    } catch (err) {
      showError(err);
      return;
    }
    setError(null);
    setEditError(null);
    await detail.reload();
    setTicked(null);
    if (resetEdit) setTyped(null);
    setNotice(done);
    onChanged();
  };
  if (!detail.data) return detail.error !== null ? <ErrorMessage error={detail.error} /> : <p aria-live="polite">Loading…</p>;
  const [user, stored, { activities: activity }] = detail.data;
  const rights = ticked ?? new Set(stored.permissions.flatMap((entry) => entry.actions.map((action) => `${entry.resource}:${action}`)));
  const edit = typed ?? { email: user.email, name: user.name };
  const toggle = (key: string) => {
    const next = new Set(rights);
    if (next.has(key)) next.delete(key);
    else next.add(key);
    setTicked(next);
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
        <input id="edit-email" type="email" value={edit.email} onInput={(e) => setTyped({ ...edit, email: e.currentTarget.value })} />
        <label for="edit-name">Name</label>
        <input id="edit-name" value={edit.name} onInput={(e) => setTyped({ ...edit, name: e.currentTarget.value })} />
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
      <FormErrors error={error ?? detail.error} />
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
