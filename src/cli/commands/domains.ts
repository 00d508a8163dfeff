/** `tailhouse domains …`: the registered domains, from the shell, with administrator rights. */
import { Option, type Command } from 'commander';
import type { Db } from '../../../core/db/postgres.js';
import { domainNameField, MAX_BULK_NAMES } from '../../domains/schemas.js';
import { applyDomainPatch, checkDomainNames, registerDomains, removeDomain } from '../../domains/service.js';
import { findDomainByName, findVisibleDomain, insertDomain, listDomains, toDomain, type DomainRow } from '../../domains/store.js';
import { findUserById, listUsers } from '../../users/store.js';
import { grantRole, revokeRole } from '../../domains/members.js';
import { listMembers, toMember } from '../../domains/members-store.js';
import { CliError, confirmOr, everyPage, parseWith, readOperatorText, whenNotFound, type CommandHost } from '../host.js';
import { formatJson, formatTable } from '../table.js';
import { actingAdmin, asAdminOption, CLI_CLIENT, findUser } from './users.js';

/** A domain named on the command line by host name or id. */
export async function findDomain(db: Db, given: string): Promise<DomainRow> {
  const byId = /^\d+$/.test(given);
  // The operator sees every domain, as an administrator does.
  const domain = byId ? await findVisibleDomain(db, Number(given), { all: true }) : await findDomainByName(db, parseWith(domainNameField, given, 'domain name'));
  if (!domain) throw new CliError(`no domain has the ${byId ? 'id' : 'name'} ${given}`);
  return domain;
}

/** A domain's owner as shown: '-' for none, the address, or the id of a user that is gone. */
const ownerLabel = (ownerId: number | null, email: string | undefined) => (ownerId === null ? '-' : (email ?? `user ${ownerId}`));

async function ownerEmail(db: Db, ownerId: number | null): Promise<string> {
  return ownerLabel(ownerId, ownerId === null ? undefined : (await findUserById(db, ownerId))?.email);
}

/** The largest names file `domains add --from` reads: 10,000 names of 253 characters, with room for comments. */
const MAX_NAMES_FILE_BYTES = 8 * 1024 * 1024;

const count = (n: number) => n.toLocaleString('en-US');

/** The names of a names file, one a line, each with its line number; blank lines and `#` comments skipped. */
function namesOfFile(text: string): { line: number; given: string }[] {
  return text.split('\n').flatMap((given, i) => {
    const trimmed = given.trim();
    return trimmed === '' || trimmed.startsWith('#') ? [] : [{ line: i + 1, given }];
  });
}

/**
 * `domains add --from FILE`: the bulk add of the API (registerDomains), all or none. Prints a line
 * per name that is invalid, already registered or repeated (none per name created), then one summary
 * line; exits 1 when a name is invalid, which adds nothing.
 */
async function addFromFile(host: CommandHost, from: string, ownerGiven: string | undefined): Promise<void> {
  const entries = namesOfFile(await readOperatorText(host, from, MAX_NAMES_FILE_BYTES));
  const source = from === '-' ? 'standard input' : from;
  if (entries.length === 0) throw new CliError(`${source} holds no names (one a line; blank lines and # comments are skipped)`);
  if (entries.length > MAX_BULK_NAMES) throw new CliError(`${source} holds ${count(entries.length)} names; at most ${count(MAX_BULK_NAMES)} are added at once: split it`);
  const { names, invalid } = checkDomainNames(entries.map((e) => e.given));
  if (invalid.length > 0) {
    host.out(invalid.map(({ index, reason }) => `line ${entries[index]!.line}: ${JSON.stringify(entries[index]!.given.trim())} ${reason}\n`).join(''));
    host.out(`domains add: ${count(invalid.length)} invalid of ${count(entries.length)} names; nothing added: correct them and run again\n`);
    host.exitCode = 1;
    return;
  }
  await host.withRuntime(async (runtime) => {
    const owner = ownerGiven ? await findUser(runtime.db, ownerGiven) : undefined;
    const { results, counts } = await registerDomains(runtime, names, owner?.id ?? null);
    const firstLine = new Map<string, number>();
    const notes = results.flatMap((r, i) => {
      const line = entries[i]!.line;
      if (r.status === 'duplicate') return [`line ${line}: ${r.name} repeats line ${firstLine.get(r.name)}\n`];
      firstLine.set(r.name, line);
      return r.status === 'exists' ? [`line ${line}: ${r.name} already registered (domain ${r.id})\n`] : [];
    });
    runtime.log.info({ ...counts, ownerId: owner?.id ?? null, via: 'cli' }, 'domains added at once');
    host.out(notes.join(''));
    host.out(`domains add: ${count(counts.created)} created, ${count(counts.exists)} already registered, ${count(counts.duplicate)} repeated, 0 invalid\n`);
  });
}

export function registerDomainCommands(program: Command, host: CommandHost): void {
  const domains = program.command('domains').description('manage domains (with administrator rights)');
  domains
    .command('add')
    .description(`register a domain, or up to ${MAX_BULK_NAMES.toLocaleString('en-US')} at once with --from (all or none: an invalid name adds nothing)`)
    .argument('[name]', 'host name, e.g. shop.example.com')
    .option('--from <file>', 'the names in FILE, one a line (- for standard input); blank lines and # comments are skipped')
    .option('--owner <user>', 'e-mail or id of the owning user (default: no owner, visible to admins only)')
    .action(async (name: string | undefined, opts: { from?: string; owner?: string }) => {
      if ((name === undefined) === (opts.from === undefined)) throw new CliError('give either a domain name or --from FILE');
      if (opts.from !== undefined) return addFromFile(host, opts.from, opts.owner);
      const domainName = parseWith(domainNameField, name, 'domain name');
      await host.withRuntime(async (runtime) => {
        const owner = opts.owner ? await findUser(runtime.db, opts.owner) : undefined;
        if (await findDomainByName(runtime.db, domainName)) throw new CliError(`domain ${domainName} already exists`);
        const domain = await insertDomain(runtime.db, { name: domainName, ownerId: owner?.id ?? null });
        host.out(`added domain ${domain.id} ${domain.name}${owner ? ` owned by ${owner.email}` : ''}\n`);
      });
    });

  domains
    .command('list')
    .description('list domains by name')
    .option('--search <text>', 'only names containing this')
    .option('--json', 'print JSON')
    .action(async (opts: { search?: string; json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const found = await everyPage(async (page) => {
          const { domains, total } = await listDomains(runtime.db, { ...page, search: opts.search }, { all: true });
          return [domains, total];
        });
        if (opts.json) return host.out(formatJson(found));
        // The owners' addresses from one listing of the users, not a lookup per domain.
        const users = await everyPage(async (page) => {
          const { users, total } = await listUsers(runtime.db, page);
          return [users, total];
        });
        const emails = new Map(users.map((u) => [u.id, u.email]));
        host.out(formatTable(['ID', 'NAME', 'OWNER', 'CREATED'], found.map((d) => [d.id, d.name, ownerLabel(d.ownerId, emails.get(d.ownerId ?? -1)), d.createdAt])));
      });
    });

  domains
    .command('show')
    .description('show a domain')
    .argument('<domain>', 'name or id')
    .option('--json', 'print JSON')
    .action(async (given: string, opts: { json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const domain = toDomain(await findDomain(runtime.db, given));
        if (opts.json) return host.out(formatJson(domain));
        host.out(formatTable(['FIELD', 'VALUE'], [['id', domain.id], ['name', domain.name], ['owner', await ownerEmail(runtime.db, domain.ownerId)], ['created', domain.createdAt], ['updated', domain.updatedAt]]));
      });
    });

  domains
    .command('rename')
    .description('rename a domain (its logs stay; lines are matched to domains by name, so the ingest config may need the new name)')
    .argument('<domain>', 'name or id')
    .argument('<new-name>', 'the new host name')
    .action(async (given: string, newName: string) => {
      const name = parseWith(domainNameField, newName, 'new name');
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        const renamed = await applyDomainPatch(runtime, domain.id, { name });
        runtime.log.info({ domainId: domain.id, from: domain.name, to: renamed.name, via: 'cli' }, 'domain renamed');
        host.out(`renamed domain ${domain.id} ${domain.name} to ${renamed.name}\n`);
      });
    });

  domains
    .command('set-owner')
    .description('give a domain to a user, or to no one (--none: visible to admins only)')
    .argument('<domain>', 'name or id')
    .argument('[user]', 'e-mail or id of the new owner')
    .option('--none', 'no owner')
    .action(async (given: string, ownerGiven: string | undefined, opts: { none?: boolean }) => {
      if ((ownerGiven === undefined) === !opts.none) throw new CliError('give either the new owner or --none');
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        const owner = ownerGiven === undefined ? null : await findUser(runtime.db, ownerGiven);
        await applyDomainPatch(runtime, domain.id, { ownerId: owner?.id ?? null });
        runtime.log.info({ domainId: domain.id, ownerId: owner?.id ?? null, via: 'cli' }, 'domain owner set');
        host.out(owner ? `domain ${domain.name} is now owned by ${owner.email}\n` : `domain ${domain.name} has no owner now\n`);
      });
    });

  domains
    .command('members')
    .description("list a domain's members and their roles")
    .argument('<domain>', 'name or id')
    .option('--json', 'print JSON')
    .action(async (given: string, opts: { json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        const list = (await listMembers(runtime.db, domain.id)).map((row) => toMember(row, true));
        if (opts.json) return host.out(formatJson(list));
        host.out(formatTable(['USER', 'EMAIL', 'ROLE', 'SINCE'], list.map((m) => [m.userId, m.email ?? '', m.role, m.createdAt])));
      });
    });

  domains
    .command('share')
    .description('give a user a role on a domain (viewer: reads it; editor: also changes its alerts and silences), or change it')
    .argument('<domain>', 'name or id')
    .argument('<user>', 'e-mail or id of the user')
    .addOption(new Option('--role <role>', 'the role').choices(['viewer', 'editor']).makeOptionMandatory())
    .addOption(asAdminOption('grant'))
    .action(async (given: string, userGiven: string, opts: { role: 'viewer' | 'editor'; as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        const user = await findUser(runtime.db, userGiven);
        const actor = opts.as === undefined ? null : await actingAdmin(runtime.db, opts.as);
        const { created } = await grantRole(runtime, domain, { userId: user.id, role: opts.role }, actor?.id ?? null, CLI_CLIENT, true);
        runtime.log.info({ domainId: domain.id, userId: user.id, role: opts.role, actorId: actor?.id ?? null, via: 'cli' }, 'domain shared');
        host.out(`${user.email} is ${created ? 'now' : 'from now on'} ${opts.role === 'viewer' ? 'a viewer' : 'an editor'} of ${domain.name}\n`);
      });
    });

  domains
    .command('unshare')
    .description("take a member off a domain: at once, its requests about the domain answer 404 (a live tail on a running server ends within 5 s)")
    .argument('<domain>', 'name or id')
    .argument('<user>', 'e-mail or id of the member')
    .addOption(asAdminOption('revocation'))
    .action(async (given: string, userGiven: string, opts: { as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        const user = await findUser(runtime.db, userGiven);
        const actor = opts.as === undefined ? null : await actingAdmin(runtime.db, opts.as);
        await revokeRole(runtime, domain, user.id, actor?.id ?? null, CLI_CLIENT, true).catch(whenNotFound(`${user.email} is not a member of ${domain.name}`));
        runtime.log.info({ domainId: domain.id, userId: user.id, actorId: actor?.id ?? null, via: 'cli' }, 'domain unshared');
        host.out(`${user.email} is no longer a member of ${domain.name}\n`);
      });
    });

  domains
    .command('remove')
    .description('delete a domain with its logs and everything attached to it (alerts, exports)')
    .argument('<domain>', 'name or id')
    .option('--yes', 'do not ask for confirmation')
    .action(async (given: string, opts: { yes?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        await confirmOr(host, opts.yes, `Delete domain ${domain.name} and all its logs?`, 'not removed');
        await removeDomain(runtime, domain);
        host.out(`removed domain ${domain.id} ${domain.name} and its logs\n`);
      });
    });
}
