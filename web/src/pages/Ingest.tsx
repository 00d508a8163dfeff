/**
 * A domain's ingest health: when its last access and error lines were stored (stale past
 * INGEST_STALE_S), the lines stored and rejected in the last hour and day, the rejects by cause,
 * the sources feeding it with their lag, and its latest rejected lines with why, so that its owner
 * can fix a log_format. The page of rejects is in the URL. Lines are the clients' text: shown as
 * text, never as markup.
 */
import { api } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Pager } from '../components/Pager.js';
import { Scroll } from '../components/Scroll.js';
import type { IngestHealth as Health, RejectsPage } from '../data/types.js';
import { Loaded, useData } from '../data/use-data.js';
import { ago, bytes, count, utcTime } from '../format.js';
import type { Location } from '../router.js';

type LineCounts = Health['stored'];

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
  // The page before stays until the next comes.
  const read = useData([id, page], (signal) => api<RejectsPage>('GET', `/api/logs/domains/${id}/rejects?page=${page}&limit=${REJECTS_PER_PAGE}`, undefined, signal), { keep: true });
  const { data: answer, error } = read;
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
  const health = useData([id], (signal) => api<Health>('GET', `/api/domains/${id}/ingest`, undefined, signal));
  return (
    <>
      <Loaded read={health}>
        {(h) => (
          <>
            <Figures health={h} />
            <Sources sources={h.sources} />
          </>
        )}
      </Loaded>
      <Rejects id={id} location={location} />
    </>
  );
}
