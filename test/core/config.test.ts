import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig } from '../../core/config.js';
import { parseIsoDate } from '../../src/http/query.js';

const SECRET_32 = 'x'.repeat(32);

/** The ConfigError that loading `env` throws (fails the test when it loads). */
function problemsOf(env: Record<string, string | undefined>): string[] {
  try {
    loadConfig(env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error(`loadConfig accepted ${JSON.stringify(env)}`);
}

describe('loadConfig defaults', () => {
  it('gives the documented defaults for an empty environment', () => {
    const config = loadConfig({});
    expect(config).toEqual({
      port: 3000,
      host: '0.0.0.0',
      baseUrl: 'http://localhost:3000',
      dataDir: path.resolve('./data'),
      databaseUrl: undefined,
      clickhouseUrl: undefined,
      jwtSecret: undefined,
      smtpUrl: undefined,
      mailFrom: 'tailhouse <tailhouse@localhost>',
      ingestConfig: undefined,
      ingestStatsIntervalMs: 60_000,
      ingestBatchMs: 1_000,
      ingestStaleS: 3_600,
      alertIntervalS: 30,
      alertGroupWaitS: 30,
      alertRepeatS: 14_400,
      exportTtlS: 86400,
      logRetentionDays: 90,
      statsRollupMinRows: 32,
      readTimeoutS: 30,
      readMaxMemoryMb: 2048,
      readsPerUser: 2,
      readsInFlight: undefined,
      queryCacheMb: 64,
      tailPerUser: 5,
      webhookAllowNetworks: [],
      trustProxy: false,
      adminEmail: 'admin@localhost',
      adminPassword: undefined,
      logLevel: 'info',
      metrics: false,
      metricsToken: undefined,
      metricsListen: undefined,
    });
  });

  it('derives BASE_URL from PORT and drops trailing slashes of an explicit one', () => {
    expect(loadConfig({ PORT: '8080' }).baseUrl).toBe('http://localhost:8080');
    expect(loadConfig({ PORT: '8080', BASE_URL: 'https://logs.example.com/' }).baseUrl).toBe('https://logs.example.com');
    expect(loadConfig({ BASE_URL: 'https://logs.example.com/tailhouse//' }).baseUrl).toBe('https://logs.example.com/tailhouse');
  });

  it('treats an empty variable as unset', () => {
    const config = loadConfig({ PORT: '', TRUST_PROXY: '', ALERT_INTERVAL_S: '', DATABASE_URL: '', JWT_SECRET: '' });
    expect(config.port).toBe(3000);
    expect(config.trustProxy).toBe(false);
    expect(config.alertIntervalS).toBe(30);
    expect(config.databaseUrl).toBeUndefined();
  });

  it('reads numbers, booleans and strings', () => {
    const config = loadConfig({
      PORT: '8443',
      HOST: '127.0.0.1',
      DATA_DIR: '/var/lib/tailhouse',
      ALERT_INTERVAL_S: '5',
      EXPORT_TTL_S: '600',
      LOG_RETENTION_DAYS: '7',
      TRUST_PROXY: 'true',
      ADMIN_EMAIL: '  Ops@Example.COM ',
      ADMIN_PASSWORD: 'long-enough-password',
      LOG_LEVEL: 'warn',
      INGEST_BATCH_MS: '250',
      INGEST_STALE_S: '900',
      TAIL_PER_USER: '2',
      READ_TIMEOUT_S: '10',
      READ_MAX_MEMORY_MB: '512',
      READS_PER_USER: '1',
      READS_IN_FLIGHT: '4',
      WEBHOOK_ALLOW_NETWORKS: '10.20.0.0/16, fd00:1::/64',
    });
    expect(config).toMatchObject({
      port: 8443,
      host: '127.0.0.1',
      dataDir: '/var/lib/tailhouse',
      alertIntervalS: 5,
      exportTtlS: 600,
      logRetentionDays: 7,
      trustProxy: true,
      adminEmail: 'ops@example.com',
      adminPassword: 'long-enough-password',
      logLevel: 'warn',
      ingestBatchMs: 250,
      ingestStaleS: 900,
      tailPerUser: 2,
      readTimeoutS: 10,
      readMaxMemoryMb: 512,
      readsPerUser: 1,
      readsInFlight: 4,
      webhookAllowNetworks: ['10.20.0.0/16', 'fd00:1::/64'],
    });
  });

  it.each([
    ['true', true],
    ['1', true],
    ['yes', true],
    ['false', false],
    ['0', false],
    ['no', false],
  ])('TRUST_PROXY=%s is %s', (value, expected) => {
    expect(loadConfig({ TRUST_PROXY: value }).trustProxy).toBe(expected);
  });

  it('accepts server mode with a JWT_SECRET of 32 bytes', () => {
    const config = loadConfig({ DATABASE_URL: 'postgres://tailhouse@db:5432/tailhouse', CLICKHOUSE_URL: 'http://default@ch:8123/tailhouse', JWT_SECRET: SECRET_32 });
    expect(config.databaseUrl).toBe('postgres://tailhouse@db:5432/tailhouse');
    expect(config.clickhouseUrl).toBe('http://default@ch:8123/tailhouse');
    expect(config.jwtSecret).toBe(SECRET_32);
    expect(loadConfig({ DATABASE_URL: 'postgresql://db/tailhouse', JWT_SECRET: SECRET_32 }).databaseUrl).toBe('postgresql://db/tailhouse');
  });
});

describe('loadConfig errors: one line naming the variable', () => {
  it.each([
    ['PORT', 'abc'],
    ['PORT', '70000'],
    ['PORT', '-1'],
    ['PORT', '80.5'],
    ['BASE_URL', 'ftp://example.com'],
    ['BASE_URL', 'not a url'],
    ['DATABASE_URL', 'mysql://x'],
    ['CLICKHOUSE_URL', 'tcp://ch:9000'],
    ['JWT_SECRET', 'x'.repeat(31)],
    ['SMTP_URL', 'http://mail:25'],
    ['TRUST_PROXY', 'maybe'],
    ['ALERT_INTERVAL_S', '0'],
    ['ALERT_INTERVAL_S', '-5'],
    ['ALERT_INTERVAL_S', '1.5'],
    ['ALERT_INTERVAL_S', 'soon'],
    ['EXPORT_TTL_S', '0'],
    ['LOG_RETENTION_DAYS', 'forever'],
    ['ADMIN_EMAIL', 'not-an-email'],
    ['ADMIN_PASSWORD', 'short'],
    ['ADMIN_PASSWORD', 'p'.repeat(129)],
    ['LOG_LEVEL', 'loud'],
    ['INGEST_BATCH_MS', '10001'],
    ['INGEST_BATCH_MS', '-1'],
    ['INGEST_STALE_S', '0'],
    ['INGEST_STALE_S', '1h'],
    ['INGEST_BATCH_MS', '0.5'],
    ['TAIL_PER_USER', '0'],
    ['TAIL_PER_USER', '1.5'],
    ['TAIL_PER_USER', 'many'],
    ['READ_TIMEOUT_S', '0'],
    ['READ_MAX_MEMORY_MB', '1.5'],
    ['READS_PER_USER', 'two'],
    ['READS_IN_FLIGHT', '-1'],
    ['WEBHOOK_ALLOW_NETWORKS', '10.0.0.0/8,intranet'],
    ['WEBHOOK_ALLOW_NETWORKS', '10.0.0.0/33'],
  ])('%s=%s', (name, value) => {
    const problems = problemsOf({ [name]: value });
    expect(problems).toHaveLength(1);
    const [line] = problems;
    expect(line).not.toContain('\n');
    expect(line).toMatch(new RegExp(`\\b${name}\\b`));
    // Only that variable is named.
    for (const other of ['PORT', 'DATABASE_URL', 'JWT_SECRET', 'TRUST_PROXY', 'ALERT_INTERVAL_S', 'ADMIN_EMAIL']) {
      if (other !== name) expect(line).not.toMatch(new RegExp(`\\b${other}\\b`));
    }
  });

  it('the error message of a ConfigError is its lines', () => {
    try {
      loadConfig({ PORT: 'abc' });
      expect.unreachable();
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigError);
      expect((err as ConfigError).message).toBe((err as ConfigError).problems.join('\n'));
      expect((err as ConfigError).message).toContain('PORT');
    }
  });

  it('gives one line per bad variable when several are bad', () => {
    const problems = problemsOf({ PORT: 'abc', TRUST_PROXY: 'maybe', ALERT_INTERVAL_S: '0', HOST: '127.0.0.1' });
    expect(problems).toHaveLength(3);
    expect(problems.filter((p) => /\bPORT\b/.test(p))).toHaveLength(1);
    expect(problems.filter((p) => /\bTRUST_PROXY\b/.test(p))).toHaveLength(1);
    expect(problems.filter((p) => /\bALERT_INTERVAL_S\b/.test(p))).toHaveLength(1);
  });

  it('requires JWT_SECRET when DATABASE_URL is set', () => {
    const problems = problemsOf({ DATABASE_URL: 'postgres://tailhouse@db/tailhouse' });
    expect(problems).toHaveLength(1);
    expect(problems[0]).toMatch(/\bJWT_SECRET\b/);
    expect(problems[0]).toMatch(/\bDATABASE_URL\b/);
  });

  it('never repeats a secret in the error line', () => {
    const [jwt] = problemsOf({ JWT_SECRET: 'hunter2-is-my-secret' });
    expect(jwt).toMatch(/\bJWT_SECRET\b/);
    expect(jwt).not.toContain('hunter2');
    const [admin] = problemsOf({ ADMIN_PASSWORD: 'hunter2' });
    expect(admin).toMatch(/\bADMIN_PASSWORD\b/);
    expect(admin).not.toContain('hunter2');
    const [db] = problemsOf({ DATABASE_URL: 'mysql://app:hunter2@db:3306/app' });
    expect(db).toMatch(/\bDATABASE_URL\b/);
    expect(db).not.toContain('hunter2');
    expect(db).toContain('mysql://***@db:3306/app');
    const [smtp] = problemsOf({ SMTP_URL: 'http://mailer:hunter2@mail:587' });
    expect(smtp).toMatch(/\bSMTP_URL\b/);
    expect(smtp).not.toContain('hunter2');
  });

  it('still shows a harmless bad value, to help the operator', () => {
    expect(problemsOf({ PORT: 'abc' })[0]).toContain('abc');
    expect(problemsOf({ TRUST_PROXY: 'maybe' })[0]).toContain('maybe');
  });
});

describe('parseIsoDate', () => {
  const iso = (text: string, endOfDay = false) => parseIsoDate(text, endOfDay)?.toISOString() ?? null;

  it('a date alone is the start of that day, or its last millisecond as an end', () => {
    expect(iso('2026-11-21')).toBe('2026-11-21T00:00:00.000Z');
    expect(iso('2026-11-21', true)).toBe('2026-11-21T23:59:59.999Z');
    expect(iso('2024-02-29', true)).toBe('2024-02-29T23:59:59.999Z');
    expect(iso('2026-12-31', true)).toBe('2026-12-31T23:59:59.999Z');
  });

  it('endOfDay does not move a time that was given', () => {
    expect(iso('2026-11-21T08:15', true)).toBe('2026-11-21T08:15:00.000Z');
    expect(iso('2026-11-21T00:00:00Z', true)).toBe('2026-11-21T00:00:00.000Z');
  });

  it.each([
    ['2026-11-21T08:15', '2026-11-21T08:15:00.000Z'],
    ['2026-11-21T08:15Z', '2026-11-21T08:15:00.000Z'],
    ['2026-11-21T08:15:30', '2026-11-21T08:15:30.000Z'],
    ['2026-11-21T08:15:30Z', '2026-11-21T08:15:30.000Z'],
    ['2026-11-21t08:15:30z', '2026-11-21T08:15:30.000Z'],
    ['2026-11-21 08:15:30', '2026-11-21T08:15:30.000Z'],
    ['2026-11-21T08:15:30.1Z', '2026-11-21T08:15:30.100Z'],
    ['2026-11-21T08:15:30.12Z', '2026-11-21T08:15:30.120Z'],
    ['2026-11-21T08:15:30.123Z', '2026-11-21T08:15:30.123Z'],
    ['2026-11-21T08:15:30.123456Z', '2026-11-21T08:15:30.123Z'],
    ['2026-11-21T08:15:30.999999999Z', '2026-11-21T08:15:30.999Z'],
    ['2026-11-21T08:15:30,5Z', '2026-11-21T08:15:30.500Z'],
    ['2026-11-21T08:15:30+02:00', '2026-11-21T06:15:30.000Z'],
    ['2026-11-21T08:15:30+0200', '2026-11-21T06:15:30.000Z'],
    ['2026-11-21T08:15:30+02', '2026-11-21T06:15:30.000Z'],
    ['2026-11-21T08:15:30-0530', '2026-11-21T13:45:30.000Z'],
    ['2026-11-21T08:15:30-05:30', '2026-11-21T13:45:30.000Z'],
    ['2026-11-21T08:15:30.250+05:45', '2026-11-21T02:30:30.250Z'],
    ['2026-11-21T00:30:00+01:00', '2026-11-20T23:30:00.000Z'],
    ['2026-12-31T23:30:00-01:00', '2027-01-01T00:30:00.000Z'],
    ['2026-11-21T08:15:30+00:00', '2026-11-21T08:15:30.000Z'],
    ['2026-11-21T08:15:30-00:00', '2026-11-21T08:15:30.000Z'],
    ['  2026-11-21T08:15:30Z  ', '2026-11-21T08:15:30.000Z'],
    ['2024-02-29T12:00:00Z', '2024-02-29T12:00:00.000Z'],
    ['2026-11-21T23:59:59.999Z', '2026-11-21T23:59:59.999Z'],
  ])('%s -> %s', (text, expected) => {
    expect(iso(text)).toBe(expected);
  });

  it.each([
    '2026-02-30',
    '2026-02-29',
    '2026-13-01',
    '2026-00-10',
    '2026-11-00',
    '2026-11-31',
    '2026-04-31T10:00:00Z',
    '2026-11-21T24:00',
    '2026-11-21T23:60',
    '2026-11-21T23:59:60Z',
    '2026-11-21T08:15:30+24:00',
    '2026-11-21T08:15:30+02:60',
    '0050-01-01',
    '2026-11-21T8:15',
    '2026-11-21T08',
    '2026-11-21T08:15:30.Z',
    '2026-11-21T08:15:30ZZ',
    '2026-11-21T08:15:30 UTC',
    '21/11/2026',
    '11/21/2026',
    '2026/11/21',
    '26-11-21',
    'yesterday',
    'now',
    '1732176930',
    '',
    '   ',
    "2026-11-21' or 1=1 --",
    '2026-11-21T08:15:30Z\n2026-11-22',
  ])('%j is not a date', (text) => {
    expect(parseIsoDate(text)).toBeNull();
    expect(parseIsoDate(text, true)).toBeNull();
  });
});
