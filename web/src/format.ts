/** Figures as the dashboard shows them. */

const integer = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });

export const count = (n: number | null | undefined) => (n == null ? '–' : integer.format(n));

export const percent = (fraction: number | null | undefined) => (fraction == null ? '–' : `${(fraction * 100).toFixed(2)} %`);

export const ms = (n: number | null | undefined) => (n == null ? '–' : n >= 1000 ? `${(n / 1000).toFixed(2)} s` : `${integer.format(n)} ms`);

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

/** An ISO 8601 time as "YYYY-MM-DD HH:MM[:SS] UTC", or "never". */
export const utcTime = (iso: string | null, seconds = false) => (iso ? `${iso.replace('T', ' ').slice(0, seconds ? 19 : 16)} UTC` : 'never');

/** A time bucket's name (meta.interval: "hour", "6hours", "5minutes") as words: "hour", "6 hours", "5 minutes". */
export const interval = (name: string) => name.replace(/^(\d+)(?=\D)/, '$1 ');
