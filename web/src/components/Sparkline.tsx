/**
 * A small line of values (one per bucket, oldest first), drawn as SVG: no library for 24 points.
 * The last bucket is the current one, still filling, so the line to it is dashed rather than read
 * as a fall.
 */
export function Sparkline({ values, label }: { values: number[]; label: string }) {
  const width = 120;
  const height = 28;
  const max = Math.max(1, ...values);
  const step = values.length > 1 ? width / (values.length - 1) : width;
  const points = values.map((v, i) => `${(i * step).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
  const solid = points.length > 1 ? points.slice(0, -1) : points;
  return (
    <svg class="sparkline" width={width} height={height} viewBox={`0 0 ${width} ${height}`} role="img" aria-label={label}>
      <polyline points={solid.join(' ')} fill="none" stroke="currentColor" stroke-width="1.5" />
      {points.length > 1 && <polyline class="partial" points={points.slice(-2).join(' ')} fill="none" stroke="currentColor" stroke-width="1.5" stroke-dasharray="2 2" />}
    </svg>
  );
}
