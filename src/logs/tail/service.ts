/**
 * The live tail of a domain's logs (`GET /api/logs/domains/:domainId/tail`, Server-Sent Events).
 *
 * One hub per process holds every tailing client: at most `maxClients` of them, and at most
 * `maxPerUser` of one user, so that one user cannot take every place (429 beyond either), and
 * one poller per domain with clients (poller.ts), which queries ClickHouse at most once per
 * `intervalMs` whatever the number of clients. Each client's events go through its own bounded
 * queue (stream.ts): a client that does not read is cut, never buffered without bound.
 *
 * A client's right to its stream is checked again every `recheckMs` with its own credential (the
 * token still valid and its session live, the user active, the domain visible, `logs: read`
 * held), at once on its domain when a member's role there is revoked or changed (recheckDomains),
 * and its stream ends when its access token expires; `close` ends every stream (shutdown).
 *
 * What a tail sends (docs/reference/logs.md, "Live tail"): each entry stored while the stream is open whose time is
 * within `windowMs` of the moment it is read, exactly once, access entries as `event: access`
 * and error entries as `event: error`, `data:` the entry as the listings return it.
 */
import { MINUTE_MS } from '../../../core/durations.js';
import { authenticate } from '../../auth/service.js';
import type { Principal, Services } from '../../context.js';
import { resolveDomain } from '../../domains/service.js';
import { ApiError } from '../../http/errors.js';
import type { SearchEntry } from '../store.js';
import { encodeCursor, type Cursor } from './cursor.js';
import { DomainPoller, type PollerTiming, type TailClient } from './poller.js';
import { tailSelection, type TailQuery } from './schemas.js';
import { newRows, segmentHeads } from './store.js';
import { sseMessage, TailStream, type CloseReason, type EndReason, type StreamLimits } from './stream.js';

type Deps = Pick<Services, 'db' | 'clickhouse' | 'jwtSecret' | 'log' | 'config'>;

export interface TailLimits extends PollerTiming, StreamLimits {
  /** Tailing clients per process. */
  maxClients: number;
  /** Tailing clients of one user per process (TAIL_PER_USER). */
  maxPerUser: number;
  /** How often a client's access is checked again. */
  recheckMs: number;
}

/** The limits but the per-user one, which is configured (TAIL_PER_USER). */
export const TAIL_LIMITS: Omit<TailLimits, 'maxPerUser'> = {
  maxClients: 100,
  intervalMs: 1000,
  windowMs: 5 * MINUTE_MS,
  // A file writing more lines a second than this makes its tails lag (until lines fall out of the window).
  rowsPerSegment: 1_000,
  maxQueuedBytes: 4 * 1024 * 1024,
  keepaliveMs: 15_000,
  endGraceMs: 5_000,
  retryMs: 3_000,
  recheckMs: 5_000,
};

/** setTimeout's longest delay. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** Seconds a client turned away for a cap is asked to wait. */
const RETRY_AFTER_S = 10;

/**
 * The places of a process's tails, in all and per user. A place is taken before a tail is opened
 * and given back by the release `take` returns, which counts once however often it is called: a
 * stream's every way to end (client gone, cut, shutdown, token expired, access revoked) and a
 * failure while opening all call it.
 */
function createPlaces(limits: Pick<TailLimits, 'maxClients' | 'maxPerUser'>) {
  let taken = 0;
  const takenBy = new Map<number, number>();
  const refuse = (message: string) => new ApiError(429, message, undefined, { 'Retry-After': String(RETRY_AFTER_S) });
  return {
    get taken() {
      return taken;
    },
    /** Takes a place for the user, or throws 429 when the process or the user has none left. */
    take(userId: number): () => void {
      if (taken >= limits.maxClients) throw refuse(`Too many live tails on this server (${limits.maxClients}); try again later`);
      const ofUser = takenBy.get(userId) ?? 0;
      if (ofUser >= limits.maxPerUser) throw refuse(`Too many live tails for one user on this server (${limits.maxPerUser}, TAIL_PER_USER); close one and try again`);
      taken++;
      takenBy.set(userId, ofUser + 1);
      let released = false;
      return () => {
        if (released) return;
        released = true;
        taken--;
        const left = takenBy.get(userId)! - 1;
        if (left === 0) takenBy.delete(userId);
        else takenBy.set(userId, left);
      };
    },
  };
}

export interface TailRequest {
  principal: Principal;
  /** The request's Authorization header, presented again at each re-check. */
  authorization: string | undefined;
  domainId: number;
  query: TailQuery;
  /** Last-Event-ID: where a reconnecting client resumes. */
  resumeFrom: Cursor | null;
  /** A HEAD request: the checks only (Hono drops the body of a HEAD answer unread, so no stream is opened). */
  headOnly: boolean;
  /** Destroys the request's connection (the node server gives it), for cutting a client that does not read. */
  disconnect?: (() => void) | undefined;
}

// An entry's `data:` text, made once per poll for all the clients it goes to (the rows of a poll
// are shared objects), and let go with them.
const entryData = new WeakMap<SearchEntry, Uint8Array>();
const encoder = new TextEncoder();

/** The entry as the listings return it: its fields without `type`, as JSON. */
function dataOf(entry: SearchEntry): Uint8Array {
  let data = entryData.get(entry);
  if (!data) {
    const { type: _type, ...fields } = entry;
    data = encoder.encode(JSON.stringify(fields));
    entryData.set(entry, data);
  }
  return data;
}

export interface TailHub {
  /** 404/403 as for a listing; 429 when the process has `maxClients` already, or the user `maxPerUser`; else the SSE body (null for `headOnly`). */
  open(request: TailRequest): Promise<ReadableStream<Uint8Array> | null>;
  /**
   * Checks the access of every open stream on `domainIds` (`all`: on any domain) now, not at its
   * next re-check: a membership or a group's grant revoked or lowered in this process ends its
   * tails at once (other processes' within `recheckMs`). Resolves when those checks are done.
   */
  recheckDomains(domainIds: readonly number[] | 'all'): Promise<void>;
  /** Tailing clients now. */
  readonly clients: number;
  /** Ends every stream (`event: end`, reason `shutdown`) and stops the pollers; new tails get 503. */
  close(): Promise<void>;
}

/** The process's hub; `overrides` change the limits of TAIL_LIMITS and the configuration (tests). */
export function createTailHub(deps: Deps, overrides: Partial<TailLimits> = {}): TailHub {
  const limits: TailLimits = { ...TAIL_LIMITS, maxPerUser: deps.config.tailPerUser, ...overrides };
  const pollers = new Map<number, DomainPoller>();
  const streams = new Set<TailStream>();
  // Each open stream's re-check of its access, by domain, for recheckDomains.
  const rechecks = new Map<TailStream, { domainId: number; now: () => Promise<void> }>();
  // Places taken: open streams, and tails still being opened.
  const places = createPlaces(limits);
  let closed = false;
  const reads = {
    segmentHeads: (domainId: number, since: number) => segmentHeads(deps.clickhouse, domainId, since),
    newRows: (request: Parameters<typeof newRows>[1]) => newRows(deps.clickhouse, request),
  };

  const pollerOf = (domainId: number) => {
    let poller = pollers.get(domainId);
    if (!poller || poller.ended) {
      poller = new DomainPoller(domainId, reads, limits, deps.log, (idle) => {
        if (pollers.get(domainId) === idle) pollers.delete(domainId);
      });
      pollers.set(domainId, poller);
    }
    return poller;
  };

  const authorize = async (principal: Principal, domainId: number) => {
    await resolveDomain(deps, principal, domainId, ['logs', 'read']);
  };

  async function open(request: TailRequest): Promise<ReadableStream<Uint8Array> | null> {
    if (closed) throw new ApiError(503, 'Server is shutting down');
    await authorize(request.principal, request.domainId);
    if (request.headOnly) return null;
    const release = places.take(request.principal.user.id);
    try {
      return await openStream(request, release);
    } catch (err) {
      release();
      throw err;
    }
  }

  /** The stream of a client holding a place, which `release` gives back when the stream closes. */
  async function openStream(request: TailRequest, release: () => void): Promise<ReadableStream<Uint8Array>> {
    const { principal, domainId } = request;
    const started = Date.now();
    const poller = pollerOf(domainId);
    const stream = new TailStream(limits, (reason) => onClose(reason), request.disconnect);
    const client: TailClient = {
      ...tailSelection(request.query),
      cursor: { access: new Map(), error: new Map() },
      deliver(events, movedTo) {
        if (movedTo !== null) stream.send([[sseMessage({ id: movedTo })]]);
        else stream.send(events.map((e) => [`id: ${e.eventId}\nevent: ${e.entry.type}\ndata: `, dataOf(e.entry), '\n\n']));
      },
    };
    try {
      await poller.add(client, request.resumeFrom);
      // Shut down while the poller read where the domain stands: this stream would never be ended.
      if (closed) throw new ApiError(503, 'Server is shutting down');
    } catch (err) {
      poller.remove(client);
      throw closed ? new ApiError(503, 'Server is shutting down') : err;
    }
    let recheckTimer: NodeJS.Timeout | undefined;
    let expiryTimer: NodeJS.Timeout | undefined;
    const onClose = (reason: CloseReason) => {
      release();
      streams.delete(stream);
      poller.remove(client);
      clearTimeout(recheckTimer);
      clearTimeout(expiryTimer);
      rechecks.delete(stream);
      deps.log.info({ domainId, userId: principal.user.id, reason, ms: Date.now() - started }, 'live tail closed');
    };
    streams.add(stream);
    // The first message: the reconnection delay and where this client stands, so that a client
    // that loses the connection before any event resumes from here.
    stream.begin(sseMessage({ retry: limits.retryMs, id: encodeCursor(client.cursor) }));

    const end = (reason: EndReason) => stream.end(reason);
    if (principal.expiresAt) expiryTimer = setTimeout(() => end('token-expired'), Math.min(MAX_TIMER_MS, Math.max(0, principal.expiresAt.getTime() - Date.now()))).unref();
    // One check at a time, in order: one asked for by recheckDomains while a periodic one is under
    // way runs after it (which may have read the access from before the change), and each check
    // leaves one timer for the next.
    let checking: Promise<void> = Promise.resolve();
    const recheck = (): Promise<void> => (checking = checking.then(checkOnce));
    const checkOnce = async () => {
      clearTimeout(recheckTimer);
      if (!stream.open) return;
      try {
        await authorize(await authenticate(deps, request.authorization), domainId);
      } catch (err) {
        if (!(err instanceof ApiError)) deps.log.error({ err, domainId }, 'live tail: checking access failed; ending the stream');
        // A re-check that meets the token just expired says so, as the expiry's own timer would.
        const expired = principal.expiresAt !== null && Date.now() >= principal.expiresAt.getTime();
        return end(expired ? 'token-expired' : err instanceof ApiError ? 'access-revoked' : 'access-check-failed');
      }
      if (stream.open) recheckTimer = setTimeout(recheck, limits.recheckMs).unref();
    };
    recheckTimer = setTimeout(recheck, limits.recheckMs).unref();
    rechecks.set(stream, {
      domainId,
      now: recheck,
    });
    return stream.body;
  }

  return {
    open,
    async recheckDomains(domainIds) {
      const concerned = (r: { domainId: number }) => domainIds === 'all' || domainIds.includes(r.domainId);
      await Promise.all([...rechecks.values()].filter(concerned).map((r) => r.now()));
    },
    get clients() {
      return places.taken;
    },
    async close() {
      closed = true;
      for (const stream of streams) stream.end('shutdown');
      await Promise.all([...pollers.values()].map((p) => p.stop()));
    },
  };
}
