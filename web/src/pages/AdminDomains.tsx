/** Administration's domains, by pages (the page in the URL): add one, change its owner, delete it after typing its name. */
import { useState } from 'preact/hooks';
import { api } from '../api.js';
import { FormErrors } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import type { Domain, Paged } from '../data/types.js';
import { useData } from '../data/use-data.js';
import type { Location } from '../router.js';
import { counted } from '../format.js';

export function AdminDomains({ location }: { location: Location }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  // The page before stays until the next comes.
  const read = useData([page], (signal) => api<Paged<'domains', Domain>>('GET', `/api/domains?limit=50&page=${page}`, undefined, signal), { keep: true });
  const list = read.data;
  const [error, setError] = useState<unknown>(null);
  const [draft, setDraft] = useState({ name: '', owner: '' });
  const act = async (work: () => Promise<unknown>) => {
    try {
      await work();
      setError(null);
      await read.reload();
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
      <FormErrors error={error ?? read.error} />
      {list && (
        <Scroll label="Domains">
          <table class="entries">
            <caption>{counted(list.pagination.total, 'domain')}</caption>
            <thead>
              <tr>
                <th scope="col">Domain</th>
                <th scope="col">Owner (user id)</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {list.domains.map((d) => (
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
      {list && <Pager page={page} pages={list.pagination.pages} location={location} />}
    </>
  );
}
