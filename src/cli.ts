import { Command, Option } from 'commander';
import { pino } from 'pino';
import { issuePersonalToken } from './auth/service.js';
import { listApiTokens, revokeApiToken } from './auth/store.js';
import { ConfigError, loadConfig, type Config } from '../core/config.js';
import { findDomainByName, insertDomain } from './domains/store.js';
import { domainNameField } from './domains/schemas.js';
import { createLogger, type Logger } from '../core/log.js';
import type { Runtime } from './runtime.js';
import { stopOnSignals } from './shutdown.js';
import { loadIngestConfig } from '../ingest/config.js';
import { importOptionsSchema, importProgress, importReport } from './cli-import.js';
import { createUserRecord } from './users/service.js';
import { emailField, passwordField } from './users/schemas.js';
import { findUserByEmail } from './users/store.js';
import type { z } from 'zod';

// The stores (chDB, PGlite) and what uses them load only when a command needs them: `--help` and
// option errors answer at once, and no command pays for another's modules.
const runtimeModule = () => import('./runtime.js');

/** Fails with one clear line, the way every CLI error should read. */
class CliError extends Error {}

function parseWith<T extends z.ZodTypeAny>(schema: T, value: unknown, what: string): z.output<T> {
  const result = schema.safeParse(value);
  if (!result.success) throw new CliError(`${what} ${result.error.issues[0]?.message ?? 'is invalid'}`);
  return result.data;
}

/** `serve` logs to stdout; commands other than serve print their results there, so their log goes to stderr. */
const toStderr = () => pino.destination({ dest: 2, sync: true });

function setup(logTo?: pino.DestinationStream): { config: Config; log: Logger } {
  const config = loadConfig();
  return { config, log: createLogger(config.logLevel, logTo) };
}

async function withRuntime(work: (runtime: Runtime) => Promise<void>): Promise<void> {
  const config = loadConfig();
  const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, toStderr());
  const { openRuntime } = await runtimeModule();
  const runtime = await openRuntime(config, log, (line) => process.stderr.write(`${line}\n`));
  try {
    await work(runtime);
  } finally {
    await runtime.close();
  }
}

async function userByEmail(runtime: Runtime, email: string) {
  const user = await findUserByEmail(runtime.db, parseWith(emailField, email, '--user'));
  if (!user) throw new CliError(`no user has the e-mail ${email}`);
  return user;
}

const program = new Command('tailhouse').description('nginx log analytics for hosting providers').showHelpAfterError();

program
  .command('serve')
  .description('serve the API')
  .action(async () => {
    const { config, log } = setup();
    const { runServer } = await import('./server.js');
    await runServer(config, log);
  });

program
  .command('migrate')
  .description('apply pending Postgres and ClickHouse migrations, then exit')
  .action(async () => {
    const { config, log } = setup(toStderr());
    // Through openStores, so an embedded DATA_DIR in use by a running `serve` is refused.
    const { openStores } = await runtimeModule();
    const stores = await openStores(config, log);
    try {
      process.stdout.write(`applied ${stores.applied.postgres} Postgres and ${stores.applied.clickhouse} ClickHouse migrations\n`);
      // Rows stored before their user agent's class was (sql/clickhouse/008), classified now.
      const { startUserAgentBackfill } = await import('../ingest/user-agent-backfill.js');
      const classified = await startUserAgentBackfill({ db: stores.db, clickhouse: stores.clickhouse, log }).done;
      if (classified.rows > 0) process.stdout.write(`classified the user agents of ${classified.rows} earlier access rows\n`);
      if (!classified.complete) process.stdout.write('another process is classifying the user agents of earlier access rows\n');
    } finally {
      await stores.close();
    }
  });

program
  .command('ingest')
  .description('the ingest worker: follow the files and syslog inputs of an ingest config into ClickHouse (CONTRACT §6)')
  .requiredOption('--config <file>', 'the ingest config (YAML)')
  .action(async (opts: { config: string }) => {
    const { config, log } = setup();
    const ingestConfig = await loadIngestConfig(opts.config);
    const [{ openStores }, { startIngest }] = await Promise.all([runtimeModule(), import('../ingest/worker.js')]);
    const stores = await openStores(config, log);
    try {
      const worker = await startIngest(ingestConfig, { db: stores.db, clickhouse: stores.clickhouse, log, dataDir: config.dataDir, statsIntervalMs: config.ingestStatsIntervalMs });
      stopOnSignals(log, async () => {
        await worker.close();
        await stores.close();
      });
    } catch (err) {
      await stores.close();
      throw err;
    }
  });

program
  .command('import')
  .description('backfill finished log files (rotated, archived, .gz) into ClickHouse; running it again adds nothing twice')
  .argument('<files...>', 'log files, plain or gzip-compressed')
  .option('--domain <name>', 'the registered domain of the lines (default: each access line\'s $host)')
  .addOption(new Option('--type <type>', 'what the files hold').choices(['access', 'error']).default('access'))
  .option('--format <format>', 'access logs: combined, main or the nginx log_format string', 'combined')
  .option('--timezone <zone>', 'error logs: the IANA zone of their times', 'UTC')
  .action(async (files: string[], opts: { domain?: string; type: 'access' | 'error'; format: string; timezone: string }) => {
    const options = parseWith(importOptionsSchema, opts, 'import:');
    const { config, log } = setup(toStderr());
    const [{ openStores }, { ImportError, importFiles }] = await Promise.all([runtimeModule(), import('../ingest/import.js')]);
    const stores = await openStores(config, log);
    const abort = new AbortController();
    process.once('SIGINT', () => abort.abort());
    process.once('SIGTERM', () => abort.abort());
    const progress = await importProgress(files);
    try {
      const summary = await importFiles(files, options, { db: stores.db, clickhouse: stores.clickhouse, log, dataDir: config.dataDir, signal: abort.signal, retentionDays: config.logRetentionDays, onProgress: progress.update });
      progress.stop();
      process.stdout.write(importReport(summary));
      if (summary.interrupted) process.exitCode = 130;
    } catch (err) {
      progress.stop();
      if (err instanceof ImportError) throw new CliError(err.message);
      throw err;
    } finally {
      await stores.close();
    }
  });

const users = program.command('users').description('manage users');
users
  .command('create')
  .description('create a user')
  .requiredOption('--email <email>', 'e-mail address (the login)')
  .option('--password <password>', 'password, 8-128 characters (default: read TAILHOUSE_PASSWORD)')
  .option('--name <name>', 'display name', '')
  .addOption(new Option('--role <role>', 'role').choices(['admin', 'user']).default('user'))
  .action(async (opts: { email: string; password?: string; name: string; role: 'admin' | 'user' }) => {
    const password = parseWith(passwordField, opts.password ?? process.env.TAILHOUSE_PASSWORD, '--password');
    const email = parseWith(emailField, opts.email, '--email');
    await withRuntime(async (runtime) => {
      const user = await createUserRecord(runtime.db, { email, password, name: opts.name, role: opts.role, active: true });
      process.stdout.write(`created user ${user.id} ${user.email} (${user.role})\n`);
    });
  });

const domains = program.command('domains').description('manage domains');
domains
  .command('add')
  .description('register a domain')
  .argument('<name>', 'host name, e.g. shop.example.com')
  .option('--owner <email>', 'e-mail of the owning user (default: no owner, visible to admins only)')
  .action(async (name: string, opts: { owner?: string }) => {
    const domainName = parseWith(domainNameField, name, 'domain name');
    await withRuntime(async (runtime) => {
      const owner = opts.owner ? await userByEmail(runtime, opts.owner) : undefined;
      if (await findDomainByName(runtime.db, domainName)) throw new CliError(`domain ${domainName} already exists`);
      const domain = await insertDomain(runtime.db, { name: domainName, ownerId: owner?.id ?? null });
      process.stdout.write(`added domain ${domain.id} ${domain.name}${owner ? ` owned by ${owner.email}` : ''}\n`);
    });
  });

const tokens = program.command('tokens').description('manage personal access tokens (thk_…) for machines');
tokens
  .command('create')
  .description('create a token acting with the rights of a user; it is printed once')
  .requiredOption('--user <email>', 'e-mail of the user the token acts for')
  .requiredOption('--name <name>', 'what the token is for')
  .action(async (opts: { user: string; name: string }) => {
    await withRuntime(async (runtime) => {
      const user = await userByEmail(runtime, opts.user);
      const { row, token } = await issuePersonalToken(runtime.db, user.id, opts.name);
      process.stderr.write(`created token ${row.id} "${row.name}" for ${user.email}; it is shown once:\n`);
      process.stdout.write(`${token}\n`);
    });
  });
tokens
  .command('list')
  .description("list a user's tokens")
  .requiredOption('--user <email>', 'e-mail of the user')
  .action(async (opts: { user: string }) => {
    await withRuntime(async (runtime) => {
      const user = await userByEmail(runtime, opts.user);
      for (const t of await listApiTokens(runtime.db, user.id)) {
        const state = t.revoked_at ? `revoked ${new Date(t.revoked_at).toISOString()}` : 'active';
        const used = t.last_used_at ? new Date(t.last_used_at).toISOString() : 'never';
        process.stdout.write(`${t.id}\t${t.name}\t${state}\tlast used ${used}\n`);
      }
    });
  });
tokens
  .command('revoke')
  .description('revoke a token by id')
  .argument('<id>', 'token id from `tokens list`')
  .action(async (id: string) => {
    const tokenId = Number(id);
    if (!Number.isSafeInteger(tokenId) || tokenId <= 0) throw new CliError('token id must be a positive whole number');
    await withRuntime(async (runtime) => {
      if (!(await revokeApiToken(runtime.db, tokenId))) throw new CliError(`no active token has id ${tokenId}`);
      process.stdout.write(`revoked token ${tokenId}\n`);
    });
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof ConfigError) {
    for (const problem of err.problems) process.stderr.write(`tailhouse: ${problem}\n`);
  } else if (err instanceof CliError) {
    process.stderr.write(`tailhouse: ${err.message}\n`);
  } else {
    process.stderr.write(`tailhouse: ${(err as Error).message ?? String(err)}\n`);
  }
  process.exit(1);
});
