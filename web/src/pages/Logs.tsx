/**
 * A domain's logs: the access or error listing with its filters, or a search, page by page; an
 * entry's full detail; a live tail of what is stored from now on (pause and resume without loss);
 * and "export these", which asks for an export with the listing's filters and shows its link.
 * Type, filters, search and page are in the URL.
 */
import { DAY_MS } from '../../../core/durations.js';
import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import type { Entry, ExportLink, Listing } from '../data/types.js';
import { Loaded, useData } from '../data/use-data.js';
import { count } from '../format.js';
import { navigate, withQuery, type Location } from '../router.js';
import { openTail, type Tail, type TailEvent } from '../tail.js';

const ACCESS_FILTERS = [
  { name: 'statusCode', label: 'Status code', placeholder: '404 or 5xx' },
  { name: 'method', label: 'Method', placeholder: 'GET' },
  { name: 'url', label: 'URL', placeholder: '/api/*' },
  { name: 'ipAddress', label: 'Client address', placeholder: '203.0.113.7' },
] as const;
const LEVELS = ['error', 'warn', 'info', 'debug'] as const;
/** How far back the search and the export reach: the dashboard's longest period. */
const SEARCH_DAYS = 30;
const LIVE_KEPT = 200;

const ACCESS_COLUMNS = ['timestamp', 'method', 'url', 'statusCode', 'responseSize', 'responseTime', 'ipAddress'] as const;
const ERROR_COLUMNS = ['timestamp', 'level', 'message'] as const;
/** A search's entries may be of both kinds: what they share, and the URL or the message as `entry`. */
const MIXED_COLUMNS = ['timestamp', 'kind', 'entry', 'statusOrLevel'] as const;
const COLUMN_LABELS: Record<string, string> = {
  timestamp: 'Time (UTC)',
  method: 'Method',
  url: 'URL',
  statusCode: 'Status',
  responseSize: 'Bytes',
  responseTime: 'ms',
  ipAddress: 'Client',
  level: 'Level',
  message: 'Message',
  kind: 'Kind',
  entry: 'URL or message',
  statusOrLevel: 'Status or level',
};

const isError = (entry: Entry) => 'level' in entry;

const cell = (entry: Entry, column: string) => {
  if (column === 'kind') return isError(entry) ? 'error' : 'access';
  if (column === 'entry') return String(isError(entry) ? entry.message : entry.url);
  if (column === 'statusOrLevel') return String(isError(entry) ? entry.level : entry.statusCode);
  const value = entry[column];
  if (column === 'timestamp') return String(value).replace('T', ' ').replace('Z', '');
  if (typeof value === 'number') return count(value);
  return value == null ? '' : String(value);
};

function Detail({ entry }: { entry: Entry }) {
  return (
    <dl class="detail">
      {Object.entries(entry).map(([key, value]) => (
        <>
          <dt>{key}</dt>
          <dd>{typeof value === 'object' && value !== null ? JSON.stringify(value, null, 2) : String(value)}</dd>
        </>
      ))}
    </dl>
  );
}

function EntriesTable({ entries, type, caption }: { entries: Entry[]; type: 'access' | 'error' | 'mixed'; caption: string }) {
  const [open, setOpen] = useState<unknown>(null);
  const columns = type === 'access' ? ACCESS_COLUMNS : type === 'error' ? ERROR_COLUMNS : MIXED_COLUMNS;
  return (
    <Scroll label={caption}>
      <table class="entries">
        <caption>{caption}</caption>
        <thead>
          <tr>
            {columns.map((c) => (
              <th scope="col">{COLUMN_LABELS[c]}</th>
            ))}
            <th scope="col">
              <span class="visually-hidden">Detail</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {entries.map((entry) => (
            <>
              <tr key={String(entry.id)}>
                {columns.map((c) => (
                  <td class={c === 'url' || c === 'message' || c === 'entry' ? 'wide' : ''}>{cell(entry, c)}</td>
                ))}
                <td>
                  <button type="button" aria-expanded={open === entry.id} onClick={() => setOpen(open === entry.id ? null : entry.id)}>
                    {open === entry.id ? 'Hide' : 'Detail'}
                  </button>
                </td>
              </tr>
              {open === entry.id && (
                <tr class="detail-row">
                  <td colSpan={columns.length + 1}>
                    <Detail entry={entry} />
                  </td>
                </tr>
              )}
            </>
          ))}
        </tbody>
      </table>
    </Scroll>
  );
}

function LiveTail({ id, type, filters }: { id: number; type: 'access' | 'error'; filters: Record<string, string> }) {
  const [entries, setEntries] = useState<Entry[]>([]);
  const [paused, setPaused] = useState(false);
  const [problem, setProblem] = useState<string | null>(null);
  const tail = useRef<Tail | null>(null);
  const path = `/api/logs/domains/${id}/tail?${new URLSearchParams({ type, ...filters })}`;
  useEffect(() => {
    setEntries([]);
    const opened = openTail(path, (event: TailEvent) => setEntries((kept) => [event.entry, ...kept].slice(0, LIVE_KEPT)), setProblem);
    tail.current = opened;
    opened.start();
    setPaused(false);
    return () => opened.stop();
  }, [path]);
  const toggle = () => {
    if (paused) tail.current?.start();
    else tail.current?.stop();
    setPaused(!paused);
  };
  return (
    <section class="live" aria-label="Live tail">
      <div class="toolbar">
        <span aria-live="polite">{paused ? 'Paused' : 'Live: new entries appear as they are stored'}</span>
        <button type="button" onClick={toggle}>
          {paused ? 'Resume' : 'Pause'}
        </button>
      </div>
      {problem && (
        <p class="error" role="alert">
          {problem}
        </p>
      )}
      <EntriesTable entries={entries} type={type} caption={`${count(entries.length)} new entries (the newest ${LIVE_KEPT} kept)`} />
    </section>
  );
}

function Export({ id, type, filters }: { id: number; type: 'access' | 'error'; filters: Record<string, string> }) {
  const [result, setResult] = useState<ExportLink | null>(null);
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const run = async () => {
    setBusy(true);
    setError(null);
    setResult(null);
    try {
      const startDate = new Date(Date.now() - SEARCH_DAYS * DAY_MS).toISOString();
      setResult(await api<ExportLink>('POST', `/api/logs/domains/${id}/export`, { type, format: 'csv', startDate, filters }));
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  return (
    <div class="export">
      <button type="button" onClick={run} disabled={busy}>
        {busy ? 'Exporting…' : `Export these (CSV, last ${SEARCH_DAYS} days)`}
      </button>
      {result && (
        <p>
          {/* The link's path on this origin: the page and the API are one server. */}
          <a href={new URL(result.downloadUrl).pathname} download>
            Download the export
          </a>{' '}
          (until {result.expiresAt.replace('T', ' ').slice(0, 16)} UTC)
        </p>
      )}
      {error !== null && <ErrorMessage error={error} />}
    </div>
  );
}

export function Logs({ id, location }: { id: number; location: Location }) {
  const q = location.query;
  const type = q.get('type') === 'error' ? 'error' : 'access';
  const search = q.get('q') ?? '';
  const page = Math.max(1, Number(q.get('page')) || 1);
  const live = q.get('tail') === '1';
  const filters = useMemo(() => {
    const names = type === 'access' ? ACCESS_FILTERS.map((f) => f.name) : ['level'];
    return Object.fromEntries(names.flatMap((name) => (q.get(name) ? [[name, q.get(name)!]] : []))) as Record<string, string>;
  }, [location]);
  const [draft, setDraft] = useState<Record<string, string>>({ ...filters, q: search });
  useEffect(() => setDraft({ ...filters, q: search }), [location]);
  const listing = useData([id, type, filters, search, page], (signal) =>
    search
      ? api<Listing>('POST', `/api/logs/domains/${id}/search`, { query: search, startDate: new Date(Date.now() - SEARCH_DAYS * DAY_MS).toISOString(), page, limit: 20 }, signal)
      : api<Listing>('GET', `/api/logs/domains/${id}/${type}?${new URLSearchParams({ ...filters, page: String(page), limit: '20' })}`, undefined, signal),
  );

  const apply = (event: Event) => {
    event.preventDefault();
    const names = type === 'access' ? ACCESS_FILTERS.map((f) => f.name) : ['level'];
    navigate(withQuery(location, { ...Object.fromEntries(names.map((n) => [n, draft[n]?.trim() || null])), q: draft.q?.trim() || null, page: null }));
  };
  const shownType = search ? 'mixed' : type;

  return (
    <section aria-label="Logs">
      <div class="tabs" role="group" aria-label="Kind of entries">
        {(['access', 'error'] as const).map((t) => (
          <button type="button" aria-pressed={type === t} onClick={() => navigate(withQuery({ path: location.path, query: new URLSearchParams() }, { type: t === 'access' ? null : t }))}>
            {t === 'access' ? 'Access log' : 'Error log'}
          </button>
        ))}
      </div>
      <form class="filters" onSubmit={apply}>
        {type === 'access' ? (
          ACCESS_FILTERS.map((f) => (
            <span>
              <label for={`filter-${f.name}`}>{f.label}</label>
              <input id={`filter-${f.name}`} value={draft[f.name] ?? ''} placeholder={f.placeholder} onInput={(e) => setDraft({ ...draft, [f.name]: e.currentTarget.value })} />
            </span>
          ))
        ) : (
          <span>
            <label for="filter-level">Level</label>
            <select id="filter-level" value={draft.level ?? ''} onChange={(e) => setDraft({ ...draft, level: e.currentTarget.value })}>
              <option value="">any</option>
              {LEVELS.map((l) => (
                <option value={l}>{l}</option>
              ))}
            </select>
          </span>
        )}
        <span>
          <label for="filter-search">Search (last {SEARCH_DAYS} days)</label>
          <input id="filter-search" type="search" value={draft.q ?? ''} placeholder="text in URLs and messages" onInput={(e) => setDraft({ ...draft, q: e.currentTarget.value })} />
        </span>
        <button type="submit">Apply</button>
      </form>
      <div class="toolbar">
        <label class="check">
          <input type="checkbox" checked={live} onChange={(e) => navigate(withQuery(location, { tail: e.currentTarget.checked ? '1' : null }))} />
          Live tail
        </label>
        {!search && <Export id={id} type={type} filters={filters} />}
      </div>
      {live && <LiveTail id={id} type={type} filters={filters} />}
      <Loaded read={listing}>
        {(data) => (
          <>
            <EntriesTable entries={data.logs} type={shownType} caption={`${count(data.pagination.total)} ${search ? `entries matching “${search}”` : 'entries'}, newest first`} />
            <Pager page={page} pages={data.pagination.pages} location={location} always />
          </>
        )}
      </Loaded>
    </section>
  );
}
