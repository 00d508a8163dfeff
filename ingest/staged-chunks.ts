/**
 * A file chunk prepared for an import whose lines ClickHouse parses (issue 32): one parse per line,
 * in the engine, where the parser's way costs a parse in JavaScript and another of the rows it sent.
 *
 *   plain lines (bytes) ─▶ their agents classified here ─▶ one INSERT … SELECT FROM Regexp (at write time)
 *   other lines, overlong ones ─▶ the parser (transforms/rows.ts), as every line of other imports
 *
 * A chunk whose plain lines the statement refuses (a line the format does not match, a value the
 * SQL does not read as the parser would) is read by the parser instead when it is written. Both
 * halves derive their ids from the lines' offsets and their tokens from the chunk's range, so a
 * replay after a crash lands nothing twice, as with the parser's batches.
 */
import { isAscii } from 'node:buffer';
import { clickhouseCode } from '../core/db/clickhouse.js';
import { batchSegments, type IdOf } from './ids.js';
import { retrying, routingFor, withIds, type ChunkInput, type PipelineDeps, type Prepared, type SourceStats } from './pipeline.js';
import { dedupToken, isRetryableInsertError, storeAgentClasses, writeUint } from './sinks/clickhouse.js';
import type { StagedWriter } from './sinks/clickhouse-staged.js';
import { decodeLines, emptyDecoded, toRows, type Origin } from './transforms/rows.js';
import type { StagedReading } from './transforms/staged-rows.js';
import type { UserAgentClasses } from './transforms/user-agent.js';
import { eachRawLine, linesIn } from './sources/line-cutter.js';
import type { LineChunk, RawLines, SourceLine } from './types.js';

export interface StagedInput extends ChunkInput {
  reading: StagedReading;
  writer: StagedWriter;
  classes: UserAgentClasses;
  /** Agents whose classes the writer has: each is classified and sent once per import. */
  classified: Set<string>;
  /**
   * Lines older than this (epoch ms) are the parser's, which counts them for the summary: the
   * retention drops their rows as they land, so none could be counted after the insert.
   */
  retainedFromMs: number;
}

/**
 * Lines sent to the engine: ASCII without a backslash, tab, carriage return or NUL, which nginx's
 * escaping makes every line it writes. The plain expression refuses those four (the line is the
 * parser's, with its `\xHH` escapes and stretch reader); a byte ≥ 0x80 would reach the engine as
 * other bytes than the parser's text holds (an invalid UTF-8 byte is U+FFFD there). One rule, read
 * two ways: in a part's Latin-1 text (UNSENT), and on an ASCII part's bytes (UNSENT_ASCII: a
 * search per byte value, not a scan in JavaScript).
 */
const UNSENT_CHARACTERS = String.raw`\x00\t\r\\\x80-\uffff`;
const UNSENT = new RegExp(`[${UNSENT_CHARACTERS}]`, 'g');
const UNSENT_ASCII = [0x00, 0x09, 0x0d, 0x5c];
const TAB = 0x09;
const NEWLINE = 0x0a;
/** A line's offset as sent: at most 16 digits, then a tab. */
const OFFSET_BYTES = 17;

export async function prepareStagedChunk(chunk: LineChunk, input: StagedInput, stats: SourceStats, deps: PipelineDeps): Promise<Prepared> {
  const { raw } = chunk;
  if (raw === undefined) throw new Error("a staged import reads its lines as bytes (the cutter's line-bytes framing)");
  const routing = await routingFor(input.route, stats, deps);
  if (!('domainId' in routing)) throw new Error('a staged import needs the domain of its lines');
  const { domainId } = routing;
  const origin: Origin = { source: chunk.path, identity: chunk.identity };
  const range: [number, number] = [chunk.startOffset, chunk.endOffset];
  const token = dedupToken(chunk.identity, chunk.startOffset, chunk.endOffset);

  const split = splitForEngine(chunk, raw, input.reading, input.classified);
  // The body and the parser's lines hold the lines from here: the chunk, kept until its
  // checkpoint moves, lets go of its copy (up to STAGED_CUT_LIMITS' bytes) while the next is read.
  raw.parts = [];
  // Known from now on to the chunks after this one, whose writes come after this one's.
  for (const agent of split.agents) input.classified.add(agent);
  const classes = split.agents.map((agent) => ({ user_agent: agent, agent_class: input.classes.of(agent).id }));

  const decode = (lines: readonly SourceLine[], overlong: LineChunk['overlong']) => async () => {
    const decoded = emptyDecoded(input.classes);
    await decodeLines(decoded, lines, overlong, input.decoder, routing, origin, input.maxLineBytes);
    return decoded;
  };
  const rows = await withIds(decode(split.parsed, chunk.overlong), chunk.identity, range, stats, deps);
  const idOf: IdOf = await retrying(() => deps.ids.forBatch(chunk.identity, [domainId], ...range), 'allocating entry ids in Postgres', stats, deps);
  const segments = batchSegments(idOf, domainId, ...range);

  const batch: Prepared = { rows, token, lines: linesIn(chunk) };
  if (split.sent > 0) {
    batch.staged = {
      domainId,
      length: split.sent,
      // Every statement at write time, after the batch before is written: two statements at once on
      // an embedded store's connection (this chunk's agents while the last chunk was inserted) hung
      // the import.
      write: async () => {
        await input.writer.classify(classes);
        // The classes themselves go in before any row that carries them.
        await storeAgentClasses(deps.clickhouse);
        try {
          await input.writer.insert(split.body, { domainId, segments, token: `${token}-staged`, retainedFromMs: input.retainedFromMs });
        } catch (err) {
          if (!refusedByEngine(err)) throw err;
          // The error's code only: its text quotes the line, which may hold what a URL carried.
          deps.log.info({ source: stats.name, startOffset: chunk.startOffset, code: clickhouseCode(err) }, "a chunk's lines are not all read in SQL: reading them in JavaScript");
          return toRows(await decode(linesSent(split.body), [])(), idOf);
        }
        deps.log.debug({ source: stats.name, startOffset: chunk.startOffset, lines: split.sent }, 'lines parsed and inserted by ClickHouse');
        return null;
      },
    };
  }
  return batch;
}

/** A chunk's lines split between the engine and the parser (see UNSENT_CHARACTERS). */
export interface EngineSplit {
  /** The lines sent, each as its offset, a tab and its bytes with their newline. */
  body: Buffer;
  sent: number;
  /** The others, for the parser. */
  parsed: SourceLine[];
  /** The agents of the lines sent that are not in `known`, each once. */
  agents: string[];
}

/** Splits a chunk's lines as bytes (`raw`), finding the agents of those sent on the way. */
export function splitForEngine(chunk: Pick<LineChunk, 'startOffset' | 'overlong'>, raw: RawLines, reading: StagedReading, known: ReadonlySet<string>): EngineSplit {
  const body = Buffer.allocUnsafe(raw.parts.reduce((n, part) => n + part.length, 0) + raw.count * OFFSET_BYTES);
  let size = 0;
  let sent = 0;
  const parsed: SourceLine[] = [];
  const agents = new Set<string>();
  // The part being walked, and where the first byte after the last line checked that a sent
  // line cannot hold is (Infinity: none); looked for again once a line has passed it.
  let current: Buffer | null = null;
  let bytes: Uint8Array = new Uint8Array(0);
  let unsentFrom: (from: number) => number = () => Infinity;
  let unsent = Infinity;
  eachRawLine(raw, chunk.startOffset, chunk.overlong, (text, part, start, end, offset) => {
    if (part !== current) {
      current = part;
      // A plain view: its subarrays cost less than a Buffer's.
      bytes = new Uint8Array(part.buffer, part.byteOffset, part.length);
      unsentFrom = unsentFinder(part, text);
      unsent = unsentFrom(start);
    } else if (unsent < start) {
      unsent = unsentFrom(start);
    }
    if (unsent < end) {
      parsed.push({ offset, text: part.toString('utf8', start, end) });
      return;
    }
    sent++;
    size = writeUint(body, size, offset);
    body[size++] = TAB;
    body.set(bytes.subarray(start, end + 1), size);
    size += end + 1 - start;
    const agent = reading.agentOf(text, start, end);
    if (!known.has(agent) && !agents.has(agent)) agents.add(detached(agent));
  });
  return { body: body.subarray(0, size), sent, parsed, agents: [...agents] };
}

/** The lines of a body made by splitForEngine, for the parser when the engine refused them. */
function linesSent(body: Buffer): SourceLine[] {
  const lines: SourceLine[] = [];
  for (let at = 0; at < body.length; ) {
    const tab = body.indexOf(TAB, at);
    const end = body.indexOf(NEWLINE, tab);
    lines.push({ offset: Number(body.toString('latin1', at, tab)), text: body.toString('latin1', tab + 1, end) });
    at = end + 1;
  }
  return lines;
}

/** In one of a chunk's parts (`text`, its Latin-1 reading): where the first byte at or after `from` is that a sent line cannot hold. */
function unsentFinder(part: Buffer, text: string): (from: number) => number {
  if (!isAscii(part)) {
    return (from) => {
      UNSENT.lastIndex = from;
      return UNSENT.exec(text)?.index ?? Infinity;
    };
  }
  // Each value's next place, searched again only once a line has passed it.
  const next = UNSENT_ASCII.map(() => -Infinity);
  return (from) => {
    let first = Infinity;
    for (let k = 0; k < next.length; k++) {
      if (next[k]! < from) {
        const at = part.indexOf(UNSENT_ASCII[k]!, from);
        next[k] = at === -1 ? Infinity : at;
      }
      first = Math.min(first, next[k]!);
    }
    return first;
  };
}

/**
 * A copy of `s` that holds its own characters: an agent sliced from a chunk's text would keep the
 * whole text alive for as long as the import remembers the agent.
 */
const detached = (s: string): string => Buffer.from(s, 'latin1').toString('latin1');

/**
 * The statement refused the chunk's data: a line the expression does not match (a data error, see
 * isRetryableInsertError), or one the SQL does not read as the parser would (its throwIf,
 * FUNCTION_THROW_IF_VALUE_IS_NON_ZERO). Sent again, it would be refused again.
 */
const refusedByEngine = (err: unknown): boolean => clickhouseCode(err) === 395 || !isRetryableInsertError(err);

