/**
 * Administration (administrators only; the navigation hides it from others and the API refuses
 * them anyway): users (create, edit, deactivate, reset password by e-mail, delete), a user's
 * permissions and activity (pages/AdminUsers.tsx), domains (add, change the owner, delete after
 * typing its name: pages/AdminDomains.tsx), and groups (pages/Groups.tsx). The tab, the user or
 * group shown and the pages are in the URL.
 */
import type { User } from '../data/types.js';
import { navigate, type Location } from '../router.js';
import { AdminDomains } from './AdminDomains.js';
import { AdminUsers } from './AdminUsers.js';
import { Groups } from './Groups.js';

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
      {tab === 'users' && <AdminUsers location={location} />}
      {tab === 'domains' && <AdminDomains location={location} />}
      {tab === 'groups' && <Groups location={location} />}
    </main>
  );
}
