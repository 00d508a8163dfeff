/**
 * bench/fair-reads: one user's light request while another user runs six heavy ones at once
 * (issue 29: at most its own time plus one of the heavy ones; before the fair queue, 82 ms alone
 * became 19.2 s).
 *
 *   npx tsx bench/fair-reads.ts                          # 2,000,000 + 9 × 200,000 rows of bench/query's logs
 *   BENCH_ROWS=500000 npx tsx bench/fair-reads.ts        # a quick run
 *   BENCH_DATA_DIR=/tmp/…/data npx tsx bench/fair-reads.ts   # a DATA_DIR kept by an earlier run (BENCH_KEEP=1) or by bench/query
 *
 * What it does, through the real programs:
 *   1. the data: bench/query's generator (bench/lib/query-data.ts) over the 30 days ending now,
 *      loaded through `tailhouse domains add` and `tailhouse import`, or a kept DATA_DIR;
 *   2. `node bin/tailhouse.js serve` as a child on 127.0.0.1, waited for until idle;
 *   3. two plain users: A owns the main domain, B owns site1 (on a kept DATA_DIR the owners are put
 *      back and the users deleted at the end);
 *   4. BENCH_ROUNDS rounds, each in this order: B's query and B's listing alone (median of 3 each),
 *      one of A's heavy queries alone, then A's six heavy queries sent at once and, 300 ms later
 *      (all six are in by then), B's query; then the same with B's listing. Times are from the
 *      request to the body's last byte.
 *
 * The ratio the issue asks for is B's time under load ÷ (B's alone + one of A's alone); ≤ 1 is met.
 *
 *   5. (issue 31) a dashboard view of B's domain (`dashboardView`: the page's tiles, charts and
 *      panels, sent together as web/src/pages/Dashboard.tsx sends them) alone, then while three other
 *      users (S1–S3, administrators: they see the main domain) each run a 30-day search of the main
 *      domain in a loop, BENCH_ROUNDS rounds of alone then loaded, each the median of 3 views; and
 *      one of the searches alone. The target: the view under load ≤ 2 × the view alone.
 *
 * Figures are printed with the other load on the machine; nothing is asserted.
 *
 * Environment (optional): BENCH_ROWS (default 2000000), BENCH_DATA_DIR, BENCH_ROUNDS (default 3),
 * BENCH_KEEP (1: keep the temporary directory), BENCH_PARTS (default `six,view`: the issue-29
 * rounds, the issue-31 rounds; either alone).
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { killAll } from './lib/measure.js';
import { PANELS } from '../web/src/panels.js';
import { viewQueries } from '../web/src/view.js';
import { BENCH_ADMIN, benchDataDir, MAIN_DOMAIN, otherDomain } from './lib/query-data.js';
import { DAY_MS } from '../core/durations.js';
import { api as apiOf, childEnv, failBench, killServer, login, ROOT, startServer, stopServer, waitIdle, withOtherLoad, type Server } from './lib/serve-child.js';
import { fmt, load, median, positiveIntEnv, sleep } from './lib/util.js';

const ROWS = positiveIntEnv('BENCH_ROWS', 2_000_000);
const ROUNDS = positiveIntEnv('BENCH_ROUNDS', 3);
const KEPT_DATA_DIR = process.env.BENCH_DATA_DIR;
const KEEP = process.env.BENCH_KEEP === '1';
const HEAVY_AT_ONCE = 6;
const PARTS = new Set((process.env.BENCH_PARTS ?? 'six,view').split(','));
const SEARCHERS = 3;
/** How long after A's six are sent B asks: they are all queued by then (each is tens of ms of Postgres work before its reads). */
const QUEUED_AFTER_MS = 300;

const ms0 = (n: number) => fmt(n);

let server: Server | undefined;
const api = (method: string, p: string, token?: string, body?: unknown) => apiOf(server!.base, method, p, token, body);

/** One request, timed from the request to the body's last byte; fails unless 200. */
async function timed(method: string, p: string, token: string, body?: unknown): Promise<number> {
  const started = performance.now();
  const res = await api(method, p, token, body);
  const ms = performance.now() - started;
  if (res.status !== 200) throw new Error(`${method} ${p} answered ${res.status}: ${JSON.stringify(res.json).slice(0, 300)}`);
  return ms;
}

/**
 * The query bodies of one dashboard view of `domainId` over its default window: the tiles, the two
 * charts and one per panel, as web/src/pages/Dashboard.tsx asks them.
 */
function dashboardView(domainId: number): Record<string, unknown>[] {
  const view = viewQueries({ domains: [domainId], dateRange: '24h', filters: [] }, false, PANELS);
  return [...view.headline, ...view.panels];
}

/** One view: its requests sent together, timed from the first request to the last answer's last byte. (The one place to change when the page batches them.) */
async function viewTimed(token: string, bodies: Record<string, unknown>[]): Promise<number> {
  const started = performance.now();
  await Promise.all(bodies.map((body) => timed('POST', '/api/logs/query', token, body)));
  return performance.now() - started;
}

interface ViewRound {
  viewAlone: number;
  viewLoaded: number;
  searchAlone: number;
  /** Searches the three finished while the loaded views ran. */
  searchesDone: number;
  otherCores: number;
}

interface Round {
  aAlone: number;
  bAlone: number;
  bLoaded: number;
  listingAlone: number;
  listingLoaded: number;
  /** When the last of A's six answered, ms after they were sent (the query's burst). */
  heavyLoaded: number;
  otherCores: number;
}

async function main(): Promise<void> {
  const dir = KEPT_DATA_DIR ? null : fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-fair-'));
  const cleanUp = () => {
    if (server) killServer(server);
    killAll();
    if (dir && !KEEP) fs.rmSync(dir, { recursive: true, force: true });
  };
  process.once('SIGINT', () => {
    cleanUp();
    process.exit(130);
  });
  let restore: (() => Promise<void>) | undefined;
  try {
    const head = (() => {
      try {
        return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: ROOT, encoding: 'utf8' }).trim();
      } catch {
        return 'not a git checkout';
      }
    })();
    console.log(`bench/fair-reads: Node ${process.version}, ${os.cpus().length} CPUs, ${ROOT} (${head}); load average at start: ${load()}${dir && KEEP ? `; files in ${dir}` : ''}`);

    const dataDir = await benchDataDir({ kept: KEPT_DATA_DIR, dir, rows: ROWS, keep: KEEP });

    const s = await startServer(childEnv(dataDir, BENCH_ADMIN), { detached: true, onSpawn: (spawned) => (server = spawned) });
    const idle = await waitIdle(s.pid, 1_800_000);
    console.log(`2. serve (pid ${s.pid}) ${idle.idle ? 'idle' : '**still busy**'} after ${(idle.waitedMs / 1000).toFixed(1)} s; load average ${load()}`);

    const admin = await login(s.base, BENCH_ADMIN);
    // Every page: bench/query's DATA_DIR has a fleet of 100 more.
    const all: { id: number; name: string; ownerId: number | null }[] = [];
    for (let page = 1; ; page++) {
      const { data } = (await api('GET', `/api/domains?limit=100&page=${page}`, admin)).json;
      all.push(...data.domains);
      if (page >= data.pagination.pages) break;
    }
    const domainA = all.find((d) => d.name === MAIN_DOMAIN);
    const domainB = all.find((d) => d.name === otherDomain(1));
    if (!domainA || !domainB) throw new Error(`no ${MAIN_DOMAIN} or ${otherDomain(1)} in ${dataDir}`);
    const users: { id: number; token: string }[] = [];
    for (const [tag, domain] of [['a', domainA], ['b', domainB]] as const) {
      const credentials = { email: `fair-${tag}-${process.pid}@example.com`, password: 'fair-reads-password-1' };
      const created = await api('POST', '/api/users', admin, credentials);
      if (created.status !== 201) throw new Error(`creating user ${tag} answered ${created.status}: ${JSON.stringify(created.json)}`);
      await api('PUT', `/api/domains/${domain.id}`, admin, { ownerId: created.json.data.id });
      users.push({ id: created.json.data.id, token: (await api('POST', '/api/auth/login', undefined, credentials)).json.data.accessToken });
    }
    restore = async () => {
      for (const d of [domainA, domainB]) await api('PUT', `/api/domains/${d.id}`, admin, { ownerId: d.ownerId });
      for (const u of users) await api('DELETE', `/api/users/${u.id}`, admin);
    };
    const [a, b] = [users[0]!, users[1]!];
    console.log(`3. user A owns ${MAIN_DOMAIN} (domain ${domainA.id}), user B owns ${otherDomain(1)} (domain ${domainB.id})`);
    if (PARTS.has('view')) {
      for (let i = 1; i <= SEARCHERS; i++) {
        const credentials = { email: `fair-s${i}-${process.pid}@example.com`, password: 'fair-reads-password-1' };
        const created = await api('POST', '/api/users', admin, { ...credentials, role: 'admin' });
        if (created.status !== 201) throw new Error(`creating searcher ${i} answered ${created.status}: ${JSON.stringify(created.json)}`);
        users.push({ id: created.json.data.id, token: (await api('POST', '/api/auth/login', undefined, credentials)).json.data.accessToken });
      }
    }

    // A's: every row of 30 days grouped by URL and address, with a filter no rollup holds (raw rows
    // only); counts only, whose state stays small (with visitors and p95 per group the 2M-row domain's
    // statement needed more than READ_MAX_MEMORY_MB's 2 GB, and was stopped).
    const heavy = { domains: [domainA.id], metrics: ['requests', 'bandwidth'], dimensions: ['url', 'ipAddress'], filters: [['contains', 'userAgent', ['mozilla']]], dateRange: '30d', limit: 100 };
    const light = { domains: [domainB.id], metrics: ['requests'], dateRange: '24h' };
    const listing = `/api/logs/domains/${domainB.id}/access?limit=20`;
    await timed('POST', '/api/logs/query', b.token, light);
    // Warmed only where used: at 30M rows it needs more than READ_MAX_MEMORY_MB (the view part runs without it).
    if (PARTS.has('six')) await timed('POST', '/api/logs/query', a.token, heavy);

    /** `request` of B's, timed while A's six heavy queries run (sent at once, B's QUEUED_AFTER_MS later). */
    const underLoad = async (request: () => Promise<number>): Promise<{ ms: number; heavies: number[] }> => {
      const started = performance.now();
      // Settled as they come (a failure is rethrown below, after B's, never left unhandled).
      const heavies = Array.from({ length: HEAVY_AT_ONCE }, () =>
        timed('POST', '/api/logs/query', a.token, heavy).then(
          () => performance.now() - started,
          (err: unknown) => err as Error,
        ),
      );
      await sleep(QUEUED_AFTER_MS);
      const ms = await request();
      const settled = await Promise.all(heavies);
      for (const result of settled) if (result instanceof Error) throw result;
      return { ms, heavies: settled as number[] };
    };
    const bQuery = () => timed('POST', '/api/logs/query', b.token, light);
    const bListing = () => timed('GET', listing, b.token);
    const medianOf3 = async (request: () => Promise<number>) => median([await request(), await request(), await request()]);

    const rounds: Round[] = [];
    for (let round = 0; PARTS.has('six') && round < ROUNDS; round++) {
      process.stderr.write(`round ${round + 1}…\n`);
      await waitIdle(s.pid, 30_000);
      const { value, otherCores } = await withOtherLoad(s.pid, async () => {
        const bAlone = await medianOf3(bQuery);
        const listingAlone = await medianOf3(bListing);
        const aAlone = await timed('POST', '/api/logs/query', a.token, heavy);
        const query = await underLoad(bQuery);
        const listed = await underLoad(bListing);
        return { bAlone, listingAlone, aAlone, bLoaded: query.ms, listingLoaded: listed.ms, heavyLoaded: Math.max(...query.heavies) };
      });
      rounds.push({ ...value, otherCores });
    }

    if (rounds.length > 0) reportSix(rounds);
    if (PARTS.has('view')) {
      const searchers = users.slice(2);
      // Every entry of the 30 days is read: `url` and `userAgent` hold `bot` in some rows of every
      // day, so neither the text index nor the rollups' keys leave a day out.
      const search = { query: 'bot', fields: ['url', 'userAgent', 'referrer', 'message'], startDate: new Date(Date.now() - 30 * DAY_MS).toISOString() };
      const searchOnce = (token: string) => timed('POST', `/api/logs/domains/${domainA.id}/search`, token, search);
      const view = dashboardView(domainB.id);
      const medianView = async () => median([await viewTimed(b.token, view), await viewTimed(b.token, view), await viewTimed(b.token, view)]);
      await viewTimed(b.token, view);
      await searchOnce(searchers[0]!.token);
      const viewRounds: ViewRound[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        process.stderr.write(`view round ${round + 1}…\n`);
        await waitIdle(s.pid, 30_000);
        const { value, otherCores } = await withOtherLoad(s.pid, async () => {
          const viewAlone = await medianView();
          const searchAlone = await searchOnce(searchers[0]!.token);
          let searching = true;
          let searchesDone = 0;
          const loops = searchers.map(async (u) => {
            while (searching) {
              await searchOnce(u.token);
              searchesDone++;
            }
          });
          // All three are reading by then (a search's first statements are Postgres, then its days).
          await sleep(QUEUED_AFTER_MS);
          const done0 = searchesDone;
          try {
            const viewLoaded = await medianView();
            return { viewAlone, viewLoaded, searchAlone, searchesDone: searchesDone - done0 };
          } finally {
            searching = false;
            await Promise.all(loops);
          }
        });
        viewRounds.push({ ...value, otherCores });
      }
      reportView(viewRounds, view.length);
    }
    await restore();
    restore = undefined;
    await stopServer(s);
    console.log(`load average at the end ${load()}`);
  } finally {
    if (restore) await restore().catch(() => {});
    cleanUp();
  }
}

function reportView(rounds: ViewRound[], requests: number): void {
  console.log(
    `\n5. B's dashboard view (${requests} POST /api/logs/query sent together, 24 h of ${otherDomain(1)}), median of 3 views, alone and while ${SEARCHERS} other users each run 30-day searches of ${MAIN_DOMAIN} in a loop; ms, first request to last byte\n`,
  );
  console.log("| round | view alone | view under load | ratio | one search alone | searches done during the loaded views | other load |");
  console.log('|---|---:|---:|---:|---:|---:|---:|');
  const ratios = rounds.map((r) => r.viewLoaded / r.viewAlone);
  rounds.forEach((r, i) => console.log(`| ${i + 1} | ${ms0(r.viewAlone)} | ${ms0(r.viewLoaded)} | ${ratios[i]!.toFixed(2)} | ${ms0(r.searchAlone)} | ${r.searchesDone} | ${r.otherCores.toFixed(2)} |`));
  const m = median(ratios);
  console.log(`\nthe view: time under load ÷ time alone, median of ${rounds.length} rounds ${m.toFixed(2)} (spread ${Math.min(...ratios).toFixed(2)}–${Math.max(...ratios).toFixed(2)}); target ≤ 2: ${m <= 2 ? 'met' : '**not met**'}`);
}

function reportSix(rounds: Round[]): void {
    console.log(`\n4. B's one-metric query (24 h of ${otherDomain(1)}), then B's listing, each while A's ${HEAVY_AT_ONCE} heavy queries (30 d of ${MAIN_DOMAIN} by URL and address) run; ms, request to last byte\n`);
    console.log("| round | one of A's alone | B's query alone | under load | ratio | B's listing alone | under load | ratio | A's six: last answer | other load |");
    console.log('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    const ratios = rounds.map((r) => r.bLoaded / (r.bAlone + r.aAlone));
    const listingRatios = rounds.map((r) => r.listingLoaded / (r.listingAlone + r.aAlone));
    rounds.forEach((r, i) =>
      console.log(
        `| ${i + 1} | ${ms0(r.aAlone)} | ${ms0(r.bAlone)} | ${ms0(r.bLoaded)} | ${ratios[i]!.toFixed(2)} | ${ms0(r.listingAlone)} | ${ms0(r.listingLoaded)} | ${listingRatios[i]!.toFixed(2)} | ${ms0(r.heavyLoaded)} | ${r.otherCores.toFixed(2)} |`,
      ),
    );
    for (const [what, list] of [["B's query", ratios], ["B's listing", listingRatios]] as const) {
      const m = median(list);
      console.log(`\n${what}: time under load ÷ (its time alone + one of A's alone), median of ${ROUNDS} rounds ${m.toFixed(2)} (spread ${Math.min(...list).toFixed(2)}–${Math.max(...list).toFixed(2)}); target ≤ 1: ${m <= 1 ? 'met' : '**not met**'}`);
    }
}

main().catch((err: unknown) => failBench('fair-reads', err, server));
