/**
 * The plan of a window (src/rollups/plan.ts): which days and hours are read from the rollups and
 * which raw, for any build state, and how far a plan walks (the counted hours only).
 */
import { describe, expect, it } from 'vitest';
import { emptyBuildState, planWindow, windowBuckets } from '../../../src/rollups/plan.js';
import { prng } from '../../support/random.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';

describe('planWindow and windowBuckets', () => {
  it('windowBuckets: days inside, whole hours around them, partial hours at the ends', () => {
    expect(windowBuckets(Date.UTC(2026, 0, 1, 10, 30), Date.UTC(2026, 0, 8, 5, 15))).toEqual({
      hourFrom: Date.UTC(2026, 0, 1, 11),
      dayFrom: Date.UTC(2026, 0, 2),
      dayTo: Date.UTC(2026, 0, 8),
      hourTo: Date.UTC(2026, 0, 8, 5),
    });
    // No whole day: hours only.
    expect(windowBuckets(Date.UTC(2026, 0, 1, 10, 30), Date.UTC(2026, 0, 2, 9, 30))).toEqual({
      hourFrom: Date.UTC(2026, 0, 1, 11),
      dayFrom: Date.UTC(2026, 0, 2, 9),
      dayTo: Date.UTC(2026, 0, 2, 9),
      hourTo: Date.UTC(2026, 0, 2, 9),
    });
    // No whole hour: nothing.
    const start = Date.UTC(2026, 0, 1, 10, 30);
    expect(windowBuckets(start, Date.UTC(2026, 0, 1, 10, 59))).toEqual({ hourFrom: start, dayFrom: start, dayTo: start, hourTo: start });
  });

  it('planWindow: built days and hours from the rollups, unbuilt ones and the ends raw, adjacent raw ranges joined', () => {
    const h = (day: number, hour: number) => Date.UTC(2026, 0, day, hour);
    const start = Date.UTC(2026, 0, 1, 22, 30);
    const end = Date.UTC(2026, 0, 4, 1, 15);
    const state = emptyBuildState();
    for (let t0 = h(1, 23); t0 < h(4, 1); t0 += HOUR_MS) {
      state.counted.set(t0, 10);
      state.builtHours.set(t0, 10);
    }
    state.builtDays.set(h(2, 0), 240); // Jan 2 built as a day
    state.builtDays.set(h(3, 0), 200); // Jan 3's day is stale: its hours are used …
    state.builtHours.set(h(3, 5), 9); // … except 05:00, which is not built again yet, and is raw
    state.counted.set(h(3, 7), 0); // no rows: neither read nor raw
    state.builtHours.delete(h(1, 23)); // not built: raw, joined with the start's partial hour
    const plan = planWindow(start, end, state);
    expect(plan.days).toEqual([h(2, 0)]);
    expect(plan.hours).toEqual(Array.from({ length: 24 }, (_, i) => h(3, i)).filter((x) => x !== h(3, 5) && x !== h(3, 7)).concat([h(4, 0)]));
    expect(plan.raw).toEqual([
      [start, h(2, 0)],
      [h(3, 5), h(3, 6)],
      [h(4, 1), end + 1],
    ]);
    // A bucket's short top lists are used only when they were built with its current total.
    expect(plan.listed).toEqual([]);
    state.topsDays.set(h(2, 0), 239);
    state.topsHours.set(h(3, 4), 10);
    state.topsHours.set(h(3, 5), 10); // not built again yet: raw, whatever its lists say
    state.topsHours.set(h(3, 6), 9);
    expect(planWindow(start, end, state).listed).toEqual([{ span: 'hour', start: h(3, 4), version: 10 }]);
    state.topsDays.set(h(2, 0), 240);
    expect(planWindow(start, end, state).listed).toEqual([
      { span: 'day', start: h(2, 0), version: 240 },
      { span: 'hour', start: h(3, 4), version: 10 },
    ]);
    // Without a state, or with more raw ranges than a query should carry, the whole window is raw.
    expect(planWindow(start, end, null)).toEqual({ start, end, days: [], hours: [], raw: [[start, end + 1]], listed: [] });
    const patchy = emptyBuildState();
    for (let t0 = h(1, 0); t0 < h(6, 0); t0 += HOUR_MS) {
      patchy.counted.set(t0, 1);
      if (t0 % (2 * HOUR_MS) === 0) patchy.builtHours.set(t0, 1);
    }
    expect(planWindow(h(1, 0) - 5, h(6, 0) + 5, patchy).raw).toEqual([[h(1, 0) - 5, h(6, 0) + 6]]);
  });

  it('planWindow visits the counted hours only, however far the window reaches (1970 to 2106: a million hours)', () => {
    // Maps that count their lookups: a plan of the widest window over three days of rows must not
    // look at every hour of it (1.2 million lookups and about 100 ms of one request's own CPU before).
    let lookups = 0;
    class CountingMap extends Map<number, number> {
      override get(key: number) {
        lookups++;
        return super.get(key);
      }
    }
    const state = { counted: new CountingMap(), builtHours: new CountingMap(), builtDays: new CountingMap(), topsHours: new CountingMap(), topsDays: new CountingMap() };
    const day = Date.UTC(2026, 0, 10);
    for (let h = day - 5 * HOUR_MS; h < day + 2 * DAY_MS + 3 * HOUR_MS; h += HOUR_MS) {
      state.counted.set(h, 7);
      state.builtHours.set(h, 7);
    }
    state.builtDays.set(day, 7 * 24);
    state.counted.set(day + 30 * HOUR_MS, 0);
    state.builtHours.set(day + 31 * HOUR_MS, 6); // counted 7: raw
    const start = Date.UTC(1970, 0, 1);
    const end = Date.UTC(2106, 1, 6, 23, 59, 59, 999);
    const plan = planWindow(start, end, state);
    expect(lookups).toBeLessThan(10 * state.counted.size);
    expect(plan.days).toEqual([day]);
    expect(plan.hours).toEqual([
      ...Array.from({ length: 5 }, (_, i) => day - (5 - i) * HOUR_MS),
      ...Array.from({ length: 27 }, (_, i) => day + DAY_MS + i * HOUR_MS).filter((h) => h !== day + 30 * HOUR_MS && h !== day + 31 * HOUR_MS),
    ]);
    expect(plan.raw).toEqual([
      [start, start],
      [day + 31 * HOUR_MS, day + 32 * HOUR_MS],
      [Date.UTC(2106, 1, 6, 23), end + 1],
    ].filter(([a, b]) => a! < b!));
  });

  it('planWindow plans as an hour-by-hour walk of the window does, for any build state', () => {
    // The reference: every hour and day of the window in turn, as planWindow did before it visited counted hours only.
    const walk = (start: number, end: number, state: ReturnType<typeof emptyBuildState>) => {
      const b = windowBuckets(start, end);
      const raw: [number, number][] = [];
      const addRaw = (from: number, to: number) => {
        if (from >= to) return;
        const last = raw[raw.length - 1];
        if (last && last[1] === from) last[1] = to;
        else raw.push([from, to]);
      };
      const days: number[] = [];
      const hours: number[] = [];
      const hour = (h: number) => {
        const counted = state.counted.get(h) ?? 0;
        if (counted === 0) return;
        if (state.builtHours.get(h) === counted) hours.push(h);
        else addRaw(h, h + HOUR_MS);
      };
      addRaw(start, b.hourFrom);
      for (let h = b.hourFrom; h < b.dayFrom; h += HOUR_MS) hour(h);
      for (let d = b.dayFrom; d < b.dayTo; d += DAY_MS) {
        let counted = 0;
        for (let h = d; h < d + DAY_MS; h += HOUR_MS) counted += state.counted.get(h) ?? 0;
        if (counted === 0) continue;
        if (state.builtDays.get(d) === counted) days.push(d);
        else for (let h = d; h < d + DAY_MS; h += HOUR_MS) hour(h);
      }
      for (let h = b.dayTo; h < b.hourTo; h += HOUR_MS) hour(h);
      addRaw(b.hourTo, end + 1);
      return { days, hours, raw };
    };
    const random = prng(1313);
    const base = Date.UTC(2026, 2, 1);
    for (let run = 0; run < 300; run++) {
      const state = emptyBuildState();
      for (let h = base - 2 * DAY_MS; h < base + 6 * DAY_MS; h += HOUR_MS) {
        const r = random();
        if (r < 0.4) continue;
        const n = r < 0.45 ? 0 : 1 + Math.floor(random() * 5);
        state.counted.set(h, n);
        if (random() < 0.8) state.builtHours.set(h, random() < 0.95 ? n : n + 1);
      }
      for (let d = base - 2 * DAY_MS; d < base + 6 * DAY_MS; d += DAY_MS) {
        let sum = 0;
        for (let h = d; h < d + DAY_MS; h += HOUR_MS) sum += state.counted.get(h) ?? 0;
        if (random() < 0.6) state.builtDays.set(d, random() < 0.8 ? sum : sum - 1);
      }
      const start = base - DAY_MS + Math.floor(random() * 3 * DAY_MS);
      const end = start + Math.floor(random() * 4 * DAY_MS);
      const plan = planWindow(start, end, state);
      const want = walk(start, end, state);
      const expected = want.raw.length > 48 ? { days: [], hours: [], raw: [[start, end + 1]] } : want;
      expect({ days: plan.days, hours: plan.hours, raw: plan.raw }, `run ${run}`).toEqual(expected);
    }
  });
});
