/**
 * `tailhouse ingest validate --config FILE` (compare `vector validate`): an ingest config checked
 * before it is deployed, against the files it names and the domains table. The config goes
 * through the worker's loader; each file's first lines are cut by the worker's LineCutter and
 * parsed and routed by its decodeLines, so a line shown as rejected carries the very reason the
 * ingest would store in `ingest_rejects`. Nothing is written anywhere.
 */
import fsp from 'node:fs/promises';
import { z } from 'zod';
import { ConfigError } from '../core/config.js';
import type { Db } from '../core/db/postgres.js';
import type { ErrorLevel } from '../core/entries.js';
import type { Logger } from '../core/log.js';
import { loadIngestConfig, type FileSource, type IngestConfig, type LogType, type StartAt, type SyslogConfig } from './config.js';
import { domainIdsOf } from './domain-store.js';
import { createDomainDirectory, type DomainDirectory } from './domains.js';
import { compileAccessFormat } from './parsers/access-format.js';
import { parseErrorLine, routingNameOf } from './parsers/error-log.js';
import { compileFilePattern, DOMAIN_PLACEHOLDER, isPattern, scanFilePattern } from './sources/file-pattern.js';
import { DEFAULT_CUT_LIMITS, LineCutter, type Cut, type Framing } from './sources/line-cutter.js';
import { accessDecoder, decodeLines, emptyDecoded, errorDecoder, normaliseHost, type Decoder, type Routing } from './transforms/rows.js';

export const DEFAULT_SAMPLE_LINES = 10;
/** `--lines N`: how many lines (error-log entries) of each file are read. */
const SAMPLE_LINES_RULE = 'must be a whole number from 1 to 1000';
export const sampleLinesSchema = z.coerce
  .number({ error: SAMPLE_LINES_RULE })
  .int({ error: SAMPLE_LINES_RULE })
  .min(1, { error: SAMPLE_LINES_RULE })
  .max(1000, { error: SAMPLE_LINES_RULE });

export interface ValidationReport {
  /** The config file as given. */
  config: string;
  /** The loader's errors, one per problem (`ingest config FILE:LINE: key.path: rule`); empty when it loads. */
  configErrors: string[];
  sources: SourceCheck[];
  syslog: SyslogCheck | null;
  /** What would keep lines out of the store or a source from reading; 0: the config is OK. */
  problems: number;
}

export interface SourceCheck {
  /** `sources[0]`, as the loader names it. */
  name: string;
  /** The source's domain; null: each line's host picks it. */
  domain: string | null;
  /** Whether `domain` is registered (null without one): the worker reads nothing of the source until it is. */
  registered: boolean | null;
  files: FileCheck[];
  /** The source's path patterns and what each matches today. */
  patterns: PatternCheck[];
}

/** A path pattern (`*`, `{domain}`), the files it matches now and the domain each one's lines go to. */
export interface PatternCheck {
  kind: LogType;
  pattern: string;
  /** `register.owner`: a domain a path names is registered for this user; null: off. */
  registerFor: string | null;
  matches: PatternFileCheck[];
  /** Paths left out, and why (`problem`: something to fix; generations are not listed). */
  skipped: { path: string; reason: string; problem: boolean }[];
  /** The first matched file's first lines, read as every matched file is (null: nothing matched). */
  sample: FileCheck | null;
}

export interface PatternFileCheck {
  path: string;
  /** The domain its lines go to; null: each line's own. */
  domain: string | null;
  /**
   * `registered`, `will register` (register is on), `not registered` (the worker reads nothing of
   * the file until it is), `invalid` (the path names no host name: every line goes to the rejects),
   * `by line` (no {domain}, no domain: each line's host).
   */
  state: 'registered' | 'will register' | 'not registered' | 'invalid' | 'by line';
  /** Why, for `invalid`. */
  reason: string | null;
}

export interface FileCheck {
  kind: LogType;
  path: string;
  /** The access-log format; null for an error log. */
  format: string | null;
  /** The zone of the error-log times; null for an access log. */
  timezone: string | null;
  startAt: StartAt;
  /** `trailingBytes`: bytes after the last complete line read, which the worker waits for nginx to end. */
  file: { state: 'read'; trailingBytes: number } | { state: 'missing' | 'unreadable'; reason: string };
  /** The first lines (error-log entries) and what the ingest makes of each. */
  lines: SampleLine[];
}

export interface SampleLine {
  /** 1-based line of the file where it starts (an error entry may go on over the next lines). */
  line: number;
  /** As read, cut at SHOWN_LINE_CHARS (a line over the length limit: its head). */
  text: string;
  /** A few fields as the configured format reads them; null when the line does not parse. */
  fields: AccessSample | ErrorSample | null;
  /** Why the ingest would keep the line in `ingest_rejects`; null: it would be stored. */
  rejected: string | null;
}

export interface AccessSample {
  kind: 'access';
  /** ISO 8601, UTC. */
  time: string;
  /** The source's domain, or the one the line's host names; null when it names none. */
  domain: string | null;
  status: number;
  method: string;
  url: string;
}

export interface ErrorSample {
  kind: 'error';
  time: string;
  /** The source's domain, or the one the entry's context names (`server:`, else `host:`). */
  domain: string | null;
  level: ErrorLevel;
  message: string;
}

export interface SyslogCheck {
  /** `udp 127.0.0.1:5514`, `tcp [::1]:5514`. */
  listens: string[];
  routes: SyslogRouteCheck[];
}

export interface SyslogRouteCheck {
  tag: string;
  type: LogType;
  domain: string | null;
  /** Null without a domain; false: every message of the tag goes to `ingest_rejects`. */
  registered: boolean | null;
  /** For access routes. */
  format: string | null;
}

export interface ValidateDeps {
  db: Db;
  /** The domain directory's (it logs failed lookups only). */
  log: Logger;
  /** Lines (error-log entries) read per file; DEFAULT_SAMPLE_LINES by default. */
  sampleLines?: number;
}

const SHOWN_LINE_CHARS = 200;
const SHOWN_VALUE_CHARS = 100;
/**
 * The cutter completes the sample at the first line end past its chunkMaxBytes; a line that runs on
 * past that and the line limit ends no sampled line, so reading stops there.
 */
const READ_LIMIT_BYTES = DEFAULT_CUT_LIMITS.chunkMaxBytes + DEFAULT_CUT_LIMITS.maxLineBytes;
const READ_BYTES = 64 * 1024;
/**
 * decodeLines routes lines of a source with a domain to that domain's id. Nothing is stored here,
 * so any id does: the source's domain is checked on its own (SourceCheck.registered).
 */
const FIXED_DOMAIN: Routing = { domainId: 0 };

/** Loads the config at `configPath` and checks each of its inputs; throws only what is not the config's fault (Postgres down). */
export async function validateIngestConfig(configPath: string, deps: ValidateDeps): Promise<ValidationReport> {
  const sampleLines = sampleLinesSchema.parse(deps.sampleLines ?? DEFAULT_SAMPLE_LINES);
  let config: IngestConfig;
  try {
    config = await loadIngestConfig(configPath);
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    return { config: configPath, configErrors: err.problems, sources: [], syslog: null, problems: err.problems.length };
  }
  const named = [...config.sources.map((s) => s.domain), ...[...(config.syslog?.tags.values() ?? [])].map((r) => r.domain)];
  const registered = await domainIdsOf(deps.db, [...new Set(named.filter((d): d is string => d !== null))]);
  const isRegistered = (domain: string | null) => (domain === null ? null : registered.has(domain));
  // The worker's directory: lines routed by host are looked up exactly as it looks them up.
  const directory = createDomainDirectory(deps.db, { log: deps.log });

  const sources: SourceCheck[] = [];
  for (const [i, source] of config.sources.entries()) {
    const files: FileCheck[] = [];
    const patterns: PatternCheck[] = [];
    for (const kind of ['access', 'error'] as const) {
      const file = source[kind];
      if (file !== null && isPattern(file)) patterns.push(await checkPattern(kind, file, source, sampleLines, directory, deps.db));
      else if (file !== null) files.push(await checkFile(kind, file, source, sampleLines, directory));
    }
    sources.push({ name: `sources[${i}]`, domain: source.domain, registered: isRegistered(source.domain), files, patterns });
  }
  const syslog = config.syslog === null ? null : syslogCheck(config.syslog, isRegistered);
  return { config: configPath, configErrors: [], sources, syslog, problems: countProblems(sources, syslog) };
}

/** An unregistered domain, a file that cannot be read, each line the ingest would reject. */
function countProblems(sources: SourceCheck[], syslog: SyslogCheck | null): number {
  let n = syslog?.routes.filter((r) => r.registered === false).length ?? 0;
  for (const source of sources) {
    if (source.registered === false) n++;
    for (const file of [...source.files, ...source.patterns.flatMap((p) => (p.sample ? [p.sample] : []))]) n += (file.file.state === 'read' ? 0 : 1) + file.lines.filter((l) => l.rejected !== null).length;
    for (const pattern of source.patterns) n += pattern.matches.filter((m) => m.state === 'invalid' || m.state === 'not registered').length + pattern.skipped.filter((s) => s.problem).length;
  }
  return n;
}

function syslogCheck(syslog: SyslogConfig, isRegistered: (domain: string | null) => boolean | null): SyslogCheck {
  const address = (a: { host: string; port: number }) => `${a.host.includes(':') ? `[${a.host}]` : a.host}:${a.port}`;
  return {
    listens: [syslog.udp && `udp ${address(syslog.udp)}`, syslog.tcp && `tcp ${address(syslog.tcp)}`].filter((l): l is string => typeof l === 'string'),
    routes: [...syslog.tags].map(([tag, route]) => ({
      tag,
      type: route.type,
      domain: route.domain,
      registered: isRegistered(route.domain),
      format: route.type === 'access' ? route.format : null,
    })),
  };
}

async function checkPattern(kind: LogType, pattern: string, source: FileSource, sampleLines: number, directory: DomainDirectory, db: Db): Promise<PatternCheck> {
  const { matches, skipped } = await scanFilePattern(compileFilePattern(pattern));
  const named = [...new Set(matches.flatMap((m) => (m.domain === null ? [] : [m.domain])))];
  const registered = await domainIdsOf(db, named);
  const registerFor = source.register?.owner ?? null;
  const stateOf = (domain: string | null): PatternFileCheck['state'] => {
    if (domain === null) return 'by line';
    if (registered.has(domain)) return 'registered';
    return registerFor === null ? 'not registered' : 'will register';
  };
  const first = matches.find((m) => m.invalid === null);
  return {
    kind,
    pattern,
    registerFor,
    matches: matches.map((m) => ({ path: m.path, domain: m.invalid === null ? (m.domain ?? source.domain) : null, state: m.invalid === null ? stateOf(m.domain ?? source.domain) : 'invalid', reason: m.invalid })),
    skipped,
    // Sampled with the domain its path names, so that the lines show where they go.
    sample: first ? await checkFile(kind, first.path, { ...source, domain: first.domain ?? source.domain }, sampleLines, directory) : null,
  };
}

async function checkFile(kind: LogType, file: string, source: FileSource, sampleLines: number, directory: DomainDirectory): Promise<FileCheck> {
  const check = { kind, path: file, format: kind === 'access' ? source.format : null, timezone: kind === 'error' ? source.timezone : null, startAt: source.startAt };
  const sample = await readSample(file, kind === 'access' ? 'line' : 'error-log', sampleLines);
  if ('reason' in sample) return { ...check, file: sample, lines: [] };
  const { cut, lineOf } = sample;
  // As the worker's decoderOf builds them.
  const decoder: Decoder = kind === 'access' ? accessDecoder(compileAccessFormat(source.format)) : errorDecoder(source.timezone);
  const decoded = emptyDecoded();
  const routing: Routing = source.domain === null ? { byHost: directory } : FIXED_DOMAIN;
  await decodeLines(decoded, cut.lines, cut.overlong, decoder, routing, { source: `${kind} ${file}`, identity: 'validate' }, DEFAULT_CUT_LIMITS.maxLineBytes);
  const rejected = new Map(decoded.rejects.map((r) => [r.offset, r.reason]));
  const lines = [
    ...cut.lines.map((l) => ({ offset: l.offset, text: l.text, fields: fieldsOf(decoder, l.text, source.domain) })),
    ...cut.overlong.map((o) => ({ offset: o.offset, text: o.head, fields: null })),
  ].sort((a, b) => a.offset - b.offset);
  return {
    ...check,
    file: { state: 'read', trailingBytes: sample.trailingBytes },
    lines: lines.map((l) => ({ line: lineOf(l.offset), text: truncated(l.text, SHOWN_LINE_CHARS), fields: l.fields, rejected: rejected.get(l.offset) ?? null })),
  };
}

/** What the line's parse gives, for the eye: whether it is stored is decodeLines's answer. */
function fieldsOf(decoder: Decoder, text: string, domain: string | null): AccessSample | ErrorSample | null {
  const routedTo = (name: string | null) => domain ?? (name === null || name === '' ? null : normaliseHost(name));
  if (decoder.kind === 'access') {
    const parsed = decoder.parse(text);
    if (!parsed.ok) return null;
    const e = parsed.entry;
    return { kind: 'access', time: isoTime(e.timestamp), domain: routedTo(e.host), status: e.statusCode, method: e.method, url: truncated(e.url, SHOWN_VALUE_CHARS) };
  }
  const parsed = parseErrorLine(text, decoder.timezone);
  if (!parsed.ok) return null;
  const e = parsed.entry;
  return { kind: 'error', time: isoTime(e.timestamp), domain: routedTo(routingNameOf(e.context)), level: e.level, message: truncated(e.message, SHOWN_VALUE_CHARS) };
}

/** A `$msec` far out of range is no Date; such a line is rejected anyway (OUT_OF_RANGE). */
const isoTime = (ms: number) => (Math.abs(ms) <= 8.64e15 ? new Date(ms).toISOString() : `${ms} ms`);

const truncated = (text: string, chars: number) => (text.length > chars ? `${text.slice(0, chars)}…` : text);

type Sample = { cut: Cut; lineOf: (offset: number) => number; trailingBytes: number } | { state: 'missing' | 'unreadable'; reason: string };

/**
 * The first `sampleLines` lines (entries) of the file at the path, cut as the follower cuts them.
 * The worker follows the file at the path only: a missing one, or something else there, it waits
 * for; the rotated generations beside it it does not read at its first start.
 */
async function readSample(file: string, framing: Framing, sampleLines: number): Promise<Sample> {
  let fh: fsp.FileHandle;
  try {
    // Looked at before it is opened, as the follower does: opening a FIFO would wait for a writer.
    if (!(await fsp.stat(file)).isFile()) return { state: 'missing', reason: 'not a regular file (the worker waits for a file at the path)' };
    fh = await fsp.open(file, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { state: 'missing', reason: 'missing file: nothing at the path (the worker waits for the file to appear)' };
    return { state: 'unreadable', reason: `cannot be read (${code ?? (err as Error).message})` };
  }
  try {
    const cutter = new LineCutter({ ...DEFAULT_CUT_LIMITS, chunkMaxLines: sampleLines }, framing);
    cutter.begin(0);
    // Where each line break is, for line numbers: an entry or an overlong line holds several or a long one.
    const breaks: number[] = [];
    const buf = Buffer.allocUnsafe(READ_BYTES);
    let pos = 0;
    for (let complete = false; !complete && pos < READ_LIMIT_BYTES; ) {
      const { bytesRead } = await fh.read(buf, 0, buf.length, pos);
      if (bytesRead === 0) break;
      const view = buf.subarray(0, bytesRead);
      for (let nl = view.indexOf(0x0a); nl !== -1; nl = view.indexOf(0x0a, nl + 1)) breaks.push(pos + nl);
      complete = cutter.feed(view, pos) !== -1;
      pos += bytesRead;
    }
    const cut = cutter.cut();
    const lineOf = (offset: number) => 1 + breaks.filter((b) => b < offset).length;
    // A sample short of its lines ended with the file (or the read limit): what follows its last line is unended.
    return { cut, lineOf, trailingBytes: cut.lines.length + cut.overlong.length < sampleLines ? pos - cut.lineStart : 0 };
  } finally {
    await fh.close();
  }
}

/** The report for the terminal: one block per input, and a last line `config OK` or `N problems`. */
export function formatValidationReport(report: ValidationReport): string {
  const out: string[] = [`ingest config ${shown(report.config)}${report.configErrors.length > 0 ? ': does not load' : ''}`];
  for (const error of report.configErrors) out.push(`  ${shown(error)}`);
  for (const source of report.sources) {
    const named = source.patterns.some((p) => p.pattern.includes(DOMAIN_PLACEHOLDER));
    out.push('', `${source.name}: ${named ? 'each file\'s domain is the one its path names' : domainText(source.domain, source.registered, 'the worker reads nothing from these files until it is')}`);
    for (const file of source.files) out.push(...fileBlock(file));
    for (const pattern of source.patterns) out.push(...patternBlock(pattern));
  }
  if (report.syslog) {
    out.push('', `syslog: listens on ${report.syslog.listens.join(' and ')}; not checked (its lines arrive over the network, there is no file to read)`);
    for (const r of report.syslog.routes) {
      const format = r.format === null ? '' : `, format ${shown(r.format)}`;
      out.push(`  tag ${r.tag}: ${r.type}${format}, ${domainText(r.domain, r.registered, 'its messages go to ingest_rejects')}`);
    }
  }
  out.push('', report.problems === 0 ? 'config OK' : `${report.problems} problem${report.problems === 1 ? '' : 's'}`);
  return `${out.join('\n')}\n`;
}

function domainText(domain: string | null, registered: boolean | null, unregistered: string): string {
  if (domain === null) return 'no domain: each line goes to the domain it names';
  return registered ? `domain ${domain}` : `domain ${domain} is not registered: ${unregistered} (tailhouse domains add ${domain})`;
}

function fileBlock(file: FileCheck): string[] {
  // A log_format string quoted as in the config; `combined`, `main` as they are.
  const how = file.format === null ? `timezone ${file.timezone}` : `format ${/^\w+$/.test(file.format) ? file.format : `'${shown(file.format)}'`}`;
  const head = `  ${file.kind} ${shown(file.path)} (${how})`;
  if (file.file.state !== 'read') return [`${head}: ${file.file.reason}`];
  const count = file.lines.length;
  const [one, many] = file.kind === 'access' ? ['line', 'lines'] : ['entry', 'entries'];
  const rejected = file.lines.filter((l) => l.rejected !== null).length;
  const notes = [
    `${count === 0 ? `no complete ${one}` : `first ${count} ${count === 1 ? one : many}`}${rejected > 0 ? `, ${rejected} rejected` : ''}`,
    file.startAt === 'end' ? 'startAt end: the first start skips what the file holds now' : '',
    file.file.trailingBytes > 0 ? `the last ${file.file.trailingBytes} bytes end no line yet (read once nginx ends it)` : '',
  ].filter(Boolean);
  const out = [`${head}: ${notes.join('; ')}`];
  const width = String(file.lines.at(-1)?.line ?? 0).length;
  for (const l of file.lines) {
    const at = `    line ${String(l.line).padEnd(width)}  `;
    if (l.rejected !== null) out.push(`${at}rejected: ${shown(l.rejected)}`, `${' '.repeat(at.length)}${shown(l.text)}`);
    else if (l.fields !== null) out.push(`${at}${fieldsText(l.fields)}`);
  }
  return out;
}

function patternBlock(p: PatternCheck): string[] {
  const count = p.matches.length;
  const out = [`  ${p.kind} pattern ${shown(p.pattern)}: matches ${count} file${count === 1 ? '' : 's'}${p.registerFor === null ? '' : `; registers the domains they name for ${shown(p.registerFor)}`}`];
  const width = Math.max(0, ...p.matches.map((m) => m.path.length));
  for (const m of p.matches) {
    const where = m.state === 'invalid' ? `rejected: ${m.reason}` : m.domain === null ? 'each line\'s host' : `${m.domain} (${m.state})`;
    out.push(`    ${shown(m.path.padEnd(width))}  ${shown(where)}`);
  }
  for (const s of p.skipped) out.push(`    ${shown(s.path)}  left out: ${shown(s.reason)}`);
  if (p.sample) out.push(...fileBlock(p.sample).map((line) => `  ${line}`));
  return out;
}

function fieldsText(f: AccessSample | ErrorSample): string {
  const values = f.kind === 'access' ? [f.time, f.domain ?? '-', String(f.status), `${f.method} ${f.url}`.trim()] : [f.time, f.domain ?? '-', f.level, f.message];
  return values.map(shown).join('  ');
}

/**
 * Text from the logs as the terminal may show it: control characters (error messages are written
 * unescaped, escapes decoded from access lines can hold any) and bidirectional overrides as `\xHH`
 * or `\u{…}`, so that no line can move the cursor, recolour the terminal or reorder what is shown.
 */
function shown(text: string): string {
  return text.replace(/[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]/g, (c) => {
    const code = c.charCodeAt(0);
    return code <= 0xff ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u{${code.toString(16)}}`;
  });
}
