/** `tailhouse groups …`: groups of users and their roles on domains (docs/reference/groups.md), from the shell, with administrator rights. */
import { Option, type Command } from 'commander';
import type { Db } from '../../../core/db/postgres.js';
import { groupBody } from '../../groups/schemas.js';
import * as groups from '../../groups/service.js';
import { findGroup, findGroupByName, listGroups, type Group } from '../../groups/store.js';
import { CliError, confirmOr, parseWith, whenNotFound, type CommandHost } from '../host.js';
import { formatJson, formatTable } from '../table.js';
import { findDomain } from './domains.js';
import { actingAdmin, asAdminOption, CLI_CLIENT, findUser } from './users.js';

/** A group named on the command line by name or id. */
async function groupNamed(db: Db, given: string): Promise<Group> {
  const group = (/^\d+$/.test(given) ? await findGroup(db, Number(given)) : undefined) ?? (await findGroupByName(db, given));
  if (!group) throw new CliError(`no group has the name or id ${given}`);
  return group;
}

const groupName = (given: string) => parseWith(groupBody.shape.name, given, 'group name');

/** What a group's grants cover, in a line: "all (viewer)" or the domains with their roles. */
const reachOf = (group: Group) => group.domains.map((d) => `${d.domainId === null ? 'all' : d.name} (${d.role})`).join(', ') || '-';

export function registerGroupCommands(program: Command, host: CommandHost): void {
  const command = program.command('groups').description('groups of users given a role on domains, or on every domain (a support team)');
  const actorOf = async (db: Db, as: string | undefined): Promise<groups.GroupActor> => ({ userId: as === undefined ? null : (await actingAdmin(db, as)).id, client: CLI_CLIENT });

  command
    .command('list')
    .description('the groups, their members and what they see')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const list = await listGroups(runtime.db);
        if (opts.json) return host.out(formatJson(list));
        host.out(formatTable(['ID', 'NAME', 'MEMBERS', 'DOMAINS'], list.map((g) => [g.id, g.name, g.members.map((m) => m.email).join(', ') || '-', reachOf(g)])));
      });
    });

  command
    .command('create')
    .argument('<name>', 'the group name (1 to 100 characters)')
    .description('create a group')
    .addOption(asAdminOption('change'))
    .action(async (name: string, opts: { as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const group = await groups.createGroup(runtime, await actorOf(runtime.db, opts.as), groupName(name));
        host.out(`created group ${group.id} ${group.name}\n`);
      });
    });

  command
    .command('rename')
    .argument('<group>', 'name or id')
    .argument('<name>', 'the new name')
    .description('rename a group')
    .addOption(asAdminOption('change'))
    .action(async (given: string, name: string, opts: { as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const group = await groupNamed(runtime.db, given);
        const renamed = await groups.renameGroup(runtime, await actorOf(runtime.db, opts.as), group.id, groupName(name));
        host.out(`renamed group ${group.id} ${group.name} to ${renamed.name}\n`);
      });
    });

  command
    .command('remove')
    .argument('<group>', 'name or id')
    .description('delete a group: its members lose what it gave them (a live tail on a running server ends within 5 s)')
    .option('--yes', 'do not ask for confirmation')
    .addOption(asAdminOption('deletion'))
    .action(async (given: string, opts: { yes?: boolean; as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const group = await groupNamed(runtime.db, given);
        await confirmOr(host, opts.yes, `Delete group ${group.name} (${group.members.length} members)?`, 'not removed');
        await groups.deleteGroup(runtime, await actorOf(runtime.db, opts.as), group.id);
        host.out(`removed group ${group.id} ${group.name}\n`);
      });
    });

  command
    .command('add-member')
    .argument('<group>', 'name or id')
    .argument('<user>', 'e-mail or id')
    .description('put a user in a group')
    .addOption(asAdminOption('change'))
    .action(async (given: string, userGiven: string, opts: { as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const group = await groupNamed(runtime.db, given);
        const user = await findUser(runtime.db, userGiven);
        const { created } = await groups.addMember(runtime, await actorOf(runtime.db, opts.as), group.id, user.id);
        host.out(created ? `${user.email} is now in group ${group.name}\n` : `${user.email} was already in group ${group.name}\n`);
      });
    });

  command
    .command('remove-member')
    .argument('<group>', 'name or id')
    .argument('<user>', 'e-mail or id')
    .description('take a user out of a group: at once, what it saw only through the group answers 404')
    .addOption(asAdminOption('change'))
    .action(async (given: string, userGiven: string, opts: { as?: string }) => {
      await host.withRuntime(async (runtime) => {
        const group = await groupNamed(runtime.db, given);
        const user = await findUser(runtime.db, userGiven);
        await groups.removeMember(runtime, await actorOf(runtime.db, opts.as), group.id, user.id).catch(whenNotFound(`${user.email} is not in group ${group.name}`));
        host.out(`${user.email} is no longer in group ${group.name}\n`);
      });
    });

  command
    .command('grant')
    .argument('<group>', 'name or id')
    .argument('[domains...]', 'names or ids of the domains')
    .description('give a group a role on domains, or on every domain (--all), or change it')
    .option('--all', 'every domain, those registered later too')
    .addOption(new Option('--role <role>', 'viewer: reads them; editor: also changes their alerts and silences').choices(['viewer', 'editor']).makeOptionMandatory())
    .addOption(asAdminOption('grant'))
    .action(async (given: string, domainsGiven: string[], opts: { all?: boolean; role: 'viewer' | 'editor'; as?: string }) => {
      if ((domainsGiven.length > 0) === Boolean(opts.all)) throw new CliError('give either domains or --all');
      await host.withRuntime(async (runtime) => {
        const group = await groupNamed(runtime.db, given);
        const domains = opts.all ? 'all' : await Promise.all(domainsGiven.map(async (d) => (await findDomain(runtime.db, d)).id));
        const granted = await groups.grantDomains(runtime, await actorOf(runtime.db, opts.as), group.id, domains, opts.role);
        host.out(`group ${group.name} sees ${reachOf(granted)}\n`);
      });
    });

  command
    .command('revoke')
    .argument('<group>', 'name or id')
    .argument('[domain]', 'name or id of the domain')
    .description("end a group's role on a domain, or on every domain (--all)")
    .option('--all', 'the grant on every domain')
    .addOption(asAdminOption('revocation'))
    .action(async (given: string, domainGiven: string | undefined, opts: { all?: boolean; as?: string }) => {
      if ((domainGiven !== undefined) === Boolean(opts.all)) throw new CliError('give either a domain or --all');
      await host.withRuntime(async (runtime) => {
        const group = await groupNamed(runtime.db, given);
        const domain = domainGiven === undefined ? null : await findDomain(runtime.db, domainGiven);
        const what = domain?.name ?? 'every domain';
        await groups.revokeDomain(runtime, await actorOf(runtime.db, opts.as), group.id, domain?.id ?? 'all').catch(whenNotFound(`group ${group.name} holds no role on ${what}`));
        host.out(`group ${group.name} no longer holds a role on ${what}\n`);
      });
    });
}
