/**
 * What the alerts pages share: the conditions an alert may watch (with the unit of their
 * threshold) and how a value or a rule reads.
 */
import type { Alert, FilterTuple, Silence } from './data/types.js';
import { bytes, count, ms, percent } from './format.js';

type Unit = 'fraction' | 'count' | 'bytes' | 'ms' | 'change';

/** Every condition the API takes, in the order the form offers them; `requestCount` is the specification's name for `requests`. */
export const CONDITIONS: { value: string; label: string; unit: Unit; hint: string }[] = [
  { value: 'errorRate', label: 'Error rate (5xx share)', unit: 'fraction', hint: 'A fraction from 0 to 1: 0.05 is 5 % of the requests.' },
  { value: 'clientErrorRate', label: 'Client error rate (4xx share)', unit: 'fraction', hint: 'A fraction from 0 to 1: 0.2 is 20 % of the requests.' },
  { value: 'requests', label: 'Requests', unit: 'count', hint: 'A number of requests in the window.' },
  { value: 'requestCount', label: 'Requests (requestCount)', unit: 'count', hint: 'A number of requests in the window.' },
  { value: 'requestChange', label: 'Requests against a week ago', unit: 'change', hint: 'A relative change against the same window 7 days earlier: -0.7 is 70 % fewer requests, -1 no traffic at all.' },
  { value: 'bandwidth', label: 'Bandwidth', unit: 'bytes', hint: 'Bytes sent in the window: 1000000000 is 1 GB.' },
  { value: 'visitors', label: 'Visitors', unit: 'count', hint: 'A number of distinct visitors in the window.' },
  { value: 'averageResponseTime', label: 'Average response time', unit: 'ms', hint: 'Milliseconds, from 0 to 3600000.' },
  { value: 'p50ResponseTime', label: 'Median (p50) response time', unit: 'ms', hint: 'Milliseconds, from 0 to 3600000.' },
  { value: 'p95ResponseTime', label: 'p95 response time', unit: 'ms', hint: 'Milliseconds, from 0 to 3600000.' },
  { value: 'p99ResponseTime', label: 'p99 response time', unit: 'ms', hint: 'Milliseconds, from 0 to 3600000.' },
  { value: 'maxResponseTime', label: 'Slowest response time', unit: 'ms', hint: 'Milliseconds, from 0 to 3600000.' },
];
const BY_VALUE = new Map(CONDITIONS.map((c) => [c.value, c]));

export const conditionOf = (value: string) => BY_VALUE.get(value);

export const OPERATORS: Record<string, string> = { greaterThan: '>', greaterThanOrEqual: '≥', lessThan: '<', lessThanOrEqual: '≤' };

/** A value of `condition` as the dashboard shows it (a rate as a percentage, a time in ms…). */
export function conditionValue(condition: string | undefined, value: number | null): string {
  if (value == null) return '–';
  switch (condition === undefined ? undefined : BY_VALUE.get(condition)?.unit) {
    case 'fraction':
      return percent(value);
    case 'change':
      return `${value > 0 ? '+' : value < 0 ? '−' : ''}${Math.abs(value * 100).toFixed(1)} %`;
    case 'ms':
      return ms(value);
    case 'bytes':
      return bytes(value);
    case 'count':
      return count(value);
    default:
      return String(Number(value.toPrecision(6)));
  }
}

/** Seconds as "90 s", "5 min", "2 h", "1 day". */
export function span(seconds: number): string {
  if (seconds % 86_400 === 0) return `${seconds / 86_400} ${seconds === 86_400 ? 'day' : 'days'}`;
  if (seconds % 3600 === 0) return `${seconds / 3600} h`;
  if (seconds % 60 === 0) return `${seconds / 60} min`;
  return `${seconds} s`;
}

/** The path glob of an alert's filters, when it has exactly one (what the form edits). */
export function pathGlobOf(filters: readonly FilterTuple[]): string {
  const glob = filters.find((f) => f[0] === 'glob' && f[1] === 'path' && f[2].length === 1 && typeof f[2][0] === 'string');
  return glob ? String(glob[2][0]) : '';
}

/** The filters with the path glob replaced by `glob` (none when empty); the others kept as they are. */
export function withPathGlob(filters: readonly FilterTuple[], glob: string): FilterTuple[] {
  const current = pathGlobOf(filters);
  const others = current === '' ? [...filters] : filters.filter((f) => !(f[0] === 'glob' && f[1] === 'path' && f[2][0] === current));
  return glob.trim() === '' ? others : [...others, ['glob', 'path', [glob.trim()]]];
}

/** An alert's rule in words: "Error rate > 5.00 % over 5 min, on paths /checkout*". */
export function ruleText(alert: Pick<Alert, 'condition' | 'operator' | 'threshold' | 'duration' | 'filters'>): string {
  const label = BY_VALUE.get(alert.condition)?.label ?? alert.condition;
  let text = `${label} ${OPERATORS[alert.operator] ?? alert.operator} ${conditionValue(alert.condition, alert.threshold)} over ${span(alert.duration)}`;
  const glob = pathGlobOf(alert.filters);
  if (glob) text += `, on paths ${glob}`;
  const others = withPathGlob(alert.filters, '');
  if (others.length > 0) text += `, where ${others.map((f) => `${f[1]} ${f[0]} ${f[2].map(String).join(' or ')}`).join(' and ')}`;
  return text;
}

/** When a silence holds notifications: its window, or its weekly recurrence. */
export function silenceWhen(s: Silence, utcTime: (iso: string | null) => string): string {
  if (s.recurrence) {
    const r = s.recurrence;
    const day = (d: string) => `${d.charAt(0).toUpperCase()}${d.slice(1)}`;
    return `Every ${r.weekdays.map(day).join(', ')} ${r.start}–${r.end} (${r.timezone})`;
  }
  return `${s.startsAt ? utcTime(s.startsAt) : 'now'} to ${utcTime(s.endedAt ?? s.endsAt)}`;
}

/** Whether a silence covers the domain `domainId`. */
export const silenceCovers = (s: Silence, domainId: number) => s.domainIds === 'all' || s.domainIds.includes(domainId);

/** The weekdays a weekly silence may name (src/alerts/recurrence.ts), Monday first, with their labels. */
export const WEEKDAYS = [
  { value: 'mon', label: 'Mon' },
  { value: 'tue', label: 'Tue' },
  { value: 'wed', label: 'Wed' },
  { value: 'thu', label: 'Thu' },
  { value: 'fri', label: 'Fri' },
  { value: 'sat', label: 'Sat' },
  { value: 'sun', label: 'Sun' },
] as const;

/** The browser's time zone, an IANA name ("UTC" when it cannot say). */
export function browserTimeZone(): string {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';
  } catch {
    return 'UTC';
  }
}

/** The time zones a weekly silence may be given: the browser's list, with `current` and UTC in it. */
export function timeZoneOptions(current: string): string[] {
  let zones: string[] = [];
  try {
    zones = Intl.supportedValuesOf('timeZone');
  } catch {
    // An older browser: the current zone and UTC only.
  }
  const missing = [current, 'UTC'].filter((z) => !zones.includes(z));
  return missing.length === 0 ? zones : [...zones, ...missing].sort();
}

/**
 * The API's message on a `recurrence` (422 details) split by the part it is about: "timezone: must
 * be …" is the time zone's, "weekdays[1]: …" the weekdays'; a message about none (the recurrence as
 * a whole) is `whole`'s.
 */
export function recurrenceError(message: string | undefined): { part: 'weekdays' | 'start' | 'end' | 'timezone' | 'whole'; message: string } | null {
  if (!message) return null;
  const match = /^(weekdays|start|end|timezone)(?:\[\d+\])?: (.*)$/s.exec(message);
  return match ? { part: match[1] as 'weekdays' | 'start' | 'end' | 'timezone', message: match[2]! } : { part: 'whole', message };
}
