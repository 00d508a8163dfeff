/** `tailhouse users …`: the accounts, from the shell, with administrator rights (the machine's operator). */
import { randomBytes } from 'node:crypto';
import { Option, type Command } from 'commander';
import { z } from 'zod';
import type { ClientInfo } from '../../activity/store.js';
import type { Db } from '../../../core/db/postgres.js';
import { emailField, passwordField } from '../../users/schemas.js';
import { applyUserPatch, createUserRecord, removeUser, replacePassword } from '../../users/service.js';
import { findUserByEmail, findUserById, listUsers, readPermissions, toUser, type UserPatch, type UserRow } from '../../users/store.js';
import { CliError, confirmOr, everyPage, parseWith, type CommandHost } from '../host.js';
import { formatJson, formatTable, timeOrNever } from '../table.js';

/** A user named on the command line by e-mail address or id. */
export async function findUser(db: Db, given: string): Promise<UserRow> {
  const user = /^\d+$/.test(given) ? await findUserById(db, Number(given)) : await findUserByEmail(db, parseWith(emailField, given, 'user'));
  if (!user) throw new CliError(`no user has the ${/^\d+$/.test(given) ? 'id' : 'e-mail'} ${given}`);
  return user;
}

/** Who acted, in the activity of a change made from the shell. */
export const CLI_CLIENT: ClientInfo = { ipAddress: 'command line', userAgent: 'tailhouse cli' };

/** `--as`: the active administrator in whose activity a change from the shell is recorded. */
export async function actingAdmin(db: Db, given: string): Promise<UserRow> {
  const user = await findUser(db, given);
  if (user.role !== 'admin' || !user.active) throw new CliError(`--as ${user.email} is not an active administrator`);
  return user;
}

/** The `--as` option of a change (`what`: the grant, the revocation, …) recorded in an administrator's activity. */
export const asAdminOption = (what: string) =>
  new Option('--as <admin>', `e-mail or id of the active administrator in whose activity the ${what} is recorded (default: none, the server's log only)`);

const roleOption = () => new Option('--role <role>', 'role').choices(['admin', 'user']);
const yesNo = z.enum(['true', 'false', 'yes', 'no'], { message: 'must be true or false' }).transform((v) => v === 'true' || v === 'yes');

/** A password from the option, else TAILHOUSE_PASSWORD, else a generated one (then `generated` is true: it is shown once). */
function passwordOf(host: CommandHost, given: string | undefined, orGenerate: boolean): { password: string; generated: boolean } {
  const supplied = given ?? host.env.TAILHOUSE_PASSWORD;
  if (supplied === undefined && orGenerate) return { password: randomBytes(12).toString('base64url'), generated: true };
  return { password: parseWith(passwordField, supplied, '--password'), generated: false };
}

export function registerUserCommands(program: Command, host: CommandHost): void {
  const users = program.command('users').description('manage users (with administrator rights)');
  users
    .command('create')
    .description('create a user')
    .requiredOption('--email <email>', 'e-mail address (the login)')
    .option('--password <password>', 'password, 8-128 characters (default: read TAILHOUSE_PASSWORD)')
    .option('--name <name>', 'display name', '')
    .addOption(roleOption().default('user'))
    .action(async (opts: { email: string; password?: string; name: string; role: 'admin' | 'user' }) => {
      const { password } = passwordOf(host, opts.password, false);
      const email = parseWith(emailField, opts.email, '--email');
      await host.withRuntime(async (runtime) => {
        const user = await createUserRecord(runtime.db, { email, password, name: opts.name, role: opts.role, active: true });
        host.out(`created user ${user.id} ${user.email} (${user.role})\n`);
      });
    });

  users
    .command('list')
    .description('list users, by id')
    .option('--search <text>', 'only names or e-mail addresses containing this')
    .addOption(roleOption())
    .option('--json', 'print JSON')
    .action(async (opts: { search?: string; role?: 'admin' | 'user'; json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const found = await everyPage(async (page) => {
          const { users, total } = await listUsers(runtime.db, { ...page, search: opts.search, role: opts.role });
          return [users, total];
        });
        if (opts.json) return host.out(formatJson(found));
        host.out(formatTable(['ID', 'E-MAIL', 'NAME', 'ROLE', 'STATE', 'LAST LOGIN'], found.map((u) => [u.id, u.email, u.name, u.role, u.active ? 'active' : 'inactive', timeOrNever(u.lastLoginAt)])));
      });
    });

  users
    .command('show')
    .description('show a user and their permissions')
    .argument('<user>', 'e-mail address or id')
    .option('--json', 'print JSON')
    .action(async (given: string, opts: { json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const row = await findUser(runtime.db, given);
        const user = toUser(row);
        // An administrator holds every permission whatever the table says (users/permissions.ts).
        const granted = row.role === 'admin' ? 'all' : await readPermissions(runtime.db, row.id);
        if (opts.json) return host.out(formatJson({ ...user, permissions: granted }));
        const permissions = granted === 'all' ? 'all (administrator)' : granted.map((p) => `${p.resource}: ${p.actions.join(', ')}`).join('; ') || 'none';
        host.out(
          formatTable(
            ['FIELD', 'VALUE'],
            [
              ['id', user.id],
              ['e-mail', user.email],
              ['name', user.name],
              ['role', user.role],
              ['state', user.active ? 'active' : 'inactive'],
              ['permissions', permissions],
              ['last login', timeOrNever(user.lastLoginAt)],
              ['created', user.createdAt],
            ],
          ),
        );
      });
    });

  users
    .command('update')
    .description("change a user's name, e-mail, role or state (a new role or deactivation ends their sessions)")
    .argument('<user>', 'e-mail address or id')
    .option('--name <name>', 'display name')
    .option('--email <email>', 'new e-mail address')
    .addOption(roleOption())
    .option('--active <bool>', 'true or false')
    .action(async (given: string, opts: { name?: string; email?: string; role?: 'admin' | 'user'; active?: string }) => {
      const patch: UserPatch = {
        name: opts.name,
        email: opts.email === undefined ? undefined : parseWith(emailField, opts.email, '--email'),
        role: opts.role,
        active: opts.active === undefined ? undefined : parseWith(yesNo, opts.active, '--active'),
      };
      if (Object.values(patch).every((v) => v === undefined)) throw new CliError('nothing to change: give --name, --email, --role or --active');
      await updateFromShell(host, given, patch);
    });

  users
    .command('deactivate')
    .description('stop a user from signing in and end their sessions (their data stays)')
    .argument('<user>', 'e-mail address or id')
    .action(async (given: string) => updateFromShell(host, given, { active: false }));

  users
    .command('delete')
    .description('delete a user and their tokens, permissions and activity; their domains stay, without owner')
    .argument('<user>', 'e-mail address or id')
    .option('--yes', 'do not ask for confirmation')
    .action(async (given: string, opts: { yes?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const target = await findUser(runtime.db, given);
        await confirmOr(host, opts.yes, `Delete user ${target.id} ${target.email}?`, 'not deleted');
        await runtime.db.transaction((tx) => removeUser(tx, target));
        runtime.log.info({ userId: target.id, via: 'cli' }, 'user deleted');
        host.out(`deleted user ${target.id} ${target.email}\n`);
      });
    });

  users
    .command('reset-password')
    .description("set a user's password and end their sessions (without --password or TAILHOUSE_PASSWORD: a generated one, shown once)")
    .argument('<user>', 'e-mail address or id')
    .option('--password <password>', 'the new password, 8-128 characters')
    .action(async (given: string, opts: { password?: string }) => {
      const { password, generated } = passwordOf(host, opts.password, true);
      await host.withRuntime(async (runtime) => {
        const target = await findUser(runtime.db, given);
        await replacePassword(runtime.db, target.id, password);
        runtime.log.info({ userId: target.id, via: 'cli' }, 'password reset');
        if (generated) {
          host.err(`set a new password for ${target.email}; it is shown once:\n`);
          host.out(`${password}\n`);
        } else {
          host.out(`set a new password for ${target.email}; their sessions ended\n`);
        }
      });
    });
}

async function updateFromShell(host: CommandHost, given: string, patch: UserPatch): Promise<void> {
  await host.withRuntime(async (runtime) => {
    const { updated, changed } = await runtime.db.transaction(async (tx) => applyUserPatch(tx, await findUser(tx, given), patch));
    runtime.log.info({ userId: updated.id, changed, via: 'cli' }, 'user updated');
    host.out(changed.length ? `updated user ${updated.id} ${updated.email}: ${changed.join(', ')}\n` : `user ${updated.id} ${updated.email} unchanged\n`);
  });
}
