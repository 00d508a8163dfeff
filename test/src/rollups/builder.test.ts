/**
 * The rollup builder (src/rollups/builder.ts) on the embedded stores: every complete hour and day
 * built exactly (each partial against its SQL over the raw rows), windows read through the rollups
 * equal to raw rows and the brute force, late rows read raw until rebuilt, a bucket written twice,
 * the builder in the background under its lease, idle rounds, deduplicated retries, a domain's
 * rollups deleted with it.
 */
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it, vi } from 'vitest';
import { dedupToken, insertAccessBatch, type AccessRow } from '../../../ingest/sinks/clickhouse.js';
import { createLogger } from '../../../core/log.js';
import { buildRollups, startRollupBuilder, startStatsRollups, type RollupBuilder, type RollupRound } from '../../../src/rollups/builder.js';
import { deleteDomainData } from '../../../core/db/domain-data.js';
import { bucketSetOf, planWindow, queryBuildState } from '../../../src/rollups/plan.js';
import { queryWindowStats } from '../../../src/stats/window.js';
import { REFRESH_MS } from '../../../src/rollups/known-plans.js';
import { FORMAT, select, until } from '../../support/ingest.js';
import { prng } from '../../support/random.js';
import { DAY_MS, HOUR_MS } from '../../../core/durations.js';
import { alice, bruteForce, buildAll, builtSpans, clearOfHourEnd, complete, createDomain, Entry, expectTotalsExact, expectWindowsExact, generate, importEntries, NOW, shop, shopEntries, stats, t, useShops, writeTwice } from '../stats/shops.js';

useShops();

describe('rollups: the builder', () => {
  it('the builder builds every complete hour, and every complete day from its hours', async () => {
    // The file may have run into a new hour since beforeAll's build: that build and now differ by it.
    await clearOfHourEnd();
    await buildAll();
    expect(await builtSpans(shop.id)).toEqual([
      { span: 'hour', n: complete(shopEntries, HOUR_MS) },
      { span: 'day', n: complete(shopEntries, DAY_MS) },
    ]);
    // A second round finds nothing left and writes nothing.
    const again = await buildAll();
    expect(again).toMatchObject({ hours: 0, days: 0, repaired: 0 });
    expect(await builtSpans(shop.id)).toEqual([
      { span: 'hour', n: complete(shopEntries, HOUR_MS) },
      { span: 'day', n: complete(shopEntries, DAY_MS) },
    ]);
  });

  it('windows read through the rollups equal the raw rows, the brute force and plain SQL', async () => {
    const rnd = prng(7);
    const times = shopEntries.map((e) => e.t);
    const windows: [number, number][] = [
      [NOW - 30 * DAY_MS, NOW],
      [NOW - 31 * DAY_MS, NOW + DAY_MS],
      // Whole hours and days at both ends, and ends on a line's own millisecond.
      [Math.floor((NOW - 10 * DAY_MS) / DAY_MS) * DAY_MS, Math.floor(NOW / HOUR_MS) * HOUR_MS],
      [Math.floor((NOW - 3 * DAY_MS) / HOUR_MS) * HOUR_MS, Math.floor((NOW - DAY_MS) / DAY_MS) * DAY_MS],
      [times[100]!, times[20_000]!],
      [times[5_000]!, times[5_000]!],
      [times[7_000]! + 1, times[9_000]! - 1],
      // Inside one hour, and inside one day.
      [Math.floor((NOW - 5 * DAY_MS) / HOUR_MS) * HOUR_MS + 60_000, Math.floor((NOW - 5 * DAY_MS) / HOUR_MS) * HOUR_MS + 1_800_000],
      [Math.floor((NOW - 5 * DAY_MS) / DAY_MS) * DAY_MS + 3 * HOUR_MS + 5, Math.floor((NOW - 5 * DAY_MS) / DAY_MS) * DAY_MS + 20 * HOUR_MS - 5],
    ];
    for (let i = 0; i < 12; i++) {
      const a = NOW - Math.floor(rnd() * 31 * DAY_MS);
      windows.push([a, a + Math.floor(rnd() * (NOW - a))]);
    }
    // The 30-day window really is read from built days and hours, with raw rows at its ends only.
    const plan = planWindow(NOW - 30 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, shop.id, NOW - 30 * DAY_MS, NOW));
    expect(plan.days.length).toBeGreaterThanOrEqual(28);
    expect(plan.hours.length).toBeGreaterThan(0);
    expect(bucketSetOf(plan.listed)).toEqual({ days: plan.days, hours: plan.hours });
    expect(plan.raw).toEqual([
      [NOW - 30 * DAY_MS, Math.ceil((NOW - 30 * DAY_MS) / HOUR_MS) * HOUR_MS],
      [Math.floor(NOW / HOUR_MS) * HOUR_MS, NOW + 1],
    ]);
    await expectWindowsExact(shop.id, shopEntries, windows);
  });

  it('rows added to built hours and days are read raw until the builder has built them again', async () => {
    const domain = await createDomain('late.example.com', alice.id);
    const entries = generate(11, 3_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const windows: [number, number][] = [
      [NOW - 30 * DAY_MS, NOW],
      [NOW - 7 * DAY_MS, NOW],
      [Math.floor((NOW - 10 * DAY_MS) / DAY_MS) * DAY_MS + 5 * HOUR_MS + 17, NOW - 2 * DAY_MS - 17],
    ];
    // Asked before the late lines: the next answers start from the build state these read.
    await expectWindowsExact(domain.id, entries, windows);
    // Late lines (an old rotated file imported now) into days and hours that are already built.
    // A few, in about a dozen hours: many more would make the plan read the whole window raw.
    const late = generate(12, 600, true).filter((e, i) => i % 61 === 0 && e.t < NOW - 2 * DAY_MS);
    await importEntries(domain.name, late, FORMAT);
    const all = [...entries, ...late].sort((a, b) => a.t - b.t);
    const before = planWindow(NOW - 30 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 30 * DAY_MS, NOW));
    expect(before.raw.length).toBeGreaterThan(4);
    expect(before.raw.length).toBeLessThan(20);
    await expectWindowsExact(domain.id, all, windows);
    await clearOfHourEnd();
    const round = await buildAll();
    expect(round.hours).toBeGreaterThan(0);
    expect(round.days).toBeGreaterThan(0);
    const after = planWindow(NOW - 30 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 30 * DAY_MS, NOW));
    expect(after.raw.length).toBe(2);
    await expectWindowsExact(domain.id, all, windows);
    await expectTotalsExact(domain.id);
    expect(await builtSpans(domain.id)).toEqual([
      { span: 'hour', n: complete(all, HOUR_MS) },
      { span: 'day', n: complete(all, DAY_MS) },
    ]);
  });

  it('a built part kept in memory answers with one query, and only while its buckets hold the rows it was read from', async () => {
    const domain = await createDomain('kept.example.com', alice.id);
    const entries = generate(21, 2_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    const window: [number, number] = [NOW - 9 * DAY_MS + 17, NOW - 5];
    const queries = vi.spyOn(t.runtime.clickhouse, 'query');
    const answer = async (all: Entry[]) => {
      queries.mockClear();
      expect(await queryWindowStats(t.runtime.clickhouse, domain.id, ...window)).toEqual(bruteForce(all, ...window));
      return queries.mock.calls.length;
    };
    try {
      // The first request reads the state, the part and the ends; the next ones the ends and counts alone.
      expect(await answer(entries)).toBeGreaterThan(2);
      expect(await answer(entries)).toBe(1);
      // Late lines into built hours, built again; a state read anew (after REFRESH_MS) plans the
      // same days and hours as before, whose kept sums no longer hold: read again, and exact.
      const late = generate(22, 400, true).filter((e, i) => i % 23 === 0 && e.t > window[0] + DAY_MS && e.t < NOW - 2 * DAY_MS);
      expect(late.length).toBeGreaterThan(3);
      await importEntries(domain.name, late, FORMAT);
      const all = [...entries, ...late].sort((a, b) => a.t - b.t);
      await answer(all);
      expect((await buildAll()).hours).toBeGreaterThan(0);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(Date.now() + REFRESH_MS + 1);
      await answer(all);
      await answer(all);
      expect(await answer(all)).toBe(1);
    } finally {
      vi.useRealTimers();
      queries.mockRestore();
    }
  });

  it('lines stored between the lists and the totals of a build leave the hour unbuilt until the next round catches up', async () => {
    const domain = await createDomain('between.example.com', alice.id);
    const entries = generate(14, 1_500, true).filter((e) => e.t < NOW - 3 * HOUR_MS);
    await importEntries(domain.name, entries, FORMAT);
    const hour = Math.floor(entries[entries.length - 1]!.t / HOUR_MS) * HOUR_MS;
    const late = Array.from({ length: 25 }, (_, i) => ({ ...entries[0]!, t: hour + 1000 + i, status: 404, url: `/between/${i}` }));
    // The builder's own client, but the late lines are stored the moment it starts the hours' totals:
    // after its lists statement has read the rows, as an ingest running beside it can do.
    let stored = false;
    const racing = new Proxy(t.runtime.clickhouse, {
      get(target, prop, receiver) {
        if (prop !== 'command') return Reflect.get(target, prop, receiver);
        return async (params: { query: string }) => {
          if (!stored && /'hour', dim, bucket, key/.test(params.query) && /toInt8\(0\) AS dim/.test(params.query)) {
            stored = true;
            await importEntries(domain.name, late, FORMAT);
          }
          return target.command(params as Parameters<typeof target.command>[0]);
        };
      },
    });
    await buildRollups(racing, { lookbackS: null, settleS: 1, budgetMs: 60_000, retentionDays: 90 });
    expect(stored).toBe(true);
    const all = [...entries, ...late].sort((a, b) => a.t - b.t);
    // Its total does not claim the late lines its lists lack: the hour is read raw.
    const state = await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 7 * DAY_MS, NOW);
    expect(state.counted.get(hour)).toBe(all.filter((e) => Math.floor(e.t / HOUR_MS) * HOUR_MS === hour).length);
    expect(state.builtHours.get(hour)).not.toBe(state.counted.get(hour));
    await expectWindowsExact(domain.id, all, [[NOW - 7 * DAY_MS, NOW], [hour - 2 * HOUR_MS, hour + HOUR_MS]]);
    await buildAll();
    const rebuilt = await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 7 * DAY_MS, NOW);
    expect(rebuilt.builtHours.get(hour)).toBe(rebuilt.counted.get(hour));
    await expectWindowsExact(domain.id, all, [[NOW - 7 * DAY_MS, NOW], [hour - 2 * HOUR_MS, hour + HOUR_MS]]);
    await expectTotalsExact(domain.id);
    // Every list of every bucket holds the rows its total counts.
    const lists = await select<{ span: string; dim: string; off: string }>(
      t.runtime.clickhouse,
      `SELECT span, dim, toString(countIf(listed != total)) AS off FROM (
         SELECT span, bucket, dim, sum(requests) AS listed, any(total) AS total FROM access_rollups
         JOIN (SELECT span, bucket, sum(requests) AS total FROM access_rollups WHERE domain_id = {d:UInt32} AND dim = 'total' GROUP BY span, bucket) AS t USING (span, bucket)
         WHERE domain_id = {d:UInt32} AND dim IN ('url', 'status', 'agent', 'referrer_host') GROUP BY span, bucket, dim)
       GROUP BY span, dim ORDER BY span, dim`,
      { d: domain.id },
    );
    expect(lists.map((l) => l.off)).toEqual(['0', '0', '0', '0', '0', '0', '0', '0']);
  });

  it('short lists kept in memory are used only at the version their bucket was built for', async () => {
    const domain = await createDomain('relisted.example.com', alice.id);
    const base = { ip: '10.9.9.9', status: 200, referrer: 'https://r.example/', agent: 'ua', rt: 5 };
    const lastHour = Math.floor(NOW / HOUR_MS) * HOUR_MS;
    const entries: Entry[] = [];
    // Every URL in every hour's short list: /a 5, /b 4, /z 1 per hour.
    for (let h = lastHour - 50 * HOUR_MS; h < lastHour - 2 * HOUR_MS; h += HOUR_MS) {
      for (const [url, n] of [['/a', 5], ['/b', 4], ['/z', 1]] as const) {
        for (let i = 0; i < n; i++) entries.push({ ...base, t: h + 20 * 60_000 + i * 1000, url });
      }
    }
    await importEntries(domain.name, entries, FORMAT);
    await buildAll();
    // Keeps the lists of the window's buckets in memory.
    await expectWindowsExact(domain.id, entries, [[NOW - 2 * DAY_MS, NOW]]);
    // Late lines make /z the top URL of one built hour (and of its day); both are built again.
    const late = Array.from({ length: 40 }, (_, i) => ({ ...base, t: lastHour - 30 * HOUR_MS + 30 * 60_000 + i * 1000, url: '/z' }));
    await importEntries(domain.name, late, FORMAT);
    await buildAll();
    // Another window over the same buckets plans from a state read now: the rebuilt bucket is listed
    // at its new version, whose lists are not the ones in memory.
    await expectWindowsExact(domain.id, [...entries, ...late], [[NOW - 2 * DAY_MS + HOUR_MS, NOW]]);
  });

  it('a bucket written twice (two builders at once) is read raw, then deleted and built again', async () => {
    const domain = await createDomain('twice.example.com', alice.id);
    const entries = generate(13, 2_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    // chDB keeps settings given with a query as the session's: the builder's must stay in its own statements.
    const sessionSettings = () => select(t.runtime.clickhouse, "SELECT getSetting('max_threads') AS threads, getSetting('lightweight_deletes_sync') AS deletes", {});
    await t.runtime.clickhouse.command({ query: 'SET max_threads = 3' });
    await t.runtime.clickhouse.command({ query: 'SET lightweight_deletes_sync = 1' });
    await buildAll();
    // What a second builder would add: the same difference again, for one day and one of its hours.
    const day = Math.floor((NOW - 3 * DAY_MS) / DAY_MS) * DAY_MS;
    const busyHour = Math.floor(entries.find((e) => e.t >= day + HOUR_MS)!.t / HOUR_MS) * HOUR_MS;
    await writeTwice(domain.id, 'hour', busyHour);
    await writeTwice(domain.id, 'day', day);
    await expectWindowsExact(domain.id, entries, [[NOW - 7 * DAY_MS, NOW], [day + 10, busyHour + HOUR_MS + 10]]);
    await clearOfHourEnd();
    const round = await buildAll();
    expect(round.repaired).toBe(2);
    const settings = await sessionSettings();
    await t.runtime.clickhouse.command({ query: 'SET max_threads = DEFAULT' });
    await t.runtime.clickhouse.command({ query: 'SET lightweight_deletes_sync = DEFAULT' });
    expect(settings).toEqual([{ threads: 3, deletes: 1 }]);
    expect(await builtSpans(domain.id)).toEqual([
      { span: 'hour', n: complete(entries, HOUR_MS) },
      { span: 'day', n: complete(entries, DAY_MS) },
    ]);
    const plan = planWindow(NOW - 7 * DAY_MS, NOW, await queryBuildState(t.runtime.clickhouse, domain.id, NOW - 7 * DAY_MS, NOW));
    expect(plan.days).toContain(day);
    await expectWindowsExact(domain.id, entries, [[NOW - 7 * DAY_MS, NOW], [day + 10, busyHour + HOUR_MS + 10]]);
  });

  it('serve’s builder builds in the background, one process per database at a time (a lease)', async () => {
    const domain = await createDomain('background.example.com', alice.id);
    const entries = generate(14, 1_000, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    const deps = { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log: createLogger('silent'), retentionDays: 90 };
    const first = startStatsRollups(deps);
    const second = startStatsRollups(deps);
    try {
      // Taken at each look: an hour may end while the builder works.
      const expected = () => [
        { span: 'hour', n: complete(entries, HOUR_MS) },
        { span: 'day', n: complete(entries, DAY_MS) },
      ];
      await until(async () => JSON.stringify(await builtSpans(domain.id)) === JSON.stringify(expected()), 'rollups built in the background', 60_000, 200);
      // Whichever claimed the lease first holds it: the other's rounds do nothing.
      const rounds = await Promise.all([first.runOnce(), second.runOnce()]);
      expect(rounds.filter((r) => r === null)).toHaveLength(1);
      // Stopped, the holder gives the lease up, and the other takes over at its next round.
      const [holder, other] = rounds[0] === null ? [second, first] : [first, second];
      await holder.stop();
      expect(await other.runOnce()).not.toBeNull();
    } finally {
      await first.stop();
      await second.stop();
    }
  });

  it('an idle builder skips its rounds until a line is stored, and for quietMs at most', async () => {
    const domain = await createDomain('quiet.example.com', alice.id);
    const entries = generate(15, 300, true).filter((e) => e.t < NOW - 2 * DAY_MS);
    await importEntries(domain.name, entries, FORMAT);
    const hour = Math.floor(entries[0]!.t / HOUR_MS) * HOUR_MS;
    const hourTotal = async () =>
      Number((await select<{ n: string }>(t.runtime.clickhouse, "SELECT toString(sum(requests)) AS n FROM access_rollups WHERE domain_id = {d:UInt32} AND span = 'hour' AND dim = 'total' AND bucket = toDateTime({b:UInt32}, 'UTC')", { d: domain.id, b: hour / 1000 }))[0]!.n);
    const inHour = entries.filter((e) => Math.floor(e.t / HOUR_MS) * HOUR_MS === hour).length;
    // The settled hour (one of the round's inputs) changes half an hour from now at the earliest, not during the test.
    const settleS = Math.floor(((Date.now() % HOUR_MS) + HOUR_MS / 2) / 1000);
    const nothing: RollupRound = { hours: 0, days: 0, repaired: 0, more: false };
    const withBuilder = async (quietMs: number, use: (builder: RollupBuilder) => Promise<void>) => {
      const builder = startRollupBuilder({ clickhouse: t.runtime.clickhouse, log: createLogger('silent'), claim: async () => true }, { intervalMs: HOUR_MS, settleS, budgetMs: 60_000, retentionDays: 90, quietMs });
      try {
        // Rounds until one finds nothing (the first one also builds what other tests left).
        await until(async () => isDeepStrictEqual(await builder.runOnce(), nothing), 'a round with nothing to build', 60_000, 0);
        await use(builder);
      } finally {
        await builder.stop();
      }
    };
    await withBuilder(HOUR_MS, async (builder) => {
      expect(await hourTotal()).toBe(inHour);
      await writeTwice(domain.id, 'hour', hour);
      // Nothing the round reads changed: skipped, the bucket stays written twice.
      expect(await builder.runOnce()).toEqual(nothing);
      expect(await hourTotal()).toBe(2 * inHour);
      // A stored line (in another hour) wakes it: the round finds the bucket and repairs it.
      const late = { ...entries.find((e) => Math.floor(e.t / HOUR_MS) * HOUR_MS !== hour)!, url: '/late' };
      await importEntries(domain.name, [late], FORMAT);
      expect(await builder.runOnce()).toMatchObject({ repaired: 1, more: false });
      expect(await hourTotal()).toBe(inHour);
    });
    await withBuilder(2_000, async (builder) => {
      await writeTwice(domain.id, 'hour', hour);
      expect(await builder.runOnce()).toEqual(nothing);
      // Without any line, a round runs again once quietMs has passed.
      const repaired = await until(async () => ((await builder.runOnce())?.repaired === 1 ? true : undefined), 'a round after quietMs', 30_000, 200);
      expect(repaired).toBe(true);
      expect(await hourTotal()).toBe(inHour);
    });
  });


  it('a retried batch that ClickHouse deduplicates is not counted again by the rollups', async () => {
    const domain = await createDomain('retry.example.com', alice.id);
    const base = { method: 'GET', protocol: 'HTTP/1.1', responseSize: 10, referrer: 'https://r.example/', userAgent: 'ua', host: null };
    // One batch over three days and several hours: one part per day partition.
    const rows: AccessRow[] = Array.from({ length: 300 }, (_, i) => ({
      ...base,
      domainId: domain.id,
      id: i + 1,
      timestamp: NOW - 2 * DAY_MS - i * 11 * 60_000,
      ipAddress: `10.0.0.${i % 37}`,
      url: `/r/${i % 13}`,
      statusCode: i % 9 === 0 ? 503 : 200,
      responseTime: i % 4 === 0 ? null : i,
    }));
    const token = dedupToken('test:retry', 0, 300);
    const HOUR_ROWS = 'SELECT hour, toString(sum(rows)) AS n FROM access_hour_rows WHERE domain_id = {d:UInt32} GROUP BY hour ORDER BY hour';
    await insertAccessBatch(t.runtime.clickhouse, rows, token);
    const once = await select<{ hour: string; n: string }>(t.runtime.clickhouse, HOUR_ROWS, { d: domain.id });
    expect(once.reduce((sum, r) => sum + Number(r.n), 0)).toBe(300);
    await insertAccessBatch(t.runtime.clickhouse, rows, token);
    await insertAccessBatch(t.runtime.clickhouse, rows, token);
    expect(await select(t.runtime.clickhouse, 'SELECT toString(count()) AS n FROM access_logs WHERE domain_id = {d:UInt32}', { d: domain.id })).toEqual([{ n: '300' }]);
    // The hour counts decide which rollups are used: counted twice, no bucket would ever match.
    expect(await select(t.runtime.clickhouse, HOUR_ROWS, { d: domain.id })).toEqual(once);
    await buildAll();
    expect(await builtSpans(domain.id)).toEqual([
      { span: 'hour', n: '300' },
      { span: 'day', n: '300' },
    ]);

    // Another batch with the same rows but its own token is new data, and is counted.
    const entries: Entry[] = rows.map((r) => ({ t: r.timestamp, ip: r.ipAddress, url: r.url, status: r.statusCode, referrer: r.referrer, agent: r.userAgent, rt: r.responseTime, bytes: r.responseSize }));
    const res = await stats(domain.id, alice.token, '?period=7d');
    expect(res.body.data).toEqual({ period: '7d', ...bruteForce(entries, NOW - 7 * DAY_MS, NOW) });
    await insertAccessBatch(t.runtime.clickhouse, rows.map((r) => ({ ...r, id: r.id + 1000 })), dedupToken('test:retry', 300, 600));
    const twice = await stats(domain.id, alice.token, '?period=7d');
    expect(twice.body.data).toEqual({ period: '7d', ...bruteForce([...entries, ...entries], NOW - 7 * DAY_MS, NOW) });
  });

  it('deleteDomainData removes a domain’s rollup rows and no other domain’s', async () => {
    const domain = await createDomain('gone.example.com', alice.id);
    const entries = generate(9, 300, true).filter((e) => e.t < NOW);
    await importEntries(domain.name, entries, FORMAT);
    const count = (table: string, id: number) => select<{ n: string }>(t.runtime.clickhouse, `SELECT toString(count()) AS n FROM ${table} WHERE domain_id = {d:UInt32}`, { d: id });
    await buildAll();
    expect(Number((await count('access_rollups', domain.id))[0]!.n)).toBeGreaterThan(0);
    expect(Number((await count('access_hour_rows', domain.id))[0]!.n)).toBeGreaterThan(0);
    const before = await stats(shop.id, alice.token, '?period=30d');
    await deleteDomainData(t.runtime.clickhouse, domain.id);
    expect(await count('access_rollups', domain.id)).toEqual([{ n: '0' }]);
    expect(await count('access_hour_rows', domain.id)).toEqual([{ n: '0' }]);
    expect((await stats(shop.id, alice.token, '?period=30d')).body).toEqual(before.body);
  });
});
