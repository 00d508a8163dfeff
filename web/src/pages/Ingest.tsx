/**
 * A domain's ingest health: when its last access and error lines were stored (stale past
 * INGEST_STALE_S), the lines stored and rejected in the last hour and day, the rejects by cause,
 * the sources feeding it with their lag, and its latest rejected lines with why, so that its owner
 * can fix a log_format. The page of rejects is in the URL. Lines are the clients' text: shown as
 * text, never as markup.
 */
import { useEffect, useState } from 'preact/hooks';
import { api } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import { ago, bytes, count, utcTime } from '../format.js';
import type { Location } from '../router.js';

interface LineCounts {
  lastHour: number;
  lastDay: number;
}
interface Health {
  lastAccessLineAt: string | null;
  lastErrorLineAt: string | null;
  lastLineAt: string | null;
  secondsSinceLastLine: number | null;
  stale: boolean;
  staleAfterS: number;
  stored: LineCounts;
  rejected: LineCounts & { byCause: (LineCounts & { cause: string | null })[] };
  sources: { name: string; state: string; lagBytes: number; reportedAt: string; reporting: boolean }[];
}
interface Rejected {
  time: string;
  kind: string;
  source: string;
  cause: string | null;
  reason: string;
  line: string;
  length: number;
}
interface RejectsPage {
  rejects: Rejected[];
  pagination: { total: number; pages: number };
}

const REJECTS_PER_PAGE = 20;
/** A cause as words (the API's are identifiers); null: rejected before causes were recorded. */
const causeText = (cause: string | null) => (cause === null ? 'not recorded' : cause.replaceAll('_', ' '));

function Figures({ health }: { health: Health }) {
  const rows: [string, LineCounts][] = [
    ['Lines stored', health.stored],
    ['Lines rejected', health.rejected],
  ];
  return (
    <section aria-labelledby="ingest-lines">
      <h2 id="ingest-lines">Lines</h2>
      <dl class="detail">
        <dt>Last access line</dt>
        <dd>{utcTime(health.lastAccessLineAt, true)}</dd>
        <dt>Last error line</dt>
        <dd>{utcTime(health.lastErrorLineAt, true)}</dd>
        <dt>Last line</dt>
        <dd>
          {health.secondsSinceLastLine === null ? 'never' : ago(health.secondsSinceLastLine)}
          {health.stale && <span class="stale">stale</span>}
        </dd>
      </dl>
      <p class="hint">A domain is stale after {count(health.staleAfterS)} s without a line (INGEST_STALE_S).</p>
      <Scroll label="Lines stored and rejected">
        <table class="ingest">
          <thead>
            <tr>
              <th scope="col">
                <span class="visually-hidden">Lines</span>
              </th>
              <th scope="col" class="number">
                Last hour
              </th>
              <th scope="col" class="number">
                Last day
              </th>
            </tr>
          </thead>
          <tbody>
            {[...rows, ...health.rejected.byCause.map((c): [string, LineCounts] => [`Rejected: ${causeText(c.cause)}`, c])].map(([label, n]) => (
              <tr>
                <th scope="row">{label}</th>
                <td class="number">{count(n.lastHour)}</td>
                <td class="number">{count(n.lastDay)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
    </section>
  );
}

function Sources({ sources }: { sources: Health['sources'] }) {
  return (
    <section aria-labelledby="ingest-sources">
      <h2 id="ingest-sources">Sources</h2>
      {sources.length === 0 ? (
        <p class="hint">No ingest worker reports a source of this domain: none is configured for it, or its worker has not started.</p>
      ) : (
        <Scroll label="Sources and their lag">
          <table class="ingest">
            <thead>
              <tr>
                <th scope="col">Source</th>
                <th scope="col">State</th>
                <th scope="col" class="number">
                  Lag
                </th>
                <th scope="col">Reported (UTC)</th>
              </tr>
            </thead>
            <tbody>
              {sources.map((s) => (
                <tr>
                  <th scope="row" class="wide">
                    {s.name}
                  </th>
                  <td>
                    {s.state}
                    {!s.reporting && <span class="stale">not reporting</span>}
                  </td>
                  <td class="number">{bytes(s.lagBytes)}</td>
                  <td>{utcTime(s.reportedAt, true)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </Scroll>
      )}
    </section>
  );
}

function Rejects({ id, location }: { id: number; location: Location }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  const [answer, setAnswer] = useState<RejectsPage | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let stale = false;
    setError(null);
    api<RejectsPage>('GET', `/api/logs/domains/${id}/rejects?page=${page}&limit=${REJECTS_PER_PAGE}`).then(
      (a) => !stale && setAnswer(a),
      (e) => !stale && setError(e),
    );
    return () => {
      stale = true;
    };
  }, [id, page]);
  return (
    <section aria-labelledby="ingest-rejects">
      <h2 id="ingest-rejects">Rejected lines</h2>
      {error !== null && <ErrorMessage error={error} />}
      {answer === null && error === null && <p aria-live="polite">Loading…</p>}
      {answer !== null && answer.rejects.length === 0 && <p class="hint">No rejected line.</p>}
      {answer !== null && answer.rejects.length > 0 && (
        <>
          <Scroll label="Rejected lines, newest first">
            <table class="ingest rejects">
              <caption>{count(answer.pagination.total)} rejected lines, newest first</caption>
              <thead>
                <tr>
                  <th scope="col">Time (UTC)</th>
                  <th scope="col">Cause</th>
                  <th scope="col">Reason</th>
                  <th scope="col">Line</th>
                </tr>
              </thead>
              <tbody>
                {answer.rejects.map((r) => (
                  <tr>
                    <td>{utcTime(r.time, true)}</td>
                    <td>{causeText(r.cause)}</td>
                    <td class="wide">{r.reason}</td>
                    <td class="wide">
                      <code>{r.line}</code>
                      {r.length > new TextEncoder().encode(r.line).length && <span class="hint"> (its first part; {count(r.length)} bytes in all)</span>}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </Scroll>
          <Pager page={page} pages={answer.pagination.pages} location={location} />
        </>
      )}
    </section>
  );
}

/** The ingest section of a domain's pages. */
export function Ingest({ id, location }: { id: number; location: Location }) {
  const [health, setHealth] = useState<Health | null>(null);
  const [error, setError] = useState<unknown>(null);
  useEffect(() => {
    let stale = false;
    setHealth(null);
    setError(null);
    api<Health>('GET', `/api/domains/${id}/ingest`).then(
      (h) => !stale && setHealth(h),
      (e) => !stale && setError(e),
    );
    return () => {
      stale = true;
    };
  }, [id]);
  return (
    <>
      {error !== null && <ErrorMessage error={error} />}
      {health === null && error === null && <p aria-live="polite">Loading…</p>}
      {health !== null && (
        <>
          <Figures health={health} />
          <Sources sources={health.sources} />
        </>
      )}
      <Rejects id={id} location={location} />
    </>
  );
}
