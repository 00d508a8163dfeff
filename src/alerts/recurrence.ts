import { z } from '@hono/zod-openapi';
import { MINUTE_MS, DAY_MS } from '../../core/durations.js';

/**
 * Weekly maintenance windows of alert silences (issue 30 §4): on the listed weekdays, from `start`
 * to `end` on the wall clock of `timezone`. A window whose end is before its start crosses
 * midnight and ends the next day. Pure: every answer depends only on the recurrence and the instant.
 */

export const WEEKDAYS = ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'] as const;
export type Weekday = (typeof WEEKDAYS)[number];

const HH_MM = /^([01]\d|2[0-3]):[0-5]\d$/;

/** Intl knows the IANA names (and 'UTC'); it is the same engine that later reads the wall clock. */
function isTimeZone(name: string): boolean {
  try {
    new Intl.DateTimeFormat('en', { timeZone: name });
    return true;
  } catch {
    return false;
  }
}

const startMessage = 'must be a time HH:MM from 00:00 to 23:59';
const endMessage = 'must be a time HH:MM from 00:00 to 24:00';
const weekdaysMessage = `must be one of ${WEEKDAYS.join(', ')}`;
const timeZoneMessage = 'must be an IANA time zone such as Europe/Paris';

export const recurrenceSchema = z
  .strictObject({
    weekdays: z
      .array(z.enum(WEEKDAYS, { message: weekdaysMessage }), { message: `must be a list of weekdays, each ${weekdaysMessage}` })
      .min(1, { message: 'must list at least one weekday' })
      .superRefine((days, ctx) => {
        days.forEach((day, i) => {
          if (days.indexOf(day) !== i) ctx.addIssue({ code: 'custom', path: [i], message: `must list each weekday once (${day} is repeated)` });
        });
      }),
    start: z.string({ message: startMessage }).regex(HH_MM, { message: startMessage }),
    end: z.string({ message: endMessage }).refine((t) => t === '24:00' || HH_MM.test(t), { message: endMessage }),
    timezone: z.string({ message: timeZoneMessage }).refine(isTimeZone, { message: timeZoneMessage }),
  })
  .refine((r) => r.start !== r.end, { path: ['end'], message: 'must differ from start' })
  .openapi('SilenceRecurrence', {
    description:
      'A weekly window on the wall clock of `timezone`: from `start` on each listed weekday to `end` (exclusive); an `end` before `start` crosses midnight and ends the next day',
    example: { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Europe/Paris' },
  });

export type Recurrence = z.infer<typeof recurrenceSchema>;

/** An interval of real time, epoch ms, end exclusive. */
export interface Window {
  startsAt: number;
  endsAt: number;
}

/** One formatter per zone: building one costs far more than formatting with it. */
const formatters = new Map<string, Intl.DateTimeFormat>();

function formatterOf(timeZone: string): Intl.DateTimeFormat {
  let formatter = formatters.get(timeZone);
  if (!formatter) {
    formatter = new Intl.DateTimeFormat('en-US', {
      timeZone,
      year: 'numeric',
      month: '2-digit',
      day: '2-digit',
      hour: '2-digit',
      minute: '2-digit',
      hourCycle: 'h23',
    });
    formatters.set(timeZone, formatter);
  }
  return formatter;
}

/**
 * The wall clock of the zone at an instant, to the minute, written as if it were a UTC instant
 * ("wall ms"): calendar arithmetic on it (a day before, 02:00 of that day) is then plain arithmetic.
 */
function wallClock(timeZone: string, atMs: number): number {
  const part: Record<string, number> = {};
  for (const { type, value } of formatterOf(timeZone).formatToParts(atMs)) part[type] = Number(value);
  return Date.UTC(part.year!, part.month! - 1, part.day!, part.hour!, part.minute!);
}

/** The zone's offset from UTC at an instant (wall ms minus real ms). */
const offsetAt = (timeZone: string, atMs: number) => wallClock(timeZone, atMs) - Math.floor(atMs / MINUTE_MS) * MINUTE_MS;

/**
 * The real instant of a wall time. The offsets a day before and a day after bracket any change
 * near it (zones change at most once in two days): a wall time that each maps back to itself under
 * two offsets happened twice (fall back), one that neither does never happened (spring forward).
 * - twice: the earlier instant for a start, the later for an end, so the window covers both;
 * - never: the first instant after the gap, i.e. the first minute whose wall clock has reached the
 *   wall time, which is when `activeAt` turns (searched by halves: the gap is at most a few hours).
 */
function instantOf(timeZone: string, wallMs: number, ambiguous: 'earlier' | 'later'): number {
  const before = wallMs - offsetAt(timeZone, wallMs - DAY_MS);
  const after = wallMs - offsetAt(timeZone, wallMs + DAY_MS);
  const real = [before, after].filter((at) => wallClock(timeZone, at) === wallMs);
  if (real.length > 0) return ambiguous === 'earlier' ? Math.min(...real) : Math.max(...real);
  // In a gap the clock moved forward, so the offset grew: `after` is before the gap's end, `before` after it.
  let reached = before;
  let notYet = after;
  while (reached - notYet > MINUTE_MS) {
    const middle = notYet + Math.floor((reached - notYet) / 2 / MINUTE_MS) * MINUTE_MS;
    if (wallClock(timeZone, middle) >= wallMs) reached = middle;
    else notYet = middle;
  }
  return reached;
}

const minutesOf = (hhmm: string) => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5));

/** Monday first, as in WEEKDAYS; 1970-01-01 (wall ms 0) was a Thursday. */
const weekdayOf = (wallMs: number): Weekday => WEEKDAYS[(Math.floor(wallMs / DAY_MS) + 3) % 7]!;

/** The wall ms of the local midnight that starts the window containing atMs, or null. */
function windowDayAt(r: Recurrence, atMs: number): number | null {
  const wall = wallClock(r.timezone, atMs);
  const today = Math.floor(wall / DAY_MS) * DAY_MS;
  const minute = (wall - today) / MINUTE_MS;
  const start = minutesOf(r.start);
  const end = minutesOf(r.end);
  const listed = (day: number) => r.weekdays.includes(weekdayOf(day));
  if (start < end) return listed(today) && minute >= start && minute < end ? today : null;
  if (listed(today) && minute >= start) return today;
  // Crossing midnight: the small hours belong to the window that started the evening before.
  if (listed(today - DAY_MS) && minute < end) return today - DAY_MS;
  return null;
}

/** The real start and end of the window that starts on the local day at wall ms `day`. */
function windowOn(r: Recurrence, day: number): Window {
  const start = minutesOf(r.start);
  const end = minutesOf(r.end);
  const endDay = end < start ? day + DAY_MS : day;
  return {
    startsAt: instantOf(r.timezone, day + start * MINUTE_MS, 'earlier'),
    endsAt: instantOf(r.timezone, endDay + end * MINUTE_MS, 'later'),
  };
}

/**
 * Whether the instant is inside a window, judged on the zone's wall clock: local times that a
 * change of clocks skips are never in it, local times it repeats are in it twice.
 */
export function activeAt(r: Recurrence, atMs: number): boolean {
  return windowDayAt(r, atMs) !== null;
}

/** The window the instant is in (for "silenced until …"), or null when it is in none. */
export function windowAround(r: Recurrence, atMs: number): Window | null {
  const day = windowDayAt(r, atMs);
  return day === null ? null : windowOn(r, day);
}

/** The first window that starts after the instant (strictly): from inside one, the one after it. */
export function nextWindow(r: Recurrence, atMs: number): Window {
  const today = Math.floor(wallClock(r.timezone, atMs) / DAY_MS) * DAY_MS;
  // Today's window may have started already; the same weekday a week later has not.
  for (let day = today; day <= today + 7 * DAY_MS; day += DAY_MS) {
    if (!r.weekdays.includes(weekdayOf(day))) continue;
    const window = windowOn(r, day);
    if (window.startsAt > atMs) return window;
  }
  throw new Error('a recurrence lists at least one weekday (recurrenceSchema)');
}
