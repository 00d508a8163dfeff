/**
 * Path patterns of file sources (docs/reference/ingest.md#path-patterns): `*` matches within one
 * path segment, and one `{domain}` names the domain a file's lines belong to
 * (`/var/www/vhosts/system/{domain}/logs/access_log`). A control panel gives every virtual host its
 * own files; a pattern follows them all, and the ones created later, without a config entry each.
 *
 * A scan walks the pattern's segments from its literal root: a literal segment is joined without a
 * look (what is missing shows when it is read), a wildcard segment lists its directory. Listings are
 * kept while the directory's modification time stays (a new file changes it), so a scan of a
 * thousand quiet virtual hosts is a thousand `stat` calls, not a thousand listings.
 *
 * What a scan leaves out, each with its reason where someone may want to know it:
 * - rotated generations of a matched file (`access_log.1`, `shop.example.com.log-20250101.gz`):
 *   the follower of the file reads them (file-tail.ts), they are never sources of their own;
 * - other compressed files (`.gz`): finished logs are for `tailhouse import`;
 * - what is no regular file, what cannot be listed or looked at (permissions, a symlink loop);
 * - a second path to a file (through a symbolic link): the file is read once, through its real path
 *   when the pattern matches that one (its lines go to the domain that path names).
 */
import fsp from 'node:fs/promises';
import path from 'node:path';
import { domainToASCII } from 'node:url';
import { HOST_NAME } from '../../core/formats.js';
import type { Logger } from '../../core/log.js';
import type { CheckpointStore } from '../checkpoints.js';
import { GENERATION_SUFFIX } from './file-tail.js';

export const DOMAIN_PLACEHOLDER = '{domain}';

/** One segment of a pattern below its root: a name, or a regular expression over names. */
type Segment = { literal: string } | { match: RegExp; domain: boolean };

export interface FilePattern {
  /** As written (absolute). */
  pattern: string;
  /** The literal directory the walk starts from. */
  root: string;
  segments: Segment[];
  /** Whether each file's path names its domain. */
  namesDomain: boolean;
}

/** Whether a configured path is a pattern rather than one file (a brace is taken as a placeholder meant, and checked). */
export function isPattern(file: string): boolean {
  return file.includes('*') || file.includes('{') || file.includes('}');
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Compiles an absolute path pattern; throws an Error whose message says what is wrong with it. */
export function compileFilePattern(pattern: string): FilePattern {
  if (!path.isAbsolute(pattern)) throw new Error('must be an absolute path');
  const placeholders = pattern.split(DOMAIN_PLACEHOLDER).length - 1;
  if (placeholders > 1) throw new Error(`may hold ${DOMAIN_PLACEHOLDER} once`);
  const rest = pattern.replace(DOMAIN_PLACEHOLDER, '');
  if (/[{}]/.test(rest)) throw new Error(`only ${DOMAIN_PLACEHOLDER} may stand in braces`);
  if (rest.includes('**')) throw new Error('** is not supported: a * matches within one path segment');
  if (/[?[\]]/.test(rest)) throw new Error(`only * and ${DOMAIN_PLACEHOLDER} are wildcards here: ?, [ and ] are not supported`);
  const parts = pattern.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.includes('..')) throw new Error('may not hold ..');
  const first = parts.findIndex((part) => part.includes('*') || part.includes(DOMAIN_PLACEHOLDER));
  if (first === -1) throw new Error(`holds no * or ${DOMAIN_PLACEHOLDER}`);
  const segments = parts.slice(first).map((part): Segment => {
    if (!part.includes('*') && !part.includes(DOMAIN_PLACEHOLDER)) return { literal: part };
    const source = part
      .split(DOMAIN_PLACEHOLDER)
      .map((piece) => piece.split('*').map(escapeRegExp).join('[^/]*'))
      // Greedy: with a * beside it, {domain} is the longest name that fits.
      .join('([^/]+)');
    return { match: new RegExp(`^${source}$`), domain: part.includes(DOMAIN_PLACEHOLDER) };
  });
  return { pattern, root: `/${parts.slice(0, first).join('/')}`, segments, namesDomain: placeholders === 1 };
}

/** One file a scan found. */
export interface PatternMatch {
  path: string;
  /** The name `{domain}` took, as read from the path (null without `{domain}`). */
  pathName: string | null;
  /** That name as a domain (ASCII, lower case), or null when it is none; see `invalid`. */
  domain: string | null;
  /** Why the path names no domain (a `{domain}` that is not a host name); null otherwise. */
  invalid: string | null;
}

export interface PatternScan {
  matches: PatternMatch[];
  /** Matched paths left out, and what could not be looked at (`problem`: something to fix), with why. */
  skipped: { path: string; reason: string; problem: boolean }[];
}

/** A name from a path as a domain: its ASCII (IDN) form in lower case, with at least two labels and a top-level label that is not a number. */
export function domainFromPath(name: string): { domain: string } | { invalid: string } {
  const ascii = domainToASCII(name.toLowerCase());
  const labels = ascii.split('.');
  if (ascii === '' || !HOST_NAME.test(ascii) || labels.length < 2 || /^\d+$/.test(labels.at(-1)!)) {
    return { invalid: `the path names ${JSON.stringify(name)} as its domain, which is no host name (such as shop.example.com)` };
  }
  return { domain: ascii };
}

/** Directory listings kept while the directory's modification time stays. */
export class ListingCache {
  private readonly listings = new Map<string, { mtimeMs: number; names: string[]; listedAt: number }>();

  /** The names in `dir`; throws what readdir or stat throws. */
  async list(dir: string): Promise<string[]> {
    const { mtimeMs } = await fsp.stat(dir);
    const kept = this.listings.get(dir);
    // A listing taken within the clock's coarseness of the last change may have missed a name
    // added in the same tick: it is taken again until it is clearly later.
    if (kept && kept.mtimeMs === mtimeMs && kept.listedAt > mtimeMs + MTIME_SLACK_MS) return kept.names;
    const listedAt = Date.now();
    const names = await fsp.readdir(dir);
    this.listings.set(dir, { mtimeMs, names, listedAt });
    return names;
  }

  /** Forgets directories not listed in the last scan (removed virtual hosts). */
  keepOnly(dirs: ReadonlySet<string>): void {
    for (const dir of this.listings.keys()) if (!dirs.has(dir)) this.listings.delete(dir);
  }
}

const MTIME_SLACK_MS = 1_000;

const reasonOf = (err: unknown) => {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === 'ELOOP') return 'a symbolic link loop';
  if (code === 'EACCES' || code === 'EPERM') return `no permission (${code})`;
  return code ?? (err instanceof Error ? err.message : String(err));
};
const isGone = (err: unknown) => ['ENOENT', 'ENOTDIR'].includes((err as NodeJS.ErrnoException).code ?? '');

/** The files `pattern` matches now, in path order. */
export async function scanFilePattern(pattern: FilePattern, cache: ListingCache = new ListingCache()): Promise<PatternScan> {
  const found: { path: string; pathName: string | null }[] = [];
  const skipped: PatternScan['skipped'] = [];
  const listed = new Set<string>();

  const walk = async (dir: string, i: number, pathName: string | null): Promise<void> => {
    const segment = pattern.segments[i]!;
    const last = i === pattern.segments.length - 1;
    if ('literal' in segment) {
      const next = path.join(dir, segment.literal);
      return last ? void found.push({ path: next, pathName }) : walk(next, i + 1, pathName);
    }
    let names: string[];
    try {
      names = await cache.list(dir);
      listed.add(dir);
    } catch (err) {
      if (!isGone(err)) skipped.push({ path: dir, reason: `cannot be listed: ${reasonOf(err)}`, problem: true });
      return;
    }
    for (const name of names.filter((n) => segment.match.test(n))) {
      const named = segment.domain ? segment.match.exec(name)![1]! : pathName;
      if (last) {
        if (isGenerationOf(name, segment.match)) continue;
        if (name.endsWith('.gz')) {
          skipped.push({ path: path.join(dir, name), reason: 'compressed: finished logs are read by tailhouse import', problem: false });
          continue;
        }
        found.push({ path: path.join(dir, name), pathName: named });
      } else {
        await walk(path.join(dir, name), i + 1, named);
      }
    }
  };
  await walk(pattern.root, 0, null);
  cache.keepOnly(listed);

  // Each file once: of several paths to it (symbolic links), the one that is its real path, else the first.
  const byReal = new Map<string, string[]>();
  for (const f of found.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    try {
      const stat = await fsp.stat(f.path);
      if (!stat.isFile()) {
        if (!stat.isDirectory()) skipped.push({ path: f.path, reason: 'not a regular file', problem: false });
        continue;
      }
      const real = await fsp.realpath(f.path);
      byReal.set(real, [...(byReal.get(real) ?? []), f.path]);
    } catch (err) {
      if (!isGone(err)) skipped.push({ path: f.path, reason: `cannot be looked at: ${reasonOf(err)}`, problem: true });
    }
  }
  const kept = new Set<string>();
  for (const [real, paths] of byReal) {
    const chosen = paths.includes(real) ? real : paths[0]!;
    kept.add(chosen);
    for (const other of paths) if (other !== chosen) skipped.push({ path: other, reason: `the same file as ${chosen}: read once, through that path`, problem: false });
  }
  const matches: PatternMatch[] = found
    .filter((f) => kept.has(f.path))
    .map((f) => {
      const named = f.pathName === null ? null : domainFromPath(f.pathName);
      return {
        path: f.path,
        pathName: f.pathName,
        domain: named !== null && 'domain' in named ? named.domain : null,
        invalid: named !== null && 'invalid' in named ? named.invalid : null,
      };
    });
  return { matches, skipped: skipped.sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0)) };
}

/** Whether `file` is a path the pattern matches (by its name alone: the file need not exist). */
export function patternMatches(pattern: FilePattern, file: string): boolean {
  if (!file.startsWith(pattern.root === '/' ? '/' : `${pattern.root}/`)) return false;
  const names = file.slice(pattern.root.length).split('/').filter((n) => n !== '');
  return names.length === pattern.segments.length && pattern.segments.every((segment, i) => ('literal' in segment ? segment.literal === names[i] : segment.match.test(names[i]!)));
}

/**
 * Drops the checkpoints of files a pattern once matched, that no follower follows now and of which
 * nothing is left on disk: neither the file nor a generation of it (`.1`, `-20250101.gz`). A
 * follower prunes its own gone generations, but a file let go has no follower left, and without
 * this a provider's checkpoints would grow by every virtual host ever removed. Entries changed
 * within `olderThanMs` stay (a file being renamed right now), as do those of imports, which name
 * no path a pattern matches. Returns how many entries went.
 */
export async function pruneLetGo(checkpoints: CheckpointStore, patterns: readonly FilePattern[], followed: ReadonlySet<string>, olderThanMs: number): Promise<number> {
  let removed = 0;
  for (const source of checkpoints.sourceNames()) {
    if (followed.has(source) || !patterns.some((p) => patternMatches(p, source))) continue;
    const nothingLeft = await nothingOnDisk(source);
    removed += await checkpoints.prune(source, olderThanMs, async () => nothingLeft);
  }
  return removed;
}

/** Neither `file` nor any generation of it is in its directory (a directory that is gone holds none). */
async function nothingOnDisk(file: string): Promise<boolean> {
  const base = path.basename(file);
  let names: string[];
  try {
    names = await fsp.readdir(path.dirname(file));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return true;
    throw err;
  }
  return !names.some((name) => name === base || (name.startsWith(base) && GENERATION_SUFFIX.test(name.slice(base.length))));
}

/**
 * A rotated generation (`access_log.1`, `x.log-20250101.gz`) of a name the segment matches. Whether
 * the stem exists does not matter: between logrotate's rename and nginx's reopen, or after the
 * file was deleted, its generations are still generations, not new virtual hosts.
 */
function isGenerationOf(name: string, segment: RegExp): boolean {
  for (let i = 1; i < name.length; i++) {
    const c = name[i];
    if ((c === '.' || c === '-') && GENERATION_SUFFIX.test(name.slice(i)) && segment.test(name.slice(0, i))) return true;
  }
  return false;
}

/** How often a pattern is scanned: a new virtual host's file is followed within this and a scan. */
export const PATTERN_SCAN_MS = 500;

export interface PatternHandlers {
  /** A file the pattern matches now and did not before (or that came back). */
  added(match: PatternMatch): void;
  /** A file matched before is gone; resolves true once it is let go (else asked again at the next scan). */
  gone(path: string): Promise<boolean>;
}

/**
 * A pattern scanned every `scanMs`: what it matches is handed to `added`, what it stopped matching
 * to `gone`. Problems (a directory that cannot be listed, a symlink loop) are logged when they first
 * show and when they clear, not at every scan.
 */
export class PatternWatch {
  private readonly cache = new ListingCache();
  private readonly matched = new Set<string>();
  private readonly gone = new Set<string>();
  private skipped = new Map<string, string>();
  private timer: NodeJS.Timeout | null = null;
  private scanning: Promise<void> | null = null;
  private stopped = false;

  constructor(
    readonly pattern: FilePattern,
    private readonly log: Logger,
    private readonly scanMs = PATTERN_SCAN_MS,
  ) {}

  /** One scan; what it matches counts as known, so `start` hands out only what comes after. */
  async scan(): Promise<PatternScan> {
    const result = await scanFilePattern(this.pattern, this.cache);
    this.note(result.skipped);
    for (const m of result.matches) this.matched.add(m.path);
    return result;
  }

  start(handlers: PatternHandlers): void {
    const tick = () => {
      this.timer = setTimeout(() => {
        this.scanning = this.rescan(handlers)
          .catch((err) => this.log.error({ pattern: this.pattern.pattern, err: err instanceof Error ? err.message : String(err) }, 'scanning the pattern failed: trying again'))
          .finally(() => {
            this.scanning = null;
            if (!this.stopped) tick();
          });
      }, this.scanMs);
    };
    tick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.scanning;
  }

  private async rescan(handlers: PatternHandlers): Promise<void> {
    const { matches, skipped } = await scanFilePattern(this.pattern, this.cache);
    this.note(skipped);
    const now = new Set(matches.map((m) => m.path));
    for (const m of matches) {
      this.gone.delete(m.path);
      if (this.matched.has(m.path)) continue;
      this.matched.add(m.path);
      handlers.added(m);
    }
    for (const path of this.matched) if (!now.has(path)) this.gone.add(path);
    for (const path of [...this.gone]) {
      if (this.stopped) return;
      if (await handlers.gone(path)) {
        this.gone.delete(path);
        this.matched.delete(path);
      }
    }
  }

  private note(skipped: PatternScan['skipped']): void {
    const next = new Map(skipped.map((s) => [s.path, s.reason]));
    for (const [path, reason] of next) {
      if (this.skipped.get(path) !== reason) this.log.warn({ pattern: this.pattern.pattern, path, reason }, 'a path of the pattern is left out');
    }
    for (const path of this.skipped.keys()) if (!next.has(path)) this.log.info({ pattern: this.pattern.pattern, path }, 'a path left out before is no longer');
    this.skipped = next;
  }
}
