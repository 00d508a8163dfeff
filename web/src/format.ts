import { HOUR_MS, MINUTE_MS } from '../../core/durations.js';
/** Figures as the dashboard shows them. */

const integer = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });
const twoDecimals = new Intl.NumberFormat('en', { maximumFractionDigits: 2 });
const oneDecimal = new Intl.NumberFormat('en', { minimumFractionDigits: 1, maximumFractionDigits: 1 });

export const count = (n: number | null | undefined) => (n == null ? '–' : integer.format(n));

/** `n` and its noun, singular for one: "1 rule", "2 rules", "1,204 entries" (`many` where the plural is not `one` + s). */
export const counted = (n: number, one: string, many = `${one}s`) => `${count(n)} ${n === 1 ? one : many}`;

const COMPACT = [
  [1e12, 'T'],
  [1e9, 'G'],
  [1e6, 'M'],
  [1e3, 'k'],
] as const;

/** A figure short enough for a chart's axis: 950, 1.5k, 250k, 1.25M (two decimals of its unit at most). */
export function compact(n: number | null): string {
  if (n == null) return '–';
  const [size, suffix] = COMPACT.find(([size]) => Math.abs(Math.round((n / size) * 100)) >= 100) ?? [1, ''];
  return `${twoDecimals.format(n / size)}${suffix}`;
}

export const percent = (fraction: number | null | undefined) => (fraction == null ? '–' : `${(fraction * 100).toFixed(2)} %`);

/** Milliseconds as ms, s, min or h: a response time or the sum of many (time spent). */
export function ms(n: number | null | undefined): string {
  if (n == null) return '–';
  if (n < 1000) return `${integer.format(n)} ms`;
  if (n < 60_000) return `${(n / 1000).toFixed(2)} s`;
  if (n < HOUR_MS) return `${(n / MINUTE_MS).toFixed(1)} min`;
  return `${oneDecimal.format(n / HOUR_MS)} h`;
}

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB', 'PB'];
export function bytes(n: number | null | undefined): string {
  if (n == null) return '–';
  let value = n;
  let unit = 0;
  while (value >= 1000 && unit < UNITS.length - 1) {
    value /= 1000;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(value >= 100 ? 0 : 1)} ${UNITS[unit]}`;
}

/** How long ago, in the largest whole unit: "< 1 min ago", "5 min ago", "3 h ago", "2 d ago". */
export function ago(seconds: number): string {
  if (seconds < 60) return '< 1 min ago';
  if (seconds < 3_600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86_400) return `${Math.floor(seconds / 3_600)} h ago`;
  return `${integer.format(Math.floor(seconds / 86_400))} d ago`;
}

/** An ISO 8601 time as "YYYY-MM-DD HH:MM[:SS]", for a table whose header says UTC; or "never". */
export const utcCell = (iso: string | null, seconds = false) => (iso ? iso.replace('T', ' ').slice(0, seconds ? 19 : 16) : 'never');

/** An ISO 8601 time as "YYYY-MM-DD HH:MM[:SS] UTC", or "never". */
export const utcTime = (iso: string | null, seconds = false) => (iso ? `${utcCell(iso, seconds)} UTC` : 'never');

/** A time bucket's name (meta.interval: "hour", "6hours", "5minutes") as words: "hour", "6 hours", "5 minutes". */
export const interval = (name: string) => name.replace(/^(\d+)(?=\D)/, '$1 ');

/**
 * A time axis' labels (uPlot's splits, epoch seconds, `step` apart) in UTC and 24 hours, as every
 * time the dashboard shows: "HH:MM", with the date (YYYY-MM-DD) under the first and under the first
 * of each new day; steps of a day or more as dates only.
 */
export function utcTicks(splits: readonly number[], step: number): string[] {
  let day = '';
  return splits.map((split) => {
    const iso = new Date(split * 1000).toISOString();
    const date = iso.slice(0, 10);
    if (step >= 86_400) return date;
    const label = date === day ? iso.slice(11, 16) : `${iso.slice(11, 16)}\n${date}`;
    day = date;
    return label;
  });
}
