import path from 'node:path';
import ipaddr from 'ipaddr.js';
import { z } from 'zod';
import { EMAIL_ADDRESS } from './formats.js';

const boolFromEnv = z
  .string()
  .toLowerCase()
  .pipe(z.enum(['true', 'false', '1', '0', 'yes', 'no'], { message: 'must be true or false' }))
  .transform((v) => v === 'true' || v === '1' || v === 'yes');

const positiveInt = (what: string) =>
  z.coerce.number({ message: `must be ${what}` }).int({ message: `must be ${what}` }).positive({ message: `must be ${what}` });
/** A whole number from `min` (to `max`), with one message for every way to miss it. */
const wholeNumber = (what: string, min: number, max = Infinity) =>
  z.coerce.number({ message: `must be ${what}` }).int({ message: `must be ${what}` }).min(min, { message: `must be ${what}` }).max(max, { message: `must be ${what}` });

const urlWithProtocols = (protocols: string[]) =>
  z.string().refine(
    (v) => {
      try {
        return protocols.includes(new URL(v).protocol);
      } catch {
        return false;
      }
    },
    { message: `must be a URL starting with ${protocols.map((p) => `${p}//`).join(' or ')}` },
  );

/** `host:port`, an IPv6 host in brackets. */
const HOST_PORT = /^(?:\[([0-9a-fA-F:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/;

/** A variable as docs/reference/environment.md gives it: scripts/reference.ts writes that page from these. */
export interface VariableDoc {
  /** What it sets, in Markdown (links relative to docs/reference/). */
  description: string;
  /** What leaving it unset means, for a variable whose schema has no default to show. */
  unset?: string;
}
export const variableDocs = z.registry<VariableDoc>();

/** The environment variables (docs/reference/environment.md); everything else in the environment is ignored. */
export const envSchema = z.object({
  PORT: z.coerce.number({ message: 'must be a port number' }).int().min(0).max(65535, { message: 'must be a port number' }).default(3000)
    .register(variableDocs, { description: 'TCP port of the API (`serve`); 0–65535' }),
  HOST: z.string().min(1).default('0.0.0.0')
    .register(variableDocs, { description: 'address the API listens on' }),
  BASE_URL: urlWithProtocols(['http:', 'https:']).optional()
    .register(variableDocs, { description: "the public origin of the server, `http:` or `https:`: the base of download links and of the links in e-mails (password reset, e-mail confirmation), the `servers` entry of the OpenAPI document, the dashboard's own origin (an `https:` base makes its cookie `Secure`). Set it whenever clients reach the server under another name, e.g. behind a reverse proxy", unset: '`http://localhost:$PORT`' }),
  DATA_DIR: z.string().min(1).default('./data')
    .register(variableDocs, { description: 'the embedded stores (`postgres/`, `clickhouse/`), the mail outbox (`outbox/`), a generated token secret (`jwt-secret`), the ingest checkpoints (`ingest/checkpoints.json`), the lock of the embedded stores (`run/`, `tailhouse.pid`). With an embedded store at most 81 bytes long (see [modes.md](modes.md#the-data_dir-lock)). Private to the user tailhouse runs as (mode 0700, owned by that user), or every command refuses it ([modes.md](modes.md#a-private-data_dir))' }),
  DATABASE_URL: urlWithProtocols(['postgres:', 'postgresql:']).optional()
    .register(variableDocs, { description: 'a Postgres server, `postgres://` or `postgresql://`', unset: 'embedded PGlite under `DATA_DIR/postgres`' }),
  CLICKHOUSE_URL: urlWithProtocols(['http:', 'https:']).optional()
    .register(variableDocs, { description: 'a ClickHouse server over HTTP(S), its database in the path: `http://user:password@host:8123/tailhouse` (create the database first)', unset: 'embedded chDB under `DATA_DIR/clickhouse`' }),
  JWT_SECRET: z.string().min(32, { message: 'must be at least 32 bytes' }).optional()
    .register(variableDocs, { description: 'the key that signs access tokens, at least 32 bytes. **Required whenever `DATABASE_URL` is set**, for every command: the processes sharing one Postgres must share one key', unset: 'generated once into `DATA_DIR/jwt-secret` (mode 0600)' }),
  SMTP_URL: urlWithProtocols(['smtp:', 'smtps:']).optional()
    .register(variableDocs, { description: '`smtp://user:password@host:587` or `smtps://…`', unset: 'each mail is written as an `.eml` file to `DATA_DIR/outbox/`' }),
  MAIL_FROM: z.string().min(3).default('tailhouse <tailhouse@localhost>')
    .register(variableDocs, { description: 'the sender of every mail' }),
  INGEST_CONFIG: z.string().min(1).optional()
    .register(variableDocs, { description: 'an ingest config file: `serve` then runs its sources in the same process ([ingest.md](ingest.md))' }),
  INGEST_STATS_INTERVAL_MS: z.coerce.number({ message: 'must be a whole number of milliseconds, 0 for never' }).int().min(0).default(60_000)
    .register(variableDocs, { description: 'how often the ingest worker logs its counters (`ingest stats`: totals, and the sources that changed since the previous line); `0`: never' }),
  INGEST_BATCH_MS: wholeNumber('a whole number of milliseconds from 0 to 10000', 0, 10_000).default(1_000)
    .register(variableDocs, { description: "how long a followed file's lines wait for other files' lines to share an insert with (0 to 10000); a line waits at most about this long, and the worker sends one or two inserts per table per this interval however many files it follows, and flushes earlier once 8 MiB are waiting" }),
  INGEST_STALE_S: positiveInt('a whole number of seconds above 0').default(3_600)
    .register(variableDocs, { description: 'a domain with no line stored (access or error) for longer than this many seconds is shown as stale: in the fleet\'s "Last log line" column and its ingest health ([domains.md](domains.md#ingest-health)). A whole number above 0' }),
  ALERT_INTERVAL_S: positiveInt('a whole number of seconds above 0').default(30)
    .register(variableDocs, { description: 'seconds between two rounds of alert evaluation ([alerts.md](alerts.md#evaluation))' }),
  ALERT_GROUP_WAIT_S: wholeNumber('a whole number of seconds from 0 to 3600', 0, 3_600).default(30)
    .register(variableDocs, { description: 'seconds (0–3600) a notification waits for more alerts to its target before it is sent ([alerts.md](alerts.md#evaluation))' }),
  ALERT_REPEAT_S: positiveInt('a whole number of seconds above 0').default(14_400)
    .register(variableDocs, { description: 'seconds between reminders while an alert fires on a domain ([alerts.md](alerts.md#evaluation))' }),
  EXPORT_TTL_S: positiveInt('a whole number of seconds above 0').default(86400)
    .register(variableDocs, { description: "lifetime of an export's download link, in seconds" }),
  LOG_RETENTION_DAYS: positiveInt('a whole number of days above 0').default(90)
    .register(variableDocs, { description: 'how long log rows are kept ([logs.md](logs.md#retention))' }),
  STATS_ROLLUP_MIN_ROWS: wholeNumber('a whole number of rows, 0 or more', 0).default(32)
    .register(variableDocs, { description: 'the fewest rows per domain and hour, on average, for which `POST /api/logs/query` reads an hour from the rollups; sparser hours are read from the raw rows, which costs less then; `0`: the rollups wherever built. A whole number, 0 or more' }),
  QUERY_CACHE_MB: wholeNumber('a whole number of megabytes, 0 or more', 0).default(64)
    .register(variableDocs, { description: 'the memory `POST /api/logs/query` keeps its answers in, per process, for the same question over unchanged rows ([logs.md](logs.md#answers-reused)); `0`: none kept. A whole number, 0 or more' }),
  READ_TIMEOUT_S: positiveInt('a whole number of seconds above 0').default(30)
    .register(variableDocs, { description: 'the longest one ClickHouse statement of a request may run (`max_execution_time`, in its `SETTINGS` clause); past it the request answers `503` naming the variable ([logs.md](logs.md#reads-limits-and-order)). A whole number above 0' }),
  READ_MAX_MEMORY_MB: positiveInt('a whole number of megabytes above 0').default(2048)
    .register(variableDocs, { description: 'the most memory one ClickHouse statement of a request may use (`max_memory_usage`); past it `503` naming the variable' }),
  READS_PER_USER: positiveInt('a whole number above 0').default(2)
    .register(variableDocs, { description: 'the requests of one user that read ClickHouse at once in a process (each holds its place while its statements run); the others wait in a fair queue' }),
  READS_IN_FLIGHT: positiveInt('a whole number above 0').optional()
    .register(variableDocs, { description: 'the requests that read ClickHouse at once in a process, all users together. Embedded, also the chDB sessions their statements run on side by side (their values written as literals: the engine runs statements with bound parameters one at a time)', unset: '`4` embedded, `8` with `CLICKHOUSE_URL`' }),
  TAIL_PER_USER: positiveInt('a whole number above 0').default(5)
    .register(variableDocs, { description: "the most live tails one user may have open in one API process, whatever its sessions or tokens; past it `429` with `Retry-After` ([logs.md](logs.md#live-tail)). The process's own cap, 100, is fixed. A whole number above 0" }),
  WEBHOOK_ALLOW_NETWORKS: z
    .string()
    .transform((v, ctx) => {
      const networks = v.split(/[\s,]+/).filter((n) => n !== '');
      const bad = networks.find((n) => !ipaddr.isValidCIDR(n));
      if (bad !== undefined) {
        ctx.addIssue({ code: 'custom', message: `must be CIDR networks separated by commas, e.g. 10.20.0.0/16,fd00:1::/64; ${JSON.stringify(bad)} is not one` });
        return z.NEVER;
      }
      return networks.map((n) => ipaddr.parseCIDR(n).toString());
    })
    .default([])
    .register(variableDocs, { description: "networks (CIDRs, IPv4 or IPv6, separated by commas or spaces) trusted as webhook targets beside public addresses: a chat server on the provider's own network. Checked like the public-address rule, when a target is set and at every delivery ([alerts.md](alerts.md)); an operator's decision, since any user who may create alerts can then make the server POST into those networks" }),
  TRUST_PROXY: boolFromEnv.default(false)
    .register(variableDocs, { description: "`true`: the client address is the **last** entry of `X-Forwarded-For`, the one the proxy in front appended (earlier entries are the client's own word, and could be forged to dodge sign-in throttling). Used for throttling and the activity record. Booleans are `true`/`false`, `1`/`0` or `yes`/`no`" }),
  ADMIN_EMAIL: z.string().trim().toLowerCase().regex(EMAIL_ADDRESS, { message: 'must be an e-mail address' }).default('admin@localhost')
    .register(variableDocs, { description: 'the first administrator, created when the user table is empty (and never again)' }),
  ADMIN_PASSWORD: z.string().min(8, { message: 'must be 8 to 128 characters' }).max(128, { message: 'must be 8 to 128 characters' }).optional()
    .register(variableDocs, { description: "that administrator's password, 8–128 characters", unset: 'a random password printed once on standard output' }),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info')
    .register(variableDocs, { description: "the structured log's level (one JSON object a line): `fatal`, `error`, `warn`, `info`, `debug`, `trace` or `silent`. `serve` and `ingest` log to standard output; the other commands to standard error, leaving standard output to their results" }),
  METRICS: boolFromEnv.default(false)
    .register(variableDocs, { description: '`true` turns on `GET /metrics` (Prometheus text format); it then needs `METRICS_TOKEN` or `METRICS_LISTEN`' }),
  METRICS_TOKEN: z.string().min(16, { message: 'must be at least 16 characters' }).optional()
    .register(variableDocs, { description: "the bearer token `GET /metrics` requires on the API's port, at least 16 characters" }),
  METRICS_LISTEN: z
    .string()
    .transform((v, ctx) => {
      const match = HOST_PORT.exec(v);
      const port = Number(match?.[3]);
      if (!match || port > 65535) {
        ctx.addIssue({ code: 'custom', message: 'must be host:port, e.g. 127.0.0.1:9464 or [::1]:9464' });
        return z.NEVER;
      }
      return { host: match[1] ?? match[2]!, port };
    })
    .optional()
    .register(variableDocs, { description: '`HOST:PORT` (`[::1]:9464` for IPv6): a separate address serving the metrics, without a token' }),
});

export type Env = z.input<typeof envSchema>;

export interface Config {
  port: number;
  host: string;
  baseUrl: string;
  dataDir: string;
  databaseUrl: string | undefined;
  clickhouseUrl: string | undefined;
  /** undefined: generated once into DATA_DIR (embedded mode only). */
  jwtSecret: string | undefined;
  smtpUrl: string | undefined;
  mailFrom: string;
  ingestConfig: string | undefined;
  /** How often the ingest worker logs its counters; 0: never. */
  ingestStatsIntervalMs: number;
  /** How long followed files' chunks wait to share an insert (ingest/shared-batches.ts). */
  ingestBatchMs: number;
  /** A domain with no line stored for longer than this is shown as stale (its ingest health, the fleet). */
  ingestStaleS: number;
  alertIntervalS: number;
  /** How long a notification waits for more alerts to its target (src/alerts/outbox.ts). */
  alertGroupWaitS: number;
  /** While an alert fires, a reminder this often. */
  alertRepeatS: number;
  exportTtlS: number;
  logRetentionDays: number;
  /** POST /api/logs/query reads an hour raw where its domains hold fewer rows each, on average (src/rollups/plan.ts, sparseHoursUnbuilt). */
  statsRollupMinRows: number;
  /** POST /api/logs/query's answers kept per process, megabytes (0: none; src/stats/query/cache.ts). */
  queryCacheMb: number;
  /** A request's ClickHouse statements (src/reads/): their time and memory limits, … */
  readTimeoutS: number;
  readMaxMemoryMb: number;
  /** … how many run at once for one user, and in the process (undefined: 4 embedded, 8 with CLICKHOUSE_URL). */
  readsPerUser: number;
  readsInFlight: number | undefined;
  /** Live tails one user may hold open in one process (src/logs/tail/service.ts). */
  tailPerUser: number;
  /** Networks (CIDRs) trusted as webhook targets beside public addresses (src/alerts/addresses.ts). */
  webhookAllowNetworks: string[];
  trustProxy: boolean;
  adminEmail: string;
  adminPassword: string | undefined;
  logLevel: z.infer<typeof envSchema>['LOG_LEVEL'];
  /** GET /metrics (src/metrics/): off unless METRICS=true. */
  metrics: boolean;
  /** The bearer /metrics needs where it shares a port with the API. */
  metricsToken: string | undefined;
  /** Where /metrics is served alone, without a token, instead of the API port. */
  metricsListen: { host: string; port: number } | undefined;
}

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
    this.name = 'ConfigError';
  }
}

/** Variables whose value an error line must not repeat: secrets, and credentials inside URLs. */
export const SECRET_VARIABLES = new Set(['JWT_SECRET', 'ADMIN_PASSWORD', 'METRICS_TOKEN']);
const URL_VARIABLES = new Set(['BASE_URL', 'DATABASE_URL', 'CLICKHOUSE_URL', 'SMTP_URL']);

function shownValue(name: string, value: string): string {
  if (SECRET_VARIABLES.has(name)) return `${value.length} characters`;
  return JSON.stringify(URL_VARIABLES.has(name) ? value.replace(/^([a-z][a-z0-9+.-]*:\/\/)?.*@/i, '$1***@') : value);
}

/** Reads and validates the configuration; throws ConfigError with one line per bad variable. */
export function loadConfig(env: Record<string, string | undefined> = process.env): Config {
  // An empty variable means "unset", as in most twelve-factor tools.
  const present = Object.fromEntries(Object.entries(env).filter(([, v]) => v !== undefined && v !== ''));
  const parsed = envSchema.safeParse(present);
  if (!parsed.success) {
    const problems = parsed.error.issues.map((issue) => {
      const name = String(issue.path[0]);
      return `invalid configuration: ${name} ${issue.message} (got ${shownValue(name, present[name] ?? '')})`;
    });
    throw new ConfigError(problems);
  }
  const e = parsed.data;
  if (e.DATABASE_URL && !e.JWT_SECRET) {
    // Several API processes share one Postgres; a secret generated into one DATA_DIR would not be shared.
    throw new ConfigError(['invalid configuration: JWT_SECRET is required when DATABASE_URL is set (at least 32 bytes)']);
  }
  if (e.METRICS && !e.METRICS_TOKEN && !e.METRICS_LISTEN) {
    // Served on the API port without a token, the metrics (routes, volumes, errors) would be public.
    throw new ConfigError(['invalid configuration: METRICS=true needs METRICS_TOKEN (a bearer for /metrics on the API port) or METRICS_LISTEN (a separate address)']);
  }
  return {
    port: e.PORT,
    host: e.HOST,
    baseUrl: (e.BASE_URL ?? `http://localhost:${e.PORT}`).replace(/\/+$/, ''),
    dataDir: path.resolve(e.DATA_DIR),
    databaseUrl: e.DATABASE_URL,
    clickhouseUrl: e.CLICKHOUSE_URL,
    jwtSecret: e.JWT_SECRET,
    smtpUrl: e.SMTP_URL,
    mailFrom: e.MAIL_FROM,
    ingestConfig: e.INGEST_CONFIG,
    ingestStatsIntervalMs: e.INGEST_STATS_INTERVAL_MS,
    ingestBatchMs: e.INGEST_BATCH_MS,
    ingestStaleS: e.INGEST_STALE_S,
    alertIntervalS: e.ALERT_INTERVAL_S,
    alertGroupWaitS: e.ALERT_GROUP_WAIT_S,
    alertRepeatS: e.ALERT_REPEAT_S,
    exportTtlS: e.EXPORT_TTL_S,
    logRetentionDays: e.LOG_RETENTION_DAYS,
    statsRollupMinRows: e.STATS_ROLLUP_MIN_ROWS,
    queryCacheMb: e.QUERY_CACHE_MB,
    readTimeoutS: e.READ_TIMEOUT_S,
    readMaxMemoryMb: e.READ_MAX_MEMORY_MB,
    readsPerUser: e.READS_PER_USER,
    readsInFlight: e.READS_IN_FLIGHT,
    tailPerUser: e.TAIL_PER_USER,
    webhookAllowNetworks: e.WEBHOOK_ALLOW_NETWORKS,
    trustProxy: e.TRUST_PROXY,
    adminEmail: e.ADMIN_EMAIL.trim().toLowerCase(),
    adminPassword: e.ADMIN_PASSWORD,
    logLevel: e.LOG_LEVEL,
    metrics: e.METRICS,
    metricsToken: e.METRICS_TOKEN,
    metricsListen: e.METRICS_LISTEN,
  };
}
