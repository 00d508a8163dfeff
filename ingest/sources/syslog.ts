/**
 * Syslog input: nginx's `access_log syslog:server=HOST:PORT[,tag=…]` and `error_log syslog:…`.
 *
 * nginx (ngx_syslog.c) sends one UDP datagram per line, without a trailing newline:
 *   `<PRI>Mmm dd hh:mm:ss HOSTNAME TAG: MESSAGE`   (`HOSTNAME ` left out with `nohostname`)
 * PRI = facility × 8 + severity (default local7.info = 190; error_log uses the line's level), the
 * time is nginx's local time with a space-padded day and no year or zone, TAG defaults to `nginx`.
 * An error_log message is the whole error-log line, its own `YYYY/MM/DD hh:mm:ss [level]` included.
 *
 * Relays (rsyslog, syslog-ng) forward over TCP: newline framing, or RFC 6587 octet counting
 * (`LEN <PRI>…`), told apart per frame by its first byte.
 *
 * Delivery: UDP cannot push back, so when the consumer falls behind the bounded buffer discards
 * datagrams and counts them (a `dropped` event in the stream, and stats()): at most once. TCP
 * pauses its sockets instead, so the relay waits and nothing is discarded while running.
 */
import dgram from 'node:dgram';
import net, { type AddressInfo } from 'node:net';
import type { ListenAddress } from '../config.js';
import { wallTime, zonedWallTimeToEpoch } from '../parsers/time.js';
import type { ParseResult } from '../types.js';

export type Transport = 'udp' | 'tcp';

/** The parts of an RFC 3164 message. */
export interface SyslogHeader {
  facility: number;
  severity: number;
  /** Epoch milliseconds of the header time, read in the listener's zone, year inferred from receipt. */
  timestamp: number;
  /** null when nginx runs with `nohostname`. */
  hostname: string | null;
  tag: string;
  message: string;
}

export interface SyslogMessage extends SyslogHeader {
  kind: 'message';
  receivedAt: number;
  transport: Transport;
  /** The sender, `address:port`. */
  peer: string;
}

/** A datagram or frame that is not a syslog message: it goes to the rejects with its reason. */
export interface SyslogMalformed {
  kind: 'malformed';
  receivedAt: number;
  transport: Transport;
  peer: string;
  /** The datagram or frame as received; the first OVERLONG_HEAD_BYTES of an overlong one. */
  raw: string;
  reason: string;
}

/** UDP datagrams discarded unread because the buffer was full, at this point of the stream. */
export interface SyslogDropped {
  kind: 'dropped';
  count: number;
  bytes: number;
  firstAt: number;
  lastAt: number;
}

export type SyslogEvent = SyslogMessage | SyslogMalformed | SyslogDropped;

export interface SyslogStats {
  messages: number;
  malformed: number;
  /** UDP datagrams discarded because the consumer was behind (also reported in the stream). */
  dropped: number;
  droppedBytes: number;
  /** Bytes received and not yet taken by the consumer. */
  bufferedBytes: number;
}

export interface SyslogListenerOptions {
  udp?: ListenAddress | null;
  tcp?: ListenAddress | null;
  /** IANA zone of the header times (nginx writes its local time without an offset); default UTC. */
  timezone?: string;
  /** Received bytes held for a slow consumer; default 16 MiB. */
  bufferBytes?: number;
  /** Longest TCP frame; default 64 KiB, the file sources' line limit. UDP is bounded by the datagram. */
  maxMessageBytes?: number;
}

/**
 * Iterating yields every event buffered so far as one batch, waiting while there is none; one
 * consumer at a time. After close() the iteration yields what is left, then ends.
 */
export interface SyslogListener extends AsyncIterable<SyslogEvent[]> {
  /** The bound addresses (port 0 in the options gives a free port). */
  readonly udpAddress: AddressInfo | null;
  readonly tcpAddress: AddressInfo | null;
  stats(): SyslogStats;
  close(): Promise<void>;
}

const DEFAULT_BUFFER_BYTES = 16 * 1024 * 1024;
const DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024;
/** What an overlong TCP frame keeps for the rejects: enough to recognise it. */
export const OVERLONG_HEAD_BYTES = 1024;

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const PRI = /^<(\d{1,3})>/;
// nginx: "%s %2d %02d:%02d:%02d"; a zero-padded day (some relays) is accepted too.
const TIME = /^([A-Z][a-z]{2}) ([ 0-3]\d) (\d\d):(\d\d):(\d\d) /;
// The hostname cannot end with ':', so `tag: text: more` without a hostname is not misread as
// hostname `tag:`. `[pid]` after the tag is what relays and other daemons add.
const ORIGIN = /^(?:(\S*[^\s:]) )?([A-Za-z0-9_./-]{1,32})(?:\[\d+\])?: /;

/**
 * A parser of RFC 3164 messages whose header times are in `timezone`. The header has no year: the
 * one (of the receipt year and its neighbours) that puts the time closest to `receivedAt` wins, so
 * `Dec 31 23:59:59` received on 1 January belongs to the year before.
 */
export function createSyslogParser(timezone = 'UTC'): (text: string, receivedAt: number) => ParseResult<SyslogHeader> {
  // A bad zone fails here, not on the first datagram.
  new Intl.DateTimeFormat('en-US', { timeZone: timezone });
  // Messages arrive in time order, so the last conversion is nearly always the one needed.
  let cachedKey = '';
  let cachedTime = 0;

  const timestampOf = (month: number, day: number, h: number, m: number, s: number, receivedAt: number): number | null => {
    const year = new Date(receivedAt).getUTCFullYear();
    const key = `${year} ${month} ${day} ${h} ${m} ${s}`;
    if (key === cachedKey) return cachedTime;
    let best: number | null = null;
    for (const candidate of [year - 1, year, year + 1]) {
      const wall = wallTime(candidate, month, day, h, m, s);
      if (Number.isNaN(wall)) continue; // Feb 29 outside a leap year, or no such time at all
      const epoch = zonedWallTimeToEpoch(wall, timezone);
      if (best === null || Math.abs(epoch - receivedAt) < Math.abs(best - receivedAt)) best = epoch;
    }
    if (best !== null) [cachedKey, cachedTime] = [key, best];
    return best;
  };

  return (text, receivedAt) => {
    const pri = PRI.exec(text);
    if (!pri) return { ok: false, reason: 'no <PRI> at the start' };
    const priority = Number(pri[1]);
    if (priority > 191) return { ok: false, reason: `PRI ${priority} is out of range (0-191)` };
    let rest = text.slice(pri[0].length);

    const time = TIME.exec(rest);
    if (!time) return { ok: false, reason: 'no "Mmm dd hh:mm:ss" time after <PRI>' };
    const [, monthName = '', day = '', h = '', m = '', s = ''] = time;
    const month = MONTHS.indexOf(monthName);
    // Out-of-range fields and days a month lacks (Nov 31) fit no candidate year.
    const timestamp = month < 0 ? null : timestampOf(month, Number(day.trim()), Number(h), Number(m), Number(s), receivedAt);
    if (timestamp === null) return { ok: false, reason: `invalid time "${time[0].trimEnd()}"` };
    rest = rest.slice(time[0].length);

    const origin = ORIGIN.exec(rest);
    if (!origin) return { ok: false, reason: 'no "TAG: " after the time (and hostname)' };
    return {
      ok: true,
      entry: {
        facility: priority >> 3,
        severity: priority & 7,
        timestamp,
        hostname: origin[1] ?? null,
        tag: origin[2] ?? '',
        // nginx sends none, but relays and octet-counted frames may end the message with one.
        message: rest.slice(origin[0].length).replace(/\r?\n$/, ''),
      },
    };
  };
}

export interface FrameSink {
  frame(bytes: Buffer): void;
  malformed(raw: Buffer, reason: string): void;
}

const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const EMPTY = Buffer.alloc(0);
const isDigit = (byte: number | undefined) => byte !== undefined && byte >= 0x30 && byte <= 0x39;

/**
 * RFC 6587 framing of one TCP stream. A frame starting with a non-zero digit and `LEN ` is octet
 * counted, anything else runs to the next LF (a newline-framed message starts with `<`). Frames
 * above the limit are reported and skipped, so the stream stays in step and memory stays bounded.
 */
export class TcpFramer {
  private pending: Buffer = EMPTY;
  /** Bytes of an overlong octet-counted frame still to skip. */
  private skip = 0;
  /** Inside an overlong line: skip up to its LF. */
  private skipLine = false;

  constructor(
    private readonly max: number,
    private readonly sink: FrameSink,
  ) {}

  push(chunk: Buffer): void {
    const buf = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    let at = 0;
    while (at < buf.length) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, buf.length - at);
        this.skip -= n;
        at += n;
        continue;
      }
      if (this.skipLine) {
        const lf = buf.indexOf(LF, at);
        if (lf < 0) {
          at = buf.length;
          break;
        }
        this.skipLine = false;
        at = lf + 1;
        continue;
      }
      const next = buf[at] !== 0x30 && isDigit(buf[at]) ? this.octetCounted(buf, at) : this.lineFramed(buf, at);
      if (next === null) break;
      at = next;
    }
    // A copy: a subarray would pin the whole chunk in memory.
    this.pending = at < buf.length ? Buffer.from(buf.subarray(at)) : EMPTY;
  }

  /** The stream ended: an unfinished frame is reported, not guessed at. */
  finish(): void {
    if (this.pending.length > 0) this.sink.malformed(this.pending, 'connection closed inside a message');
    this.pending = EMPTY;
  }

  /** The offset after the frame at `at`, or null when more bytes are needed. */
  private octetCounted(buf: Buffer, at: number): number | null {
    let end = at;
    while (isDigit(buf[end]) && end - at <= 10) end++;
    if (end === buf.length) return null;
    if (buf[end] !== SPACE || end - at > 10) return this.lineFramed(buf, at);
    const length = Number(buf.toString('latin1', at, end));
    const start = end + 1;
    if (length > this.max) {
      this.sink.malformed(buf.subarray(start, Math.min(buf.length, start + OVERLONG_HEAD_BYTES)), `frame of ${length} bytes is over the ${this.max}-byte limit`);
      this.skip = length;
      return start;
    }
    if (buf.length < start + length) return null;
    this.sink.frame(buf.subarray(start, start + length));
    return start + length;
  }

  private lineFramed(buf: Buffer, at: number): number | null {
    const lf = buf.indexOf(LF, at);
    const length = (lf < 0 ? buf.length : lf) - at;
    if (length > this.max) {
      this.sink.malformed(buf.subarray(at, at + OVERLONG_HEAD_BYTES), `line is over the ${this.max}-byte limit`);
      if (lf < 0) this.skipLine = true;
      return lf < 0 ? buf.length : lf + 1;
    }
    if (lf < 0) return null;
    const end = lf > at && buf[lf - 1] === CR ? lf - 1 : lf;
    // An empty line carries nothing: keep-alives of some relays.
    if (end > at) this.sink.frame(buf.subarray(at, end));
    return lf + 1;
  }
}

/** The events waiting for the consumer, bounded in bytes. */
class EventBuffer {
  private events: SyslogEvent[] = [];
  private wake: (() => void) | null = null;
  private failure: Error | null = null;
  private ended = false;
  bytes = 0;

  constructor(
    readonly capacity: number,
    private readonly onTaken: () => void,
  ) {}

  /** An empty buffer takes any datagram, so one bigger than the capacity still gets through. */
  hasRoom(bytes: number): boolean {
    return this.bytes === 0 || this.bytes + bytes <= this.capacity;
  }

  get full(): boolean {
    return this.bytes >= this.capacity;
  }

  push(event: SyslogEvent, bytes: number): void {
    this.events.push(event);
    this.bytes += bytes;
    this.notify();
  }

  /** Consecutive drops share one event, so a flood of them costs no memory. */
  drop(bytes: number, at: number): void {
    const last = this.events[this.events.length - 1];
    if (last?.kind === 'dropped') {
      last.count += 1;
      last.bytes += bytes;
      last.lastAt = at;
    } else {
      this.push({ kind: 'dropped', count: 1, bytes, firstAt: at, lastAt: at }, 0);
    }
  }

  end(): void {
    this.ended = true;
    this.notify();
  }

  fail(err: Error): void {
    this.failure ??= err;
    this.notify();
  }

  /** Everything buffered, waiting for at least one event; null once ended and empty. */
  async take(): Promise<SyslogEvent[] | null> {
    while (this.events.length === 0) {
      if (this.failure) throw this.failure;
      if (this.ended) return null;
      await new Promise<void>((resolve) => (this.wake = resolve));
    }
    const batch = this.events;
    this.events = [];
    this.bytes = 0;
    this.onTaken();
    return batch;
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = null;
    wake?.();
  }
}

function peerOf(address: string | undefined, port: number | undefined): string {
  return address?.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

function listenError(transport: Transport, at: ListenAddress, err: Error): Error {
  return new Error(`cannot listen for syslog on ${transport} ${peerOf(at.host, at.port)}: ${err.message}`);
}

async function bindUdp(at: ListenAddress): Promise<dgram.Socket> {
  const socket = dgram.createSocket(net.isIPv6(at.host) ? 'udp6' : 'udp4');
  await new Promise<void>((resolve, reject) => {
    socket.once('error', (err) => reject(listenError('udp', at, err)));
    socket.bind(at.port, at.host, () => resolve());
  });
  socket.removeAllListeners('error');
  return socket;
}

async function listenTcp(at: ListenAddress, onConnection: (socket: net.Socket) => void): Promise<net.Server> {
  const server = net.createServer(onConnection);
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err) => reject(listenError('tcp', at, err)));
    server.listen(at.port, at.host, () => resolve());
  });
  server.removeAllListeners('error');
  return server;
}

/** Binds the configured listeners (only those) and starts receiving. */
export async function listenSyslog(options: SyslogListenerOptions): Promise<SyslogListener> {
  if (!options.udp && !options.tcp) throw new Error('syslog: neither udp nor tcp is configured');
  const parse = createSyslogParser(options.timezone);
  const maxMessageBytes = options.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
  const counts = { messages: 0, malformed: 0, dropped: 0, droppedBytes: 0 };
  const sockets = new Set<net.Socket>();
  let paused = false;

  const buffer = new EventBuffer(options.bufferBytes ?? DEFAULT_BUFFER_BYTES, () => {
    // The consumer emptied the buffer: let the relays send again.
    if (!paused) return;
    paused = false;
    for (const socket of sockets) socket.resume();
  });

  const receive = (bytes: Buffer, transport: Transport, peer: string, receivedAt: number): void => {
    const text = bytes.toString('utf8');
    const parsed = parse(text, receivedAt);
    if (parsed.ok) {
      counts.messages += 1;
      buffer.push({ kind: 'message', receivedAt, transport, peer, ...parsed.entry }, bytes.length);
    } else {
      counts.malformed += 1;
      buffer.push({ kind: 'malformed', receivedAt, transport, peer, raw: text, reason: parsed.reason }, bytes.length);
    }
  };

  const onConnection = (socket: net.Socket): void => {
    const peer = peerOf(socket.remoteAddress, socket.remotePort);
    let receivedAt = Date.now();
    const framer = new TcpFramer(maxMessageBytes, {
      frame: (bytes) => receive(bytes, 'tcp', peer, receivedAt),
      malformed: (raw, reason) => {
        counts.malformed += 1;
        buffer.push({ kind: 'malformed', receivedAt, transport: 'tcp', peer, raw: raw.toString('utf8'), reason }, raw.length);
      },
    });
    sockets.add(socket);
    if (paused) socket.pause();
    socket.on('data', (chunk: Buffer) => {
      receivedAt = Date.now();
      framer.push(chunk);
      if (buffer.full && !paused) {
        paused = true;
        for (const s of sockets) s.pause();
      }
    });
    // A reset connection ends like a closed one; what was framed is kept.
    socket.on('error', () => {});
    socket.on('close', () => {
      sockets.delete(socket);
      framer.finish();
    });
  };

  const udp = options.udp ? await bindUdp(options.udp) : null;
  let tcp: net.Server | null = null;
  try {
    tcp = options.tcp ? await listenTcp(options.tcp, onConnection) : null;
  } catch (err) {
    udp?.close();
    throw err;
  }

  udp?.on('message', (bytes, remote) => {
    const receivedAt = Date.now();
    if (!buffer.hasRoom(bytes.length)) {
      counts.dropped += 1;
      counts.droppedBytes += bytes.length;
      buffer.drop(bytes.length, receivedAt);
      return;
    }
    receive(bytes, 'udp', peerOf(remote.address, remote.port), receivedAt);
  });
  udp?.on('error', (err) => buffer.fail(err));
  tcp?.on('error', (err) => buffer.fail(err));

  let closing: Promise<void> | null = null;
  return {
    udpAddress: udp ? udp.address() : null,
    tcpAddress: tcp ? (tcp.address() as AddressInfo) : null,
    stats: () => ({ ...counts, bufferedBytes: buffer.bytes }),
    close() {
      closing ??= (async () => {
        const closed: Promise<void>[] = [];
        if (udp) closed.push(new Promise((resolve) => udp.close(() => resolve())));
        if (tcp) {
          const server = tcp;
          closed.push(new Promise((resolve) => server.close(() => resolve())));
          // Relays never hang up by themselves; server.close() waits for every connection to go.
          for (const socket of sockets) socket.destroy();
        }
        await Promise.all(closed);
        buffer.end();
      })();
      return closing;
    },
    async *[Symbol.asyncIterator]() {
      for (let batch = await buffer.take(); batch !== null; batch = await buffer.take()) yield batch;
    },
  };
}
