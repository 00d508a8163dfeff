/**
 * A domain's dashboard: the period (1h, 24h, 7d, 30d or a custom range), "compare with the
 * previous period", the headline figures, charts over time and GoAccess-like panels. Clicking an
 * entry of a panel adds a filter that every chart and panel applies (shown as removable chips;
 * "exclude" adds the negation). Period, comparison and filters are in the URL.
 */
import { useLayoutEffect, useMemo, useState } from 'preact/hooks';
import { api, ApiError, type User } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { TimeChart, type ChartSeries } from '../components/TimeChart.js';
import { apiFilters, DIMENSION_LABELS, filterLabel, filterParam, filtersOf, shownValue, type Filter } from '../filters.js';
import { bytes, count, interval, ms, percent } from '../format.js';
import { panelsFor, REQUESTS, type PanelSpec } from '../panels.js';
import { linkClick, navigate, withQuery, type Location } from '../router.js';
import { TILE_METRICS, viewQueries } from '../view.js';
import { Alerts } from './Alerts.js';
import { Ingest } from './Ingest.js';
import { Logs } from './Logs.js';
import { Members } from './Members.js';

type Value = string | number | boolean;
interface QueryRow {
  dimensions: Value[];
  metrics: (number | null)[];
  change?: (number | null)[];
}
interface QueryAnswer {
  results: QueryRow[];
  meta: { interval: string | null };
}

const PERIODS = [
  { value: '1h', label: 'Last hour' },
  { value: '24h', label: 'Last 24 hours' },
  { value: '7d', label: 'Last 7 days' },
  { value: '30d', label: 'Last 30 days' },
  { value: 'custom', label: 'Custom range' },
] as const;

/** The tiles of TILE_METRICS, in their order. */
const TILES = [
  { label: 'Requests', format: count },
  { label: 'Visitors', format: count },
  { label: 'Error rate (5xx)', format: percent },
  { label: 'p95 response time', format: ms },
  { label: 'Bandwidth', format: bytes },
].map((tile, i) => ({ ...tile, metric: TILE_METRICS[i]! }));

const STATUS_COLORS: Record<string, string> = { '1xx': '#8c959f', '2xx': '#2da44e', '3xx': '#0969da', '4xx': '#bf8700', '5xx': '#cf222e' };

/** The window of the query body, as the URL gives it. */
function rangeOf(query: URLSearchParams): Record<string, string> {
  const period = query.get('period') ?? '24h';
  if (period !== 'custom') return { dateRange: PERIODS.some((p) => p.value === period) ? period : '24h' };
  const range: Record<string, string> = { dateRange: 'custom' };
  for (const [param, field] of [['from', 'startDate'], ['to', 'endDate']] as const) {
    const value = query.get(param);
    if (value) range[field] = value;
  }
  return range;
}

/** A query's answer or error, in its place of a batch. */
interface Answered {
  answer: QueryAnswer | null;
  error: unknown;
}
type BatchItem = { success: true; data: QueryAnswer } | { success: false; status: number; error: string; details?: Record<string, string> };

/**
 * The answers of a batch of queries (POST /api/logs/query's batch form), asked again whenever the
 * bodies change; a query that failed holds its error, the others their answers.
 */
function useBatch(bodies: Record<string, unknown>[]): Answered[] {
  const key = JSON.stringify(bodies);
  const [state, setState] = useState<{ key: string; answers: Answered[] }>({ key: '', answers: [] });
  // A layout effect sends the request before the browser paints, not after: the page's requests
  // (session, name, queries) follow one another, and each would otherwise wait for a paint.
  useLayoutEffect(() => {
    let stale = false;
    api<{ answers: BatchItem[] }>('POST', '/api/logs/query', { queries: bodies }).then(
      ({ answers }) =>
        !stale &&
        setState({ key, answers: answers.map((a) => (a.success ? { answer: a.data, error: null } : { answer: null, error: new ApiError(a.status, a.error, a.details) })) }),
      (error) => !stale && setState({ key, answers: bodies.map(() => ({ answer: null, error })) }),
    );
    return () => {
      stale = true;
    };
  }, [key]);
  return state.key === key ? state.answers : bodies.map(() => ({ answer: null, error: null }));
}

function Change({ value }: { value: number | null | undefined }) {
  if (value === undefined) return null;
  if (value === null) return <span class="change">no earlier figure</span>;
  const text = `${value > 0 ? '▲' : value < 0 ? '▼' : ''} ${Math.abs(value * 100).toFixed(1)} % vs previous period`;
  return <span class="change">{text}</span>;
}

/** The headline figures of the dashboard's tiles query (its first metric, requests, is also the panels' whole). */
function Tiles({ answer, error, compare }: { answer: QueryAnswer | null; error: unknown; compare: boolean }) {
  if (error) return <ErrorMessage error={error} />;
  const row = answer?.results[0];
  return (
    <section class="tiles" aria-label="Headline figures">
      {TILES.map((tile, i) => (
        <div class="tile">
          <h2>{tile.label}</h2>
          <p class="figure" data-metric={tile.metric}>
            {row ? tile.format(row.metrics[i] ?? null) : '…'}
          </p>
          {compare && row && <Change value={row.change?.[i]} />}
        </div>
      ))}
    </section>
  );
}

/** The charts of the headline's two series (web/src/view.ts). */
function Charts({ overTime, byStatus }: { overTime: Answered; byStatus: Answered }) {
  const charts = useMemo(() => {
    const rows = overTime.answer?.results;
    const statusRows = byStatus.answer?.results;
    if (!rows || !statusRows) return null;
    const times = rows.map((r) => Date.parse(String(r.dimensions[0])));
    const column = (i: number) => rows.map((r) => r.metrics[i] ?? null);
    const place = new Map(times.map((t, i) => [t, i]));
    const classes = [...new Set(statusRows.map((r) => String(r.dimensions[1])))].sort();
    const status: ChartSeries[] = classes.map((c) => ({ label: c, color: STATUS_COLORS[c] ?? '#6e7781', values: times.map(() => 0) }));
    for (const r of statusRows) status[classes.indexOf(String(r.dimensions[1]))]!.values[place.get(Date.parse(String(r.dimensions[0])))!] = r.metrics[0] ?? 0;
    return {
      times,
      status,
      latency: [
        { label: 'p50', color: '#2da44e', values: column(0) },
        { label: 'p95', color: '#bf8700', values: column(1) },
        { label: 'p99', color: '#cf222e', values: column(2) },
      ],
      bandwidth: [{ label: 'Bandwidth', color: '#0969da', values: column(3) }],
      visitors: [{ label: 'Visitors', color: '#8250df', values: column(4) }],
    };
  }, [overTime.answer, byStatus.answer]);
  const error = overTime.error ?? byStatus.error;
  if (error) return <ErrorMessage error={error} />;
  if (!charts) return <p aria-live="polite">Loading charts…</p>;
  const per = interval(overTime.answer?.meta.interval ?? 'bucket');
  return (
    <section class="charts" aria-label="Charts">
      <TimeChart title={`Requests per ${per}, by status class`} times={charts.times} series={charts.status} format={count} stacked />
      <TimeChart title={`Response time per ${per}`} times={charts.times} series={charts.latency} format={ms} />
      <TimeChart title={`Bandwidth per ${per}`} times={charts.times} series={charts.bandwidth} format={bytes} />
      <TimeChart title={`Visitors per ${per}`} times={charts.times} series={charts.visitors} format={count} />
    </section>
  );
}

function Panel({ spec, answered: { answer, error }, total, onFilter }: { spec: PanelSpec; answered: Answered; total: number | null; onFilter: (f: Filter) => void }) {
  const dimension = spec.dimensions[0]!;
  return (
    <section class="panel" aria-labelledby={`panel-${spec.id}`}>
      <h2 id={`panel-${spec.id}`}>{spec.title}</h2>
      {error !== null && <ErrorMessage error={error} />}
      {answer === null && error === null && <p aria-live="polite">Loading…</p>}
      {answer !== null && answer.results.length === 0 && <p class="hint">No requests.</p>}
      {answer !== null && answer.results.length > 0 && (
        <table class={spec.metrics.length > 1 ? 'figures-2' : undefined}>
          <thead>
            <tr>
              <th scope="col">{DIMENSION_LABELS[dimension]}</th>
              {spec.metrics.map((m) => (
                <th scope="col" class="number">
                  {m.label}
                </th>
              ))}
              <th scope="col">
                <span class="visually-hidden">Exclude</span>
              </th>
            </tr>
          </thead>
          <tbody>
            {answer.results.map((row) => {
              const value = row.dimensions[0]!;
              const share = total && spec.metrics[0] === REQUESTS ? (row.metrics[0] ?? 0) / total : null;
              return (
                <tr>
                  <th scope="row">
                    <button type="button" class="entry" title={`Show only ${DIMENSION_LABELS[dimension]} ${shownValue(value)}`} onClick={() => onFilter({ op: 'is', dimension, value })}>
                      {shownValue(value)}
                    </button>
                    {spec.id === 'bots' && row.dimensions[1] === 'ai' && <span class="badge">AI</span>}
                    {share !== null && <span class="share" style={{ width: `${Math.round(share * 100)}%` }} />}
                  </th>
                  {spec.metrics.map((m, i) => (
                    <td class="number">{m.format(row.metrics[i] ?? null)}</td>
                  ))}
                  <td>
                    <button type="button" class="exclude" aria-label={`Exclude ${DIMENSION_LABELS[dimension]} ${shownValue(value)}`} onClick={() => onFilter({ op: 'isNot', dimension, value })}>
                      ⊘
                    </button>
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      )}
    </section>
  );
}

function PeriodPicker({ location }: { location: Location }) {
  const period = location.query.get('period') ?? '24h';
  const [from, setFrom] = useState(location.query.get('from') ?? '');
  const [to, setTo] = useState(location.query.get('to') ?? '');
  const compare = location.query.get('compare') === '1';
  const local = (iso: string) => (iso ? iso.slice(0, 16) : '');
  return (
    <div class="toolbar">
      <label for="period">Period</label>
      <select id="period" value={period} onChange={(e) => navigate(withQuery(location, { period: e.currentTarget.value === '24h' ? null : e.currentTarget.value }))}>
        {PERIODS.map((p) => (
          <option value={p.value}>{p.label}</option>
        ))}
      </select>
      {period === 'custom' && (
        <form
          class="range"
          onSubmit={(e) => {
            e.preventDefault();
            navigate(withQuery(location, { from: from ? new Date(`${from}Z`).toISOString() : null, to: to ? new Date(`${to}Z`).toISOString() : null }));
          }}
        >
          <label for="range-from">From (UTC)</label>
          <input id="range-from" type="datetime-local" value={local(from)} onInput={(e) => setFrom(e.currentTarget.value)} required />
          <label for="range-to">To (UTC)</label>
          <input id="range-to" type="datetime-local" value={local(to)} onInput={(e) => setTo(e.currentTarget.value)} />
          <button type="submit">Apply</button>
        </form>
      )}
      <label class="check">
        <input type="checkbox" checked={compare} onChange={(e) => navigate(withQuery(location, { compare: e.currentTarget.checked ? '1' : null }))} />
        Compare with the previous period
      </label>
    </div>
  );
}

/** The URL with `filters` as its `f` parameters. */
function withFilters(location: Location, filters: Filter[]): string {
  const query = new URLSearchParams(location.query);
  query.delete('f');
  for (const f of filters) query.append('f', filterParam(f));
  const search = query.toString();
  return search ? `${location.path}?${search}` : location.path;
}

export type DomainSection = 'dashboard' | 'logs' | 'alerts' | 'ingest' | 'members';
/** `managers`: offered only to those who manage the domain's members (its owner, administrators). */
const SECTIONS: { section: DomainSection; label: string; suffix: string; managers?: true }[] = [
  { section: 'dashboard', label: 'Dashboard', suffix: '' },
  { section: 'logs', label: 'Logs', suffix: '/logs' },
  { section: 'alerts', label: 'Alerts', suffix: '/alerts' },
  { section: 'ingest', label: 'Ingest', suffix: '/ingest' },
  { section: 'members', label: 'Members', suffix: '/members', managers: true },
];

/** A domain's pages: its name, the links between its sections, and the section asked. */
export function DomainPage({ id, section, location, user }: { id: number; section: DomainSection; location: Location; user: User }) {
  const [domain, setDomain] = useState<{ name: string; ownerId: number | null } | null>(null);
  const [error, setError] = useState<unknown>(null);
  // Before the paint, as useBatch's requests (above).
  useLayoutEffect(() => {
    setDomain(null);
    setError(null);
    api<{ name: string; ownerId: number | null }>('GET', `/api/domains/${id}`).then(setDomain, setError);
  }, [id]);
  const manages = user.role === 'admin' || domain?.ownerId === user.id;
  return (
    <main class="dashboard">
      <p class="crumbs">
        <a href="/" onClick={(e) => linkClick(e, '/')}>
          Fleet
        </a>{' '}
        /
      </p>
      {error !== null && <ErrorMessage error={error} />}
      {domain === null && error === null && <p aria-live="polite">Loading…</p>}
      {domain !== null && (
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
      )}
    </main>
  );
}

/** The dashboard of a domain the user may see (its name known). */
function Dashboard({ id, location }: { id: number; location: Location }) {
  const filters = filtersOf(location.query);
  const compare = location.query.get('compare') === '1';
  const panelSpecs = panelsFor(filters);
  const view = viewQueries({ domains: [id], ...rangeOf(location.query), filters: apiFilters(filters) }, compare, panelSpecs);
  // The headline's batch first, then the panels' (view.ts says why two).
  const [tiles, overTime, byStatus] = useBatch(view.headline) as [Answered, Answered, Answered];
  const panels = useBatch(view.panels);
  const total = tiles.answer?.results[0]?.metrics[0] ?? null;
  const addFilter = (f: Filter) => {
    if (!filters.some((g) => filterParam(g) === filterParam(f))) navigate(withFilters(location, [...filters, f]));
  };
  return (
    <>
      <PeriodPicker location={location} />
      {filters.length > 0 && (
        <ul class="chips" aria-label="Filters">
          {filters.map((f, i) => (
            <li>
              {filterLabel(f)}
              <button type="button" aria-label={`Remove filter ${filterLabel(f)}`} onClick={() => navigate(withFilters(location, filters.filter((_, j) => j !== i)))}>
                ×
              </button>
            </li>
          ))}
        </ul>
      )}
      <Tiles answer={tiles.answer} error={tiles.error} compare={compare} />
      <Charts overTime={overTime} byStatus={byStatus} />
      <div class="panels">
        {panelSpecs.map((spec, i) => (
          <Panel spec={spec} answered={panels[i]!} total={total} onFilter={addFilter} />
        ))}
      </div>
    </>
  );
}
