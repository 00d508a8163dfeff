/**
 * The dashboard's figures as text (web/src/format.ts): a duration reads in the unit that keeps it
 * short, from a response time to the time spent on a path over a month; a time ago likewise.
 */
import { describe, expect, it } from 'vitest';
import { ago, ms } from '../web/src/format.js';

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
