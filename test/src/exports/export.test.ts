/**
 * Log exports (docs/reference/logs.md#exports): POST /api/logs/domains/:domainId/export and the
 * bearer-less download at /api/downloads/<file name>: fields, formats, filters, spreadsheet-safe
 * cells, who may ask and download, and the OpenAPI document.
 */
import { describe, expect, it } from 'vitest';
import { sql } from '../../../core/db/sql.js';
import { downloadsInProgress, sweepExpiredExports } from '../../../src/exports/service.js';
import { EXPORT_LIMITS } from '../../../src/exports/service.js';
import { call } from '../../support/app.js';
import { activityOf, expectAuthRequired, expectValidation, freshUser, ISO_MS } from '../../support/auth.js';
import { T0 } from '../../support/ingest.js';
import { registerDomain } from '../../support/domains.js';
import { ACCESS_FIELDS, admin, app, asEntry, BULK, createOk, domain, downloadText, ERROR_FIELDS, ERROR_LINES, exportUrl, fetchDownload, Gen, gen, gens, importText, ipv4InCidr, lastExportId, neutralised, newestFirst, owner, parseCsv, t, TRICKY, useExportShop } from './shop.js';

useExportShop();

describe('POST /api/logs/domains/:domainId/export', () => {
  it('answers 201 with a download link under BASE_URL and an expiry EXPORT_TTL_S ahead', async () => {
    const before = Date.now();
    const data = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    expect(Object.keys(data).sort()).toEqual(['downloadUrl', 'expiresAt']);
    expect(data.downloadUrl).toMatch(/^http:\/\/tailhouse\.test\/api\/downloads\/[A-Za-z0-9_-]{43}\.csv$/);
    expect(data.expiresAt).toMatch(ISO_MS);
    const expires = Date.parse(data.expiresAt);
    expect(expires).toBeGreaterThanOrEqual(before + 86_400_000 - 1000);
    expect(expires).toBeLessThanOrEqual(Date.now() + 86_400_000 + 1000);
    const other = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString() });
    expect(other.downloadUrl).toMatch(/\/api\/downloads\/[A-Za-z0-9_-]{43}\.ndjson$/);
    expect(other.downloadUrl).not.toBe(data.downloadUrl);
  });

  it('records export.create in the activity of the user who exported', async () => {
    await createOk({ type: 'error', format: 'json', startDate: new Date(T0).toISOString() });
    const activity = await activityOf(app, admin, owner.id);
    const entry = activity.find((a) => a.action === 'export.create');
    expect(entry).toBeDefined();
    expect(entry!.resource).toMatch(new RegExp(`^domains/${domain.id}/exports/\\d+$`));
    expect(entry!.details).toContain(domain.name);
    expect(entry!.userAgent).toBe('vitest');
  });

  it('needs a bearer token (401), logs: read (403), and a domain the caller may see (404, also for another owner)', async () => {
    const body = { type: 'access', startDate: new Date(T0).toISOString() };
    expectAuthRequired(await call(app, 'POST', exportUrl(domain.id), { body }));
    expectAuthRequired(await call(app, 'POST', exportUrl(domain.id), { body, token: 'not-a-token' }));

    const stranger = await freshUser(app, admin, 'stranger');
    const bola = await call(app, 'POST', exportUrl(domain.id), { token: stranger.token, body });
    expect(bola.status).toBe(404);
    expect(bola.body).toEqual({ success: false, error: 'Domain not found' });
    const unknown = await call(app, 'POST', exportUrl(999_999), { token: owner.token, body });
    expect(unknown.status).toBe(404);
    expect(unknown.body).toEqual({ success: false, error: 'Domain not found' });

    // The stranger's own domain, without logs: read.
    const own = await registerDomain(app, admin, { ownerId: stranger.id, tag: 'stranger' });
    const revoked = await call(app, 'PUT', `/api/users/${stranger.id}/permissions`, { token: admin, body: { permissions: [] } });
    expect(revoked.status).toBe(200);
    const forbidden = await call(app, 'POST', exportUrl(own.id), { token: stranger.token, body });
    expect(forbidden.status).toBe(403);
    expect(forbidden.body).toEqual({ success: false, error: 'Insufficient permissions' });
  });

  it('answers 422 for bad bodies, naming each offending field', async () => {
    const start = new Date(T0).toISOString();
    // details maps top-level fields; an issue inside `filters` is led by where in it (`method[1]: …`).
    const bad = async (body: unknown, fields: string[], lead = '') => {
      const res = await call(app, 'POST', exportUrl(domain.id), { token: owner.token, body });
      expectValidation(res, fields);
      expect(Object.keys(res.body.details), JSON.stringify(res.body.details)).toEqual(fields);
      expect(res.body.details[fields[0]!].startsWith(lead), res.body.details[fields[0]!]).toBe(true);
    };
    await bad({ type: 'access', startDate: start, extra: 1 }, ['extra']);
    await bad({ type: 'access' }, ['startDate']);
    await bad({ startDate: start }, ['type']);
    await bad({ type: 'syslog', startDate: start }, ['type']);
    await bad({ type: 'access', format: 'xlsx', startDate: start }, ['format']);
    await bad({ type: 'access', startDate: 'yesterday' }, ['startDate']);
    await bad({ type: 'access', startDate: '2026-02-30' }, ['startDate']);
    await bad({ type: 'access', startDate: 1_700_000_000 }, ['startDate']);
    await bad({ type: 'access', startDate: start, endDate: 'soon' }, ['endDate']);
    await bad({ type: 'access', startDate: start, endDate: new Date(T0 - 1000).toISOString() }, ['endDate']);
    await bad({ type: 'access', startDate: new Date(Date.now() + 3_600_000).toISOString() }, ['startDate']);
    await bad({ type: 'access', startDate: start, filters: 'status=500' }, ['filters']);
    await bad({ type: 'access', startDate: start, filters: { statusCode: [404, '6xx'] } }, ['filters'], 'statusCode[1]: ');
    await bad({ type: 'access', startDate: start, filters: { statusCode: [] } }, ['filters'], 'statusCode: ');
    await bad({ type: 'access', startDate: start, filters: { method: ['GET', 'NOT A METHOD'] } }, ['filters'], 'method');
    await bad({ type: 'access', startDate: start, filters: { ipAddress: '10.0.0.0/33' } }, ['filters'], 'ipAddress: ');
    await bad({ type: 'access', startDate: start, filters: { colour: 'red' } }, ['filters'], 'Unknown field colour');
    // Filters are those of the type: an access filter on an error export is unknown there.
    await bad({ type: 'error', startDate: start, filters: { statusCode: [500] } }, ['filters'], 'Unknown field statusCode');
    await bad({ type: 'error', startDate: start, filters: { level: ['fatal'] } }, ['filters'], 'level');

    const notJson = await call(app, 'POST', exportUrl(domain.id), { token: owner.token, body: '{"type": ' });
    expect(notJson.status).toBe(400);
  });
});

describe('GET /api/downloads/:file', () => {
  it('streams CSV without a bearer header: RFC 4180, the header row of the spec, every row newest first', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    const { res, text } = await downloadText(downloadUrl);
    expect(res.headers.get('content-type')).toMatch(/^text\/csv; charset=utf-8/);
    expect(res.headers.get('content-disposition')).toMatch(new RegExp(`^attachment; filename="${domain.name.replaceAll('.', '\\.')}-access-\\d{8}T\\d{6}Z\\.csv"$`));
    expect(res.headers.get('cache-control')).toBe('no-store');

    const records = parseCsv(text);
    expect(records[0]).toEqual(ACCESS_FIELDS);
    const rows = records.slice(1);
    expect(rows).toHaveLength(gens.length);
    const expected = newestFirst(gens);
    const ids = new Set<string>();
    rows.forEach((row, i) => {
      const e = asEntry(expected[i]!);
      const [id, ...rest] = row;
      expect(id).toMatch(/^[1-9]\d*$/);
      ids.add(id!);
      expect(rest).toEqual([
        e.timestamp,
        e.ipAddress,
        e.method,
        e.url,
        e.protocol,
        String(e.statusCode),
        String(e.responseSize),
        neutralised(e.referrer),
        neutralised(e.userAgent),
        String(e.responseTime),
      ]);
    });
    expect(ids.size).toBe(rows.length);
  });

  it('neutralises formula cells and quotes commas, quotes and line breaks in CSV', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0 + BULK * 1000).toISOString() });
    const { text } = await downloadText(downloadUrl);
    // Raw text checks, independent of the reader above: every string is quoted, quotes doubled.
    expect(text.startsWith(`${ACCESS_FIELDS.join(',')}\r\n`)).toBe(true);
    expect(text).toContain(`,"'=HYPERLINK(""http://evil.example"",""x"")",`);
    expect(text).toContain(`,"https://a.example/?a=1,b=2","'+1+2",`);
    expect(text).toContain(`,"'-2+3",`);
    expect(text).toContain(`,"'@SUM(A1:A9)",`);
    expect(text).toContain(`,"'\tstarts with a tab",`);
    expect(text).toContain(`,"'\rstarts with a carriage return",`);
    expect(text).toContain(`,"two\nlines, ""quoted""",`);
    expect(text).toContain(`,"crlf\r\ninside",`);
    expect(text).toContain(`,"ünïcødé 😀 ok",`);
    expect(text).toContain(`,"""","ends with a quote""",`);
    expect(text).toContain(`,"/q?name=O'Brien\\x",`);
    const rows = parseCsv(text).slice(1);
    expect(rows.map((r) => r[9])).toEqual(newestFirst(gens.slice(BULK)).map((g) => neutralised(g.userAgent)));
  });

  it('streams NDJSON: one entry a line, the listing fields and formats, values raw', async () => {
    const { downloadUrl } = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString() });
    const { res, text } = await downloadText(downloadUrl);
    expect(res.headers.get('content-type')).toMatch(/^application\/x-ndjson/);
    expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename=".+-access-\d{8}T\d{6}Z\.ndjson"$/);
    expect(text.endsWith('\n')).toBe(true);
    const lines = text.slice(0, -1).split('\n');
    expect(lines).toHaveLength(gens.length);
    const expected = newestFirst(gens);
    lines.forEach((line, i) => {
      const entry = JSON.parse(line);
      expect(Object.keys(entry)).toEqual(ACCESS_FIELDS);
      expect(Number.isSafeInteger(entry.id) && entry.id > 0).toBe(true);
      expect(entry.timestamp).toMatch(ISO_MS);
      const { id: _id, ...rest } = entry;
      expect(rest).toEqual(asEntry(expected[i]!));
    });
    // Formulas are not touched in NDJSON.
    expect(lines.some((l) => JSON.parse(l).userAgent === '=HYPERLINK("http://evil.example","x")')).toBe(true);

    // The listing's first page, entry for entry (ids included).
    const listing = await call(app, 'GET', `/api/logs/domains/${domain.id}/access?startDate=${new Date(T0).toISOString()}&limit=1000`, { token: owner.token });
    expect(listing.status).toBe(200);
    expect(listing.body.data.pagination.total).toBe(gens.length);
    expect(lines.slice(0, 1000).map((l) => JSON.parse(l))).toEqual(listing.body.data.logs);
  });

  it('exports error entries with their context object (NDJSON) or its JSON text (CSV), filtered by level', async () => {
    const start = new Date(T0).toISOString();
    const ndjson = await downloadText((await createOk({ type: 'error', format: 'json', startDate: start })).downloadUrl);
    const entries = ndjson.text.trim().split('\n').map((l) => JSON.parse(l));
    expect(entries.map((e) => Object.keys(e))).toEqual(ERROR_LINES.map(() => ERROR_FIELDS));
    const expected = [...ERROR_LINES].reverse();
    expect(entries.map((e) => [e.timestamp, e.level, e.message])).toEqual(expected.map((e) => [new Date(T0 + e.n * 60_000).toISOString(), e.level, e.message]));
    expect(entries[3].context).toEqual({ client: '203.0.113.8', server: 'shop', request: 'POST /api HTTP/1.1', upstream: 'http://127.0.0.1:8080/api', host: 'shop.example.com' });
    expect(entries[1].context).toEqual({});
    const listing = await call(app, 'GET', `/api/logs/domains/${domain.id}/error?startDate=${start}`, { token: owner.token });
    expect(listing.status).toBe(200);
    expect(entries).toEqual(listing.body.data.logs);

    const csv = await downloadText((await createOk({ type: 'error', startDate: start, filters: { level: ['warn', 'info'] } })).downloadUrl);
    const records = parseCsv(csv.text);
    expect(records[0]).toEqual(ERROR_FIELDS);
    expect(records.slice(1).map((r) => r[2])).toEqual(['info', 'info', 'warn']);
    const warn = records[3]!;
    expect(warn[3]).toBe(`'=cmd|' /C calc'!A0 an upstream response is buffered`);
    expect(JSON.parse(warn[4]!)).toEqual(entries[3].context);

    const one = await downloadText((await createOk({ type: 'error', startDate: start, filters: { level: 'error' } })).downloadUrl);
    expect(parseCsv(one.text).slice(1).map((r) => r[2])).toEqual(['error', 'error']);
  });

  it('counts equal the independent computation over the generated lines and the listing totals, for each filter', async () => {
    const start = T0 + 100_000;
    const end = T0 + (BULK + TRICKY.length) * 1000;
    const inRange = gens.filter((g) => g.ms >= start && g.ms <= end);
    const cases: { filters: Record<string, unknown>; query: string | null; keep: (g: Gen) => boolean }[] = [
      { filters: {}, query: '', keep: () => true },
      { filters: { statusCode: [404] }, query: 'statusCode=404', keep: (g) => g.statusCode === 404 },
      { filters: { statusCode: ['5xx'] }, query: 'statusCode=5xx', keep: (g) => g.statusCode >= 500 },
      { filters: { statusCode: [301, '5xx'] }, query: null, keep: (g) => g.statusCode === 301 || g.statusCode >= 500 },
      { filters: { method: ['post'] }, query: 'method=post', keep: (g) => g.method === 'POST' },
      { filters: { method: ['GET', 'delete'] }, query: null, keep: (g) => g.method === 'GET' || g.method === 'DELETE' },
      { filters: { ipAddress: '192.168.0.0/16' }, query: 'ipAddress=192.168.0.0%2F16', keep: (g) => ipv4InCidr(g.ipAddress, '192.168.0.0/16') },
      { filters: { ipAddress: '10.1.2.3' }, query: 'ipAddress=10.1.2.3', keep: (g) => g.ipAddress === '10.1.2.3' },
      { filters: { url: '/item/12' }, query: 'url=%2Fitem%2F12', keep: (g) => g.url.includes('/item/12') },
      { filters: { url: '/item/*?q=3' }, query: 'url=%2Fitem%2F*%3Fq%3D3', keep: (g) => /^\/item\/.*\?q=3$/.test(g.url) },
      { filters: { url: "O'Brien\\" }, query: null, keep: (g) => g.url.includes("O'Brien\\") },
      {
        filters: { statusCode: ['2xx', 404], method: ['GET', 'PUT'], url: '?q=1' },
        query: null,
        keep: (g) => (g.statusCode < 300 || g.statusCode === 404) && (g.method === 'GET' || g.method === 'PUT') && g.url.includes('?q=1'),
      },
    ];
    for (const c of cases) {
      const expected = inRange.filter(c.keep);
      const { downloadUrl } = await createOk({
        type: 'access',
        format: 'json',
        startDate: new Date(start).toISOString(),
        endDate: new Date(end).toISOString(),
        filters: c.filters,
      });
      const { text } = await downloadText(downloadUrl);
      const urls = text.split('\n').filter(Boolean).map((l) => JSON.parse(l).url);
      expect(urls, JSON.stringify(c.filters)).toEqual(newestFirst(expected).map((g) => g.url));
      expect(expected.length, JSON.stringify(c.filters)).toBeGreaterThan(0);

      if (c.query !== null) {
        const sep = c.query ? '&' : '';
        const listing = await call(app, 'GET', `/api/logs/domains/${domain.id}/access?${c.query}${sep}startDate=${new Date(start).toISOString()}&endDate=${new Date(end).toISOString()}&limit=1`, { token: owner.token });
        expect(listing.status, JSON.stringify(listing.body)).toBe(200);
        expect(listing.body.data.pagination.total, c.query).toBe(expected.length);
      }
    }
  });

  it('gives responseTime null (NDJSON) or an empty field (CSV) where the log format has no $request_time', async () => {
    const made = await registerDomain(app, admin, { ownerId: owner.id, tag: 'combined' });
    const d = made;
    const line = gen(1).line.replace(/ [0-9.]+$/, '');
    await importText(d.name, `${line}\n`, 'access', 'combined');
    const start = new Date(T0).toISOString();
    const ndjson = await downloadText((await createOk({ type: 'access', format: 'json', startDate: start }, owner.token, d.id)).downloadUrl);
    expect(JSON.parse(ndjson.text)).toMatchObject({ ...asEntry(gen(1)), responseTime: null });
    const csv = await downloadText((await createOk({ type: 'access', startDate: start }, owner.token, d.id)).downloadUrl);
    const rows = parseCsv(csv.text);
    expect(rows).toHaveLength(2);
    expect(rows[1]![10]).toBe('');
    expect(csv.text.endsWith(',\r\n')).toBe(true);
  });

  it('fixes endDate at creation: entries logged later with later times are not in the file', async () => {
    const { downloadUrl } = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString() });
    // A line from after the export was created, through the real ingest path.
    await importText(domain.name, `${gen(0, { ms: Date.now() + 60_000, url: '/after-the-export' }).line}\n`);
    const { text } = await downloadText(downloadUrl);
    expect(text).not.toContain('/after-the-export');
    expect(text.trim().split('\n')).toHaveLength(gens.length);
    const again = await createOk({ type: 'access', format: 'json', startDate: new Date(T0).toISOString(), endDate: new Date(Date.now() + 3_600_000).toISOString() });
    expect((await downloadText(again.downloadUrl)).text).toContain('/after-the-export');
  });

  it('answers 404 for unknown or malformed file names and for the other format, and HEAD runs no query', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    const file = new URL(downloadUrl).pathname.split('/').pop()!;
    const token = file.slice(0, -4);
    for (const name of [`${'A'.repeat(43)}.csv`, `${token}.ndjson`, token, `${token}.csv.gz`, 'x.csv', `..%2F${token}.csv`]) {
      const res = await app.request(`/api/downloads/${name}`);
      expect(res.status, name).toBe(404);
      expect(await res.json()).toEqual({ success: false, error: 'Download not found' });
    }
    const head = await fetchDownload(downloadUrl, 'HEAD');
    expect(head.status).toBe(200);
    expect(head.headers.get('content-disposition')).toMatch(/^attachment;/);
    expect(downloadsInProgress()).toBe(0);
  });

  it('answers 410 once expired; the sweep removes records a week past expiry, after which the link is unknown', async () => {
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(T0).toISOString() });
    const id = await lastExportId();
    await t.runtime.db.query(sql`update exports set expires_at = now() - interval '1 second' where id = ${id}`);
    const expired = await fetchDownload(downloadUrl);
    expect(expired.status).toBe(410);
    expect(await expired.json()).toEqual({ success: false, error: 'Download link expired' });

    // Still within the week kept after expiry: the sweep leaves it.
    await sweepExpiredExports(t.runtime.db);
    expect((await fetchDownload(downloadUrl)).status).toBe(410);
    const removed = await sweepExpiredExports(t.runtime.db, new Date(Date.now() + EXPORT_LIMITS.keepExpiredMs + 60_000));
    expect(removed).toBeGreaterThanOrEqual(1);
    expect((await fetchDownload(downloadUrl)).status).toBe(404);
  });

  it('stops working when the creator may no longer read the logs, and when the domain is deleted', async () => {
    const user = await freshUser(app, admin, 'leaver');
    const made = await registerDomain(app, admin, { ownerId: user.id, tag: 'leaver' });
    const d = made;
    await importText(d.name, `${gen(5).line}\n${gen(6).line}\n`);
    const first = await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, user.token, d.id);
    expect(parseCsv((await downloadText(first.downloadUrl)).text)).toHaveLength(3);
    // Deactivated: the link dies with the account's sessions.
    expect((await call(app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { active: false } })).status).toBe(200);
    expect((await fetchDownload(first.downloadUrl)).status).toBe(404);
    expect((await call(app, 'PUT', `/api/users/${user.id}`, { token: admin, body: { active: true } })).status).toBe(200);
    await downloadText(first.downloadUrl);

    // An admin's export of the same domain; deleting the domain removes both records (FK cascade).
    const byAdmin = await createOk({ type: 'access', startDate: new Date(T0).toISOString() }, admin, d.id);
    const [before] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from exports where domain_id = ${d.id}`);
    expect(before!.n).toBe(2);
    expect((await call(app, 'DELETE', `/api/domains/${d.id}`, { token: admin })).status).toBe(200);
    const [after] = await t.runtime.db.query<{ n: number }>(sql`select count(*)::int as n from exports where domain_id = ${d.id}`);
    expect(after!.n).toBe(0);
    expect((await fetchDownload(first.downloadUrl)).status).toBe(404);
    expect((await fetchDownload(byAdmin.downloadUrl)).status).toBe(404);
  });
});

describe('the OpenAPI document', () => {
  it('describes the export and the download', async () => {
    const res = await call(app, 'GET', '/api/openapi.json');
    expect(res.status).toBe(200);
    const create = res.body.paths['/api/logs/domains/{domainId}/export'].post;
    expect(create.security).toEqual([{ bearerAuth: [] }]);
    expect(Object.keys(create.responses)).toEqual(expect.arrayContaining(['201', '401', '403', '404', '422', '429']));
    expect(res.body.components.schemas.ExportRequest.properties).toHaveProperty('filters');
    const download = res.body.paths['/api/downloads/{file}'].get;
    expect(download.security).toBeUndefined();
    expect(Object.keys(download.responses)).toEqual(expect.arrayContaining(['200', '404', '410']));
  });
});
