import dgram from 'node:dgram';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  createSyslogParser,
  listenSyslog,
  OVERLONG_HEAD_BYTES,
  TcpFramer,
  type SyslogEvent,
  type SyslogListener,
  type SyslogListenerOptions,
  type SyslogMalformed,
  type SyslogMessage,
} from '../../../ingest/sources/syslog.js';

const LOCAL7 = 23;
const INFO = 6;
const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

/** nginx's ngx_syslog_add_header: `<PRI>` + "%s %2d %02d:%02d:%02d" (local time) + ` HOST TAG: `. */
function nginxDatagram(opts: { facility?: number; severity?: number; at: Date; hostname?: string | null; tag?: string; message: string }): string {
  const { at } = opts;
  const pri = (opts.facility ?? LOCAL7) * 8 + (opts.severity ?? INFO);
  const two = (n: number) => String(n).padStart(2, '0');
  const time = `${MONTHS[at.getUTCMonth()]} ${String(at.getUTCDate()).padStart(2, ' ')} ${two(at.getUTCHours())}:${two(at.getUTCMinutes())}:${two(at.getUTCSeconds())}`;
  const host = opts.hostname === null ? '' : `${opts.hostname ?? 'web1'} `;
  return `<${pri}>${time} ${host}${opts.tag ?? 'nginx'}: ${opts.message}`;
}

const COMBINED_LINE = '203.0.113.7 - - [21/Nov/2026:08:15:30 +0000] "GET /shop/cart?id=7 HTTP/1.1" 200 612 "https://shop.example.com/" "Mozilla/5.0 (X11; Linux x86_64)"';
const ERROR_LINE =
  '2026/11/21 08:15:30 [error] 1234#1234: *5 open() "/usr/share/nginx/html/favicon.ico" failed (2: No such file or directory), client: 203.0.113.7, server: shop.example.com, request: "GET /favicon.ico HTTP/1.1", host: "shop.example.com"';

/** Polls until `check` holds; no fixed sleeps, a deadline instead. */
async function waitFor(check: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const listeners: SyslogListener[] = [];
const cleanups: (() => void)[] = [];

afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) cleanup();
  await Promise.all(listeners.splice(0).map((l) => l.close()));
});

async function listen(options: SyslogListenerOptions): Promise<SyslogListener> {
  const listener = await listenSyslog(options);
  listeners.push(listener);
  return listener;
}

/** Consumes the listener in the background into `events`. */
function consume(listener: SyslogListener): { events: SyslogEvent[]; done: Promise<void> } {
  const events: SyslogEvent[] = [];
  const done = (async () => {
    for await (const batch of listener) events.push(...batch);
  })();
  return { events, done };
}

async function udpClient(port: number): Promise<dgram.Socket> {
  const socket = dgram.createSocket('udp4');
  cleanups.push(() => socket.close());
  await new Promise<void>((resolve) => socket.connect(port, '127.0.0.1', () => resolve()));
  return socket;
}

function sendDatagram(socket: dgram.Socket, text: string | Buffer): Promise<void> {
  return new Promise((resolve, reject) => socket.send(text, (err) => (err ? reject(err) : resolve())));
}

async function tcpClient(port: number): Promise<net.Socket> {
  const socket = net.connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  cleanups.push(() => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', () => resolve());
    socket.once('error', reject);
  });
  return socket;
}

function write(socket: net.Socket, data: string | Buffer): Promise<void> {
  return new Promise((resolve, reject) => socket.write(data, (err) => (err ? reject(err) : resolve())));
}

const messages = (events: SyslogEvent[]) => events.filter((e): e is SyslogMessage => e.kind === 'message');
const malformed = (events: SyslogEvent[]) => events.filter((e): e is SyslogMalformed => e.kind === 'malformed');


/** The ISO time a parser gives a header time `Mmm dd hh:mm:ss` received at `at`, or its reason. */
const headerTime = (parse: ReturnType<typeof createSyslogParser>) => (text: string, at: number) => {
  const result = parse(`<190>${text} web1 nginx: x`, at);
  return result.ok ? new Date(result.entry.timestamp).toISOString() : result.reason;
};
describe('RFC 3164 parsing of what nginx sends', () => {
  const received = Date.UTC(2026, 10, 21, 8, 15, 31);

  it('reads an access_log datagram: PRI, time, hostname, tag, message', () => {
    const parse = createSyslogParser();
    const text = nginxDatagram({ at: new Date(Date.UTC(2026, 10, 21, 8, 15, 30)), tag: 'nginx_shop', message: COMBINED_LINE });
    expect(text.startsWith('<190>Nov 21 08:15:30 web1 nginx_shop: 203.0.113.7')).toBe(true);
    expect(parse(text, received)).toEqual({
      ok: true,
      entry: { facility: LOCAL7, severity: INFO, timestamp: Date.UTC(2026, 10, 21, 8, 15, 30), hostname: 'web1', tag: 'nginx_shop', message: COMBINED_LINE },
    });
  });

  it('reads a space-padded day and a header without hostname (nohostname)', () => {
    const parse = createSyslogParser();
    const at = new Date(Date.UTC(2026, 0, 5, 7, 3, 9));
    const text = nginxDatagram({ at, hostname: null, message: 'GET /a: b c: d' });
    expect(text).toBe('<190>Jan  5 07:03:09 nginx: GET /a: b c: d');
    expect(parse(text, at.getTime())).toEqual({
      ok: true,
      entry: { facility: LOCAL7, severity: INFO, timestamp: at.getTime(), hostname: null, tag: 'nginx', message: 'GET /a: b c: d' },
    });
  });

  it('reads an error_log datagram: severity is the line level, the message is the whole error line', () => {
    const parse = createSyslogParser();
    const text = nginxDatagram({ at: new Date(Date.UTC(2026, 10, 21, 8, 15, 30)), severity: 3, message: ERROR_LINE });
    expect(text.slice(0, 5)).toBe('<187>');
    const result = parse(text, received);
    expect(result.ok && result.entry).toMatchObject({ facility: LOCAL7, severity: 3, hostname: 'web1', tag: 'nginx', message: ERROR_LINE });
  });

  it.each([
    ['<0>', 0, 0],
    ['<13>', 1, 5],
    ['<134>', 16, 6],
    ['<165>', 20, 5],
    ['<190>', 23, 6],
    ['<191>', 23, 7],
  ])('splits PRI %s into facility %i and severity %i', (pri, facility, severity) => {
    const result = createSyslogParser()(`${pri}Nov 21 08:15:30 web1 nginx: x`, received);
    expect(result.ok && [result.entry.facility, result.entry.severity]).toEqual([facility, severity]);
  });

  it('infers the year around New Year, both ways, and keeps Feb 29 in its leap year', () => {
    const timeOf = headerTime(createSyslogParser());
    // Sent just before midnight, received just after.
    expect(timeOf('Dec 31 23:59:59', Date.UTC(2027, 0, 1, 0, 0, 2))).toBe('2026-12-31T23:59:59.000Z');
    // The sender's clock a little ahead of ours.
    expect(timeOf('Jan  1 00:00:01', Date.UTC(2026, 11, 31, 23, 59, 58))).toBe('2027-01-01T00:00:01.000Z');
    expect(timeOf('Jun 15 12:00:00', Date.UTC(2026, 5, 15, 12, 0, 1))).toBe('2026-06-15T12:00:00.000Z');
    expect(timeOf('Feb 29 10:00:00', Date.UTC(2028, 2, 1, 0, 0, 0))).toBe('2028-02-29T10:00:00.000Z');
  });

  it('reads the header time in the configured zone, across daylight saving time', () => {
    const timeOf = headerTime(createSyslogParser('Europe/Paris'));
    expect(timeOf('Jan 15 12:00:00', Date.UTC(2026, 0, 15, 11, 0, 1))).toBe('2026-01-15T11:00:00.000Z');
    // 29 March 2026: Paris moves from +01:00 to +02:00 at 02:00 local time.
    expect(timeOf('Mar 29 01:30:00', Date.UTC(2026, 2, 29, 0, 30, 1))).toBe('2026-03-29T00:30:00.000Z');
    expect(timeOf('Mar 29 03:30:00', Date.UTC(2026, 2, 29, 1, 30, 1))).toBe('2026-03-29T01:30:00.000Z');
    // New Year in Paris is 23:00 UTC: the year is that of the zone's wall clock.
    expect(timeOf('Jan  1 00:30:00', Date.UTC(2026, 11, 31, 23, 30, 1))).toBe('2026-12-31T23:30:00.000Z');
  });

  it('keeps UTF-8 text and drops one trailing newline that relays add', () => {
    const result = createSyslogParser()('<190>Nov 21 08:15:30 web1 nginx: GET /café/日本 «ok»\r\n', received);
    expect(result.ok && result.entry.message).toBe('GET /café/日本 «ok»');
  });

  it.each([
    ['', 'no <PRI> at the start'],
    ['hello world', 'no <PRI> at the start'],
    ['<1a>Nov 21 08:15:30 web1 nginx: x', 'no <PRI> at the start'],
    ['<192>Nov 21 08:15:30 web1 nginx: x', 'PRI 192 is out of range (0-191)'],
    ['<190>2026-11-21T08:15:30Z web1 nginx: x', 'no "Mmm dd hh:mm:ss" time after <PRI>'],
    ['<190>Nov 21 8:15:30 web1 nginx: x', 'no "Mmm dd hh:mm:ss" time after <PRI>'],
    ['<190>Nov 21 08:15:30', 'no "Mmm dd hh:mm:ss" time after <PRI>'],
    ['<190>Foo 21 08:15:30 web1 nginx: x', 'invalid time "Foo 21 08:15:30"'],
    ['<190>Nov 31 08:15:30 web1 nginx: x', 'invalid time "Nov 31 08:15:30"'],
    ['<190>Nov 21 24:15:30 web1 nginx: x', 'invalid time "Nov 21 24:15:30"'],
    ['<190>Nov 00 08:15:30 web1 nginx: x', 'invalid time "Nov 00 08:15:30"'],
    ['<190>Nov 21 08:61:30 web1 nginx: x', 'invalid time "Nov 21 08:61:30"'],
    ['<190>Nov 21 08:15:30 web1 nginx x', 'no "TAG: " after the time (and hostname)'],
    ['<190>Nov 21 08:15:30 web1 nginx:x', 'no "TAG: " after the time (and hostname)'],
  ])('reports %j as malformed: %s', (text, reason) => {
    expect(createSyslogParser()(text, received)).toEqual({ ok: false, reason });
  });
});

describe('TCP framing', () => {
  function framer(max = 1024) {
    const frames: string[] = [];
    const rejected: [string, string][] = [];
    const f = new TcpFramer(max, {
      frame: (bytes) => frames.push(bytes.toString('utf8')),
      malformed: (raw, reason) => rejected.push([raw.toString('utf8'), reason]),
    });
    return { f, frames, rejected };
  }

  it('gives the same frames whatever the packet boundaries, newline and octet counting mixed', () => {
    const a = '<190>Nov 21 08:15:30 web1 nginx: GET /é';
    const b = '<190>Nov 21 08:15:31 web1 nginx: line one\nline two';
    const c = '<187>Nov 21 08:15:32 web1 nginx: 日本';
    const stream = Buffer.from(`${a}\r\n${Buffer.byteLength(b)} ${b}\n${c}\n`);
    const framesOf = (pieces: Buffer[]) => {
      const { f, frames, rejected } = framer();
      for (const piece of pieces) f.push(piece);
      f.finish();
      expect(rejected).toEqual([]);
      return frames;
    };
    for (let cut = 1; cut < stream.length; cut++) {
      expect(framesOf([stream.subarray(0, cut), stream.subarray(cut)])).toEqual([a, b, c]);
    }
    expect(framesOf([...stream].map((byte) => Buffer.from([byte])))).toEqual([a, b, c]);
  });

  it('reports and skips frames over the limit, then stays in step', () => {
    const { f, frames, rejected } = framer(100);
    const long = `<190>Nov 21 08:15:30 web1 nginx: ${'x'.repeat(2000)}`;
    f.push(Buffer.from(`${long}\n<190>Nov 21 08:15:31 web1 nginx: after line\n`));
    f.push(Buffer.from(`${Buffer.byteLength(long)} ${long.slice(0, 500)}`));
    f.push(Buffer.from(`${long.slice(500)}11 <190>after\n`));
    f.finish();
    expect(frames).toEqual(['<190>Nov 21 08:15:31 web1 nginx: after line', '<190>after\n']);
    expect(rejected.map(([, reason]) => reason)).toEqual(['line is over the 100-byte limit', `frame of ${Buffer.byteLength(long)} bytes is over the 100-byte limit`]);
    expect(rejected[0]?.[0]).toBe(long.slice(0, OVERLONG_HEAD_BYTES));
  });

  it('reports an unfinished message at the end of the stream', () => {
    const { f, frames, rejected } = framer();
    f.push(Buffer.from('<190>Nov 21 08:15:30 web1 nginx: complete\n<190>Nov 21 08:15:30 web1 nginx: cut'));
    f.finish();
    expect(frames).toEqual(['<190>Nov 21 08:15:30 web1 nginx: complete']);
    expect(rejected).toEqual([['<190>Nov 21 08:15:30 web1 nginx: cut', 'connection closed inside a message']]);
  });

  it('reads a line that starts with digits but no count (digits and a space) as a line', () => {
    const { f, frames } = framer();
    f.push(Buffer.from('404x not a count\n12345678901234 x\n0 <190>zero is no count\n'));
    expect(frames).toEqual(['404x not a count', '12345678901234 x', '0 <190>zero is no count']);
  });
});

describe('UDP listener', () => {
  it('receives datagrams as nginx sends them: access and error lines, 4 KiB, UTF-8, nohostname', async () => {
    const listener = await listen({ udp: { host: '127.0.0.1', port: 0 } });
    expect(listener.tcpAddress).toBeNull();
    const { events } = consume(listener);
    const client = await udpClient(listener.udpAddress!.port);
    const at = new Date(Date.now() - (Date.now() % 1000));
    const big = `203.0.113.7 - - [21/Nov/2026:08:15:30 +0000] "GET /${'a'.repeat(4096)} HTTP/1.1" 414 0 "-" "-"`;
    const sent = [
      { tag: 'nginx_shop', message: COMBINED_LINE },
      { severity: 3, message: ERROR_LINE },
      { tag: 'nginx_shop', message: big },
      { tag: 'nginx_shop', message: '203.0.113.8 - - [21/Nov/2026:08:15:30 +0000] "GET /café/日本 HTTP/1.1" 200 5 "-" "Ünïcødé/1.0"' },
      { hostname: null, message: COMBINED_LINE },
    ];
    for (const s of sent) await sendDatagram(client, nginxDatagram({ at, ...s }));
    await waitFor(() => events.length === sent.length, 'five messages');

    const local = client.address();
    expect(messages(events)).toEqual(
      sent.map((s) => ({
        kind: 'message',
        receivedAt: expect.any(Number),
        transport: 'udp',
        peer: `127.0.0.1:${local.port}`,
        facility: LOCAL7,
        severity: s.severity ?? INFO,
        timestamp: at.getTime(),
        hostname: s.hostname === null ? null : 'web1',
        tag: s.tag ?? 'nginx',
        message: s.message,
      })),
    );
    expect(listener.stats()).toEqual({ messages: 5, malformed: 0, dropped: 0, droppedBytes: 0, bufferedBytes: 0 });
  });

  it('reports malformed datagrams with their reason, never drops them', async () => {
    const listener = await listen({ udp: { host: '127.0.0.1', port: 0 } });
    const { events } = consume(listener);
    const client = await udpClient(listener.udpAddress!.port);
    await sendDatagram(client, 'GET / HTTP/1.1');
    await sendDatagram(client, Buffer.from([0x3c, 0x31, 0x39, 0x30, 0x3e, 0xff, 0xfe]));
    await sendDatagram(client, nginxDatagram({ at: new Date(), message: 'ok' }));
    await waitFor(() => events.length === 3, 'three events');
    expect(malformed(events).map((e) => [e.transport, e.raw, e.reason])).toEqual([
      ['udp', 'GET / HTTP/1.1', 'no <PRI> at the start'],
      ['udp', '<190>\ufffd\ufffd', 'no "Mmm dd hh:mm:ss" time after <PRI>'],
    ]);
    expect(messages(events)).toHaveLength(1);
    expect(listener.stats()).toMatchObject({ messages: 1, malformed: 2, dropped: 0 });
  });

  it('counts and reports datagrams that overflow the buffer while the consumer stalls', async () => {
    const listener = await listen({ udp: { host: '127.0.0.1', port: 0 }, bufferBytes: 1000 });
    const client = await udpClient(listener.udpAddress!.port);
    const at = new Date();
    // Each datagram exactly 100 bytes: ten fit in the buffer, thirty do not.
    const datagram = (i: number) => {
      const head = nginxDatagram({ at, message: `#${String(i).padStart(2, '0')} ` });
      return head + 'x'.repeat(100 - Buffer.byteLength(head));
    };
    for (let i = 0; i < 40; i++) await sendDatagram(client, datagram(i));
    await waitFor(() => listener.stats().messages + listener.stats().dropped === 40, 'forty datagrams handled');
    expect(listener.stats()).toEqual({ messages: 10, malformed: 0, dropped: 30, droppedBytes: 3000, bufferedBytes: 1000 });

    const iterator = listener[Symbol.asyncIterator]();
    const first = await iterator.next();
    const batch = first.done ? [] : first.value;
    expect(messages(batch).map((m) => m.message.slice(0, 3))).toEqual(Array.from({ length: 10 }, (_, i) => `#${String(i).padStart(2, '0')}`));
    expect(batch[10]).toEqual({ kind: 'dropped', count: 30, bytes: 3000, firstAt: expect.any(Number), lastAt: expect.any(Number) });
    expect(batch).toHaveLength(11);

    // Room again once the consumer has caught up.
    await sendDatagram(client, datagram(40));
    const next = await iterator.next();
    expect(!next.done && messages(next.value).map((m) => m.message.slice(0, 3))).toEqual(['#40']);
    expect(listener.stats()).toMatchObject({ messages: 11, dropped: 30, bufferedBytes: 0 });
  });
});

describe('TCP listener', () => {
  it('frames newline-terminated messages split across packets, and octet-counted ones', async () => {
    const listener = await listen({ tcp: { host: '127.0.0.1', port: 0 } });
    expect(listener.udpAddress).toBeNull();
    const { events } = consume(listener);
    const client = await tcpClient(listener.tcpAddress!.port);
    const at = new Date(Date.now() - (Date.now() % 1000));
    const one = nginxDatagram({ at, tag: 'nginx_shop', message: COMBINED_LINE });
    const two = nginxDatagram({ at, message: 'GET /日本/café' });
    const three = nginxDatagram({ at, severity: 3, message: ERROR_LINE });
    const bytes = Buffer.from(`${one}\n${two}\r\n`);
    // Split inside the header, inside a multi-byte character and right before the newline.
    const cuts = [7, bytes.indexOf('日') + 1, bytes.length - 2];
    let from = 0;
    for (const cut of [...cuts, bytes.length]) {
      await write(client, bytes.subarray(from, cut));
      from = cut;
    }
    await write(client, `${Buffer.byteLength(three)} ${three}`);
    await waitFor(() => events.length === 3, 'three messages');
    expect(messages(events).map((m) => [m.transport, m.tag, m.severity, m.message])).toEqual([
      ['tcp', 'nginx_shop', INFO, COMBINED_LINE],
      ['tcp', 'nginx', INFO, 'GET /日本/café'],
      ['tcp', 'nginx', 3, ERROR_LINE],
    ]);
    expect(messages(events)[0]?.peer).toBe(`127.0.0.1:${client.localPort}`);
  });

  it('reports malformed, overlong and unfinished messages and keeps the connection', async () => {
    const listener = await listen({ tcp: { host: '127.0.0.1', port: 0 }, maxMessageBytes: 1024 });
    const { events } = consume(listener);
    const client = await tcpClient(listener.tcpAddress!.port);
    const at = new Date();
    await write(client, `just text\n${'y'.repeat(5000)}\n${nginxDatagram({ at, message: 'after' })}\n`);
    await write(client, nginxDatagram({ at, message: 'cut short' }));
    client.end();
    await waitFor(() => events.length === 4, 'four events');
    expect(events.map((e) => (e.kind === 'malformed' ? e.reason : e.kind === 'message' ? e.message : e.kind))).toEqual([
      'no <PRI> at the start',
      'line is over the 1024-byte limit',
      'after',
      'connection closed inside a message',
    ]);
    expect(malformed(events)[1]?.raw).toBe('y'.repeat(OVERLONG_HEAD_BYTES));
    expect(listener.stats()).toMatchObject({ messages: 1, malformed: 3 });
  });

  it('applies backpressure instead of dropping: the sender waits, every message arrives in order', async () => {
    const capacity = 64 * 1024;
    const listener = await listen({ tcp: { host: '127.0.0.1', port: 0 }, bufferBytes: capacity });
    const client = await tcpClient(listener.tcpAddress!.port);
    const at = new Date();
    const total = 100_000;
    const line = (i: number) => `${nginxDatagram({ at, message: `#${i} ${'z'.repeat(150)}` })}\n`;
    // Far more than the socket buffers of both ends hold.
    const written = (async () => {
      let chunk = '';
      for (let i = 0; i < total; i++) {
        chunk += line(i);
        if (chunk.length > 256 * 1024 || i === total - 1) {
          await write(client, chunk);
          chunk = '';
        }
      }
    })();
    await waitFor(() => client.writableLength > 0 && listener.stats().bufferedBytes >= capacity, 'the sender to be held back');
    const stalled = listener.stats();
    expect(stalled.messages).toBeLessThan(total);
    // Bounded: the capacity plus at most one socket read.
    expect(stalled.bufferedBytes).toBeLessThanOrEqual(capacity + 64 * 1024 + 256);

    const { events } = consume(listener);
    await written;
    await waitFor(() => events.length === total, `${total} messages`, 60_000);
    const numbers = messages(events).map((m) => Number(/^#(\d+)/.exec(m.message)?.[1]));
    expect(numbers).toEqual(Array.from({ length: total }, (_, i) => i));
    expect(listener.stats()).toMatchObject({ messages: total, malformed: 0, dropped: 0 });
  }, 60_000);
});

describe('lifecycle', () => {
  it('binds only what is configured and refuses nothing configured', async () => {
    await expect(listenSyslog({})).rejects.toThrow('syslog: neither udp nor tcp is configured');
    await expect(listenSyslog({ udp: { host: '127.0.0.1', port: 0 }, timezone: 'Mars/Olympus' })).rejects.toThrow(RangeError);
    const listener = await listen({ udp: { host: '127.0.0.1', port: 0 } });
    expect(listener.udpAddress).toMatchObject({ address: '127.0.0.1', family: 'IPv4' });
    expect(listener.tcpAddress).toBeNull();
  });

  it('names the address it cannot bind, and releases the other one', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', () => resolve()));
    cleanups.push(() => taken.close());
    const port = (taken.address() as net.AddressInfo).port;
    const udpProbe = await listen({ udp: { host: '127.0.0.1', port: 0 } });
    const udpPort = udpProbe.udpAddress!.port;
    await udpProbe.close();

    await expect(listenSyslog({ udp: { host: '127.0.0.1', port: udpPort }, tcp: { host: '127.0.0.1', port } })).rejects.toThrow(
      `cannot listen for syslog on tcp 127.0.0.1:${port}: listen EADDRINUSE: address already in use 127.0.0.1:${port}`,
    );
    // The UDP socket of the failed start was closed: its port binds again.
    const again = await listen({ udp: { host: '127.0.0.1', port: udpPort } });
    expect(again.udpAddress?.port).toBe(udpPort);
  });

  it('closes cleanly: buffered events are still delivered, then the iteration ends and the ports are free', async () => {
    const listener = await listenSyslog({ udp: { host: '127.0.0.1', port: 0 }, tcp: { host: '127.0.0.1', port: 0 } });
    const udpPort = listener.udpAddress!.port;
    const tcpPort = listener.tcpAddress!.port;
    const client = await udpClient(udpPort);
    const relay = await tcpClient(tcpPort);
    const relayClosed = new Promise<void>((resolve) => relay.once('close', () => resolve()));
    await sendDatagram(client, nginxDatagram({ at: new Date(), message: 'udp before close' }));
    await write(relay, `${nginxDatagram({ at: new Date(), message: 'tcp before close' })}\n`);
    await waitFor(() => listener.stats().messages === 2, 'two messages');

    await listener.close();
    await listener.close();
    await relayClosed;
    const { events, done } = consume(listener);
    await done;
    expect(messages(events).map((m) => m.message).sort()).toEqual(['tcp before close', 'udp before close']);

    const reuse = await listen({ udp: { host: '127.0.0.1', port: udpPort }, tcp: { host: '127.0.0.1', port: tcpPort } });
    expect([reuse.udpAddress?.port, reuse.tcpAddress?.port]).toEqual([udpPort, tcpPort]);
  });
});
