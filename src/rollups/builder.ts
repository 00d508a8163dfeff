/**
 * The stats rollup builder (sql/clickhouse/005_stats_deferred_rollups.sql, 006_stats_hour_tops.sql):
 * aggregates complete hours of access_logs into access_rollups, then complete days from their
 * hours, each with its short top lists (access_tops), off the ingest path. src/stats/window.ts reads a bucket from the rollups only when it is built, that is when its
 * total row holds as many requests as access_hour_rows counted for it, and from access_logs
 * otherwise; so this job decides how fast stats are, never what they say.
 *
 * Each bucket is written by one INSERT … SELECT of differences (the rows' figures minus what the
 * table holds), which makes a rebuild idempotent and a crash at any point harmless: the next round
 * finds the bucket unbuilt and writes what is still missing. Two builders at once could write the
 * same difference twice; `serve` runs one per database (a lease in Postgres, core/db/leases.ts),
 * and a bucket counted twice is found (more requests than rows), deleted and built again.
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { TupleParam } from '@clickhouse/client';
import { selectRows, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { claimLease, releaseLease } from '../../core/db/leases.js';
import type { Db } from '../../core/db/postgres.js';
import type { Logger } from '../../core/log.js';
import type { Metrics } from '../metrics/registry.js';
import { LIST_PARTIALS, PARTIALS, rawPartial, ROLLUP_LISTS, rollupPartial, SHORT_LISTS, type PartialState } from '../stats/registry.js';
import { countedPerList, topsVersions } from './shared-sql.js';
import { TOP_KEYS } from './short-lists.js';

export interface RollupOptions {
  /** Only hours touched by an insert in the last `lookbackS` seconds, or of the last 3 hours; null: all. */
  lookbackS: number | null;
  /** An hour (a day) is built once it ended this many seconds ago, so late lines rarely reopen it. */
  settleS: number;
  /** Buckets are not started after this many ms; the rest waits for the next round. */
  budgetMs: number;
  retentionDays: number;
}

export interface RollupRound {
  hours: number;
  days: number;
  /** Buckets that held more than their rows (written twice) and were deleted and built again. */
  repaired: number;
  /** Work left for the next round (the budget or the batch limit was reached). */
  more: boolean;
}

/** Buckets listed per query; a round takes the newest first. */
const BATCH = 500;
const EVERYTHING_S = 100 * 365 * 86_400;

/** The short lists' versions (topsVersions) of the candidates of one span, by (domain_id, `column`). */
const candidateTops = (span: 'hour' | 'day', column: string) =>
  `SELECT domain_id, bucket AS ${column}, version FROM (${topsVersions('domain_id, bucket', `span = '${span}' AND (domain_id, bucket) IN (SELECT domain_id, ${column} FROM candidates)`)})`;

/**
 * The built requests of `span`'s buckets among the candidates, summed by `key` (the candidate's
 * bucket: a bucket's own start, or the day its hours fall in).
 */
const builtRequests = (span: 'hour' | 'day', keyOf: string, key: string) => `
  SELECT domain_id, ${keyOf} AS ${key}, sum(requests) AS requests
  FROM access_rollups
  WHERE span = '${span}' AND dim = 'total' AND (domain_id, ${keyOf}) IN (SELECT domain_id, ${key} FROM candidates)
  GROUP BY domain_id, ${key}`;

/**
 * The dirty buckets of a span, newest first. Candidates are buckets written to lately (or recent),
 * complete for `settle` seconds, inside the retention; a candidate is dirty when its rows counted
 * differ from its built total or from its short lists' version. A day is built from its hours once every hour of it is
 * built (hours = counted), and its short top lists with it (a bucket built but without them, or
 * with older ones, is listed again); the hours' query also says how many it found beyond its LIMIT.
 */
function dirtyQuery(span: 'hour' | 'day'): string {
  const hour = span === 'hour';
  const [start, seconds, recent] = hour ? ['toStartOfHour', 3600, 'toIntervalHour(3)'] : ['toStartOfDay', 86400, 'toIntervalDay(2)'];
  return `
WITH candidates AS (
  SELECT domain_id, ${hour ? 'hour' : 'toStartOfDay(hour) AS day'}, sum(rows) AS counted
  FROM access_hour_rows
  WHERE hour >= ${start}(now() - toIntervalDay({retentionDays:UInt32}))
  GROUP BY domain_id, ${span}
  HAVING ${span} + ${seconds} <= now() - {settleS:UInt32}
     AND (max(last_insert) >= now64(3) - toIntervalSecond({lookbackS:UInt32}) OR ${span} >= now() - ${recent})
)
SELECT c.domain_id AS domain_id, toUnixTimestamp(c.${span}) AS bucket, c.counted AS counted, b.requests AS built${hour ? ', count() OVER () AS unbuilt' : ''}
FROM candidates AS c${hour ? '' : `
LEFT JOIN (${builtRequests('hour', 'toStartOfDay(bucket)', 'day')}
) AS h USING (domain_id, day)`}
LEFT JOIN (${builtRequests(span, 'bucket', span)}
) AS b USING (domain_id, ${span})
LEFT JOIN (${candidateTops(span, span)}) AS v USING (domain_id, ${span})
WHERE ${hour ? 'c.counted != b.requests OR c.counted != v.version' : '(c.counted != b.requests OR c.counted != v.version) AND c.counted = h.requests'}
ORDER BY c.${span} DESC, c.domain_id
LIMIT ${BATCH}`;
}

const DIRTY = { hour: dirtyQuery('hour'), day: dirtyQuery('day') } as const;

/**
 * The two kinds of rows a bucket has: its total row, holding every partial state of the
 * statistics' registry, each in its rollup column; and its list rows, holding the sums of
 * LIST_PARTIALS (the other columns keep their defaults). `rows` picks them in access_rollups
 * (qualified: the SELECTs below alias dim).
 */
const ROWS = {
  lists: { partials: LIST_PARTIALS, rows: "access_rollups.dim != 'total'" },
  totals: { partials: Object.values(PARTIALS), rows: "access_rollups.dim = 'total'" },
} as const satisfies Record<string, { partials: readonly PartialState[]; rows: string }>;
type RowKind = keyof typeof ROWS;

/**
 * The rows of a group's buckets: `bucketS`, the SQL of a row's bucket start in seconds, is among the
 * group's (domain, bucket) pairs. The domain list and the caller's time range let the primary key
 * narrow the read; the pairs pick the buckets within it. A group may hold many domains' buckets:
 * a statement costs tens of milliseconds whatever it reads, and a fleet of a thousand small domains
 * has a thousand buckets to build every hour.
 */
const inGroup = (bucketS: string) =>
  `domain_id IN {domainIds:Array(UInt32)} AND (domain_id, ${bucketS}) IN {pairs:Array(Tuple(UInt32, UInt32))}`;

/** access_rollups rows of the group's buckets (bucket is their start). */
const GROUP_BUCKETS = `bucket >= toDateTime({fromS:UInt32}, 'UTC') AND bucket < toDateTime({toS:UInt32}, 'UTC') AND ${inGroup('toUnixTimestamp(bucket)')}`;

/** What access_rollups holds for the buckets being built, by domain, bucket, list and key: the part a build subtracts (the partials written as differences). */
const held = (span: 'hour' | 'day', kind: RowKind) => `
  SELECT domain_id, bucket, CAST(dim, 'Int8') AS dim, key, ${ROWS[kind].partials.filter((x) => x.rollup.difference).map(rollupPartial).join(', ')}
  FROM access_rollups
  WHERE span = '${span}' AND ${ROWS[kind].rows} AND ${GROUP_BUCKETS}
  GROUP BY domain_id, bucket, dim, key`;

/**
 * One thread per build statement: the builder is background work beside the API and ingest, and
 * one thread's hash tables are half the memory. A SETTINGS clause, never `clickhouse_settings`:
 * chDB's connection turns those into SET statements that stay on the session, and every later
 * query of the process (the API's too) would run on one thread.
 */
const BUILD_SETTINGS = 'SETTINGS max_threads = 1';

/**
 * Writes `fresh` (the buckets' partials by domain, bucket, dim and key, named p_<partial> as the
 * registry's rawPartial and rollupPartial name them) minus what the buckets hold: a sum or a
 * histogram as its difference, a set or a maximum whole (the registry's `rollup.difference`).
 */
const writeDifference = (span: 'hour' | 'day', kind: RowKind, fresh: string) => `
INSERT INTO access_rollups (domain_id, span, dim, bucket, key, ${ROWS[kind].partials.map((x) => x.rollup.column).join(', ')})
SELECT domain_id, '${span}', dim, bucket, key,
       ${ROWS[kind].partials.map((x) => (x.rollup.difference ? x.rollup.difference(`fresh.p_${x.name}`, `held.p_${x.name}`) : `fresh.p_${x.name}`)).join(', ')}
FROM (${fresh}) AS fresh
LEFT JOIN (${held(span, kind)}) AS held USING (domain_id, bucket, dim, key)
WHERE fresh.p_requests > held.p_requests
${BUILD_SETTINGS}`;

/**
 * The rows of the hours being built: the time range lets the primary key narrow the read, the hour
 * list picks the hours within it.
 */
const HOUR_ROWS = `access_logs
  WHERE timestamp >= fromUnixTimestamp64Milli({fromMs:Int64}, 'UTC') AND timestamp < fromUnixTimestamp64Milli({toMs:Int64}, 'UTC')
    AND ${inGroup('toUnixTimestamp(toStartOfHour(timestamp))')}`;

/** The built hours of the days being built. */
const DAY_HOURS = `access_rollups
  WHERE span = 'hour'
    AND bucket >= toDateTime({fromS:UInt32}, 'UTC') AND bucket < toDateTime({toS:UInt32}, 'UTC')
    AND ${inGroup('toUnixTimestamp(toStartOfDay(bucket))')}`;

/** The lists that must hold every row of a built bucket (the registry's `bounds`). */
const BOUNDING_LISTS = ROLLUP_LISTS.filter((l) => l.bounds);

/**
 * The totals' fresh rows with their requests bounded by what each bounding list of the bucket holds
 * once the lists are written (0 where one has no row). Lists and totals are two statements, each
 * reading the rows as they are when it starts: lines stored in between would give a total that
 * equals the count (built) over lists without those lines; and the agent class list leaves out the
 * rows not classified yet. Bounded, such a bucket stays unbuilt and is read raw, and a later round
 * brings the lists up and then the total (its other partials are differences, 0 by then).
 */
const boundedByLists = (span: 'hour' | 'day', fresh: string) => `
  SELECT fresh.* REPLACE (least(fresh.p_requests, listed.requests) AS p_requests)
  FROM (${fresh}) AS fresh
  LEFT JOIN (
    SELECT domain_id, bucket, if(count() = ${BOUNDING_LISTS.length}, min(requests), 0) AS requests FROM (
      SELECT domain_id, bucket, dim, sum(requests) AS requests FROM access_rollups
      WHERE span = '${span}' AND dim IN (${BOUNDING_LISTS.map((l) => `'${l.dim}'`).join(', ')}) AND ${GROUP_BUCKETS}
      GROUP BY domain_id, bucket, dim
    )
    GROUP BY domain_id, bucket
  ) AS listed USING (domain_id, bucket)`;

/** The list rows' partials beside the requests (which countedPerList counts itself). */
const LIST_SUMS = LIST_PARTIALS.filter((x) => x !== PARTIALS.requests);

const HOUR = "toDateTime(toStartOfHour(timestamp), 'UTC')";
const DAY = "toDateTime(toStartOfDay(bucket), 'UTC')";

/**
 * A span's two build statements: the lists (every row once per list of the registry's
 * ROLLUP_LISTS, with the sums of LIST_PARTIALS, without the empty keys of those that skip them), then the totals (the registry's partials of
 * the rows, or of the hours' total rows for a day). Lists first: a builder that dies between the
 * two leaves the totals short of the rows, so the bucket still reads as unbuilt and is built again
 * (the lists then add nothing), never totals that claim lists not written.
 */
const BUILD = {
  hour: [
    writeDifference(
      'hour',
      'lists',
      `SELECT domain_id, bucket, list AS dim, key, requests AS p_${PARTIALS.requests.name}, ${LIST_SUMS.map((x) => `p_${x.name}`).join(', ')}
  FROM (${countedPerList(ROLLUP_LISTS, { domain_id: 'domain_id', bucket: HOUR }, HOUR_ROWS, Object.fromEntries(LIST_SUMS.map((x) => [`p_${x.name}`, x.raw])))})`,
    ),
    writeDifference(
      'hour',
      'totals',
      boundedByLists('hour', `SELECT domain_id, ${HOUR} AS bucket, toInt8(0) AS dim, '' AS key, ${ROWS.totals.partials.map(rawPartial).join(', ')} FROM ${HOUR_ROWS} GROUP BY domain_id, bucket`),
    ),
  ],
  // A day reads its built hours, which the builder writes before it; the bound holds all the same
  // should two builders run at once (see the header).
  day: (['lists', 'totals'] as const).map((kind) => {
    const fresh = `SELECT domain_id, ${DAY} AS bucket, CAST(dim, 'Int8') AS dim, key, ${ROWS[kind].partials.map(rollupPartial).join(', ')} FROM ${DAY_HOURS} AND ${ROWS[kind].rows} GROUP BY domain_id, bucket, dim, key`;
    return writeDifference('day', kind, kind === 'totals' ? boundedByLists('day', fresh) : fresh);
  }),
} as const;

/** The lists that have short lists, each with the sums (partial names) they are ordered by, as SQL literals (the registry's constants). */
const SHORT_BY = [...new Set(SHORT_LISTS.map((s) => s.list))].map((list) => ({ list, by: SHORT_LISTS.filter((s) => s.list === list).map((s) => `'${s.by.name}'`) }));
const RANKED = [...new Set(SHORT_LISTS.map((s) => s.by))];

/**
 * The buckets' short lists (the registry's SHORT_LISTS) from their built rows: per list and sum
 * `by`, the first TOP_KEYS keys by that sum, then key (groupArraySorted keeps the smallest tuples,
 * so sums are negated), each with its LIST_PARTIALS sums, and the next key's sum as the threshold.
 * Every entry for every bucket, empty ones too, with the bucket's total as `built_requests`: the
 * reader's check that they are current.
 */
const buildTops = (span: 'hour' | 'day') => `
INSERT INTO access_tops (domain_id, span, dim, by, bucket, built_at, built_requests, keys, sums, threshold)
SELECT domain_id, '${span}', list, by, bucket, now64(3, 'UTC'), totals.requests,
       arrayMap(e -> e.2, arraySlice(sorted, 1, ${TOP_KEYS})),
       map(${LIST_PARTIALS.map((x, i) => `'${x.name}', arrayMap(e -> e.${i + 3}, arraySlice(sorted, 1, ${TOP_KEYS}))`).join(', ')}),
       if(length(sorted) > ${TOP_KEYS}, toUInt64(-sorted[${TOP_KEYS + 1}].1), 0)
FROM (
  SELECT domain_id, bucket, sum(requests) AS requests
  FROM access_rollups
  WHERE span = '${span}' AND dim = 'total' AND ${GROUP_BUCKETS}
  GROUP BY domain_id, bucket
) AS totals
CROSS JOIN (
  SELECT toInt8(entry.1) AS list, toString(entry.2) AS by
  FROM (SELECT arrayJoin([${SHORT_LISTS.map((s) => `(${s.list.number}, '${s.by.name}')`).join(', ')}]) AS entry)
) AS lists
LEFT JOIN (
  SELECT domain_id, list, ranked_by AS by, bucket,
         groupArraySorted(${TOP_KEYS + 1})((-toInt64(multiIf(${RANKED.map((x) => `ranked_by = '${x.name}', p_${x.name}`).join(', ')}, 0)), key, ${LIST_PARTIALS.map((x) => `p_${x.name}`).join(', ')})) AS sorted
  FROM (
    SELECT *, arrayJoin(multiIf(${SHORT_BY.map((s) => `list = ${s.list.number}, [${s.by.join(', ')}]`).join(', ')}, [])) AS ranked_by
    FROM (
      -- Named apart from dim: an alias would shadow the column in WHERE.
      SELECT domain_id, CAST(dim, 'Int8') AS list, bucket, key, ${LIST_PARTIALS.map(rollupPartial).join(', ')}
      FROM access_rollups
      WHERE span = '${span}' AND dim IN (${SHORT_BY.map((s) => `'${s.list.dim}'`).join(', ')}) AND ${GROUP_BUCKETS}
      GROUP BY domain_id, list, bucket, key
    )
  )
  GROUP BY domain_id, list, ranked_by, bucket
) AS keyed USING (domain_id, list, by, bucket)
${BUILD_SETTINGS}`;

const BUILD_TOPS = { hour: buildTops('hour'), day: buildTops('day') } as const;

// Waits until the rows are gone: the rebuild that follows must not see them.
const DELETE_BUCKETS = `DELETE FROM access_rollups
WHERE span = {span:String} AND ${GROUP_BUCKETS}
SETTINGS lightweight_deletes_sync = 2`;

interface DirtyBucket {
  domain_id: number;
  bucket: number;
  counted: string | number;
  built: string | number;
  /** The hours' query only: how many it found, beyond its LIMIT. */
  unbuilt?: string | number;
}

const dirtyBuckets = (clickhouse: ClickHouseClient, query: string, options: RollupOptions) =>
  selectRows<DirtyBucket>(clickhouse, query, { retentionDays: options.retentionDays, settleS: options.settleS, lookbackS: options.lookbackS ?? EVERYTHING_S });

/**
 * What the dirty-bucket queries depend on, as one string: the rows counted (their sum and newest
 * insert, which every stored line changes, and a deleted domain's counts too) and the newest hour
 * settled by ClickHouse's clock (the day queries' days end on hours). While it stays, a round
 * finds what the last one found.
 */
async function readRoundInputs(clickhouse: ClickHouseClient, settleS: number): Promise<string> {
  const [row] = await selectRows<{ inputs: string }>(
    clickhouse,
    `SELECT toString((sum(rows), max(last_insert), toStartOfHour(now() - toIntervalSecond({settleS:UInt32})))) AS inputs FROM access_hour_rows`,
    { settleS },
  );
  return row!.inputs;
}

/**
 * Rows one build statement reads at most (its buckets' counts): a single larger bucket is built
 * alone. The GROUP BY holds every distinct url, agent and referrer of those rows at once, each with
 * an aggregate state: at 1,000,000 rows (and 31 days per day statement) a 10M-row backlog took the
 * server to 6.8 GB RSS.
 */
const ROWS_PER_BUILD = 200_000;
/** Days of one domain one build statement takes at most (a day reads its hours' rows for every key). */
const DAYS_PER_BUILD = 1;
/**
 * How far apart the buckets of a group of several domains may lie: its statements read every row of
 * its domains between its first and last bucket (the primary key narrows by domain and time, then
 * the pairs pick), so one old late hour of one domain does not make a group read a month of every
 * domain beside it.
 */
const GROUP_SPAN_S = { hour: 6 * 3600, day: 7 * 86_400 } as const;

/** One domain's buckets (newest first as listed) in groups within one statement's limits. */
function domainGroups(span: 'hour' | 'day', buckets: DirtyBucket[]): DirtyBucket[][] {
  const groups: DirtyBucket[][] = [];
  let group: DirtyBucket[] = [];
  let rows = 0;
  for (const bucket of buckets) {
    const counted = Number(bucket.counted);
    const full = span === 'hour' ? rows + counted > ROWS_PER_BUILD : group.length >= DAYS_PER_BUILD;
    if (group.length > 0 && full) {
      groups.push(group);
      group = [];
      rows = 0;
    }
    group.push(bucket);
    rows += counted;
  }
  if (group.length > 0) groups.push(group);
  return groups;
}

const rowsOf = (group: DirtyBucket[]) => group.reduce((n, b) => n + Number(b.counted), 0);
const spanOf = (group: DirtyBucket[]) => Math.max(...group.map((b) => Number(b.bucket))) - Math.min(...group.map((b) => Number(b.bucket)));

/**
 * Groups of buckets, each built by one set of statements: each domain's buckets grouped as one
 * statement takes them, then groups of several domains packed together while their rows stay within
 * ROWS_PER_BUILD and their buckets within GROUP_SPAN_S. A statement costs tens of milliseconds
 * whatever it reads, and a fleet of a thousand small domains has a thousand hours to build every hour.
 */
function buildGroups(span: 'hour' | 'day', dirty: DirtyBucket[]): DirtyBucket[][] {
  const byDomain = new Map<number, DirtyBucket[]>();
  for (const bucket of dirty) byDomain.set(bucket.domain_id, [...(byDomain.get(bucket.domain_id) ?? []), bucket]);
  const packed: DirtyBucket[][] = [];
  for (const group of [...byDomain.values()].flatMap((buckets) => domainGroups(span, buckets))) {
    const last = packed[packed.length - 1];
    const joined = last ? [...last, ...group] : null;
    if (last && joined && rowsOf(joined) <= ROWS_PER_BUILD && spanOf(joined) <= GROUP_SPAN_S[span]) packed[packed.length - 1] = joined;
    else packed.push(group);
  }
  return packed;
}

/** A group's parameters: its domains, its (domain, bucket start) pairs and the time range holding them. */
function groupParams(span: 'hour' | 'day', buckets: DirtyBucket[]) {
  const starts = buckets.map((b) => Number(b.bucket));
  const fromS = Math.min(...starts);
  const toS = Math.max(...starts) + (span === 'hour' ? 3600 : 86_400);
  return {
    domainIds: [...new Set(buckets.map((b) => Number(b.domain_id)))],
    pairs: buckets.map((b) => new TupleParam([Number(b.domain_id), Number(b.bucket)])),
    fromS,
    toS,
    fromMs: fromS * 1000,
    toMs: toS * 1000,
  };
}

/** Builds one group of buckets; those holding more than their rows are deleted first. Returns how many were. */
async function buildGroup(clickhouse: ClickHouseClient, span: 'hour' | 'day', group: DirtyBucket[]): Promise<number> {
  const overcounted = group.filter((b) => BigInt(b.built) > BigInt(b.counted));
  if (overcounted.length > 0) {
    await clickhouse.command({ query: DELETE_BUCKETS, query_params: { span, ...groupParams(span, overcounted) } });
  }
  const params = groupParams(span, group);
  // A bucket built whose short lists are missing or older (a new entry of SHORT_LISTS) needs only them.
  if (group.some((b) => BigInt(b.built) !== BigInt(b.counted))) for (const query of BUILD[span]) await clickhouse.command({ query, query_params: params });
  await clickhouse.command({ query: BUILD_TOPS[span], query_params: params });
  return overcounted.length;
}

/**
 * One round: the unbuilt hours, newest first, then the days whose hours are all built, in batches
 * until none is left or `budgetMs` is spent (no group is started after that).
 */
export async function buildRollups(clickhouse: ClickHouseClient, options: RollupOptions): Promise<RollupRound> {
  return (await buildRound(clickhouse, options)).round;
}

/** A round, and the hours it left unbuilt: those its last listing found, less those it built since. */
async function buildRound(clickhouse: ClickHouseClient, options: RollupOptions): Promise<{ round: RollupRound; unbuiltHours: number }> {
  const started = performance.now();
  const round: RollupRound = { hours: 0, days: 0, repaired: 0, more: false };
  let unbuiltHours = 0;
  for (const span of ['hour', 'day'] as const) {
    // A bucket still unbuilt after its build (rows arriving meanwhile) waits for the next round.
    const attempted = new Set<string>();
    for (;;) {
      const listed = await dirtyBuckets(clickhouse, DIRTY[span], options);
      if (span === 'hour') unbuiltHours = Number(listed[0]?.unbuilt ?? 0);
      const dirty = listed.filter((b) => !attempted.has(`${b.domain_id}:${b.bucket}`));
      for (const group of buildGroups(span, dirty)) {
        if (performance.now() - started > options.budgetMs) return { round: { ...round, more: true }, unbuiltHours };
        round.repaired += await buildGroup(clickhouse, span, group);
        for (const b of group) attempted.add(`${b.domain_id}:${b.bucket}`);
        if (span === 'hour') {
          round.hours += group.length;
          unbuiltHours -= group.length;
        } else round.days += group.length;
      }
      if (listed.length < BATCH || dirty.length === 0) break;
    }
  }
  return { round, unbuiltHours };
}

export interface RollupBuilderDeps {
  clickhouse: ClickHouseClient;
  log: Logger;
  /** Whether this process may build now (the lease); called before each round. */
  claim: () => Promise<boolean>;
  /** Shown the hours the last round left unbuilt; 0 before a round, and while another process holds the claim. */
  metrics?: Metrics;
}

export interface RollupBuilderOptions {
  intervalMs: number;
  settleS: number;
  budgetMs: number;
  retentionDays: number;
  /**
   * After a round that found nothing, rounds are skipped while readRoundInputs stays the same, for
   * this many ms at most (what the inputs do not show, such as a bucket another builder wrote
   * twice, waits that long).
   */
  quietMs: number;
}

export interface RollupBuilder {
  /** Runs one round now (when it holds the claim) and returns it; rounds never overlap. */
  runOnce: () => Promise<RollupRound | null>;
  stop: () => Promise<void>;
}

/**
 * Runs rounds every `intervalMs` (at once again while work is left). The first round of a
 * process looks at every hour in the retention; later ones at what was written since the previous
 * round began (plus a minute for inserts in flight then) and at the last three hours. An idle
 * server skips its rounds (see `quietMs`): chDB runs one query at a time, and a round's few
 * queries (about 50 ms) would hold up the API's.
 */
export function startRollupBuilder(deps: RollupBuilderDeps, options: RollupBuilderOptions): RollupBuilder {
  let previousStart: number | null = null;
  /** The inputs a round found nothing for, and when it began. */
  let quiet: { inputs: string; at: number } | null = null;
  let running: Promise<RollupRound | null> | null = null;
  let timer: NodeJS.Timeout | null = null;
  let stopped = false;
  let unbuiltHours = 0;
  deps.metrics?.followRollups(() => unbuiltHours);

  const round = async (): Promise<RollupRound | null> => {
    if (!(await deps.claim())) {
      previousStart = null; // another process built meanwhile; look at everything when this one takes over
      quiet = null;
      unbuiltHours = 0;
      return null;
    }
    const start = Date.now();
    // Read before the round's own queries, so that lines stored during the round change them.
    const inputs = await readRoundInputs(deps.clickhouse, options.settleS);
    if (quiet?.inputs === inputs && start - quiet.at < options.quietMs) return { hours: 0, days: 0, repaired: 0, more: false };
    const lookbackS = previousStart === null ? null : Math.ceil((start - previousStart) / 1000) + 60;
    const { round: result, unbuiltHours: left } = await buildRound(deps.clickhouse, { lookbackS, settleS: options.settleS, budgetMs: options.budgetMs, retentionDays: options.retentionDays });
    unbuiltHours = left;
    // A round that left work keeps its start, so the next one still looks back that far.
    if (!result.more) previousStart = start;
    quiet = result.hours + result.days + result.repaired === 0 && !result.more ? { inputs, at: start } : null;
    if (result.hours + result.days > 0) deps.log.info({ ...result, ms: Date.now() - start }, 'stats rollups built');
    return result;
  };

  const runOnce = (): Promise<RollupRound | null> => (running ??= round().finally(() => (running = null)));

  const schedule = (ms: number) => {
    if (stopped) return;
    timer = setTimeout(() => {
      runOnce().then(
        (r) => schedule(r?.more ? 0 : options.intervalMs),
        (err: unknown) => {
          deps.log.error({ err }, 'stats rollup round failed');
          schedule(options.intervalMs);
        },
      );
    }, ms);
    timer.unref();
  };
  schedule(0);

  return {
    runOnce,
    stop: async () => {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running?.catch(() => undefined);
    },
  };
}

/**
 * How `serve` runs the builder: a round every 5 s, hours built 30 s after they end, 10 s at most
 * per round, idle rounds skipped for a minute at most.
 */
export const ROLLUP_SCHEDULE = { intervalMs: 5_000, settleS: 30, budgetMs: 10_000, quietMs: 60_000 } as const;
/** Six rounds' budget: a holder that stops renewing (it died) is replaced within a minute. */
const LEASE_MS = 60_000;
const LEASE = 'stats-rollups';

/** The builder of `serve`, one per database among all processes sharing it (a lease in Postgres). */
export function startStatsRollups(deps: { db: Db; clickhouse: ClickHouseClient; log: Logger; retentionDays: number; metrics?: Metrics }): RollupBuilder {
  const holder = `${os.hostname()}:${process.pid}:${randomUUID()}`;
  const builder = startRollupBuilder(
    { clickhouse: deps.clickhouse, log: deps.log, claim: () => claimLease(deps.db, LEASE, holder, LEASE_MS), metrics: deps.metrics },
    { ...ROLLUP_SCHEDULE, retentionDays: deps.retentionDays },
  );
  return {
    runOnce: builder.runOnce,
    stop: async () => {
      await builder.stop();
      await releaseLease(deps.db, LEASE, holder).catch((err: unknown) => deps.log.warn({ err }, 'stats rollup lease not released'));
    },
  };
}
