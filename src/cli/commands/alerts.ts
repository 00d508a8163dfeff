/**
 * `tailhouse alerts list` and `tailhouse silence …`: the fleet's alerts and its silences, from the
 * shell, with administrator rights (every domain, every rule, everyone's silences), as the
 * Alerting page shows them (issue 30 §6).
 *
 * A silence is kept under a user's name (created_by): from the shell, an active administrator's
 * (--as, or the first one), so that "all" reaches every domain. Like the other commands, what the
 * shell does is logged to the server's log (via "cli"), not to that administrator's activity log:
 * they did not sign in to do it.
 */
import { MINUTE_MS, HOUR_MS, DAY_MS } from '../../../core/durations.js';
import type { Command } from 'commander';
import { z } from 'zod';
import type { Db } from '../../../core/db/postgres.js';
import { alertsReadBy, firingReadBy, type AlertReader } from '../../alerts/service.js';
import type { Operator } from '../../alerts/schemas.js';
import { createSilenceBody, SILENCE_MAX_DAYS } from '../../alerts/silences/schemas.js';
import { addSilence, finishSilence, silencesOf, type Silence } from '../../alerts/silences/service.js';
import { findAlertById } from '../../alerts/store.js';
import { visibleDomainNames } from '../../domains/store.js';
import { ApiError } from '../../http/errors.js';
import { listUsers, type User, type UserRow } from '../../users/store.js';
import { CliError, everyPage, parseWith, type CommandHost } from '../host.js';
import { formatJson, formatTable } from '../table.js';
import { findDomain } from './domains.js';
import { findUser } from './users.js';

const UNIT_MS = { m: MINUTE_MS, h: HOUR_MS, d: DAY_MS } as const;
const MAX_MS = SILENCE_MAX_DAYS * UNIT_MS.d;
const DURATION = /^(\d{1,9})(m|h|d)$/;

/** `--for`: minutes, hours or days, up to SILENCE_MAX_DAYS. */
export const silenceDurationField = z
  .string()
  .regex(DURATION, { message: 'must be a number of minutes, hours or days, e.g. 90m, 2h, 1d' })
  .transform((text) => {
    const [, n, unit] = DURATION.exec(text)!;
    return Number(n) * UNIT_MS[unit as keyof typeof UNIT_MS];
  })
  .refine((ms) => ms > 0, { message: 'must be longer than 0' })
  .refine((ms) => ms <= MAX_MS, { message: `must be at most ${SILENCE_MAX_DAYS} days (${SILENCE_MAX_DAYS}d)` });

const untilField = z.iso.datetime({ offset: true, message: 'must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T02:00:00Z' });

const idField = (what: string) =>
  z
    .string()
    .regex(/^\d{1,10}$/, { message: `must be ${what}, a positive whole number` })
    .transform(Number)
    .refine((n) => n > 0 && n <= 2 ** 31 - 1, { message: `must be ${what}, a positive whole number` });

/** Repeatable options collect their values. */
const collect = (value: string, previous: string[]) => [...previous, value];

const OPERATOR_SIGNS: Record<Operator, string> = { greaterThan: '>', greaterThanOrEqual: '>=', lessThan: '<', lessThanOrEqual: '<=' };

/** The shell reads as an administrator: every domain, every rule. */
async function everything(db: Db): Promise<AlertReader> {
  return { domainIds: (await visibleDomainNames(db, { all: true })).map((d) => d.id), ruleOwner: null };
}

async function domainNames(db: Db): Promise<Map<number, string>> {
  return new Map((await visibleDomainNames(db, { all: true })).map((d) => [d.id, d.name]));
}

async function everyUser(db: Db): Promise<User[]> {
  return everyPage(async (page) => {
    const { users, total } = await listUsers(db, page);
    return [users, total];
  });
}

/** The administrator a silence from the shell is kept under: `--as`, else the first active one. */
async function silenceCreator(db: Db, given: string | undefined): Promise<Pick<UserRow, 'id' | 'email'>> {
  if (given !== undefined) {
    const user = await findUser(db, given);
    if (user.role !== 'admin' || !user.active) throw new CliError(`--as ${user.email} is not an active administrator; a silence from the shell is kept under one`);
    return user;
  }
  const admin = (await everyUser(db)).find((u) => u.role === 'admin' && u.active);
  if (!admin) throw new CliError('no active administrator to keep the silence under; create one (users create --role admin)');
  return admin;
}

/** A silence's domains as the operator reads them: names (an id for a domain removed since). */
function domainsLabel(ids: Silence['domainIds'], names: Map<number, string>): string {
  if (ids === 'all') return 'all domains';
  const shown = ids.slice(0, 3).map((id) => names.get(id) ?? `domain ${id} (removed)`);
  return ids.length > 3 ? `${shown.join(', ')} and ${ids.length - 3} more` : shown.join(', ');
}

function windowLabel(s: Silence): string {
  const fixed = s.startsAt && s.endsAt ? `${s.startsAt} to ${s.endsAt}` : '-';
  if (!s.recurrence) return fixed;
  const r = s.recurrence;
  return `weekly ${r.weekdays.join(',')} ${r.start}-${r.end} ${r.timezone}${s.state === 'expired' ? '' : ` (${s.state === 'active' ? 'now' : 'next'} ${fixed})`}`;
}

const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();

export function registerAlertCommands(program: Command, host: CommandHost): void {
  const alerts = program.command('alerts').description("the fleet's alerts: domain alerts and rules (with administrator rights)");
  alerts
    .command('list')
    .description('list every alert with the number of domains it fires on (--firing: one line per firing alert and domain)')
    .option('--firing', 'only what fires now, one line per alert and domain, with since when and the silence holding it')
    .option('--json', 'print JSON (the fields of GET /api/logs/alerts, or of …/alerts/firing)')
    .action(async (opts: { firing?: boolean; json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const reader = await everything(runtime.db);
        if (opts.firing) {
          const firing = await firingReadBy(runtime, reader);
          if (opts.json) return host.out(formatJson(firing));
          host.out(
            formatTable(
              ['ALERT', 'NAME', 'DOMAIN', 'VALUE', 'SINCE', 'SILENCED BY'],
              firing.map((f) => [f.alertId, oneLine(f.name), f.domain, f.value ?? '-', f.since ?? '-', f.silencedBy === null ? '-' : `silence ${f.silencedBy}`]),
            ),
          );
          return;
        }
        const found = await alertsReadBy(runtime, reader);
        if (opts.json) return host.out(formatJson(found));
        const names = await domainNames(runtime.db);
        const scopeLabel = (a: (typeof found)[number]) => {
          if (a.domainId !== null) return names.get(a.domainId) ?? `domain ${a.domainId}`;
          if ('domains' in a.scope) return 'all domains';
          return a.scope.domainIds.length === 1 ? `rule: ${names.get(a.scope.domainIds[0]!) ?? `domain ${a.scope.domainIds[0]}`}` : `${a.scope.domainIds.length} domains`;
        };
        host.out(
          formatTable(
            ['ID', 'NAME', 'CONDITION', 'SCOPE', 'ENABLED', 'FIRING'],
            found.map((a) => [a.id, oneLine(a.name), `${a.condition} ${OPERATOR_SIGNS[a.operator]} ${a.threshold} over ${a.duration}s`, scopeLabel(a), a.enabled ? 'yes' : 'no', a.domains.length]),
          ),
        );
      });
    });

  const silence = program.command('silence').description('hold alert notifications for maintenance (with administrator rights)');
  silence
    .command('add')
    .description('silence alerts on domains for a while: evaluation goes on, notifications are held')
    .option('--domain <domain>', 'a domain name or id (repeatable), or "all" for every domain', collect, [])
    .option('--alert <id>', 'only this alert (repeatable; default: every alert)', collect, [])
    .option('--for <duration>', `how long from now: 90m, 2h, 1d (at most ${SILENCE_MAX_DAYS}d)`)
    .option('--until <time>', 'until when, ISO 8601 with a time zone (2026-12-01T02:00:00Z)')
    .requiredOption('--comment <text>', 'why notifications are held')
    .option('--as <admin>', 'e-mail or id of the administrator the silence is kept under (default: the first active one)')
    .action(async (opts: { domain: string[]; alert: string[]; for?: string; until?: string; comment: string; as?: string }) => {
      if (opts.domain.length === 0) throw new CliError('give --domain NAME (repeatable) or --domain all');
      const all = opts.domain.some((d) => d.toLowerCase() === 'all');
      if (all && opts.domain.length > 1) throw new CliError('--domain all stands alone: give all, or domain names');
      if ((opts.for === undefined) === (opts.until === undefined)) throw new CliError('give either --for (90m, 2h, 1d) or --until (an ISO 8601 time)');
      // Checked before the stores open; the window itself starts when the silence is added.
      const length = opts.for === undefined ? null : parseWith(silenceDurationField, opts.for, '--for');
      const until = opts.until === undefined ? null : Date.parse(parseWith(untilField, opts.until, '--until'));
      const checkUntil = (now: number) => {
        if (until === null) return;
        if (until <= now) throw new CliError('--until must be in the future');
        if (until - now > MAX_MS) throw new CliError(`--until must be at most ${SILENCE_MAX_DAYS} days from now`);
      };
      checkUntil(Date.now());
      parseWith(createSilenceBody.shape.comment, opts.comment, '--comment');
      const alertIds = opts.alert.map((a) => parseWith(idField('an alert id'), a, '--alert'));
      await host.withRuntime(async (runtime) => {
        const domains = all ? null : await Promise.all(opts.domain.map((d) => findDomain(runtime.db, d)));
        for (const id of alertIds) if (!(await findAlertById(runtime.db, id))) throw new CliError(`no alert has the id ${id}`);
        const creator = await silenceCreator(runtime.db, opts.as);
        const now = Date.now();
        checkUntil(now);
        // The API's own rules on the whole silence (the comment's length, the window).
        const body = parseSilence({
          domainIds: domains ? domains.map((d) => d.id) : 'all',
          ...(alertIds.length ? { alertIds } : {}),
          startsAt: new Date(now).toISOString(),
          endsAt: new Date(length === null ? until! : now + length).toISOString(),
          comment: opts.comment,
        });
        const added = await addSilence(runtime, creator.id, body);
        runtime.log.info({ silenceId: added.id, createdBy: creator.id, domainIds: added.domainIds, alertIds: added.alertIds, via: 'cli' }, 'silence added');
        const over = domains ? [...new Set(domains.map((d) => d.name))].join(', ') : 'all domains';
        const which = added.alertIds ? `alert${added.alertIds.length > 1 ? 's' : ''} ${added.alertIds.join(', ')}` : 'every alert';
        host.out(`added silence ${added.id} on ${over}, ${which}, from ${added.startsAt} until ${added.endsAt} (kept under ${creator.email})\n`);
      });
    });

  silence
    .command('list')
    .description('list silences in force and to come (--expired: past and ended ones), newest first')
    .option('--expired', 'the past and ended silences instead')
    .option('--json', 'print JSON (the fields of GET /api/logs/silences)')
    .action(async (opts: { expired?: boolean; json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const found = await silencesOf(runtime, null, opts.expired ? 'expired' : 'active');
        if (opts.json) return host.out(formatJson(found));
        const [names, users] = await Promise.all([domainNames(runtime.db), everyUser(runtime.db)]);
        const emails = new Map(users.map((u) => [u.id, u.email]));
        host.out(
          formatTable(
            ['ID', 'STATE', 'WINDOW', 'DOMAINS', 'ALERTS', 'BY', 'COMMENT'],
            found.map((s) => [s.id, s.state, windowLabel(s), domainsLabel(s.domainIds, names), s.alertIds ? s.alertIds.join(',') : 'all', emails.get(s.createdBy) ?? `user ${s.createdBy}`, oneLine(s.comment)]),
          ),
        );
      });
    });

  silence
    .command('end')
    .description('end a silence now (notifications of alerts still firing go out)')
    .argument('<id>', 'silence id from `silence list`')
    .action(async (given: string) => {
      const id = parseWith(idField('a silence id'), given, 'silence id');
      await host.withRuntime(async (runtime) => {
        try {
          await finishSilence(runtime, null, id);
        } catch (err) {
          if (err instanceof ApiError && err.status === 404) throw new CliError(`no silence has the id ${id}`);
          if (err instanceof ApiError && err.status === 409) throw new CliError(`silence ${id} has ended already`);
          throw err;
        }
        runtime.log.info({ silenceId: id, via: 'cli' }, 'silence ended');
        host.out(`ended silence ${id}\n`);
      });
    });
}

/** The silence through the API's schema, its problems named as the options that give them. */
function parseSilence(body: unknown) {
  const result = createSilenceBody.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  const option = { domainIds: '--domain', alertIds: '--alert', startsAt: '--for', endsAt: '--for or --until', comment: '--comment' }[String(issue?.path[0])] ?? 'the silence';
  throw new CliError(`${option} ${issue?.message ?? 'is invalid'}`);
}
