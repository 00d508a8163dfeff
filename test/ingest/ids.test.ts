import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdAllocator, entryId, MAX_SEGMENT_NUMBER, segmentIndex } from '../../ingest/ids.js';
import { migratePostgres } from '../../core/db/migrate.js';
import { openPglite, openPostgres, type Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { createLogger } from '../../core/log.js';
import { freshDatabase } from '../support/app.js';

let dir: string;
let db: Db;
let dropDatabase: () => Promise<void>;
let domains: number[];
const GiB4 = 2 ** 32;

// PGlite, or with DATABASE_URL a database of its own on that server, where allocations really race.
beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-ids-'));
  const fresh = await freshDatabase();
  dropDatabase = fresh.drop;
  db = fresh.url ? await openPostgres(fresh.url) : await openPglite(dir);
  await migratePostgres(db, createLogger('silent'));
  const rows = await db.query<{ id: number }>(sql`insert into domains (name) values ('a.example'), ('b.example'), ('c.example'), ('d.example') returning id`);
  domains = rows.map((r) => r.id);
});

afterAll(async () => {
  await db?.close();
  await dropDatabase?.();
  await fs.rm(dir, { recursive: true, force: true });
});

const segments = (domainId: number) =>
  db.query<{ source_identity: string; segment_index: number; number: number }>(
    sql`select source_identity, segment_index, number from ingest_segments where domain_id = ${domainId} order by number`,
  );

describe('entry ids', () => {
  it('stay within 2^32 … 2^53 − 1', () => {
    expect(entryId(1, 0)).toBe(GiB4);
    expect(entryId(MAX_SEGMENT_NUMBER, GiB4 - 1)).toBe(2 ** 53 - 1);
    expect(Number.isSafeInteger(entryId(MAX_SEGMENT_NUMBER, 5 * GiB4 - 1))).toBe(true);
    expect(segmentIndex(GiB4 - 1)).toBe(0);
    expect(segmentIndex(GiB4)).toBe(1);
  });

  it('number the segments of a domain in order of first sight, and rise with the offset', async () => {
    const [d] = domains;
    const ids = createIdAllocator(db);
    const a = await ids.forBatch('file-a', [d!], 0, 5000);
    const b = await ids.forBatch('file-b', [d!], 100, 200);
    expect(a(d!, 0)).toBe(entryId(1, 0));
    expect(a(d!, 4999)).toBe(entryId(1, 4999));
    expect(b(d!, 150)).toBe(entryId(2, 150));
    expect(a(d!, 10)).toBeLessThan(a(d!, 11));
    expect(await segments(d!)).toEqual([
      { source_identity: 'file-a', segment_index: 0, number: 1 },
      { source_identity: 'file-b', segment_index: 0, number: 2 },
    ]);
  });

  it('give a line the same id when it is ingested again, by a new worker too', async () => {
    const [d] = domains;
    const before = (await createIdAllocator(db).forBatch('file-a', [d!], 1000, 2000))(d!, 1234);
    const again = (await createIdAllocator(db).forBatch('file-a', [d!], 0, 4096))(d!, 1234);
    expect(again).toBe(before);
    expect(await segments(d!)).toHaveLength(2);
  });

  it('number each domain on its own, for a file routed by $host to several', async () => {
    const [, e, f] = domains;
    const idOf = await createIdAllocator(db).forBatch('shared-file', [e!, f!, e!], 0, 100);
    expect(idOf(e!, 10)).toBe(entryId(1, 10));
    expect(idOf(f!, 20)).toBe(entryId(1, 20));
    expect(() => idOf(domains[3]!, 30)).toThrow(RangeError);
  });

  it('take a new segment every 4 GiB of a source, without collisions at the boundary', async () => {
    const [, e] = domains;
    const start = GiB4 - 300;
    const idOf = await createIdAllocator(db).forBatch('big-file', [e!], start, start + 600);
    const ids = Array.from({ length: 600 }, (_, i) => idOf(e!, start + i));
    expect(new Set(ids).size).toBe(600);
    expect(ids.every((id) => id > 0 && id < 2 ** 53)).toBe(true);
    expect((await segments(e!)).filter((s) => s.source_identity === 'big-file').map((s) => s.segment_index)).toEqual([0, 1]);
    // Ids do not rise across the boundary (the next segment number can be anything), but stay unique.
    expect(idOf(e!, GiB4)).toBe(entryId(3, 0));
  });

  it('hand out distinct numbers to concurrent allocations', async () => {
    const d = domains[3]!;
    const files = Array.from({ length: 12 }, (_, i) => `concurrent-${i}`);
    const allocators = [createIdAllocator(db), createIdAllocator(db)];
    const ids = await Promise.all(files.flatMap((f) => allocators.map(async (a) => (await a.forBatch(f, [d], 0, 10))(d, 0))));
    // Both allocators agree per file, and the files differ.
    for (let i = 0; i < files.length; i++) expect(ids[2 * i]).toBe(ids[2 * i + 1]);
    expect(new Set(ids).size).toBe(files.length);
    expect((await segments(d)).map((s) => s.number)).toEqual(Array.from({ length: 12 }, (_, i) => i + 1));
  });

  it('look up the first segments of many files starting at once together: one read, one transaction', async () => {
    const [row] = await db.query<{ id: number }>(sql`insert into domains (name) values ('many.example') returning id`);
    const d = row!.id;
    const statements: string[] = [];
    // The allocator's statements, counted: those of a transaction by its handle too.
    const counted = (handle: Db): Db => ({
      ...handle,
      kind: handle.kind,
      query: (fragment) => {
        statements.push(fragment.strings.join('?').trim().split(/\s+/)[0]!);
        return handle.query(fragment);
      },
      transaction: (work) => handle.transaction((tx) => work(counted(tx))),
    });
    const ids = createIdAllocator(counted(db));
    const files = Array.from({ length: 1000 }, (_, i) => `many-${i}`);
    const first = await Promise.all(files.map(async (f) => (await ids.forBatch(f, [d], 0, 10))(d, 0)));
    expect(statements).toEqual(['select', 'select', 'insert', 'select']);
    // Numbered in the order the files asked, as one at a time would have.
    expect(first).toEqual(files.map((_, i) => entryId(i + 1, 0)));
    expect((await segments(d)).map((s) => s.source_identity)).toEqual(files);
    // Known now: the same files again ask nothing more.
    await Promise.all(files.map((f) => ids.forBatch(f, [d], 0, 10)));
    expect(statements).toHaveLength(4);
  });

  it('in a batch with a domain that cannot take a number, allocate the others', async () => {
    const [full, other] = await db.query<{ id: number }>(sql`insert into domains (name) values ('full-batch.example'), ('other-batch.example') returning id`);
    await db.query(sql`insert into ingest_segments (domain_id, source_identity, segment_index, number) values (${full!.id}, 'last', 0, ${MAX_SEGMENT_NUMBER})`);
    const ids = createIdAllocator(db);
    const [a, b, c, gone] = await Promise.allSettled([
      ids.forBatch('batch-1', [other!.id], 0, 10),
      ids.forBatch('batch-2', [full!.id], 0, 10),
      ids.forBatch('batch-3', [other!.id], 0, 10),
      ids.forBatch('batch-4', [999_999], 0, 10),
    ]);
    expect(a.status === 'fulfilled' && a.value(other!.id, 0)).toBe(entryId(1, 0));
    expect(b.status === 'rejected' && String(b.reason)).toMatch(/ingest_segments_number_range/);
    expect(c.status === 'fulfilled' && c.value(other!.id, 0)).toBe(entryId(2, 0));
    expect(gone.status === 'rejected' && String(gone.reason)).toMatch(/does not exist/);
  });

  it('refuse offsets outside the batch, bad ranges and unknown domains', async () => {
    const [d] = domains;
    const ids = createIdAllocator(db);
    const idOf = await ids.forBatch('file-a', [d!], 100, 200);
    expect(() => idOf(d!, 99)).toThrow(RangeError);
    expect(() => idOf(d!, 200)).toThrow(RangeError);
    await expect(ids.forBatch('file-a', [d!], 200, 100)).rejects.toThrow(RangeError);
    await expect(ids.forBatch('file-a', [d!], -1, 100)).rejects.toThrow(RangeError);
    await expect(ids.forBatch('file-a', [999_999], 0, 100)).rejects.toThrow(/does not exist/);
  });

  it('stop below 2^53: a domain cannot take a number past the last one', async () => {
    const [row] = await db.query<{ id: number }>(sql`insert into domains (name) values ('full.example') returning id`);
    await db.query(sql`insert into ingest_segments (domain_id, source_identity, segment_index, number) values (${row!.id}, 'last', 0, ${MAX_SEGMENT_NUMBER})`);
    await expect(createIdAllocator(db).forBatch('one-more', [row!.id], 0, 10)).rejects.toThrow(/ingest_segments_number_range/);
  });

  it('are forgotten with their domain', async () => {
    const [row] = await db.query<{ id: number }>(sql`insert into domains (name) values ('gone.example') returning id`);
    await createIdAllocator(db).forBatch('file-a', [row!.id], 0, 10);
    await db.query(sql`delete from domains where id = ${row!.id}`);
    expect(await segments(row!.id)).toEqual([]);
  });
});
