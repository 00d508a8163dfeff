/**
 * Each domain's ingest health end to end, on the embedded stores with real files: a worker follows
 * a domain's logs with good and bad lines, and GET /api/domains/:domainId/ingest gives the lines
 * stored and rejected (by cause) exactly, when the last lines were stored, and the sources with
 * their lag as the worker published them to Postgres; the fleet's listing gives each domain's last
 * line. The rejects listing (GET /api/logs/domains/:domainId/rejects) pages newest first. Hostile:
 * a customer sees its own domain's rejects and health and gets 404 for another's; SQL in the query
 * parameters is refused. The reports of 1,000 sources are one statement that rewrites only what changed.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from '../../core/db/sql.js';
import { createLogger } from '../../core/log.js';
import { parseIngestConfig } from '../../ingest/config.js';
import { publishSources } from '../../ingest/health-report.js';
import { newStats } from '../../ingest/pipeline.js';
import { dedupToken, insertRejects, writeRows, type RejectRow } from '../../ingest/sinks/clickhouse.js';
import { startIngest, type IngestWorker } from '../../ingest/worker.js';
import { appWithAdmin, freshUser } from '../support/auth.js';
import { call, type TestApp } from '../support/app.js';
import { accessLine, accessLines, accessRow, append, errorLogTime, FORMAT, HOST_FORMAT, newDomain, T0, testWorkerOptions, until } from '../support/ingest.js';

let t: TestApp;
let admin: string;
/** A customer with the default rights (logs: read) and one who may also read ingest health (domains: read). */
let reader: { id: number; token: string };
let customer: { id: number; token: string };
let logDir: string;
const workers: IngestWorker[] = [];
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');
const SCRIPT = '<script>window.__hacked=1</script>';

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
  customer = await freshUser(t.app, admin, 'customer');
  reader = await freshUser(t.app, admin, 'reader');
  const grant = await call(t.app, 'PUT', `/api/users/${reader.id}/permissions`, {
    token: admin,
    body: { permissions: [{ resource: 'domains', actions: ['read'] }, { resource: 'logs', actions: ['read'] }] },
  });
  expect(grant.status).toBe(200);
  logDir = path.join(t.dataDir, 'logs');
  fs.mkdirSync(logDir);
}, 60_000);

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
});

afterAll(() => t?.close());

let seq = 0;
const domainOf = (owner: { id: number } | null) => newDomain(t.runtime.db, 'health', owner?.id ?? null);

async function startWorker(yaml: string, batchDelayMs = 200): Promise<IngestWorker> {
  const config = parseIngestConfig(yaml, path.join(logDir, 'ingest.yaml'));
  const worker = await startIngest(config, testWorkerOptions(t, log, { batchDelayMs, healthReportMs: 100 }));
  workers.push(worker);
  return worker;
}

const health = async (domainId: number, token = admin) => {
  const res = await call(t.app, 'GET', `/api/domains/${domainId}/ingest`, { token });
  if (res.status !== 200) throw new Error(`ingest health: ${res.status} ${JSON.stringify(res.body)}`);
  return res.body.data;
};

const errorLine = (n: number, host: string) =>
  `${errorLogTime(T0 + n * 1000)} [error] 7#7: *${n} open() "/srv/missing-${n}" failed (2: No such file or directory), client: 203.0.113.${n}, server: ${host}, request: "GET /missing-${n} HTTP/1.1", host: "${host}"`;

describe('a domain’s ingest health after a worker run', () => {
  it('counts the lines stored and rejected exactly, by cause, with the last lines’ times and the sources’ lag as published', { timeout: 60_000 }, async () => {
    const domain = await domainOf(reader);
    const access = path.join(logDir, `access-${++seq}.log`);
    const error = path.join(logDir, `error-${++seq}.log`);
    // 5 good access lines, 2 that do not parse (one carrying markup), one too long; 3 error entries.
    const bad = [`garbage ${SCRIPT}`, 'not an access line either'];
    append(access, `${accessLines(0, 3)}${bad[0]}\n${accessLines(3, 5)}${bad[1]}\n${'x'.repeat(70_000)}\n`);
    append(error, `${[1, 2, 3].map((n) => errorLine(n, domain.name)).join('\n')}\n`);
    const sizes = { access: fs.statSync(access).size, error: fs.statSync(error).size };
    const before = Date.now();
    // The files' lines wait 10 s for others to share an insert with: meanwhile the lag is theirs.
    const worker = await startWorker(`sources:\n  - domain: ${domain.name}\n    access: ${JSON.stringify(access)}\n    error: ${JSON.stringify(error)}\n    format: ${JSON.stringify(FORMAT)}\n`, 10_000);

    const lagging = await until(async () => {
      const h = await health(domain.id, reader.token);
      const lags = Object.fromEntries(h.sources.map((s: any) => [s.name, s.lagBytes]));
      return lags[`access ${access}`] === sizes.access && lags[`error ${error}`] === sizes.error && h.sources.every((s: any) => s.state === 'running') && h;
    }, 'both files running and lagging by their size');
    expect(lagging.sources).toEqual([
      { name: `access ${access}`, state: 'running', lagBytes: sizes.access, reportedAt: expect.any(String), reporting: true },
      { name: `error ${error}`, state: 'running', lagBytes: sizes.error, reportedAt: expect.any(String), reporting: true },
    ]);
    expect(lagging.stored).toEqual({ lastHour: 0, lastDay: 0 });

    const done = await until(async () => {
      const h = await health(domain.id, reader.token);
      return h.stored.lastHour === 8 && h.rejected.lastHour === 3 && h.sources.every((s: any) => s.lagBytes === 0) && h;
    }, 'every line stored or rejected, and no lag', 30_000);
    const after = Date.now();
    expect(done).toMatchObject({
      stale: false,
      staleAfterS: 3600,
      stored: { lastHour: 8, lastDay: 8 },
      rejected: {
        lastHour: 3,
        lastDay: 3,
        byCause: [
          { cause: 'unparsed', lastHour: 2, lastDay: 2 },
          { cause: 'too_long', lastHour: 1, lastDay: 1 },
        ],
      },
    });
    for (const at of [done.lastAccessLineAt, done.lastErrorLineAt]) {
      expect(Date.parse(at)).toBeGreaterThanOrEqual(before - 1000);
      expect(Date.parse(at)).toBeLessThanOrEqual(after + 1000);
    }
    expect(done.lastLineAt).toBe([done.lastAccessLineAt, done.lastErrorLineAt].sort().at(-1));
    expect(done.secondsSinceLastLine).toBeGreaterThanOrEqual(0);
    expect(done.secondsSinceLastLine).toBeLessThan((after - before) / 1000 + 1);
    // The worker's own counters agree.
    const stats = worker.stats();
    expect(stats.map((s) => [s.name, s.inserted, s.rejected])).toEqual([
      [`access ${access}`, 5, 3],
      [`error ${error}`, 3, 0],
    ]);

    // The fleet's listing gives the later of the two.
    const listed = await call(t.app, 'GET', `/api/domains?ingest=true&search=${encodeURIComponent(domain.name)}`, { token: reader.token });
    expect(listed.status).toBe(200);
    expect(listed.body.data.domains).toHaveLength(1);
    expect(listed.body.data.domains[0].ingest).toMatchObject({ lastLineAt: done.lastLineAt, stale: false, staleAfterS: 3600 });

    // Stopped, the worker's last report says so.
    await worker.close();
    const stopped = await health(domain.id, reader.token);
    expect(stopped.sources.map((s: any) => s.state)).toEqual(['stopped', 'stopped']);
  });

  it('counts a retried insert once (the counts deduplicate with the lines)', async () => {
    const domain = await domainOf(null);
    const rows = [1, 2, 3, 4].map((i) => accessRow(i, { domainId: domain.id }));
    const token = dedupToken(`retried-${domain.id}`, 0, 100);
    await writeRows(t.runtime.clickhouse, { access: rows, error: [], rejects: [] }, token);
    await writeRows(t.runtime.clickhouse, { access: rows, error: [], rejects: [] }, token);
    const h = await health(domain.id);
    expect(h.stored).toEqual({ lastHour: 4, lastDay: 4 });
    expect(h.lastAccessLineAt).not.toBeNull();
    expect(h.lastErrorLineAt).toBeNull();
  });

  it('deleting the domain deletes its counts', async () => {
    const domain = await domainOf(null);
    await writeRows(t.runtime.clickhouse, { access: [accessRow(1, { domainId: domain.id })], error: [], rejects: [] }, dedupToken(`deleted-${domain.id}`, 0, 1));
    const rowsOf = async () =>
      Promise.all(
        ['ingest_domain_minutes', 'ingest_domain_last'].map(async (table) => {
          const result = await t.runtime.clickhouse.query({ query: `SELECT count() AS n FROM ${table} WHERE domain_id = {d:UInt32}`, query_params: { d: domain.id }, format: 'JSONEachRow' });
          return Number((await result.json<{ n: string | number }>())[0]!.n);
        }),
      );
    expect(await rowsOf()).toEqual([1, 1]);
    expect((await call(t.app, 'DELETE', `/api/domains/${domain.id}`, { token: admin })).status).toBe(200);
    expect(await rowsOf()).toEqual([0, 0]);
  });

  it('lists a source routed by $host under the domains its lines went to, and only those', { timeout: 60_000 }, async () => {
    const [shop, blog, quiet] = [await domainOf(null), await domainOf(null), await domainOf(null)];
    const file = path.join(logDir, `all-${++seq}.log`);
    append(file, `${accessLine(1, shop.name)}\n${accessLine(2, blog.name)}\n`);
    await startWorker(`sources:\n  - access: ${JSON.stringify(file)}\n    format: ${JSON.stringify(HOST_FORMAT)}\n`);
    const name = `access ${file}`;
    for (const d of [shop, blog]) await until(async () => (await health(d.id)).sources.some((s: any) => s.name === name), `the source under ${d.name}`);
    expect((await health(quiet.id)).sources).toEqual([]);
  });

  it('a never-fed domain has no last line and is not stale; a domain stale past INGEST_STALE_S is', async () => {
    const never = await domainOf(null);
    expect(await health(never.id)).toMatchObject({ lastLineAt: null, lastAccessLineAt: null, lastErrorLineAt: null, secondsSinceLastLine: null, stale: false });
    // A line stored two hours ago (the last insert's time is what counts, not the line's own).
    const old = await domainOf(null);
    await t.runtime.clickhouse.command({
      query: "INSERT INTO ingest_domain_last (domain_id, kind, last_stored) VALUES ({d:UInt32}, 'access', now64(3) - INTERVAL 2 HOUR)",
      query_params: { d: old.id },
    });
    const h = await health(old.id);
    expect(h.stale).toBe(true);
    expect(h.secondsSinceLastLine).toBeGreaterThan(7199);
    expect(h.secondsSinceLastLine).toBeLessThan(7260);
  });
});

describe('the reports of a worker’s sources', () => {
  const statsOf = (n: number, domainId?: number) => {
    const s = newStats(`access /var/log/nginx/site-${n}.access.log`, [`site-${n}.example.com`]);
    if (domainId !== undefined) s.lastStoredByDomain[domainId] = Date.now();
    return { ...s, state: 'running' as const, lagBytes: n };
  };
  const rowsOf = (worker: string) =>
    t.runtime.db.query<{ name: string; lag_bytes: string | number; version: string }>(sql`select name, lag_bytes, xmin::text as version from ingest_sources where worker_id = ${worker} order by name`);

  it('writes 1,000 sources in one statement, rewrites only those that changed, drops those gone and workers silent for a day', async () => {
    const worker = `test-host:/reports/${process.pid}`;
    const thousand = Array.from({ length: 1000 }, (_, n) => statsOf(n));
    await publishSources(t.runtime.db, worker, thousand);
    const first = await rowsOf(worker);
    expect(first).toHaveLength(1000);
    // The same figures again: nothing is rewritten; one lag changed: that row alone.
    await publishSources(t.runtime.db, worker, thousand.map((s, n) => (n === 7 ? { ...s, lagBytes: 1234 } : s)));
    const second = await rowsOf(worker);
    const changed = second.filter((r, i) => r.version !== first[i]!.version).map((r) => [r.name, Number(r.lag_bytes)]);
    expect(changed).toEqual([['access /var/log/nginx/site-7.access.log', 1234]]);
    // A source no longer configured goes.
    await publishSources(t.runtime.db, worker, thousand.slice(1));
    expect(await rowsOf(worker)).toHaveLength(999);

    // A worker silent for a day goes, with its sources, at another worker's report.
    await t.runtime.db.query(sql`update ingest_workers set reported_at = now() - interval '25 hours' where id = ${worker}`);
    await publishSources(t.runtime.db, `${worker}-other`, []);
    expect(await rowsOf(worker)).toHaveLength(0);
  });

  it('shows a source of a worker that stopped reporting as such', async () => {
    const domain = await domainOf(null);
    const worker = `test-host:/silent/${process.pid}`;
    await publishSources(t.runtime.db, worker, [statsOf(1, domain.id)]);
    expect((await health(domain.id)).sources).toEqual([{ name: 'access /var/log/nginx/site-1.access.log', state: 'running', lagBytes: 1, reportedAt: expect.any(String), reporting: true }]);
    await t.runtime.db.query(sql`update ingest_workers set reported_at = now() - interval '31 seconds' where id = ${worker}`);
    expect((await health(domain.id)).sources).toMatchObject([{ state: 'running', reporting: false }]);
  });
});

/** `count` rejects of `domainId` in one insert, from source identity `identity`: their lines say which. */
async function storeRejects(domainId: number | null, identity: string, count: number, patch: Partial<RejectRow> = {}): Promise<void> {
  const rows: RejectRow[] = Array.from({ length: count }, (_, i) => ({
    domainId,
    kind: 'access',
    source: '/var/log/nginx/x.access.log',
    identity,
    offset: i * 100,
    reason: 'does not parse: expected [ at 12',
    cause: 'unparsed',
    line: `${identity} ${i}`,
    length: 12,
    ...patch,
  }));
  await insertRejects(t.runtime.clickhouse, rows, dedupToken(identity, 0, count));
}

describe('the rejects listing', () => {
  it('pages a domain’s rejected lines newest first, whole and without overlap, and filters them by cause', async () => {
    const domain = await domainOf(reader);
    await storeRejects(domain.id, 'a', 10);
    await storeRejects(domain.id, 'b', 10);
    await storeRejects(domain.id, 'c', 3, { cause: 'too_long', reason: 'line longer than 65536 bytes', line: SCRIPT, length: 70_000 });
    const pageOf = (query: string) => call(t.app, 'GET', `/api/logs/domains/${domain.id}/rejects?${query}`, { token: reader.token });
    const lines: string[] = [];
    for (const page of [1, 2, 3]) {
      const res = await pageOf(`page=${page}&limit=10`);
      expect(res.status).toBe(200);
      expect(res.body.data.pagination).toEqual({ page, limit: 10, total: 23, pages: 3 });
      lines.push(...res.body.data.rejects.map((r: any) => r.line));
    }
    const expected = [...[2, 1, 0].map(() => SCRIPT), ...[9, 8, 7, 6, 5, 4, 3, 2, 1, 0].map((i) => `b ${i}`), ...[9, 8, 7, 6, 5, 4, 3, 2, 1, 0].map((i) => `a ${i}`)];
    expect(lines).toEqual(expected);

    const tooLong = await pageOf('cause=too_long');
    expect(tooLong.body.data.pagination.total).toBe(3);
    // The line as stored: markup is data, for the page to show as text.
    expect(tooLong.body.data.rejects[0]).toEqual({
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
      kind: 'access',
      source: '/var/log/nginx/x.access.log',
      cause: 'too_long',
      reason: 'line longer than 65536 bytes',
      line: SCRIPT,
      length: 70_000,
    });
    expect((await pageOf('page=4&limit=10')).body.data).toEqual({ rejects: [], pagination: { page: 4, limit: 10, total: 23, pages: 3 } });
  });
});

describe('hostile: whose rejects and health one sees', () => {
  it('a customer sees its own domain’s rejects and health, and gets 404 for another’s as for an unknown id', async () => {
    const mine = await domainOf(customer);
    const theirs = await domainOf(reader);
    const nobodys = await domainOf(null);
    await storeRejects(mine.id, `mine-${mine.id}`, 2);
    await storeRejects(theirs.id, `theirs-${theirs.id}`, 2, { line: 'secret line of theirs' });
    await storeRejects(null, `nobody-${nobodys.id}`, 2, { line: `unknown.example ${accessLine(1)}`, cause: 'unknown_domain' });

    const own = await call(t.app, 'GET', `/api/logs/domains/${mine.id}/rejects`, { token: customer.token });
    expect(own.status).toBe(200);
    expect(own.body.data.rejects.map((r: any) => r.line)).toEqual([`mine-${mine.id} 1`, `mine-${mine.id} 0`]);

    const notFound = { success: false, error: 'Domain not found' };
    for (const id of [theirs.id, nobodys.id, 2_000_000_000]) {
      for (const url of [`/api/logs/domains/${id}/rejects`, `/api/domains/${id}/ingest`]) {
        const res = await call(t.app, 'GET', url, { token: customer.token });
        expect({ url, status: res.status, body: res.body }).toEqual({ url, status: 404, body: notFound });
      }
      // Not even with domains: read (the reader sees its own only).
      if (id !== theirs.id) expect((await call(t.app, 'GET', `/api/domains/${id}/ingest`, { token: reader.token })).status).toBe(404);
    }
    // Health needs domains: read (403 for its own domain without it); the fleet's column is then null.
    expect((await call(t.app, 'GET', `/api/domains/${mine.id}/ingest`, { token: customer.token })).status).toBe(403);
    const fleet = await call(t.app, 'GET', '/api/domains?ingest=true', { token: customer.token });
    expect(fleet.body.data.domains).toEqual([expect.objectContaining({ id: mine.id, ingest: null })]);
    // Without a token: 401.
    expect((await call(t.app, 'GET', `/api/logs/domains/${mine.id}/rejects`)).status).toBe(401);
    // An administrator sees every domain's.
    expect((await call(t.app, 'GET', `/api/logs/domains/${theirs.id}/rejects`, { token: admin })).body.data.rejects.map((r: any) => r.line)).toEqual([
      'secret line of theirs',
      'secret line of theirs',
    ]);
  });

  it('refuses SQL in the query parameters and path with 422, and the rejects are still there', async () => {
    const mine = await domainOf(customer);
    await storeRejects(mine.id, `sql-${mine.id}`, 3);
    const cases: [string, string][] = [
      [`/api/logs/domains/${mine.id}/rejects?cause=${encodeURIComponent("unparsed' OR 1=1 --")}`, 'cause'],
      [`/api/logs/domains/${mine.id}/rejects?limit=${encodeURIComponent('1; DROP TABLE ingest_rejects')}`, 'limit'],
      [`/api/logs/domains/${mine.id}/rejects?page=${encodeURIComponent('1 OR 1=1')}`, 'page'],
      [`/api/logs/domains/${encodeURIComponent(`${mine.id} OR 1=1`)}/rejects`, 'domainId'],
      [`/api/domains/${encodeURIComponent(`${mine.id}) OR (1=1`)}/ingest`, 'domainId'],
      [`/api/domains?ingest=${encodeURIComponent("true' OR '1'='1")}`, 'ingest'],
    ];
    for (const [url, field] of cases) {
      const res = await call(t.app, 'GET', url, { token: customer.token });
      expect({ url, status: res.status, error: res.body.error, field: Object.keys(res.body.details ?? {}) }).toEqual({ url, status: 422, error: 'Validation failed', field: [field] });
    }
    const still = await call(t.app, 'GET', `/api/logs/domains/${mine.id}/rejects`, { token: customer.token });
    expect(still.body.data.pagination.total).toBe(3);
  });
});
