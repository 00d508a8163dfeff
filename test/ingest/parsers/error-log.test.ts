import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseErrorLine } from '../../../ingest/parsers/error-log.js';
import type { ErrorEntry } from '../../../core/entries.js';

// Fixture lines are written the way nginx writes them (ngx_log_error_core and the HTTP module's
// context handler): `YYYY/MM/DD HH:MM:SS [level] PID#TID: *CONN message, client: …`.

/** 2026/11/21 08:15:30 read as UTC */
const T = Date.UTC(2026, 10, 21, 8, 15, 30);

function entryOf(line: string, timezone?: string): ErrorEntry {
  const result = parseErrorLine(line, timezone);
  if (!result.ok) throw new Error(`rejected: ${result.reason}`);
  return result.entry;
}

function reasonOf(line: string): string {
  const result = parseErrorLine(line);
  if (result.ok) throw new Error(`accepted: ${JSON.stringify(result.entry)}`);
  return result.reason;
}

describe('error-log lines', () => {
  it('a full line: time, level, message without its context, every context key', () => {
    const line = '2026/11/21 08:15:30 [error] 1234#1234: *5 open() "/usr/share/nginx/html/favicon.ico" failed (2: No such file or directory), client: 203.0.113.7, server: shop.example.com, request: "GET /favicon.ico HTTP/1.1", host: "shop.example.com", referrer: "https://shop.example.com/cart"';
    expect(parseErrorLine(line)).toEqual({
      ok: true,
      contextAmbiguous: false,
      entry: {
        timestamp: T,
        level: 'error',
        message: 'open() "/usr/share/nginx/html/favicon.ico" failed (2: No such file or directory)',
        context: {
          client: '203.0.113.7',
          server: 'shop.example.com',
          request: 'GET /favicon.ico HTTP/1.1',
          host: 'shop.example.com',
          referrer: 'https://shop.example.com/cart',
        },
      },
    });
  });

  it('an upstream error with an IPv6 client and an IPv6 upstream', () => {
    const line = '2026/11/21 08:15:30 [error] 1234#1234: *7 upstream timed out (110: Connection timed out) while reading response header from upstream, client: 2001:db8::7, server: shop.example.com, request: "POST /api/cart HTTP/2.0", upstream: "http://[::1]:8080/api/cart", host: "shop.example.com"';
    expect(entryOf(line)).toEqual({
      timestamp: T,
      level: 'error',
      message: 'upstream timed out (110: Connection timed out) while reading response header from upstream',
      context: { client: '2001:db8::7', server: 'shop.example.com', request: 'POST /api/cart HTTP/2.0', upstream: 'http://[::1]:8080/api/cart', host: 'shop.example.com' },
    });
  });

  it('only the context the line carries: client and server of a TLS handshake, a subrequest', () => {
    expect(entryOf('2026/11/21 08:15:30 [crit] 1234#1234: *3 SSL_do_handshake() failed (SSL: error:0A00006C:SSL routines::bad key share) while SSL handshaking, client: 198.51.100.4, server: 0.0.0.0:443')).toEqual({
      timestamp: T,
      level: 'error',
      message: 'SSL_do_handshake() failed (SSL: error:0A00006C:SSL routines::bad key share) while SSL handshaking',
      context: { client: '198.51.100.4', server: '0.0.0.0:443' },
    });
    expect(entryOf('2026/11/21 08:15:30 [info] 1234#1234: *12 client timed out (110: Connection timed out) while waiting for request, client: 203.0.113.7, server: 0.0.0.0:80').context).toEqual({
      client: '203.0.113.7',
      server: '0.0.0.0:80',
    });
    const sub = entryOf('2026/11/21 08:15:30 [error] 1234#1234: *9 connect() failed (111: Connection refused) while connecting to upstream, client: 203.0.113.7, server: example.com, request: "GET /page HTTP/1.1", subrequest: "/ssi/header", upstream: "http://127.0.0.1:8080/ssi/header", host: "example.com"');
    expect(sub.message).toBe('connect() failed (111: Connection refused) while connecting to upstream');
    expect(sub.context).toEqual({ client: '203.0.113.7', server: 'example.com', request: 'GET /page HTTP/1.1', subrequest: '/ssi/header', upstream: 'http://127.0.0.1:8080/ssi/header', host: 'example.com' });
  });

  it('lines without context and without *CONN', () => {
    expect(entryOf('2026/11/21 08:15:30 [notice] 1234#1234: signal process started')).toEqual({ timestamp: T, level: 'info', message: 'signal process started', context: {} });
    expect(entryOf('2026/11/21 08:15:30 [emerg] 1234#1234: bind() to 0.0.0.0:80 failed (98: Address already in use)').message).toBe('bind() to 0.0.0.0:80 failed (98: Address already in use)');
    expect(entryOf('2026/11/21 08:15:30 [info] 1234#1234: *12 client 203.0.113.7 closed keepalive connection')).toMatchObject({ message: 'client 203.0.113.7 closed keepalive connection', context: {} });
    expect(entryOf('2026/11/21 08:15:30 [alert] 1234#0: worker process 1235 exited on signal 9').message).toBe('worker process 1235 exited on signal 9');
    expect(entryOf('2026/11/21 08:15:30 [debug] 1234#1234: *1 http header: "Host: example.com"').message).toBe('http header: "Host: example.com"');
  });

  it('a ", client: " inside the message stays in the message', () => {
    const line = '2026/11/21 08:15:30 [error] 1234#1234: *5 open() "/srv/www/a, client: b" failed (2: No such file or directory), client: 203.0.113.7, server: example.com, request: "GET /a,%20client:%20b HTTP/1.1", host: "example.com"';
    expect(entryOf(line)).toMatchObject({
      message: 'open() "/srv/www/a, client: b" failed (2: No such file or directory)',
      context: { client: '203.0.113.7', server: 'example.com', request: 'GET /a,%20client:%20b HTTP/1.1', host: 'example.com' },
    });
  });

  it('quoted context values are unquoted, and may themselves hold quotes', () => {
    const line = '2026/11/21 08:15:30 [error] 1234#1234: *42 limiting requests, excess: 10.520 by zone "api", client: 203.0.113.7, server: api.example.com, request: "GET /v1/items?q="x" HTTP/1.1", host: "api.example.com", referrer: "=cmd|\' /C calc\'!A0"';
    expect(entryOf(line)).toMatchObject({
      message: 'limiting requests, excess: 10.520 by zone "api"',
      context: { client: '203.0.113.7', server: 'api.example.com', request: 'GET /v1/items?q="x" HTTP/1.1', host: 'api.example.com', referrer: "=cmd|' /C calc'!A0" },
    });
  });
});

describe('contexts a client can forge', () => {
  const forged = ', client: 198.51.100.1, server: victim.example, request: "GET / HTTP/1.1", host: "x';
  const tail = ', client: 203.0.113.7, server: shop.example, request: "GET /p HTTP/1.1", host: "shop.example"';
  const ambiguous = (line: string) => {
    const result = parseErrorLine(line);
    if (!result.ok) throw new Error(`rejected: ${result.reason}`);
    return result.contextAmbiguous;
  };

  it('a decoded path holding a context that swallows the real one: read two ways, marked ambiguous', () => {
    const line = `2026/11/21 08:15:30 [error] 1#1: *5 open() "/srv/x${forged}" failed (2: No such file or directory)${tail}`;
    // The first reading is the forged one: nothing in the line tells it from nginx's own.
    expect(entryOf(line).context.server).toBe('victim.example');
    expect(ambiguous(line)).toBe(true);
  });

  it('a referrer holding a context: marked ambiguous although the first reading is the real one', () => {
    const line = `2026/11/21 08:15:30 [error] 1#1: *5 open() "/srv/y" failed (2: No such file or directory)${tail}, referrer: "r${forged}"`;
    expect(entryOf(line).context.server).toBe('shop.example');
    expect(ambiguous(line)).toBe(true);
  });

  it('readings that name the same server, and lines with one reading, are not ambiguous', () => {
    expect(ambiguous(`2026/11/21 08:15:30 [error] 1#1: *5 open() "/srv/a, client: b" failed (2: No such file or directory)${tail}`)).toBe(false);
    const same = forged.replace('victim.example', 'shop.example');
    expect(ambiguous(`2026/11/21 08:15:30 [error] 1#1: *5 open() "/srv/x${same}" failed (2: No such file or directory)${tail}`)).toBe(false);
    expect(ambiguous(`2026/11/21 08:15:30 [error] 1#1: *5 open() "/srv/z" failed${tail}`)).toBe(false);
  });
});

describe('levels', () => {
  it('folds nginx levels onto error, warn, info and debug (docs/reference/logs.md#error-entries)', () => {
    const folded = Object.fromEntries(
      ['emerg', 'alert', 'crit', 'error', 'warn', 'notice', 'info', 'debug'].map((level) => [level, entryOf(`2026/11/21 08:15:30 [${level}] 1#1: x`).level]),
    );
    expect(folded).toEqual({ emerg: 'error', alert: 'error', crit: 'error', error: 'error', warn: 'warn', notice: 'info', info: 'info', debug: 'debug' });
  });

  it('rejects a level nginx does not have', () => {
    expect(reasonOf('2026/11/21 08:15:30 [fatal] 1#1: x')).toBe('unknown level [fatal]');
  });
});

describe('time zones', () => {
  const at = (time: string, zone?: string) => entryOf(`${time} [error] 1#1: x`, zone).timestamp;

  it('UTC by default', () => {
    expect(at('2026/11/21 08:15:30')).toBe(T);
    expect(at('2026/11/21 08:15:30', 'UTC')).toBe(T);
  });

  it('reads the wall clock in the configured IANA zone, winter and summer', () => {
    expect(at('2026/11/21 08:15:30', 'Europe/Berlin')).toBe(Date.UTC(2026, 10, 21, 7, 15, 30));
    expect(at('2026/07/21 08:15:30', 'Europe/Berlin')).toBe(Date.UTC(2026, 6, 21, 6, 15, 30));
    expect(at('2026/11/21 08:15:30', 'America/New_York')).toBe(Date.UTC(2026, 10, 21, 13, 15, 30));
    expect(at('2026/11/21 08:15:30', 'Asia/Kolkata')).toBe(Date.UTC(2026, 10, 21, 2, 45, 30));
    expect(at('2026/01/15 12:00:00', 'Australia/Sydney')).toBe(Date.UTC(2026, 0, 15, 1));
    expect(at('2026/11/21 08:15:30', 'America/St_Johns')).toBe(Date.UTC(2026, 10, 21, 11, 45, 30));
  });

  it('across the spring change: the skipped hour moves forward', () => {
    expect(at('2026/03/29 01:59:59', 'Europe/Berlin')).toBe(Date.UTC(2026, 2, 29, 0, 59, 59));
    expect(at('2026/03/29 02:30:00', 'Europe/Berlin')).toBe(Date.UTC(2026, 2, 29, 1, 30));
    expect(at('2026/03/29 03:00:00', 'Europe/Berlin')).toBe(Date.UTC(2026, 2, 29, 1));
    expect(at('2026/03/08 02:30:00', 'America/New_York')).toBe(Date.UTC(2026, 2, 8, 7, 30));
  });

  it('across the autumn change: the repeated hour is read as its first pass', () => {
    expect(at('2026/10/25 01:59:59', 'Europe/Berlin')).toBe(Date.UTC(2026, 9, 24, 23, 59, 59));
    expect(at('2026/10/25 02:30:00', 'Europe/Berlin')).toBe(Date.UTC(2026, 9, 25, 0, 30));
    expect(at('2026/10/25 03:00:00', 'Europe/Berlin')).toBe(Date.UTC(2026, 9, 25, 2));
    expect(at('2026/11/01 01:30:00', 'America/New_York')).toBe(Date.UTC(2026, 10, 1, 5, 30));
  });

  it('a change by half an hour, inside a wall-clock hour (Lord Howe)', () => {
    expect(at('2026/10/04 01:59:59', 'Australia/Lord_Howe')).toBe(Date.UTC(2026, 9, 3, 15, 29, 59));
    expect(at('2026/10/04 02:15:00', 'Australia/Lord_Howe')).toBe(Date.UTC(2026, 9, 3, 15, 45));
    expect(at('2026/10/04 02:45:00', 'Australia/Lord_Howe')).toBe(Date.UTC(2026, 9, 3, 15, 45));
    expect(at('2026/10/04 03:00:00', 'Australia/Lord_Howe')).toBe(Date.UTC(2026, 9, 3, 16));
    expect(at('2026/04/05 01:45:00', 'Australia/Lord_Howe')).toBe(Date.UTC(2026, 3, 4, 14, 45));
    expect(at('2026/04/05 02:00:00', 'Australia/Lord_Howe')).toBe(Date.UTC(2026, 3, 4, 15, 30));
  });

  it('an unknown zone is a configuration error and throws', () => {
    expect(() => parseErrorLine('2026/11/21 08:15:30 [error] 1#1: x', 'Mars/Olympus_Mons')).toThrow(RangeError);
  });

  const ZONES = ['UTC', 'Europe/Berlin', 'Europe/London', 'America/New_York', 'America/Sao_Paulo', 'America/St_Johns', 'Asia/Kolkata', 'Asia/Kathmandu', 'Australia/Lord_Howe', 'Australia/Sydney', 'Pacific/Chatham', 'Africa/Casablanca'];
  const formats = new Map(ZONES.map((zone) => [zone, new Intl.DateTimeFormat('en-US', { timeZone: zone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', second: '2-digit' })]));

  /** The wall clock of instant `t` in `zone`, as nginx would write it. */
  function wallClock(t: number, zone: string): string {
    const p = Object.fromEntries(formats.get(zone)!.formatToParts(t).map(({ type, value }) => [type, value]));
    return `${p.year}/${p.month}/${p.day} ${p.hour}:${p.minute}:${p.second}`;
  }

  it('property: any instant written as a wall clock reads back to it, or to the first pass of a repeated hour', () => {
    fc.assert(
      fc.property(fc.integer({ min: Date.UTC(1990, 0, 1) / 1000, max: Date.UTC(2037, 11, 31) / 1000 }), fc.constantFrom(...ZONES), (seconds, zone) => {
        const t = seconds * 1000;
        const wall = wallClock(t, zone);
        const read = entryOf(`${wall} [warn] 1#1: x`, zone).timestamp;
        expect(wallClock(read, zone)).toBe(wall);
        expect(read).toBeLessThanOrEqual(t);
        // Earlier only within a repeated hour: an hour or less.
        expect(t - read).toBeLessThanOrEqual(3_600_000);
      }),
      { numRuns: 3000 },
    );
  });

  it('every quarter hour of a year reads back, across all its changes (the per-hour cache included)', () => {
    const wrong: string[] = [];
    for (const zone of ['Europe/Berlin', 'Australia/Lord_Howe', 'America/St_Johns', 'Africa/Casablanca']) {
      for (let t = Date.UTC(2026, 0, 1); t < Date.UTC(2027, 0, 1); t += 900_000) {
        const wall = wallClock(t, zone);
        const read = entryOf(`${wall} [warn] 1#1: x`, zone).timestamp;
        if (wallClock(read, zone) !== wall || read > t || t - read > 3_600_000) wrong.push(`${zone} ${wall}: ${new Date(read).toISOString()}`);
      }
    }
    expect(wrong).toEqual([]);
  });
});

describe('malformed lines are rejected with a useful reason', () => {
  it('names what is wrong', () => {
    expect(reasonOf('')).toBe('empty line');
    expect(reasonOf('2026-11-21 08:15:30 [error] 1#1: x')).toBe('not an nginx error-log line: expected "YYYY/MM/DD HH:MM:SS [level] PID#TID: ", found "2026-11-21 08:15:30 [error] 1#1: x"');
    expect(reasonOf('203.0.113.7 - - [21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-"')).toMatch(/^not an nginx error-log line/);
    expect(reasonOf('2026/11/21 08:15:30 error 1#1: x')).toMatch(/^not an nginx error-log line/);
    expect(reasonOf('2026/11/21 08:15:30 [error] worker exited')).toMatch(/^not an nginx error-log line/);
    expect(reasonOf('2026/02/30 08:15:30 [error] 1#1: x')).toBe('invalid time "2026/02/30 08:15:30"');
    expect(reasonOf('2026/13/01 08:15:30 [error] 1#1: x')).toBe('invalid time "2026/13/01 08:15:30"');
    expect(reasonOf('2026/11/21 25:15:30 [error] 1#1: x')).toBe('invalid time "2026/11/21 25:15:30"');
  });

  it('a context that does not read as nginx wrote it stays in the message', () => {
    const line = '2026/11/21 08:15:30 [error] 1#1: *1 odd, client: 203.0.113.7, server: x, unknown: "y"';
    expect(entryOf(line)).toMatchObject({ message: 'odd, client: 203.0.113.7, server: x, unknown: "y"', context: {} });
  });

  it('a request line that forges more context is one request value: the split ending in HTTP/n.n wins', () => {
    const line = '2026/11/21 08:15:30 [info] 1#1: *7 client sent invalid request while reading client request line, client: 127.0.0.1, server: shop.test, request: "GET /x", host: "forged.example HTTP/1.1"';
    expect(entryOf(line).context).toEqual({ client: '127.0.0.1', server: 'shop.test', request: 'GET /x", host: "forged.example HTTP/1.1' });
    const normal = '2026/11/21 08:15:30 [error] 1#1: *8 open() failed, client: 1.2.3.4, server: s, request: "GET /a\", b HTTP/1.1", upstream: "http://u/", host: "h"';
    expect(entryOf(normal).context).toEqual({ client: '1.2.3.4', server: 's', request: 'GET /a\", b HTTP/1.1', upstream: 'http://u/', host: 'h' });
  });

  it('[debug] lines carry no context: a header that looks like one stays in the message', () => {
    const line = '2026/11/21 08:15:30 [debug] 1#1: *65 http header: "User-Agent: probe, client: 203.0.113.66, server: forged.example"';
    expect(entryOf(line)).toMatchObject({ message: 'http header: "User-Agent: probe, client: 203.0.113.66, server: forged.example"', context: {} });
  });

  it('property: any text as a line never throws', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'binary', maxLength: 200 }), fc.boolean(), (text, prefixed) => {
        const result = parseErrorLine(prefixed ? `2026/11/21 08:15:30 [error] 1#1: ${text}` : text);
        if (!result.ok) expect(result.reason.length).toBeGreaterThan(0);
        else expect(result.entry.level).toBe('error');
      }),
      { numRuns: 2000 },
    );
  });
});
