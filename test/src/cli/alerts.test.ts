/**
 * `tailhouse alerts list` and `tailhouse silence add|list|end` (issue 30 §6), as child processes
 * like test/src/cli/commands.test.ts: alone on an embedded DATA_DIR, then beside a running server
 * (test/src/cli/beside-server.test.ts), where a rule made through the API fires and a silence from the
 * shell holds it.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JWT_SECRET } from '../../support/app.js';
import { fetchJson, killChildren, run, serve, signIn, stop, type Proc } from '../../support/child.js';
import { accessLine, FORMAT, until } from '../../support/ingest.js';

const SLOW = 240_000;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-cli-alerts-'));
const dataDir = path.join(dir, 'data');
const ADMIN_PASSWORD = 'alerts-admin-1';
// Rounds every second, notifications without a group wait: a rule fires a moment after its traffic.
const vars = { DATA_DIR: dataDir, JWT_SECRET, ADMIN_PASSWORD, ALERT_INTERVAL_S: '1', ALERT_GROUP_WAIT_S: '0' };
const cli = (args: string[]) => run(args, vars);

const ISO = '\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z';
const ADDED = new RegExp(`^added silence (\\d+) on (.+), (.+), from (${ISO}) until (${ISO}) \\(kept under (\\S+)\\)\\n$`);

/** The rows of a table the CLI printed, split on its runs of two or more spaces. */
const rowsOf = (stdout: string) =>
  stdout
    .trimEnd()
    .split('\n')
    .map((line) => line.split(/ {2,}/));

afterAll(async () => {
  await killChildren();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('tailhouse silence, alone on DATA_DIR', () => {
  beforeAll(async () => {
    for (const name of ['shop.example.com', 'blog.example.com']) {
      const added = await cli(['domains', 'add', name]);
      expect(added.code, added.stderr).toBe(0);
    }
  }, SLOW);

  it('adds a silence on a domain for 2h, lists it, ends it, lists it among the expired', { timeout: SLOW }, async () => {
    const added = await cli(['silence', 'add', '--domain', 'shop.example.com', '--for', '2h', '--comment', 'PHP 8.4 upgrade']);
    expect(added.code, added.stderr).toBe(0);
    const match = ADDED.exec(added.stdout);
    expect(match, added.stdout).not.toBeNull();
    const [, id, over, which, from, to, by] = match!;
    expect([over, which, by]).toEqual(['shop.example.com', 'every alert', 'admin@localhost']);
    expect(Date.parse(to!) - Date.parse(from!)).toBe(2 * 3_600_000);
    expect(Math.abs(Date.parse(from!) - Date.now())).toBeLessThan(60_000);

    const listed = await cli(['silence', 'list']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(rowsOf(listed.stdout)).toEqual([
      ['ID', 'STATE', 'WINDOW', 'DOMAINS', 'ALERTS', 'BY', 'COMMENT'],
      [id, 'active', `${from} to ${to}`, 'shop.example.com', 'all', 'admin@localhost', 'PHP 8.4 upgrade'],
    ]);
    const json = await cli(['silence', 'list', '--json']);
    expect(JSON.parse(json.stdout)).toEqual([
      expect.objectContaining({ id: Number(id), domainIds: [1], alertIds: null, startsAt: from, endsAt: to, state: 'active', comment: 'PHP 8.4 upgrade', endedAt: null }),
    ]);
    expect(rowsOf((await cli(['silence', 'list', '--expired'])).stdout)).toEqual([['ID', 'STATE', 'WINDOW', 'DOMAINS', 'ALERTS', 'BY', 'COMMENT']]);

    const ended = await cli(['silence', 'end', id!]);
    expect(ended).toMatchObject({ code: 0, stdout: `ended silence ${id}\n` });
    expect(await cli(['silence', 'end', id!])).toMatchObject({ code: 1, stdout: '', stderr: `tailhouse: silence ${id} has ended already\n` });

    expect(rowsOf((await cli(['silence', 'list'])).stdout)).toHaveLength(1);
    const expired = await cli(['silence', 'list', '--expired']);
    expect(expired.code, expired.stderr).toBe(0);
    expect(rowsOf(expired.stdout)).toEqual([
      ['ID', 'STATE', 'WINDOW', 'DOMAINS', 'ALERTS', 'BY', 'COMMENT'],
      [id, 'expired', `${from} to ${to}`, 'shop.example.com', 'all', 'admin@localhost', 'PHP 8.4 upgrade'],
    ]);
  });

  it('names an unknown domain and exits 1, adding nothing; refuses bad windows and ids with the option named', { timeout: SLOW }, async () => {
    const unknown = await cli(['silence', 'add', '--domain', 'shop.example.com', '--domain', 'nope.example.com', '--for', '2h', '--comment', 'x']);
    expect(unknown).toMatchObject({ code: 1, stdout: '', stderr: 'tailhouse: no domain has the name nope.example.com\n' });
    expect(rowsOf((await cli(['silence', 'list'])).stdout)).toHaveLength(1);

    const refused: [string[], string][] = [
      [['--domain', 'all', '--for', '91d'], '--for must be at most 90 days (90d)'],
      [['--domain', 'all', '--for', '2 hours'], '--for must be a number of minutes, hours or days, e.g. 90m, 2h, 1d'],
      [['--domain', 'all', '--for', '0m'], '--for must be longer than 0'],
      [['--domain', 'all', '--until', '2020-01-01T00:00:00Z'], '--until must be in the future'],
      [['--domain', 'all', '--until', 'tomorrow'], '--until must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T02:00:00Z'],
      [['--domain', 'all'], 'give either --for (90m, 2h, 1d) or --until (an ISO 8601 time)'],
      [['--domain', 'all', '--domain', 'shop.example.com', '--for', '1h'], '--domain all stands alone: give all, or domain names'],
      [['--domain', 'all', '--for', '1h', '--alert', 'x'], '--alert must be an alert id, a positive whole number'],
      [['--domain', 'all', '--for', '1h', '--alert', '999'], 'no alert has the id 999'],
      [['--domain', 'all', '--for', '1h', '--as', 'nobody@example.com'], 'no user has the e-mail nobody@example.com'],
    ];
    for (const [args, message] of refused) {
      const res = await cli(['silence', 'add', ...args, ...(args.includes('--comment') ? [] : ['--comment', 'maintenance'])]);
      expect(res, args.join(' ')).toMatchObject({ code: 1, stdout: '', stderr: `tailhouse: ${message}\n` });
    }
    expect(await cli(['silence', 'add', '--domain', 'all', '--for', '1h', '--comment', '  '])).toMatchObject({ code: 1, stderr: 'tailhouse: --comment must not be empty: say why notifications are held\n' });
    expect(await cli(['silence', 'end', '999'])).toMatchObject({ code: 1, stderr: 'tailhouse: no silence has the id 999\n' });
    expect(await cli(['silence', 'end', 'abc'])).toMatchObject({ code: 1, stderr: 'tailhouse: silence id must be a silence id, a positive whole number\n' });
    // Nothing was added by any of them.
    expect(rowsOf((await cli(['silence', 'list'])).stdout)).toHaveLength(1);
  });
});

describe('tailhouse alerts and silence, beside a running server', () => {
  let server: { proc: Proc; base: string };
  let headers: Record<string, string>;

  beforeAll(async () => {
    server = await serve(vars);
    const login = await signIn(server.base, 'admin@localhost', ADMIN_PASSWORD);
    expect(login.status).toBe(200);
    headers = { authorization: `Bearer ${login.body.data.accessToken}`, 'content-type': 'application/json' };
  }, SLOW);

  afterAll(async () => {
    if (server) await stop(server.proc);
  });

  const post = (url: string, body: unknown) => fetchJson(`${server.base}${url}`, { method: 'POST', headers, body: JSON.stringify(body) });
  const alert = { condition: 'errorRate', operator: 'greaterThan', threshold: 0.05, duration: 60, notificationMethod: 'email', notificationTarget: 'oncall@example.com' };

  it('lists the rules and domain alerts made through the API, what fires, and the silence holding it', { timeout: SLOW }, async () => {
    const rule = await post('/api/logs/alerts', { ...alert, name: '5xx across the fleet', scope: { domains: 'all' } });
    expect(rule.status, JSON.stringify(rule.body)).toBe(201);
    const ruleId: number = rule.body.data.id;
    const pair = await post('/api/logs/alerts', { ...alert, name: 'pair', condition: 'requests', operator: 'lessThan', threshold: 10, duration: 300, scope: { domainIds: [1, 2] }, enabled: false });
    expect(pair.status, JSON.stringify(pair.body)).toBe(201);
    const own = await post('/api/logs/domains/2/alerts', { ...alert, name: 'blog slow', condition: 'p95ResponseTime', operator: 'greaterThanOrEqual', threshold: 800 });
    expect(own.status, JSON.stringify(own.body)).toBe(201);

    const listed = await cli(['alerts', 'list']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(rowsOf(listed.stdout)).toEqual([
      ['ID', 'NAME', 'CONDITION', 'SCOPE', 'ENABLED', 'FIRING'],
      [String(ruleId), '5xx across the fleet', 'errorRate > 0.05 over 60s', 'all domains', 'yes', '0'],
      [String(pair.body.data.id), 'pair', 'requests < 10 over 300s', '2 domains', 'no', '0'],
      [String(own.body.data.id), 'blog slow', 'p95ResponseTime >= 800 over 60s', 'blog.example.com', 'yes', '0'],
    ]);
    const json = JSON.parse((await cli(['alerts', 'list', '--json'])).stdout) as { id: number; scope: unknown }[];
    expect(json.map((a) => [a.id, a.scope])).toEqual([
      [ruleId, { domains: 'all' }],
      [pair.body.data.id, { domainIds: [1, 2] }],
      [own.body.data.id, { domainIds: [2] }],
    ]);

    // 5xx on shop now (every 10th line is a 500: an error rate of 0.1): the rule fires there.
    const file = path.join(dir, 'now.log');
    const now = Date.now();
    fs.writeFileSync(file, Array.from({ length: 200 }, (_, i) => `${accessLine(i, undefined, now - 20_000 + i * 50)}\n`).join(''));
    const imported = await cli(['import', '--domain', 'shop.example.com', '--format', FORMAT, file]);
    expect(imported.code, imported.stderr).toBe(0);
    const firing = await until(async () => {
      const res = await cli(['alerts', 'list', '--firing']);
      return rowsOf(res.stdout).length > 1 && res;
    }, 'the rule firing on shop.example.com', 60_000, 500);
    expect(rowsOf(firing.stdout)).toEqual([
      ['ALERT', 'NAME', 'DOMAIN', 'VALUE', 'SINCE', 'SILENCED BY'],
      [String(ruleId), '5xx across the fleet', 'shop.example.com', '0.1', expect.stringMatching(new RegExp(`^${ISO}$`)), '-'],
    ]);
    expect(rowsOf((await cli(['alerts', 'list'])).stdout)[1]).toEqual([String(ruleId), '5xx across the fleet', 'errorRate > 0.05 over 60s', 'all domains', 'yes', '1']);

    // A silence of that rule on shop, from the shell: the server's API and the CLI show it holding the alert.
    const added = await cli(['silence', 'add', '--domain', 'shop.example.com', '--alert', String(ruleId), '--for', '90m', '--comment', 'pool restart']);
    expect(added.code, added.stderr).toBe(0);
    const [, silenceId, over, which] = ADDED.exec(added.stdout) ?? [];
    expect([over, which]).toEqual(['shop.example.com', `alert ${ruleId}`]);
    const held = rowsOf((await cli(['alerts', 'list', '--firing'])).stdout);
    expect(held[1]?.[5]).toBe(`silence ${silenceId}`);
    const api = await fetchJson(`${server.base}/api/logs/silences`, { headers });
    expect(api.body.data.silences).toEqual([expect.objectContaining({ id: Number(silenceId), createdBy: 1, domainIds: [1], alertIds: [ruleId], comment: 'pool restart', state: 'active' })]);
    const apiFiring = await fetchJson(`${server.base}/api/logs/alerts/firing`, { headers });
    expect(apiFiring.body.data.alerts).toEqual([expect.objectContaining({ alertId: ruleId, domainId: 1, silencedBy: Number(silenceId) })]);

    expect(await cli(['silence', 'end', silenceId!])).toMatchObject({ code: 0, stdout: `ended silence ${silenceId}\n` });
    expect(rowsOf((await cli(['alerts', 'list', '--firing'])).stdout)[1]?.[5]).toBe('-');
    expect((await cli(['silence', 'list', '--expired'])).stdout).toMatch(new RegExp(`\\n${silenceId} +expired .* pool restart\\n`));
    // The unknown domain reads as it does alone.
    expect(await cli(['silence', 'add', '--domain', 'gone.example.com', '--for', '1h', '--comment', 'x'])).toMatchObject({ code: 1, stdout: '', stderr: 'tailhouse: no domain has the name gone.example.com\n' });

    // Each ran in the server, which logged it by its command words, and the silence by what it did.
    const log = () => server.proc.stdout.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>);
    await until(() => log().some((l) => l.component === 'control' && l.command === 'silence end'), 'the commands in the server log');
    const commands = new Set(log().filter((l) => l.component === 'control').map((l) => l.command));
    expect([...commands].sort()).toEqual(['alerts list', 'import', 'silence add', 'silence end', 'silence list']);
    expect(log()).toEqual(expect.arrayContaining([
      expect.objectContaining({ msg: 'silence added', silenceId: Number(silenceId), createdBy: 1, via: 'cli' }),
      expect.objectContaining({ msg: 'silence ended', silenceId: Number(silenceId), via: 'cli' }),
    ]));
  });
});
