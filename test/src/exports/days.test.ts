/**
 * Exports by UTC day (docs/reference/logs.md#exports): a range cut into whole days read one after
 * another, days without rows skipped, the answer the same as one read.
 */
import { Session } from 'chdb';
import { beforeAll, describe, expect, it, vi } from 'vitest';
import { concatenated, daySlices, type ClickhouseQuery, type QueryBytes } from '../../../src/exports/stream.js';
import { call } from '../../support/app.js';
import { abandonDownload } from '../../support/logs.js';
import { freshUser } from '../../support/auth.js';
import { until } from '../../support/ingest.js';
import { registerDomain } from '../../support/domains.js';
import { DAY_MS } from '../../../core/durations.js';
import { ACCESS_FIELDS, admin, app, createOk, downloadText, fetchDownload, neutralised, parseCsv, t, useExportShop } from './shop.js';

useExportShop();

// ---------------------------------------------------------------------------------------------
// Day slices: one query per UTC day, concatenated
// ---------------------------------------------------------------------------------------------

/** UTC midnight `k` days before today's. */
const dayStart = (k: number) => Math.floor(Date.now() / DAY_MS) * DAY_MS - k * DAY_MS;

interface SliceRow {
  id: number;
  ms: number;
  statusCode: number;
}

/** Access rows with exact millisecond times (nginx logs whole seconds), straight into the table. */
async function insertAccessRows(domainId: number, rows: SliceRow[]): Promise<void> {
  await t.runtime.clickhouse.insert({
    table: 'access_logs',
    format: 'JSONEachRow',
    values: rows.map((r) => ({
      domain_id: domainId,
      id: r.id,
      timestamp: new Date(r.ms).toISOString().replace('T', ' ').replace('Z', ''),
      ip_address: `10.9.${r.id >> 8}.${r.id & 255}`,
      method: 'GET',
      url: `/slice/${r.id}`,
      protocol: 'HTTP/1.1',
      status_code: r.statusCode,
      response_size: r.id * 10,
      referrer: '',
      user_agent: r.id % 2 ? '=odd agent' : 'even agent',
      response_time: r.id,
    })),
  });
}

/**
 * Rows on UTC days 4, 2 and 1 before today, none on day 3 (another domain has rows there, so its
 * partition exists): ties at the first and the last millisecond of a day, ids that do not follow
 * time, a row exactly at each end of the range and one just outside each. Day 2 has no 5xx.
 */
function sliceFixture() {
  const start = dayStart(4);
  const end = dayStart(1) + 12 * 3_600_000;
  const rows: SliceRow[] = [
    { id: 1, ms: start - 1, statusCode: 500 }, // last millisecond of day 5: before the range
    { id: 3, ms: start, statusCode: 500 }, // midnight, exactly startDate
    { id: 2, ms: start, statusCode: 200 },
    { id: 40, ms: start + 12 * 3_600_000, statusCode: 503 },
    { id: 6, ms: dayStart(3) - 1, statusCode: 200 }, // last millisecond of day 4
    { id: 5, ms: dayStart(3) - 1, statusCode: 502 },
    { id: 70, ms: dayStart(2), statusCode: 200 }, // midnight after the empty day 3
    { id: 8, ms: dayStart(2) + 1, statusCode: 404 },
    { id: 9, ms: dayStart(1) - 1, statusCode: 200 },
    { id: 11, ms: dayStart(1), statusCode: 500 },
    { id: 10, ms: dayStart(1), statusCode: 200 },
    { id: 12, ms: end, statusCode: 500 }, // exactly endDate
    { id: 13, ms: end + 1, statusCode: 200 }, // after the range
  ];
  const expected = (keep: (r: SliceRow) => boolean = () => true) =>
    rows.filter((r) => r.ms >= start && r.ms <= end && keep(r)).sort((a, b) => b.ms - a.ms || b.id - a.id);
  return { start, end, rows, expected };
}

describe('export by UTC day', () => {
  // A user of its own: the other tests use up much of the owner's hourly number of exports.
  let user: { id: number; token: string };
  beforeAll(async () => {
    user = await freshUser(app, admin, 'days');
  });

  it('cuts a range at UTC midnights, newest first, both ends of each slice included', () => {
    const range = { startDate: new Date(dayStart(4) + 5), endDate: new Date(dayStart(1) + 7) };
    const days = [1, 2, 4].map((k) => dayStart(k) / DAY_MS);
    // Unordered input, and a day outside the range, give the same slices.
    expect(daySlices([days[2]!, days[0]!, dayStart(9) / DAY_MS, days[1]!], range)).toEqual([
      { startDate: new Date(dayStart(1)), endDate: new Date(dayStart(1) + 7) },
      { startDate: new Date(dayStart(2)), endDate: new Date(dayStart(1) - 1) },
      { startDate: new Date(dayStart(4) + 5), endDate: new Date(dayStart(3) - 1) },
    ]);
    // A range within one day is one slice, the range itself.
    const inDay = { startDate: new Date(dayStart(2) + 1), endDate: new Date(dayStart(2) + 2) };
    expect(daySlices([dayStart(2) / DAY_MS], inDay)).toEqual([inDay]);
    expect(daySlices([], range)).toEqual([]);
  });

  it('runs the queries one after another and starts none after the reader went away or the signal was aborted', async () => {
    const events: string[] = [];
    const bytes: QueryBytes = async function* (query) {
      events.push(`start ${query.sql}`);
      try {
        yield new TextEncoder().encode(`${query.sql}1`);
        yield new TextEncoder().encode(`${query.sql}2`);
      } finally {
        events.push(`end ${query.sql}`);
      }
    };
    const queries: ClickhouseQuery[] = ['a', 'b', 'c'].map((sql) => ({ sql, params: {}, format: 'CSV' }));
    const text = async (source: AsyncIterable<Uint8Array>) => {
      let out = '';
      for await (const chunk of source) out += new TextDecoder().decode(chunk);
      return out;
    };

    expect(await text(concatenated(queries, bytes, new AbortController().signal))).toBe('a1a2b1b2c1c2');
    expect(events).toEqual(['start a', 'end a', 'start b', 'end b', 'start c', 'end c']);

    // A reader that takes one chunk and leaves: the query under way ends, no other starts.
    events.length = 0;
    const early = concatenated(queries, bytes, new AbortController().signal);
    expect((await early.next()).done).toBe(false);
    await early.return(undefined);
    expect(events).toEqual(['start a', 'end a']);

    // Aborted in the middle of a query: it is read out, the next does not start.
    events.length = 0;
    const abort = new AbortController();
    const stopped = concatenated(queries, bytes, abort.signal);
    await stopped.next();
    abort.abort();
    expect(await text(stopped)).toBe('a2');
    expect(events).toEqual(['start a', 'end a']);
  });

  it('equals the listing across day boundaries, in the same order, with one CSV header and one query per day', async () => {
    const made = await registerDomain(app, admin, { ownerId: user.id, tag: 'days' });
    const d = made;
    const other = await registerDomain(app, admin, { ownerId: user.id, tag: 'days-other' });
    const { start, end, rows, expected } = sliceFixture();
    await insertAccessRows(d.id, rows);
    await insertAccessRows(other.id, [{ id: 1, ms: dayStart(3) + 1000, statusCode: 500 }]);
    const range = { startDate: new Date(start).toISOString(), endDate: new Date(end).toISOString() };

    const listing = await call(app, 'GET', `/api/logs/domains/${d.id}/access?startDate=${range.startDate}&endDate=${range.endDate}&limit=1000`, { token: user.token });
    expect(listing.status).toBe(200);
    const logs = listing.body.data.logs as Record<string, unknown>[];
    expect(logs.map((e) => e.id)).toEqual(expected().map((r) => r.id));

    const streams = vi.spyOn(Session.prototype, 'queryStreamBind');
    try {
      const ndjson = await downloadText((await createOk({ type: 'access', format: 'json', ...range }, user.token, d.id)).downloadUrl);
      expect(ndjson.text.trim().split('\n').map((l) => JSON.parse(l))).toEqual(logs);
      // One query per UTC day holding rows (4, 2, 1: none for the empty day 3), newest first, each within its day.
      const bounds = streams.mock.calls.map(([, params]) => {
        const p = params as Record<string, number>;
        return [Number(p.f1), Number(p.f2)];
      });
      expect(bounds).toEqual([
        [dayStart(1), end],
        [dayStart(2), dayStart(1) - 1],
        [start, dayStart(3) - 1],
      ]);

      const csv = await downloadText((await createOk({ type: 'access', ...range }, user.token, d.id)).downloadUrl);
      const header = `${ACCESS_FIELDS.join(',')}\r\n`;
      expect(csv.text.startsWith(header)).toBe(true);
      expect(csv.text.split(header)).toHaveLength(2);
      const records = parseCsv(csv.text);
      expect(records.slice(1)).toEqual(
        logs.map((e) => ACCESS_FIELDS.map((f) => (typeof e[f] === 'string' ? neutralised(e[f] as string) : String(e[f] ?? '')))),
      );

      // A filter that leaves a day in the middle without rows (no 5xx on day 2).
      const fivexx = await downloadText((await createOk({ type: 'access', format: 'json', ...range, filters: { statusCode: ['5xx'] } }, user.token, d.id)).downloadUrl);
      expect(fivexx.text.trim().split('\n').map((l) => JSON.parse(l).id)).toEqual(expected((r) => r.statusCode >= 500).map((r) => r.id));
    } finally {
      streams.mockRestore();
    }
  });

  it('stops the day under way when the reader goes away, and starts no later day', async () => {
    const made = await registerDomain(app, admin, { ownerId: user.id, tag: 'days-cancel' });
    const d = made;
    // The newest day holds several of the engine's chunks (a granule of 8,192 rows each), so the
    // reader leaves in the middle of it, read-ahead included.
    await t.runtime.clickhouse.command({
      query: `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time)
        SELECT {d:UInt32}, number + 1, fromUnixTimestamp64Milli(toInt64({t:Int64} + number), 'UTC'), '10.0.0.1', 'GET', concat('/n/', toString(number)), 'HTTP/1.1', 200, 1, '', 'agent', 1
        FROM numbers(40000)`,
      query_params: { d: d.id, t: dayStart(1) },
    });
    await insertAccessRows(d.id, [{ id: 1_000_000, ms: dayStart(2), statusCode: 200 }]);
    const { downloadUrl } = await createOk({ type: 'access', startDate: new Date(dayStart(2)).toISOString(), endDate: new Date(dayStart(0) - 1).toISOString() }, user.token, d.id);

    const streams = vi.spyOn(Session.prototype, 'queryStreamBind');
    try {
      const res = await fetchDownload(downloadUrl);
      expect(res.status).toBe(200);
      await abandonDownload(res);
      expect(streams).toHaveBeenCalledTimes(1);
      const stream = streams.mock.results[0]!.value as { closed: boolean };
      await until(() => stream.closed, 'the query to be cancelled');
    } finally {
      streams.mockRestore();
    }
    // The next download of the same link runs to the end.
    const { text } = await downloadText(downloadUrl);
    expect(parseCsv(text)).toHaveLength(40_002);
  });
});
