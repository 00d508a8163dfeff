/**
 * The statement of an import whose lines ClickHouse parses (transforms/staged-rows.ts): a chunk's
 * plain lines, each after its byte offset and a tab, are inserted into access_logs by one
 * `INSERT … SELECT` from the `Regexp` format under the chunk's deduplication token, each row's user
 * agent class joined in from a table of the agents this import classified.
 *
 * A line the expression refuses, whose values the SQL does not read as the parser would, or older
 * than the retention (whose rows the caller counts, as the parser's summary does), fails
 * the whole statement (a data error: see isRetryableInsertError) before any row is written: the
 * rows reach the table as one block at the end (one chunk is far below min_insert_block_size_rows
 * and _bytes), and the caller reads that chunk with the parser instead.
 *
 * The agents' table is named `ingest_agents_<run>` and dropped when the import ends. A crash leaves
 * it behind; the next import drops those of an embedded store at once (the DATA_DIR lock means no
 * other import runs) and, on a server, those older than a day.
 */
import { randomBytes } from 'node:crypto';
import { Readable } from 'node:stream';
import { chdbOf, withLiterals, type ClickHouseClient } from '../../core/db/clickhouse.js';
import { SEGMENT_SIZE } from '../../core/entries.js';
import type { StagedReading } from '../transforms/staged-rows.js';
import { INSERT_SETTINGS, settingList, spooled, sqlString } from './clickhouse.js';

const PREFIX = 'ingest_agents_';

/** Where a chunk's rows go and how their ids are made (see ingest/ids.ts). */
export interface StagedTarget {
  domainId: number;
  /** The segment numbers of the chunk's range, `numbers[i]` for segment index `first + i`. */
  segments: { first: number; numbers: readonly number[] };
  token: string;
  /** Lines older (epoch ms) are refused: the caller counts what the retention drops. */
  retainedFromMs: number;
}

export interface StagedWriter {
  /** Records the classes of agents before rows carrying them are inserted. */
  classify(agents: readonly { user_agent: string; agent_class: number }[]): Promise<void>;
  /** Inserts `body` (lines `<offset>\t<line>\n`) as access rows; throws a data error when a line is not read here. */
  insert(body: Buffer, target: StagedTarget): Promise<void>;
  /** Drops the agents' table. */
  close(): Promise<void>;
}

export async function openStagedWriter(client: ClickHouseClient, reading: StagedReading): Promise<StagedWriter> {
  await dropLeftTables(client);
  // The name is made here, never from a line.
  const agents = `${PREFIX}${randomBytes(6).toString('hex')}`;
  await client.command({ query: `CREATE TABLE ${agents} (user_agent String, agent_class UInt64) ENGINE = Join(ANY, LEFT, user_agent)` });
  const statement = (source: string) => `INSERT INTO access_logs (domain_id, id, timestamp, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time, agent_class)
    SELECT {domain:UInt32}, arrayElement({segments:Array(UInt64)}, intDiv(o, ${SEGMENT_SIZE}) - {first:UInt64} + 1) * ${SEGMENT_SIZE} + o % ${SEGMENT_SIZE},
      fromUnixTimestamp64Milli(timestamp_ms, 'UTC'), ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time,
      assumeNotNull(agent_class)
    FROM (SELECT *, joinGetOrNull('${agents}', 'agent_class', user_agent) AS agent_class FROM (${reading.rows(source)}))
    WHERE throwIf(NOT valid OR agent_class IS NULL OR timestamp_ms < {retained:Int64}, 'a line is not read in SQL') = 0`;
  const regexp = { format_regexp: reading.regexp, format_regexp_escaping_rule: 'Raw' as const, format_regexp_skip_unmatched: 0 as const };

  return {
    async classify(classes) {
      if (classes.length > 0) await client.insert({ table: agents, values: classes, format: 'JSONEachRow' });
    },
    async insert(body, { domainId, segments, token, retainedFromMs }) {
      const params = { domain: domainId, segments: segments.numbers, first: segments.first, retained: retainedFromMs };
      const settings = { ...INSERT_SETTINGS, ...regexp, insert_deduplication_token: token };
      const chdb = chdbOf(client);
      if (chdb) {
        await spooled(chdb, body, (file) => chdb.queryAsync(`${withLiterals(statement(`file(${file}, 'Regexp', ${sqlString(reading.columns)})`), params)} SETTINGS ${settingList(settings)}`));
      } else {
        const result = await client.exec({
          query: `${statement(`input(${sqlString(reading.columns)})`)} FORMAT Regexp`,
          values: Readable.from([body], { objectMode: false }),
          query_params: params,
          clickhouse_settings: settings,
        });
        result.stream.resume();
      }
    },
    async close() {
      await client.command({ query: `DROP TABLE IF EXISTS ${agents} SYNC` });
    },
  };
}

/** Agents' tables a crashed import left: all of them in an embedded store, those older than a day on a server. */
async function dropLeftTables(client: ClickHouseClient): Promise<void> {
  const age = chdbOf(client) ? '' : 'AND metadata_modification_time < now() - INTERVAL 1 DAY';
  const result = await client.query({
    query: `SELECT name FROM system.tables WHERE database = currentDatabase() AND startsWith(name, {prefix:String}) ${age}`,
    query_params: { prefix: PREFIX },
    format: 'JSONCompactEachRow',
  });
  for (const [name] of await result.json<[string]>()) {
    if (/^\w+$/.test(name)) await client.command({ query: `DROP TABLE IF EXISTS ${name} SYNC` });
  }
}
