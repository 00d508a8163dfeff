import type { Db } from '../core/db/postgres.js';
import { sql } from '../core/db/sql.js';
import { SEGMENT_BITS, SEGMENT_SIZE } from '../core/entries.js';

/**
 * Entry ids (docs/reference/logs.md#entry-ids): positive, below 2^53, unique within a domain, and the same whenever
 * the same line is ingested again.
 *
 *   id = segment number × 2^32 + (byte offset mod 2^32)
 *
 * A segment is 4 GiB of one source (a file identity, see LineChunk), seen from one domain. Its
 * number, 1 … 2^21 − 1, is handed out once per (domain, source identity, offset ÷ 2^32) by the
 * `ingest_segments` table in Postgres (sql/postgres/002_ingest_segments.sql) and never changes.
 * Two lines of one domain therefore share an id only if they share the segment and the offset
 * within it, that is, only if they are the same line of the same source: no collision at any
 * row count (a 53-bit hash of identity and offset would already collide with probability 0.5 %
 * at 10 million rows of a domain and almost surely at 1 billion). Within a file ids grow with
 * the offset, so among entries of equal time the later line has the higher id.
 *
 * Capacity: 2,097,151 segments per domain. A log rotated hourly, access and error file, uses 48
 * a day: 119 years. A file larger than 4 GiB takes one segment per 4 GiB.
 */
export const MAX_SEGMENT_NUMBER = 2 ** (53 - SEGMENT_BITS) - 1;

/** The segment of a byte offset within its source. */
export const segmentIndex = (offset: number): number => Math.floor(offset / SEGMENT_SIZE);

export function entryId(segmentNumber: number, offset: number): number {
  return segmentNumber * SEGMENT_SIZE + (offset % SEGMENT_SIZE);
}

/** The domain a batch was routed to was deleted since: route the batch again. */
export class UnknownDomainError extends Error {
  constructor(readonly domainId: number) {
    super(`domain ${domainId} does not exist`);
  }
}

/** Turns (domain, offset) into an id for the lines of one batch; see IdAllocator.forBatch. */
export type IdOf = (domainId: number, offset: number) => number;

export interface IdAllocator {
  /**
   * Makes sure the segment numbers of a batch exist (at most a few Postgres round trips, none once
   * known) and returns the synchronous id function for its lines: a batch is the byte range
   * [startOffset, endOffset) of the source `identity`, its lines routed to `domainIds`.
   */
  forBatch(identity: string, domainIds: Iterable<number>, startOffset: number, endOffset: number): Promise<IdOf>;
}

// Numbers already read or allocated, by `domain\0identity\0segment`. Bounded: a long-running
// worker meets new files every rotation; forgetting only costs a lookup.
const CACHE_MAX = 10_000;
// Segments looked up or allocated in one go at most (one read, or one transaction of four statements).
const LOOKUP_BATCH = 1_000;

interface SegmentKey {
  domainId: number;
  identity: string;
  segment: number;
}

interface Lookup extends SegmentKey {
  waiters: { resolve: (n: number) => void; reject: (err: unknown) => void }[];
}

export function createIdAllocator(db: Db): IdAllocator {
  const cache = new Map<string, number>();
  const key = (k: SegmentKey) => `${k.domainId}\0${k.identity}\0${k.segment}`;

  // Numbers not in the cache are looked up together: those asked for while a lookup runs go in
  // the next one. A thousand followers starting at once made a thousand lookups, four at a time
  // (more transactions at once than the pool's connections is what postgres.js has been seen to
  // mishandle, UNSAFE_TRANSACTION), and the last files waited seconds for their first ids; now
  // they are one read and one transaction.
  const pending = new Map<string, Lookup>();
  let draining = false;

  // Runs while `draining` (set by the first lookup that found none running).
  async function drain(): Promise<void> {
    try {
      while (pending.size > 0) {
        const batch = [...pending.values()].slice(0, LOOKUP_BATCH);
        for (const lookup of batch) pending.delete(key(lookup));
        const found = await segmentNumbers(db, batch).catch((err: unknown) => batch.map(() => err));
        for (const [i, lookup] of batch.entries()) {
          const n = found[i];
          if (typeof n !== 'number') {
            for (const w of lookup.waiters) w.reject(n ?? new Error(`segment ${lookup.segment} of ${lookup.identity} for domain ${lookup.domainId} was not allocated`));
          } else {
            if (cache.size >= CACHE_MAX) cache.clear();
            cache.set(key(lookup), n);
            for (const w of lookup.waiters) w.resolve(n);
          }
        }
      }
    } finally {
      draining = false;
    }
  }

  function number(k: SegmentKey): Promise<number> {
    const id = key(k);
    const known = cache.get(id);
    if (known !== undefined) return Promise.resolve(known);
    return new Promise<number>((resolve, reject) => {
      const lookup = pending.get(id) ?? { ...k, waiters: [] };
      lookup.waiters.push({ resolve, reject });
      pending.set(id, lookup);
      // Started on the next tick, so that the followers of one event loop turn share the lookup.
      if (!draining) {
        draining = true;
        setImmediate(() => void drain());
      }
    });
  }

  return {
    async forBatch(identity, domainIds, startOffset, endOffset) {
      if (!Number.isSafeInteger(startOffset) || !Number.isSafeInteger(endOffset) || startOffset < 0 || endOffset < startOffset) {
        throw new RangeError(`invalid batch range [${startOffset}, ${endOffset})`);
      }
      const first = segmentIndex(startOffset);
      const last = segmentIndex(Math.max(startOffset, endOffset - 1));
      // Per domain, the numbers of the batch's segments from `first` on: the id function runs once
      // per line, so it does two array/map lookups and builds no key strings.
      const numbers = new Map<number, number[]>();
      await Promise.all(
        [...new Set(domainIds)].map(async (domainId) => {
          const segments: Promise<number>[] = [];
          for (let segment = first; segment <= last; segment++) segments.push(number({ domainId, identity, segment }));
          numbers.set(domainId, await Promise.all(segments));
        }),
      );
      return (domainId, offset) => {
        const n = offset >= startOffset && offset < endOffset ? numbers.get(domainId)?.[segmentIndex(offset) - first] : undefined;
        if (n === undefined) {
          throw new RangeError(`offset ${offset} of domain ${domainId} is outside the batch [${startOffset}, ${endOffset})`);
        }
        return entryId(n, offset);
      };
    },
  };
}

/**
 * The numbers of `keys`' segments, in their order (an error in place of a number for a domain that
 * no longer exists): read in one query, and those not there yet allocated in one transaction, in
 * the order asked, after each domain's highest. Allocation locks the domains' rows, in id order
 * so that two workers (server mode) neither deadlock nor hand out one number twice. When it fails
 * for the whole batch (the table's check: a domain past MAX_SEGMENT_NUMBER), each segment is
 * allocated alone, so that only the domain concerned fails.
 */
async function segmentNumbers(db: Db, keys: SegmentKey[]): Promise<unknown[]> {
  // A number, an error, or undefined while not known yet.
  const numbers: unknown[] = keys.map(() => undefined);
  const missing = () => keys.map((k, ord) => ({ k, ord })).filter(({ ord }) => numbers[ord] === undefined);
  // The keys as rows (ord: the place in `keys`), one bound parameter whatever their number.
  const asked = (of: { k: SegmentKey; ord: number }[]) =>
    sql`jsonb_to_recordset(${JSON.stringify(of.map(({ k, ord }) => ({ ord, domain_id: k.domainId, source_identity: k.identity, segment_index: k.segment })))}::text::jsonb)
      as k(ord integer, domain_id integer, source_identity text, segment_index integer)`;
  const find = async (handle: Db, of: { k: SegmentKey; ord: number }[]) => {
    const rows = await handle.query<{ ord: number; number: number }>(sql`select k.ord, s.number from ${asked(of)} join ingest_segments s using (domain_id, source_identity, segment_index)`);
    for (const row of rows) numbers[row.ord] = row.number;
  };
  await find(db, missing());
  const unknown = missing();
  if (unknown.length === 0) return numbers;
  try {
    await db.transaction(async (tx) => {
      const locked = await tx.query<{ id: number }>(sql`select id from domains where id in (select domain_id from ${asked(unknown)}) order by id for update`);
      const existing = new Set(locked.map((d) => d.id));
      const allocatable = unknown.filter(({ k }) => existing.has(k.domainId));
      await tx.query(sql`
        insert into ingest_segments (domain_id, source_identity, segment_index, number)
        select k.domain_id, k.source_identity, k.segment_index,
               coalesce((select max(s.number) from ingest_segments s where s.domain_id = k.domain_id), 0) + row_number() over (partition by k.domain_id order by k.ord)
        from ${asked(allocatable)}
        where not exists (select 1 from ingest_segments s where s.domain_id = k.domain_id and s.source_identity = k.source_identity and s.segment_index = k.segment_index)`);
      await find(tx, allocatable);
      for (const { k, ord } of unknown) if (!existing.has(k.domainId)) numbers[ord] = new UnknownDomainError(k.domainId);
    });
  } catch (err) {
    if (unknown.length === 1) numbers[unknown[0]!.ord] = err;
    else for (const { k, ord } of unknown) numbers[ord] = (await segmentNumbers(db, [k]))[0];
  }
  return numbers;
}

/**
 * The segment numbers of one domain's batch [startOffset, endOffset), from the segment of
 * `startOffset` on, read back from its id function: what SQL needs to make the batch's ids itself
 * (sinks/clickhouse-staged.ts).
 */
export function batchSegments(idOf: IdOf, domainId: number, startOffset: number, endOffset: number): { first: number; numbers: number[] } {
  const first = segmentIndex(startOffset);
  const numbers: number[] = [];
  for (let segment = first; segment <= segmentIndex(Math.max(startOffset, endOffset - 1)); segment++) {
    const offset = Math.max(startOffset, segment * SEGMENT_SIZE);
    numbers.push((idOf(domainId, offset) - (offset % SEGMENT_SIZE)) / SEGMENT_SIZE);
  }
  return { first, numbers };
}
