/**
 * The command line: one program, run on a host (host.ts). The entry (src/cli.ts) adds the commands
 * that are a process of their own (commands/process.ts: serve, migrate, the ingest worker); a
 * running server offers the others through its control socket.
 */
import { Command, CommanderError } from 'commander';
import { ConfigError } from '../../core/config.js';
import { ApiError } from '../http/errors.js';
import { registerAlertCommands } from './commands/alerts.js';
import { registerDomainCommands } from './commands/domains.js';
import { registerGroupCommands } from './commands/groups.js';
import { registerImportCommand } from './commands/import.js';
import { registerIngestValidateCommand } from './commands/ingest-validate.js';
import { registerStatsCommand } from './commands/stats.js';
import { registerTokenCommands } from './commands/tokens.js';
import { registerUserCommands } from './commands/users.js';
import { CliError, type CommandHost } from './host.js';

/** The first words of the commands a running server takes through its control socket. */
export function runsBesideServer(argv: readonly string[]): boolean {
  const [first, second] = argv;
  if (first === 'ingest') return second === 'validate';
  return ['users', 'domains', 'groups', 'tokens', 'import', 'stats', 'alerts', 'silence'].includes(first ?? '');
}

/** Adds commands to the program; `ingest` is the ingest command, whose `validate` every program has. */
export type CommandSet = (program: Command, host: CommandHost, ingest: Command) => void;

export function buildProgram(host: CommandHost, more?: CommandSet): Command {
  const program = new Command('tailhouse')
    .description('nginx log analytics for hosting providers')
    // Set before the commands are added, which inherit them: output and exits go through the host.
    .configureOutput({ writeOut: (text) => host.out(text), writeErr: (text) => host.err(text), outputError: (text, write) => write(text) })
    .exitOverride()
    .showHelpAfterError()
    // `ingest --config F` (the worker) and `ingest validate --config F` each take their own --config.
    .enablePositionalOptions();
  const ingest = program.command('ingest');
  more?.(program, host, ingest);
  registerIngestValidateCommand(ingest, host);
  registerImportCommand(program, host);
  registerUserCommands(program, host);
  registerDomainCommands(program, host);
  registerGroupCommands(program, host);
  registerTokenCommands(program, host);
  registerStatsCommand(program, host);
  registerAlertCommands(program, host);
  return program;
}

/**
 * Runs one command line on `host`; resolves with its exit status, errors written as one line each.
 * `onCommand` hears the command's name (e.g. "users create") once it is known, without its arguments.
 */
export async function runCommand(argv: readonly string[], host: CommandHost, more?: CommandSet, onCommand?: (name: string) => void): Promise<number> {
  try {
    const program = buildProgram(host, more);
    program.hook('preAction', (_, action) => {
      const names: string[] = [];
      for (let c: Command | null = action; c && c !== program; c = c.parent) names.unshift(c.name());
      onCommand?.(names.join(' '));
    });
    await program.parseAsync([...argv], { from: 'user' });
    return host.exitCode;
  } catch (err) {
    // Commander has written its own message (or the help) already.
    if (err instanceof CommanderError) return err.exitCode;
    for (const line of errorLines(err)) host.err(`tailhouse: ${line}\n`);
    return 1;
  }
}

function errorLines(err: unknown): string[] {
  if (err instanceof ConfigError) return err.problems;
  if (err instanceof ApiError) {
    const details = Object.entries(err.details ?? {}).map(([field, message]) => `${field} ${message}`);
    return [details.length ? `${err.message}: ${details.join('; ')}` : err.message];
  }
  if (err instanceof CliError) return [err.message];
  return [(err as Error).message ?? String(err)];
}
