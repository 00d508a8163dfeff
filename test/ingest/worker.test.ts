/**
 * The ingest worker end to end, in-process: real files followed into the embedded ClickHouse, ids
 * from Postgres (PGlite, or the server in CI's second run), domains registered in Postgres.
 */
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseIngestConfig } from '../../ingest/config.js';
import { AMBIGUOUS_CONTEXT } from '../../ingest/transforms/rows.js';
import { startIngest, type IngestWorker } from '../../ingest/worker.js';
import { insertDomain } from '../../src/domains/store.js';
import { createLogger } from '../../core/log.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { accessIds, accessLine, accessLines, append, countRows, errorLogTime, FORMAT, HOST_FORMAT, KOLKATA, newDomain, select, T0, testWorkerOptions, timeLocal, until } from '../support/ingest.js';

let t: TestApp;
let logDir: string;
const workers: IngestWorker[] = [];
const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

beforeAll(async () => {
  t = await startTestApp();
  logDir = path.join(t.dataDir, 'logs');
  fs.mkdirSync(logDir);
});

afterEach(async () => {
  for (const w of workers.splice(0)) await w.close();
});

afterAll(async () => {
  await t?.close();
});

let fileSeq = 0;
const logFile = (name = 'access') => path.join(logDir, `${name}-${++fileSeq}.log`);

async function startWorker(yaml: string): Promise<IngestWorker> {
  const config = parseIngestConfig(yaml, path.join(logDir, 'ingest.yaml'));
  const worker = await startIngest(config, testWorkerOptions(t, log));
  workers.push(worker);
  return worker;
}

const q = (s: string) => JSON.stringify(s);
const fileSource = (domain: string | null, file: string, format = FORMAT, extra = '') =>
  `sources:\n  - ${domain ? `domain: ${domain}\n    ` : ''}access: ${q(file)}\n    format: ${q(format)}\n${extra}`;

/** Waits for exactly `n` rows; a timeout says how many there were, which tells a loss from a double. */
async function waitForRows(domainId: number, n: number, table: 'access_logs' | 'error_logs' | 'ingest_rejects' = 'access_logs'): Promise<void> {
  let seen = -1;
  try {
    await until(async () => (seen = await countRows(t.runtime.clickhouse, table, domainId)) === n, `${n} rows in ${table} of domain ${domainId}`);
  } catch (err) {
    throw new Error(`${(err as Error).message}; ${seen} rows at the end`);
  }
}

describe('following access files', () => {
  it('stores every line once, with the fields of an access entry, and counts it', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile();
    append(file, accessLines(0, 500));
    const worker = await startWorker(fileSource(domain.name, file));
    await waitForRows(domain.id, 500);
    append(file, accessLines(500, 1200));
    await waitForRows(domain.id, 1200);
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 1200, ids: 1200 });

    const [first] = await select<Record<string, unknown>>(t.runtime.clickhouse, `
      SELECT toUnixTimestamp64Milli(timestamp) AS ts, ip_address, method, url, protocol, status_code, response_size, referrer, user_agent, response_time
      FROM access_logs WHERE domain_id = {d:UInt32} AND url = '/item/10?q=3'`, { d: domain.id });
    // 64-bit integers come as JSON strings from a ClickHouse server and as numbers from chDB.
    expect({ ...first, ts: Number(first!.ts), response_size: Number(first!.response_size) }).toEqual({
      ts: T0 + 10_000, ip_address: '10.1.0.10', method: 'GET', url: '/item/10?q=3', protocol: 'HTTP/1.1',
      status_code: 500, response_size: 10, referrer: '', user_agent: 'test-agent/1', response_time: 10,
    });
    const stats = await until(() => worker.stats().find((s) => s.inserted === 1200), 'the counters');
    expect(stats).toMatchObject({ name: `access ${file}`, state: 'running', read: 1200, inserted: 1200, rejected: 0, lagBytes: 0 });
  });

  it('stores hostile content byte-exact: quotes, \\x escapes, 4 KiB urls, formula-looking agents, IPv6', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile();
    const longPath = `/${'a'.repeat(4096)}?x=${'b'.repeat(100)}`;
    const cases = [
      // nginx writes ", \ and bytes outside printable ASCII as \xHH.
      { logged: { url: '/q?s=\\x22quoted\\x22&b=\\x5C', ua: "=cmd|' /C calc'!A0", ref: 'https://x.test/\\xC3\\xA9t\\xC3\\xA9' }, url: '/q?s="quoted"&b=\\', ua: "=cmd|' /C calc'!A0", ref: 'https://x.test/été' },
      { logged: { url: longPath, ua: '+SUM(1+1)', ref: '-' }, url: longPath, ua: '+SUM(1+1)', ref: '' },
      { logged: { url: "/it's;DROP TABLE access_logs;--", ua: '@A1\\x09tab', ref: "-2+3" }, url: "/it's;DROP TABLE access_logs;--", ua: '@A1\ttab', ref: '-2+3' },
      { logged: { url: '/{x:String}%27%00', ua: '\\x00nul', ref: '-' }, url: '/{x:String}%27%00', ua: '\0nul', ref: '' },
    ];
    const lines = cases.map((c, i) =>
      `${i === 1 ? '2001:db8::7' : '198.51.100.9'} - - [${timeLocal(T0 + i)}] "GET ${c.logged.url} HTTP/2.0" 200 1 "${c.logged.ref}" "${c.logged.ua}" 0.001`);
    append(file, `${lines.join('\n')}\n`);
    await startWorker(fileSource(domain.name, file));
    await waitForRows(domain.id, cases.length);
    const rows = await select<{ url: string; user_agent: string; referrer: string; ip_address: string }>(
      t.runtime.clickhouse,
      'SELECT url, user_agent, referrer, ip_address FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY timestamp',
      { d: domain.id },
    );
    expect(rows.map((r) => [r.url, r.user_agent, r.referrer])).toEqual(cases.map((c) => [c.url, c.ua, c.ref]));
    expect(rows[1]!.ip_address).toBe('2001:db8::7');
  });

  it('a partial last line waits for its newline; an overlong line is rejected and the file goes on', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile();
    const overlong = accessLine(1).replace('/item/1', `/${'z'.repeat(70 * 1024)}`);
    const partial = accessLine(3);
    append(file, `${accessLine(0)}\n${overlong}\n${accessLine(2)}\nnot a log line\n${partial.slice(0, 40)}`);
    const worker = await startWorker(fileSource(domain.name, file));
    await waitForRows(domain.id, 2);
    await waitForRows(domain.id, 2, 'ingest_rejects');
    // The partial line has been seen and left alone (nothing more is read, nothing is lagging).
    await until(() => worker.stats()[0]!.read === 4, 'four lines read');
    expect(await countRows(t.runtime.clickhouse, 'access_logs', domain.id)).toBe(2);
    append(file, `${partial.slice(40)}\n`);
    await waitForRows(domain.id, 3);
    const [last] = await select<{ url: string }>(t.runtime.clickhouse, 'SELECT url FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY timestamp DESC LIMIT 1', { d: domain.id });
    expect(last!.url).toBe('/item/3?q=3');

    const rejects = await select<{ reason: string; length: string; line: string; source: string; offset: string }>(
      t.runtime.clickhouse,
      'SELECT reason, length, line, source, offset FROM ingest_rejects WHERE domain_id = {d:UInt32} ORDER BY offset',
      { d: domain.id },
    );
    expect(rejects).toHaveLength(2);
    expect({ ...rejects[0], length: Number(rejects[0]!.length), offset: Number(rejects[0]!.offset) }).toMatchObject({
      reason: 'line longer than 65536 bytes', length: Buffer.byteLength(overlong), source: file, offset: accessLine(0).length + 1,
    });
    expect(rejects[0]!.line.length).toBeLessThanOrEqual(1024);
    expect(rejects[1]!.reason).toMatch(/^does not parse: /);
    expect(rejects[1]!.line).toBe('not a log line');
    expect(worker.stats()[0]).toMatchObject({ read: 5, inserted: 3, rejected: 2 });
  });

  it('routes each line by $host: unknown hosts go to the rejects until the domain is registered', async () => {
    const known = await newDomain(t.runtime.db, 'known');
    const laterName = `later-${process.pid}.example.com`;
    const file = logFile();
    append(file, accessLines(0, 10, known.name.toUpperCase()) + accessLines(10, 15, laterName) + accessLines(15, 17, `${known.name}:8080`));
    await startWorker(fileSource(null, file, HOST_FORMAT));
    await waitForRows(known.id, 12);
    await until(async () => {
      const [row] = await select<{ n: string }>(t.runtime.clickhouse, 'SELECT count() AS n FROM ingest_rejects WHERE domain_id = 0 AND source = {s:String}', { s: file });
      return Number(row!.n) === 5;
    }, 'five rejects for the unknown host');
    const [reject] = await select<{ reason: string }>(t.runtime.clickhouse, 'SELECT reason FROM ingest_rejects WHERE source = {s:String} LIMIT 1', { s: file });
    expect(reject!.reason).toBe(`unknown domain "${laterName}": not registered`);

    // Registered while running: within the directory's refresh, its lines are stored, no restart.
    const later = await insertDomain(t.runtime.db, { name: laterName, ownerId: null });
    const rejectedBefore = async () =>
      Number((await select<{ n: string }>(t.runtime.clickhouse, 'SELECT count() AS n FROM ingest_rejects WHERE source = {s:String}', { s: file }))[0]!.n);
    let n = 20;
    await until(async () => {
      const stored = await countRows(t.runtime.clickhouse, 'access_logs', later.id);
      if (stored > 0) return true;
      // One line at a time: the next only once the previous one has been rejected.
      if ((await rejectedBefore()) - 5 < n - 20) return false;
      append(file, accessLines(n, n + 1, laterName));
      n += 1;
      return false;
    }, 'a line of the newly registered domain to be stored');
  });

  it('a source whose domain is not registered waits, reading nothing, and starts once it is', async () => {
    const name = `pending-${process.pid}.example.com`;
    const file = logFile();
    append(file, accessLines(0, 50));
    const worker = await startWorker(fileSource(name, file));
    await until(() => worker.stats()[0]!.state === 'waiting for domain', 'the source to wait');
    expect(worker.stats()[0]).toMatchObject({ read: 0, inserted: 0 });
    const domain = await insertDomain(t.runtime.db, { name, ownerId: null });
    await waitForRows(domain.id, 50);
  });

  it('a worker stopped while its source waited for the domain finds the file rotated away at its restart', async () => {
    const name = `rotated-${process.pid}.example.com`;
    const file = logFile();
    append(file, accessLines(0, 50));
    const yaml = fileSource(name, file);
    const first = await startWorker(yaml);
    await until(() => first.stats()[0]!.state === 'waiting for domain', 'the source to wait');
    await first.close();
    // Down, its domain registered meanwhile, the file rotated before the restart.
    const domain = await insertDomain(t.runtime.db, { name, ownerId: null });
    append(file, accessLines(50, 60));
    fs.renameSync(file, `${file}.1`);
    append(file, accessLines(60, 90));
    await startWorker(yaml);
    await waitForRows(domain.id, 90);
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 90, ids: 90 });
  });

  it('a domain registered while its sources wait is read within a second', async () => {
    const name = `soon-${process.pid}.example.com`;
    const files = [logFile(), logFile()];
    for (const file of files) append(file, accessLines(0, 20));
    const worker = await startWorker(`sources:\n${files.map((f) => `  - domain: ${name}\n    access: ${q(f)}\n    format: ${q(FORMAT)}\n`).join('')}`);
    await until(() => worker.stats().every((s) => s.state === 'waiting for domain'), 'both sources to wait', 15_000, 5);
    // Registered right after the sources' first look: a source that looks again only every few
    // seconds misses the second.
    const registeredAt = Date.now();
    const domain = await insertDomain(t.runtime.db, { name, ownerId: null });
    await until(() => worker.stats().every((s) => s.state === 'running'), 'both sources to run', 15_000, 5);
    const waitedMs = Date.now() - registeredAt;
    // The poll runs every 500 ms; the bound leaves room for a loaded machine.
    expect(waitedMs).toBeLessThan(1_500);
    await waitForRows(domain.id, 40);
  });

  it('rename-and-create and copytruncate rotations while a writer appends: every line exactly once', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile();
    fs.writeFileSync(file, '');
    await startWorker(fileSource(domain.name, file));
    const total = 6000;
    // Like nginx: one descriptor opened for appending, kept until it is told to reopen.
    let fd = fs.openSync(file, 'a');
    for (let n = 0; n < total; n += 100) {
      fs.writeSync(fd, accessLines(n, n + 100));
      if (n === 2000) fs.renameSync(file, `${file}.1`); // logrotate renames; nginx keeps writing to the old file…
      if (n === 2500) {
        // …until USR1 makes it reopen the path, which creates the new file.
        fs.closeSync(fd);
        fd = fs.openSync(file, 'a');
      }
      if (n === 3000) {
        // copytruncate: copy, then truncate in place while the writer keeps its (O_APPEND) descriptor.
        // No pause since the new file was created, so the follower has seen it empty at most: its
        // lines so far are only in the copy.
        fs.copyFileSync(file, `${file}.2`);
        fs.truncateSync(file, 0);
      }
      if (n % 500 === 0) await new Promise((r) => setTimeout(r, 20));
    }
    fs.closeSync(fd);
    await waitForRows(domain.id, total);
    const ids = await accessIds(t.runtime.clickhouse, domain.id);
    expect(ids).toEqual({ rows: total, ids: total });
    const [urls] = await select<{ n: string }>(t.runtime.clickhouse, 'SELECT uniqExact(url) AS n FROM access_logs WHERE domain_id = {d:UInt32}', { d: domain.id });
    expect(Number(urls!.n)).toBe(total);
  });

  it('a restart resumes from the checkpoints: nothing twice, nothing lost', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile();
    append(file, accessLines(0, 3000));
    const yaml = fileSource(domain.name, file);
    const first = await startWorker(yaml);
    await until(async () => (await countRows(t.runtime.clickhouse, 'access_logs', domain.id)) > 0, 'some rows');
    await first.close();
    append(file, accessLines(3000, 4000));
    await startWorker(yaml);
    await waitForRows(domain.id, 4000);
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 4000, ids: 4000 });
  });

  it('startAt: end skips what a new file already holds', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile();
    append(file, accessLines(0, 100));
    await startWorker(fileSource(domain.name, file, FORMAT, '    startAt: end\n'));
    // The skip is recorded as the file's checkpoint once the follower has looked at the file.
    const checkpoints = path.join(t.dataDir, 'ingest', 'checkpoints.json');
    const recorded = () => Object.values((JSON.parse(fs.readFileSync(checkpoints, 'utf8')) as { files: Record<string, { path: string }> }).files);
    await until(() => fs.existsSync(checkpoints) && recorded().some((c) => c.path === file), 'the skip to be recorded');
    append(file, accessLines(100, 110));
    await waitForRows(domain.id, 10);
  });
});

describe('following error files', () => {
  it('stores levels folded onto four and the context as a map; routes by the context host without a domain', async () => {
    const domain = await newDomain(t.runtime.db);
    const file = logFile('error');
    const lines = [
      `${errorLogTime(T0)} [crit] 12#12: *5 connect() failed (111: Connection refused) while connecting to upstream, client: 203.0.113.7, server: ${domain.name}, request: "GET /api HTTP/1.1", upstream: "http://127.0.0.1:9000/api", host: "${domain.name}"`,
      `${errorLogTime(T0 + 1000)} [notice] 12#12: signal process started`,
      `${errorLogTime(T0 + 2000)} [warn] 12#12: *6 an upstream response is buffered, client: 203.0.113.8, server: ${domain.name}, request: "POST /up HTTP/1.1", host: "${domain.name}", referrer: "https://r.test/"`,
    ];
    append(file, `${lines.join('\n')}\n`);
    await startWorker(`sources:\n  - error: ${q(file)}\n    timezone: ${KOLKATA.zone}\n`);
    // The notice has no host: it cannot be routed and is kept as a reject.
    await waitForRows(domain.id, 2, 'error_logs');
    const rows = await select<{ ts: string; level: string; message: string; context: Record<string, string> }>(
      t.runtime.clickhouse,
      'SELECT toUnixTimestamp64Milli(timestamp) AS ts, level, message, context FROM error_logs WHERE domain_id = {d:UInt32} ORDER BY timestamp',
      { d: domain.id },
    );
    expect({ ...rows[0], ts: Number(rows[0]!.ts) }).toEqual({
      ts: T0 - KOLKATA.offsetMs,
      level: 'error',
      message: 'connect() failed (111: Connection refused) while connecting to upstream',
      context: { client: '203.0.113.7', server: domain.name, request: 'GET /api HTTP/1.1', upstream: 'http://127.0.0.1:9000/api', host: domain.name },
    });
    expect(rows[1]).toMatchObject({ level: 'warn', context: { referrer: 'https://r.test/' } });
    // Rejects are their own insert, which may land after the rows.
    const [reject] = await until(async () => {
      const found = await select<{ reason: string; kind: string }>(t.runtime.clickhouse, 'SELECT reason, kind FROM ingest_rejects WHERE source = {s:String}', { s: file });
      return found.length > 0 && found;
    }, 'the reject to be stored');
    expect(reject).toEqual({ reason: 'no host to route the line by', kind: 'error' });
  });

  it('routing by context: an entry whose path or referrer forges a context naming another domain reaches neither domain', async () => {
    const [attacker, victim] = [await newDomain(t.runtime.db), await newDomain(t.runtime.db)];
    const file = logFile('error');
    const forged = `, client: 198.51.100.1, server: ${victim.name}, request: "GET / HTTP/1.1", host: "x`;
    const tail = (client: string) => `, client: ${client}, server: ${attacker.name}, request: "GET /p HTTP/1.1", host: "${attacker.name}"`;
    const lines = [
      // The decoded path holds a forged context whose host swallows the real one.
      `${errorLogTime(T0)} [error] 12#12: *5 open() "/srv/x${forged}" failed (2: No such file or directory)${tail('203.0.113.7')}`,
      // The referrer, which comes last, holds one.
      `${errorLogTime(T0 + 1000)} [error] 12#12: *6 open() "/srv/y" failed (2: No such file or directory)${tail('203.0.113.8')}, referrer: "r${forged}"`,
      // A message with ", client: " that names no other server is routed as before.
      `${errorLogTime(T0 + 2000)} [error] 12#12: *7 open() "/srv/a, client: b" failed (2: No such file or directory)${tail('203.0.113.9')}`,
    ];
    append(file, `${lines.join('\n')}\n`);
    await startWorker(`sources:\n  - error: ${q(file)}\n`);
    await waitForRows(attacker.id, 1, 'error_logs');
    const rejectsOf = () => select<{ reason: string; domain_id: number }>(t.runtime.clickhouse, 'SELECT reason, domain_id FROM ingest_rejects WHERE source = {s:String} ORDER BY offset', { s: file });
    await until(async () => (await rejectsOf()).length === 2, 'the two forged entries to be rejected');
    const stored = await select<{ message: string }>(t.runtime.clickhouse, 'SELECT message FROM error_logs WHERE domain_id IN ({a:UInt32}, {v:UInt32})', { a: attacker.id, v: victim.id });
    expect(stored).toEqual([{ message: 'open() "/srv/a, client: b" failed (2: No such file or directory)' }]);
    expect(await rejectsOf()).toEqual([
      { reason: AMBIGUOUS_CONTEXT, domain_id: 0 },
      { reason: AMBIGUOUS_CONTEXT, domain_id: 0 },
    ]);
  });
});

describe('syslog', () => {
  it('routes datagrams by tag; unknown tags and malformed datagrams become rejects', async () => {
    const domain = await newDomain(t.runtime.db);
    const worker = await startWorker(
      `syslog:\n  udp: 127.0.0.1:0\n  tags:\n    nginx_a: { domain: ${domain.name} }\n    nginx_e: { domain: ${domain.name}, type: error }\n    nginx_h: { format: ${q(HOST_FORMAT)} }\n`,
    );
    const port = worker.syslog!.udpAddress!.port;
    const socket = dgram.createSocket('udp4');
    const send = (text: string) => new Promise<void>((resolve, reject) => socket.send(text, port, '127.0.0.1', (err) => (err ? reject(err) : resolve())));
    const combined = accessLine(1).replace(/ 0\.\d+$/, '');
    await send(`<190>Nov 20 08:00:00 web1 nginx_a: ${combined}`);
    await send(`<190>Nov 20 08:00:01 web1 nginx_h: ${accessLine(2, domain.name)}`);
    await send(`<187>Nov 20 08:00:02 web1 nginx_e: ${errorLogTime(T0)} [error] 1#1: *1 open() "/x" failed (2: No such file or directory), client: 1.2.3.4, server: s, request: "GET /x HTTP/1.1", host: "h"`);
    await send(`<190>Nov 20 08:00:03 web1 other_tag: ${combined}`);
    await send('no header at all');
    socket.close();
    await waitForRows(domain.id, 2);
    await waitForRows(domain.id, 1, 'error_logs');
    await until(() => worker.stats()[0]!.rejected === 2, 'two rejects');
    const rejects = await select<{ reason: string }>(t.runtime.clickhouse, "SELECT reason FROM ingest_rejects WHERE source LIKE 'syslog udp %' ORDER BY offset");
    expect(rejects.map((r) => r.reason)).toEqual(['unknown syslog tag "other_tag": not in syslog.tags', expect.stringMatching(/^not a syslog message: /)]);
    const [error] = await select<{ message: string }>(t.runtime.clickhouse, 'SELECT message FROM error_logs WHERE domain_id = {d:UInt32}', { d: domain.id });
    expect(error!.message).toBe('open() "/x" failed (2: No such file or directory)');
  });

  it('takes a relay over TCP, newline and octet-counted framing alike', async () => {
    const domain = await newDomain(t.runtime.db);
    const worker = await startWorker(`syslog:\n  tcp: 127.0.0.1:0\n  tags:\n    nginx: { domain: ${domain.name}, format: ${q(FORMAT)} }\n`);
    const messages = Array.from({ length: 300 }, (_, n) => `<190>Nov 20 08:00:00 web1 nginx: ${accessLine(n)}`);
    const framed = messages.map((m, n) => (n % 2 === 0 ? `${m}\n` : `${Buffer.byteLength(m)} ${m}`)).join('');
    const socket = net.connect(worker.syslog!.tcpAddress!.port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
    await new Promise<void>((resolve) => socket.end(framed, resolve));
    await waitForRows(domain.id, 300);
    expect(await accessIds(t.runtime.clickhouse, domain.id)).toEqual({ rows: 300, ids: 300 });
  });
});
