/** Figures as the dashboard shows them. */

const integer = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });
const oneDecimal = new Intl.NumberFormat('en', { minimumFractionDigits: 1, maximumFractionDigits: 1 });

export const count = (n: number | null | undefined) => (n == null ? '–' : integer.format(n));

export const percent = (fraction: number | null | undefined) => (fraction == null ? '–' : `${(fraction * 100).toFixed(2)} %`);

/** Milliseconds as ms, s, min or h: a response time or the sum of many (time spent). */
export function ms(n: number | null | undefined): string {
  if (n == null) return '–';
  if (n < 1000) return `${integer.format(n)} ms`;
  if (n < 60_000) return `${(n / 1000).toFixed(2)} s`;
  if (n < 3_600_000) return `${(n / 60_000).toFixed(1)} min`;
  return `${oneDecimal.format(n / 3_600_000)} h`;
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

/** An ISO 8601 time as "YYYY-MM-DD HH:MM[:SS] UTC", or "never". */
export const utcTime = (iso: string | null, seconds = false) => (iso ? `${iso.replace('T', ' ').slice(0, seconds ? 19 : 16)} UTC` : 'never');

/** A time bucket's name (meta.interval: "hour", "6hours", "5minutes") as words: "hour", "6 hours", "5 minutes". */
export const interval = (name: string) => name.replace(/^(\d+)(?=\D)/, '$1 ');
