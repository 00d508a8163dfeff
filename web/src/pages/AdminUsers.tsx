/**
 * Administration's users: a new one, every user by pages (the page in the URL), and the user
 * chosen (`user` in the URL) with their permissions and activity.
 */
import { api } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { NewUserForm } from '../components/NewUserForm.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import { UserDetail } from '../components/UserDetail.js';
import type { Paged, User } from '../data/types.js';
import { useData } from '../data/use-data.js';
import { counted, utcCell } from '../format.js';
import { navigate, withQuery, type Location } from '../router.js';

/** Administration's users, by pages of 50, and the one chosen (`user` in the URL). */
export function AdminUsers({ location }: { location: Location }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  const selected = Number(location.query.get('user')) || null;
  // The page before stays until the next comes.
  const read = useData([page], (signal) => api<Paged<'users', User>>('GET', `/api/users?limit=50&page=${page}`, undefined, signal), { keep: true });
  const list = read.data;
  return (
    <>
      <NewUserForm onCreated={read.reload} />
      {read.error !== null && <ErrorMessage error={read.error} />}
      {list && (
        <Scroll label="Users">
          <table class="entries">
            <caption>{counted(list.pagination.total, 'user')}</caption>
            <thead>
              <tr>
                <th scope="col">E-mail</th>
                <th scope="col">Name</th>
                <th scope="col">Role</th>
                <th scope="col">State</th>
                <th scope="col">Last sign-in (UTC)</th>
              </tr>
            </thead>
            <tbody>
              {list.users.map((u) => (
                <tr aria-current={u.id === selected ? 'true' : undefined}>
                  <th scope="row">
                    <button type="button" class="entry" onClick={() => navigate(withQuery(location, { user: u.id }))}>
                      {u.email}
                    </button>
                  </th>
                  <td>{u.name}</td>
                  <td>{u.role}</td>
                  <td>{u.active ? 'active' : 'deactivated'}</td>
                  <td>{utcCell(u.lastLoginAt)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
      {list && <Pager page={page} pages={list.pagination.pages} location={location} />}
      {selected !== null && <UserDetail key={selected} id={selected} onChanged={read.reload} />}
    </>
  );
}
