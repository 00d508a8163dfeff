/**
 * The reads of requests on the embedded engine (core/db/clickhouse.ts, requestReads): statements
 * side by side on a pool of chDB sessions, their parameters written as literals (withLiterals).
 * Hostile: every value shape the API accepts gives the same answer through the literal path as
 * through the bound path, over real rows holding those values; values not of their type are
 * refused by both; a statement stopped part way leaves none of its rows to the next one.
 */
import { TupleParam } from '@clickhouse/client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { derivedClient, EMBEDDED_READ_SESSIONS, requestReads, selectRows, withLiterals } from '../../../core/db/clickhouse.js';
import { createApp } from '../../../src/app.js';
import { insertDomain } from '../../../src/domains/store.js';
import { createReads } from '../../../src/reads/client.js';
import { call, type TestApp } from '../../support/app.js';
import { generateRows, HOSTILE, insertRows, LONG_URL_PCT, type Row } from '../../support/query-rows.js';
import { appWithAdmin } from '../../support/auth.js';
import { DAY_MS } from '../../../core/durations.js';

const BASE = Math.floor(Date.now() / DAY_MS) * DAY_MS - 3 * DAY_MS;
/** Text the API accepts, each value stored as a URL, a user agent and a referrer of real rows. */
const TEXTS = [
  '',
  "'",
  '"',
  '\\',
  "\\'",
  "'\\",
  '\\\\',
  '\\0',
  "x' OR 1=1; --",
  HOSTILE,
  '{f0:String}',
  '{x:UInt8}',
  '}{',
  '{{',
  '%_*',
  '\\%\\_\\*',
  'café Ç ünï',
  '😀 𝄞 🏳️‍🌈',
  '\u2028\u2029\u00a0',
  'a\nb\tc\rd\be\ff\u0001g',
  '`x`',
  `/long/${'\\\''.repeat(20_000)}`,
  LONG_URL_PCT,
];
let t: TestApp;
let admin: string;
let domainId: number;
/** The app as serve builds it: reads through requestReads' sessions, with literals. */
let literal: ReturnType<typeof createApp>;
/** The same stores read through the store's client: one statement at a time, bound parameters. */
let bound: ReturnType<typeof createApp>;

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin({ LOG_RETENTION_DAYS: '3650' }));
  domainId = (await insertDomain(t.runtime.db, { name: 'literals.example.com', ownerId: null })).id;
  const rows = generateRows({ seed: 31, domain: domainId, count: 1500, from: BASE, to: BASE + 2 * DAY_MS });
  const hostile = TEXTS.flatMap((text, i): Row[] =>
    [0, 1].map((k) => ({ ...rows[i]!, id: 100_000 + 2 * i + k, t: BASE + k * DAY_MS + i * 60_000, url: text, agent: text, referrer: text, method: text.slice(0, 16) })),
  );
  await insertRows(t.runtime.clickhouse, [...rows, ...hostile]);
  literal = t.app;
  bound = createApp({ ...t.runtime, clickhouse: derivedClient(t.runtime.clickhouse, {}), reads: createReads({ ...t.runtime.config, readsInFlight: 1 }) });
}, 120_000);

afterAll(() => t?.close());

const window = { dateRange: 'custom', startDate: new Date(BASE - DAY_MS).toISOString(), endDate: new Date(BASE + 3 * DAY_MS).toISOString() };

let lastBody: unknown;
/** The request through both paths: the same status, and for a 200 the same body. */
async function same(method: string, path: string, body?: unknown): Promise<number> {
  lastBody = body;
  const [a, b] = [await call(literal, method, path, { token: admin, body }), await call(bound, method, path, { token: admin, body })];
  expect(a.status, `${method} ${path} ${JSON.stringify(body)?.slice(0, 200)}: ${JSON.stringify(a.body).slice(0, 300)}`).toBe(b.status);
  if (a.status === 200) expect(a.body).toEqual(b.body);
  else expect(a.body.error ?? a.body).toEqual(b.body.error ?? b.body);
  return a.status;
}

describe('the read path of requests writes values as literals', () => {
  it('is the sessions and literals for the store client, the bound path for any other', () => {
    expect(requestReads(t.runtime.clickhouse)).not.toBe(t.runtime.clickhouse);
    const other = derivedClient(t.runtime.clickhouse, {});
    expect(requestReads(other)).toBe(other);
  });

  it('every text shape, as filters of each kind, grouped, and as the keys of a compared page: the same answers as bound', async () => {
    const query = (extra: Record<string, unknown>) => same('POST', '/api/logs/query', { domains: [domainId], metrics: ['requests', 'visitors'], ...window, ...extra });
    for (const text of TEXTS) {
      for (const op of ['is', 'isNot', 'contains', 'glob']) {
        for (const dimension of ['url', 'userAgent', 'referrer', 'method']) {
          // contains and glob take a pattern of 1–10,000 characters (refused before any SQL otherwise).
          const refused = (op === 'contains' || op === 'glob') && (text === '' || text.length > 10_000);
          expect(await query({ filters: [[op, dimension, [text]]] }), JSON.stringify(lastBody).slice(0, 300)).toBe(refused ? 422 : 200);
        }
      }
      // The page's keys come back from the rows and are sent again for the window before.
      expect(await query({ dimensions: ['url', 'userAgent'], filters: [['is', 'url', [text, `${text}x`]]], compare: 'previous', dateRange: 'custom', startDate: new Date(BASE + DAY_MS).toISOString(), endDate: new Date(BASE + 2 * DAY_MS - 1).toISOString() })).toBe(200);
    }
    // Every group of the window at once: all the shapes as keys of one statement.
    for (const dimensions of [['url'], ['url', 'userAgent'], ['referrerHost', 'method', 'statusCode'], ['time:hour', 'statusCode'], ['bot', 'domain'], ['ipAddress']]) {
      expect(await query({ dimensions, limit: 10_000, compare: 'previous', dateRange: 'custom', startDate: new Date(BASE + DAY_MS).toISOString(), endDate: new Date(BASE + 2 * DAY_MS - 1).toISOString() })).toBe(200);
    }
  }, 300_000);

  it('numbers at and past their bounds, negative, huge, and text the API refuses (NUL, a lone surrogate): the same answers as bound', async () => {
    const query = (extra: Record<string, unknown>) => same('POST', '/api/logs/query', { domains: [domainId], metrics: ['requests'], ...window, ...extra });
    for (const code of [0, 200, 404, 599, 65_535, 65_536, -1, 2 ** 31, 2 ** 53, 1e300, 1.5]) await query({ filters: [['is', 'statusCode', [code]]], dimensions: ['statusCode'] });
    for (const ids of [[domainId], [domainId, 2 ** 32 - 1], [2 ** 32], [-1], [2 ** 53 + 2], [0]]) await query({ domains: ids });
    for (const page of [1, 2, 1_000_000, 2 ** 31]) await query({ dimensions: ['url'], limit: 7, page });
    for (const text of ['a\u0000b', '\ud800', 'x\udc00y']) await query({ filters: [['is', 'url', [text]]] });
    for (const bot of [true, false]) await query({ filters: [['is', 'bot', [bot]]], dimensions: ['botName'] });
    for (const cidr of ['10.0.0.0/8', '2001:db8::/32', '::ffff:10.0.0.1/128']) await query({ filters: [['cidr', 'ipAddress', [cidr]]] });
  }, 120_000);

  it("the listing and the search with every text shape: the same answers as bound", async () => {
    for (const text of TEXTS.filter((x) => x.length < 2000)) {
      const q = new URLSearchParams({ url: text, startDate: window.startDate, limit: '5' });
      await same('GET', `/api/logs/domains/${domainId}/access?${q}`);
      await same('GET', `/api/logs/domains/${domainId}/access?${q}&page=3`);
      if (text.trim()) await same('POST', `/api/logs/domains/${domainId}/search`, { query: text, startDate: window.startDate, fields: ['url', 'userAgent', 'referrer'] });
    }
  }, 120_000);
});

describe('withLiterals', () => {
  const store = () => derivedClient(t.runtime.clickhouse, {});
  const shapes: [string, unknown][] = [
    ...TEXTS.map((text): [string, unknown] => ['String', text]),
    ['UInt8', 0],
    ['UInt8', 255],
    ['UInt16', 65_535],
    ['UInt32', 4_294_967_295],
    ['UInt64', '18446744073709551615'],
    ['UInt64', 2 ** 53 - 1],
    ['Int64', '-9223372036854775808'],
    ['Int64', '9223372036854775807'],
    ['Int64', -(2 ** 53 - 1)],
    ['Int64', 9_007_199_254_740_993n],
    ['Array(String)', TEXTS],
    ['Array(String)', []],
    ['Array(UInt32)', [1, 4_294_967_295]],
    ['Array(Int8)', [-128, 127]],
    ['Array(Tuple(UInt32, String))', [new TupleParam([1, HOSTILE]), new TupleParam([2, '\\'])]],
    ['Array(Tuple(String, Int64, UInt8))', [new TupleParam([`{v:String}`, -5, 1])]],
    ['Tuple(String, UInt16)', new TupleParam(["'", 404])],
  ];

  it('every value shape of the types src/ binds reads back the same as bound: value and type', async () => {
    for (const [type, value] of shapes) {
      const sql = `SELECT {v:${type}} AS v, toTypeName(v) AS type`;
      const params = { v: value };
      const asBound = await selectRows(store(), sql, params);
      expect(await selectRows(store(), withLiterals(sql, params), {}), `${type} ${JSON.stringify(value, (_, x) => (typeof x === 'bigint' ? String(x) : x))?.slice(0, 100)}`).toEqual(asBound);
    }
  });

  it('refuses what the bound path refuses, and the integers the bound path wraps around', async () => {
    const refusedByBoth: [string, unknown][] = [
      ['UInt32', -1],
      ['UInt32', 1.5],
      ['Int64', '1 OR 1'],
      ['Int64', '0x10'],
      ['Array(Tuple(UInt32, UInt32))', [new TupleParam([1])]],
    ];
    for (const [type, value] of refusedByBoth) {
      const sql = `SELECT {v:${type}} AS v`;
      await expect(selectRows(store(), sql, { v: value }), `bound ${type} ${String(value)}`).rejects.toThrow();
      expect(() => withLiterals(sql, { v: value }), `${type} ${String(value)}`).toThrow(TypeError);
    }
    // The bound path reads these modulo the type's range (256 as a UInt8 is 0); no caller may rely on that.
    const wrappedByBound: [string, unknown][] = [
      ['UInt8', 256],
      ['UInt64', '18446744073709551616'],
      ['Int64', '9223372036854775808'],
      ['Array(UInt16)', [1, 70_000]],
    ];
    for (const [type, value] of wrappedByBound) expect(() => withLiterals(`SELECT {v:${type}}`, { v: value }), `${type} ${String(value)}`).toThrow(/is not a/);
    // Stricter than the bound path, which writes any value as text: a String is a string, a tuple a TupleParam, a type one src/ binds.
    expect(() => withLiterals('SELECT {v:String}', { v: 5 })).toThrow(TypeError);
    expect(() => withLiterals('SELECT {v:Tuple(UInt8, UInt8)}', { v: [1, 2] })).toThrow(TypeError);
    expect(() => withLiterals('SELECT {v:Float32}', { v: 1 })).toThrow(/no literal for Float32/);
    expect(() => withLiterals('SELECT {v:String}', {})).toThrow(/no value for \{v:String\}/);
  });
});

describe('the read sessions', () => {
  it("a statement stopped part way through its rows leaves none of them to the next statement on its session (another request's)", async () => {
    const reads = requestReads(t.runtime.clickhouse);
    // One row a block, half a second each: rows are written out before the time limit stops it.
    const stopped = selectRows(reads, 'SELECT sleepEachRow(0.5) AS leftover FROM numbers({n:UInt32}) SETTINGS max_block_size = 1, max_execution_time = 1', { n: 20 });
    await expect(stopped).rejects.toThrow(/Timeout exceeded/);
    // The session freed last is taken first: the first of these runs on the one that failed.
    const next = await Promise.all(Array.from({ length: EMBEDDED_READ_SESSIONS + 1 }, (_, x) => selectRows(reads, 'SELECT {x:UInt8} AS x', { x })));
    expect(next).toEqual(Array.from({ length: EMBEDDED_READ_SESSIONS + 1 }, (_, x) => [{ x }]));
  });

  it('run the statements of different requests side by side: a short one answers while a long one runs', async () => {
    const reads = requestReads(t.runtime.clickhouse);
    let longDone = false;
    const long = selectRows(reads, 'SELECT sleepEachRow(0.1) AS s FROM numbers({n:UInt32}) SETTINGS max_block_size = 1', { n: 30 }).then((rows) => {
      longDone = true;
      return rows;
    });
    expect(await selectRows(reads, 'SELECT {x:UInt8} AS x', { x: 1 })).toEqual([{ x: 1 }]);
    expect(longDone).toBe(false);
    expect(await long).toHaveLength(30);
  });
});
