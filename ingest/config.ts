/**
 * The ingest configuration file (`INGEST_CONFIG`, `tailhouse ingest --config FILE`,
 * docs/reference/ingest.md): YAML, validated with zod; every problem becomes one line naming the
 * file, the line and the field, e.g. `ingest config /etc/tailhouse/ingest.yaml:7: sources[1].format: must be …`.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { isMap, isNode, isScalar, isSeq, LineCounter, parseDocument, type Document } from 'yaml';
import { z } from 'zod';
import { ConfigError } from '../core/config.js';
import { HOST_NAME } from '../core/formats.js';
import { compileAccessFormat } from './parsers/access-format.js';
import { compileFilePattern, DOMAIN_PLACEHOLDER, isPattern } from './sources/file-pattern.js';

export type StartAt = 'beginning' | 'end';
export type LogType = 'access' | 'error';

/** One nginx virtual host's log files, or a pattern matching many hosts' files. */
export interface FileSource {
  /**
   * The registered domain the lines belong to; null: each file's path names it (`{domain}` in its
   * pattern), else each access line's `$host` picks it.
   */
  domain: string | null;
  /**
   * Absolute paths (relative ones in the file are taken from the config file's directory), or
   * patterns with `*` and one `{domain}` (sources/file-pattern.ts).
   */
  access: string | null;
  error: string | null;
  /** Registers a domain the first time a file's path names it, owned by this user; null: off. */
  register: { owner: string } | null;
  /** `combined`, `main` or an nginx `log_format` string. */
  format: string;
  /** IANA zone of the error-log times, which carry no offset. */
  timezone: string;
  /** Where a file without a checkpoint starts. */
  startAt: StartAt;
}

export interface ListenAddress {
  host: string;
  port: number;
}

/** What the messages of one syslog tag are: nginx's `tag=` names the route. */
export interface SyslogRoute {
  /** null: each access line's `$host` picks the domain. */
  domain: string | null;
  type: LogType;
  /** For `type: access`: `combined`, `main` or an nginx `log_format` string. */
  format: string;
  /** IANA zone of the error-log times inside the messages. */
  timezone: string;
}

export interface SyslogConfig {
  udp: ListenAddress | null;
  tcp: ListenAddress | null;
  /** IANA zone of the syslog header times: nginx writes its local time without an offset. */
  timezone: string;
  /** Tag → route; a message whose tag is not here goes to the rejects. A Map, so a tag such as
   * `constructor` cannot reach an Object prototype member. */
  tags: Map<string, SyslogRoute>;
}

export interface IngestConfig {
  /** The file the configuration was read from (absolute). */
  path: string;
  sources: FileSource[];
  syslog: SyslogConfig | null;
}

const FORMAT_RULE = 'must be combined, main or an nginx log_format string with $variables';
const TIMEZONE_RULE = 'must be an IANA time zone such as UTC or Europe/Paris';
const DOMAIN_RULE = 'must be a host name such as shop.example.com';
const PATH_RULE = 'must be a file path';
const OWNER_RULE = 'must be the e-mail address of a user';
/** nginx refuses any other `tag=` (ngx_syslog.c: alphanumerics and underscore, at most 32). */
const SYSLOG_TAG = /^[A-Za-z0-9_]{1,32}$/;

export function isTimeZone(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

const domainName = z.string({ error: DOMAIN_RULE }).trim().toLowerCase().regex(HOST_NAME, { error: DOMAIN_RULE });
const filePath = z.string({ error: PATH_RULE }).min(1, { error: PATH_RULE });
// The format compiler (ingest/parsers) judges the variables; here a typo like `comined` is caught.
const logFormat = z
  .string({ error: FORMAT_RULE })
  .refine((v) => v === 'combined' || v === 'main' || /\$[A-Za-z_]/.test(v), { error: FORMAT_RULE });
const timezone = z.string({ error: TIMEZONE_RULE }).refine(isTimeZone, { error: TIMEZONE_RULE });

const LISTEN_RULE = 'must be HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:5514 or [::1]:5514';
const listenAddress = z.string({ error: LISTEN_RULE }).transform((value, ctx): ListenAddress => {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:[\]]+)):(\d{1,5})$/.exec(value);
  const port = Number(match?.[3]);
  if (!match || port > 65535) {
    ctx.addIssue({ code: 'custom', message: LISTEN_RULE });
    return z.NEVER;
  }
  return { host: match[1] ?? match[2] ?? '', port };
});

const fileSourceSchema = z
  .strictObject({
    domain: domainName.optional(),
    access: filePath.optional(),
    error: filePath.optional(),
    format: logFormat.default('combined'),
    timezone: timezone.default('UTC'),
    startAt: z.enum(['beginning', 'end'], { error: 'must be beginning or end' }).default('beginning'),
    register: z.strictObject({ owner: z.string({ error: OWNER_RULE }).trim().toLowerCase().pipe(z.email({ error: OWNER_RULE })) }, { error: 'must be a mapping with owner (a user\'s e-mail address)' }).optional(),
  }, { error: 'must be a mapping with access and/or error' })
  .refine((s) => s.access !== undefined || s.error !== undefined, { error: 'needs access or error (a log file path)' })
  .refine((s) => s.domain === undefined || ![s.access, s.error].some((f) => f?.includes(DOMAIN_PLACEHOLDER)), {
    error: `takes each file's domain from its path (${DOMAIN_PLACEHOLDER}): remove domain, or ${DOMAIN_PLACEHOLDER}`,
    path: ['domain'],
  })
  .refine((s) => s.register === undefined || [s.access, s.error].some((f) => f?.includes(DOMAIN_PLACEHOLDER)), {
    error: `registers the domains that paths name: it needs ${DOMAIN_PLACEHOLDER} in access or error`,
    path: ['register'],
  });

const syslogRouteSchema = z
  .strictObject({
    domain: domainName.optional(),
    type: z.enum(['access', 'error'], { error: 'must be access or error' }).default('access'),
    format: logFormat.optional(),
    timezone: timezone.optional(),
  }, { error: 'must be a mapping of domain, type, format, timezone' })
  .refine((r) => r.type === 'access' || r.format === undefined, { error: 'applies to type access only', path: ['format'] });

const syslogSchema = z
  .strictObject({
    udp: listenAddress.optional(),
    tcp: listenAddress.optional(),
    timezone: timezone.default('UTC'),
    tags: z.record(
      z.string().regex(SYSLOG_TAG, { error: 'is not an nginx syslog tag: 1 to 32 letters, digits or underscores' }),
      // `nginx_shop:` with nothing under it is a route with every default.
      z.preprocess((v) => v ?? {}, syslogRouteSchema),
      { error: 'must be a mapping of nginx syslog tags to routes' },
    ),
  }, { error: 'must be a mapping with udp and/or tcp, and tags' })
  .refine((s) => s.udp !== undefined || s.tcp !== undefined, { error: 'needs udp or tcp (HOST:PORT to listen on)' })
  // Without routes every message would only land in the rejects.
  .refine((s) => Object.keys(s.tags).length > 0, { error: 'needs at least one tag route', path: ['tags'] });

const configSchema = z
  .strictObject(
    {
      sources: z.array(fileSourceSchema, { error: 'must be a list of sources' }).default([]),
      syslog: syslogSchema.optional(),
    },
    { error: 'must be a YAML mapping with sources and/or syslog' },
  )
  .refine((c) => c.sources.length > 0 || c.syslog !== undefined, { error: 'needs sources or syslog: nothing to ingest' });

type ParsedConfig = z.infer<typeof configSchema>;
type Path = (string | number)[];

interface Problem {
  path: Path;
  message: string;
}

/** `sources[1].format` */
function showPath(p: Path): string {
  return p.map((part, i) => (typeof part === 'number' ? `[${part}]` : i === 0 ? part : `.${part}`)).join('');
}

/** The offset in the text of the key or item at `p`, or null when the document has none there. */
function offsetOf(doc: Document, p: Path): number | null {
  if (p.length === 0) return isNode(doc.contents) ? (doc.contents.range?.[0] ?? null) : null;
  const parent = doc.getIn(p.slice(0, -1), true);
  const last = p[p.length - 1];
  if (isMap(parent)) {
    const pair = parent.items.find((item) => isScalar(item.key) && String(item.key.value) === String(last));
    return pair && isNode(pair.key) ? (pair.key.range?.[0] ?? null) : null;
  }
  if (isSeq(parent) && typeof last === 'number') {
    const item = parent.items[last];
    return isNode(item) ? (item.range?.[0] ?? null) : null;
  }
  return null;
}

/** The 1-based line of the closest existing ancestor of `p` (a missing field points at its parent). */
function lineOf(doc: Document, lines: LineCounter, p: Path): number | null {
  for (let depth = p.length; depth >= 0; depth--) {
    const offset = offsetOf(doc, p.slice(0, depth));
    if (offset !== null) return lines.linePos(offset).line;
  }
  return null;
}

function valueAt(data: unknown, p: Path): unknown {
  let value = data;
  for (const part of p) {
    if (value === null || typeof value !== 'object') return undefined;
    value = (value as Record<string | number, unknown>)[part];
  }
  return value;
}

function shown(value: unknown): string {
  return value === null || ['string', 'number', 'boolean'].includes(typeof value) ? ` (got ${JSON.stringify(value)})` : '';
}

function zodProblems(error: z.ZodError, data: unknown): Problem[] {
  return error.issues.flatMap((issue): Problem[] => {
    const at = issue.path.filter((part): part is string | number => typeof part !== 'symbol');
    if (issue.code === 'unrecognized_keys') {
      const known = knownKeys(at);
      return issue.keys.map((key) => ({ path: [...at, key], message: `unknown field${known ? ` (known: ${known})` : ''}` }));
    }
    if (issue.code === 'invalid_key') {
      // The key's own rule, not the record's: the value may be fine.
      return [{ path: at, message: issue.issues[0]?.message ?? issue.message }];
    }
    const value = at.length > 0 ? valueAt(data, at) : undefined;
    return [{ path: at, message: `${issue.message}${value === undefined ? '' : shown(value)}` }];
  });
}

/** The fields allowed where an unknown one was found: the usual mistake is a typo. */
function knownKeys(at: Path): string | null {
  const shapes: [RegExp, z.ZodObject][] = [
    [/^$/, configSchema],
    [/^sources\.\d+$/, fileSourceSchema],
    [/^syslog$/, syslogSchema],
    [/^syslog\.tags\.[^.]+$/, syslogRouteSchema],
  ];
  const key = at.join('.');
  const shape = shapes.find(([pattern]) => pattern.test(key))?.[1];
  return shape ? Object.keys(shape.shape).join(', ') : null;
}

/** Patterns that do not compile (a file path is any path). */
function patternProblems(sources: FileSource[]): Problem[] {
  return sources.flatMap((source, i) =>
    (['access', 'error'] as const).flatMap((kind): Problem[] => {
      const file = source[kind];
      if (file === null || !isPattern(file)) return [];
      try {
        compileFilePattern(file);
        return [];
      } catch (err) {
        return [{ path: ['sources', i, kind], message: `${(err as Error).message} (got ${JSON.stringify(file)})` }];
      }
    }),
  );
}

/** Two sources following one file would insert its lines twice; overlapping patterns are told apart while running (the first source takes a file). */
function duplicatePaths(sources: FileSource[]): Problem[] {
  const seen = new Map<string, string>();
  const problems: Problem[] = [];
  sources.forEach((source, i) => {
    for (const kind of ['access', 'error'] as const) {
      const file = source[kind];
      if (file === null) continue;
      const first = seen.get(file);
      if (first) problems.push({ path: ['sources', i, kind], message: `${file} is already read by ${first}` });
      else seen.set(file, showPath(['sources', i, kind]));
    }
  });
  return problems;
}

/**
 * Formats the compiler refuses, and formats that leave a line without a domain: with no `domain`,
 * an access line picks it with `$host` (or `$server_name`), so the format must have one.
 */
function formatProblems(config: IngestConfig): Problem[] {
  const check = (at: Path, format: string, domain: string | null): Problem[] => {
    try {
      const parser = compileAccessFormat(format);
      if (domain === null && !parser.hasHost) {
        return [{ path: at, message: 'has no $host or $server_name to pick each line\'s domain: add one, or give the source a domain' }];
      }
      return [];
    } catch (err) {
      return [{ path: at, message: (err as Error).message }];
    }
  };
  const problems = config.sources.flatMap((s, i) => (s.access === null ? [] : check(['sources', i, 'format'], s.format, s.domain ?? (s.access.includes(DOMAIN_PLACEHOLDER) ? DOMAIN_PLACEHOLDER : null))));
  for (const [tag, route] of config.syslog?.tags ?? []) {
    if (route.type === 'access') problems.push(...check(['syslog', 'tags', tag, 'format'], route.format, route.domain));
  }
  return problems;
}

function toConfig(parsed: ParsedConfig, file: string): IngestConfig {
  const dir = path.dirname(file);
  const sources = parsed.sources.map(
    (s): FileSource => ({
      domain: s.domain ?? null,
      access: s.access === undefined ? null : path.resolve(dir, s.access),
      error: s.error === undefined ? null : path.resolve(dir, s.error),
      format: s.format,
      timezone: s.timezone,
      startAt: s.startAt,
      register: s.register ?? null,
    }),
  );
  const syslog = parsed.syslog;
  return {
    path: file,
    sources,
    syslog: syslog
      ? {
          udp: syslog.udp ?? null,
          tcp: syslog.tcp ?? null,
          timezone: syslog.timezone,
          tags: new Map(
            Object.entries(syslog.tags).map(([tag, route]): [string, SyslogRoute] => [
              tag,
              { domain: route.domain ?? null, type: route.type, format: route.format ?? 'combined', timezone: route.timezone ?? syslog.timezone },
            ]),
          ),
        }
      : null,
  };
}

/**
 * Validates the YAML text of an ingest config; `file` names it in the errors and anchors relative
 * paths. Throws ConfigError with one line per problem.
 */
export function parseIngestConfig(text: string, file: string): IngestConfig {
  const absolute = path.resolve(file);
  const lines = new LineCounter();
  const doc = parseDocument(text, { lineCounter: lines, prettyErrors: false });
  const where = (line: number | null) => `ingest config ${absolute}${line === null ? '' : `:${line}`}`;
  if (doc.errors.length > 0) {
    throw new ConfigError(doc.errors.map((e) => `${where(lines.linePos(e.pos[0]).line)}: YAML syntax: ${e.message.split('\n')[0]}`));
  }
  const data: unknown = doc.toJS();
  const parsed = configSchema.safeParse(data ?? {});
  const problems = parsed.success ? [] : zodProblems(parsed.error, data);
  const config = parsed.success ? toConfig(parsed.data, absolute) : null;
  if (config) problems.push(...patternProblems(config.sources), ...duplicatePaths(config.sources), ...formatProblems(config));
  if (problems.length > 0 || !config) {
    const located = problems.map((p) => ({ ...p, line: lineOf(doc, lines, p.path) }));
    // In file order, as an editor shows them.
    located.sort((a, b) => (a.line ?? 0) - (b.line ?? 0));
    throw new ConfigError(located.map((p) => `${where(p.line)}: ${p.path.length > 0 ? `${showPath(p.path)}: ` : ''}${p.message}`));
  }
  return config;
}

/** Reads and validates the ingest config file; throws ConfigError with one line per problem. */
export async function loadIngestConfig(file: string): Promise<IngestConfig> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    throw new ConfigError([`ingest config ${path.resolve(file)}: cannot read it (${e.code ?? e.message})`]);
  }
  return parseIngestConfig(text, file);
}
