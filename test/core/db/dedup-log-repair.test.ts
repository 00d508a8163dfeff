import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { dropUncommittedDedupRecords } from '../../../core/db/dedup-log-repair.js';

// The files of a chDB data directory as the engine leaves them, written by hand: which records
// go is decided by the part directories on disk alone. (test/ingest/sinks/clickhouse.test.ts makes the same
// state with the real engine and checks that the batch lands when sent again.)

let dir: string;
let table: string;

beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-dedup-'));
  table = path.join(dir, 'store', '995', '995e418b-bb29-41f4-a618-c240ee591386');
  fs.mkdirSync(path.join(table, 'deduplication_logs'), { recursive: true });
});

afterEach(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

/** A complete part directory (its checksums are written before it is renamed into place). */
function part(name: string): void {
  fs.mkdirSync(path.join(table, name));
  fs.writeFileSync(path.join(table, name, 'checksums.txt'), 'checksums format version: 4\n');
}

const record = (operation: 1 | 2, partName: string, block: string) => `${operation}\t${partName}\t${partName.split('_')[0]}_${block}\n`;
const logFile = (n = 1) => path.join(table, 'deduplication_logs', `deduplication_log_${n}.txt`);

describe('deduplication records of interrupted inserts', () => {
  it('go when their part is neither on disk nor merged into one; the others stay as they were', async () => {
    part('20261125_1_3_1'); // blocks 1-3 merged
    part('20261125_4_4_0');
    part('20261124_5_5_0_7'); // mutated
    fs.mkdirSync(path.join(table, 'tmp_insert_20261125_6_6_0')); // the interrupted insert
    fs.mkdirSync(path.join(table, '20261125_7_7_0')); // no checksums: never complete
    const kept = [
      record(1, '20261125_1_1_0', '11_12'),
      record(1, '20261125_3_3_0', '31_32'),
      record(1, '20261125_4_4_0', '41_42'),
      record(1, '20261124_5_5_0', '51_52'),
      record(2, '20261125_8_8_0', '81_82'), // a drop stays whatever its part
    ];
    const gone = [record(1, '20261125_6_6_0', '61_62'), record(1, '20261125_7_7_0', '71_72'), record(1, '20261124_4_4_0', '44_44')];
    fs.writeFileSync(logFile(), [kept[0], kept[1], gone[0], kept[2], kept[3], gone[1], kept[4], gone[2]].join(''));
    fs.writeFileSync(logFile(2), kept[2]!);

    expect(await dropUncommittedDedupRecords(dir)).toEqual([{ table, removed: 3, unreadable: [] }]);
    expect(fs.readFileSync(logFile(), 'utf8')).toBe(kept.join(''));
    expect(fs.readFileSync(logFile(2), 'utf8')).toBe(kept[2]);
    // Nothing else is left beside the data, and a second look finds nothing to do.
    expect(fs.readdirSync(dir)).toEqual(['store']);
    expect(await dropUncommittedDedupRecords(dir)).toEqual([]);
  });

  it('leave a log file with a line of any other shape as it is', async () => {
    const text = `${record(1, '20261125_6_6_0', '61_62')}3\tsomething else\n`;
    fs.writeFileSync(logFile(), text);
    const torn = `${record(1, '20261125_6_6_0', '61_62')}1\t20261125_9_9_0`;
    fs.writeFileSync(logFile(2), torn);
    expect(await dropUncommittedDedupRecords(dir)).toEqual([{ table, removed: 0, unreadable: [logFile(), logFile(2)] }]);
    expect(fs.readFileSync(logFile(), 'utf8')).toBe(text);
    expect(fs.readFileSync(logFile(2), 'utf8')).toBe(torn);
  });
});
