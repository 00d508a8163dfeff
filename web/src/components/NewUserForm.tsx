/** Administration's form for a new user: e-mail, name, password and role. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { FormErrors } from './ErrorMessage.js';

export function NewUserForm({ onCreated }: { onCreated: () => void }) {
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
    <form class="inline-form fields" onSubmit={submit} aria-label="New user">
      <div class="field">
        <label for="new-email">E-mail</label>
        <input id="new-email" type="email" value={draft.email} onInput={(e) => setDraft({ ...draft, email: e.currentTarget.value })} />
      </div>
      <div class="field">
        <label for="new-name">Name</label>
        <input id="new-name" value={draft.name} onInput={(e) => setDraft({ ...draft, name: e.currentTarget.value })} />
      </div>
      <div class="field">
        <label for="new-password">Password</label>
        <input id="new-password" type="password" autocomplete="new-password" value={draft.password} onInput={(e) => setDraft({ ...draft, password: e.currentTarget.value })} />
      </div>
      <div class="field">
        <label for="new-role">Role</label>
        <select id="new-role" value={draft.role} onChange={(e) => setDraft({ ...draft, role: e.currentTarget.value })}>
          <option value="user">user</option>
          <option value="admin">admin</option>
        </select>
      </div>
      <button type="submit">Create user</button>
      <FormErrors error={error} />
    </form>
  );
}
