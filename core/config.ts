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

/** The environment variables (docs/reference/environment.md); everything else in the environment is ignored. */
export const envSchema = z.object({
  PORT: z.coerce.number({ message: 'must be a port number' }).int().min(0).max(65535, { message: 'must be a port number' }).default(3000),
  HOST: z.string().min(1).default('0.0.0.0'),
  BASE_URL: urlWithProtocols(['http:', 'https:']).optional(),
  DATA_DIR: z.string().min(1).default('./data'),
  DATABASE_URL: urlWithProtocols(['postgres:', 'postgresql:']).optional(),
  CLICKHOUSE_URL: urlWithProtocols(['http:', 'https:']).optional(),
  JWT_SECRET: z.string().min(32, { message: 'must be at least 32 bytes' }).optional(),
  SMTP_URL: urlWithProtocols(['smtp:', 'smtps:']).optional(),
  MAIL_FROM: z.string().min(3).default('tailhouse <tailhouse@localhost>'),
  INGEST_CONFIG: z.string().min(1).optional(),
  INGEST_STATS_INTERVAL_MS: z.coerce.number({ message: 'must be a whole number of milliseconds, 0 for never' }).int().min(0).default(60_000),
  INGEST_BATCH_MS: wholeNumber('a whole number of milliseconds from 0 to 10000', 0, 10_000).default(1_000),
  INGEST_STALE_S: positiveInt('a whole number of seconds above 0').default(3_600),
  ALERT_INTERVAL_S: positiveInt('a whole number of seconds above 0').default(30),
  ALERT_GROUP_WAIT_S: wholeNumber('a whole number of seconds from 0 to 3600', 0, 3_600).default(30),
  ALERT_REPEAT_S: positiveInt('a whole number of seconds above 0').default(14_400),
  EXPORT_TTL_S: positiveInt('a whole number of seconds above 0').default(86400),
  LOG_RETENTION_DAYS: positiveInt('a whole number of days above 0').default(90),
  STATS_ROLLUP_MIN_ROWS: wholeNumber('a whole number of rows, 0 or more', 0).default(32),
  QUERY_CACHE_MB: wholeNumber('a whole number of megabytes, 0 or more', 0).default(64),
  READ_TIMEOUT_S: positiveInt('a whole number of seconds above 0').default(30),
  READ_MAX_MEMORY_MB: positiveInt('a whole number of megabytes above 0').default(2048),
  READS_PER_USER: positiveInt('a whole number above 0').default(2),
  READS_IN_FLIGHT: positiveInt('a whole number above 0').optional(),
  TAIL_PER_USER: positiveInt('a whole number above 0').default(5),
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
    .default([]),
  TRUST_PROXY: boolFromEnv.default(false),
  ADMIN_EMAIL: z.string().trim().toLowerCase().regex(EMAIL_ADDRESS, { message: 'must be an e-mail address' }).default('admin@localhost'),
  ADMIN_PASSWORD: z.string().min(8, { message: 'must be 8 to 128 characters' }).max(128, { message: 'must be 8 to 128 characters' }).optional(),
  LOG_LEVEL: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info'),
  METRICS: boolFromEnv.default(false),
  METRICS_TOKEN: z.string().min(16, { message: 'must be at least 16 characters' }).optional(),
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
    .optional(),
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
  /** … how many run at once for one user, and in the process (undefined: 1 embedded, 8 with CLICKHOUSE_URL). */
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
const SECRET_VARIABLES = new Set(['JWT_SECRET', 'ADMIN_PASSWORD', 'METRICS_TOKEN']);
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
