/**
 * A time series chart drawn by uPlot (the library of Grafana's time-series panel: some 50 KB, no
 * dependencies, canvas). Stacked series are drawn as cumulative areas, the largest first, while
 * the legend shows each series' own value.
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useEffect, useRef } from 'preact/hooks';

export interface ChartSeries {
  label: string;
  color: string;
  values: (number | null)[];
}

interface Props {
  title: string;
  /** Bucket starts, epoch ms. */
  times: number[];
  series: ChartSeries[];
  format: (value: number | null) => string;
  stacked?: boolean;
}

const HEIGHT = 180;

/** The series as uPlot draws them: with `stacked`, each the sum of itself and those after it. */
function drawn(series: ChartSeries[], stacked: boolean): (number | null)[][] {
  if (!stacked) return series.map((s) => s.values);
  return series.map((_, i) => series[0]!.values.map((__, t) => series.slice(i).reduce((sum, s) => sum + (s.values[t] ?? 0), 0)));
}

export function TimeChart({ title, times, series, format, stacked = false }: Props) {
  const box = useRef<HTMLDivElement>(null);
  useEffect(() => {
    const element = box.current;
    if (!element) return;
    const data = [times.map((t) => t / 1000), ...drawn(series, stacked)] as uPlot.AlignedData;
    const plot = new uPlot(
      {
        width: Math.max(200, element.clientWidth),
        height: HEIGHT,
        scales: { x: { time: true } },
        axes: [{}, { values: (_u, ticks) => ticks.map((v) => format(v)), size: 70 }],
        series: [
          {},
          ...series.map((s, i) => ({
            label: s.label,
            stroke: s.color,
            width: 1.5,
            ...(stacked ? { fill: `${s.color}cc` } : {}),
            value: (_u: uPlot, _v: number, _series: number, index: number | null) => (index === null ? '–' : format(series[i]!.values[index] ?? null)),
          })),
        ],
        cursor: { drag: { x: false, y: false } },
      },
      data,
      element,
    );
    const resize = new ResizeObserver(() => plot.setSize({ width: Math.max(200, element.clientWidth), height: HEIGHT }));
    resize.observe(element);
    return () => {
      resize.disconnect();
      plot.destroy();
    };
  }, [times, series, stacked]);
  return (
    <figure class="chart">
      <figcaption>{title}</figcaption>
      <div ref={box} role="img" aria-label={`${title}: ${series.map((s) => s.label).join(', ')} over time`} />
    </figure>
  );
}
