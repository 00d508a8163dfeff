/**
 * The transform between sources and the sink: lines become rows. Each line is parsed, routed to
 * its domain (the source's own, or the one its host names) and given its id; whatever cannot be
 * stored as an entry (does not parse, names an unknown domain, too long) becomes a reject row
 * with its reason, so that nothing read is dropped without a trace.
 */
import { isStoredTime, STORED_TIME_RANGE_TEXT } from '../../core/db/time-range.js';
import type { IdOf } from '../ids.js';
import { newAccessFields, type AccessLineParser } from '../parsers/access-format.js';
import { parseErrorLine, routingNameOf } from '../parsers/error-log.js';
import { AccessBatch, type AccessTsv, type ErrorRow, type RejectRow } from '../sinks/clickhouse.js';
import type { AccessEntry, ErrorEntry, RejectCause } from '../../core/entries.js';
import type { LineChunk, SourceLine } from '../types.js';
import type { DomainDirectory } from '../domains.js';
import { userAgentClasses, type UserAgentClasses } from './user-agent.js';

export type LogKind = 'access' | 'error';

/** How the lines of one input are read: their kind and parser. */
export type Decoder = { kind: 'access'; parse: AccessLineParser } | { kind: 'error'; timezone: string };

export function accessDecoder(parse: AccessLineParser): Decoder {
  return { kind: 'access', parse };
}

export function errorDecoder(timezone: string): Decoder {
  return { kind: 'error', timezone };
}

/**
 * A fixed domain id, or each line's host looked up in the directory, or none: every line is a
 * reject for `reason` (a file whose path names no valid domain).
 */
export type Routing = { domainId: number } | { byHost: DomainDirectory } | { rejected: string };

/** Where lines were read: the source's name for the rejects and the identity their ids derive from. */
export interface Origin {
  source: string;
  identity: string;
}

interface Routed<T> {
  entry: T;
  domainId: number;
  offset: number;
}

export type { RejectCause };

/** A reject row with its cause. */
export interface Reject extends RejectRow {
  cause: RejectCause;
}

/**
 * Lines decoded and routed, not yet given ids. Access rows are serialised as they are parsed, with
 * their user agent's class (ingest/transforms/user-agent.ts).
 */
export interface Decoded {
  access: AccessBatch;
  error: Routed<ErrorEntry>[];
  rejects: Reject[];
}

/** Rows ready for the sink. */
export interface Rows {
  access: AccessTsv;
  error: ErrorRow[];
  rejects: Reject[];
}

/** An empty batch; its access rows' user agents classified by `classes` (the process's cache by default). */
export const emptyDecoded = (classes: UserAgentClasses = userAgentClasses): Decoded => ({ access: new AccessBatch(classes), error: [], rejects: [] });

/** A time the log store cannot hold, or no query could reach. */
export const OUT_OF_RANGE = `time outside ${STORED_TIME_RANGE_TEXT}`;

export const AMBIGUOUS_CONTEXT =
  'context reads two ways naming different servers (the message or referrer holds text shaped like nginx\'s context): not routed; give the domain an error_log and source of its own';

/** A line kept with why it is no entry; `length` is the whole line's bytes (`line` may be only its head). */
export function rejectRow(origin: Origin, kind: LogKind, domainId: number | null, offset: number, line: string, cause: RejectCause, reason: string, length = Buffer.byteLength(line)): Reject {
  return { domainId, kind, source: origin.source, identity: origin.identity, offset, cause, reason, line, length };
}

/**
 * The host a line names, as domains are registered: lower-case, without a port or a final dot.
 * An access line has `$host`/`$server_name`; an error line the `server` (else `host`) of its context.
 */
export function normaliseHost(host: string): string {
  let h = host.trim().toLowerCase();
  if (!h.startsWith('[')) h = h.replace(/:\d+$/, '');
  return h.endsWith('.') ? h.slice(0, -1) : h;
}

/**
 * Parses and routes `lines` (with the chunk's overlong lines, if any) into `into`. With host routing,
 * a host not in the directory gets one reload of names older than a second before its lines are
 * rejected, so a domain registered a moment ago is found.
 */
export async function decodeLines(
  into: Decoded,
  lines: readonly SourceLine[],
  overlong: LineChunk['overlong'],
  decoder: Decoder,
  routing: Routing,
  origin: Origin,
  maxLineBytes: number,
): Promise<void> {
  const fixed = 'domainId' in routing ? routing.domainId : null;
  const reject = (offset: number, line: string, length: number, cause: RejectCause, reason: string, domainId = fixed) =>
    into.rejects.push(rejectRow(origin, decoder.kind, domainId, offset, line, cause, reason, length));

  if ('rejected' in routing) {
    for (const line of lines) reject(line.offset, line.text, Buffer.byteLength(line.text), 'invalid_path_domain', routing.rejected);
    for (const o of overlong) reject(o.offset, o.head, o.length, 'invalid_path_domain', routing.rejected);
    return;
  }
  // Entries waiting for their domain when routing by host: those whose host the directory did not know.
  const pending: { entry: AccessEntry | ErrorEntry; plain: boolean; host: string | null; line: SourceLine }[] = [];
  const byHost = 'byHost' in routing ? routing.byHost : null;
  if (decoder.kind === 'access') {
    // One object filled line after line: a batch leaves no entry per line behind.
    const fields = newAccessFields();
    const parse = decoder.parse;
    for (const line of lines) {
      const reason = parse.into(line.text, fields);
      if (reason !== null) reject(line.offset, line.text, Buffer.byteLength(line.text), 'unparsed', `does not parse: ${reason}`);
      else if (!isStoredTime(fields.timestamp)) reject(line.offset, line.text, Buffer.byteLength(line.text), 'time_out_of_range', OUT_OF_RANGE);
      else if (fixed !== null) into.access.add(fields, fields.plain, fixed, line.offset);
      else {
        const domainId = fields.host === null ? undefined : byHost!.idOf(normaliseHost(fields.host));
        if (domainId !== undefined) into.access.add(fields, fields.plain, domainId, line.offset);
        else pending.push({ entry: { ...fields }, plain: fields.plain, host: fields.host, line });
      }
    }
  } else {
    for (const line of lines) {
      const parsed = parseErrorLine(line.text, decoder.timezone);
      if (!parsed.ok) reject(line.offset, line.text, Buffer.byteLength(line.text), 'unparsed', `does not parse: ${parsed.reason}`);
      else if (!isStoredTime(parsed.entry.timestamp)) reject(line.offset, line.text, Buffer.byteLength(line.text), 'time_out_of_range', OUT_OF_RANGE);
      else if (fixed !== null) into.error.push({ entry: parsed.entry, domainId: fixed, offset: line.offset });
      // A context that reads two ways naming different servers holds a client's forgery (a decoded
      // request path or referrer shaped like nginx's context): routing by it would let a client of
      // one domain write into another.
      else if (parsed.contextAmbiguous) reject(line.offset, line.text, Buffer.byteLength(line.text), 'ambiguous_context', AMBIGUOUS_CONTEXT, null);
      else pending.push({ entry: parsed.entry, plain: false, host: routingNameOf(parsed.entry.context), line });
    }
  }
  for (const o of overlong) reject(o.offset, o.head, o.length, 'too_long', `line longer than ${maxLineBytes} bytes`);
  if (pending.length === 0 || byHost === null) return;

  if (pending.some((p) => p.host !== null && byHost.idOf(normaliseHost(p.host)) === undefined)) await byHost.refresh(1_000);
  for (const { entry, plain, host, line } of pending) {
    const name = host === null ? '' : normaliseHost(host);
    const domainId = name === '' ? undefined : byHost.idOf(name);
    if (domainId === undefined) {
      if (name === '') reject(line.offset, line.text, Buffer.byteLength(line.text), 'no_host', 'no host to route the line by', null);
      else reject(line.offset, line.text, Buffer.byteLength(line.text), 'unknown_domain', `unknown domain ${JSON.stringify(name)}: not registered`, null);
    } else if ('level' in entry) {
      into.error.push({ entry, domainId, offset: line.offset });
    } else {
      into.access.add(entry, plain, domainId, line.offset);
    }
  }
}

/** The domains decoded entries were routed to: their segment numbers must exist before ids are made. */
export function domainsOf(decoded: Decoded): Set<number> {
  const ids = new Set<number>(decoded.access.domains);
  for (const r of decoded.error) ids.add(r.domainId);
  return ids;
}

/**
 * Gives every decoded entry its id: access rows become their TabSeparated body, error entries
 * their rows (no copies: a batch is large). The decoded batch cannot be used afterwards.
 */
export function toRows(decoded: Decoded, idOf: IdOf): Rows {
  const row = <T>(r: Routed<T>) => Object.assign(r.entry as T & { domainId: number; id: number }, { domainId: r.domainId, id: idOf(r.domainId, r.offset) });
  return { access: decoded.access.withIds(idOf), error: decoded.error.map(row), rejects: decoded.rejects };
}

/** Entries of a batch (access and error) older than `ms`, epoch milliseconds. */
export function entriesOlderThan(rows: Rows, ms: number): number {
  let n = 0;
  for (const t of rows.access.timestamps) if (t < ms) n++;
  for (const r of rows.error) if (r.timestamp < ms) n++;
  return n;
}
