/**
 * The CLI beside a running server (src/control/): with `serve` holding an embedded DATA_DIR, the
 * commands run through its control socket, on its stores, with the output and exit status they
 * have alone; an import can be interrupted and continued; a killed server's socket is no obstacle.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { JWT_SECRET } from '../../support/app.js';
import { childEnv, describeProc, exitOf, fetchJson, killChildren, ROOT, run, serve, signIn, start, stop, waitForOutput, type Proc } from '../../support/child.js';
import { accessLine, FORMAT, T0, until } from '../../support/ingest.js';

const SLOW = 240_000;
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-beside-'));
const dataDir = path.join(dir, 'data');
const ADMIN_PASSWORD = 'beside-admin-1';
const vars = { DATA_DIR: dataDir, JWT_SECRET, ADMIN_PASSWORD };
let server: { proc: Proc; base: string };

/** A command beside the server; its own environment (TAILHOUSE_PASSWORD and the like) added. */
const cli = (args: string[], extra: Record<string, string> = {}) => run(args, { ...vars, ...extra });

/** The server's structured log lines of commands it ran for the CLI. */
const controlLog = () =>
  server.proc.stdout
    .split('\n')
    .filter((l) => l.includes('"component":"control"'))
    .map((l) => JSON.parse(l) as { command: string; code: number });

/** `n` access lines in FORMAT spread over the day before T0 + 23 h, so every one is inside a 7-day window. */
function writeLog(file: string, n: number, tag: string): void {
  const fd = fs.openSync(file, 'w');
  const span = 23 * 3_600_000;
  for (let from = 0; from < n; from += 50_000) {
    let text = '';
    for (let i = from; i < Math.min(n, from + 50_000); i++) text += `${accessLine(i, undefined, T0 + Math.floor((i * span) / n)).replace('/item/', `/${tag}/`)}\n`;
    fs.writeSync(fd, text);
  }
  fs.closeSync(fd);
}

async function requestsOf(domain: string): Promise<number> {
  const res = await cli(['stats', domain, '--period', '7d', '--json']);
  expect(res.code, res.stderr).toBe(0);
  return (JSON.parse(res.stdout) as { totalRequests: number }).totalRequests;
}

beforeAll(async () => {
  server = await serve(vars);
}, SLOW);

afterAll(async () => {
  await killChildren();
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('the CLI beside a running server', () => {
  it('runs every administration command through the server, which a user then sees over HTTP', { timeout: SLOW }, async () => {
    const steps: [string[], number, RegExp | string][] = [
      [['users', 'create', '--email', 'ops@example.com', '--name', 'Ops'], 0, /^created user (\d+) ops@example.com \(user\)\n$/],
      [['domains', 'add', 'shop.example.com', '--owner', 'ops@example.com'], 0, /^added domain \d+ shop.example.com owned by ops@example.com\n$/],
      [['domains', 'add', 'old.example.com'], 0, /^added domain \d+ old.example.com\n$/],
      [['domains', 'rename', 'old.example.com', 'blog.example.com'], 0, /^renamed domain \d+ old.example.com to blog.example.com\n$/],
      [['domains', 'set-owner', 'blog.example.com', 'ops@example.com'], 0, 'domain blog.example.com is now owned by ops@example.com\n'],
      [['domains', 'list'], 0, /^ID\s+NAME\s+OWNER\s+CREATED\n\d+\s+blog.example.com\s+ops@example.com\s+\S+\n\d+\s+shop.example.com\s+ops@example.com\s+\S+\n$/],
      [['domains', 'show', 'blog.example.com'], 0, /name\s+blog.example.com\nowner\s+ops@example.com\n/],
      [['groups', 'create', 'Support'], 0, /^created group \d+ Support\n$/],
      [['groups', 'grant', 'Support', '--all', '--role', 'viewer'], 0, 'group Support sees all (viewer)\n'],
      [['users', 'update', 'ops@example.com', '--name', 'Operations', '--role', 'admin'], 0, /^updated user \d+ ops@example.com: name, role\n$/],
      [['users', 'list', '--role', 'admin'], 0, /^ID\s+E-MAIL\s+NAME\s+ROLE\s+STATE\s+LAST LOGIN\n1\s+admin@localhost\s+Administrator\s+admin\s+active\s+\S+\n\d+\s+ops@example.com\s+Operations\s+admin\s+active\s+never\n$/],
      [['users', 'show', 'ops@example.com'], 0, /permissions\s+all \(administrator\)\n/],
      [['domains', 'remove', 'blog.example.com'], 1, 'tailhouse: not removed (confirm, or pass --yes)\n'],
      [['domains', 'remove', 'blog.example.com', '--yes'], 0, /^removed domain \d+ blog.example.com and its logs\n$/],
      [['domains', 'show', 'blog.example.com'], 1, 'tailhouse: no domain has the name blog.example.com\n'],
      [['users', 'deactivate', 'admin@localhost', '--yes'], 1, /error: unknown option '--yes'/],
    ];
    for (const [args, code, expected] of steps) {
      const res = await cli(args, { TAILHOUSE_PASSWORD: 'ops-password-1' });
      expect(res.code, `${args.join(' ')}\n${res.stdout}${res.stderr}`).toBe(code);
      const shown = code === 0 ? res.stdout : res.stderr;
      if (typeof expected === 'string') expect(shown).toBe(expected);
      else expect(shown).toMatch(expected);
    }
    // Each ran in the server, which logged it by its command words only (never a password).
    // (The server's log reaches this process through a pipe, a moment after the command's answer.)
    const logged = ['users create', 'domains add', 'domains rename', 'domains remove', 'users show'];
    await until(() => logged.every((c) => controlLog().some((l) => l.command === c)), 'the commands in the server log');
    expect(server.proc.stdout).not.toContain('ops-password-1');

    // The server's own API sees what the commands did.
    const login = await signIn(server.base, 'ops@example.com', 'ops-password-1');
    expect(login.status).toBe(200);
    const headers = { authorization: `Bearer ${login.body.data.accessToken}` };
    const domains = await fetchJson(`${server.base}/api/domains`, { headers });
    expect(domains.body.data.domains.map((d: { name: string }) => d.name)).toEqual(['shop.example.com']);

    // Tokens, a password reset (generated, shown once) that ends the sessions, the last admin kept.
    const token = await cli(['tokens', 'create', '--user', 'ops@example.com', '--name', 'deploy']);
    expect(token.code, token.stderr).toBe(0);
    expect(token.stdout).toMatch(/^thk_\S+\n$/);
    expect((await fetchJson(`${server.base}/api/domains`, { headers: { authorization: `Bearer ${token.stdout.trim()}` } })).status).toBe(200);
    const listed = await cli(['tokens', 'list', '--user', 'ops@example.com']);
    const tokenId = listed.stdout.split('\t')[0]!;
    expect(listed.stdout).toMatch(new RegExp(`^${tokenId}\\tdeploy\\tactive\\tlast used \\d{4}-`));
    expect((await cli(['tokens', 'revoke', tokenId])).stdout).toBe(`revoked token ${tokenId}\n`);
    expect((await fetchJson(`${server.base}/api/domains`, { headers: { authorization: `Bearer ${token.stdout.trim()}` } })).status).toBe(401);

    const reset = await cli(['users', 'reset-password', 'ops@example.com']);
    expect(reset.code, reset.stderr).toBe(0);
    expect(reset.stderr).toBe('set a new password for ops@example.com; it is shown once:\n');
    const newPassword = reset.stdout.trim();
    expect((await signIn(server.base, 'ops@example.com', 'ops-password-1')).status).toBe(401);
    expect((await signIn(server.base, 'ops@example.com', newPassword)).status).toBe(200);
    expect((await fetchJson(`${server.base}/api/domains`, { headers })).status).toBe(401);

    expect(await cli(['users', 'update', 'ops@example.com', '--active', 'false'])).toMatchObject({ code: 0 });
    const lastAdmin = await cli(['users', 'deactivate', 'admin@localhost']);
    expect(lastAdmin).toMatchObject({ code: 1, stderr: 'tailhouse: Cannot remove the last active administrator\n' });
    expect(await cli(['users', 'delete', 'ops@example.com', '--yes'])).toMatchObject({ code: 0, stdout: 'deleted user 2 ops@example.com\n' });
    // The operator's mistakes read as they do alone.
    expect(await cli(['users', 'show', 'nobody@example.com'])).toMatchObject({ code: 1, stderr: 'tailhouse: no user has the e-mail nobody@example.com\n' });
    expect(await cli(['domains', 'add', 'bad_name'])).toMatchObject({ code: 1 });
    const help = await cli(['domains', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/Usage: tailhouse domains/);
    expect(help.stdout).toMatch(/set-owner/);
  });

  it("domains add --from reads the shell's file and standard input through the server", { timeout: SLOW }, async () => {
    const file = path.join(dir, 'names.txt');
    fs.writeFileSync(file, 'beside-one.example.com\nbeside-two.example.com\n');
    const fromFile = await cli(['domains', 'add', '--from', path.relative(ROOT, file)]);
    expect(fromFile.code, fromFile.stderr).toBe(0);
    expect(fromFile.stdout).toBe('domains add: 2 created, 0 already registered, 0 repeated, 0 invalid\n');

    // More than one frame of standard input (65,536 characters).
    const names = Array.from({ length: 3_000 }, (_, i) => `n${i}.beside.example.com`);
    const fromStdin = await run(['domains', 'add', '--from', '-'], vars, `${names.join('\n')}\nbeside-one.example.com\n`);
    expect(fromStdin.code, fromStdin.stderr).toBe(0);
    expect(fromStdin.stdout).toMatch(/^line 3001: beside-one.example.com already registered \(domain \d+\)\ndomains add: 3,000 created, 1 already registered, 0 repeated, 0 invalid\n$/);

    // Past its limit the server stops reading and refuses; the CLI stops sending.
    const tooLarge = await run(['domains', 'add', '--from', '-'], vars, `${'#'.repeat(1023)}\n`.repeat(9 * 1024));
    expect(tooLarge.code).toBe(1);
    expect(tooLarge.stderr).toBe('tailhouse: standard input holds more than 8,388,608 bytes\n');

    // It ran in the server (the only `domains add` of this file that fails).
    await until(() => controlLog().some((l) => l.command === 'domains add' && l.code === 1), 'the refused command in the server log');
  });

  it('imports a 1M-line file through the server with a progress bar on a terminal and its summary', { timeout: SLOW }, async () => {
    const file = path.join(dir, 'million.log');
    writeLog(file, 1_000_000, 'm');
    expect((await cli(['domains', 'add', 'million.example.com'])).code).toBe(0);
    // `script` gives the command a terminal, as an operator's shell does: the progress bar is drawn.
    const command = [process.execPath, path.join(ROOT, 'bin', 'tailhouse.js'), 'import', '--domain', 'million.example.com', '--format', FORMAT, file].map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(' ');
    const child = spawn('script', ['-qefc', command, '/dev/null'], { cwd: ROOT, env: childEnv(vars), stdio: ['ignore', 'pipe', 'pipe'] });
    const proc: Proc = { child, stdout: '', stderr: '', exited: new Promise((resolve) => child.once('close', (code, signal) => resolve({ code, signal }))) };
    child.stdout.setEncoding('utf8').on('data', (c: string) => (proc.stdout += c));
    child.stderr.setEncoding('utf8').on('data', (c: string) => (proc.stderr += c));
    const { code } = await exitOf(proc, SLOW);
    expect(code, describeProc(proc)).toBe(0);
    expect(proc.stdout).toMatch(/importing \[=+-*\] \d+% \| [1-9]\d* lines \| \d+ lines\/s/);
    expect(proc.stdout).toMatch(/million\.log: 1000000 lines, 1000000 stored, 0 rejected\r?\n/);
    expect(proc.stdout).toMatch(/imported 1000000 lines from 1 file\(s\): 1000000 stored, 0 rejected, in [\d.]+ s/);
    await until(() => controlLog().some((l) => l.command === 'import'), 'the import in the server log');
    expect(controlLog().filter((l) => l.command === 'import')).toEqual([expect.objectContaining({ code: 0 })]);
    expect(await requestsOf('million.example.com')).toBe(1_000_000);
    const report = await cli(['stats', 'million.example.com', '--period', '7d']);
    expect(report.code, report.stderr).toBe(0);
    expect(report.stdout).toMatch(/^million.example.com, the last 7d\n\nrequests +1000000\n/);
    expect(report.stdout, report.stdout).toMatch(/\nStatus codes\n {2}COUNT +% +VALUE\n {2}900000 +90\.00 +#{18}\.{2} +200\n {2}100000 +10\.00 +#{2}\.{18} +500\n/);

    // ingest validate reads the config and its files where the operator is, against the server's domains.
    const config = path.join(dir, 'ingest.yaml');
    fs.writeFileSync(config, `sources:\n  - domain: million.example.com\n    access: ${JSON.stringify(file)}\n    format: ${JSON.stringify(FORMAT)}\n  - domain: unknown.example.com\n    access: ${JSON.stringify(path.join(dir, 'unknown.log'))}\n`);
    const validated = await cli(['ingest', 'validate', '--config', config, '--lines', '2']);
    expect(validated.code).toBe(1);
    expect(validated.stdout, validated.stdout).toMatch(/sources\[0\]: domain million.example.com\n.*first 2 lines\n +line 1 .* million.example.com +500 +GET \/m\/0\?q=0\n/);
    expect(validated.stdout).toMatch(/sources\[1\]: domain unknown.example.com is not registered.*\n.*missing file/);
    expect(validated.stdout).toMatch(/\n2 problems\n$/);
  });

  it('Ctrl-C stops an import at a clean point; the same command again stores every line exactly once', { timeout: SLOW }, async () => {
    const file = path.join(dir, 'interrupted.log');
    // Long enough to be interrupted in the middle: the import sends up to 200,000 lines at once
    // (STAGED_CUT_LIMITS), and each poll below is a command of its own.
    const lines = 1_500_000;
    writeLog(file, lines, 'i');
    expect((await cli(['domains', 'add', 'interrupted.example.com'])).code).toBe(0);
    const args = ['import', '--domain', 'interrupted.example.com', '--format', FORMAT, file];
    const first = start(args, vars);
    // Interrupted once the server has stored some of it.
    await until(async () => (await requestsOf('interrupted.example.com')) > 0, 'the first rows of the import', 60_000, 100);
    first.child.kill('SIGINT');
    const { code } = await exitOf(first, 60_000);
    expect(code, describeProc(first)).toBe(130);
    expect(first.stdout).toMatch(/interrupted: run the same command again to continue where it stopped\n$/);
    const storedFirst = Number(/: (\d+) stored/.exec(first.stdout)![1]);
    expect(storedFirst).toBeGreaterThan(0);
    expect(storedFirst).toBeLessThan(lines);

    const again = await cli(args);
    expect(again.code, again.stderr).toBe(0);
    expect(Number(/: (\d+) stored/.exec(again.stdout)![1])).toBe(lines - storedFirst);
    expect(again.stdout).toMatch(/bytes already imported before/);
    expect(await requestsOf('interrupted.example.com')).toBe(lines);
  });

  it('a socket left by a killed server is no obstacle: the commands open the stores themselves', { timeout: SLOW }, async () => {
    expect((await cli(['domains', 'add', 'stale.example.com'])).code).toBe(0);
    server.proc.child.kill('SIGKILL');
    await exitOf(server.proc);
    const runDir = path.join(dataDir, 'run');
    expect(fs.readdirSync(runDir).filter((f) => f.endsWith('.sock'))).toHaveLength(1);
    const listed = await cli(['domains', 'list']);
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(/stale.example.com/);
    // The dead server's socket is gone, and the command's own with it.
    expect(fs.readdirSync(runDir)).toEqual([]);
    // Alone and beside a server, the same command prints the same.
    server = await serve(vars);
    const beside = await cli(['domains', 'list']);
    expect(beside).toEqual(listed);
    await until(() => controlLog().length > 0, 'the command in the new server log');
    expect(controlLog().map((l) => l.command)).toEqual(['domains list']);
    await stop(server.proc);
  });

  it('the commands that are a process of their own are refused beside the server, naming it', { timeout: SLOW }, async () => {
    server = await serve(vars);
    const migrate = await cli(['migrate']);
    expect(migrate.code).toBe(1);
    expect(migrate.stderr).toContain(`DATA_DIR ${dataDir} is in use by process ${server.proc.child.pid}`);
    await waitForOutput(server.proc, /"msg":"listening"/);
    await stop(server.proc);
  });
});
