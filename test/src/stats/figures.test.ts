/**
 * The figures of top lists (src/stats/figures.ts): when a list of candidates is proven, and how the
 * counts of two parts combine into exact counts and bounds.
 */
import { describe, expect, it } from 'vitest';
import { countsOverBoth, provenTop, topProven } from '../../../src/stats/figures.js';

describe('figures of top lists', () => {
  it('provenTop: a list is proven only when no key outside the candidates can reach the 10th count', () => {
    const proposed = (counts: number[]) => counts.map((n, i) => ({ key: `/k${String(i).padStart(2, '0')}`, proposed: n, edge: 0, listedIn: 0 }));
    const exactAsProposed = (list: { key: string; proposed: number }[]) => new Map(list.map((c) => [c.key, c.proposed]));
    // 31 proposals: the 31st (20) plus the thresholds (9) stays below the 10th count (30): proven.
    const many = proposed([...Array.from({ length: 10 }, (_, i) => 100 - i * 7), ...Array.from({ length: 21 }, () => 20)]);
    expect(provenTop({ proposed: many, threshold: 9 }, exactAsProposed(many), false)?.map((e) => e.count)).toEqual(Array.from({ length: 10 }, (_, i) => 100 - i * 7));
    // Equal to it: an outside key could tie with the 10th and come first by its name. Not proven.
    const tenth = 100 - 9 * 7;
    expect(provenTop({ proposed: many, threshold: tenth - 20 }, exactAsProposed(many), false)).toBeNull();
    // The exact counts (day rows plus edge) decide, not the proposals.
    const edged = many.map((c, i) => (i === 30 ? c : { ...c, edge: 1 }));
    expect(provenTop({ proposed: edged, threshold: 9 }, exactAsProposed(many), false)?.[0]).toEqual({ key: '/k00', count: 101 });
    // Fewer than 10 keys: proven only when nothing can lie outside (no threshold, no 31st key).
    const few = proposed([5, 4, 3]);
    expect(provenTop({ proposed: few, threshold: 0 }, exactAsProposed(few), false)?.map((e) => e.key)).toEqual(['/k00', '/k01', '/k02']);
    expect(provenTop({ proposed: few, threshold: 1 }, exactAsProposed(few), false)).toBeNull();
    // Status codes order as numbers among equal counts.
    const codes = [500, 404, 1000].map((code) => ({ key: String(code), proposed: 3, edge: 0, listedIn: 0 }));
    expect(provenTop({ proposed: codes, threshold: 0 }, exactAsProposed(codes), true)?.map((e) => e.key)).toEqual(['404', '500', '1000']);
  });

  it('countsOverBoth: a key is exact where each part knows it or has no other key; the rest are bounded', () => {
    const kept = { exact: [{ key: '/a', count: 50 }, { key: '/b', count: 40 }], bound: 30 };
    const ends = { exact: [{ key: '/b', count: 5 }, { key: '/c', count: 4 }], bound: 0 };
    // /b is known on both sides; /a has no other row at the ends (their bound is 0); /c may have up to 30 kept.
    expect(countsOverBoth(kept, ends)).toEqual({ exact: [{ key: '/a', count: 50 }, { key: '/b', count: 45 }], bound: 34 });
    expect(countsOverBoth(ends, { exact: [], bound: 0 })).toEqual({ exact: ends.exact, bound: 0 });
    // Both bounded: a key known on one side only is bounded by its count there plus the other's bound.
    expect(countsOverBoth({ exact: [{ key: '/a', count: 9 }], bound: 2 }, { exact: [{ key: '/z', count: 8 }], bound: 3 })).toEqual({ exact: [], bound: 12 });
    // And the top list is proven only above every bound.
    expect(topProven(countsOverBoth(kept, ends), false)).toBeNull();
  });
});
