/**
 * Short top lists (src/stats/top-lists.ts) built by the rollups and read for the statistics: flat and
 * skewed distributions, busy hours with more keys than a list holds, keys just below every list and
 * keys missing from some, all against the brute force over the generated lines.
 */
import { describe, expect, it } from 'vitest';
import { bucketSetOf, planWindow, queryBuildState } from '../../../src/rollups/plan.js';
import { queryWindowStats } from '../../../src/stats/window.js';
import { FORMAT, select } from '../../support/ingest.js';
import { prng } from '../../support/random.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';
import { alice, buildAll, createDomain, deleteTops, Entry, expectWindowsExact, importEntries, NOW, t, useShops } from './shops.js';

// Each test registers domains of its own: the shops' lines are not needed.
useShops({ lines: false });

describe('rollups: short lists', () => {
  it('short day lists: a flat distribution they cannot prove, and days without them, still give the exact lists', async () => {
    const domain = await createDomain('flat.example.com', alice.id);
    // 400 URLs requested about equally every day: a day's 101st URL has about the 10th's count.
    const rnd = prng(15);
    const entries: Entry[] = [];
    for (let i = 0; i < 12_000; i++) {
      const ts = NOW - 2 * HOUR_MS - Math.floor(rnd() * 20 * DAY_MS);
      entries.push({ t: ts, ip: `10.1.${i % 7}.${i % 11}`, url: `/flat/${Math.floor(rnd() * 400)}`, status: 200, referrer: '', agent: `agent-${Math.floor(rnd() * 300)}`, rt: 5 });
    }
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const windows: [number, number][] = [
      [NOW - 30 * DAY_MS, NOW],
      [NOW - 7 * DAY_MS - 5, NOW - DAY_MS + 5],
    ];
    // This window has whole days and, at its ends, whole hours with requests.
    const [from, to] = windows[1]!;
    const plan = () => queryBuildState(t.runtime.clickhouse, domain.id, from, to).then((state) => planWindow(from, to, state));
    const listedEverywhere = async () => {
      const p = await plan();
      return p.listed.length === p.days.length + p.hours.length;
    };
    expect(await listedEverywhere()).toBe(true);
    await expectWindowsExact(domain.id, entries, windows);
    // A day and an hour built without their short lists (a builder that died between the statements).
    const day = Math.floor((NOW - 5 * DAY_MS) / DAY_MS) * DAY_MS;
    const hour = (await plan()).hours[0]!;
    await deleteTops(domain.id, 'day', day);
    await deleteTops(domain.id, 'hour', hour);
    const unlisted = await plan();
    expect(unlisted.days).toContain(day);
    expect(bucketSetOf(unlisted.listed).days).not.toContain(day);
    expect(unlisted.hours).toContain(hour);
    expect(bucketSetOf(unlisted.listed).hours).not.toContain(hour);
    await expectWindowsExact(domain.id, entries, windows);
    const rebuilt = await buildAll();
    expect([rebuilt.days, rebuilt.hours]).toEqual([1, 1]);
    expect(await listedEverywhere()).toBe(true);
  });

  it('short hour lists: busy hours with more keys than a list holds, skewed and flat, give the exact lists', async () => {
    const domain = await createDomain('busy-hours.example.com', alice.id);
    const rnd = prng(21);
    // Four whole hours, the newest ending five hours before now: three skewed (600 URLs, a few of
    // them busy) and the oldest flat (300 URLs about equally), 2,000 requests each.
    const newest = Math.floor((NOW - 6 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    const entries: Entry[] = [];
    for (let h = 0; h < 4; h++) {
      for (let i = 0; i < 2_000; i++) {
        const n = h === 3 ? Math.floor(rnd() * 300) : Math.floor(rnd() ** 3 * 600);
        const agent = `agent-${Math.floor(rnd() ** 2 * 200)}`;
        entries.push({ t: newest - h * HOUR_MS + Math.floor(rnd() * 3_600) * 1000, ip: `10.2.${h}.${i % 50}`, url: `/h/${n}`, status: 200, referrer: i % 3 ? '' : `https://ref.example/${n % 150}`, agent, rt: 7 });
      }
    }
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    // The hours' URL lists are cut: each keeps the next URL's count as its threshold.
    const cut = await select<{ n: string }>(
      t.runtime.clickhouse,
      "SELECT toString(countIf(threshold > 0)) AS n FROM access_tops FINAL WHERE domain_id = {d:UInt32} AND span = 'hour' AND dim = 'url'",
      { d: domain.id },
    );
    expect(cut).toEqual([{ n: '4' }]);
    const skewed: [number, number] = [newest - 2 * HOUR_MS, newest + HOUR_MS - 1];
    const plan = planWindow(...skewed, await queryBuildState(t.runtime.clickhouse, domain.id, ...skewed));
    expect(bucketSetOf(plan.listed)).toEqual({ days: [], hours: [newest - 2 * HOUR_MS, newest - HOUR_MS] });
    expect(plan.raw).toEqual([[newest, newest + HOUR_MS]]);
    await expectWindowsExact(domain.id, entries, [
      skewed,
      [newest - 3 * HOUR_MS - 17, newest + HOUR_MS + 17],
      [newest - 2 * HOUR_MS + 5, newest + HOUR_MS - 5],
      [NOW - DAY_MS, NOW],
    ]);
  });

  it('short hour lists: a URL just below every hour’s list is counted through the thresholds', async () => {
    const domain = await createDomain('steady.example.com', alice.id);
    // Four hours, each: 9 URLs of every hour (50 requests), 91 of that hour alone (40 down to 22),
    // then /steady (19), first outside every hour's 100-key list. Over the four hours /steady (76)
    // is 10th; a proof that left out the hours' thresholds would take a 40-request URL instead.
    const newest = Math.floor((NOW - 9 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    const entries: Entry[] = [];
    for (let h = 0; h < 4; h++) {
      const counts: [string, number][] = [
        ...Array.from({ length: 9 }, (_, i): [string, number] => [`/common/${i}`, 50]),
        ...Array.from({ length: 91 }, (_, i): [string, number] => [`/only/${h}/${i}`, 40 - Math.floor(i / 5)]),
        ['/steady', 19],
      ];
      let second = 0;
      for (const [url, n] of counts) {
        for (let i = 0; i < n; i++) entries.push({ t: newest - h * HOUR_MS + (second++ % 3_600) * 1000, ip: '10.3.0.1', url, status: 200, referrer: '', agent: 'a', rt: 1 });
      }
    }
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const window: [number, number] = [newest - 3 * HOUR_MS, newest + HOUR_MS - 1];
    const plan = planWindow(...window, await queryBuildState(t.runtime.clickhouse, domain.id, ...window));
    expect(bucketSetOf(plan.listed).hours).toHaveLength(3);
    const top = (await queryWindowStats(t.runtime.clickhouse, domain.id, ...window)).topUrls;
    expect(top[9]).toEqual({ url: '/steady', requests: 76, percentage: expect.any(Number) });
    await expectWindowsExact(domain.id, entries, [window]);
  });

  it('short hour lists: a candidate missing from some lists is counted in their full rows, read again once its bucket is rebuilt', async () => {
    const domain = await createDomain('rising.example.com', alice.id);
    // Three hours (the newest ending nine hours before now), each: 9 URLs of every hour (50
    // requests), 95 of that hour alone (10) and 10 (5). /rising: 45 in the oldest hour (in its
    // list), 5 in the others (below theirs). It is 10th over the three (55), proven by the lists
    // (thresholds 10 + 10 + 10), its count outside the oldest hour's list looked up in the others'
    // full rows.
    const newest = Math.floor((NOW - 9 * HOUR_MS) / HOUR_MS) * HOUR_MS;
    const line = (t: number, url: string) => ({ t, ip: '10.4.0.1', url, status: 200, referrer: '', agent: 'a', rt: 1 });
    const entries: Entry[] = [];
    for (let h = 1; h <= 3; h++) {
      const counts: [string, number][] = [
        ...Array.from({ length: 9 }, (_, i): [string, number] => [`/common/${i}`, 50]),
        ...Array.from({ length: 95 }, (_, i): [string, number] => [`/only/${h}/${i}`, 10]),
        ...Array.from({ length: 10 }, (_, i): [string, number] => [`/tail/${h}/${i}`, 5]),
        ['/rising', h === 3 ? 45 : 5],
      ];
      let second = 0;
      for (const [url, n] of counts) for (let i = 0; i < n; i++) entries.push(line(newest - h * HOUR_MS + (second++ % 3_600) * 1000, url));
    }
    // A line after them: the builder leaves a domain's newest hour for later.
    entries.push(line(newest + 1000, '/after'));
    entries.sort((a, b) => a.t - b.t);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const window: [number, number] = [newest - 3 * HOUR_MS, newest];
    const listed = async (w = window) => bucketSetOf(planWindow(...w, await queryBuildState(t.runtime.clickhouse, domain.id, ...w)).listed).hours;
    const tenth = async (w = window) => (await queryWindowStats(t.runtime.clickhouse, domain.id, ...w)).topUrls[9];
    expect(await listed()).toHaveLength(3);
    expect(await tenth()).toEqual({ url: '/rising', requests: 55, percentage: expect.any(Number) });
    // Three more /rising in the middle hour, built again: its lists hold the same keys at a new
    // version, and its count of /rising is read again (the one in memory is of the old version).
    const late = [0, 1, 2].map((i) => line(newest - 2 * HOUR_MS + 100_000 + i, '/rising'));
    await importEntries(domain.name, late, FORMAT);
    await buildAll();
    // A window of other whole hours plans from a state read now (the same window would go on
    // reading the rebuilt hour raw from the state kept for its hours, known-plans.ts).
    const longer: [number, number] = [window[0] - HOUR_MS, window[1]];
    expect(await listed(longer)).toHaveLength(3);
    expect(await tenth(longer)).toEqual({ url: '/rising', requests: 58, percentage: expect.any(Number) });
    await expectWindowsExact(domain.id, [...entries, ...late], [window, longer]);
  });
});
