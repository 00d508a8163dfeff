/** The dashboard's period (1h, 24h, 7d, 30d or a custom range in UTC) and "compare with the previous period", both in the URL. */
import { useState } from 'preact/hooks';
import { navigate, withQuery, type Location } from '../router.js';

const PERIODS = [
  { value: '1h', label: 'Last hour' },
  { value: '24h', label: 'Last 24 hours' },
  { value: '7d', label: 'Last 7 days' },
  { value: '30d', label: 'Last 30 days' },
  { value: 'custom', label: 'Custom range' },
] as const;

/** The window of the query body, as the URL gives it. */
export function rangeOf(query: URLSearchParams): Record<string, string> {
  const period = query.get('period') ?? '24h';
  if (period !== 'custom') return { dateRange: PERIODS.some((p) => p.value === period) ? period : '24h' };
  const range: Record<string, string> = { dateRange: 'custom' };
  for (const [param, field] of [['from', 'startDate'], ['to', 'endDate']] as const) {
    const value = query.get(param);
    if (value) range[field] = value;
  }
  return range;
}

export function PeriodPicker({ location }: { location: Location }) {
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
