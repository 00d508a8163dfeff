/**
 * Makes embedded ClickHouse's insert deduplication crash-consistent again before the engine opens.
 *
 * A table with `non_replicated_deduplication_window` remembers the block id of each insert (from
 * its `insert_deduplication_token`) in `<table>/deduplication_logs/deduplication_log_N.txt`, one
 * record `1<TAB>part<TAB>block id` per part. The engine writes that record before it renames the
 * new part from its temporary directory into place (MergeTreeSink: addPart, then
 * renameTempPartAndAdd, then commit; ClickHouse 26.7 in chDB 3.4). A process killed between the
 * two leaves a record for a part that never became active: the part's temporary directory is
 * deleted at the next start, the record stays, and every later insert with the same token is taken
 * for a duplicate and silently dropped. Embedded chDB dies with tailhouse, so a SIGKILL of tailhouse
 * in the middle of an insert hits exactly this window, and the batch the pipeline sends again
 * after the restart (it was never acknowledged) would be lost whole.
 *
 * So before chDB loads the tables (DATA_DIR lock held: no other process uses these files), every
 * record whose part is neither on disk nor covered by a merged part on disk is removed. It must
 * happen before the first insert of the run: the engine numbers new blocks from the highest one on
 * disk, so the number of a part that never landed is given again, and a record naming it would
 * then look backed.
 *
 * Only records of this exact shape are touched; a log file with a line of any other shape is left
 * as it is (and reported). Removing a record whose part was dropped since (retention, TRUNCATE)
 * is harmless: the engine keeps no rows for it either.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { replaceFile } from '../replace-file.js';

const LOGS_DIR = 'deduplication_logs';
const LOG_FILE = /^deduplication_log_\d+\.txt$/;
/** `partition_min_max_level` and perhaps `_mutation`; partition ids hold no underscore. */
const PART_NAME = /^([^_]+)_(\d+)_(\d+)_(\d+)(?:_(\d+))?$/;
/** Written beside the data, renamed over a log file: never inside `deduplication_logs`, where the engine parses every name. */
const TEMP_NAME = '.deduplication-log-repair.tmp';

export interface DedupRepair {
  /** `database.table`, or the table's data directory when no name links to it. */
  table: string;
  /** Records removed: their parts never became active. */
  removed: number;
  /** Log files left alone because a line did not read as a record. */
  unreadable: string[];
}

interface BlockRange {
  partition: string;
  min: number;
  max: number;
}

function rangeOf(partName: string): BlockRange | null {
  const m = PART_NAME.exec(partName);
  return m ? { partition: m[1]!, min: Number(m[2]), max: Number(m[3]) } : null;
}

/** The block ranges of the parts on disk: complete part directories (a part's checksums are written before it is renamed into place). */
async function partsOnDisk(tableDir: string): Promise<BlockRange[]> {
  const parts: BlockRange[] = [];
  for (const entry of await fs.readdir(tableDir, { withFileTypes: true })) {
    const range = entry.isDirectory() ? rangeOf(entry.name) : null;
    if (range && (await exists(path.join(tableDir, entry.name, 'checksums.txt')))) parts.push(range);
  }
  return parts;
}

/**
 * Removes the deduplication records of inserts interrupted before their part was renamed into
 * place, in every table of the chDB data directory `chdbDir`. Call it before chDB opens the directory.
 */
export async function dropUncommittedDedupRecords(chdbDir: string): Promise<DedupRepair[]> {
  const repairs: DedupRepair[] = [];
  // Left by a repair killed before its rename.
  await fs.rm(path.join(chdbDir, TEMP_NAME), { force: true });
  const names = await tableNames(chdbDir);
  for (const tableDir of await tableDirs(chdbDir)) {
    const logsDir = path.join(tableDir, LOGS_DIR);
    const parts = await partsOnDisk(tableDir);
    const backed = (record: BlockRange) => parts.some((p) => p.partition === record.partition && p.min <= record.min && record.max <= p.max);
    const repair: DedupRepair = { table: names.get(tableDir) ?? tableDir, removed: 0, unreadable: [] };
    for (const name of (await fs.readdir(logsDir)).filter((n) => LOG_FILE.test(n)).sort()) {
      const file = path.join(logsDir, name);
      const lines = (await fs.readFile(file, 'utf8')).split('\n');
      // Every record ends with a newline: the text after the last one is empty.
      if (lines.pop() !== '') {
        repair.unreadable.push(file);
        continue;
      }
      const records = lines.map((line) => {
        const [operation, part, blockId, ...rest] = line.split('\t');
        const range = part === undefined ? null : rangeOf(part);
        return { line, operation, range, readable: (operation === '1' || operation === '2') && range !== null && !!blockId && rest.length === 0 };
      });
      if (records.some((r) => !r.readable)) {
        repair.unreadable.push(file);
        continue;
      }
      // Additions of parts that never landed go; drops, and additions of parts on disk, stay.
      const kept = records.filter((r) => r.operation !== '1' || backed(r.range!));
      if (kept.length === records.length) continue;
      repair.removed += records.length - kept.length;
      await replaceFile(file, path.join(chdbDir, TEMP_NAME), kept.map((r) => `${r.line}\n`).join(''));
    }
    if (repair.removed > 0 || repair.unreadable.length > 0) repairs.push(repair);
  }
  return repairs;
}

/** `store/<xyz>/<uuid>/` directories (the Atomic database layout chDB uses) that have a deduplication log. */
async function tableDirs(chdbDir: string): Promise<string[]> {
  const store = path.join(chdbDir, 'store');
  const dirs: string[] = [];
  for (const prefix of await readdirOrEmpty(store)) {
    for (const uuid of await readdirOrEmpty(path.join(store, prefix))) {
      const dir = path.join(store, prefix, uuid);
      if (await exists(path.join(dir, LOGS_DIR))) dirs.push(dir);
    }
  }
  return dirs;
}

/** `database.table` by data directory, from the links `data/<database>/<table>` → `store/…`. */
async function tableNames(chdbDir: string): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  const data = path.join(chdbDir, 'data');
  for (const database of await readdirOrEmpty(data)) {
    for (const table of await readdirOrEmpty(path.join(data, database))) {
      const real = await fs.realpath(path.join(data, database, table)).catch(() => null);
      if (real) names.set(real, `${database}.${table}`);
    }
  }
  return names;
}

async function readdirOrEmpty(dir: string): Promise<string[]> {
  try {
    return await fs.readdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT' || (err as NodeJS.ErrnoException).code === 'ENOTDIR') return [];
    throw err;
  }
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch {
    return false;
  }
}
