/**
 * The fleet overview: every domain the user sees with its last 24 hours (requests, visitors, error
 * rate, p95, bandwidth), when its last log line was stored (marked stale past INGEST_STALE_S), a
 * sparkline of requests per hour and its alerts firing now; a domain shared with the user is marked
 * with its role there. One query gives the figures of all
 * domains, the domain listing their last lines; sorting, the name search and paging happen here,
 * and only the page's domains ask for their sparklines. Sort, direction, search and page are in the URL.
 */
import { HOUR_MS } from '../../../core/durations.js';
import type { ComponentChild } from 'preact';
import { useEffect, useMemo, useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import { Sparkline } from '../components/Sparkline.js';
import { namedRows } from '../data/metrics.js';
import { allDomains, firingAlerts } from '../data/reads.js';
import type { LastLine, ListedDomain, QueryAnswer } from '../data/types.js';
import { Loaded, useData } from '../data/use-data.js';
import { ago, bytes, count, ms, percent, utcTime } from '../format.js';
import { linkClick, navigate, withQuery, type Location } from '../router.js';

type Domain = Pick<ListedDomain, 'id' | 'name' | 'role'>;
interface FleetRow extends Domain {
  /** Names of its alerts firing now; null when the user may not read alerts. */
  firing: string[] | null;
  requests: number;
  visitors: number;
  errorRate: number;
  p95: number | null;
  bandwidth: number;
  /** Null without domains:read. */
  lastLine: LastLine | null;
  /** Seconds since the last line when the listing answered, for sorting: Infinity for never, null unknown. */
  sinceLastLine: number | null;
  /** When the listing's answer came (Date.now()): the line's age grows from there on this clock. */
  answeredAt: number;
}

const PAGE_SIZE = 50;

/**
 * Seconds since the row's last line at `now` (Date.now()): the age the server gave, grown by the
 * time since its answer on this clock, which may be set differently from the server's. Null: never, or not known.
 */
const ageAt = (r: FleetRow, now: number) => (r.lastLine?.secondsSinceLastLine == null ? null : r.lastLine.secondsSinceLastLine + (now - r.answeredAt) / 1000);

/** When the last line was stored, how long ago, and a "stale" mark past INGEST_STALE_S (a word, not a colour alone). */
function LastLineCell({ row, now }: { row: FleetRow; now: number }) {
  const age = ageAt(row, now);
  if (row.lastLine === null) return <>–</>;
  if (row.lastLine.lastLineAt === null || age === null) return <span class="hint">never</span>;
  return (
    <>
      <time dateTime={row.lastLine.lastLineAt} title={utcTime(row.lastLine.lastLineAt, true)}>
        {ago(age)}
      </time>
      {age > row.lastLine.staleAfterS && (
        <span class="stale" title={`No line for more than ${count(row.lastLine.staleAfterS)} s`}>
          stale
        </span>
      )}
    </>
  );
}

type SortKey = 'name' | 'requests' | 'visitors' | 'errorRate' | 'p95' | 'bandwidth' | 'sinceLastLine';
/** A sortable column: its key in FleetRow, and its cell at the clock's `now`. */
interface Column {
  key: SortKey;
  label: string;
  show(r: FleetRow, now: number): ComponentChild;
}

const COLUMNS: Column[] = [
  { key: 'name', label: 'Domain', show: (r: FleetRow) => r.name },
  { key: 'requests', label: 'Requests', show: (r: FleetRow) => count(r.requests) },
  { key: 'visitors', label: 'Visitors', show: (r: FleetRow) => count(r.visitors) },
  { key: 'errorRate', label: 'Error rate', show: (r: FleetRow) => percent(r.errorRate) },
  { key: 'p95', label: 'p95', show: (r: FleetRow) => ms(r.p95) },
  { key: 'bandwidth', label: 'Bandwidth', show: (r: FleetRow) => bytes(r.bandwidth) },
  { key: 'sinceLastLine', label: 'Last log line', show: (r: FleetRow, now: number) => <LastLineCell row={r} now={now} /> },
];

/** The figures of every domain's row, asked and read by these names. */
const FLEET_METRICS = ['requests', 'visitors', 'errorRate', 'p95ResponseTime', 'bandwidth'] as const;

async function loadFleet(signal: AbortSignal): Promise<FleetRow[]> {
  // The ages are the listing's: they grow from when it answered, not from when all three did.
  const listed = allDomains(true, signal).then((domains) => ({ domains, answeredAt: Date.now() }));
  const [{ domains, answeredAt }, firing, figures] = await Promise.all([
    listed,
    firingAlerts(signal),
    api<QueryAnswer>('POST', '/api/logs/query', { metrics: [...FLEET_METRICS], dimensions: ['domain'], dateRange: '24h', limit: 10_000 }, signal),
  ]);
  const byDomain = new Map(namedRows(FLEET_METRICS, figures.results).map((r) => [String(r.dimensions[0]), r.metrics]));
  return domains.map(({ ingest, ...d }) => {
    const m = byDomain.get(d.name);
    const lastLine = ingest ?? null;
    const sinceLastLine = lastLine === null ? null : (lastLine.secondsSinceLastLine ?? Infinity);
    return {
      ...d,
      firing: firing ? (firing.get(d.id) ?? []) : null,
      requests: m?.requests ?? 0,
      visitors: m?.visitors ?? 0,
      errorRate: m?.errorRate ?? 0,
      p95: m?.p95ResponseTime ?? null,
      bandwidth: m?.bandwidth ?? 0,
      lastLine,
      sinceLastLine,
      answeredAt,
    };
  });
}

const byName = (a: FleetRow, b: FleetRow) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** The column's order in the direction asked; equal figures by name, ascending either way. */
const compareRows = (key: SortKey, desc: boolean) => (a: FleetRow, b: FleetRow) => {
  const order = key === 'name' ? byName(a, b) : (a[key] ?? -1) - (b[key] ?? -1);
  return (desc ? -order : order) || byName(a, b);
};

export function Fleet({ location }: { location: Location }) {
  const fleet = useData([], loadFleet);
  const rows = fleet.data;
  const sort = COLUMNS.find((c) => c.key === location.query.get('sort'))?.key ?? 'requests';
  const desc = (location.query.get('dir') ?? (sort === 'name' ? 'asc' : 'desc')) === 'desc';
  const search = location.query.get('q') ?? '';
  const pageAsked = Math.max(1, Number(location.query.get('page')) || 1);

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

  // The clock the last lines' ages and stale marks follow without a reload: again when the next
  // shown domain turns stale, and every 30 s for the ages.
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    let wait = 30_000;
    for (const r of shown) {
      const age = ageAt(r, now);
      if (age === null || r.lastLine === null) continue;
      const untilStale = (r.lastLine.staleAfterS - age) * 1000;
      if (untilStale >= 0) wait = Math.min(wait, untilStale + 20);
    }
    const timer = setTimeout(() => setNow(Date.now()), wait);
    return () => clearTimeout(timer);
  }, [now, shownIds, rows]);

  // The sparklines of the page's domains; those of the page before stay until they come.
  const sparklines = useData(
    [shownIds],
    async (signal) => {
      const lines = new Map<string, number[]>();
      if (shown.length === 0) return lines;
      const answer = await api<QueryAnswer>(
        'POST',
        '/api/logs/query',
        {
          domains: shown.map((r) => r.id),
          metrics: ['requests'],
          dimensions: ['domain', 'time:hour'],
          // Whole hours: the 23 before this one, and this one so far (drawn dashed).
          dateRange: 'custom',
          startDate: new Date((Math.floor(Date.now() / HOUR_MS) - 23) * HOUR_MS).toISOString(),
          limit: 10_000,
        },
        signal,
      );
      for (const r of namedRows(['requests'], answer.results)) {
        const name = String(r.dimensions[0]);
        lines.set(name, [...(lines.get(name) ?? []), r.metrics.requests ?? 0]);
      }
      // A domain without rows in the window has no series in the answer: a flat line of its hours.
      const hours = Math.floor(Date.parse(answer.meta.endDate) / HOUR_MS) - Math.floor(Date.parse(answer.meta.startDate) / HOUR_MS) + 1;
      for (const r of shown) if (!lines.has(r.name)) lines.set(r.name, new Array<number>(hours).fill(0));
      return lines;
    },
    { keep: true },
  );
  const hourly = sparklines.data ?? new Map<string, number[]>();

  const sortBy = (key: SortKey) => navigate(withQuery(location, { sort: key, dir: key === sort ? (desc ? 'asc' : 'desc') : key === 'name' ? 'asc' : 'desc', page: null }));

  return (
    <main>
      <h1>Fleet</h1>
      <p class="hint">The last 24 hours of every domain you can see, and when its last log line was stored.</p>
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
      {sparklines.error !== null && <ErrorMessage error={sparklines.error} />}
      <Loaded read={fleet}>
        {(rows) => (
          <>
            <Scroll label="Domains">
              <table class="fleet">
                <caption>
                  {matching.length === rows.length ? `${count(rows.length)} domains` : `${count(matching.length)} of ${count(rows.length)} domains`}
                </caption>
                <thead>
                  <tr>
                    {COLUMNS.map((c) => (
                      <th scope="col" aria-sort={c.key === sort ? (desc ? 'descending' : 'ascending') : 'none'} class={c.key === 'name' || c.key === 'sinceLastLine' ? '' : 'number'}>
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
                            {r.role && (
                              <span class="shared" title={r.role === 'editor' ? 'Shared with you: you read it and change its alerts' : 'Shared with you: you read it'}>
                                {r.role}
                              </span>
                            )}
                          </th>
                        ) : c.key === 'sinceLastLine' ? (
                          <td class="last-line">{c.show(r, now)}</td>
                        ) : (
                          <td class="number">{c.show(r, now)}</td>
                        ),
                      )}
                      <td>{hourly.has(r.name) ? <Sparkline values={hourly.get(r.name)!} label={`Requests per hour of ${r.name}, the current hour so far last`} /> : null}</td>
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
      </Loaded>
    </main>
  );
}
