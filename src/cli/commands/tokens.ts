/** `tailhouse tokens …`: personal access tokens (thk_…) for machines. */
import type { Command } from 'commander';
import { issuePersonalToken } from '../../auth/service.js';
import { listApiTokens, revokeApiToken } from '../../auth/store.js';
import { CliError, type CommandHost } from '../host.js';
import { timeOrNever } from '../table.js';
import { findUser } from './users.js';

export function registerTokenCommands(program: Command, host: CommandHost): void {
  const tokens = program.command('tokens').description('manage personal access tokens (thk_…) for machines');
  tokens
    .command('create')
    .description('create a token acting with the rights of a user; it is printed once')
    .requiredOption('--user <user>', 'e-mail or id of the user the token acts for')
    .requiredOption('--name <name>', 'what the token is for')
    .action(async (opts: { user: string; name: string }) => {
      await host.withRuntime(async (runtime) => {
        const user = await findUser(runtime.db, opts.user);
        const { row, token } = await issuePersonalToken(runtime.db, user.id, opts.name);
        host.err(`created token ${row.id} "${row.name}" for ${user.email}; it is shown once:\n`);
        host.out(`${token}\n`);
      });
    });
  tokens
    .command('list')
    .description("list a user's tokens")
    .requiredOption('--user <user>', 'e-mail or id of the user')
    .action(async (opts: { user: string }) => {
      await host.withRuntime(async (runtime) => {
        const user = await findUser(runtime.db, opts.user);
        // Tab-separated, one token a line: what scripts have read since the first release.
        for (const t of await listApiTokens(runtime.db, user.id)) {
          host.out(`${t.id}\t${t.name}\t${t.revoked_at ? `revoked ${timeOrNever(t.revoked_at)}` : 'active'}\tlast used ${timeOrNever(t.last_used_at)}\n`);
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
      await host.withRuntime(async (runtime) => {
        if (!(await revokeApiToken(runtime.db, tokenId))) throw new CliError(`no active token has id ${tokenId}`);
        host.out(`revoked token ${tokenId}\n`);
      });
    });
}
