/**
 * POST /api/logs/query's answers, reused and never stale. An answer is kept under its question
 * (the normalised query: answerKey) and the data version of what it read (versions.ts), read
 * afresh by every request that computes or reuses one: a row stored where the question reads
 * changes the version, so the next request computes again. Bounded by QUERY_CACHE_MB, least
 * recently used out first, each answer weighed by its JSON's length.
 *
 * Identical questions in flight are answered by one execution: a request joins a computation of
 * the same question that has not yet read its data version (it waits for its place in the read
 * queue, or for the statements of the batch before it), since such a computation reads every row
 * stored before the request came. A computation that has read its version may have missed rows
 * stored since: the request reads the version itself, and joins it where that is the same (no row
 * stored since where the question reads), else computes on its own. With several requests reading
 * at once (READS_IN_FLIGHT), the first of ten viewers has read its version before the others come.
 *
 * One cache and one table of computations per store (and bound): two stores never share answers.
 */
import { storeClient, type ClickHouseClient } from '../../../core/db/clickhouse.js';
import { BoundedCache } from '../../rollups/bounded-cache.js';
import type { Query } from './parse.js';
import { readRange } from './run.js';
import type { QueryBody } from './schemas.js';
import type { QueryAnswer } from './shape.js';

/** Windows ending now end at the next multiple of this (ms), so that viewers within it ask the same question. */
export const NOW_ALIGN_MS = 5_000;

/** `now` rounded up to NOW_ALIGN_MS: a window ending there holds every row stored until `now`. */
export const alignedNow = (now: number) => Math.ceil(now / NOW_ALIGN_MS) * NOW_ALIGN_MS;

/**
 * The question a query asks, as text: the body's fields as validated (the window's fields
 * replaced by the window resolved, and what it reads of the retention), the domains with their
 * names (an answer shows names; a renamed domain asks another question), and STATS_ROLLUP_MIN_ROWS
 * (which chooses the rows read: the same figures, unless the rollups were written by hand).
 */
export const answerKey = (body: QueryBody, query: Query, rollupMinRows: number) =>
  JSON.stringify({
    ...body,
    rollupMinRows,
    domains: query.domains.map((d) => [d.id, d.name]),
    dateRange: undefined,
    startDate: undefined,
    endDate: undefined,
    window: query.window,
    previous: query.previous,
    read: readRange(query),
  });

interface Kept {
  answer: QueryAnswer;
  bytes: number;
}

/** An answer being computed, and whether its data version is read (then it may miss rows stored since). */
export interface Computation {
  answer: Promise<QueryAnswer>;
  versionRead: boolean;
  settle: (outcome: { answer: QueryAnswer } | { error: unknown }) => void;
}

const versioned = (key: string, version: string) => `${version}\n${key}`;

export class QueryCache {
  readonly #answers: BoundedCache<Kept> | null;
  readonly #computing = new Map<string, Computation>();
  /** Computations whose version is read, by version and question. */
  readonly #computingAt = new Map<string, Computation>();

  /** `maxBytes` 0: no answers kept (identical questions in flight are still asked once). */
  constructor(readonly maxBytes: number) {
    this.#answers = maxBytes > 0 ? new BoundedCache<Kept>(maxBytes, (k) => k.bytes) : null;
  }

  get enabled(): boolean {
    return this.#answers !== null;
  }

  /** The answer of a computation of `key` that will read every row stored until now, if one is in flight. */
  joinable(key: string): Promise<QueryAnswer> | undefined {
    const computing = this.#computing.get(key);
    return computing && !computing.versionRead ? computing.answer : undefined;
  }

  /** A computation of `key` that has read `version`, other than `own`, if one is in flight: its answer is what `own` would compute. */
  computingAt(key: string, version: string, own: Computation): Promise<QueryAnswer> | undefined {
    const computing = this.#computingAt.get(versioned(key, version));
    return computing && computing !== own ? computing.answer : undefined;
  }

  /** `computation` (of `key`) has read `version` and computes: requests that read the same may join it (computingAt). */
  computesAt(key: string, version: string, computation: Computation): void {
    this.#computingAt.set(versioned(key, version), computation);
    computation.answer.then(
      () => this.#forget(key, version, computation),
      () => this.#forget(key, version, computation),
    );
  }

  #forget(key: string, version: string, computation: Computation): void {
    if (this.#computingAt.get(versioned(key, version)) === computation) this.#computingAt.delete(versioned(key, version));
  }

  /** A computation of `key`, joinable until its versionRead is set; it leaves the table when settled. Called only when none is joinable. */
  begin(key: string): Computation {
    let settle!: Computation['settle'];
    const answer = new Promise<QueryAnswer>((resolve, reject) => {
      settle = (outcome) => {
        if (this.#computing.get(key) === computation) this.#computing.delete(key);
        if ('answer' in outcome) resolve(outcome.answer);
        else reject(outcome.error);
      };
    });
    // A question answered in error by a computation nobody joined is not an unhandled rejection.
    answer.catch(() => undefined);
    const computation: Computation = { answer, versionRead: false, settle };
    // Replaces one that has read its version: later requests join the newer.
    if (this.#computing.get(key)?.versionRead !== false) this.#computing.set(key, computation);
    return computation;
  }

  get(key: string, version: string): QueryAnswer | undefined {
    return this.#answers?.get(versioned(key, version))?.answer;
  }

  /** Keeps `answer`; one larger than the whole bound is not kept. */
  set(key: string, version: string, answer: QueryAnswer): void {
    if (!this.#answers) return;
    const bytes = JSON.stringify(answer).length + key.length;
    if (bytes <= this.maxBytes) this.#answers.set(versioned(key, version), { answer, bytes });
  }
}

const caches = new WeakMap<ClickHouseClient, Map<number, QueryCache>>();

/** The cache of `clickhouse`'s store bounded by `megabytes` (QUERY_CACHE_MB). */
export function queryCache(clickhouse: ClickHouseClient, megabytes: number): QueryCache {
  const store = storeClient(clickhouse);
  let bySize = caches.get(store);
  if (!bySize) caches.set(store, (bySize = new Map()));
  let cache = bySize.get(megabytes);
  if (!cache) bySize.set(megabytes, (cache = new QueryCache(megabytes * 2 ** 20)));
  return cache;
}
