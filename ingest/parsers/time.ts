import { HOUR_MS, DAY_MS } from '../../core/durations.js';
/**
 * Calendar arithmetic for log timestamps: wall-clock fields to epoch milliseconds, and wall-clock
 * times that carry no zone (nginx's error log) to UTC through the IANA zone they were written in.
 */

/** Two ASCII digits at `at` as a number (callers' regexes have already checked they are digits). */
export const d2 = (s: string, at: number) => (s.charCodeAt(at) - 48) * 10 + s.charCodeAt(at + 1) - 48;

// Lines come in time order, so the day of the previous line is almost always the day wanted.
let lastDayKey = -1;
let lastDayMs = 0;

/** Epoch ms of a UTC calendar day, or NaN when the day does not exist (31 Feb, month 13). */
function dayStart(year: number, month0: number, day: number): number {
  const key = (year * 16 + month0) * 32 + day;
  if (key === lastDayKey) return lastDayMs;
  const ms = Date.UTC(year, month0, day);
  if (month0 < 0 || month0 > 11 || day < 1 || new Date(ms).getUTCDate() !== day) return NaN;
  lastDayKey = key;
  lastDayMs = ms;
  return ms;
}

/**
 * Wall-clock fields read as UTC, in epoch ms; NaN when a field is out of range. A second of 60
 * (a leap second as the system clock showed it) counts as the next minute's first second.
 */
export function wallTime(year: number, month0: number, day: number, hour: number, minute: number, second: number): number {
  if (hour > 23 || minute > 59 || second > 60) return NaN;
  return dayStart(year, month0, day) + ((hour * 60 + minute) * 60 + second) * 1000;
}

/** Hours remembered per zone; a year of hourly keys is about 9000. */
const MAX_CACHED_HOURS = 50_000;

interface Zone {
  format: Intl.DateTimeFormat;
  /** Wall-clock hour → offset in ms valid for the whole hour, or NaN when it changes inside it. */
  hours: Map<number, number>;
}

const zones = new Map<string, Zone>();

function zone(timeZone: string): Zone {
  let z = zones.get(timeZone);
  if (z === undefined) {
    // Throws a RangeError for a name that is not an IANA zone.
    const format = new Intl.DateTimeFormat('en-US', {
      timeZone, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric',
    });
    z = { format, hours: new Map() };
    zones.set(timeZone, z);
  }
  return z;
}

/** The zone's offset from UTC in ms at instant `t`. */
function offsetAt(format: Intl.DateTimeFormat, t: number): number {
  const f: Record<string, number> = {};
  for (const { type, value } of format.formatToParts(t)) f[type] = Number(value);
  return Date.UTC(f.year!, f.month! - 1, f.day, f.hour, f.minute, f.second) - Math.floor(t / 1000) * 1000;
}

/**
 * The offset for a wall-clock time, resolved like Temporal's `compatible` disambiguation: in the
 * hour repeated when clocks go back, the earlier instant; in the hour skipped when they go forward,
 * the offset from before the change (02:30 becomes 03:30 summer time). Offsets a day either side
 * bound the candidates, since no zone changes twice within two days.
 */
function resolveOffset(format: Intl.DateTimeFormat, wall: number): number {
  const before = offsetAt(format, wall - DAY_MS);
  const after = offsetAt(format, wall + DAY_MS);
  if (before === after) return before;
  const beforeFits = offsetAt(format, wall - before) === before;
  const afterFits = offsetAt(format, wall - after) === after;
  if (beforeFits && afterFits) return Math.max(before, after);
  return afterFits ? after : before;
}

/**
 * Epoch ms of a wall-clock time (its fields read as UTC, as wallTime gives it) in `timeZone`.
 * Offsets are cached per zone and wall-clock hour: Intl is slow, and an offset changes inside an
 * hour only where a zone shifts by less than one (Lord Howe's 30 minutes), which is resolved per line.
 */
export function zonedWallTimeToEpoch(wall: number, timeZone: string): number {
  if (timeZone === 'UTC') return wall;
  const z = zone(timeZone);
  const hour = Math.floor(wall / HOUR_MS);
  let offset = z.hours.get(hour);
  if (offset === undefined) {
    const start = resolveOffset(z.format, hour * HOUR_MS);
    offset = start === resolveOffset(z.format, hour * HOUR_MS + HOUR_MS - 1) ? start : NaN;
    if (z.hours.size >= MAX_CACHED_HOURS) z.hours.clear();
    z.hours.set(hour, offset);
  }
  return wall - (Number.isNaN(offset) ? resolveOffset(z.format, wall) : offset);
}
