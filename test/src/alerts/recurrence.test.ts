/**
 * Weekly maintenance windows of silences (src/alerts/recurrence.ts, issue 30 §4). Every expected
 * instant was computed apart from the module, with GNU date, e.g.
 * `TZ=UTC date -d 'TZ="Europe/Paris" 2026-06-07 02:00'` and `TZ=Europe/Paris date -d '2026-03-29 01:00 UTC'`;
 * the local time each stands for is written beside it.
 */
import { describe, expect, it } from 'vitest';
import { activeAt, nextWindow, recurrenceSchema, windowAround, type Recurrence } from '../../../src/alerts/recurrence.js';

const at = (iso: string) => Date.parse(iso);
const span = (startsAt: string, endsAt: string) => ({ startsAt: at(startsAt), endsAt: at(endsAt) });

/** Each instant with whether the recurrence is active then. */
function expectActivity(r: Recurrence, cases: [iso: string, active: boolean][]) {
  expect(cases.map(([iso]) => [iso, activeAt(r, at(iso))])).toEqual(cases);
}

const sundayNightParis: Recurrence = { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Europe/Paris' };

describe('activeAt and windowAround', () => {
  it('a plain window: from start on a listed weekday, end exclusive (Paris in summer, UTC+2)', () => {
    expectActivity(sundayNightParis, [
      ['2026-06-06T23:59:00Z', false], // Sun 01:59
      ['2026-06-07T00:00:00Z', true], // Sun 02:00
      ['2026-06-07T01:30:00Z', true], // Sun 03:30
      ['2026-06-07T01:59:59Z', true], // Sun 03:59:59
      ['2026-06-07T02:00:00Z', false], // Sun 04:00
      ['2026-06-06T00:30:00Z', false], // Sat 02:30: not a listed day
    ]);
    expect(windowAround(sundayNightParis, at('2026-06-07T01:30:00Z'))).toEqual(span('2026-06-07T00:00:00Z', '2026-06-07T02:00:00Z'));
    expect(windowAround(sundayNightParis, at('2026-06-07T02:00:00Z'))).toBeNull();
  });

  it('a window crossing midnight belongs to the day it started (New York in summer, UTC-4)', () => {
    const weekendNights: Recurrence = { weekdays: ['fri', 'sat'], start: '22:00', end: '06:00', timezone: 'America/New_York' };
    expectActivity(weekendNights, [
      ['2026-06-05T03:00:00Z', false], // Thu 23:00: Thursday is not listed
      ['2026-06-05T09:00:00Z', false], // Fri 05:00: Thursday night is not listed
      ['2026-06-06T01:59:00Z', false], // Fri 21:59
      ['2026-06-06T02:00:00Z', true], // Fri 22:00
      ['2026-06-06T07:00:00Z', true], // Sat 03:00: Friday's window
      ['2026-06-06T10:00:00Z', false], // Sat 06:00
      ['2026-06-07T09:00:00Z', true], // Sun 05:00: Saturday's window
      ['2026-06-08T09:00:00Z', false], // Mon 05:00: Sunday is not listed
    ]);
    expect(windowAround(weekendNights, at('2026-06-06T07:00:00Z'))).toEqual(span('2026-06-06T02:00:00Z', '2026-06-06T10:00:00Z'));
    expect(windowAround(weekendNights, at('2026-06-07T09:00:00Z'))).toEqual(span('2026-06-07T02:00:00Z', '2026-06-07T10:00:00Z'));
  });

  it('spring forward: the skipped hour is never inside, the window lasts 1 real hour (Paris, 2026-03-29)', () => {
    expectActivity(sundayNightParis, [
      ['2026-03-29T00:59:00Z', false], // 01:59 CET
      ['2026-03-29T01:00:00Z', true], // 03:00 CEST, the first instant after the gap
      ['2026-03-29T01:59:00Z', true], // 03:59 CEST
      ['2026-03-29T02:00:00Z', false], // 04:00 CEST
    ]);
    expect(windowAround(sundayNightParis, at('2026-03-29T01:30:00Z'))).toEqual(span('2026-03-29T01:00:00Z', '2026-03-29T02:00:00Z'));
  });

  it('spring forward: a start inside the gap begins when the clock jumps past it (Paris, 02:30–04:00)', () => {
    const fromHalfPast: Recurrence = { ...sundayNightParis, start: '02:30' };
    expect(activeAt(fromHalfPast, at('2026-03-29T00:59:00Z'))).toBe(false); // 01:59 CET
    expect(windowAround(fromHalfPast, at('2026-03-29T01:00:00Z'))).toEqual(span('2026-03-29T01:00:00Z', '2026-03-29T02:00:00Z')); // 03:00 CEST
  });

  it('fall back: the repeated hour is inside twice, the window lasts 3 real hours (Paris, 2026-10-25)', () => {
    expectActivity(sundayNightParis, [
      ['2026-10-24T23:59:00Z', false], // 01:59 CEST
      ['2026-10-25T00:00:00Z', true], // 02:00 CEST
      ['2026-10-25T01:00:00Z', true], // 02:00 CET, the second time
      ['2026-10-25T02:59:00Z', true], // 03:59 CET
      ['2026-10-25T03:00:00Z', false], // 04:00 CET
    ]);
    const window = span('2026-10-25T00:00:00Z', '2026-10-25T03:00:00Z');
    expect(windowAround(sundayNightParis, at('2026-10-25T00:30:00Z'))).toEqual(window);
    expect(windowAround(sundayNightParis, at('2026-10-25T01:30:00Z'))).toEqual(window);
    expect(window.endsAt - window.startsAt).toBe(3 * 3_600_000);
  });

  it('fall back: an end inside the repeated hour is its second passing (Paris, 01:00–02:30)', () => {
    const untilHalfPast: Recurrence = { ...sundayNightParis, start: '01:00', end: '02:30' };
    expectActivity(untilHalfPast, [
      ['2026-10-24T23:00:00Z', true], // 01:00 CEST
      ['2026-10-25T00:29:00Z', true], // 02:29 CEST
      ['2026-10-25T00:30:00Z', false], // 02:30 CEST: on the wall clock, past the end...
      ['2026-10-25T01:00:00Z', true], // 02:00 CET: ...and before it again
      ['2026-10-25T01:30:00Z', false], // 02:30 CET
    ]);
    expect(windowAround(untilHalfPast, at('2026-10-25T01:00:00Z'))).toEqual(span('2026-10-24T23:00:00Z', '2026-10-25T01:30:00Z'));
  });

  it('a window crossing midnight over spring forward (New York, Sat 2026-03-07 into Sun 03-08)', () => {
    const saturdayNight: Recurrence = { weekdays: ['sat'], start: '23:00', end: '03:00', timezone: 'America/New_York' };
    expectActivity(saturdayNight, [
      ['2026-03-08T03:59:00Z', false], // Sat 22:59 EST
      ['2026-03-08T04:00:00Z', true], // Sat 23:00 EST
      ['2026-03-08T06:59:00Z', true], // Sun 01:59 EST, Saturday's window
      ['2026-03-08T07:00:00Z', false], // Sun 03:00 EDT: the clock jumped to the end
    ]);
    expect(windowAround(saturdayNight, at('2026-03-08T06:00:00Z'))).toEqual(span('2026-03-08T04:00:00Z', '2026-03-08T07:00:00Z'));
    // An end inside the skipped hour (02:30) is reached at the jump too.
    const untilHalfPast: Recurrence = { ...saturdayNight, end: '02:30' };
    expect(activeAt(untilHalfPast, at('2026-03-08T06:59:00Z'))).toBe(true); // Sun 01:59 EST
    expect(windowAround(untilHalfPast, at('2026-03-08T05:00:00Z'))).toEqual(span('2026-03-08T04:00:00Z', '2026-03-08T07:00:00Z'));
  });

  it('end 24:00 is the end of the day, in UTC too', () => {
    const sundays: Recurrence = { weekdays: ['sun'], start: '00:00', end: '24:00', timezone: 'UTC' };
    expectActivity(sundays, [
      ['2026-06-06T23:59:59Z', false], // Sat
      ['2026-06-07T00:00:00Z', true], // Sun
      ['2026-06-07T23:59:59Z', true],
      ['2026-06-08T00:00:00Z', false], // Mon
    ]);
    expect(windowAround(sundays, at('2026-06-07T12:00:00Z'))).toEqual(span('2026-06-07T00:00:00Z', '2026-06-08T00:00:00Z'));
  });
});

describe('nextWindow', () => {
  it('from outside a window: the next start, later the same day or days ahead', () => {
    const weekendNights: Recurrence = { weekdays: ['fri', 'sat'], start: '22:00', end: '06:00', timezone: 'America/New_York' };
    // Wed 2026-06-03 12:00 EDT: Friday 22:00 EDT to Saturday 06:00 EDT.
    expect(nextWindow(weekendNights, at('2026-06-03T16:00:00Z'))).toEqual(span('2026-06-06T02:00:00Z', '2026-06-06T10:00:00Z'));
    // Sat 2026-06-06 12:00 EDT, between the two: Saturday's, that evening.
    expect(nextWindow(weekendNights, at('2026-06-06T16:00:00Z'))).toEqual(span('2026-06-07T02:00:00Z', '2026-06-07T10:00:00Z'));
    // Sun 2026-06-07 12:00 EDT, past both: next Friday 2026-06-12 22:00 EDT.
    expect(nextWindow(weekendNights, at('2026-06-07T16:00:00Z'))).toEqual(span('2026-06-13T02:00:00Z', '2026-06-13T10:00:00Z'));
  });

  it('from inside a window, or at its start: the one after it', () => {
    // Sun 2026-06-07 03:00 CEST, inside; the next is 2026-06-14 02:00–04:00 CEST.
    const next = span('2026-06-14T00:00:00Z', '2026-06-14T02:00:00Z');
    expect(nextWindow(sundayNightParis, at('2026-06-07T01:00:00Z'))).toEqual(next);
    expect(nextWindow(sundayNightParis, at('2026-06-07T00:00:00Z'))).toEqual(next);
    // Over the clock change: from Sun 2026-03-22 03:00 CET, the short window of 2026-03-29.
    expect(nextWindow(sundayNightParis, at('2026-03-22T02:00:00Z'))).toEqual(span('2026-03-29T01:00:00Z', '2026-03-29T02:00:00Z'));
  });
});

describe('recurrenceSchema', () => {
  const valid = { weekdays: ['sun'], start: '02:00', end: '04:00', timezone: 'Europe/Paris' };

  /** The issues of a body that should be refused, as path → message. */
  function issuesOf(body: unknown): Record<string, string> {
    const result = recurrenceSchema.safeParse(body);
    expect(result.success).toBe(false);
    return Object.fromEntries((result.error?.issues ?? []).map((issue) => [issue.path.join('.'), issue.message]));
  }

  it('accepts a recurrence, UTC, end 24:00 and a window crossing midnight', () => {
    expect(recurrenceSchema.parse(valid)).toEqual(valid);
    for (const body of [
      { ...valid, timezone: 'UTC' },
      { ...valid, start: '00:00', end: '24:00' },
      { weekdays: ['mon', 'tue', 'wed', 'thu', 'fri', 'sat', 'sun'], start: '23:59', end: '00:00', timezone: 'America/New_York' },
    ]) {
      expect(recurrenceSchema.safeParse(body).success, JSON.stringify(body)).toBe(true);
    }
  });

  it('refuses each bad field with an issue at its path', () => {
    expect(issuesOf({ ...valid, weekdays: ['sun', 'sunday'] })).toEqual({ 'weekdays.1': 'must be one of mon, tue, wed, thu, fri, sat, sun' });
    expect(issuesOf({ ...valid, weekdays: [] })).toEqual({ weekdays: 'must list at least one weekday' });
    expect(issuesOf({ ...valid, weekdays: ['sat', 'sun', 'sat'] })).toEqual({ 'weekdays.2': 'must list each weekday once (sat is repeated)' });
    expect(issuesOf({ ...valid, start: '25:00' })).toEqual({ start: 'must be a time HH:MM from 00:00 to 23:59' });
    expect(issuesOf({ ...valid, start: '24:00' })).toEqual({ start: 'must be a time HH:MM from 00:00 to 23:59' });
    expect(issuesOf({ ...valid, start: '9:00' })).toEqual({ start: 'must be a time HH:MM from 00:00 to 23:59' });
    expect(issuesOf({ ...valid, end: '24:01' })).toEqual({ end: 'must be a time HH:MM from 00:00 to 24:00' });
    expect(issuesOf({ ...valid, end: '04:60' })).toEqual({ end: 'must be a time HH:MM from 00:00 to 24:00' });
    expect(issuesOf({ ...valid, end: '02:00' })).toEqual({ end: 'must differ from start' });
    expect(issuesOf({ ...valid, timezone: 'Mars/Olympus' })).toEqual({ timezone: 'must be an IANA time zone such as Europe/Paris' });
    expect(issuesOf({ ...valid, timezone: '' })).toEqual({ timezone: 'must be an IANA time zone such as Europe/Paris' });
  });

  it('refuses an unknown field', () => {
    const result = recurrenceSchema.safeParse({ ...valid, until: '2026-12-31' });
    expect(result.success).toBe(false);
    expect(result.error?.issues).toMatchObject([{ code: 'unrecognized_keys', keys: ['until'], path: [] }]);
  });
});
