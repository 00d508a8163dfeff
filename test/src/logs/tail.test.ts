/**
 * The live tail (GET /api/logs/domains/:domainId/tail, Server-Sent Events) over a real listening
 * server and real sockets, with rows written through the ingest sink (writeRows, ids from the
 * ingest's own allocator). The hub's ClickHouse client is wrapped to count the queries it sends
 * (a counter in front of the real client; every query still runs).
 */
import fs from 'node:fs';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { serve, type ServerType } from '@hono/node-server';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createIdAllocator } from '../../../ingest/ids.js';
import { dedupToken, writeRows, type AccessRow, type ErrorRow } from '../../../ingest/sinks/clickhouse.js';
import { createApp } from '../../../src/app.js';
import { ACCESS_TOKEN_TTL_S, signAccessToken } from '../../../src/auth/tokens.js';
import { NODE_SERVER_OPTIONS } from '../../../src/http/node-server.js';
import { createLogger } from '../../../core/log.js';
import type { ClickHouseClient } from '../../../core/db/clickhouse.js';
import { createTailHub, TAIL_LIMITS, type TailHub, type TailLimits } from '../../../src/logs/tail/service.js';
import { call, login, type TestApp } from '../../support/app.js';
import { appWithAdmin, freshUser } from '../../support/auth.js';
import { describeProc, exitOf, killChildren, start, waitForOutput } from '../../support/child.js';
import { until } from '../../support/ingest.js';
import { freePort } from '../../support/ports.js';
import { registerDomain } from '../../support/domains.js';

let t: TestApp;
let admin: string;

/** Tail queries sent through the hub's client: when, and the domain (the first bound parameter of each). */
const queries: { at: number; domainId: number }[] = [];
/** While set, the hubs' queries fail (ClickHouse unreachable). */
let clickhouseDown = false;

function counting(client: ClickHouseClient): ClickHouseClient {
  return new Proxy(client, {
    get(target, prop, receiver) {
      if (prop === 'query') {
        return (params: Parameters<ClickHouseClient['query']>[0]) => {
          queries.push({ at: Date.now(), domainId: Number(Object.values(params.query_params ?? {})[0]) });
          return clickhouseDown ? Promise.reject(new Error('connect ECONNREFUSED (the test took ClickHouse away)')) : target.query(params);
        };
      }
      const value = Reflect.get(target, prop, receiver);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

interface Server {
  hub: TailHub;
  base: string;
  close(): Promise<void>;
}

/** The hub's reports of closed tails ('live tail closed', with the reason). */
const closes: { domainId: number; reason: string }[] = [];
const hubLog = createLogger('info', { write: (line: string) => void (JSON.parse(line).msg === 'live tail closed' && closes.push(JSON.parse(line))) });

/** A server with a hub of its own: the limits given, the others as `serve` has them (TAIL_LIMITS, TAIL_PER_USER). */
async function startServer(limits: Partial<TailLimits> = {}): Promise<Server> {
  const hub = createTailHub({ ...t.runtime, clickhouse: counting(t.runtime.clickhouse), log: hubLog }, limits);
  const app = createApp(t.runtime, { tail: hub });
  const server = await new Promise<ServerType>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1', serverOptions: NODE_SERVER_OPTIONS }, () => resolve(s));
  });
  return {
    hub,
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ('closeAllConnections' in server) server.closeAllConnections();
      }),
  };
}

// Re-checks and ends are quick here so that the tests of losing access wait little. One user
// fills the whole process here (the per-user limit has its own test, on a server of its own).
const LIMITS: Partial<TailLimits> = { recheckMs: 250, endGraceMs: 1_000, keepaliveMs: 1_500, maxPerUser: TAIL_LIMITS.maxClients };
let main: Server;

beforeAll(async () => {
  ({ t, admin } = await appWithAdmin());
  main = await startServer(LIMITS);
}, 60_000);

afterAll(async () => {
  await main?.close();
  await t?.close();
});

// ---------------------------------------------------------------------------------------------
// An SSE client on a real socket

interface SseMessage {
  id?: string;
  event?: string;
  data?: string;
}

class SseClient {
  status = 0;
  headers: http.IncomingHttpHeaders = {};
  /** Dispatched messages with an event or data. */
  readonly events: { id: string; event: string; data: any }[] = [];
  readonly comments: string[] = [];
  /** The last event id, as EventSource keeps it (an id-only message sets it too). */
  lastId = '';
  retry: number | undefined;
  ended = false;
  /** The error body of a refused request. */
  body: any;
  private buffer = '';
  private message: SseMessage = {};
  private req!: http.ClientRequest;

  static open(base: string, path: string, options: { token?: string; lastEventId?: string; method?: string } = {}): Promise<SseClient> {
    const client = new SseClient();
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = { accept: 'text/event-stream' };
      if (options.token) headers.authorization = `Bearer ${options.token}`;
      if (options.lastEventId !== undefined) headers['last-event-id'] = options.lastEventId;
      client.req = http.request(base + path, { method: options.method ?? 'GET', headers, agent: false }, (res) => {
        client.status = res.statusCode ?? 0;
        client.headers = res.headers;
        res.setEncoding('utf8');
        let text = '';
        res.on('data', (chunk: string) => {
          if (client.status === 200) client.feed(chunk);
          else text += chunk;
        });
        const done = () => {
          client.ended = true;
          if (client.status !== 200 && text) client.body = JSON.parse(text);
        };
        res.on('end', done);
        res.on('close', done);
        res.on('error', done);
        resolve(client);
      });
      client.req.on('error', (err) => (client.status ? (client.ended = true) : reject(err)));
      client.req.end();
    });
  }

  private feed(chunk: string): void {
    this.buffer += chunk;
    const lines = this.buffer.split(/\r\n|\r|\n/);
    this.buffer = lines.pop()!;
    for (const line of lines) {
      if (line === '') {
        if (this.message.id !== undefined) this.lastId = this.message.id;
        if (this.message.event !== undefined || this.message.data !== undefined) {
          this.events.push({ id: this.lastId, event: this.message.event ?? 'message', data: JSON.parse(this.message.data ?? 'null') });
        }
        this.message = {};
      } else if (line.startsWith(':')) this.comments.push(line.slice(1).trim());
      else {
        const colon = line.indexOf(':');
        const field = line.slice(0, colon);
        const value = line.slice(colon + 1).replace(/^ /, '');
        if (field === 'retry') this.retry = Number(value);
        else if (field === 'id' || field === 'event' || field === 'data') this.message[field] = value;
      }
    }
  }

  entries(event?: 'access' | 'error') {
    return this.events.filter((e) => (event ? e.event === event : e.event === 'access' || e.event === 'error'));
  }

  waitFor<T>(check: (c: SseClient) => T | undefined | false, what: string, timeoutMs = 5_000): Promise<T> {
    return until(() => check(this), what, timeoutMs, 20);
  }

  close(): void {
    this.req.destroy();
  }
}

// ---------------------------------------------------------------------------------------------
// Rows written as the ingest writes them

let fileSeq = 0;
const ids = () => createIdAllocator(t.runtime.db);

/** A log file of one domain: each write is the next batch of its lines (100 bytes each), given ids by the ingest's allocator. */
class LogFile {
  private offset = 0;
  private readonly identity = `tail-test-${process.pid}-${++fileSeq}`;
  constructor(readonly domainId: number) {}

  async write(entries: { access?: Partial<AccessRow>[]; error?: Partial<ErrorRow>[] }): Promise<{ access: AccessRow[]; error: ErrorRow[] }> {
    const count = (entries.access?.length ?? 0) + (entries.error?.length ?? 0);
    const start = this.offset;
    this.offset += count * 100;
    const idOf = await ids().forBatch(this.identity, [this.domainId], start, this.offset);
    let at = start;
    const next = () => {
      const id = idOf(this.domainId, at);
      at += 100;
      return id;
    };
    const now = Date.now();
    const access = (entries.access ?? []).map((patch, i): AccessRow => ({ ...accessRow(this.domainId, now + i), ...patch, id: next() }));
    const error = (entries.error ?? []).map((patch, i): ErrorRow => ({ domainId: this.domainId, timestamp: now + i, level: 'error', message: `upstream timed out ${i}`, context: { client: '198.51.100.7' }, ...patch, id: next() }));
    await writeRows(t.runtime.clickhouse, { access, error, rejects: [] }, dedupToken(this.identity, start, this.offset));
    return { access, error };
  }
}

function accessRow(domainId: number, timestamp: number): Omit<AccessRow, 'id'> {
  return {
    domainId,
    timestamp,
    ipAddress: '203.0.113.7',
    method: 'GET',
    url: '/index.html',
    protocol: 'HTTP/1.1',
    statusCode: 200,
    responseSize: 512,
    referrer: '',
    userAgent: 'curl/8.5.0',
    responseTime: 3,
    host: null,
  };
}

/** A user with a domain of their own (through the API) and a token. */
async function owner(tag: string) {
  const user = await freshUser(t.app, admin, tag);
  const { id: domainId } = await registerDomain(t.app, admin, { ownerId: user.id, tag });
  return { user, domainId };
}

/** Resolves once a poll of the domain that started after this call has finished (the next one has started). */
async function afterNextPoll(domainId: number): Promise<void> {
  const count = () => queries.filter((q) => q.domainId === domainId).length;
  const now = count();
  await until(() => count() >= now + 2, 'a poll');
}

const tailPath = (domainId: number, query = '') => `/api/logs/domains/${domainId}/tail${query ? `?${query}` : ''}`;

/** Opens a tail and checks it was accepted. */
async function tail(domainId: number, token: string, query = '', server = main, lastEventId?: string): Promise<SseClient> {
  const client = await SseClient.open(server.base, tailPath(domainId, query), { token, ...(lastEventId !== undefined ? { lastEventId } : {}) });
  expect(client.status, JSON.stringify(client.body)).toBe(200);
  return client;
}

/** The listing's entries of these ids (newest first, as the listing orders them). */
async function listed(kind: 'access' | 'error', domainId: number, token: string, wanted: Set<number>, query = '') {
  const res = await call(t.app, 'GET', `/api/logs/domains/${domainId}/${kind}?limit=1000&startDate=${new Date(Date.now() - 3_600_000).toISOString()}${query ? `&${query}` : ''}`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  return (res.body.data.logs as { id: number }[]).filter((e) => wanted.has(e.id));
}


// ---------------------------------------------------------------------------------------------

describe('live tail', () => {
  it('streams the access and error entries stored after it opens, as the listings return them, within 2 s', async () => {
    const { user, domainId } = await owner('stream');
    const file = new LogFile(domainId);
    // Stored before the tail opens: not sent.
    await file.write({ access: [{ url: '/before' }] });
    const client = await tail(domainId, user.token);
    expect(client.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(client.headers['cache-control']).toBe('no-store');
    await client.waitFor((c) => c.retry !== undefined && c.lastId, 'the first message');
    expect(client.retry).toBe(TAIL_LIMITS.retryMs);

    const errors = new LogFile(domainId);
    const stored = Date.now();
    const written = await file.write({ access: [{ url: '/a', statusCode: 502 }, { url: '/b', timestamp: Date.now() - 60_000 }, { url: '/c' }] });
    const writtenErrors = await errors.write({ error: [{ level: 'warn', message: 'a "quoted" \\ message' }, { level: 'error' }] });
    await client.waitFor((c) => c.entries().length >= 5, 'five entries', 2_000);
    expect(Date.now() - stored).toBeLessThan(2_000);

    const access = new Set(written.access.map((r) => r.id));
    const error = new Set(writtenErrors.error.map((r) => r.id));
    expect(client.entries('access').map((e) => e.data)).toEqual(expect.arrayContaining(await listed('access', domainId, user.token, access)));
    expect(client.entries('error').map((e) => e.data)).toEqual(expect.arrayContaining(await listed('error', domainId, user.token, error)));
    expect(client.entries()).toHaveLength(5);
    expect(client.entries().map((e) => e.data.url)).not.toContain('/before');
    // One poll read them all: each file's entries in the order they were stored (the back-dated
    // one in its place), the two files interleaved by time.
    expect(client.entries('access').map((e) => e.data.url)).toEqual(['/a', '/b', '/c']);
    expect(client.entries('error').map((e) => e.data.level)).toEqual(['warn', 'error']);
    expect(client.entries().map((e) => e.data.url ?? e.data.level)).toEqual(['/a', '/b', '/c', 'warn', 'error']);
    for (const e of client.entries()) expect(e.id).toMatch(/^1(\.[ae][0-9a-z]+)+$/);
    client.close();
  });

  it('a client joining a running tail gets what is stored after it joined, whatever the filters of those already there', async () => {
    const { user, domainId } = await owner('join');
    const first = await tail(domainId, user.token, 'statusCode=404');
    await first.waitFor((c) => c.lastId, 'the first message');
    const file = new LogFile(domainId);
    await file.write({ access: [{ url: '/x1' }, { url: '/x2' }, { url: '/x3' }] });
    // Read (and passed over) by a poll of the first client's poller.
    await afterNextPoll(domainId);
    const second = await tail(domainId, user.token);
    await second.waitFor((c) => c.lastId, 'the first message');
    await file.write({ access: [{ url: '/after', statusCode: 404 }] });
    await second.waitFor((c) => c.entries().length >= 1, 'the entry stored after it joined');
    await first.waitFor((c) => c.entries().length >= 1, 'the 404');
    expect(second.entries().map((e) => e.data.url)).toEqual(['/after']);
    expect(first.entries().map((e) => e.data.url)).toEqual(['/after']);
    first.close();
    second.close();
  });

  it('sends an entry stored late with a time inside the window, never one older than the window (a backfill)', async () => {
    const { user, domainId } = await owner('late');
    const client = await tail(domainId, user.token);
    await client.waitFor((c) => c.lastId, 'the first message');
    const file = new LogFile(domainId);
    await file.write({ access: [{ url: '/old', timestamp: Date.now() - TAIL_LIMITS.windowMs - 60_000 }, { url: '/late', timestamp: Date.now() - TAIL_LIMITS.windowMs + 60_000 }] });
    await file.write({ access: [{ url: '/now' }] });
    await client.waitFor((c) => c.entries().length >= 2, 'the late and the new entry');
    expect(client.entries().map((e) => e.data.url)).toEqual(['/late', '/now']);
    client.close();
  });

  it('forgets a segment once its rows are older than the window, and then sends what is stored in it once', async () => {
    const windowMs = 3_000;
    const server = await startServer({ windowMs });
    try {
      const { user, domainId } = await owner('window');
      const client = await tail(domainId, user.token, '', server);
      await client.waitFor((c) => c.lastId, 'the first message');
      const file = new LogFile(domainId);
      await file.write({ access: [{ url: '/r1' }] });
      await client.waitFor((c) => c.entries().length >= 1, 'the first entry');
      // While it is inside the window it is not sent again.
      await afterNextPoll(domainId);
      await afterNextPoll(domainId);
      expect(client.entries().map((e) => e.data.url)).toEqual(['/r1']);
      // Past the window (and a poll later) the segment's mark is gone; the file goes on.
      const stored = Date.parse(client.entries()[0]!.data.timestamp);
      await until(() => Date.now() > stored + windowMs + 100, 'the window passed');
      await afterNextPoll(domainId);
      // An entry of another file: its event id holds no mark of the first file any more.
      await new LogFile(domainId).write({ access: [{ url: '/r2' }] });
      await client.waitFor((c) => c.entries().length >= 2, 'the second entry');
      const r2 = client.entries()[1]!;
      expect(r2.id).toBe(`1.a${r2.data.id.toString(36)}`);
      // The first file goes on: its next entry is sent, once.
      await file.write({ access: [{ url: '/r3' }] });
      await client.waitFor((c) => c.entries().length >= 3, 'the third entry');
      await afterNextPoll(domainId);
      expect(client.entries().map((e) => e.data.url)).toEqual(['/r1', '/r2', '/r3']);
      client.close();
    } finally {
      await server.close();
    }
  });

  it('each client gets what the listing with the same filters returns, hostile values included', async () => {
    const { user, domainId } = await owner('filters');
    const hostile = `/q?x='%_\\*;--"{f0:String}`;
    const queriesOf: Record<string, string> = {
      all: '',
      status: 'statusCode=5xx',
      code: 'statusCode=404',
      ip: 'ipAddress=10.0.0.0%2F8',
      ip6: `ipAddress=${encodeURIComponent('2001:db8::/32')}`,
      substring: 'url=%2Fapi%2F',
      glob: `url=${encodeURIComponent('/api/*/orders')}`,
      hostile: `url=${encodeURIComponent(hostile)}`,
      likeChars: `url=${encodeURIComponent('%_')}`,
      long: `url=${'x'.repeat(8_192)}`,
      method: 'method=post',
      combined: 'statusCode=5xx&method=GET&url=%2Fapi%2F',
      level: 'level=warn',
      errors: 'type=error',
      accessOnly: 'type=access',
      both: 'type=both&statusCode=5xx',
    };
    const clients = Object.fromEntries(await Promise.all(Object.entries(queriesOf).map(async ([name, q]) => [name, await tail(domainId, user.token, q)] as const)));
    await Promise.all(Object.values(clients).map((c) => c.waitFor((x) => x.lastId, 'the first message')));

    const file = new LogFile(domainId);
    const errorFile = new LogFile(domainId);
    const written = await file.write({
      access: [
        { url: '/api/v1/orders', statusCode: 503, ipAddress: '10.1.2.3' },
        { url: '/api/v2/orders', statusCode: 200, method: 'POST', ipAddress: '2001:db8::1' },
        { url: '/api/v1/orders/7', statusCode: 404 },
        { url: hostile, statusCode: 500, ipAddress: '192.0.2.1' },
        { url: '/plain%_text', method: 'post' },
        { url: `/${'x'.repeat(8_192)}`, statusCode: 502 },
        { url: '/API/upper', statusCode: 500, ipAddress: '11.0.0.1' },
      ],
    });
    const writtenErrors = await errorFile.write({ error: [{ level: 'warn' }, { level: 'error' }, { level: 'info', message: hostile }] });
    const all = clients.all!;
    await all.waitFor((c) => c.entries().length >= 10, 'every entry on the unfiltered tail');
    // The poll that sent them moved every client's place over them: the same last id everywhere.
    await Promise.all(Object.values(clients).map((c) => c.waitFor((x) => x.lastId === all.lastId, 'the same place as the unfiltered tail')));

    const accessIds = new Set(written.access.map((r) => r.id));
    const errorIds = new Set(writtenErrors.error.map((r) => r.id));
    const sortById = (list: { id: number }[]) => [...list].sort((a, b) => a.id - b.id);
    for (const [name, q] of Object.entries(queriesOf)) {
      const client = clients[name]!;
      const params = new URLSearchParams(q);
      const type = params.get('type');
      params.delete('type');
      const accessFilters = ['statusCode', 'ipAddress', 'url', 'method'].some((k) => params.has(k));
      const wantsAccess = type === 'access' || type === 'both' || (!type && (accessFilters || !params.has('level')));
      const wantsError = type === 'error' || type === 'both' || (!type && (params.has('level') || !accessFilters));
      const accessQuery = new URLSearchParams([...params].filter(([k]) => k !== 'level')).toString();
      const errorQuery = new URLSearchParams([...params].filter(([k]) => k === 'level')).toString();
      const expectedAccess = wantsAccess ? await listed('access', domainId, user.token, accessIds, accessQuery) : [];
      const expectedError = wantsError ? await listed('error', domainId, user.token, errorIds, errorQuery) : [];
      expect(sortById(client.entries('access').map((e) => e.data)), name).toEqual(sortById(expectedAccess));
      expect(sortById(client.entries('error').map((e) => e.data)), name).toEqual(sortById(expectedError));
    }
    // The filters pick something: the comparison is not between empty lists alone.
    expect(clients.hostile!.entries().map((e) => e.data.url)).toEqual([hostile]);
    expect(clients.glob!.entries()).toHaveLength(2);
    expect(clients.likeChars!.entries().map((e) => e.data.url)).toEqual([hostile, '/plain%_text']);
    for (const c of Object.values(clients)) c.close();
  });

  it('refuses bad filters, a bad Last-Event-ID and a type that contradicts a filter with 422', async () => {
    const { user, domainId } = await owner('refused');
    await until(() => main.hub.clients === 0, 'no client left from earlier tests');
    const refused = async (query: string, field: string, lastEventId?: string) => {
      const client = await SseClient.open(main.base, tailPath(domainId, query), { token: user.token, ...(lastEventId !== undefined ? { lastEventId } : {}) });
      await client.waitFor((c) => c.ended, 'the answer');
      expect({ status: client.status, error: client.body?.error, field: Object.keys(client.body?.details ?? {}) }, query.slice(0, 80)).toEqual({ status: 422, error: 'Validation failed', field: [field] });
    };
    await refused('statusCode=6xx', 'statusCode');
    await refused(`statusCode=${encodeURIComponent("5xx' OR 1=1 --")}`, 'statusCode');
    await refused('ipAddress=10.0.0.0%2F33', 'ipAddress');
    await refused('url=a%00b', 'url');
    await refused(`url=${'y'.repeat(70_000)}`, 'url');
    await refused('method=G%20T', 'method');
    await refused('level=fatal', 'level');
    await refused('type=all', 'type');
    await refused('type=error&statusCode=500', 'statusCode');
    await refused('type=access&level=warn', 'level');
    await refused('', 'last-event-id', 'not-an-id');
    await refused('', 'last-event-id', "1.a1'--");
    await refused('', 'last-event-id', `1${'.a1'.repeat(300)}`);
    expect(main.hub.clients).toBe(0);
  });

  it('resumes from any event id (Last-Event-ID) without losing or repeating an entry', async () => {
    const { user, domainId } = await owner('resume');
    const first = await tail(domainId, user.token, 'statusCode=5xx');
    await first.waitFor((c) => c.lastId, 'the first message');
    const file = new LogFile(domainId);
    const other = new LogFile(domainId);
    const now = Date.now();
    // Times running backwards in one file; another file in between.
    await file.write({ access: [0, 1, 2, 3, 4, 5].map((i) => ({ url: `/r${i}`, statusCode: i % 2 ? 200 : 500, timestamp: now - i * 1000 })) });
    await other.write({ access: [6, 7].map((i) => ({ url: `/r${i}`, statusCode: 503, timestamp: now - 3500 + i })) });
    await first.waitFor((c) => c.entries().length >= 5, 'the first five');
    const seen = first.entries();
    // Each file in its own order, the files interleaved by the time of their next entry.
    expect(seen.map((e) => e.data.url)).toEqual(['/r6', '/r7', '/r0', '/r2', '/r4']);
    first.close();

    // Stored while no client was connected.
    await file.write({ access: [{ url: '/r8', statusCode: 500 }, { url: '/r9', statusCode: 200 }] });
    await other.write({ access: [{ url: '/r10', statusCode: 500, timestamp: now - 10_000 }] });

    for (let k = 0; k < seen.length; k++) {
      const resumed = await tail(domainId, user.token, 'statusCode=5xx', main, seen[k]!.id);
      const expected = [...seen.slice(k + 1).map((e) => e.data.url), '/r8', '/r10'];
      await resumed.waitFor((c) => c.entries().length >= expected.length, `the ${expected.length} entries after event ${k}`);
      // Give a duplicate the time of another poll to show up.
      await resumed.waitFor((c) => c.comments.includes('keepalive'), 'a keepalive');
      expect(resumed.entries().map((e) => e.data.url).sort(), `after event ${k}`).toEqual(expected.sort());
      resumed.close();
    }
    // Resumed from the first message, before any event: everything since the tail opened.
    const fromStart = await tail(domainId, user.token, 'statusCode=5xx', main, '1');
    await fromStart.waitFor((c) => c.entries().length >= 7, 'all seven');
    expect(fromStart.entries().map((e) => e.data.url).sort()).toEqual(['/r0', '/r10', '/r2', '/r4', '/r6', '/r7', '/r8']);
    fromStart.close();
  });
});

describe('live tail limits', () => {
  it('queries ClickHouse at most once a second per domain, whatever the number of clients', async () => {
    const a = await owner('polls-a');
    const b = await owner('polls-b');
    const filters = ['', 'statusCode=5xx', 'statusCode=404', 'method=POST', 'url=%2Fapi', 'level=warn', 'type=access', 'type=error', 'ipAddress=10.0.0.0%2F8', 'url=*x*'];
    const clients = await Promise.all(Array.from({ length: 30 }, (_, i) => tail(a.domainId, a.user.token, filters[i % filters.length])));
    const lone = await tail(b.domainId, b.user.token);
    const fileA = new LogFile(a.domainId);
    const fileB = new LogFile(b.domainId);
    const started = Date.now();
    let written = 0;
    while (Date.now() - started < 4_000) {
      await fileA.write({ access: [{ url: `/api/${written}`, statusCode: 500 }], error: [{ level: 'warn' }] });
      await fileB.write({ access: [{ url: `/b/${written}` }] });
      written++;
      await new Promise((r) => setTimeout(r, 100));
    }
    const everything = clients[0]!;
    await everything.waitFor((c) => c.entries().length >= written * 2, 'every entry of domain A');
    await lone.waitFor((c) => c.entries().length >= written, 'every entry of domain B');
    const ended = Date.now();
    for (const domainId of [a.domainId, b.domainId]) {
      const times = queries.filter((q) => q.domainId === domainId && q.at >= started - 1_000 && q.at <= ended).map((q) => q.at);
      const gaps = times.slice(1).map((at, i) => at - times[i]!);
      // The poller spaces the moments it starts a poll; a query is counted after the poll has
      // gathered its clients' filters, which takes a little longer at some polls than at others.
      expect(Math.min(...gaps), `gaps between the queries of domain ${domainId}: ${gaps.join(', ')}`).toBeGreaterThanOrEqual(TAIL_LIMITS.intervalMs - 20);
      expect(times.length).toBeLessThanOrEqual(Math.ceil((ended - started + 1_000) / TAIL_LIMITS.intervalMs) + 1);
    }
    // Every client got its share.
    expect(clients[1]!.entries()).toHaveLength(written);
    expect(clients[5]!.entries('error')).toHaveLength(written);
    for (const c of [...clients, lone]) c.close();
  });

  // A hundred streams opened at once take long on a loaded machine: more than the file's 30 s.
  it('turns the 101st client of the process away with 429 and Retry-After, and takes one again once a place is free', { timeout: 90_000 }, async () => {
    const { user, domainId } = await owner('cap');
    await until(() => main.hub.clients === 0, 'no client left from earlier tests');
    const clients = await Promise.all(Array.from({ length: TAIL_LIMITS.maxClients }, () => tail(domainId, user.token)));
    expect(main.hub.clients).toBe(TAIL_LIMITS.maxClients);
    const refused = await SseClient.open(main.base, tailPath(domainId), { token: user.token });
    await refused.waitFor((c) => c.ended, 'the answer');
    expect({ status: refused.status, body: refused.body, retryAfter: refused.headers['retry-after'] }).toEqual({
      status: 429,
      body: { success: false, error: `Too many live tails on this server (${TAIL_LIMITS.maxClients}); try again later` },
      retryAfter: '10',
    });
    // A refused client takes no place; one that leaves frees its own.
    clients.pop()!.close();
    await until(() => main.hub.clients === TAIL_LIMITS.maxClients - 1, 'the place freed');
    const again = await tail(domainId, user.token);
    for (const c of [...clients, again]) c.close();
    await until(() => main.hub.clients === 0, 'every place freed');
  });

  it('turns away the 6th tail of one user (TAIL_PER_USER) with 429 and Retry-After; other users still get theirs; a place of the user freed by any end is taken again', async () => {
    // The limits `serve` has: TAIL_PER_USER unset, so 5.
    const server = await startServer({ recheckMs: LIMITS.recheckMs! });
    const open: SseClient[] = [];
    try {
      expect(t.runtime.config.tailPerUser).toBe(5);
      const a = await owner('per-user-a');
      const b = await owner('per-user-b');
      const otherSession = await login(t.app, a.user.email, a.user.password);
      open.push(...(await Promise.all(Array.from({ length: 5 }, () => tail(a.domainId, a.user.token, '', server)))));
      const refused = async (token: string) => {
        const client = await SseClient.open(server.base, tailPath(a.domainId), { token });
        await client.waitFor((c) => c.ended, 'the answer');
        return { status: client.status, body: client.body, retryAfter: client.headers['retry-after'] };
      };
      const tooMany = {
        status: 429,
        body: { success: false, error: 'Too many live tails for one user on this server (5, TAIL_PER_USER); close one and try again' },
        retryAfter: '10',
      };
      expect(await refused(a.user.token)).toEqual(tooMany);
      // The limit is the user's, whatever session or token it comes from.
      expect(await refused(otherSession.accessToken)).toEqual(tooMany);
      expect(server.hub.clients).toBe(5);
      // Another user is not held back by it.
      open.push(await tail(b.domainId, b.user.token, '', server));
      // A client that leaves gives its place back to its user.
      open.shift()!.close();
      await until(() => server.hub.clients === 5, 'the place freed');
      open.push(await tail(a.domainId, otherSession.accessToken, '', server));
      expect(await refused(a.user.token)).toEqual(tooMany);
      // So does a stream the server ends: signing out one session ends its 4 streams at the next re-check.
      expect((await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: a.user.refreshToken } })).status).toBe(200);
      await until(() => server.hub.clients === 2, 'the streams of the signed-out session ended');
      open.push(...(await Promise.all(Array.from({ length: 4 }, () => tail(a.domainId, otherSession.accessToken, '', server)))));
      expect(await refused(otherSession.accessToken)).toEqual(tooMany);
    } finally {
      for (const c of open) c.close();
      await server.close();
    }
  });

  it('a tail that fails while opening gives its place back to its user', async () => {
    const server = await startServer();
    const open: SseClient[] = [];
    try {
      const { user, domainId } = await owner('open-fails');
      clickhouseDown = true;
      const failed = await Promise.all(Array.from({ length: 5 }, () => SseClient.open(server.base, tailPath(domainId), { token: user.token })));
      await Promise.all(failed.map((c) => c.waitFor((x) => x.ended, 'the answer')));
      expect(failed.map((c) => c.status)).toEqual([500, 500, 500, 500, 500]);
      expect(server.hub.clients).toBe(0);
      clickhouseDown = false;
      open.push(...(await Promise.all(Array.from({ length: 5 }, () => tail(domainId, user.token, '', server)))));
    } finally {
      clickhouseDown = false;
      for (const c of open) c.close();
      await server.close();
    }
  });

  it('cuts a client that stops reading, without holding back the others', async () => {
    const { user, domainId } = await owner('slow');
    const fast = await tail(domainId, user.token);
    // A client on a raw socket that reads the response head and then nothing more.
    const slow = net.connect(Number(new URL(main.base).port), '127.0.0.1');
    let received = '';
    slow.setEncoding('utf8');
    slow.on('data', (chunk: string) => (received += chunk));
    const closed = new Promise<void>((resolve) => slow.on('close', () => resolve()));
    slow.on('error', () => {});
    slow.write(`GET ${tailPath(domainId)} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${user.token}\r\n\r\n`);
    await until(() => received.includes('retry: '), 'the slow client’s first message');
    expect(received).toMatch(/^HTTP\/1\.1 200 /);
    slow.pause();
    await until(() => main.hub.clients === 2, 'both clients in');

    // 4 KiB a row, 16 MiB in all: far more than the socket buffers and the queue hold. A poll
    // reads up to rowsPerSegment of them (4 MiB), which the fast client takes within the second.
    const file = new LogFile(domainId);
    const rows = 4_000;
    for (let i = 0; i < rows; i += 500) {
      await file.write({ access: Array.from({ length: 500 }, (_, k) => ({ url: `/${i + k}/${'z'.repeat(4_096)}` })) });
    }
    await until(() => closes.some((c) => c.domainId === domainId && c.reason === 'too-slow'), 'the slow client cut', 20_000);
    await fast.waitFor((c) => c.entries().length >= rows, 'every row on the fast client', 20_000);
    expect(closes.filter((c) => c.domainId === domainId).map((c) => c.reason)).toEqual(['too-slow']);
    expect(main.hub.clients).toBe(1);
    // What reached the slow client before the cut is all it gets: the connection is gone.
    slow.resume();
    await closed;
    const events = received.split('\nevent: access\n').length - 1;
    expect(events).toBeGreaterThan(0);
    expect(events).toBeLessThan(rows);
    fast.close();
  });
});

describe('live tail access', () => {
  it('401 without a token (nor with one in the query string), 404 for a domain the caller does not see, 403 without logs: read', async () => {
    const { user, domainId } = await owner('access');
    const stranger = await freshUser(t.app, admin, 'stranger');
    const answer = async (path: string, token?: string) => {
      const client = await SseClient.open(main.base, path, token ? { token } : {});
      await client.waitFor((c) => c.ended, 'the answer');
      return { status: client.status, body: client.body, challenge: client.headers['www-authenticate'] };
    };
    expect(await answer(tailPath(domainId))).toEqual({ status: 401, body: { success: false, error: 'Authentication required' }, challenge: 'Bearer' });
    expect((await answer(tailPath(domainId, `token=${user.token}`))).status).toBe(401);
    expect((await answer(tailPath(domainId, `access_token=${user.token}`))).status).toBe(401);
    expect(await answer(tailPath(domainId), stranger.token)).toMatchObject({ status: 404, body: { success: false, error: 'Domain not found' } });
    expect(await answer(tailPath(999_999), user.token)).toMatchObject({ status: 404, body: { success: false, error: 'Domain not found' } });
    expect((await call(t.app, 'PUT', `/api/users/${user.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'alerts', actions: ['read'] }] } })).status).toBe(200);
    expect(await answer(tailPath(domainId), user.token)).toMatchObject({ status: 403, body: { success: false, error: 'Insufficient permissions' } });
    // The administrator sees every domain.
    (await tail(domainId, admin)).close();
  });

  it('answers HEAD with the stream’s headers and opens no stream', async () => {
    const { user, domainId } = await owner('head');
    await until(() => main.hub.clients === 0, 'no client left from earlier tests');
    const head = await SseClient.open(main.base, tailPath(domainId), { token: user.token, method: 'HEAD' });
    await head.waitFor((c) => c.ended, 'the answer');
    expect(head.status).toBe(200);
    expect(head.headers['content-type']).toBe('text/event-stream; charset=utf-8');
    expect(main.hub.clients).toBe(0);
  });

  it('ends the stream when the user loses access: permission, account, domain or sessions taken away', async () => {
    const cases: [string, (user: { id: number }, domainId: number) => Promise<void>][] = [
      ['logs: read taken away', async (u) => void (await call(t.app, 'PUT', `/api/users/${u.id}/permissions`, { token: admin, body: { permissions: [{ resource: 'alerts', actions: ['read'] }] } }))],
      ['user deactivated', async (u) => void (await call(t.app, 'PUT', `/api/users/${u.id}`, { token: admin, body: { active: false } }))],
      ['domain given to another user', async (_u, domainId) => void (await call(t.app, 'PUT', `/api/domains/${domainId}`, { token: admin, body: { ownerId: (await freshUser(t.app, admin, 'heir')).id } }))],
      ['password reset by an administrator (its tokens revoked)', async (u) => void (await call(t.app, 'PUT', `/api/users/${u.id}/password`, { token: admin, body: { newPassword: 'new-password-9', confirmPassword: 'new-password-9' } }))],
      ['domain deleted', async (_u, domainId) => void (await call(t.app, 'DELETE', `/api/domains/${domainId}`, { token: admin }))],
    ];
    for (const [what, revoke] of cases) {
      const { user, domainId } = await owner('revoked');
      const client = await tail(domainId, user.token);
      await client.waitFor((c) => c.lastId, 'the first message');
      // Still open after a re-check.
      await until(() => queries.filter((q) => q.domainId === domainId).length >= 2, 'a poll');
      expect(client.ended, what).toBe(false);
      await revoke(user, domainId);
      await client.waitFor((c) => c.ended, `the end after: ${what}`, 3_000);
      expect(client.events.at(-1), what).toEqual({ id: expect.any(String), event: 'end', data: { reason: 'access-revoked' } });
    }
  });

  it("ends the stream at the next re-check once its session is logged out; another session's stream goes on", async () => {
    const { user, domainId } = await owner('logout');
    const other = await login(t.app, user.email, user.password);
    const [ending, going] = await Promise.all([tail(domainId, user.token), tail(domainId, other.accessToken)]);
    await Promise.all([ending, going].map((c) => c.waitFor((x) => x.lastId, 'the first message')));
    const loggedOut = Date.now();
    expect((await call(t.app, 'POST', '/api/auth/logout', { body: { refreshToken: user.refreshToken } })).status).toBe(200);
    await ending.waitFor((c) => c.ended, 'the end after the logout', LIMITS.recheckMs! + 2_000);
    expect(Date.now() - loggedOut).toBeLessThan(LIMITS.recheckMs! + 1_000);
    expect(ending.events.at(-1)).toEqual({ id: expect.any(String), event: 'end', data: { reason: 'access-revoked' } });
    // Several re-checks later the other session's stream is still open and still delivers.
    await new Promise((r) => setTimeout(r, LIMITS.recheckMs! * 3));
    expect(going.ended).toBe(false);
    await new LogFile(domainId).write({ access: [{ url: '/after-logout' }] });
    await going.waitFor((c) => c.entries().some((e) => e.data.url === '/after-logout'), 'the entry on the other session');
    going.close();
  });

  it('ends the stream when the access token expires', async () => {
    // Re-checks far apart: only the expiry can end this stream in time.
    const server = await startServer({ recheckMs: 60_000 });
    try {
      const { user, domainId } = await owner('expiry');
      const lifetimeS = 3;
      const claims = decodeJwt(user.token);
      const token = await signAccessToken(t.runtime.jwtSecret, { userId: user.id, version: claims['ver'] as number, session: claims['sid'] as string }, new Date(Date.now() - (ACCESS_TOKEN_TTL_S - lifetimeS) * 1000));
      const exp = (decodeJwt(token).exp as number) * 1000;
      const client = await tail(domainId, token, '', server);
      await client.waitFor((c) => c.ended, 'the end at expiry', lifetimeS * 1000 + 2_000);
      expect(Date.now()).toBeGreaterThanOrEqual(exp);
      expect(Date.now()).toBeLessThan(exp + 1_500);
      expect(client.events.at(-1)).toEqual({ id: expect.any(String), event: 'end', data: { reason: 'token-expired' } });
      expect(server.hub.clients).toBe(0);
    } finally {
      await server.close();
    }
  });

  it('shutdown ends every stream (a client that does not read is cut), and new tails get 503', async () => {
    const server = await startServer({ endGraceMs: 500 });
    try {
      const { user, domainId } = await owner('shutdown');
      const readers = await Promise.all([tail(domainId, user.token, '', server), tail(domainId, user.token, 'level=error', server)]);
      await Promise.all(readers.map((r) => r.waitFor((c) => c.lastId, 'the first message')));
      const stuck = net.connect(Number(new URL(server.base).port), '127.0.0.1');
      stuck.on('error', () => {});
      const stuckClosed = new Promise<void>((resolve) => stuck.on('close', () => resolve()));
      stuck.write(`GET ${tailPath(domainId)} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${user.token}\r\n\r\n`);
      await until(() => server.hub.clients === 3, 'three clients in');
      stuck.pause();
      // Fill the stuck client's socket so that its end cannot get through.
      await new LogFile(domainId).write({ access: Array.from({ length: 1_000 }, (_, i) => ({ url: `/${i}/${'s'.repeat(4_096)}` })) });
      await readers[0]!.waitFor((c) => c.entries().length >= 1_000, 'the rows on a reader', 10_000);

      await server.hub.close();
      for (const r of readers) {
        await r.waitFor((c) => c.ended, 'the end of a reader');
        expect(r.events.at(-1)).toEqual({ id: expect.any(String), event: 'end', data: { reason: 'shutdown' } });
      }
      await until(() => server.hub.clients === 0, 'every stream closed', 3_000);
      // Its connection is gone: reading again, it finds the end of it.
      stuck.resume();
      await stuckClosed;
      const late = await SseClient.open(server.base, tailPath(domainId), { token: user.token });
      await late.waitFor((c) => c.ended, 'the answer');
      expect({ status: late.status, body: late.body }).toEqual({ status: 503, body: { success: false, error: 'Server is shutting down' } });
    } finally {
      await server.close();
    }
  });
});

describe('tailhouse serve', () => {
  afterAll(() => killChildren());

  it('SIGTERM ends the live tails (event: end, reason shutdown) and the process exits 0', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-tail-'));
    try {
      const port = await freePort();
      const proc = start(['serve'], { DATA_DIR: dataDir, PORT: String(port), ADMIN_EMAIL: 'admin@example.com', ADMIN_PASSWORD: 'admin-password-1' });
      await waitForOutput(proc, /"msg":"listening"/);
      const base = `http://127.0.0.1:${port}`;
      const post = async (url: string, body: unknown, token?: string) => {
        const res = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) }, body: JSON.stringify(body) });
        return (await res.json()) as any;
      };
      const token = (await post('/api/auth/login', { email: 'admin@example.com', password: 'admin-password-1' })).data.accessToken as string;
      const domainId = (await post('/api/domains', { name: 'shutdown.example.com' }, token)).data.id as number;
      const client = await SseClient.open(base, tailPath(domainId), { token });
      expect(client.status).toBe(200);
      await client.waitFor((c) => c.lastId, 'the first message');
      proc.child.kill('SIGTERM');
      await client.waitFor((c) => c.ended, 'the end of the stream', 10_000);
      expect(client.events.at(-1)).toEqual({ id: expect.any(String), event: 'end', data: { reason: 'shutdown' } });
      expect(await exitOf(proc, 15_000), describeProc(proc)).toEqual({ code: 0, signal: null });
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  }, 90_000);
});
