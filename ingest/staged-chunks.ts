/**
 * A file chunk prepared for an import whose lines ClickHouse parses (issue 32): one parse per line,
 * in the engine, where the parser's way costs a parse in JavaScript and another of the rows it sent.
 *
 *   plain lines ─▶ their agents classified here ─▶ one INSERT … SELECT FROM Regexp (at write time)
 *   other lines, overlong ones ─▶ the parser (transforms/rows.ts), as every line of other imports
 *
 * A chunk whose plain lines the statement refuses (a line the format does not match, a value the
 * SQL does not read as the parser would) is read by the parser instead when it is written. Both
 * halves derive their ids from the lines' offsets and their tokens from the chunk's range, so a
 * replay after a crash lands nothing twice, as with the parser's batches.
 */
import { clickhouseCode } from '../core/db/clickhouse.js';
import { batchSegments, type IdOf } from './ids.js';
import { retrying, routingFor, withIds, type ChunkInput, type PipelineDeps, type Prepared, type SourceStats } from './pipeline.js';
import { dedupToken, isRetryableInsertError, storeAgentClasses, writeUint } from './sinks/clickhouse.js';
import type { StagedWriter } from './sinks/clickhouse-staged.js';
import { decodeLines, emptyDecoded, toRows, type Origin } from './transforms/rows.js';
import type { StagedReading } from './transforms/staged-rows.js';
import type { UserAgentClasses } from './transforms/user-agent.js';
import type { LineChunk, SourceLine } from './types.js';

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
 * Lines sent to the engine: plain (see AccessFields) and printable ASCII, which nginx's escaping
 * makes every line it writes. Other characters would reach the engine as other bytes than the
 * parser's text holds (an invalid UTF-8 byte is U+FFFD there).
 */
const SENT = /^[\x20-\x5b\x5d-\x7e]*$/;
const TAB = 0x09;
const NEWLINE = 0x0a;

export async function prepareStagedChunk(chunk: LineChunk, input: StagedInput, stats: SourceStats, deps: PipelineDeps): Promise<Prepared> {
  const routing = await routingFor(input.route, stats, deps);
  if (!('domainId' in routing)) throw new Error('a staged import needs the domain of its lines');
  const { domainId } = routing;
  const origin: Origin = { source: chunk.path, identity: chunk.identity };
  const range: [number, number] = [chunk.startOffset, chunk.endOffset];
  const token = dedupToken(chunk.identity, chunk.startOffset, chunk.endOffset);

  const staged: SourceLine[] = [];
  const parsed: SourceLine[] = [];
  // Each line sent as its offset (at most 16 digits), a tab, its characters (one byte each) and a line feed.
  const body = Buffer.allocUnsafe(chunk.endOffset - chunk.startOffset + chunk.lines.length * 18);
  let size = 0;
  const fresh = new Map<string, number>();
  for (const line of chunk.lines) {
    if (!SENT.test(line.text)) {
      parsed.push(line);
      continue;
    }
    staged.push(line);
    size = writeUint(body, size, line.offset);
    body[size++] = TAB;
    size += body.write(line.text, size, 'latin1');
    body[size++] = NEWLINE;
    const agent = input.reading.agentOf(line.text);
    if (!input.classified.has(agent) && !fresh.has(agent)) fresh.set(agent, input.classes.of(agent).id);
  }
  // Known from now on to the chunks after this one, whose writes come after this one's.
  for (const agent of fresh.keys()) input.classified.add(agent);
  const classes = [...fresh].map(([agent, id]) => ({ user_agent: agent, agent_class: id }));

  const decode = (lines: readonly SourceLine[], overlong: LineChunk['overlong']) => async () => {
    const decoded = emptyDecoded(input.classes);
    await decodeLines(decoded, lines, overlong, input.decoder, routing, origin, input.maxLineBytes);
    return decoded;
  };
  const rows = await withIds(decode(parsed, chunk.overlong), chunk.identity, range, stats, deps);
  const idOf: IdOf = await retrying(() => deps.ids.forBatch(chunk.identity, [domainId], ...range), 'allocating entry ids in Postgres', stats, deps);
  const segments = batchSegments(idOf, domainId, ...range);

  const batch: Prepared = { rows, token, lines: chunk.lines.length + chunk.overlong.length };
  if (staged.length > 0) {
    batch.staged = {
      domainId,
      length: staged.length,
      // Every statement at write time, after the batch before is written: two statements at once on
      // an embedded store's connection (this chunk's agents while the last chunk was inserted) hung
      // the import.
      write: async () => {
        await input.writer.classify(classes);
        // The classes themselves go in before any row that carries them.
        await storeAgentClasses(deps.clickhouse);
        try {
          await input.writer.insert(body.subarray(0, size), { domainId, segments, token: `${token}-staged`, retainedFromMs: input.retainedFromMs });
        } catch (err) {
          if (!refusedByEngine(err)) throw err;
          // The error's code only: its text quotes the line, which may hold what a URL carried.
          deps.log.info({ source: stats.name, startOffset: chunk.startOffset, code: clickhouseCode(err) }, "a chunk's lines are not all read in SQL: reading them in JavaScript");
          return toRows(await decode(staged, [])(), idOf);
        }
        deps.log.debug({ source: stats.name, startOffset: chunk.startOffset, lines: staged.length }, 'lines parsed and inserted by ClickHouse');
        return null;
      },
    };
  }
  return batch;
}

/**
 * The statement refused the chunk's data: a line the expression does not match (a data error, see
 * isRetryableInsertError), or one the SQL does not read as the parser would (its throwIf,
 * FUNCTION_THROW_IF_VALUE_IS_NON_ZERO). Sent again, it would be refused again.
 */
const refusedByEngine = (err: unknown): boolean => clickhouseCode(err) === 395 || !isRetryableInsertError(err);

