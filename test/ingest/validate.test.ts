/**
 * `tailhouse ingest validate` (ingest/validate.ts): configs checked against real files and the
 * domains table of an embedded Postgres (PGlite; with DATABASE_URL a database of its own).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { migratePostgres } from '../../core/db/migrate.js';
import { openPglite, openPostgres, type Db } from '../../core/db/postgres.js';
import { sql } from '../../core/db/sql.js';
import { createLogger } from '../../core/log.js';
import { compileAccessFormat } from '../../ingest/parsers/access-format.js';
import { parseErrorLine } from '../../ingest/parsers/error-log.js';
import { formatValidationReport, validateIngestConfig, type ValidationReport } from '../../ingest/validate.js';
import { freshDatabase } from '../support/app.js';
import { accessLine, accessLines, errorLogTime, FORMAT, HOST_FORMAT, T0 } from '../support/ingest.js';

const SHOP = 'shop.validate.example';
const BLOG = 'blog.validate.example';
const log = createLogger('silent');
let dir: string;
let db: Db;
let dropDatabase: () => Promise<void>;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'tailhouse-validate-'));
  const fresh = await freshDatabase();
  dropDatabase = fresh.drop;
  db = fresh.url ? await openPostgres(fresh.url) : await openPglite(path.join(dir, 'pg'));
  await migratePostgres(db, log);
  await db.query(sql`insert into domains (name) values (${SHOP}), (${BLOG})`);
});

afterAll(async () => {
  await db?.close();
  await dropDatabase?.();
  await fs.rm(dir, { recursive: true, force: true });
});

let seq = 0;
/** Writes `text` under a new name in the test directory; returns its path. */
async function write(name: string, text: string): Promise<string> {
  const file = path.join(dir, `${++seq}-${name}`);
  await fs.writeFile(file, text);
  return file;
}

async function validate(yaml: string, sampleLines?: number): Promise<{ report: ValidationReport; text: string }> {
  const report = await validateIngestConfig(await write('ingest.yaml', yaml), { db, log, ...(sampleLines === undefined ? {} : { sampleLines }) });
  return { report, text: formatValidationReport(report) };
}

const errorLine = (n: number, server: string) =>
  `${errorLogTime(T0 + n * 1000)} [error] 1234#0: *${n} open() "/srv/www/missing-${n}" failed (2: No such file or directory), client: 203.0.113.7, server: ${server}, request: "GET /missing-${n} HTTP/1.1", host: "${server}"`;

describe('ingest validate', () => {
  it('a good config: the first lines of each file parse, with their fields; config OK', async () => {
    const access = await write('shop.access.log', accessLines(1, 21));
    const error = await write('shop.error.log', `${errorLine(1, SHOP)}\n${errorLine(2, SHOP)}\n`);
    const all = await write('all.access.log', `${accessLine(1, BLOG)}\n${accessLine(2, `${SHOP}:443`)}\n`);
    const { report, text } = await validate(`
sources:
  - domain: ${SHOP}
    access: ${access}
    error: ${error}
    format: '${FORMAT}'
  - access: ${all}
    format: '${HOST_FORMAT}'
`);
    expect(report.configErrors).toEqual([]);
    expect(report.problems).toBe(0);
    const [shop, byHost] = report.sources;
    expect(shop).toMatchObject({ name: 'sources[0]', domain: SHOP, registered: true });
    const [shopAccess, shopError] = shop!.files;
    // The default sample is the first ten lines.
    expect(shopAccess!.lines.map((l) => l.line)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(shopAccess!.lines[0]).toEqual({
      line: 1,
      text: accessLine(1),
      fields: { kind: 'access', time: new Date(T0 + 1000).toISOString(), domain: SHOP, status: 200, method: 'GET', url: '/item/1?q=1' },
      rejected: null,
    });
    expect(shopError!.lines).toHaveLength(2);
    expect(shopError!.lines[1]!.fields).toEqual({ kind: 'error', time: new Date(T0 + 2000).toISOString(), domain: SHOP, level: 'error', message: 'open() "/srv/www/missing-2" failed (2: No such file or directory)' });
    // Routed by $host: lower-cased, without the port, as the worker routes them.
    expect(byHost).toMatchObject({ domain: null, registered: null });
    expect(byHost!.files[0]!.lines.map((l) => [l.fields?.domain, l.rejected])).toEqual([[BLOG, null], [SHOP, null]]);

    expect(text).toContain(`sources[0]: domain ${SHOP}`);
    expect(text).toContain(`  access ${access} (format '${FORMAT}'): first 10 lines`);
    expect(text).toContain(`    line 1   ${new Date(T0 + 1000).toISOString()}  ${SHOP}  200  GET /item/1?q=1`);
    expect(text).toContain(`  error ${error} (timezone UTC): first 2 entries`);
    expect(text).toMatch(/\nconfig OK\n$/);
  });

  it('a wrong format: each line that does not fit is shown with its number, the reason the ingest stores, and the line', async () => {
    // The files are combined; the config says `main` (which adds "$http_x_forwarded_for").
    const combined = accessLines(1, 3);
    const access = await write('combined.log', `${combined}not a log line\n`);
    const { report, text } = await validate(`
sources:
  - domain: ${SHOP}
    access: ${access}
    format: main
`);
    const lines = report.sources[0]!.files[0]!.lines;
    const main = compileAccessFormat('main');
    const reasonOf = (line: string) => {
      const parsed = main(line);
      return parsed.ok ? null : `does not parse: ${parsed.reason}`;
    };
    expect(lines.map((l) => [l.line, l.rejected])).toEqual([
      [1, reasonOf(accessLine(1))],
      [2, reasonOf(accessLine(2))],
      [3, reasonOf('not a log line')],
    ]);
    expect(lines[0]!.rejected).toMatch(/^does not parse: /);
    expect(lines.every((l) => l.fields === null)).toBe(true);
    expect(report.problems).toBe(3);
    expect(text).toContain('first 3 lines, 3 rejected');
    expect(text).toContain(`    line 3  rejected: ${reasonOf('not a log line')}\n            not a log line\n`);
    expect(text).toContain(`    line 1  rejected: ${reasonOf(accessLine(1))}\n            ${accessLine(1)}\n`);
    expect(text).toMatch(/\n3 problems\n$/);
  });

  it('a missing file is a problem; the other files are still checked', async () => {
    const access = await write('here.log', accessLines(1, 2));
    const { report, text } = await validate(`
sources:
  - domain: ${SHOP}
    access: ${access}
    error: ${path.join(dir, 'not-there.error.log')}
    format: '${FORMAT}'
`);
    const [here, missing] = report.sources[0]!.files;
    expect(here!.lines).toHaveLength(1);
    expect(missing).toMatchObject({ kind: 'error', file: { state: 'missing' }, lines: [] });
    expect(report.problems).toBe(1);
    expect(text).toContain(`error ${path.join(dir, 'not-there.error.log')} (timezone UTC): missing file`);
    expect(text).toMatch(/\n1 problem\n$/);
  });

  it('unregistered domains: a line naming one is rejected as the ingest rejects it; a source domain that is not registered', async () => {
    const all = await write('hosts.log', `${accessLine(1, BLOG)}\n${accessLine(2, 'Nobody.Validate.Example.')}\n`);
    const errors = await write('errors.log', `${errorLine(1, 'nobody.validate.example')}\n`);
    const { report, text } = await validate(`
sources:
  - access: ${all}
    error: ${errors}
    format: '${HOST_FORMAT}'
  - domain: new.validate.example
    access: ${await write('new.log', accessLines(1, 2))}
    format: '${FORMAT}'
`);
    const [byHost, unregistered] = report.sources;
    expect(byHost!.files[0]!.lines.map((l) => [l.line, l.rejected])).toEqual([
      [1, null],
      [2, 'unknown domain "nobody.validate.example": not registered'],
    ]);
    expect(byHost!.files[1]!.lines[0]!.rejected).toBe('unknown domain "nobody.validate.example": not registered');
    expect(unregistered).toMatchObject({ domain: 'new.validate.example', registered: false });
    expect(unregistered!.files[0]!.lines[0]!.rejected).toBeNull();
    expect(report.problems).toBe(3);
    expect(text).toContain('    line 2  rejected: unknown domain "nobody.validate.example": not registered');
    expect(text).toContain('sources[1]: domain new.validate.example is not registered: the worker reads nothing from these files until it is (tailhouse domains add new.validate.example)');
    expect(text).toMatch(/\n3 problems\n$/);
  });

  it('a pattern: every file it matches, the domain each goes to and whether it is registered; what is left out', async () => {
    const tree = path.join(dir, `${++seq}-vhosts`);
    for (const [host, text] of [[SHOP, accessLines(1, 3)], ['new.validate.example', accessLines(1, 2)], ['Not_A_Host', accessLines(1, 2)]] as const) {
      await fs.mkdir(path.join(tree, host), { recursive: true });
      await fs.writeFile(path.join(tree, host, 'access.log'), text);
    }
    await fs.writeFile(path.join(tree, SHOP, 'access.log.1'), accessLines(1, 2));
    await fs.symlink(SHOP, path.join(tree, 'alias.validate.example'));
    const yaml = (register: string) => `
sources:
  - access: ${tree}/{domain}/access.log*
    format: '${FORMAT}'
${register}`;
    const { report, text } = await validate(yaml(''));
    const [pattern] = report.sources[0]!.patterns;
    expect(pattern!.matches.map((m) => [path.relative(tree, m.path), m.domain, m.state])).toEqual([
      ['Not_A_Host/access.log', null, 'invalid'],
      [`new.validate.example/access.log`, 'new.validate.example', 'not registered'],
      [`${SHOP}/access.log`, SHOP, 'registered'],
    ]);
    expect(pattern!.skipped).toEqual([{ path: path.join(tree, 'alias.validate.example', 'access.log'), reason: `the same file as ${path.join(tree, SHOP, 'access.log')}: read once, through that path`, problem: false }]);
    // The sample is the first file with a domain: its lines parse.
    expect(pattern!.sample!.lines.map((l) => l.rejected)).toEqual([null]);
    expect(report.problems).toBe(2);
    expect(text).toContain('sources[0]: each file\'s domain is the one its path names');
    expect(text).toContain(`  access pattern ${tree}/{domain}/access.log*: matches 3 files`);
    expect(text).toMatch(/Not_A_Host\/access\.log\s+rejected: the path names "Not_A_Host" as its domain, which is no host name \(such as shop\.example\.com\)/);
    expect(text).toMatch(/new\.validate\.example\/access\.log\s+new\.validate\.example \(not registered\)/);

    const registering = await validate(yaml('    register: { owner: someone@example.com }'));
    expect(registering.report.sources[0]!.patterns[0]!.matches[1]!.state).toBe('will register');
    expect(registering.report.problems).toBe(1);
  });

  it('a config that does not load: the loader\'s errors, with their key paths', async () => {
    const { report, text } = await validate(`
sources:
  - domain: ${SHOP}
    access: /var/log/nginx/shop.access.log
    format: comined
    startat: end
`);
    expect(report.sources).toEqual([]);
    expect(report.configErrors).toHaveLength(2);
    expect(report.configErrors[0]).toMatch(/ingest\.yaml:5: sources\[0\]\.format: must be combined, main or an nginx log_format string with \$variables \(got "comined"\)$/);
    expect(report.configErrors[1]).toMatch(/ingest\.yaml:6: sources\[0\]\.startat: unknown field/);
    expect(report.problems).toBe(2);
    expect(text).toMatch(/^ingest config \S+ingest\.yaml: does not load\n/);
    expect(text).toContain('sources[0].format: must be combined, main');
    expect(text).toMatch(/\n2 problems\n$/);
  });

  it('syslog: what it listens on, not checked; a route to an unregistered domain is a problem', async () => {
    const { report, text } = await validate(`
syslog:
  udp: 127.0.0.1:5514
  tcp: '[::1]:5514'
  tags:
    nginx_shop: { domain: ${SHOP}, format: combined }
    nginx_gone: { domain: gone.validate.example, type: error }
`);
    expect(report.syslog).toEqual({
      listens: ['udp 127.0.0.1:5514', 'tcp [::1]:5514'],
      routes: [
        { tag: 'nginx_shop', type: 'access', domain: SHOP, registered: true, format: 'combined' },
        { tag: 'nginx_gone', type: 'error', domain: 'gone.validate.example', registered: false, format: null },
      ],
    });
    expect(report.problems).toBe(1);
    expect(text).toContain('syslog: listens on udp 127.0.0.1:5514 and tcp [::1]:5514; not checked');
    expect(text).toContain('tag nginx_gone: error, domain gone.validate.example is not registered: its messages go to ingest_rejects');
  });

  it('error entries spanning lines are numbered by their first line; the sample size is an option; control characters are escaped', async () => {
    const garbage = '\u001b[31mnot an error line';
    const split = errorLine(1, SHOP).replace('/srv/www/missing-1', '/srv/a\r\nSet-Cookie:x=1');
    const errors = await write('multi.error.log', `${garbage}\n${split}\n${errorLine(2, SHOP)}\n${errorLine(3, SHOP)}\n`);
    const { report, text } = await validate(`
sources:
  - domain: ${SHOP}
    error: ${errors}
`, 3);
    const parsed = parseErrorLine(garbage);
    expect(parsed.ok).toBe(false);
    const lines = report.sources[0]!.files[0]!.lines;
    // The first line continues no entry: it stands alone. Lines 2–3 are one entry.
    expect(lines.map((l) => [l.line, l.rejected])).toEqual([[1, `does not parse: ${parsed.ok ? '' : parsed.reason}`], [2, null], [4, null]]);
    expect(lines[1]!.text).toBe(`${split.slice(0, 200)}…`);
    expect(text).not.toMatch(/[\u001b\r]/);
    expect(text).toContain('\\x1b[31mnot an error line');
    expect(text).toContain('open() "/srv/a\\x0d\\x0aSet-Cookie:x=1" failed');
  });
});
