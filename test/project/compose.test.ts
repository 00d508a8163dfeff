/**
 * compose.yaml against the program it runs, so that the file cannot go stale unnoticed (no image
 * registry is reachable where this is developed, so the file is checked here, never started):
 * every tailhouse service's environment is what core/config.ts reads and accepts, its command is a
 * real command of the CLI with real options, the ingest config it mounts loads and reads only
 * read-only mounts, the worker's checkpoints survive its container, the API can be scaled behind a
 * proxy whose nginx configuration nginx accepts, and the image holds the program's directories.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parse } from 'yaml';
import { z } from 'zod';
import { afterAll, describe, expect, it } from 'vitest';
import { envSchema, loadConfig } from '../../core/config.js';
import { loadIngestConfig } from '../../ingest/config.js';

const ROOT = path.resolve(import.meta.dirname, '..', '..');

/** The parts of a compose file this test reads; whatever else a service holds is compose's business. */
const serviceSchema = z.looseObject({
  build: z.string().optional(),
  image: z.string().optional(),
  command: z.array(z.string()).optional(),
  environment: z.record(z.string(), z.union([z.string(), z.number(), z.boolean()])).optional(),
  volumes: z.array(z.string()).optional(),
  ports: z.array(z.string()).optional(),
});
const composeSchema = z.looseObject({
  services: z.record(z.string(), serviceSchema),
  volumes: z.record(z.string(), z.unknown()).optional(),
});
type Service = z.infer<typeof serviceSchema>;

const compose = composeSchema.parse(parse(readFileSync(path.join(ROOT, 'compose.yaml'), 'utf8'), { merge: true }));
const services = Object.entries(compose.services);
/** The services running the image built from this repository. */
const tailhouse = services.filter(([, service]) => service.build === '.');

/**
 * A `${NAME:?message}` stands for a secret the operator sets: the value `openssl rand -hex 24`
 * gives, as the file's header suggests.
 */
const OPERATOR_SECRET = '0123456789abcdef'.repeat(3);

/**
 * Compose's interpolation: `$$` is a `$`, `${NAME:-default}` and `${NAME-default}` are checked
 * with their default, `${NAME:?message}` as set by the operator. A bare `$NAME` or `${NAME}` would
 * be empty wherever it is not set, so it is refused.
 */
function interpolate(value: string, where: string): string {
  return value.replace(/\$\$|\$\{([A-Za-z_]\w*)(?:(:?[-?])([^}]*))?\}|\$([A-Za-z_]\w*)/g, (match, _name?: string, operator?: string, argument?: string, bare?: string) => {
    if (match === '$$') return '$';
    if (bare !== undefined || operator === undefined) throw new Error(`${where}: ${match} has neither a default (:-) nor a message for the operator (:?)`);
    return operator.endsWith('-') ? (argument ?? '') : OPERATOR_SECRET;
  });
}

function environmentOf(name: string, service: Service): Record<string, string> {
  return Object.fromEntries(Object.entries(service.environment ?? {}).map(([key, value]) => [key, interpolate(String(value), `${name}.environment.${key}`)]));
}

interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
}

/** The short syntax `source:target[:mode]`. */
function mountsOf(name: string, service: Service): Mount[] {
  return (service.volumes ?? []).map((entry) => {
    const [source = '', target = '', mode] = interpolate(entry, `${name}.volumes`).split(':');
    return { source, target, readOnly: mode === 'ro' };
  });
}

const isBindMount = (mount: Mount) => mount.source.startsWith('.') || mount.source.startsWith('/');
const isWithin = (file: string, dir: string) => file === dir || file.startsWith(`${dir.replace(/\/$/, '')}/`);

/** The command's words (`ingest`, `users create`) and the value of each `--option`. */
function commandOf(service: Service): { words: string[]; options: Map<string, string> } {
  const args = service.command ?? [];
  const firstOption = args.findIndex((arg) => arg.startsWith('-'));
  const words = firstOption === -1 ? args : args.slice(0, firstOption);
  const options = new Map<string, string>();
  args.forEach((arg, i) => {
    if (arg.startsWith('--')) options.set(arg.split('=')[0]!, arg.includes('=') ? arg.slice(arg.indexOf('=') + 1) : (args[i + 1] ?? ''));
  });
  return { words, options };
}

const scratch = mkdtempSync(path.join(os.tmpdir(), 'tailhouse-compose-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe('compose.yaml', () => {
  it('runs the image built here in migrate, api, ingest', () => {
    expect(tailhouse.map(([name]) => name).sort()).toEqual(['api', 'ingest', 'migrate']);
  });

  it('gives each tailhouse service only variables the program reads, with values it accepts', () => {
    const known = new Set(Object.keys(envSchema.shape));
    for (const [name, service] of tailhouse) {
      const env = environmentOf(name, service);
      expect(Object.keys(env).filter((key) => !known.has(key)), `${name}: variables core/config.ts does not read`).toEqual([]);
      const config = loadConfig(env);
      // Server mode, on the stores of this file.
      for (const url of [config.databaseUrl, config.clickhouseUrl]) {
        expect(url, `${name}: DATABASE_URL and CLICKHOUSE_URL`).toBeDefined();
        expect(Object.keys(compose.services), `${name}: the host of ${url}`).toContain(new URL(url!).hostname);
      }
    }
  });

  it('runs real commands of the CLI (bin/tailhouse.js), with options they have', () => {
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(/^ENTRYPOINT\s+(\[.*\])\s*$/m.exec(dockerfile)?.[1]).toBe('["node", "bin/tailhouse.js"]');
    for (const [name, service] of tailhouse) {
      const { words, options } = commandOf(service);
      const help = spawnSync(process.execPath, ['bin/tailhouse.js', ...words, '--help'], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
      expect(help.status, `${name}: tailhouse ${words.join(' ')} --help\n${help.stderr}`).toBe(0);
      // commander answers an unknown command's --help with the program's help, also with 0.
      expect(help.stdout, `${name}: tailhouse ${words.join(' ')} is a command`).toContain(`Usage: tailhouse ${words.join(' ')} [options]`);
      for (const option of options.keys()) expect(help.stdout, `${name}: tailhouse ${words.join(' ')} ${option}`).toMatch(new RegExp(`^\\s+(?:-\\w, )?${option}\\b`, 'm'));
    }
  });

  it('mounts an ingest config of this repository that loads, and reads logs from read-only mounts only', async () => {
    const workers = tailhouse.filter(([, service]) => commandOf(service).options.has('--config'));
    expect(workers.map(([name]) => name)).toEqual(['ingest']);
    for (const [name, service] of workers) {
      const mounts = mountsOf(name, service);
      const configPath = commandOf(service).options.get('--config')!;
      const configMount = mounts.find((mount) => mount.target === configPath);
      expect(configMount, `${name}: a mount at ${configPath}`).toMatchObject({ readOnly: true });
      expect(configMount!.source, `${name}: ${configPath} comes from this repository`).toMatch(/^\.\//);
      const config = await loadIngestConfig(path.join(ROOT, configMount!.source));
      const files = config.sources.flatMap((source) => [source.access, source.error]).filter((file): file is string => file !== null);
      expect(files.length).toBeGreaterThan(0);
      for (const file of files) {
        const logMount = mounts.find((mount) => isBindMount(mount) && isWithin(file, mount.target));
        expect(logMount, `${name}: ${file} lies in a mounted directory`).toBeDefined();
        expect(logMount!.readOnly, `${name}: ${logMount!.target} is mounted read-only`).toBe(true);
      }
    }
  });

  it('keeps the worker\'s checkpoints (DATA_DIR/ingest) on a named volume', () => {
    for (const [name, service] of tailhouse.filter(([, s]) => commandOf(s).words[0] === 'ingest')) {
      const dataDir = environmentOf(name, service).DATA_DIR;
      expect(dataDir, `${name}: DATA_DIR`).toBeDefined();
      const mount = mountsOf(name, service).find((m) => m.target === dataDir);
      expect(mount && !isBindMount(mount) ? mount.source : null, `${name}: a named volume at ${dataDir}`).not.toBeNull();
      expect(Object.keys(compose.volumes ?? {})).toContain(mount!.source);
    }
  });

  it('scales the API behind a proxy that nginx accepts and that forwards to it', () => {
    // A fixed host port on a tailhouse service would make `--scale api=3` clash.
    expect(tailhouse.filter(([, service]) => service.ports !== undefined).map(([name]) => name)).toEqual([]);
    const proxies = services.filter(([, service]) => service.image?.startsWith('nginx:'));
    expect(proxies.map(([name]) => name)).toEqual(['proxy']);
    for (const [name, service] of proxies) {
      expect(service.ports?.length, `${name}: publishes a port`).toBe(1);
      const confs = mountsOf(name, service).filter((mount) => mount.target.startsWith('/etc/nginx/conf.d/'));
      expect(confs.length).toBe(1);
      const conf = path.join(ROOT, confs[0]!.source);
      // The image's nginx.conf includes conf.d/*.conf inside its http block.
      const main = path.join(scratch, `${name}.conf`);
      writeFileSync(main, `pid ${scratch}/nginx.pid;\nevents {}\nhttp { include ${conf}; }\n`);
      const check = spawnSync('nginx', ['-t', '-q', '-p', `${scratch}/`, '-c', main, '-e', 'stderr'], { encoding: 'utf8' });
      expect(check.status, `nginx -t of ${confs[0]!.source}: ${check.stderr}`).toBe(0);
      const directives = readFileSync(conf, 'utf8').replace(/#.*$/gm, '');
      const [, host, port] = /http:\/\/([\w-]+):(\d+)/.exec(directives) ?? [];
      const target = compose.services[host ?? ''];
      expect(target && commandOf(target).words, `${name} forwards to a service running serve`).toEqual(['serve']);
      expect(loadConfig(environmentOf(host!, target!)).port, `${name} forwards to the port ${host} listens on`).toBe(Number(port));
    }
  });
});

describe('Dockerfile', () => {
  /** Top-level entries of the repository the image does not need, and why. */
  const NOT_SHIPPED = new Set(['.ci', '.dockerignore', '.gitignore', 'bench', 'compose.yaml', 'deploy', 'docs', 'Dockerfile', 'README.md', 'scripts', 'test', 'vitest.config.ts']);

  it('copies every part of the repository that the program runs from', () => {
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const copied = new Set([...dockerfile.matchAll(/^COPY\s+(.+?)\s+\S+\s*$/gm)].flatMap((m) => m[1]!.split(/\s+/)));
    const tracked = execFileSync('git', ['ls-files'], { cwd: ROOT, encoding: 'utf8' }).split('\n').filter(Boolean).map((file) => file.split('/')[0]!);
    const needed = [...new Set(tracked)].filter((entry) => !NOT_SHIPPED.has(entry) && readdirSync(ROOT).includes(entry));
    expect(needed.filter((entry) => !copied.has(entry))).toEqual([]);
  });

  it('makes its DATA_DIR private before it becomes a volume, as every command requires (src/data-dir-perms.ts)', () => {
    const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    const dataDir = /^ENV .*\bDATA_DIR=(\S+)/m.exec(dockerfile)?.[1];
    expect(dataDir).toBeDefined();
    // The commands run as root, who owns what RUN makes.
    expect(dockerfile).not.toMatch(/^USER /m);
    const made = dockerfile.indexOf(`RUN mkdir -m 700 ${dataDir}\n`);
    expect(made).toBeGreaterThan(-1);
    expect(made).toBeLessThan(dockerfile.indexOf(`VOLUME ${dataDir}\n`));
  });
});
