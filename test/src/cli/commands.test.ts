import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { describeProc, fetchJson, killChildren, ROOT, run, serve, signIn, stop, type Proc } from '../../support/child.js';
import { freePort } from '../../support/ports.js';

// The real program, `node bin/tailhouse.js …`, as child processes. Always embedded mode: the
// children get a minimal environment of their own (no DATABASE_URL from the test run).

const SLOW = 90_000;
const tempDirs: string[] = [];


const bearer = (token: string) => ({ headers: { authorization: `Bearer ${token}` } });

const PASSWORD_LINE = /^.*created with password (\S+).*$/gm;

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-cli-'));
  tempDirs.push(dir);
  return dir;
}

afterAll(async () => {
  await killChildren();
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
});

describe('tailhouse serve', () => {
  let dataDir: string;
  let vars: Record<string, string>;
  let password: string;
  let accessToken: string;
  let jwtSecret: string;
  let first: { proc: Proc; base: string } | undefined;

  beforeAll(() => {
    dataDir = tempDir();
    vars = { DATA_DIR: dataDir };
  });

  it(
    'first start on an empty DATA_DIR prints the generated password once, and it signs in',
    async () => {
      first = await serve(vars);
      const lines = [...first.proc.stdout.matchAll(PASSWORD_LINE)];
      expect(lines, describeProc(first.proc)).toHaveLength(1);
      expect(lines[0]![0]).toContain('admin@localhost');
      password = lines[0]![1]!;
      expect(password.length).toBeGreaterThanOrEqual(12);
      // Printed once: not repeated in the log lines, not on stderr.
      expect(first.proc.stdout.split(password)).toHaveLength(2);
      expect(first.proc.stderr).not.toContain(password);

      const login = await signIn(first.base, 'admin@localhost', password);
      expect(login.status).toBe(200);
      expect(login.body.data.user).toMatchObject({ email: 'admin@localhost', role: 'admin' });
      accessToken = login.body.data.accessToken;
      expect((await signIn(first.base, 'admin@localhost', `${password}x`)).status).toBe(401);

      const secretFile = path.join(dataDir, 'jwt-secret');
      expect(fs.statSync(secretFile).mode & 0o777).toBe(0o600);
      jwtSecret = fs.readFileSync(secretFile, 'utf8');
      expect(jwtSecret.trim().length).toBeGreaterThanOrEqual(32);
    },
    SLOW,
  );

  it(
    'a second serve or migrate on the same DATA_DIR fails with a message naming DATA_DIR',
    async () => {
      expect(first).toBeDefined();
      const second = await run(['serve'], { ...vars, PORT: String(await freePort()) });
      expect(second.code).not.toBe(0);
      expect(second.stderr).toContain('DATA_DIR');
      expect(second.stderr).toContain(dataDir);
      expect(second.stdout).not.toContain('"msg":"listening"');

      const migrate = await run(['migrate'], vars);
      expect(migrate.code).not.toBe(0);
      expect(migrate.stderr).toContain('DATA_DIR');
      expect(migrate.stdout).not.toMatch(/applied \d+/);

      // The administration commands run through the server instead (test/src/cli/beside-server.test.ts).

      // The first one is unharmed.
      const health = await fetchJson(`${first!.base}/readyz`);
      expect(health).toEqual({ status: 200, body: { success: true } });
    },
    SLOW,
  );

  it(
    'SIGTERM stops it with exit code 0 and "stopped" in the log',
    async () => {
      await stop(first!.proc);
      expect(fs.existsSync(path.join(dataDir, 'tailhouse.pid'))).toBe(false);
    },
    SLOW,
  );

  it(
    'a restart keeps the administrator, its password and the JWT secret',
    async () => {
      const again = await serve(vars);
      try {
        expect(again.proc.stdout).not.toMatch(/created with password/);
        expect(again.proc.stdout).not.toContain(password);
        const secretFile = path.join(dataDir, 'jwt-secret');
        expect(fs.readFileSync(secretFile, 'utf8')).toBe(jwtSecret);
        expect(fs.statSync(secretFile).mode & 0o777).toBe(0o600);

        // A token issued before the restart still verifies: same secret, same user.
        const me = await fetchJson(`${again.base}/api/users`, bearer(accessToken));
        expect(me.status).toBe(200);
        expect(me.body.data.users.map((u: { email: string }) => u.email)).toEqual(['admin@localhost']);
        expect((await signIn(again.base, 'admin@localhost', password)).status).toBe(200);
      } finally {
        await stop(again.proc);
      }
    },
    SLOW,
  );

  it(
    'an invalid variable stops it at once with one stderr line naming the variable',
    async () => {
      const bad = await run(['serve'], { DATA_DIR: tempDir(), PORT: 'abc' });
      expect(bad.code).not.toBe(0);
      const lines = bad.stderr.split('\n').filter((l) => l.trim() !== '');
      expect(lines, bad.stderr).toHaveLength(1);
      expect(lines[0]).toMatch(/\bPORT\b/);
      expect(bad.stdout).not.toContain('listening');

      const secret = await run(['serve'], { DATA_DIR: tempDir(), JWT_SECRET: 'short-secret-shh' });
      expect(secret.code).not.toBe(0);
      const secretLines = secret.stderr.split('\n').filter((l) => l.trim() !== '');
      expect(secretLines).toHaveLength(1);
      expect(secretLines[0]).toMatch(/\bJWT_SECRET\b/);
      expect(secret.stderr).not.toContain('short-secret-shh');
    },
    SLOW,
  );
});

describe('tailhouse users, domains and tokens', () => {
  let dataDir: string;
  let vars: Record<string, string>;
  let userId: number;
  let domainId: number;
  let token: string;
  let tokenId: number;

  beforeAll(() => {
    dataDir = tempDir();
    vars = { DATA_DIR: dataDir };
  });

  it(
    'users create',
    async () => {
      const created = await run(['users', 'create', '--email', ' Ops@Example.COM ', '--password', 'ops-password-1', '--name', 'Ops'], vars);
      expect(created.code, created.stderr).toBe(0);
      const match = /^created user (\d+) ops@example\.com \(user\)\n$/.exec(created.stdout);
      expect(match, created.stdout).not.toBeNull();
      userId = Number(match![1]);

      const duplicate = await run(['users', 'create', '--email', 'ops@example.com', '--password', 'ops-password-1'], vars);
      expect(duplicate.code).not.toBe(0);
      expect(duplicate.stdout).toBe('');
    },
    SLOW,
  );

  it(
    'users create refuses a bad password or e-mail before opening the stores',
    async () => {
      const short = await run(['users', 'create', '--email', 'x@example.com', '--password', 'short'], vars);
      expect(short.code).not.toBe(0);
      expect(short.stderr).toMatch(/--password/);
      const badEmail = await run(['users', 'create', '--email', 'not-an-email', '--password', 'long-enough-1'], vars);
      expect(badEmail.code).not.toBe(0);
      expect(badEmail.stderr).toMatch(/--email/);
    },
    SLOW,
  );

  it(
    'domains add',
    async () => {
      const added = await run(['domains', 'add', 'Shop.Example.COM.', '--owner', 'ops@example.com'], vars);
      expect(added.code, added.stderr).toBe(0);
      const match = /^added domain (\d+) shop\.example\.com owned by ops@example\.com\n$/.exec(added.stdout);
      expect(match, added.stdout).not.toBeNull();
      domainId = Number(match![1]);

      const again = await run(['domains', 'add', 'shop.example.com'], vars);
      expect(again.code).not.toBe(0);
      expect(again.stderr).toContain('already exists');

      const badName = await run(['domains', 'add', 'bad name'], vars);
      expect(badName.code).not.toBe(0);
      expect(badName.stderr).toContain('domain name');

      const noOwner = await run(['domains', 'add', 'other.example.com', '--owner', 'nobody@example.com'], vars);
      expect(noOwner.code).not.toBe(0);
      expect(noOwner.stderr).toContain('nobody@example.com');
    },
    SLOW,
  );

  it(
    'domains add --from FILE: a line per name not created, one summary line; the owner by e-mail',
    async () => {
      const owner = await run(['users', 'create', '--email', 'reseller@example.com', '--password', 'reseller-password-1'], vars);
      const ownerId = Number(/^created user (\d+) /.exec(owner.stdout)?.[1]);
      const file = path.join(tempDir(), 'names.txt');
      fs.writeFileSync(file, '# our sites\n\nbulk-one.example.com\nShop.Example.COM\n  Bulk-Two.example.com.  \r\nbulk-one.example.com\n');
      const added = await run(['domains', 'add', '--from', file, '--owner', 'reseller@example.com'], vars);
      expect(added.code, added.stderr).toBe(0);
      expect(added.stdout).toBe(
        `line 4: shop.example.com already registered (domain ${domainId})\n` +
          'line 6: bulk-one.example.com repeats line 3\n' +
          'domains add: 2 created, 1 already registered, 1 repeated, 0 invalid\n',
      );
      const listed = await run(['domains', 'list', '--json', '--search', 'bulk-'], vars);
      expect(JSON.parse(listed.stdout).map((d: { name: string; ownerId: number }) => [d.name, d.ownerId])).toEqual([
        ['bulk-one.example.com', ownerId],
        ['bulk-two.example.com', ownerId],
      ]);

      // The same file again: nothing created, nothing wrong.
      const again = await run(['domains', 'add', '--from', file], vars);
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout.split('\n').at(-2)).toBe('domains add: 0 created, 3 already registered, 1 repeated, 0 invalid');
    },
    SLOW,
  );

  it(
    'domains add --from -: 10,000 names from standard input, only the summary line',
    async () => {
      const names = Array.from({ length: 10_000 }, (_, i) => `n${i}.stdin.example.com`);
      const added = await run(['domains', 'add', '--from', '-'], vars, `${names.join('\n')}\n`);
      expect(added.code, added.stderr).toBe(0);
      expect(added.stdout).toBe('domains add: 10,000 created, 0 already registered, 0 repeated, 0 invalid\n');
      const shown = await run(['domains', 'show', 'n9999.stdin.example.com'], vars);
      expect(shown.code, shown.stderr).toBe(0);
    },
    SLOW,
  );

  it(
    'domains add --from: an invalid name adds nothing and exits 1; too many names, no names, or a name beside --from are refused',
    async () => {
      const invalid = await run(['domains', 'add', '--from', '-'], vars, 'bulk-never.example.com\nbad name\n# fine\nx..y\n');
      expect(invalid.code).toBe(1);
      expect(invalid.stdout).toBe(
        'line 2: "bad name" must be a host name such as shop.example.com\n' +
          'line 4: "x..y" must be a host name such as shop.example.com\n' +
          'domains add: 2 invalid of 3 names; nothing added: correct them and run again\n',
      );
      expect((await run(['domains', 'show', 'bulk-never.example.com'], vars)).code).toBe(1);

      const tooMany = await run(['domains', 'add', '--from', '-'], vars, Array.from({ length: 10_001 }, (_, i) => `n${i}.over.example.com\n`).join(''));
      expect(tooMany.code).toBe(1);
      expect(tooMany.stderr).toBe('tailhouse: standard input holds 10,001 names; at most 10,000 are added at once: split it\n');

      const empty = await run(['domains', 'add', '--from', '-'], vars, '# nothing yet\n\n');
      expect(empty.code).toBe(1);
      expect(empty.stderr).toContain('standard input holds no names');

      const missing = await run(['domains', 'add', '--from', path.join(tempDir(), 'missing.txt')], vars);
      expect(missing.code).toBe(1);
      expect(missing.stderr).toContain('missing.txt');

      for (const args of [['domains', 'add', 'x.example.com', '--from', '-'], ['domains', 'add']]) {
        const both = await run(args, vars, '');
        expect(both.code).toBe(1);
        expect(both.stderr).toBe('tailhouse: give either a domain name or --from FILE\n');
      }
    },
    SLOW,
  );

  it(
    'tokens create prints only the token on stdout; tokens list shows it',
    async () => {
      const created = await run(['tokens', 'create', '--user', 'ops@example.com', '--name', 'ci deploy'], vars);
      expect(created.code, created.stderr).toBe(0);
      expect(created.stdout).toMatch(/^thk_[A-Za-z0-9_-]{43}\n$/);
      token = created.stdout.trim();
      const idMatch = /created token (\d+) "ci deploy" for ops@example\.com/.exec(created.stderr);
      expect(idMatch, created.stderr).not.toBeNull();
      tokenId = Number(idMatch![1]);

      const listed = await run(['tokens', 'list', '--user', 'ops@example.com'], vars);
      expect(listed.code, listed.stderr).toBe(0);
      expect(listed.stdout).toBe(`${tokenId}\tci deploy\tactive\tlast used never\n`);
      expect(listed.stdout).not.toContain(token);

      const unknownUser = await run(['tokens', 'create', '--user', 'nobody@example.com', '--name', 'x'], vars);
      expect(unknownUser.code).not.toBe(0);
      expect(unknownUser.stdout).toBe('');
    },
    SLOW,
  );

  it(
    'serve accepts the token as Bearer with its user’s rights',
    async () => {
      const server = await serve(vars);
      try {
        const me = await fetchJson(`${server.base}/api/users/${userId}`, bearer(token));
        expect(me.status).toBe(200);
        expect(me.body.data).toMatchObject({ id: userId, email: 'ops@example.com', name: 'Ops', role: 'user' });
        const domains = await fetchJson(`${server.base}/api/domains`, bearer(token));
        expect(domains.status).toBe(200);
        expect(domains.body.data.domains).toEqual([expect.objectContaining({ id: domainId, name: 'shop.example.com', ownerId: userId })]);
        // A plain user: no right to list users.
        expect((await fetchJson(`${server.base}/api/users`, bearer(token))).status).toBe(403);
        // The CLI-created user signs in with its password too.
        expect((await signIn(server.base, 'ops@example.com', 'ops-password-1')).status).toBe(200);
      } finally {
        await stop(server.proc);
      }
      const listed = await run(['tokens', 'list', '--user', 'ops@example.com'], vars);
      expect(listed.stdout).toMatch(new RegExp(`^${tokenId}\\tci deploy\\tactive\\tlast used \\d{4}-\\d{2}-\\d{2}T[\\d:.]+Z\\n$`));
    },
    SLOW,
  );

  it(
    'tokens revoke',
    async () => {
      const revoked = await run(['tokens', 'revoke', String(tokenId)], vars);
      expect(revoked.code, revoked.stderr).toBe(0);
      expect(revoked.stdout).toBe(`revoked token ${tokenId}\n`);

      const twice = await run(['tokens', 'revoke', String(tokenId)], vars);
      expect(twice.code).not.toBe(0);
      expect(twice.stderr).toContain(String(tokenId));

      const bad = await run(['tokens', 'revoke', 'abc'], vars);
      expect(bad.code).not.toBe(0);

      const listed = await run(['tokens', 'list', '--user', 'ops@example.com'], vars);
      expect(listed.stdout).toMatch(new RegExp(`^${tokenId}\\tci deploy\\trevoked \\d{4}-`));
    },
    SLOW,
  );

  it(
    'a revoked token answers 401',
    async () => {
      const server = await serve(vars);
      try {
        const res = await fetch(`${server.base}/api/users/${userId}`, bearer(token));
        expect(res.status).toBe(401);
        expect(res.headers.get('www-authenticate')).toBe('Bearer');
        expect(await res.json()).toEqual({ success: false, error: 'Authentication required' });
      } finally {
        await stop(server.proc);
      }
    },
    SLOW,
  );
});

describe('tailhouse migrate', () => {
  it(
    'applies every migration on an empty DATA_DIR, then none',
    async () => {
      const count = (dir: string) => fs.readdirSync(path.join(ROOT, 'sql', dir)).filter((f) => f.endsWith('.sql')).length;
      const vars = { DATA_DIR: tempDir() };
      const firstRun = await run(['migrate'], vars);
      expect(firstRun.code, firstRun.stderr).toBe(0);
      expect(firstRun.stdout).toBe(`applied ${count('postgres')} Postgres and ${count('clickhouse')} ClickHouse migrations\n`);
      expect(count('postgres')).toBeGreaterThan(0);

      const secondRun = await run(['migrate'], vars);
      expect(secondRun.code, secondRun.stderr).toBe(0);
      expect(secondRun.stdout).toBe('applied 0 Postgres and 0 ClickHouse migrations\n');
      expect(fs.existsSync(path.join(vars.DATA_DIR, 'tailhouse.pid'))).toBe(false);
    },
    SLOW,
  );
});
