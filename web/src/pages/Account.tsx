/**
 * The signed-in user's account: change the password (which ends every session, this one too, so
 * the page returns to sign-in) and personal access tokens for machines (create, with the secret
 * shown once; list; revoke).
 */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import type { CreatedToken, PersonalToken, User } from '../data/types.js';
import { useData } from '../data/use-data.js';
import { FormErrors } from '../components/ErrorMessage.js';
import { EntryTable } from '../components/EntryTable.js';
import { counted, utcCell, utcTime } from '../format.js';

function PasswordForm({ user, onChanged }: { user: User; onChanged: () => void }) {
  const [draft, setDraft] = useState({ currentPassword: '', newPassword: '', confirmPassword: '' });
  const [error, setError] = useState<unknown>(null);
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await api('PUT', `/api/users/${user.id}/password`, draft);
      onChanged();
    } catch (err) {
      setError(err);
    }
  };
  const input = (name: keyof typeof draft, label: string, autocomplete: string) => (
    <>
      <label for={`pw-${name}`}>{label}</label>
      <input id={`pw-${name}`} type="password" autocomplete={autocomplete} value={draft[name]} onInput={(e) => setDraft({ ...draft, [name]: e.currentTarget.value })} />
    </>
  );
  return (
    <form class="stacked" onSubmit={submit} aria-labelledby="password-title">
      <h2 id="password-title">Change the password</h2>
      {input('currentPassword', 'Current password', 'current-password')}
      {input('newPassword', 'New password', 'new-password')}
      {input('confirmPassword', 'New password again', 'new-password')}
      <FormErrors error={error} />
      <button type="submit">Change the password</button>
      <p class="hint">Every session ends, this one too: sign in again with the new password. Personal access tokens keep working.</p>
    </form>
  );
}

function Tokens({ user }: { user: User }) {
  const [name, setName] = useState('');
  const [secret, setSecret] = useState<{ name: string; token: string } | null>(null);
  const [changeError, setChangeError] = useState<unknown>(null);
  const path = `/api/users/${user.id}/tokens`;
  const read = useData([user.id], (signal) => api<{ tokens: PersonalToken[] }>('GET', path, undefined, signal));
  const tokens = read.data?.tokens ?? null;
  const error = changeError ?? read.error;
  const create = async (e: Event) => {
    e.preventDefault();
    try {
      const made = await api<CreatedToken>('POST', path, { name });
      setSecret({ name: made.name, token: made.token });
      setName('');
      setChangeError(null);
      await read.reload();
    } catch (err) {
      setChangeError(err);
    }
  };
  const revoke = async (token: PersonalToken) => {
    if (!window.confirm(`Revoke the token "${token.name}"? What uses it stops working.`)) return;
    try {
      await api('DELETE', `${path}/${token.id}`);
      setChangeError(null);
    } catch (err) {
      setChangeError(err);
    }
    await read.reload();
  };
  return (
    <section aria-labelledby="tokens-title">
      <h2 id="tokens-title">Personal access tokens</h2>
      <p class="hint">For scripts and machines: a token acts with your rights until it is revoked. Send it as “Authorization: Bearer thk_…”.</p>
      <form class="inline-form" onSubmit={create}>
        <label for="token-name">Name</label>
        <input id="token-name" value={name} placeholder="what it is for" onInput={(e) => setName(e.currentTarget.value)} />
        <button type="submit">Create token</button>
      </form>
      {secret && (
        <div class="secret" role="status">
          <p>
            The token “{secret.name}” — copy it now, it is not shown again:
          </p>
          <code>{secret.token}</code>
        </div>
      )}
      <FormErrors error={error} />
      {tokens && (
        <EntryTable
          label="Personal access tokens"
          caption={counted(tokens.length, 'token')}
          name={{ header: 'Name', cell: (token) => token.name }}
          columns={[
            { header: 'Created (UTC)', cell: (token) => utcCell(token.createdAt) },
            { header: 'Last used (UTC)', cell: (token) => utcCell(token.lastUsedAt) },
            { header: 'State', cell: (token) => (token.revokedAt ? `revoked ${utcTime(token.revokedAt)}` : 'active') },
          ]}
          action={{ header: 'Revoke', text: 'Revoke', label: (token) => `Revoke ${token.name}`, onClick: revoke, offered: (token) => !token.revokedAt }}
          entries={tokens}
        />
      )}
    </section>
  );
}

export function Account({ user, onPasswordChanged }: { user: User; onPasswordChanged: () => void }) {
  return (
    <main>
      <h1>Account</h1>
      <p>
        {user.email} · {user.role}
      </p>
      <PasswordForm user={user} onChanged={onPasswordChanged} />
      <Tokens user={user} />
    </main>
  );
}
