/**
 * bench/user-agent-columns: what ClickHouse spends on the five user agent columns of access_logs
 * (sql/clickhouse/008), as LowCardinality(String), as String, or as one packed LowCardinality column
 * with the five names as ALIAS columns over it, against the table without them.
 *
 *   npx tsx bench/user-agent-columns.ts     # BENCH_LINES (default 1,000,000), BENCH_ROUNDS (default 6)
 *
 * bench/ingest's log is parsed and serialised once by the import's own code (ingest/transforms),
 * giving the TSV bodies of 20,000-row batches. Then, each round and variant on a fresh embedded
 * chDB migrated up to 007 plus the variant's columns: every body inserted as the sink does (a spool
 * file, INSERT … FROM INFILE), then OPTIMIZE … FINAL, which merges what background merges would;
 * timed as this process's CPU (chDB runs in it). The variants alternate in order every round; the
 * figure is the median of each round's difference to the table without the columns.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chdbOf, migrateClickhouse, openClickhouse } from '../core/db/clickhouse.js';
import { SQL_DIR } from '../core/db/migrate.js';
import { createLogger } from '../core/log.js';
import { compileAccessFormat } from '../ingest/parsers/access-format.js';
import { accessDecoder, decodeLines, emptyDecoded, toRows } from '../ingest/transforms/rows.js';
import { ACCESS_FORMAT, accessLogBlocks } from './lib/access-log.js';
import { median } from './lib/baseline.js';
import { fmt } from './lib/util.js';

const LINES = Number(process.env.BENCH_LINES ?? 1_000_000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 6);
const BATCH = 20_000;
const CLASS_COLUMNS = ['browser', 'os', 'device', 'bot_name', 'bot_kind'];
// Milliseconds of a GROUP BY browser, device (filtered on bot_kind) over the stored rows, per column type.
const groupByMs = new Map<string, number[]>([['LowCardinality(String)', []], ['String', []], ['packed', []], ['id', []]]);
/** The 'id' variant's classes: the five values (tab-joined) by their number. */
const classIds = new Map<string, number>();

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-bench-ua-columns-'));
try {
  console.log(`bench/user-agent-columns: ${fmt(LINES)} lines, ${ROUNDS} rounds; Node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
  const withClasses = await bodies();
  // The same rows without the class columns: the first 12 fields of every line.
  const without = withClasses.map((b) => Buffer.from(b.toString('utf8').replace(/^((?:[^\t\n]*\t){11}[^\t\n]*)\t[^\n]*$/gm, '$1')));
  // The five values joined by \x1f into one field.
  const packed = withClasses.map((b) => Buffer.from(b.toString('utf8').replace(/^((?:[^\t\n]*\t){12})([^\n]*)$/gm, (_, head: string, tail: string) => `${head}${tail.replaceAll('\t', '\x1f')}`)));
  // The five values as the number of their class, looked up in a Join table at query time.
  const ids = withClasses.map((b) =>
    Buffer.from(
      b.toString('utf8').replace(/^((?:[^\t\n]*\t){12})([^\n]*)$/gm, (_, head: string, tail: string) => {
        if (!classIds.has(tail)) classIds.set(tail, 0x1000_0000_0000 + classIds.size * 7919);
        return `${head}${classIds.get(tail)}`;
      }),
    ),
  );
  const before = path.join(dir, 'migrations-before-008');
  fs.mkdirSync(before);
  for (const file of fs.readdirSync(path.join(SQL_DIR, 'clickhouse'))) if (file < '008') fs.copyFileSync(path.join(SQL_DIR, 'clickhouse', file), path.join(before, file));

  const variants = [
    { name: 'without the columns', type: null, bodies: without },
    { name: '5 × LowCardinality(String)', type: 'LowCardinality(String)', bodies: withClasses },
    { name: '5 × String', type: 'String', bodies: withClasses },
    { name: 'packed LowCardinality + 5 ALIAS', type: 'packed', bodies: packed },
    { name: 'one UInt64 class id + a Join table of the classes', type: 'id', bodies: ids },
  ];
  const cpu = new Map<string, number[]>(variants.map((v) => [v.name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const v of round % 2 === 0 ? variants : [...variants].reverse()) {
      const ms = await insertAll(before, v.type, v.bodies, `${round}-${v.type ?? 'none'}`);
      cpu.get(v.name)!.push(ms);
    }
    console.log(`round ${round + 1}: ${variants.map((v) => `${v.name} ${fmt(cpu.get(v.name)!.at(-1)!)} ms`).join(', ')} (load average ${os.loadavg()[0]!.toFixed(1)})`);
  }
  const base = cpu.get(variants[0]!.name)!;
  for (const v of variants.slice(1)) {
    const extra = median(cpu.get(v.name)!.map((ms, i) => ms - base[i]!));
    console.log(`${v.name}: ${fmt(extra)} ms more CPU than without the columns (median of the rounds' differences; ${fmt(median(base))} ms without); GROUP BY browser, device over the rows: ${fmt(median(groupByMs.get(v.type!)!))} ms (median)`);
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}

/** The import's TSV bodies of bench/ingest's log, BATCH rows each, with the user agent columns. */
async function bodies(): Promise<Buffer[]> {
  const decoder = accessDecoder(compileAccessFormat(ACCESS_FORMAT));
  const out: Buffer[] = [];
  let lines: { text: string; offset: number }[] = [];
  let offset = 0;
  const flush = async () => {
    const decoded = emptyDecoded();
    await decodeLines(decoded, lines, [], decoder, { domainId: 1 }, { source: 'bench', identity: 'bench' }, Infinity);
    const rows = toRows(decoded, (_domain, at) => 2 ** 32 + at);
    out.push(Buffer.from(rows.access.bytes));
    rows.access.release();
    lines = [];
  };
  for (const block of accessLogBlocks(LINES)) {
    for (const text of block.split('\n')) {
      if (text === '') continue;
      lines.push({ text, offset });
      offset += Buffer.byteLength(text) + 1;
      if (lines.length === BATCH) await flush();
    }
  }
  if (lines.length > 0) await flush();
  return out;
}

/** CPU ms of inserting every body and merging, on a fresh chDB whose access_logs has the columns as `type` (or none). */
async function insertAll(migrations: string, type: string | null, bodies: Buffer[], name: string): Promise<number> {
  const dataDir = path.join(dir, name);
  const client = await openClickhouse({ dataDir });
  try {
    await migrateClickhouse(client, createLogger('silent'), { LOG_RETENTION_DAYS: 90 }, migrations);
    const chdb = chdbOf(client)!;
    if (type === 'packed') {
      // substringIndex on a LowCardinality column is evaluated on its dictionary, not per row.
      const field = (k: number) => `substringIndex(substringIndex(user_agent_class, '\\x1f', ${k}), '\\x1f', -1)`;
      await chdb.queryAsync(`ALTER TABLE access_logs ADD COLUMN user_agent_class LowCardinality(String), ${CLASS_COLUMNS.map((c, i) => `ADD COLUMN ${c} LowCardinality(String) ALIAS ${field(i + 1)}`).join(', ')}`);
    } else if (type === 'id') {
      await chdb.queryAsync('ALTER TABLE access_logs ADD COLUMN agent_class UInt64');
      await chdb.queryAsync(`CREATE TABLE agent_classes (id UInt64, ${CLASS_COLUMNS.map((c) => `${c} String`).join(', ')}) ENGINE = Join(ANY, LEFT, id)`);
      const values = [...classIds].map(([tail, id]) => `${id}\t${tail}\n`).join('');
      const file = path.join(dataDir, 'classes.tsv');
      fs.writeFileSync(file, values);
      await chdb.queryAsync(`INSERT INTO agent_classes FROM INFILE '${file}' FORMAT TabSeparated`);
    } else if (type !== null) await chdb.queryAsync(`ALTER TABLE access_logs ${CLASS_COLUMNS.map((c) => `ADD COLUMN ${c} ${type}`).join(', ')}`);
    const classes = type === null ? [] : type === 'packed' ? ['user_agent_class'] : type === 'id' ? ['agent_class'] : CLASS_COLUMNS;
    const columns = ['domain_id', 'id', 'timestamp', 'ip_address', 'method', 'url', 'protocol', 'status_code', 'response_size', 'referrer', 'user_agent', 'response_time', ...classes];
    const from = process.cpuUsage();
    for (const [i, body] of bodies.entries()) {
      const file = path.join(dataDir, `batch-${i}.tsv`);
      fs.writeFileSync(file, body);
      await chdb.queryAsync(`INSERT INTO access_logs (${columns.join(', ')}) FROM INFILE '${file}' SETTINGS async_insert = 0 FORMAT TabSeparated`);
      fs.rmSync(file);
    }
    await chdb.queryAsync('OPTIMIZE TABLE access_logs FINAL');
    const used = process.cpuUsage(from);
    if (type !== null) {
      const t = performance.now();
      const column = (c: string) => (type === 'id' ? `joinGet('agent_classes', '${c}', agent_class)` : c);
      await chdb.queryAsync(`SELECT ${column('browser')} AS b, ${column('device')} AS d, count() FROM access_logs WHERE ${column('bot_kind')} != 'ai' GROUP BY b, d FORMAT Null`);
      groupByMs.get(type)!.push(performance.now() - t);
    }
    return (used.user + used.system) / 1000;
  } finally {
    await client.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}
