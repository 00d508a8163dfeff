/** The dashboard's headline figures (web/src/view.ts's tiles query), each with its change when compared. */
import { namedRows } from '../data/metrics.js';
import type { Answered } from '../data/reads.js';
import { bytes, count, ms, percent } from '../format.js';
import { TILE_METRICS } from '../view.js';
import { ErrorMessage } from './ErrorMessage.js';

const TILES: { metric: (typeof TILE_METRICS)[number]; label: string; format: (n: number | null) => string }[] = [
  { metric: 'requests', label: 'Requests', format: count },
  { metric: 'visitors', label: 'Visitors', format: count },
  { metric: 'errorRate', label: 'Error rate (5xx)', format: percent },
  { metric: 'p95ResponseTime', label: 'p95 response time', format: ms },
  { metric: 'bandwidth', label: 'Bandwidth', format: bytes },
];

function Change({ value }: { value: number | null | undefined }) {
  if (value === undefined) return null;
  if (value === null) return <span class="change">no earlier figure</span>;
  const text = `${value > 0 ? '▲' : value < 0 ? '▼' : ''} ${Math.abs(value * 100).toFixed(1)} % vs previous period`;
  return <span class="change">{text}</span>;
}

export function Tiles({ answered: { answer, error }, compare }: { answered: Answered; compare: boolean }) {
  if (error) return <ErrorMessage error={error} />;
  const row = answer ? namedRows(TILE_METRICS, answer.results)[0] : undefined;
  return (
    <section class="tiles" aria-label="Headline figures">
      {TILES.map((tile) => (
        <div class="tile">
          <h2>{tile.label}</h2>
          <p class="figure" data-metric={tile.metric}>
            {row ? tile.format(row.metrics[tile.metric]) : '…'}
          </p>
          {compare && row && <Change value={row.change?.[tile.metric]} />}
        </div>
      ))}
    </section>
  );
}
