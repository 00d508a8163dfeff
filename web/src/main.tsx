/**
 * The dashboard: restores the session from its cookie, then shows the page the URL names; an
 * ended session returns to sign-in and, once signed in again, to where the user was.
 */
import '../styles.css';
import { render } from 'preact';
import { useEffect, useLayoutEffect, useState } from 'preact/hooks';
import { may, onSignedOut, restoreSession, signOut } from './api.js';
import type { User } from './data/types.js';
import { ErrorMessage } from './components/ErrorMessage.js';
import { Account } from './pages/Account.js';
import { Admin } from './pages/Admin.js';
import { Alerting } from './pages/Alerting.js';
import { DomainPage, type DomainSection } from './pages/Domain.js';
import { Fleet } from './pages/Fleet.js';
import { SignIn } from './pages/SignIn.js';
import { linkClick, navigate, useLocation } from './router.js';

const SIGN_IN = '/signin';
const DOMAIN_PATH = /^\/domains\/(\d{1,9})(?:\/(logs|alerts|ingest|members))?$/;

/** Where to go after signing in: a path of this site only. */
const nextOf = (query: URLSearchParams) => {
  const next = query.get('next') ?? '/';
  return next.startsWith('/') && !next.startsWith('//') ? next : '/';
};

function App() {
  const location = useLocation();
  const [user, setUser] = useState<User | null | undefined>(undefined);
  const [error, setError] = useState<unknown>(null);
  /** Whether the user may read alerts: the navigation offers the Alerting page then. */
  const [alerting, setAlerting] = useState(false);

  // The session is restored before the first paint, not after it (the dashboard's requests wait for it).
  useLayoutEffect(() => {
    const toSignIn = () => {
      setUser(null);
      const here = window.location.pathname + window.location.search;
      if (window.location.pathname !== SIGN_IN) navigate(`${SIGN_IN}?next=${encodeURIComponent(here)}`, { replace: true });
    };
    onSignedOut(toSignIn);
    restoreSession().then((found) => {
      if (found) setUser(found);
      else toSignIn();
    }, setError);
  }, []);

  useEffect(() => {
    if (!user) return setAlerting(false);
    may('alerts', 'read').then(setAlerting, () => setAlerting(false));
  }, [user?.id, user?.role]);

  if (error !== null) return <ErrorMessage error={error} />;
  if (user === undefined) return <p aria-live="polite">Loading…</p>;
  if (user === null || location.path === SIGN_IN) {
    if (user) {
      navigate(nextOf(location.query), { replace: true });
      return null;
    }
    return (
      <SignIn
        onSignedIn={(signedIn) => {
          setUser(signedIn);
          navigate(nextOf(location.query), { replace: true });
        }}
      />
    );
  }
  const leave = async () => {
    await signOut().catch(() => {});
    setUser(null);
    navigate(SIGN_IN);
  };
  return (
    <>
      <header class="top">
        <a href="/" class="brand" onClick={(e) => linkClick(e, '/')}>
          tailhouse
        </a>
        <nav aria-label="Main">
          <a href="/" aria-current={location.path === '/' ? 'page' : undefined} onClick={(e) => linkClick(e, '/')}>
            Fleet
          </a>
          {alerting && (
            <a href="/alerting" aria-current={location.path === '/alerting' ? 'page' : undefined} onClick={(e) => linkClick(e, '/alerting')}>
              Alerting
            </a>
          )}
          {user.role === 'admin' && (
            <a href="/admin" aria-current={location.path === '/admin' ? 'page' : undefined} onClick={(e) => linkClick(e, '/admin')}>
              Administration
            </a>
          )}
        </nav>
        <a href="/account" class="who" aria-current={location.path === '/account' ? 'page' : undefined} onClick={(e) => linkClick(e, '/account')}>
          {user.email}
        </a>
        <button type="button" onClick={leave}>
          Sign out
        </button>
      </header>
      {location.path === '/' ? (
        <Fleet location={location} />
      ) : location.path === '/account' ? (
        <Account
          user={user}
          onPasswordChanged={() => {
            setUser(null);
            navigate(`${SIGN_IN}?next=${encodeURIComponent('/account')}`, { replace: true });
          }}
        />
      ) : location.path === '/alerting' ? (
        <Alerting location={location} />
      ) : location.path === '/admin' ? (
        <Admin user={user} location={location} />
      ) : DOMAIN_PATH.test(location.path) ? (
        <DomainPage
          id={Number(DOMAIN_PATH.exec(location.path)![1])}
          section={(DOMAIN_PATH.exec(location.path)![2] ?? 'dashboard') as DomainSection}
          location={location}
          user={user}
        />
      ) : (
        <main>
          <h1>Not found</h1>
          <p>
            There is no page at {location.path}.{' '}
            <a href="/" onClick={(e) => linkClick(e, '/')}>
              Back to the fleet
            </a>
          </p>
        </main>
      )}
    </>
  );
}

render(<App />, document.getElementById('app')!);
