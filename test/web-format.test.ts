/**
 * The dashboard's figures as text (web/src/format.ts): a duration reads in the unit that keeps it
 * short, from a response time to the time spent on a path over a month.
 */
import { describe, expect, it } from 'vitest';
import { ms } from '../web/src/format.js';

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
