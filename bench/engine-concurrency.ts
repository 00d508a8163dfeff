/**
 * bench/engine-concurrency: does the embedded engine answer the dashboard faster when requests
 * of different viewers read side by side? (issue 31, part 5)
 *
 *   npx tsx bench/engine-concurrency.ts                                  # 1,000,000 + 9 × 100,000 rows of bench/query's logs
 *   BENCH_DATA_DIR=/tmp/…/data npx tsx bench/engine-concurrency.ts      # a DATA_DIR kept by bench/query or another bench (BENCH_KEEP=1)
 *
 *   1. the data: bench/query's logs loaded through the CLI, or a kept DATA_DIR;
 *   2. a `serve` child on it until it is idle (the stats rollups built, chDB's merges done), stopped;
 *   3. in this process, the stores opened as `serve` opens them, and each viewer a user of its own
 *      (an administrator, for the fair queue a different id each) looking at one of the 10 domains:
 *      a view is the domain dashboard's 14 POST /api/logs/query bodies (web/src/pages/Dashboard.tsx,
 *      web/src/panels.ts; default period BENCH_RANGE, 24h), the three of the headline at once, then
 *      the eleven panels at once (web/src/view.ts), each through the real service (queryLogs:
 *      the domains from Postgres, parse, the fair queue, run, shape);
 *   4. per round, for 1, 2, 4 and 10 viewers (BENCH_VIEWERS), each viewer doing BENCH_VIEWS views
 *      in turn, the paths one after the other, each round starting with the next one:
 *        bound      the store's client: one statement at a time on one chDB session, bound
 *                   parameters, 1 request in flight (the path before requestReads);
 *        literal    the same with the parameters written as literals (withLiterals): what literals
 *                   alone change;
 *        sessions   the product's path (requestReads): BENCH_POOL read sessions (READS_IN_FLIGHT),
 *                   statements side by side, one on each at a time, with literals; BENCH_POOL
 *                   requests in flight.
 *      Figures: views/s, a view's p50 and p99 (first request to last answer), a request's p50 and
 *      p99; the median over the rounds with the spread, and the other load on the machine. Every
 *      path must answer the first view of every domain the same, or the bench stops.
 *
 * Environment (optional): BENCH_ROWS (default 1000000), BENCH_DATA_DIR, BENCH_ROUNDS (9),
 * BENCH_VIEWERS (1,2,4,10), BENCH_VIEWS (1), BENCH_POOL (4), BENCH_RANGE (24h), BENCH_PATHS
 * (bound,literal,sessions), BENCH_KEEP (1: keep the temporary directory).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { QueryParams } from '@clickhouse/client';
import { loadConfig } from '../core/config.js';
import { derivedClient, withLiterals, type ClickHouseClient } from '../core/db/clickhouse.js';
import { sql } from '../core/db/sql.js';
import { createLogger } from '../core/log.js';
import type { Principal } from '../src/context.js';
import { createReads, type Reads } from '../src/reads/client.js';
import { openStores } from '../src/runtime.js';
import { queryBody } from '../src/stats/query/schemas.js';
import { queryLogs } from '../src/stats/query/service.js';
import { PermissionSet } from '../src/users/permissions.js';
import { PANELS } from '../web/src/panels.js';
import { viewQueries } from '../web/src/view.js';
import { BENCH_ADMIN, benchDataDir } from './lib/query-data.js';
import { machineBusyTicks } from './lib/measure.js';
import { childEnv, failBench, startServer, stopServer, waitIdle, type Server } from './lib/serve-child.js';
import { fmt, load, median, positiveIntEnv } from './lib/util.js';

const ROWS = positiveIntEnv('BENCH_ROWS', 1_000_000);
const ROUNDS = positiveIntEnv('BENCH_ROUNDS', 9);
const VIEWS = positiveIntEnv('BENCH_VIEWS', 1);
const POOL = positiveIntEnv('BENCH_POOL', 4);
const RANGE = process.env.BENCH_RANGE ?? '24h';
const VIEWERS = (process.env.BENCH_VIEWERS ?? '1,2,4,10').split(',').map(Number);
const KEPT_DATA_DIR = process.env.BENCH_DATA_DIR;
const KEEP = process.env.BENCH_KEEP === '1';
const PATHS = ['bound', 'literal', 'sessions'] as const;
type PathName = (typeof PATHS)[number];
const CHOSEN = (process.env.BENCH_PATHS ?? PATHS.join(',')).split(',') as PathName[];
for (const p of CHOSEN) if (!PATHS.includes(p)) throw new Error(`BENCH_PATHS: unknown path ${p}`);

// ---------------------------------------------------------------------------------------------
// The dashboard's view of one domain.

function viewBodies(domainId: number): { headline: unknown[]; panels: unknown[] } {
  return viewQueries({ domains: [domainId], dateRange: RANGE, filters: [] }, false, PANELS);
}

/** Runs `work`; the CPU the rest of the machine used meanwhile, in cores (its busy time less this process's). */
async function withOtherLoad<T>(work: () => Promise<T>): Promise<{ value: T; otherCores: number }> {
  const busy0 = machineBusyTicks();
  const self0 = process.cpuUsage();
  const started = performance.now();
  const value = await work();
  const wallS = (performance.now() - started) / 1000;
  const self = process.cpuUsage(self0);
  return { value, otherCores: Math.max(0, (machineBusyTicks() - busy0 - (self.user + self.system) / 10_000) / 100 / wallS) };
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

interface Figure {
  viewsPerS: number;
  viewP50: number;
  viewP99: number;
  requestP50: number;
  requestP99: number;
  otherCores: number;
}

let server: Server | undefined;
const dir = KEPT_DATA_DIR ? null : fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-engine-'));
try {
  console.log(`bench/engine-concurrency: load ${load()}, ${os.cpus().length} cores; ${ROUNDS} rounds, viewers ${VIEWERS.join(', ')}, ${VIEWS} views each, pool ${POOL}, period ${RANGE}`);
  const dataDir = await benchDataDir({ kept: KEPT_DATA_DIR, dir, rows: ROWS, keep: KEEP });
  const env = childEnv(dataDir, BENCH_ADMIN, { LOG_LEVEL: 'warn' });
  server = await startServer(env, { detached: true });
  const idle = await waitIdle(server.pid, 10 * 60_000);
  await stopServer(server);
  server = undefined;
  console.log(`2. serve idle after ${fmt(idle.waitedMs)} ms (${idle.cpuS.toFixed(1)} CPU s), stopped`);

  const config = loadConfig({ ...env, READS_IN_FLIGHT: String(POOL) });
  const stores = await openStores(config, createLogger('warn'));
  const store = stores.clickhouse;
  // A client derived from the store's reads it with bound parameters (requestReads gives it back as it is).
  const oneAtATime = { ...config, readsInFlight: 1 };
  const paths: Record<PathName, { clickhouse: ClickHouseClient; reads: Reads }> = {
    bound: { clickhouse: derivedClient(store, {}), reads: createReads(oneAtATime) },
    literal: {
      clickhouse: derivedClient(store, {
        query: (params: QueryParams) => store.query({ ...params, query: withLiterals(params.query, params.query_params ?? {}), query_params: undefined }),
      } as Pick<ClickHouseClient, 'query'>),
      reads: createReads(oneAtATime),
    },
    sessions: { clickhouse: store, reads: createReads(config) },
  };
  const domains = await stores.db.query<{ id: number; name: string }>(sql`select id, name from domains order by id limit 10`);
  const principals = domains.map(
    (_, i): Principal => ({
      user: { id: 1_000_000 + i, name: `viewer ${i}`, email: `viewer${i}@example.com`, role: 'admin', active: true, token_version: 0, last_login_at: null, created_at: new Date(), updated_at: new Date() },
      permissions: new PermissionSet('admin', []),
      credential: 'session',
      expiresAt: null,
    }),
  );
  // One moment for every view: the same window for every path.
  const now = Date.now();
  const request = async (p: PathName, viewer: number, body: unknown) => {
    const started = performance.now();
    const answer = await queryLogs({ db: stores.db, config, ...paths[p] }, principals[viewer]!, queryBody.parse(body), now);
    return { answer, ms: performance.now() - started };
  };
  const view = async (p: PathName, viewer: number) => {
    const bodies = viewBodies(domains[viewer % domains.length]!.id);
    const started = performance.now();
    const headline = await Promise.all(bodies.headline.map((b) => request(p, viewer, b)));
    const panels = await Promise.all(bodies.panels.map((b) => request(p, viewer, b)));
    return { ms: performance.now() - started, requests: [...headline, ...panels] };
  };

  // Every path gives the same answers (the literal writer checked), and warms its caches.
  for (let v = 0; v < domains.length; v++) {
    const answers = await Promise.all(CHOSEN.map(async (p) => (await view(p, v)).requests.map((r) => JSON.stringify(r.answer))));
    for (let i = 1; i < answers.length; i++) {
      const differs = answers[i]!.findIndex((a, j) => a !== answers[0]![j]);
      if (differs >= 0) throw new Error(`${CHOSEN[i]} answers request ${differs} of ${domains[v]!.name}'s view differently from ${CHOSEN[0]}: ${answers[i]![differs]!.slice(0, 300)} vs ${answers[0]![differs]!.slice(0, 300)}`);
    }
  }
  console.log(`3. ${domains.length} domains (${domains.map((d) => d.name).join(', ')}); every path answers their views the same`);

  const figures = new Map<string, Figure[]>();
  for (let round = 0; round < ROUNDS; round++) {
    for (const viewers of VIEWERS) {
      // Each round starts with the next path: every path runs at every position as often.
      const order = CHOSEN.map((_, i) => CHOSEN[(i + round) % CHOSEN.length]!);
      for (const p of order) {
        const { value, otherCores } = await withOtherLoad(async () => {
          const started = performance.now();
          const runs = await Promise.all(
            Array.from({ length: viewers }, async (_, v) => {
              const out = [];
              for (let i = 0; i < VIEWS; i++) out.push(await view(p, v));
              return out;
            }),
          );
          return { runs: runs.flat(), wallS: (performance.now() - started) / 1000 };
        });
        const viewMs = value.runs.map((r) => r.ms);
        const requestMs = value.runs.flatMap((r) => r.requests.map((q) => q.ms));
        const figure = { viewsPerS: viewMs.length / value.wallS, viewP50: median(viewMs), viewP99: pct(viewMs, 99), requestP50: median(requestMs), requestP99: pct(requestMs, 99), otherCores };
        const key = `${viewers}\t${p}`;
        figures.set(key, [...(figures.get(key) ?? []), figure]);
        console.log(
          `round ${round + 1}, ${viewers} viewer(s), ${p}: ${figure.viewsPerS.toFixed(2)} views/s, view p50 ${fmt(figure.viewP50)} p99 ${fmt(figure.viewP99)} ms, request p50 ${fmt(figure.requestP50)} p99 ${fmt(figure.requestP99)} ms, other load ${otherCores.toFixed(2)} cores`,
        );
      }
    }
  }

  const spread = (xs: number[], digits = 0) => {
    const f = (n: number) => (digits ? n.toFixed(digits) : fmt(n));
    return `${f(median(xs))} (${f(Math.min(...xs))}–${f(Math.max(...xs))})`;
  };
  console.log(`\n4. median of ${ROUNDS} rounds (spread); vs bound: the ratio of views/s in the same round, median (spread)\n`);
  console.log('| viewers | path | views/s | vs bound | view p50 ms | view p99 ms | request p50 ms | request p99 ms | other load (cores) |');
  console.log('|---:|---|---:|---:|---:|---:|---:|---:|---:|');
  for (const viewers of VIEWERS) {
    const baseline = figures.get(`${viewers}\tbound`);
    for (const p of CHOSEN) {
      const runs = figures.get(`${viewers}\t${p}`)!;
      const ratio = baseline ? spread(runs.map((f, i) => f.viewsPerS / baseline[i]!.viewsPerS), 2) : '';
      console.log(
        `| ${viewers} | ${p} | ${spread(runs.map((f) => f.viewsPerS), 2)} | ${ratio} | ${spread(runs.map((f) => f.viewP50))} | ${spread(runs.map((f) => f.viewP99))} | ${spread(runs.map((f) => f.requestP50))} | ${spread(runs.map((f) => f.requestP99))} | ${spread(runs.map((f) => f.otherCores), 2)} |`,
      );
    }
  }
  await stores.close();
} catch (err) {
  failBench('engine-concurrency', err, server);
} finally {
  if (dir && !KEEP) fs.rmSync(dir, { recursive: true, force: true });
}
