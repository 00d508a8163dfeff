/**
 * POST /api/logs/query: the domains the caller may read, then parse → run → shape; a later page
 * of a long series is cut from the series its first page computed (series-pages.ts). A batch
 * answers each of its queries as the single form would, in one place of the read queue (one wait,
 * one statement of data versions for all), and answers reused from the cache (cache.ts) where the
 * data they read has not changed.
 */
import type { ClickHouseClient } from '../../../core/db/clickhouse.js';
import type { Principal, Services } from '../../context.js';
import { resolveDomains } from '../../domains/service.js';
import { ApiError, invalidField, validationFailed } from '../../http/errors.js';
import { UNSTORABLE_MESSAGE, unstorableField } from '../../http/storable-text.js';
import { timeQuery } from '../../metrics/registry.js';
import { withReads } from '../../reads/client.js';
import { alignedNow, answerKey, queryCache, type Computation } from './cache.js';
import { parseQuery, type Query } from './parse.js';
import { runQuery } from './run.js';
import { queryBody, type QueryBody } from './schemas.js';
import { keepSeries, keptSeries, seriesKey } from './series-pages.js';
import { answerOf, orderGroups, type QueryAnswer } from './shape.js';
import { readVersions } from './versions.js';

type Deps = Pick<Services, 'db' | 'clickhouse' | 'reads' | 'config' | 'metrics'>;

/** A query to compute: parsed, with its question (cache.ts) and its series' key (series-pages.ts). */
interface Planned {
  query: Query;
  key: string;
  seriesKey: string;
  now: number;
}

/** The domains (each must be visible, else 404) and the query; a later page of a kept series is answered here. */
async function plan(deps: Deps, principal: Principal, body: QueryBody, now: number): Promise<Planned | QueryAnswer> {
  const domains = await resolveDomains(deps, principal, body.domains, ['logs', 'read']);
  const key = seriesKey(body, domains.map((d) => d.id));
  const kept = body.page > 1 ? keptSeries(deps.clickhouse, key, now) : undefined;
  if (kept) return answerOf({ ...kept.query, page: body.page }, kept.ordered);
  const query = parseQuery(body, { now: alignedNow(now), retentionDays: deps.config.logRetentionDays, domains });
  return { query, key: answerKey(body, query, deps.config.statsRollupMinRows), seriesKey: key, now };
}

/**
 * Computes `own` in the read place held: their versions in one statement (also where no answer is
 * kept: identical questions in flight join by it), then each answer reused, joined or computed.
 */
async function compute(deps: Deps, clickhouse: ClickHouseClient, own: { planned: Planned; computation: Computation }[]): Promise<void> {
  const cache = queryCache(deps.clickhouse, deps.config.queryCacheMb);
  for (const { computation } of own) computation.versionRead = true;
  const versions = await readVersions(clickhouse, own.map((o) => o.planned.query));
  for (const [i, { planned, computation }] of own.entries()) {
    const version = versions.of[i]!;
    const kept = cache.get(planned.key, version);
    if (kept) {
      computation.settle({ answer: kept });
      continue;
    }
    const twin = cache.computingAt(planned.key, version, computation);
    if (twin) {
      twin.then((answer) => computation.settle({ answer }), (error: unknown) => computation.settle({ error }));
      continue;
    }
    cache.computesAt(planned.key, version, computation);
    try {
      const { query } = planned;
      const ordered = orderGroups(query, await timeQuery(deps.metrics, 'query', () => runQuery(clickhouse, query, deps.config.statsRollupMinRows, versions.hourRows)));
      keepSeries(deps.clickhouse, planned.seriesKey, { query, ordered, at: planned.now });
      const answer = answerOf(query, ordered);
      cache.set(planned.key, version, answer);
      computation.settle({ answer });
    } catch (error) {
      computation.settle({ error });
    }
  }
}

/**
 * The answers of `planned`, each a reused answer, a computation in flight of the same question
 * (cache.ts), or one of those computed in a single place of the read queue.
 */
async function answerAll(deps: Deps, principal: Principal, planned: Planned[]): Promise<Promise<QueryAnswer>[]> {
  const cache = queryCache(deps.clickhouse, deps.config.queryCacheMb);
  const answers = new Map<string, Promise<QueryAnswer>>();
  const own: { planned: Planned; computation: Computation }[] = [];
  for (const p of planned) {
    if (answers.has(p.key)) continue;
    const joined = cache.joinable(p.key);
    if (joined) {
      answers.set(p.key, joined);
      continue;
    }
    const computation = cache.begin(p.key);
    answers.set(p.key, computation.answer);
    own.push({ planned: p, computation });
  }
  if (own.length > 0) {
    try {
      await withReads(deps, principal, 'stats', (clickhouse) => compute(deps, clickhouse, own));
    } catch (error) {
      // Refused a place (429): the request fails as a whole, and so do those who joined it.
      for (const { computation } of own) computation.settle({ error });
      throw error;
    }
  }
  return planned.map((p) => answers.get(p.key)!);
}

/** The figures the body asks for over the domains it names (each must be visible, else 404) or every domain the caller sees; needs logs:read. */
export async function queryLogs(deps: Deps, principal: Principal, body: QueryBody, now = Date.now()): Promise<QueryAnswer> {
  const planned = await plan(deps, principal, body, now);
  if (!('query' in planned)) return planned;
  const [answer] = await answerAll(deps, principal, [planned]);
  return answer!;
}

/** A batch's answer in a query's place: its figures, or the error the single form would answer. */
export type BatchAnswer = { success: true; data: QueryAnswer } | { success: false; status: number; error: string; details?: Record<string, string> };

const failed = (err: ApiError): BatchAnswer => ({ success: false, status: err.status, error: err.message, ...(err.details ? { details: err.details } : {}) });

/** `value` validated as the single form's body is (src/http/router.ts), or its 422. */
function validated(value: unknown): QueryBody {
  const result = queryBody.safeParse(value);
  if (!result.success) throw validationFailed(result.error);
  const field = unstorableField(result.data);
  if (field !== null) throw invalidField(field || 'body', UNSTORABLE_MESSAGE);
  return result.data;
}

/**
 * Each of `bodies` answered as the single form would answer it, in its place: an ApiError (404 for
 * a domain not visible, 422, a read limit's 503) as a failed answer there. Anything else fails
 * the request, as it would the single form.
 */
export async function queryLogsBatch(deps: Deps, principal: Principal, bodies: unknown[], now = Date.now()): Promise<BatchAnswer[]> {
  const settled = async <T>(work: () => Promise<T>): Promise<T | ApiError> => {
    try {
      return await work();
    } catch (err) {
      if (err instanceof ApiError) return err;
      throw err;
    }
  };
  const plans = await Promise.all(bodies.map((body) => settled(() => plan(deps, principal, validated(body), now))));
  const toCompute = plans.filter((p): p is Planned => !(p instanceof ApiError) && 'query' in p);
  const computed = await answerAll(deps, principal, toCompute);
  const answers = new Map(toCompute.map((p, i) => [p, computed[i]!]));
  const answered = (answer: QueryAnswer | ApiError): BatchAnswer => (answer instanceof ApiError ? failed(answer) : { success: true, data: answer });
  return Promise.all(plans.map(async (p) => (p instanceof ApiError || !('query' in p) ? answered(p) : answered(await settled(() => answers.get(p)!)))));
}
