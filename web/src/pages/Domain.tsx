/** A domain's pages: its name, the links between its sections, and the section asked. */
import { api } from '../api.js';
import type { Domain, User } from '../data/types.js';
import { Loaded, useData } from '../data/use-data.js';
import { linkClick, type Location } from '../router.js';
import { Alerts } from './Alerts.js';
import { Dashboard } from './Dashboard.js';
import { Ingest } from './Ingest.js';
import { Logs } from './Logs.js';
import { Members } from './Members.js';

export type DomainSection = 'dashboard' | 'logs' | 'alerts' | 'ingest' | 'members';
/** `managers`: offered only to those who manage the domain's members (its owner, administrators). */
const SECTIONS: { section: DomainSection; label: string; suffix: string; managers?: true }[] = [
  { section: 'dashboard', label: 'Dashboard', suffix: '' },
  { section: 'logs', label: 'Logs', suffix: '/logs' },
  { section: 'alerts', label: 'Alerts', suffix: '/alerts' },
  { section: 'ingest', label: 'Ingest', suffix: '/ingest' },
  { section: 'members', label: 'Members', suffix: '/members', managers: true },
];

export function DomainPage({ id, section, location, user }: { id: number; section: DomainSection; location: Location; user: User }) {
  // Before the paint, as the dashboard's batches (data/reads.ts, useBatch).
  const read = useData([id], (signal) => api<Domain>('GET', `/api/domains/${id}`, undefined, signal), { beforePaint: true });
  return (
    <main class="dashboard">
      <p class="crumbs">
        <a href="/" onClick={(e) => linkClick(e, '/')}>
          Fleet
        </a>{' '}
        /
      </p>
      <Loaded read={read}>
        {(domain) => {
          const manages = user.role === 'admin' || domain.ownerId === user.id;
          return (
            <>
              <h1>{domain.name}</h1>
              <nav class="sections" aria-label={`Pages of ${domain.name}`}>
                {SECTIONS.filter((s) => !s.managers || manages).map((s) => {
                  const to = `/domains/${id}${s.suffix}`;
                  return (
                    <a href={to} aria-current={s.section === section ? 'page' : undefined} onClick={(e) => linkClick(e, to)}>
                      {s.label}
                    </a>
                  );
                })}
              </nav>
              {section === 'dashboard' && <Dashboard id={id} location={location} />}
              {section === 'logs' && <Logs id={id} location={location} />}
              {section === 'alerts' && <Alerts id={id} location={location} />}
              {section === 'ingest' && <Ingest id={id} location={location} />}
              {section === 'members' &&
                (manages ? (
                  <Members id={id} domain={domain.name} me={user.id} />
                ) : (
                  <p class="error" role="alert">
                    The members of a domain are managed by its owner and administrators.
                  </p>
                ))}
            </>
          );
        }}
      </Loaded>
    </main>
  );
}
