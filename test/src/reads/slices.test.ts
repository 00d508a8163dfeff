/**
 * Long reads in slices (issue 31): a search reads one day at a time, each day in a place of the
 * fair queue of its own, and answers exactly what one read of the whole range answers; a
 * dashboard sent while other users' searches run waits for at most the one slice reading.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createApp } from '../../../src/app.js';
import { searchEntries } from '../../../src/logs/store.js';
import { createReads } from '../../../src/reads/client.js';
import { ReadScheduler, type ReadClass, type Release } from '../../../src/reads/scheduler.js';
import { ADMIN_EMAIL, ADMIN_PASSWORD, call, createUserAndLogin, login, startTestApp, type TestApp } from '../../support/app.js';
import { until } from '../../support/ingest.js';
import { generateAccess, generateErrors, seedLogs, type SeededLogs } from '../../support/logs.js';
import { DAY_MS } from '../../../core/durations.js';

const STEP_MS = 600_000;
/** Midnight (UTC) eight days ago: the rows start there and run to about a day ago. */
const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 8 * DAY_MS;

let t: TestApp;
let alice: { id: number; token: string };
let bob: { id: number; token: string };
let carol: { id: number; token: string };
let days: SeededLogs;
let bobs: SeededLogs;
let carols: SeededLogs;

/**
 * Access entries three to a timestamp every ten minutes over seven days, the first of each day at
 * midnight to the millisecond and the last at 23:59:59.999 (the slices' edges); error entries
 * every 25 minutes on whole seconds.
 */
function spreadOverDays() {
  const access = generateAccess(3000, { seed: 31 }).map((e, i) => {
    const k = Math.floor(i / 3);
    const inStep = k % 144 === 0 ? 0 : k % 144 === 143 ? STEP_MS - 1 : (k % 998) + 1;
    return { ...e, timestamp: BASE + k * STEP_MS + inStep };
  });
  const errors = generateErrors(400, { seed: 31 }).map((e, i) => ({ ...e, timestamp: BASE + i * 1_500_000 }));
  return { access, errors };
}

beforeAll(async () => {
  t = await startTestApp();
  const admin = (await login(t.app, ADMIN_EMAIL, ADMIN_PASSWORD)).accessToken;
  alice = await createUserAndLogin(t.app, admin, { email: 'alice@example.com' });
  bob = await createUserAndLogin(t.app, admin, { email: 'bob@example.com' });
  carol = await createUserAndLogin(t.app, admin, { email: 'carol@example.com' });
  days = await seedLogs(t, { ...spreadOverDays(), ownerId: alice.id, tag: 'days' });
  bobs = await seedLogs(t, { access: 300, ownerId: bob.id, tag: 'bob' });
  carols = await seedLogs(t, { ...spreadOverDays(), ownerId: carol.id, tag: 'carol' });
}, 180_000);

afterAll(async () => {
  await t?.close();
});

const startDate = new Date(BASE - DAY_MS).toISOString();

/**
 * The app with a fresh fair queue whose long reads are sliced at `sliceRows` rows (1: a slice a day),
 * and that queue; one request reading at a time, where the order of the queue shows most.
 */
function appSlicedAt<S extends ReadScheduler>(sliceRows: number, scheduler?: (limits: ReadScheduler['limits']) => S) {
  const reads = createReads({ ...t.runtime.config, readsInFlight: 1 });
  const queue = scheduler ? scheduler(reads.scheduler.limits) : reads.scheduler;
  return { app: createApp({ ...t.runtime, reads: { ...reads, scheduler: queue, sliceRows } }), scheduler: queue as S };
}

describe('a search read in slices of days', () => {
  it('answers exactly what one read of the whole range answers: every page, every size, the total; a slice a day or days joined', async () => {
    const endDate = new Date();
    // A slice a day, and about three days to a slice (1,500 access and error rows).
    const apps = [appSlicedAt(1).app, appSlicedAt(1500).app];
    for (const [query, fields] of [
      ['api', ['url', 'message']],
      ['e', ['url', 'message', 'userAgent', 'referrer']],
    ] as const) {
      const request = { domainId: days.domain.id, query, fields, startDate: new Date(startDate), endDate };
      const whole = await searchEntries(t.runtime.clickhouse, request, { offset: 0, limit: 100_000 });
      expect(whole.total, query).toBeGreaterThan(50);
      // The matches span the days (else this test would not test slicing).
      expect(new Set(whole.rows.map((r) => r.timestamp.slice(0, 10))).size, query).toBeGreaterThanOrEqual(7);
      for (const limit of [7, 100]) {
        // The first pages, one in the middle, the last two and the one past the end.
        const last = Math.ceil(whole.total / limit);
        for (const page of new Set([1, 2, 3, Math.ceil(last / 2), last - 1, last, last + 1].filter((p) => p >= 1))) {
          const one = await searchEntries(t.runtime.clickhouse, request, { offset: (page - 1) * limit, limit });
          expect(one.rows).toEqual(whole.rows.slice((page - 1) * limit, page * limit));
          for (const app of apps) {
            const res = await call(app, 'POST', `/api/logs/domains/${days.domain.id}/search`, {
              token: alice.token,
              body: { query, fields, startDate, endDate: endDate.toISOString(), page, limit },
            });
            expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
            expect(res.body.data.logs, `${query} page ${page} of ${limit}`).toEqual(one.rows);
            expect(res.body.data.pagination.total, `${query} page ${page} of ${limit}`).toBe(whole.total);
          }
        }
      }
    }
  }, 300_000);
});

/** The fair queue of an app, writing down who queued and who got a place, in order. */
class RecordingScheduler extends ReadScheduler {
  readonly events: { event: 'queued' | 'placed'; cls: ReadClass; userId: number }[] = [];

  override acquire(userId: number, cls: ReadClass = 'stats'): Promise<Release> {
    this.events.push({ event: 'queued', cls, userId });
    return super.acquire(userId, cls).then((release) => {
      this.events.push({ event: 'placed', cls, userId });
      return release;
    });
  }
}

describe('the fair queue through the app: a dashboard beside other users\' long searches', () => {
  it("a view's requests wait for the one slice reading when they came, not for the slices other users queue", async () => {
    const { app, scheduler } = appSlicedAt(1, (limits) => new RecordingScheduler(limits));
    // Alice and Carol: three searches each over the seven days of their domain (a slice a day), again and again.
    let searching = true;
    const searchers = [
      { user: alice, domainId: days.domain.id },
      { user: carol, domainId: carols.domain.id },
    ];
    const searches = searchers.flatMap(({ user, domainId }) =>
      [1, 2, 3].map(async () => {
        while (searching) {
          const res = await call(app, 'POST', `/api/logs/domains/${domainId}/search`, { token: user.token, body: { query: 'e', startDate, fields: ['url', 'message'] } });
          expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
        }
      }),
    );
    await until(() => scheduler.events.filter((e) => e.event === 'placed' && e.cls === 'search').length >= 6 && scheduler.counts.waiting >= 3, 'the searches to be queued');
    // Bob's view: six queries of his domain sent at once, each its own question (identical ones would be computed once).
    const view = Array.from({ length: 6 }, (_, i) =>
      call(app, 'POST', '/api/logs/query', { token: bob.token, body: { domains: [bobs.domain.id], metrics: ['requests'], dimensions: i % 2 ? ['statusCode'] : [], limit: 10 + i, dateRange: 'custom', startDate } }),
    );
    const answers = await Promise.all(view);
    searching = false;
    await Promise.all(searches);
    for (const res of answers) expect(res.status, JSON.stringify(res.body).slice(0, 300)).toBe(200);
    const bobsEvents = scheduler.events.map((e, i) => ({ ...e, i })).filter((e) => e.userId === bob.id);
    const firstQueued = bobsEvents.find((e) => e.event === 'queued')!.i;
    const lastPlaced = bobsEvents.filter((e) => e.event === 'placed').at(-1)!.i;
    const between = scheduler.events.slice(firstQueued, lastPlaced + 1);
    // Searches were waiting all along (else nothing was tested) and none got a place in between.
    expect(scheduler.events.slice(lastPlaced).some((e) => e.event === 'placed' && e.cls === 'search')).toBe(true);
    expect(between.filter((e) => e.event === 'placed' && e.cls === 'search')).toEqual([]);
    expect(between.filter((e) => e.event === 'placed' && e.userId === bob.id)).toHaveLength(6);
  }, 180_000);
});
