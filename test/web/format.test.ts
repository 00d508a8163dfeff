/**
 * The dashboard's figures as text (web/src/format.ts): a duration reads in the unit that keeps it
 * short, from a response time to the time spent on a path over a month; a time ago likewise; a
 * chart's axis in compact figures, and its times in UTC and 24 hours whatever the browser's zone;
 * counts with their nouns, singular for one.
 */
// A zone far from UTC (set before any Date is made): labels in the local time would differ.
process.env.TZ = 'America/New_York';
import { describe, expect, it } from 'vitest';
import { ago, compact, counted, ms, utcCell, utcTicks, utcTime } from '../../web/src/format.js';

describe('ms', () => {
  it('writes ms below a second, seconds below a minute, minutes below an hour, then hours', () => {
    expect(ms(null)).toBe('–');
    expect(ms(0)).toBe('0 ms');
    expect(ms(999)).toBe('999 ms');
    expect(ms(1000)).toBe('1.00 s');
    expect(ms(59_994)).toBe('59.99 s');
    expect(ms(60_000)).toBe('1.0 min');
    expect(ms(1_884_000)).toBe('31.4 min');
    expect(ms(3_600_000)).toBe('1.0 h');
    expect(ms(36_180_000_000)).toBe('10,050.0 h');
  });
});

describe('ago', () => {
  it('writes less than a minute, then whole minutes, hours and days', () => {
    expect(ago(0)).toBe('< 1 min ago');
    expect(ago(59.9)).toBe('< 1 min ago');
    expect(ago(60)).toBe('1 min ago');
    expect(ago(3_599)).toBe('59 min ago');
    expect(ago(3_600)).toBe('1 h ago');
    expect(ago(86_399)).toBe('23 h ago');
    expect(ago(86_400 * 1_200)).toBe('1,200 d ago');
  });
});

describe('compact', () => {
  it('writes a figure in at most two decimals of k, M, G or T, never cut by an axis', () => {
    expect(compact(null)).toBe('–');
    expect(compact(0)).toBe('0');
    expect(compact(0.5)).toBe('0.5');
    expect(compact(950)).toBe('950');
    expect(compact(1000)).toBe('1k');
    expect(compact(1500)).toBe('1.5k');
    expect(compact(250_000)).toBe('250k');
    expect(compact(999_999)).toBe('1M');
    expect(compact(1_000_000)).toBe('1M');
    expect(compact(1_500_000)).toBe('1.5M');
    expect(compact(1_250_000)).toBe('1.25M');
    expect(compact(2_000_000_000)).toBe('2G');
    expect(compact(-250_000)).toBe('-250k');
  });
});

describe('utcTicks', () => {
  const at = (iso: string) => Date.parse(iso) / 1000;
  it('writes times in UTC and 24 hours, the date (ISO) under the first and at each new day', () => {
    const splits = ['2026-11-30T20:00:00Z', '2026-11-30T22:00:00Z', '2026-12-01T00:00:00Z', '2026-12-01T02:00:00Z'].map(at);
    expect(utcTicks(splits, 7200)).toEqual(['20:00\n2026-11-30', '22:00', '00:00\n2026-12-01', '02:00']);
  });
  it('writes steps of a day or more as dates', () => {
    expect(utcTicks([at('2026-11-29T00:00:00Z'), at('2026-11-30T00:00:00Z')], 86_400)).toEqual(['2026-11-29', '2026-11-30']);
  });
});

describe('utcTime and utcCell', () => {
  it('write an ISO time to the minute or the second, with UTC or, in a table whose header says it, without', () => {
    const iso = '2026-12-01T08:15:30.123Z';
    expect(utcTime(iso)).toBe('2026-12-01 08:15 UTC');
    expect(utcTime(iso, true)).toBe('2026-12-01 08:15:30 UTC');
    expect(utcCell(iso)).toBe('2026-12-01 08:15');
    expect(utcCell(iso, true)).toBe('2026-12-01 08:15:30');
    expect(utcTime(null)).toBe('never');
    expect(utcCell(null)).toBe('never');
  });
});

describe('counted', () => {
  it('writes a count with its noun, singular for one only, and an irregular plural when given', () => {
    expect(counted(0, 'token')).toBe('0 tokens');
    expect(counted(1, 'token')).toBe('1 token');
    expect(counted(2, 'rule')).toBe('2 rules');
    expect(counted(1204, 'entry', 'entries')).toBe('1,204 entries');
    expect(counted(1, 'entry', 'entries')).toBe('1 entry');
  });
});
