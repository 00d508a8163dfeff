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
// Below the server pool's 10 connections (core/db/postgres.ts), which the API shares in `serve`.
const LOOKUPS_AT_ONCE = 4;

export function createIdAllocator(db: Db): IdAllocator {
  const cache = new Map<string, number>();
  const key = (domainId: number, identity: string, segment: number) => `${domainId}\0${identity}\0${segment}`;

  // Numbers not in the cache are read or allocated LOOKUPS_AT_ONCE at a time: a thousand followers
  // starting together would otherwise open a thousand transactions at once, more than the pool's
  // connections, which postgres.js has been seen to mishandle (UNSAFE_TRANSACTION); one at a time
  // made a thousand new files wait ten seconds for their first ids.
  const waiting: (() => void)[] = [];
  let running = 0;
  const lookup = async <T>(work: () => Promise<T>): Promise<T> => {
    // A slot is taken, or handed over by the lookup that ends.
    if (running < LOOKUPS_AT_ONCE) running++;
    else await new Promise<void>((resolve) => waiting.push(resolve));
    try {
      return await work();
    } finally {
      const next = waiting.shift();
      if (next) next();
      else running--;
    }
  };

  async function number(domainId: number, identity: string, segment: number): Promise<number> {
    const k = key(domainId, identity, segment);
    const known = cache.get(k);
    if (known !== undefined) return known;
    const n = await lookup(async () => cache.get(k) ?? segmentNumber(db, domainId, identity, segment));
    if (cache.size >= CACHE_MAX) cache.clear();
    cache.set(k, n);
    return n;
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
      for (const domainId of new Set(domainIds)) {
        const segments: number[] = [];
        for (let segment = first; segment <= last; segment++) segments.push(await number(domainId, identity, segment));
        numbers.set(domainId, segments);
      }
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
 * The number of a segment, allocated on first sight as the domain's highest plus one. Allocation
 * locks the domain's row, so two workers (server mode) never hand out one number twice, and it
 * fails for a domain that no longer exists, or (the table's check) one past MAX_SEGMENT_NUMBER.
 */
async function segmentNumber(db: Db, domainId: number, identity: string, segment: number): Promise<number> {
  const find = async (handle: Db) =>
    (
      await handle.query<{ number: number }>(
        sql`select number from ingest_segments where domain_id = ${domainId} and source_identity = ${identity} and segment_index = ${segment}`,
      )
    )[0]?.number;
  const known = await find(db);
  if (known !== undefined) return known;
  return db.transaction(async (tx) => {
    const [domain] = await tx.query(sql`select id from domains where id = ${domainId} for update`);
    if (!domain) throw new UnknownDomainError(domainId);
    const again = await find(tx);
    if (again !== undefined) return again;
    const [row] = await tx.query<{ number: number }>(sql`
      insert into ingest_segments (domain_id, source_identity, segment_index, number)
      select ${domainId}, ${identity}, ${segment}, coalesce(max(number), 0) + 1 from ingest_segments where domain_id = ${domainId}
      returning number`);
    return row!.number;
  });
}
