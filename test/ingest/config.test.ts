import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadIngestConfig, parseIngestConfig, type IngestConfig } from '../../ingest/config.js';
import { ConfigError } from '../../core/config.js';

const FILE = '/etc/tailhouse/ingest.yaml';
const AT = `ingest config ${FILE}`;
const tempDirs: string[] = [];

afterAll(() => {
  for (const dir of tempDirs) fs.rmSync(dir, { recursive: true, force: true });
});

/** The problem lines of an invalid config (fails the test when it is accepted). */
function problemsOf(yaml: string): string[] {
  try {
    parseIngestConfig(yaml, FILE);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).problems;
  }
  throw new Error(`accepted:\n${yaml}`);
}

describe('valid ingest configs', () => {
  it('reads file sources and a syslog listener with their defaults', () => {
    const config = parseIngestConfig(
      `sources:
  - domain: shop.example.com            # a registered domain name
    access: /var/log/nginx/shop.access.log
    error: /var/log/nginx/shop.error.log
    format: combined
  - access: /var/log/nginx/all.access.log
    format: '$host $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time'
syslog:
  udp: 127.0.0.1:5514
  tcp: 127.0.0.1:5514
  tags:
    nginx_shop: { domain: shop.example.com, type: access, format: combined }
`,
      FILE,
    );
    expect(config).toEqual<IngestConfig>({
      path: FILE,
      sources: [
        {
          domain: 'shop.example.com',
          access: '/var/log/nginx/shop.access.log',
          error: '/var/log/nginx/shop.error.log',
          format: 'combined',
          timezone: 'UTC',
          startAt: 'beginning',
          register: null,
        },
        {
          domain: null,
          access: '/var/log/nginx/all.access.log',
          error: null,
          format: '$host $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time',
          timezone: 'UTC',
          startAt: 'beginning',
          register: null,
        },
      ],
      syslog: {
        udp: { host: '127.0.0.1', port: 5514 },
        tcp: { host: '127.0.0.1', port: 5514 },
        timezone: 'UTC',
        tags: new Map([['nginx_shop', { domain: 'shop.example.com', type: 'access', format: 'combined', timezone: 'UTC' }]]),
      },
    });
  });

  it('reads every option: zones, startAt, error routes, IPv6 and port 0, lower-cased domains', () => {
    const config = parseIngestConfig(
      `sources:
  - domain: Blog.Example.COM
    error: /var/log/nginx/blog.error.log
    timezone: Europe/Paris
    startAt: end
    format: main
syslog:
  udp: "[::1]:0"
  timezone: America/New_York
  tags:
    nginx_blog_err: { domain: blog.example.com, type: error }
    nginx_paris_err: { type: error, timezone: Europe/Paris }
    nginx:
      domain: shop.example.com
`,
      FILE,
    );
    expect(config.sources).toEqual([
      { domain: 'blog.example.com', access: null, register: null, error: '/var/log/nginx/blog.error.log', format: 'main', timezone: 'Europe/Paris', startAt: 'end' },
    ]);
    expect(config.syslog).toEqual({
      udp: { host: '::1', port: 0 },
      tcp: null,
      timezone: 'America/New_York',
      tags: new Map([
        ['nginx_blog_err', { domain: 'blog.example.com', type: 'error', format: 'combined', timezone: 'America/New_York' }],
        ['nginx_paris_err', { domain: null, type: 'error', format: 'combined', timezone: 'Europe/Paris' }],
        ['nginx', { domain: 'shop.example.com', type: 'access', format: 'combined', timezone: 'America/New_York' }],
      ]),
    });
  });

  it('accepts a config with syslog only, or sources only', () => {
    expect(parseIngestConfig('syslog:\n  tcp: localhost:6514\n  tags:\n    nginx: { domain: a.example.com }\n', FILE).sources).toEqual([]);
    expect(parseIngestConfig('sources:\n  - domain: a.example.com\n    access: /a.log\n', FILE).syslog).toBeNull();
  });

  it('takes relative paths from the directory of the config file', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-ingest-config-'));
    tempDirs.push(dir);
    const file = path.join(dir, 'ingest.yaml');
    fs.writeFileSync(file, 'sources:\n  - domain: shop.example.com\n    access: logs/shop.access.log\n    error: ../shop.error.log\n');
    const config = await loadIngestConfig(file);
    expect(config.path).toBe(file);
    expect(config.sources[0]).toMatchObject({ access: path.join(dir, 'logs/shop.access.log'), error: path.join(path.dirname(dir), 'shop.error.log') });
  });

  it('routes a tag named like an Object member to nothing unless configured', () => {
    const config = parseIngestConfig('syslog:\n  udp: 127.0.0.1:5514\n  tags:\n    nginx: { type: error }\n', FILE);
    expect(config.syslog?.tags.get('constructor')).toBeUndefined();
    expect(config.syslog?.tags.get('toString')).toBeUndefined();
  });
});

describe('invalid ingest configs: one line per problem, naming file, line and field', () => {
  it('cannot read a missing file', async () => {
    const missing = path.join(os.tmpdir(), 'tailhouse-no-such-dir', 'ingest.yaml');
    await expect(loadIngestConfig(missing)).rejects.toThrow(`ingest config ${missing}: cannot read it (ENOENT)`);
  });

  it.each<[string, string, string[]]>([
    ['an empty file', '', [`${AT}: needs sources or syslog: nothing to ingest`]],
    ['a list at the top', '- access: /a.log\n', [`${AT}:1: must be a YAML mapping with sources and/or syslog`]],
    ['an unknown top-level field', 'source:\n  - access: /a.log\n', [`${AT}:1: source: unknown field (known: sources, syslog)`, `${AT}:1: needs sources or syslog: nothing to ingest`]],
    ['sources not a list', 'sources: /var/log/nginx/access.log\n', [`${AT}:1: sources: must be a list of sources (got "/var/log/nginx/access.log")`]],
    ['a source without files', 'sources:\n  - access: /a.log\n  - domain: shop.example.com\n    format: main\n', [`${AT}:3: sources[1]: needs access or error (a log file path)`]],
    [
      'a misspelt field',
      'sources:\n  - access: /a.log\n    start_at: end\n',
      [`${AT}:3: sources[0].start_at: unknown field (known: domain, access, error, format, timezone, startAt, register)`],
    ],
    [
      'a format typo',
      'sources:\n  - access: /a.log\n  - access: /b.log\n    format: comined\n',
      [`${AT}:4: sources[1].format: must be combined, main or an nginx log_format string with $variables (got "comined")`],
    ],
    ['an empty path', 'sources:\n  - access: ""\n', [`${AT}:2: sources[0].access: must be a file path (got "")`]],
    ['a path left empty in YAML', 'sources:\n  - access:\n', [`${AT}:2: sources[0].access: must be a file path (got null)`]],
    ['a bad domain', 'sources:\n  - domain: shop_example\n    access: /a.log\n', [`${AT}:2: sources[0].domain: must be a host name such as shop.example.com (got "shop_example")`]],
    ['an unknown zone', 'sources:\n  - error: /e.log\n    timezone: Europe/Atlantis\n', [`${AT}:3: sources[0].timezone: must be an IANA time zone such as UTC or Europe/Paris (got "Europe/Atlantis")`]],
    ['a bad startAt', 'sources:\n  - access: /a.log\n    startAt: 0\n', [`${AT}:3: sources[0].startAt: must be beginning or end (got 0)`]],
    [
      'one file read twice',
      'sources:\n  - access: /var/log/a.log\n    format: main\n    domain: a.example.com\n  - domain: b.example.com\n    access: /var/log/b.log\n    error: /var/log/a.log\n',
      [`${AT}:7: sources[1].error: /var/log/a.log is already read by sources[0].access`],
    ],
    [
      'no domain and no $host in the format',
      'sources:\n  - access: /a.log\nsyslog:\n  udp: 127.0.0.1:5514\n  tags:\n    nginx: { format: main }\n    nginx_all: { format: \'$host [$time_local] "$request" $status\' }\n',
      [
        `${AT}:2: sources[0].format: has no $host or $server_name to pick each line's domain: add one, or give the source a domain`,
        `${AT}:6: syslog.tags.nginx.format: has no $host or $server_name to pick each line's domain: add one, or give the source a domain`,
      ],
    ],
    [
      'a format the compiler refuses',
      'sources:\n  - domain: a.example.com\n    access: /a.log\n    format: \'$remote_addr "$request"\'\n',
      [`${AT}:4: sources[0].format: log format: no time variable ($time_local, $time_iso8601 or $msec)`],
    ],
    ['a source that is only a path', 'sources:\n  - /var/log/nginx/access.log\n', [`${AT}:2: sources[0]: must be a mapping with access and/or error (got "/var/log/nginx/access.log")`]],
    ['syslog as a string', 'syslog: 127.0.0.1:5514\n', [`${AT}:1: syslog: must be a mapping with udp and/or tcp, and tags (got "127.0.0.1:5514")`]],
    ['syslog without tags', 'syslog:\n  udp: 127.0.0.1:5514\n', [`${AT}:1: syslog.tags: must be a mapping of nginx syslog tags to routes`]],
    ['a route that is a string', 'syslog:\n  udp: 127.0.0.1:5514\n  tags:\n    nginx: shop.example.com\n', [`${AT}:4: syslog.tags.nginx: must be a mapping of domain, type, format, timezone (got "shop.example.com")`]],
    ['syslog without listeners', 'syslog:\n  tags:\n    nginx: {}\n', [`${AT}:1: syslog: needs udp or tcp (HOST:PORT to listen on)`]],
    ['syslog without routes', 'syslog:\n  udp: 127.0.0.1:5514\n  tags: {}\n', [`${AT}:3: syslog.tags: needs at least one tag route`]],
    [
      'a bad listen address',
      'syslog:\n  udp: 5514\n  tcp: 127.0.0.1:70000\n  tags:\n    nginx: {}\n',
      [
        `${AT}:2: syslog.udp: must be HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:5514 or [::1]:5514 (got 5514)`,
        `${AT}:3: syslog.tcp: must be HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:5514 or [::1]:5514 (got "127.0.0.1:70000")`,
      ],
    ],
    [
      'a tag nginx would refuse',
      'syslog:\n  udp: 127.0.0.1:5514\n  tags:\n    nginx-shop: { domain: shop.example.com }\n',
      [`${AT}:4: syslog.tags.nginx-shop: is not an nginx syslog tag: 1 to 32 letters, digits or underscores`],
    ],
    [
      'a bad route',
      'syslog:\n  udp: 127.0.0.1:5514\n  tags:\n    nginx_err:\n      type: errors\n    nginx_e2:\n      type: error\n      format: main\n      domian: x.example.com\n',
      [
        `${AT}:5: syslog.tags.nginx_err.type: must be access or error (got "errors")`,
        `${AT}:8: syslog.tags.nginx_e2.format: applies to type access only (got "main")`,
        `${AT}:9: syslog.tags.nginx_e2.domian: unknown field (known: domain, type, format, timezone)`,
      ],
    ],
    [
      'a format on an error route',
      'syslog:\n  udp: 127.0.0.1:5514\n  tags:\n    nginx_err:\n      type: error\n      format: main\n',
      [`${AT}:6: syslog.tags.nginx_err.format: applies to type access only (got "main")`],
    ],
    [
      'patterns that do not compile',
      'sources:\n  - access: /l/{domain}/{domain}.log\n  - access: /l/**/a.log\n    domain: a.example.com\n  - error: /l/{host}.log\n    domain: a.example.com\n',
      [
        `${AT}:2: sources[0].access: may hold {domain} once (got "/l/{domain}/{domain}.log")`,
        `${AT}:3: sources[1].access: ** is not supported: a * matches within one path segment (got "/l/**/a.log")`,
        `${AT}:5: sources[2].error: only {domain} may stand in braces (got "/l/{host}.log")`,
      ],
    ],
    [
      'a domain beside {domain}, register without {domain}, an owner that is no address',
      'sources:\n  - domain: a.example.com\n    access: /l/{domain}.log\n  - access: /l/*.log\n    format: main\n    domain: b.example.com\n    register: { owner: admin@example.com }\n  - access: /m/{domain}.log\n    register: { owner: nobody }\n',
      [
        `${AT}:2: sources[0].domain: takes each file's domain from its path ({domain}): remove domain, or {domain} (got "a.example.com")`,
        `${AT}:7: sources[1].register: registers the domains that paths name: it needs {domain} in access or error`,
        `${AT}:9: sources[2].register.owner: must be the e-mail address of a user (got "nobody")`,
      ],
    ],
    ['a YAML syntax error', 'sources:\n  - access: /a.log\n    format: [combined\n', [`${AT}:4: YAML syntax: Flow sequence in block collection must be sufficiently indented and end with a ]`]],
    ['a duplicated key', 'sources:\n  - access: /a.log\n    access: /b.log\n', [`${AT}:3: YAML syntax: Map keys must be unique`]],
  ])('%s', (_, yaml, expected) => {
    expect(problemsOf(yaml)).toEqual(expected);
  });

  it('lists every problem of a file in file order', () => {
    expect(
      problemsOf(`sources:
  - domain: shop.example.com
    acess: /var/log/nginx/shop.access.log
    format: comined
  - access: /var/log/nginx/all.access.log
    timezone: CEST
syslog:
  udp: 127.0.0.1
  tags:
    nginx_shop: { type: acces }
`),
    ).toEqual([
      `${AT}:2: sources[0]: needs access or error (a log file path)`,
      `${AT}:3: sources[0].acess: unknown field (known: domain, access, error, format, timezone, startAt, register)`,
      `${AT}:4: sources[0].format: must be combined, main or an nginx log_format string with $variables (got "comined")`,
      `${AT}:6: sources[1].timezone: must be an IANA time zone such as UTC or Europe/Paris (got "CEST")`,
      `${AT}:8: syslog.udp: must be HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:5514 or [::1]:5514 (got "127.0.0.1")`,
      `${AT}:10: syslog.tags.nginx_shop.type: must be access or error (got "acces")`,
    ]);
  });
});
