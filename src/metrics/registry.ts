/**
 * The Prometheus metrics of one process (docs/reference/http.md, "Metrics"). Each server or ingest
 * worker has its own Metrics and registry, passed to what it instruments: prom-client's global
 * registry would make the apps a test process creates collide. Counters a component keeps anyway
 * (the ingest worker's, which `ingest stats` logs) are read at each scrape, never counted twice.
 *
 * The ingest worker takes a Metrics as its IngestMetrics (ingest/pipeline.ts) by shape: ingest/
 * imports nothing of src/ (docs/architecture.md).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';

/** The API's ClickHouse reads, by what they serve. */
export type QueryKind = 'listing' | 'stats' | 'query' | 'search' | 'export';
export type AlertRoundOutcome = 'ran' | 'busy' | 'taken' | 'superseded' | 'failed';
export type NotificationOutcome = 'delivered' | 'failed' | 'gaveUp' | 'held';

/** What the metrics read of an ingest source's counters (SourceStats, ingest/pipeline.ts). */
export interface IngestSourceFigures {
  name: string;
  state: string;
  read: number;
  inserted: number;
  rejectedBy: Readonly<Partial<Record<string, number>>>;
  lagBytes: number;
  retries: number;
}

/** Seconds; up to 5 minutes, for an export's stream paced by its reader. */
const QUERY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300];
const REQUEST_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class Metrics {
  readonly #registry = new Registry();
  #ingestStats: () => IngestSourceFigures[] = () => [];
  #unbuiltHours: () => number = () => 0;

  readonly #requestSeconds = new Histogram({
    name: 'tailhouse_http_request_duration_seconds',
    help: 'HTTP requests by method, route pattern and status: time until the answer (its head, for a stream); _count is the number of requests',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: REQUEST_BUCKETS,
    registers: [this.#registry],
  });
  readonly #querySeconds = new Histogram({
    name: 'tailhouse_clickhouse_query_duration_seconds',
    help: "The API's ClickHouse reads by kind (listing, stats, query, search, export); an export's lasts until its last byte",
    labelNames: ['kind'] as const,
    buckets: QUERY_BUCKETS,
    registers: [this.#registry],
  });
  readonly #insertSeconds = new Histogram({
    name: 'tailhouse_ingest_insert_duration_seconds',
    help: 'Time of each batch ClickHouse accepted (all its tables), by ingest source; "files" for the followed files, whose chunks share inserts',
    labelNames: ['source'] as const,
    buckets: QUERY_BUCKETS,
    registers: [this.#registry],
  });
  readonly #alertRounds = new Counter({
    name: 'tailhouse_alert_rounds_total',
    help: 'Alert evaluation rounds of this process by outcome: ran; busy, taken or superseded (another process had the round); failed',
    labelNames: ['outcome'] as const,
    registers: [this.#registry],
  });
  readonly #notifications = new Counter({
    name: 'tailhouse_alert_notifications_total',
    help: 'Alert notification deliveries by method and outcome: delivered; failed (retried later); gaveUp; held (the target reached its hourly limit)',
    labelNames: ['method', 'outcome'] as const,
    registers: [this.#registry],
  });

  constructor() {
    const sources = () => this.#ingestStats();
    const perSource = (name: string, help: string, value: (s: IngestSourceFigures) => number) =>
      new Counter({
        name,
        help,
        labelNames: ['source'] as const,
        registers: [this.#registry],
        collect() {
          this.reset();
          for (const s of sources()) this.inc({ source: s.name }, value(s));
        },
      });
    perSource('tailhouse_ingest_lines_read_total', 'Lines read by ingest source (stored and rejected)', (s) => s.read);
    perSource('tailhouse_ingest_lines_stored_total', 'Entries ClickHouse accepted, by ingest source', (s) => s.inserted);
    perSource('tailhouse_ingest_retries_total', 'Failed steps retried with back-off by ingest source: ClickHouse inserts, and the Postgres reads and writes of ids and domains', (s) => s.retries);
    new Counter({
      name: 'tailhouse_ingest_lines_rejected_total',
      help: 'Lines stored as rejects (ingest_rejects), by ingest source and reason',
      labelNames: ['source', 'reason'] as const,
      registers: [this.#registry],
      collect() {
        this.reset();
        for (const s of sources()) {
          for (const [reason, n] of Object.entries(s.rejectedBy)) if (n !== undefined) this.inc({ source: s.name, reason }, n);
        }
      },
    });
    new Gauge({
      name: 'tailhouse_ingest_lag_bytes',
      help: "Bytes written to an ingest source's files and not yet accepted by ClickHouse",
      labelNames: ['source'] as const,
      registers: [this.#registry],
      collect() {
        this.reset();
        for (const s of sources()) this.set({ source: s.name }, s.lagBytes);
      },
    });
    new Gauge({
      name: 'tailhouse_ingest_source_state',
      help: "1 with an ingest source's state: starting, waiting for domain, running, retrying, stopped, failed (stopped by an error that retrying cannot cure)",
      labelNames: ['source', 'state'] as const,
      registers: [this.#registry],
      collect() {
        this.reset();
        for (const s of sources()) this.set({ source: s.name, state: s.state }, 1);
      },
    });
    const unbuiltHours = () => this.#unbuiltHours();
    new Gauge({
      name: 'tailhouse_rollup_unbuilt_hours',
      help: "Complete hours whose stats rollups the builder's last round left unbuilt (read raw meanwhile); 0 in the processes that do not hold the builder's lease",
      registers: [this.#registry],
      collect() {
        this.set(unbuiltHours());
      },
    });
    collectDefaultMetrics({ register: this.#registry });
  }

  /** The ingest worker's counters, read at each scrape. */
  followIngest(stats: () => IngestSourceFigures[]): void {
    this.#ingestStats = stats;
  }

  insertTimed(source: string, seconds: number): void {
    this.#insertSeconds.observe({ source }, seconds);
  }

  /** The rollup builder's count, read at each scrape. */
  followRollups(unbuiltHours: () => number): void {
    this.#unbuiltHours = unbuiltHours;
  }

  requestServed(method: string, route: string, status: number, seconds: number): void {
    this.#requestSeconds.observe({ method, route, status }, seconds);
  }

  queryTimed(kind: QueryKind, seconds: number): void {
    this.#querySeconds.observe({ kind }, seconds);
  }

  alertRound(outcome: AlertRoundOutcome): void {
    this.#alertRounds.inc({ outcome });
  }

  notification(method: 'email' | 'webhook', outcome: NotificationOutcome): void {
    this.#notifications.inc({ method, outcome });
  }

  /** The exposition text and its content type. */
  async scrape(): Promise<{ text: string; contentType: string }> {
    return { text: await this.#registry.metrics(), contentType: this.#registry.contentType };
  }
}

/** Runs `read`, timed as a ClickHouse read of `kind` when there are metrics (failures too). */
export async function timeQuery<T>(metrics: Metrics | undefined, kind: QueryKind, read: () => Promise<T>): Promise<T> {
  if (!metrics) return read();
  const started = performance.now();
  try {
    return await read();
  } finally {
    metrics.queryTimed(kind, (performance.now() - started) / 1000);
  }
}
