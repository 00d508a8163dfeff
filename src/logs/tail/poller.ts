/**
 * One domain's poller: a single loop that asks ClickHouse for the rows stored since the last look,
 * at most once per `intervalMs`, and hands each tailing client of the domain what it is owed. The
 * number of queries depends on time alone, never on the number of clients; a client's filters
 * are columns of the one query (store.ts `newRows`), identical filters sharing one.
 *
 * Each client has its own cursor (cursor.ts): a new client starts at the poller's `head` (what
 * the poller has read so far), a resumed one at its Last-Event-ID. A poll reads from the lowest
 * of all cursors and the head, so a resumed client catches up in the same query as everyone else,
 * and each client gets the rows past its own cursor that match its filters: those of one segment
 * in the order they were stored (id order), segments interleaved by time. Every event carries the
 * client's cursor as it stands after that event, so resuming from any event id neither skips nor
 * repeats a row. (Strict (timestamp, id) order within a poll cannot be had with that: a file whose
 * times run backwards for a moment, as nginx workers' clocks may, would need a cursor holding
 * every id sent out of order.)
 *
 * The window: only rows dated within `windowMs` before the poll are read. That bounds each read
 * to the newest part of the domain's table (its primary key is (domain_id, timestamp)) and is what
 * lets a segment's mark be forgotten (cursor.ts `pruneCursor`).
 */
import { segmentOfId } from '../../../core/entries.js';
import type { Logger } from '../../../core/log.js';
import type { AccessFilters, ErrorFilters } from '../filters.js';
import type { SearchEntry } from '../store.js';
import { copyCursor, emptyCursor, encodeCursor, ENTRY_KINDS, lowestMarks, owes, passOver, pruneCursor, type Cursor, type EntryKind } from './cursor.js';
import type { NewRow, NewRowsRequest, SegmentHead } from './store.js';

/** The reads a poller makes (store.ts), passed in so that the hub owns the ClickHouse client. */
export interface PollerReads {
  segmentHeads(domainId: number, since: number): Promise<SegmentHead[]>;
  newRows(request: NewRowsRequest): Promise<NewRow[]>;
}

export interface PollerTiming {
  /** The least time between two queries of one domain. */
  intervalMs: number;
  /** How far back from each poll rows are read. */
  windowMs: number;
  /** At most this many rows of one segment per poll (store.ts). */
  rowsPerSegment: number;
}

/** What a tailing client asks for, and where it stands. */
export interface TailClient {
  kinds: ReadonlySet<EntryKind>;
  filters: { access: AccessFilters; error: ErrorFilters };
  /** Set by the poller when the client is added; moved by each poll. */
  cursor: Cursor;
  /**
   * What one poll has for the client: its owed entries in order, each with the cursor text (event
   * id) as it stands after it; or, when there are none, the cursor's new text if the poll moved it
   * over rows the client does not want (else null).
   */
  deliver(events: TailEvent[], movedTo: string | null): void;
}

export interface TailEvent {
  entry: SearchEntry;
  eventId: string;
}

type Waiter = { resolve: () => void; reject: (err: unknown) => void };

export class DomainPoller {
  private readonly clients = new Set<TailClient>();
  /** What the poller has read so far: where a new client starts. Null until the first query. */
  private head: Cursor | null = null;
  private waiters: Waiter[] = [];
  private lastQueryAt = Number.NEGATIVE_INFINITY;
  private loop: Promise<void> | null = null;
  private stopping = false;
  private wake: (() => void) | null = null;

  constructor(
    readonly domainId: number,
    private readonly reads: PollerReads,
    private readonly timing: PollerTiming,
    private readonly log: Logger,
    /** Called once the loop has ended with no client left: the hub forgets this poller. */
    private readonly onIdle: (poller: DomainPoller) => void,
  ) {}

  /** Whether the loop has ended (or is ending): a new client needs a new poller. */
  get ended(): boolean {
    return this.stopping;
  }

  /**
   * Adds a client, starting at `from` (a resumed cursor) or, when null, at the head. Resolves once
   * the client is in: after the first query when the poller is new (so that what is stored from
   * then on reaches it), at once otherwise. Rejects when that first query fails.
   */
  async add(client: TailClient, from: Cursor | null): Promise<void> {
    if (this.stopping) throw new Error(`the live tail poller of domain ${this.domainId} has ended`);
    if (this.head === null) {
      await new Promise<void>((resolve, reject) => {
        this.waiters.push({ resolve, reject });
        this.start();
      });
    }
    client.cursor = from ?? copyCursor(this.head!);
    this.clients.add(client);
    this.start();
  }

  remove(client: TailClient): void {
    this.clients.delete(client);
  }

  /** Ends the loop (shutdown); resolves when a query under way has finished. */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    for (const waiter of this.waiters.splice(0)) waiter.reject(new Error('the live tail is shutting down'));
    await this.loop;
  }

  private start(): void {
    this.loop ??= this.run();
  }

  private async run(): Promise<void> {
    while (!this.stopping) {
      // Again until the clock says so: a timer may fire a millisecond or two early by Date.now().
      for (let wait; (wait = this.lastQueryAt + this.timing.intervalMs - Date.now()) > 0 && !this.stopping; ) await this.sleep(wait);
      if (this.stopping) break;
      // Lingering one interval after the last query: a client arriving meanwhile starts at a head
      // at most that old, and a new poller for the domain cannot query sooner than this one could.
      if (this.clients.size === 0 && this.waiters.length === 0) {
        this.stopping = true;
        break;
      }
      this.lastQueryAt = Date.now();
      try {
        if (this.head === null) await this.readHead();
        else await this.poll();
      } catch (err) {
        this.log.warn({ err, domainId: this.domainId }, 'live tail: reading new entries failed; trying again');
        for (const waiter of this.waiters.splice(0)) waiter.reject(err);
      }
    }
    this.onIdle(this);
  }

  private sleep(ms: number): Promise<void> {
    if (ms <= 0) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.wake = done;
    });
  }

  private async readHead(): Promise<void> {
    const head = emptyCursor();
    for (const h of await this.reads.segmentHeads(this.domainId, Date.now() - this.timing.windowMs)) passOver(head, h.kind, h.id, h.ms);
    this.head = head;
    for (const waiter of this.waiters.splice(0)) waiter.resolve();
  }

  private async poll(): Promise<void> {
    const head = this.head!;
    const since = Date.now() - this.timing.windowMs;
    const clients = [...this.clients];
    // The distinct filters of each table, and each client's place among them.
    const filters = { access: new Map<string, AccessFilters>(), error: new Map<string, ErrorFilters>() };
    const keys = new Map<TailClient, Record<EntryKind, string>>();
    for (const c of clients) {
      const key = { access: JSON.stringify(c.filters.access), error: JSON.stringify(c.filters.error) };
      keys.set(c, key);
      if (c.kinds.has('access')) filters.access.set(key.access, c.filters.access);
      if (c.kinds.has('error')) filters.error.set(key.error, c.filters.error);
    }
    const after = {
      access: lowestMarks([head, ...clients.filter((c) => c.kinds.has('access')).map((c) => c.cursor)], 'access'),
      error: lowestMarks([head, ...clients.filter((c) => c.kinds.has('error')).map((c) => c.cursor)], 'error'),
    };
    const rows = await this.reads.newRows({
      domainId: this.domainId,
      since,
      after,
      filters: { access: [...filters.access.values()], error: [...filters.error.values()] },
      rowsPerSegment: this.timing.rowsPerSegment,
    });
    const read = readIds(rows);
    const index = { access: [...filters.access.keys()], error: [...filters.error.keys()] };
    // A client that left while the query ran gets nothing; one that arrived meanwhile is served from the next poll on.
    for (const client of clients) {
      if (!this.clients.has(client)) continue;
      const key = keys.get(client)!;
      const slot = { access: index.access.indexOf(key.access), error: index.error.indexOf(key.error) };
      const wanted = (row: NewRow) => client.kinds.has(row.entry.type) && row.matches[slot[row.entry.type]] === 1 && owes(client.cursor, row.entry.type, row.entry.id);
      deliver(client, rows.filter(wanted), read);
      pruneCursor(client.cursor, since);
    }
    for (const kind of ENTRY_KINDS) for (const seen of read[kind].values()) passOver(head, kind, seen.ids.at(-1)!, seen.ms);
    pruneCursor(head, since);
  }
}

/**
 * Per table and segment, the ids a poll returned (ascending: its matching rows and the last row it
 * read) and the newest time among all the rows it read there.
 */
type ReadIds = Record<EntryKind, Map<number, { ids: number[]; ms: number }>>;

function readIds(rows: readonly NewRow[]): ReadIds {
  const read: ReadIds = { access: new Map(), error: new Map() };
  for (const row of rows) {
    const segment = segmentOfId(row.entry.id);
    const seen = read[row.entry.type].get(segment);
    if (seen) seen.ids.push(row.entry.id);
    else read[row.entry.type].set(segment, { ids: [row.entry.id], ms: row.segmentMs });
  }
  for (const kind of ENTRY_KINDS) for (const seen of read[kind].values()) seen.ids.sort((a, b) => a - b);
  return read;
}

/**
 * Sends a client its owed rows and moves its cursor over everything the poll read. A segment's rows
 * go in id order (the order they were stored); segments are interleaved by (timestamp, id) of
 * their next row. So after each event the mark of its segment can stand just below the segment's
 * next owed row, and each event id says exactly what was sent before it.
 */
function deliver(client: TailClient, owed: readonly NewRow[], read: ReadIds): void {
  const cursor = client.cursor;
  const before = encodeCursor(cursor);
  // Per segment, its owed rows in id order and how many of them are sent.
  const queues = new Map<string, { kind: EntryKind; segment: number; rows: NewRow[]; sent: number }>();
  for (const row of owed) {
    const segment = segmentOfId(row.entry.id);
    const key = `${row.entry.type}:${segment}`;
    const queue = queues.get(key) ?? { kind: row.entry.type, segment, rows: [], sent: 0 };
    queue.rows.push(row);
    queues.set(key, queue);
  }
  for (const queue of queues.values()) queue.rows.sort((a, b) => a.entry.id - b.entry.id);
  /**
   * Moves a segment's mark as far as the returned ids go without passing the segment's next owed
   * row: every owed row below it is sent (rows matching nothing in between are passed over too).
   */
  const advance = (kind: EntryKind, segment: number) => {
    const seen = read[kind].get(segment)!;
    const next = queues.get(`${kind}:${segment}`);
    const limit = next && next.sent < next.rows.length ? next.rows[next.sent]!.entry.id : Number.POSITIVE_INFINITY;
    const highest = highestBelow(seen.ids, limit);
    if (highest !== undefined) passOver(cursor, kind, highest, seen.ms);
  };
  for (const kind of ENTRY_KINDS) for (const segment of read[kind].keys()) advance(kind, segment);
  const events: TailEvent[] = [];
  for (let left = owed.length; left > 0; left--) {
    let first: { kind: EntryKind; segment: number; rows: NewRow[]; sent: number } | undefined;
    for (const queue of queues.values()) {
      if (queue.sent === queue.rows.length) continue;
      const head = queue.rows[queue.sent]!;
      const best = first?.rows[first.sent];
      if (!best || head.ms < best.ms || (head.ms === best.ms && head.entry.id < best.entry.id)) first = queue;
    }
    const row = first!.rows[first!.sent++]!;
    advance(first!.kind, first!.segment);
    events.push({ entry: row.entry, eventId: encodeCursor(cursor) });
  }
  const after = encodeCursor(cursor);
  if (events.length > 0 || after !== before) client.deliver(events, events.length === 0 ? after : null);
}

/** The highest of ascending `ids` below `limit`. */
function highestBelow(ids: readonly number[], limit: number): number | undefined {
  let lo = 0;
  let hi = ids.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (ids[mid]! < limit) lo = mid + 1;
    else hi = mid;
  }
  return lo > 0 ? ids[lo - 1] : undefined;
}
