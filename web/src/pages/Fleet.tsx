/**
 * The fleet overview: every domain the user sees with its last 24 hours (requests, visitors, error
 * rate, p95, bandwidth), a sparkline of requests per hour and its alerts firing now. One query gives the figures of all
 * domains; sorting, the name search and paging happen here, and only the page's domains ask for
 * their sparklines. Sort, direction, search and page are in the URL.
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api, ApiError } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import { Sparkline } from '../components/Sparkline.js';
import { bytes, count, ms, percent } from '../format.js';
import { linkClick, navigate, withQuery, type Location } from '../router.js';

interface Domain {
  id: number;
  name: string;
}
interface QueryRow {
  dimensions: (string | number | boolean)[];
  metrics: (number | null)[];
}
interface FleetRow extends Domain {
  /** Names of its alerts firing now; null when the user may not read alerts. */
  firing: string[] | null;
  requests: number;
  visitors: number;
  errorRate: number;
  p95: number | null;
  bandwidth: number;
}

const PAGE_SIZE = 50;
const HOUR_MS = 3_600_000;
const DOMAINS_PAGE = 100;
const COLUMNS = [
  { key: 'name', label: 'Domain', show: (r: FleetRow) => r.name },
  { key: 'requests', label: 'Requests', show: (r: FleetRow) => count(r.requests) },
  { key: 'visitors', label: 'Visitors', show: (r: FleetRow) => count(r.visitors) },
  { key: 'errorRate', label: 'Error rate', show: (r: FleetRow) => percent(r.errorRate) },
  { key: 'p95', label: 'p95', show: (r: FleetRow) => ms(r.p95) },
  { key: 'bandwidth', label: 'Bandwidth', show: (r: FleetRow) => bytes(r.bandwidth) },
] as const;
type SortKey = (typeof COLUMNS)[number]['key'];

/** Every domain the user sees, by name (the API's pages of 100, fetched together after the first). */
export async function allDomains(): Promise<Domain[]> {
  const first = await api<{ domains: Domain[]; pagination: { pages: number } }>('GET', `/api/domains?limit=${DOMAINS_PAGE}&page=1`);
  const rest = await Promise.all(
    Array.from({ length: Math.max(0, first.pagination.pages - 1) }, (_, i) => api<{ domains: Domain[] }>('GET', `/api/domains?limit=${DOMAINS_PAGE}&page=${i + 2}`)),
  );
  return [first, ...rest].flatMap((p) => p.domains);
}

/** The alerts firing now, by domain; null without alerts:read. */
async function firingAlerts(): Promise<Map<number, string[]> | null> {
  try {
    const { alerts } = await api<{ alerts: { domainId: number; name: string }[] }>('GET', '/api/logs/alerts/firing');
    const byDomain = new Map<number, string[]>();
    for (const a of alerts) byDomain.set(a.domainId, [...(byDomain.get(a.domainId) ?? []), a.name]);
    return byDomain;
  } catch (err) {
    if (err instanceof ApiError && err.status === 403) return null;
    throw err;
  }
}

async function loadFleet(): Promise<FleetRow[]> {
  const [domains, firing, figures] = await Promise.all([
    allDomains(),
    firingAlerts(),
    api<{ results: QueryRow[] }>('POST', '/api/logs/query', {
      metrics: ['requests', 'visitors', 'errorRate', 'p95ResponseTime', 'bandwidth'],
      dimensions: ['domain'],
      dateRange: '24h',
      limit: 10_000,
    }),
  ]);
  const byName = new Map(figures.results.map((r) => [String(r.dimensions[0]), r.metrics]));
  return domains.map((d) => {
    const m = byName.get(d.name) ?? [0, 0, 0, null, 0];
    return { ...d, firing: firing ? (firing.get(d.id) ?? []) : null, requests: m[0] ?? 0, visitors: m[1] ?? 0, errorRate: m[2] ?? 0, p95: m[3] ?? null, bandwidth: m[4] ?? 0 };
  });
}

const byName = (a: FleetRow, b: FleetRow) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** The column's order in the direction asked; equal figures by name, ascending either way. */
const compareRows = (key: SortKey, desc: boolean) => (a: FleetRow, b: FleetRow) => {
  const order = key === 'name' ? byName(a, b) : (a[key] ?? -1) - (b[key] ?? -1);
  return (desc ? -order : order) || byName(a, b);
};

export function Fleet({ location }: { location: Location }) {
  const [rows, setRows] = useState<FleetRow[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [sparklines, setSparklines] = useState<Map<string, number[]>>(new Map());
  const sort = (COLUMNS.find((c) => c.key === location.query.get('sort'))?.key ?? 'requests') as SortKey;
  const desc = (location.query.get('dir') ?? (sort === 'name' ? 'asc' : 'desc')) === 'desc';
  const search = location.query.get('q') ?? '';
  const pageAsked = Math.max(1, Number(location.query.get('page')) || 1);

  useEffect(() => {
    loadFleet().then(setRows, setError);
  }, []);

  const matching = useMemo(() => {
    if (!rows) return [];
    const needle = search.trim().toLowerCase();
    const found = needle ? rows.filter((r) => r.name.toLowerCase().includes(needle)) : [...rows];
    return found.sort(compareRows(sort, desc));
  }, [rows, search, sort, desc]);
  const pages = Math.max(1, Math.ceil(matching.length / PAGE_SIZE));
  const page = Math.min(pageAsked, pages);
  const shown = matching.slice((page - 1) * PAGE_SIZE, page * PAGE_SIZE);
  const shownIds = shown.map((r) => r.id).join(',');

  useEffect(() => {
    if (shown.length === 0) return;
    let stale = false;
    api<{ results: QueryRow[]; meta: { startDate: string; endDate: string } }>('POST', '/api/logs/query', {
      domains: shown.map((r) => r.id),
      metrics: ['requests'],
      dimensions: ['domain', 'time:hour'],
      // Whole hours: the 23 before this one, and this one so far (drawn dashed).
      dateRange: 'custom',
      startDate: new Date((Math.floor(Date.now() / HOUR_MS) - 23) * HOUR_MS).toISOString(),
      limit: 10_000,
    }).then((answer) => {
      if (stale) return;
      const lines = new Map<string, number[]>();
      for (const r of answer.results) {
        const name = String(r.dimensions[0]);
        lines.set(name, [...(lines.get(name) ?? []), r.metrics[0] ?? 0]);
      }
      // A domain without rows in the window has no series in the answer: a flat line of its hours.
      const hours = Math.floor(Date.parse(answer.meta.endDate) / HOUR_MS) - Math.floor(Date.parse(answer.meta.startDate) / HOUR_MS) + 1;
      for (const r of shown) if (!lines.has(r.name)) lines.set(r.name, new Array<number>(hours).fill(0));
      setSparklines(lines);
    }, setError);
    return () => {
      stale = true;
    };
  }, [shownIds]);

  const sortBy = (key: SortKey) => navigate(withQuery(location, { sort: key, dir: key === sort ? (desc ? 'asc' : 'desc') : key === 'name' ? 'asc' : 'desc', page: null }));

  return (
    <main>
      <h1>Fleet</h1>
      <p class="hint">The last 24 hours of every domain you can see.</p>
      <div class="toolbar">
        <label for="fleet-search">Search domains</label>
        <input
          id="fleet-search"
          type="search"
          value={search}
          placeholder="name contains…"
          onInput={(e) => navigate(withQuery(location, { q: e.currentTarget.value, page: null }), { replace: true })}
        />
      </div>
      {error !== null && <ErrorMessage error={error} />}
      {rows === null && error === null && <p aria-live="polite">Loading…</p>}
      {rows !== null && (
        <>
          <Scroll label="Domains">
            <table class="fleet">
              <caption>
                {matching.length === rows.length ? `${count(rows.length)} domains` : `${count(matching.length)} of ${count(rows.length)} domains`}
              </caption>
              <thead>
                <tr>
                  {COLUMNS.map((c) => (
                    <th scope="col" aria-sort={c.key === sort ? (desc ? 'descending' : 'ascending') : 'none'} class={c.key === 'name' ? '' : 'number'}>
                      <button type="button" onClick={() => sortBy(c.key)}>
                        {c.label}
                        {c.key === sort ? (desc ? ' ▼' : ' ▲') : ''}
                      </button>
                    </th>
                  ))}
                  <th scope="col">Requests per hour</th>
                  <th scope="col">Firing alerts</th>
                </tr>
              </thead>
              <tbody>
                {shown.map((r) => (
                  <tr key={r.id}>
                    {COLUMNS.map((c) =>
                      c.key === 'name' ? (
                        <th scope="row">
                          <a href={`/domains/${r.id}`} onClick={(e) => linkClick(e, `/domains/${r.id}`)}>
                            {r.name}
                          </a>
                        </th>
                      ) : (
                        <td class="number">{c.show(r)}</td>
                      ),
                    )}
                    <td>{sparklines.has(r.name) ? <Sparkline values={sparklines.get(r.name)!} label={`Requests per hour of ${r.name}, the current hour so far last`} /> : null}</td>
                    <td class="firing">
                      {r.firing === null ? (
                        '–'
                      ) : r.firing.length === 0 ? (
                        <span class="hint">none</span>
                      ) : (
                        <a href={`/domains/${r.id}/alerts`} onClick={(e) => linkClick(e, `/domains/${r.id}/alerts`)}>
                          {r.firing.join(', ')}
                        </a>
                      )}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Scroll>
          {rows.length === 0 && <p class="hint">No domains yet: an administrator adds them under Administration, or with `tailhouse domains add`.</p>}
          <Pager page={page} pages={pages} location={location} />
        </>
      )}
    </main>
  );
}
