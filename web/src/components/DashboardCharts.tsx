/** The dashboard's charts over time: requests by status class, response times, bandwidth and visitors (web/src/view.ts's headline). */
import { useMemo } from 'preact/hooks';
import { namedRows } from '../data/metrics.js';
import type { Answered } from '../data/reads.js';
import { bytes, compact, count, interval, ms } from '../format.js';
import { OVER_TIME_METRICS, STATUS_METRICS } from '../view.js';
import { ErrorMessage } from './ErrorMessage.js';
import { TimeChart, type ChartSeries } from './TimeChart.js';

const STATUS_COLORS: Record<string, string> = { '1xx': '#8c959f', '2xx': '#2da44e', '3xx': '#0969da', '4xx': '#bf8700', '5xx': '#cf222e' };

export function DashboardCharts({ overTime, byStatus }: { overTime: Answered; byStatus: Answered }) {
  const charts = useMemo(() => {
    if (!overTime.answer || !byStatus.answer) return null;
    const rows = namedRows(OVER_TIME_METRICS, overTime.answer.results);
    const statusRows = namedRows(STATUS_METRICS, byStatus.answer.results);
    const times = rows.map((r) => Date.parse(String(r.dimensions[0])));
    const column = (metric: (typeof OVER_TIME_METRICS)[number]) => rows.map((r) => r.metrics[metric]);
    const place = new Map(times.map((t, i) => [t, i]));
    const classes = [...new Set(statusRows.map((r) => String(r.dimensions[1])))].sort();
    const status: ChartSeries[] = classes.map((c) => ({ label: c, color: STATUS_COLORS[c] ?? '#6e7781', values: times.map(() => 0) }));
    for (const r of statusRows) status[classes.indexOf(String(r.dimensions[1]))]!.values[place.get(Date.parse(String(r.dimensions[0])))!] = r.metrics.requests ?? 0;
    return {
      times,
      status,
      latency: [
        { label: 'p50', color: '#2da44e', values: column('p50ResponseTime') },
        { label: 'p95', color: '#bf8700', values: column('p95ResponseTime') },
        { label: 'p99', color: '#cf222e', values: column('p99ResponseTime') },
      ],
      bandwidth: [{ label: 'Bandwidth', color: '#0969da', values: column('bandwidth') }],
      visitors: [{ label: 'Visitors', color: '#8250df', values: column('visitors') }],
    };
  }, [overTime.answer, byStatus.answer]);
  const error = overTime.error ?? byStatus.error;
  if (error) return <ErrorMessage error={error} />;
  if (!charts) return <p aria-live="polite">Loading charts…</p>;
  const per = interval(overTime.answer?.meta.interval ?? 'bucket');
  return (
    <section class="charts" aria-label="Charts">
      <TimeChart title={`Requests per ${per}, by status class`} times={charts.times} series={charts.status} format={count} axis={compact} stacked />
      <TimeChart title={`Response time per ${per}`} times={charts.times} series={charts.latency} format={ms} axis={ms} />
      <TimeChart title={`Bandwidth per ${per}`} times={charts.times} series={charts.bandwidth} format={bytes} axis={bytes} />
      <TimeChart title={`Visitors per ${per}`} times={charts.times} series={charts.visitors} format={count} axis={compact} />
    </section>
  );
}
