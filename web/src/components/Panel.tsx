/**
 * A GoAccess-like panel of the dashboard (web/src/panels.ts): its top entries with their figures;
 * clicking an entry filters the view by it, ⊘ excludes it.
 */
import { namedRows } from '../data/metrics.js';
import type { Answered } from '../data/reads.js';
import { DIMENSION_LABELS, shownValue, type Filter } from '../filters.js';
import { REQUESTS, type PanelSpec } from '../panels.js';
import { ErrorMessage } from './ErrorMessage.js';

/** `total`: the view's requests, of which an entry's share is drawn when the panel's first metric is requests. */
export function Panel({ spec, answered: { answer, error }, total, onFilter }: { spec: PanelSpec; answered: Answered; total: number | null; onFilter: (f: Filter) => void }) {
  const dimension = spec.dimensions[0]!;
  const rows = answer ? namedRows(spec.metrics.map((m) => m.name), answer.results) : null;
  return (
    <section class="panel" aria-labelledby={`panel-${spec.id}`}>
      <h2 id={`panel-${spec.id}`}>{spec.title}</h2>
      {error !== null && <ErrorMessage error={error} />}
      {rows === null && error === null && <p aria-live="polite">Loading…</p>}
      {rows !== null && rows.length === 0 && <p class="hint">No requests.</p>}
      {rows !== null && rows.length > 0 && (
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
            {rows.map((row) => {
              const value = row.dimensions[0]!;
              const share = total && spec.metrics[0] === REQUESTS ? (row.metrics[REQUESTS.name] ?? 0) / total : null;
              return (
                <tr>
                  <th scope="row">
                    <button type="button" class="entry" title={`Show only ${DIMENSION_LABELS[dimension]} ${shownValue(value)}`} onClick={() => onFilter({ op: 'is', dimension, value })}>
                      {shownValue(value)}
                    </button>
                    {spec.id === 'bots' && row.dimensions[1] === 'ai' && <span class="badge">AI</span>}
                    {share !== null && <span class="share" style={{ width: `${Math.round(share * 100)}%` }} />}
                  </th>
                  {spec.metrics.map((m) => (
                    <td class="number">{m.format(row.metrics[m.name] ?? null)}</td>
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
