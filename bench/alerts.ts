/**
 * bench/alerts: one alert evaluation round (src/alerts/evaluator.ts) over a fleet, on the embedded
 * stores (PGlite + chDB), or on a real Postgres with BENCH_DATABASE_URL: issue 30's "a round over
 * 1,000 domains × 10 rules; its time, and that it is one query".
 *
 *   npm run bench:alerts
 *   BENCH_DOMAINS=100 BENCH_ROWS=200000 BENCH_ROUNDS=5 npx tsx bench/alerts.ts     # a quick run
 *
 * The fleet: BENCH_DOMAINS domains (default 1,000) owned by one user, and 10 rules of that user
 * with scope {"domains": "all"} (so 10,000 (rule, domain) pairs), a mix of conditions (errorRate,
 * p95ResponseTime, averageResponseTime, requests, visitors, requestChange), three
 * of them with filters (a path glob, isNot bot, statusClass 5xx), durations of 60, 300 and 3600 s,
 * notifying two e-mail targets.
 *
 * The data: BENCH_ROWS access rows (default 2,000,000) generated inside ClickHouse (INSERT …
 * SELECT FROM numbers): three quarters over the hour before the bench's clock, one quarter over the
 * same hour a week earlier (requestChange's earlier window); domains skewed (the busiest has ~50×
 * the rows of the quietest), a few paths, 0.5 % 5xx, 2 % 4xx, response times exponential around
 * 120 ms, a fifth of the rows from bots. The user agents' classes (what `bot` reads) are those the
 * real ingest gave a few imported lines (importFiles), so the bot filter reads real classes.
 *
 * Then BENCH_ROUNDS rounds 30 s apart on a virtual clock, and in each round, in rotating order,
 * the same work done other ways, each timed side by side with the round's measure:
 *
 *  - round: evaluateOnce() through a ClickHouse client that counts its statements; the bench
 *    fails if a round issues more than one.
 *  - floor: `SELECT domain_id, count(), countIf(status_code >= 500) FROM access_logs WHERE
 *    timestamp in the last hour GROUP BY domain_id`: the least any evaluator of these rules must
 *    read (every domain's rows of the longest window, two cheap columns).
 *  - per rule: metrics.measure() once per rule (10 statements, each over all domains): the design
 *    of one query per rule.
 *  - per pair: metrics.measure() once per pair on a sample of BENCH_SAMPLE pairs (default 50),
 *    extrapolated to all pairs: the design of one query per alert and domain.
 *
 * Last, an incident: 5xx rows injected into BENCH_INCIDENT domains (default 300) in the last
 * minute, and one round: its transitions, its apply time, and that its notifications went into one
 * per target (RoundResult.notifications.targets equal to the distinct targets of the rules that
 * fired; the bench fails otherwise).
 *
 * Environment (optional):
 *   BENCH_DOMAINS       domains (default 1000)
 *   BENCH_ROWS          access rows, ¾ in the last hour, ¼ a week earlier (default 2000000)
 *   BENCH_ROUNDS        rounds timed (default 9)
 *   BENCH_SAMPLE        pairs measured one by one in each round (default 50)
 *   BENCH_INCIDENT      domains the incident hits (default 300)
 *   BENCH_DATABASE_URL  a Postgres to create a scratch database in (default: embedded PGlite)
 *   BENCH_KEEP=1        keep the DATA_DIR (its path is printed) to look into it afterwards
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { derivedClient, selectRows, type ClickHouseClient } from '../core/db/clickhouse.js';
import { sql } from '../core/db/sql.js';
import { loadConfig } from '../core/config.js';
import { createLogger } from '../core/log.js';
import { importFiles } from '../ingest/import.js';
import { createAlertEvaluator, type RoundResult } from '../src/alerts/evaluator.js';
import { measure, MIN_ERROR_RATE_REQUESTS, type Measure } from '../src/alerts/metrics.js';
import { queryFiltersOf, type AlertDefinition } from '../src/alerts/schemas.js';
import { evaluationPairs, insertAlertWithinCap } from '../src/alerts/store.js';
import { insertDomain } from '../src/domains/store.js';
import { findUserByEmail } from '../src/users/store.js';
import { openRuntime } from '../src/runtime.js';
import { freshDatabase } from '../test/support/app.js';
import { failBench } from './lib/serve-child.js';
import { fmt, load, median, positiveIntEnv } from './lib/util.js';
import { HOUR_MS } from '../core/durations.js';

const DOMAINS = positiveIntEnv('BENCH_DOMAINS', 1000);
const ROWS = positiveIntEnv('BENCH_ROWS', 2_000_000);
const ROUNDS = positiveIntEnv('BENCH_ROUNDS', 9);
const SAMPLE = positiveIntEnv('BENCH_SAMPLE', 50);
const INCIDENT = Math.min(DOMAINS, positiveIntEnv('BENCH_INCIDENT', 300));
const KEEP = process.env.BENCH_KEEP === '1';
const INTERVAL = 30_000;
const WEEK = 7 * 86_400_000;
const TARGETS = ['oncall-a@example.com', 'oncall-b@example.com'];

type Rule = Omit<AlertDefinition, 'notificationMethod' | 'notificationTarget' | 'enabled'>;

/**
 * The ten rules. On the generated traffic none fires (the quietest domains still have ~10 rows a
 * minute; 0.5 % 5xx; p95 about 360 ms); the incident (every 5xx in the last minute) makes the
 * errorRate, 5xx-count and checkout rules fire on the domains it hits.
 */
const RULES: Rule[] = [
  { name: 'errors 5 min', condition: 'errorRate', operator: 'greaterThan', threshold: 0.05, duration: 300, filters: [] },
  { name: 'errors 1 min', condition: 'errorRate', operator: 'greaterThan', threshold: 0.2, duration: 60, filters: [] },
  { name: 'slow p95 5 min', condition: 'p95ResponseTime', operator: 'greaterThan', threshold: 2000, duration: 300, filters: [] },
  { name: 'slow average 1 min', condition: 'averageResponseTime', operator: 'greaterThan', threshold: 1500, duration: 60, filters: [] },
  { name: 'quiet 1 h', condition: 'requests', operator: 'lessThan', threshold: 1, duration: 3600, filters: [] },
  { name: 'traffic halved vs last week', condition: 'requestChange', operator: 'lessThan', threshold: -0.5, duration: 3600, filters: [] },
  { name: 'visitor flood 1 h', condition: 'visitors', operator: 'greaterThan', threshold: 1_000_000, duration: 3600, filters: [] },
  { name: 'checkout errors 5 min', condition: 'errorRate', operator: 'greaterThan', threshold: 0.1, duration: 300, filters: [['glob', 'path', ['/checkout*']]] },
  { name: 'humans slow p95 5 min', condition: 'p95ResponseTime', operator: 'greaterThan', threshold: 1500, duration: 300, filters: [['isNot', 'bot', [true]]] },
  { name: '5xx count 1 min', condition: 'requests', operator: 'greaterThan', threshold: 50, duration: 60, filters: [['is', 'statusClass', ['5xx']]] },
];

const AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:125.0) Gecko/20100101 Firefox/125.0',
  'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0.0.0 Mobile Safari/537.36',
  'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
];
const PATHS = ['/', '/products/42', '/products/list?page=2', '/checkout/pay', '/checkout/cart', '/static/app.js', '/static/site.css', '/api/cart', '/blog/post-7', '/login'];

const ms = (x: number) => `${x.toFixed(1)} ms`;
const spread = (xs: number[]) => `${ms(median(xs))} (${Math.min(...xs).toFixed(1)}–${Math.max(...xs).toFixed(1)})`;
const ratio = (a: number[], b: number[]) => {
  const r = a.map((x, i) => x / b[i]!);
  return `${median(r).toFixed(2)}× (${Math.min(...r).toFixed(2)}–${Math.max(...r).toFixed(2)})`;
};

/** `client` with every statement counted (query, command, exec, insert). */
function countingClient(client: ClickHouseClient): { client: ClickHouseClient; statements: () => number; reset: () => void } {
  let n = 0;
  const derived = derivedClient(client, { query: ((params) => (n++, client.query(params))) as ClickHouseClient['query'] });
  Object.assign(derived, {
    command: ((params) => (n++, client.command(params))) as ClickHouseClient['command'],
    exec: ((params) => (n++, client.exec(params))) as ClickHouseClient['exec'],
    insert: ((params) => (n++, client.insert(params))) as ClickHouseClient['insert'],
  });
  return { client: derived, statements: () => n, reset: () => (n = 0) };
}

type Ran = Extract<RoundResult, { ran: true }>;

async function main(): Promise<void> {
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-bench-alerts-'));
  const database = await freshDatabase(process.env.BENCH_DATABASE_URL);
  const log = createLogger('warn');
  const config = loadConfig({
    DATA_DIR: dataDir,
    ADMIN_EMAIL: 'bench-admin@example.com',
    ADMIN_PASSWORD: 'bench-password-1',
    JWT_SECRET: 'bench-secret-that-is-at-least-32-bytes-long!',
    ...(database.url ? { DATABASE_URL: database.url } : {}),
  });
  const runtime = await openRuntime(config, log, () => {});
  const { db, clickhouse } = runtime;
  try {
    console.log(`bench/alerts: ${DOMAINS} domains × ${RULES.length} rules, ${fmt(ROWS)} rows, ${ROUNDS} rounds (${db.kind}); load ${load()}, ${os.cpus().length} cores`);
    let clock = Math.floor(Date.now() / INTERVAL) * INTERVAL;
    const seeded = performance.now();

    // The owner: the administrator (who sees every domain) owning them all.
    const admin = (await findUserByEmail(db, config.adminEmail))!;
    const domains: { id: number; name: string }[] = [];
    for (let i = 0; i < DOMAINS; i++) {
      const name = `d${i}.fleet.example.com`;
      domains.push({ id: (await insertDomain(db, { name, ownerId: admin.id })).id, name });
    }
    const configurer = { id: admin.id, name: admin.name ?? 'bench', email: admin.email };
    for (const [i, rule] of RULES.entries()) {
      const row = await insertAlertWithinCap(db, { scope: { domains: 'all' } }, configurer, { ...rule, notificationMethod: 'email', notificationTarget: TARGETS[i % TARGETS.length]!, enabled: true }, Infinity);
      if (!row) throw new Error(`rule ${rule.name} refused`);
    }

    // The agents' classes as the real ingest gives them: one line per agent, two days back.
    const seedFile = path.join(dataDir, 'agents.log');
    const seedTime = new Date(clock - 2 * 86_400_000);
    const timeLocal = `${String(seedTime.getUTCDate()).padStart(2, '0')}/${seedTime.toLocaleString('en-US', { month: 'short', timeZone: 'UTC' })}/${seedTime.getUTCFullYear()}:${String(seedTime.getUTCHours()).padStart(2, '0')}:${String(seedTime.getUTCMinutes()).padStart(2, '0')}:00 +0000`;
    await fs.writeFile(seedFile, AGENTS.map((a) => `${domains[0]!.name} 10.0.0.1 - - [${timeLocal}] "GET / HTTP/1.1" 200 10 "-" "${a}" 0.010\n`).join(''));
    const FORMAT = '$host $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';
    const summary = await importFiles([seedFile], { domain: null, type: 'access', format: FORMAT, timezone: 'UTC' }, { db, clickhouse, log, dataDir, signal: new AbortController().signal, retentionDays: 90 });
    if (summary.inserted !== AGENTS.length) throw new Error(`agent seed: ${JSON.stringify(summary)}`);
    const classes = await selectRows<{ user_agent: string; agent_class: string }>(clickhouse, 'SELECT user_agent, toString(any(agent_class)) AS agent_class FROM access_logs GROUP BY user_agent', {});
    const classOf = new Map(classes.map((c) => [c.user_agent, c.agent_class]));
    if (AGENTS.some((a) => !classOf.get(a) || classOf.get(a) === '0')) throw new Error(`agents not classified: ${JSON.stringify(classes)}`);

    // The rows: row n → domain floor(D × u^1.5) (skewed to the low indices), ¼ a week back.
    await clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time, agent_class)
        SELECT {domains:Array(UInt32)}[1 + toUInt32(floor({n:UInt32} * pow((cityHash64(number, 1) % 1000000) / 1e6, 1.5)))] AS domain_id,
          1000000000000 + number,
          fromUnixTimestamp64Milli({now:Int64} - if(number % 4 = 0, {week:Int64}, 0) - toInt64(1 + cityHash64(number, 2) % {hour:UInt64}), 'UTC'),
          IPv4NumToString(toUInt32(167772160 + cityHash64(number, 3) % 20000)),
          if(number % 10 = 0, 'POST', 'GET'),
          {paths:Array(String)}[1 + cityHash64(number, 4) % length({paths:Array(String)})],
          'HTTP/1.1',
          multiIf(cityHash64(number, 5) % 1000 < 5, 500, cityHash64(number, 5) % 1000 < 25, 404, cityHash64(number, 5) % 1000 < 60, 304, 200),
          1000 + cityHash64(number, 6) % 50000, '',
          {agents:Array(String)}[1 + cityHash64(number, 7) % length({agents:Array(String)})] AS ua,
          toUInt32(least(60000, -log((1 + cityHash64(number, 8) % 1000000) / 1000001) * 120)),
          {classes:Array(UInt64)}[indexOf({agents:Array(String)}, ua)]
        FROM numbers({rows:UInt64})`,
      query_params: {
        domains: domains.map((d) => d.id),
        n: DOMAINS,
        now: clock,
        week: WEEK,
        hour: HOUR_MS,
        paths: PATHS,
        agents: AGENTS,
        classes: AGENTS.map((a) => Number(classOf.get(a)!)),
        rows: ROWS,
      },
    });
    await clickhouse.command({ query: 'OPTIMIZE TABLE access_logs FINAL' });
    const [spreadRow] = await selectRows<{ busiest: string; quietest: string; domains: string }>(
      clickhouse,
      `SELECT max(c) AS busiest, min(c) AS quietest, count() AS domains FROM (SELECT domain_id, count() AS c FROM access_logs WHERE timestamp > fromUnixTimestamp64Milli({from:Int64}, 'UTC') GROUP BY domain_id)`,
      { from: clock - HOUR_MS },
    );
    console.log(
      `seeded in ${((performance.now() - seeded) / 1000).toFixed(1)} s: last hour's rows per domain ${spreadRow!.quietest}–${spreadRow!.busiest} over ${spreadRow!.domains} domains`,
    );

    // The evaluator, through a client that counts statements.
    const counting = countingClient(clickhouse);
    const evaluator = createAlertEvaluator({ db, clickhouse: counting.client, mailer: runtime.mailer, log, baseUrl: config.baseUrl, intervalMs: INTERVAL, now: () => clock });
    const roundOnce = async (what: string): Promise<Ran> => {
      clock += INTERVAL;
      counting.reset();
      const result = await evaluator.evaluateOnce();
      if (!result.ran) throw new Error(`${what}: the round did not run (${result.reason})`);
      if (counting.statements() !== 1) throw new Error(`${what}: the round issued ${counting.statements()} ClickHouse statements, not one`);
      return result;
    };

    // The pairs as the evaluator sees them, for the per-rule and per-pair designs.
    const { pairs } = await evaluationPairs(db);
    const measures: Measure[] = pairs.map((p) => ({ domainId: p.domain_id, duration: p.duration, filters: queryFiltersOf(p.filters), condition: p.condition }));
    const ruleMeasures = new Map<number, Measure[]>();
    for (const [i, m] of measures.entries()) {
      const list = ruleMeasures.get(pairs[i]!.alert_id) ?? [];
      list.push(m);
      ruleMeasures.set(pairs[i]!.alert_id, list);
    }
    const byRule = [...ruleMeasures.values()];
    const sample = Array.from({ length: Math.min(SAMPLE, measures.length) }, (_, k) => measures[Math.floor((k * measures.length) / Math.min(SAMPLE, measures.length))]!);

    const floorQuery = `SELECT domain_id, count(), countIf(status_code >= 500) FROM access_logs
      WHERE timestamp > fromUnixTimestamp64Milli({from:Int64}, 'UTC') AND timestamp <= fromUnixTimestamp64Milli({to:Int64}, 'UTC') GROUP BY domain_id`;
    const timed = async (work: () => Promise<unknown>) => {
      const t0 = performance.now();
      await work();
      return performance.now() - t0;
    };
    const designs = {
      floor: () => timed(() => selectRows(clickhouse, floorQuery, { from: clock - HOUR_MS, to: clock })),
      perRule: () => timed(async () => { for (const rule of byRule) await measure(clickhouse, rule, clock, MIN_ERROR_RATE_REQUESTS); }),
      perPair: async () => ((await timed(async () => { for (const m of sample) await measure(clickhouse, [m], clock, MIN_ERROR_RATE_REQUESTS); })) * measures.length) / sample.length,
    };

    // The first round writes nothing unless something fires; warm up once (caches, the JIT).
    const first = await roundOnce('first round');
    await designs.floor();
    console.log(`first round: ${ms(first.ms)} (claim ${ms(first.phases.claimMs)}, measure ${ms(first.phases.measureMs)}, apply ${ms(first.phases.applyMs)}), ${first.pairs} pairs, ${first.written} written`);

    const rounds: Ran[] = [];
    const times = { floor: [] as number[], perRule: [] as number[], perPair: [] as number[] };
    const order = ['round', 'floor', 'perRule', 'perPair'] as const;
    for (let i = 0; i < ROUNDS; i++) {
      // Rotate the order so that no design always runs first (or after the same one).
      for (let k = 0; k < order.length; k++) {
        const which = order[(i + k) % order.length]!;
        if (which === 'round') rounds.push(await roundOnce(`round ${i}`));
        else times[which].push(await designs[which]());
      }
    }
    const of = (pick: (r: Ran) => number) => rounds.map(pick);
    const measureMs = of((r) => r.phases.measureMs);
    console.log(`\nrounds (${ROUNDS}, each ${rounds[0]!.pairs} pairs, one ClickHouse statement each: checked), median (min–max):`);
    console.log(`  whole round   ${spread(of((r) => r.ms))}`);
    console.log(`  claim         ${spread(of((r) => r.phases.claimMs))}`);
    console.log(`  measure       ${spread(measureMs)}`);
    console.log(`  apply         ${spread(of((r) => r.phases.applyMs))}`);
    console.log(`  written       ${rounds.map((r) => r.written).join(', ')}`);
    console.log(`the same work other ways, same rounds:`);
    console.log(`  floor (1 statement)                 ${spread(times.floor)}; measure ÷ floor ${ratio(measureMs, times.floor)}`);
    console.log(`  per rule (${byRule.length} statements)              ${spread(times.perRule)}; per rule ÷ measure ${ratio(times.perRule, measureMs)}`);
    console.log(`  per pair (${measures.length} statements, ${sample.length} timed) ${spread(times.perPair)}; per pair ÷ measure ${ratio(times.perPair, measureMs)}`);

    // The incident: every row of the last minute of INCIDENT domains answered 503, 100 of them per domain.
    const hit = domains.slice(0, INCIDENT);
    await clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time, agent_class)
        SELECT {domains:Array(UInt32)}[1 + number % length({domains:Array(UInt32)})], 2000000000000 + number,
          fromUnixTimestamp64Milli({now:Int64} - 1 - toInt64(number % 55000), 'UTC'), '10.9.9.9', 'GET', '/checkout/pay', 'HTTP/1.1', 503, 200, '',
          {agent:String}, 30, {class:UInt64}
        FROM numbers({rows:UInt64})`,
      query_params: { domains: hit.map((d) => d.id), now: clock + INTERVAL, rows: hit.length * 100, agent: AGENTS[0]!, class: Number(classOf.get(AGENTS[0]!)!) },
    });
    const incident = await roundOnce('incident round');
    const [fired] = await db.query<{ transitions: number; rules: number; targets: number; domains: number }>(sql`
      select count(*)::int as transitions, count(distinct h.alert_id)::int as rules, count(distinct a.notification_target)::int as targets, count(distinct h.domain_id)::int as domains
      from alert_history h join alerts a on a.id = h.alert_id
      where h.at = ${new Date(incident.at)} and h.to_state = 'firing'`);
    const events = incident.notifications.firing + incident.notifications.resolved + incident.notifications.reminder;
    console.log(
      `\nincident (${INCIDENT} domains, 100 × 503 each in the last minute): round ${ms(incident.ms)} (claim ${ms(incident.phases.claimMs)}, measure ${ms(incident.phases.measureMs)}, apply ${ms(incident.phases.applyMs)}), ` +
        `${incident.written} pairs written, ${fired!.transitions} transitions to firing (${fired!.rules} rules × ${fired!.domains} domains), ${events} events in ${incident.notifications.targets} notifications for ${fired!.targets} targets`,
    );
    if (incident.notifications.targets !== fired!.targets || fired!.transitions < INCIDENT) {
      throw new Error(`incident: ${events} events went into ${incident.notifications.targets} notifications, expected one per target (${fired!.targets}), with at least ${INCIDENT} transitions`);
    }
    const after = await roundOnce('round after the incident');
    console.log(`next round: ${ms(after.ms)} (apply ${ms(after.phases.applyMs)}), ${after.written} written`);
    await evaluator.stop();
  } finally {
    await runtime.close();
    await database.drop();
    if (KEEP) console.log(`DATA_DIR kept: ${dataDir}`);
    else await fs.rm(dataDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => failBench('alerts', err, undefined));
