/**
 * A time series chart drawn by uPlot (the library of Grafana's time-series panel: some 50 KB, no
 * dependencies, canvas). Stacked series are drawn as cumulative areas, the largest first, while
 * the legend shows each series' own value. Times are UTC, as everywhere on the dashboard: uPlot's
 * own labels are the browser's zone, in 12 hours.
 */
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { useEffect, useRef } from 'preact/hooks';
import { utcTicks, utcTime } from '../format.js';

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
  /** A value in the legend, in full. */
  format: (value: number | null) => string;
  /** A value on the y axis, short (format.ts's compact for counts). */
  axis: (value: number) => string;
  stacked?: boolean;
}

const HEIGHT = 180;
/** The y axis' labels: its font set, so that the axis is measured in the font it is drawn with. */
const AXIS_FONT = '12px system-ui, sans-serif';
/** The axis' tick and the gap between tick and label (uPlot's defaults, 10 and 5), and a margin. */
const AXIS_MARGIN = 18;
let measure: CanvasRenderingContext2D | null = null;

/** The y axis as wide as its longest label (a fixed width cut "1,500,000" to ",500,000"). */
function axisWidth(values: string[] | null): number {
  measure ??= document.createElement('canvas').getContext('2d');
  if (!measure) return 70;
  measure.font = AXIS_FONT;
  return Math.ceil(AXIS_MARGIN + Math.max(0, ...(values ?? []).map((v) => measure!.measureText(v).width)));
}

/** The series as uPlot draws them: with `stacked`, each the sum of itself and those after it. */
function drawn(series: ChartSeries[], stacked: boolean): (number | null)[][] {
  if (!stacked) return series.map((s) => s.values);
  return series.map((_, i) => series[0]!.values.map((__, t) => series.slice(i).reduce((sum, s) => sum + (s.values[t] ?? 0), 0)));
}

export function TimeChart({ title, times, series, format, axis, stacked = false }: Props) {
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
        // Ticks on UTC hours and days; utcTicks labels them.
        tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), 'Etc/UTC'),
        axes: [
          // Ticks far enough apart for the dates under them (YYYY-MM-DD) not to meet.
          { values: (_u, splits, _axis, _space, step) => utcTicks(splits, step), space: 80 },
          { values: (_u, ticks) => ticks.map(axis), font: AXIS_FONT, size: (_u, values) => axisWidth(values) },
        ],
        series: [
          { value: (_u, seconds) => (seconds == null ? '–' : utcTime(new Date(seconds * 1000).toISOString())) },
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
