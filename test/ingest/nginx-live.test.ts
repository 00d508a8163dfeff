/**
 * A real nginx, started here, gets hostile values in every variable a client can put in a log line
 * ($remote_user by basic auth, the request line's method, target and protocol, Host, Referer,
 * User-Agent, X-Forwarded-For, a custom header, cookies, arguments: spaces, quotes, backslashes,
 * UTF-8, Latin-1, control bytes, fake times and contexts, values of about 8 KB), logged in six
 * formats, free text quoted and not. Every line goes through the ingest path into ClickHouse (the
 * worker following two files live, the import for the others) and must be stored with exactly the
 * values the client sent, none rejected; so must the error log, whose entries for targets with
 * `%0d%0a` and `%0a` nginx writes across lines.
 *
 * The expectations come from what the client sent and what nginx answered (status, body length),
 * never from reading the logs: the values the client does not choose (times) are checked against
 * the clock around each request, within a second.
 *
 * nginx must be installed (`apt-get install -y nginx`; .ci/run does it): without it this fails.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseIngestConfig } from '../../ingest/config.js';
import { importFiles, type ImportSummary } from '../../ingest/import.js';
import { startIngest, type IngestWorker } from '../../ingest/worker.js';
import { createLogger } from '../../core/log.js';
import { startTestApp, type TestApp } from '../support/app.js';
import { findNginx, nginxConf } from '../support/nginx.js';
import { freePort } from '../support/ports.js';
import { countRows, newDomain, select, until } from '../support/ingest.js';
import { loggedText, splitRequest } from '../support/nginx-logged.js';

const log = createLogger(process.env.TEST_LOG_LEVEL ?? 'silent');

// ---- what the client sends --------------------------------------------------------------------
// Byte strings: one character per byte (latin1), as they go on the wire.

interface Request {
  n: number;
  name: string;
  client: '127.0.0.1' | '127.0.0.2';
  /** The request line as sent (method, target, protocol), bytes. */
  line: string;
  /** Host header; null: none sent. */
  host: string | null;
  referer: string | null;
  userAgent: string | null;
  xForwardedFor: string | null;
  cookie: string | null;
  custom: string | null;
  /** Basic-auth user ($remote_user), bytes. */
  user: string | null;
}

/** What nginx answered, and when. */
interface Answer {
  status: number;
  bodyBytes: number;
  sentAt: number;
  answeredAt: number;
}

const utf8 = (text: string) => Buffer.from(text, 'utf8').toString('latin1');
const long = (unit: string, bytes: number) => unit.repeat(Math.ceil(bytes / unit.length)).slice(0, bytes);
const FAKE_TAIL = '[21/Nov/2026:08:15:30 +0100] "GET / HTTP/1.1" 200 5 "-" "-"';
const CONTROL = 'a\x01b\x1bc\x7fd\x09e';

/** Hostile text for a header value (nginx refuses NUL and a bare CR there). */
const HOSTILE_VALUES = [
  'bob smith',
  'a [b] "c" \\d',
  `x ${FAKE_TAIL}`,
  `", host: "forged.example`,
  CONTROL,
  utf8('café 日本 😀 “quoted”'),
  '\xe9\xff latin1',
  '-',
  '',
  ' [ ] " \\ ',
  '=cmd|\' /C calc\'!A0',
];

function requests(): Omit<Request, 'n'>[] {
  const base = { client: '127.0.0.1' as const, host: 'shop.test', referer: null, userAgent: null, xForwardedFor: null, cookie: null, custom: null, user: null };
  const get = (target: string) => `GET ${target} HTTP/1.1`;
  const list: Omit<Request, 'n'>[] = [];
  const add = (name: string, patch: Partial<Omit<Request, 'n'>>) => list.push({ ...base, name, line: get('/index.html'), ...patch });
  HOSTILE_VALUES.forEach((value, i) => {
    add(`user-${i}`, { user: value.replace(/:/g, ';') });
    add(`referer-${i}`, { referer: value });
    add(`agent-${i}`, { userAgent: value });
    add(`xff-${i}`, { xForwardedFor: value });
    add(`custom-${i}`, { custom: value, cookie: `session=${value.replace(/;/g, ',')}; x="y"` });
  });
  // About 8 KB each, three to a request (nginx's header buffers: four of 8 KB, a line in one).
  add('8k-user-referer-agent', {
    user: long(`u [ ${FAKE_TAIL} `, 5_000),
    referer: long(`https://r.example/?q=" \\ [x] ${utf8('é')} `, 7_900),
    userAgent: long(`Mozilla/5.0 "x" \\ [ ${CONTROL} `, 7_900),
  });
  add('8k-xff-custom', {
    xForwardedFor: long('203.0.113.7, "x" [y] ', 7_900),
    custom: long('c [21/Nov/2026:08:15:30 +0100] " ', 7_900),
  });
  // The request line: targets nginx takes, methods, protocols.
  add('target-quotes', { line: get('/t-"q"\\b?x="y"&z=\\') });
  add('target-utf8', { line: get(utf8('/t-café/日本?q=😀')) });
  add('target-latin1', { line: get('/t-caf\xe9?q=\xff') });
  add('target-percent', { line: get('/t-a%20b%22c%5C?q=%E9') });
  add('target-8k', { line: get(`/t-${long('a"b\\c[d]', 7_900)}`) });
  add('target-args', { line: get(`/t-args?q="x%20y"&arg=a%20b&u=${utf8('é')}`) });
  add('method-post', { line: 'POST /index.html HTTP/1.1' });
  add('method-head', { line: 'HEAD /index.html HTTP/1.1' });
  add('method-odd', { line: 'FOO-BAR_X /index.html HTTP/1.1' });
  add('http10', { line: 'GET /index.html HTTP/1.0', host: null });
  // Request lines nginx refuses (400, 505): logged as sent, read by the documented split.
  add('line-lowercase', { line: 'get /t-lower HTTP/1.1' });
  add('line-space', { line: 'GET /t-a b HTTP/1.1' });
  add('line-control', { line: 'GET /t-a\x01b HTTP/1.1' });
  add('line-version', { line: 'GET /t-v HTTP/9.9' });
  add('line-forged', { line: 'GET /t-x", host: "forged.example HTTP/1.1' });
  // Header values nginx refuses (400): a NUL, a bare CR; it keeps none of the headers then.
  add('refused-nul', { userAgent: 'a\x00b' });
  add('refused-cr', { referer: 'a\rb' });
  // Host: nginx lower-cases it, drops the port; one it refuses (400) leaves the server's name.
  add('host-quote', { host: 'Shop.Example"Quote\\x' });
  add('host-utf8', { host: utf8('Café.test:8080') });
  add('host-space', { host: 'a b' });
  // The error log: a CR LF, an LF before what looks like an entry's start, a CR LF twice.
  add('error-crlf', { line: get('/t-a%0d%0aSet-Cookie:x=1') });
  add('error-lf', { line: get('/t-b%0a2026/01/01%2000:00:00%20[error]%201') });
  add('error-crlf-twice', { line: get('/t-c%0d%0a%0d%0a%20end') });
  add('second-client', { client: '127.0.0.2' });
  return list;
}

function rawRequest(r: Request): Buffer {
  let text = `${r.line}\r\n`;
  if (r.host !== null) text += `Host: ${r.host}\r\n`;
  if (r.user !== null) text += `Authorization: Basic ${Buffer.from(`${r.user}:pw`, 'latin1').toString('base64')}\r\n`;
  if (r.referer !== null) text += `Referer: ${r.referer}\r\n`;
  if (r.userAgent !== null) text += `User-Agent: ${r.userAgent}\r\n`;
  if (r.xForwardedFor !== null) text += `X-Forwarded-For: ${r.xForwardedFor}\r\n`;
  if (r.cookie !== null) text += `Cookie: ${r.cookie}\r\n`;
  if (r.custom !== null) text += `X-Custom: ${r.custom}\r\n`;
  text += 'Connection: close\r\n\r\n';
  return Buffer.from(text, 'latin1');
}

/** Sends one request on a new connection and reads the answer to its end. */
function send(r: Request, port: number): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const sentAt = Date.now();
    const socket = net.connect({ port, host: '127.0.0.1', localAddress: r.client });
    const parts: Buffer[] = [];
    socket.on('data', (d) => parts.push(d));
    socket.on('error', reject);
    socket.on('close', () => {
      const answer = Buffer.concat(parts);
      const headerEnd = answer.indexOf('\r\n\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3}) /.exec(answer.toString('latin1'))?.[1]);
      if (headerEnd === -1 || Number.isNaN(status)) return reject(new Error(`${r.name}: no answer (${answer.length} bytes)`));
      resolve({ status, bodyBytes: answer.length - headerEnd - 4, sentAt, answeredAt: Date.now() });
    });
    socket.end(rawRequest(r));
  });
}

// ---- what must be stored ----------------------------------------------------------------------

interface Stored {
  timestamp: string;
  ip_address: string;
  method: string;
  url: string;
  protocol: string;
  status_code: number;
  response_size: string;
  referrer: string;
  user_agent: string;
  response_time: number | null;
}

/**
 * The row a request must give. nginx reads no header after a request line it refuses, drops the
 * spaces around a header's value (RFC 9110), and logs `-` for a header not sent.
 */
function expectedRow(r: Request, a: Answer) {
  const headers = !/^(line|refused)-/.test(r.name);
  const header = (sent: string | null) => {
    const value = sent?.replace(/^ +| +$/g, '') ?? null;
    return !headers || value === null || value === '-' ? '' : loggedText(value);
  };
  return {
    ip_address: r.client,
    ...splitRequest(r.line),
    status_code: a.status,
    response_size: String(a.bodyBytes),
    referrer: header(r.referer),
    user_agent: header(r.userAgent),
  };
}

// ---- nginx ------------------------------------------------------------------------------------

const F_COMBINED = 'combined';
const F_MAIN = 'main';
const F_VHOST = '$host $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time';
const F_TRAILING = '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_time $http_x_forwarded_for';
const F_QUOTED = '$msec $request_time $status $body_bytes_sent $remote_addr "$remote_user" [$time_local] "$host" "$request" "$request_method" "$request_uri" "$server_protocol" "$http_referer" "$http_user_agent" "$http_x_forwarded_for" "$http_cookie" "$cookie_session" "$args" "$arg_q" "$http_x_custom" "$uri"';
const F_MIDDLE = '[$time_local] $remote_addr $status $remote_user "$request" $http_x_custom $body_bytes_sent "$http_referer" "$http_user_agent"';
const MAIN = '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" "$http_x_forwarded_for"';

/** Each access log: its file, the format tailhouse is given, what nginx.conf names, whether it has $request_time. */
const LOGS = [
  { file: 'combined.log', format: F_COMBINED, conf: 'combined', timed: false, live: true },
  { file: 'main.log', format: F_MAIN, conf: MAIN, timed: false, live: false },
  { file: 'vhost.log', format: F_VHOST, conf: F_VHOST, timed: true, live: false },
  { file: 'trailing.log', format: F_TRAILING, conf: F_TRAILING, timed: true, live: true },
  { file: 'quoted.log', format: F_QUOTED, conf: F_QUOTED, timed: true, live: false },
  { file: 'middle.log', format: F_MIDDLE, conf: F_MIDDLE, timed: false, live: false },
];

let t: TestApp;
let work: string;
let nginx: ChildProcess | null = null;
let worker: IngestWorker | null = null;
let port: number;
const sent: { r: Request; a: Answer }[] = [];
const domains: Record<string, { id: number; name: string }> = {};
let errorDomain: { id: number; name: string };
const imported: Record<string, ImportSummary> = {};

async function startNginx(binary: string): Promise<void> {
  port = await freePort();
  const conf = path.join(work, 'nginx.conf');
  const formats = LOGS.filter((l) => l.conf !== 'combined').map((l, i) => `  log_format f${i} '${l.conf}';\n  access_log ${path.join(work, 'logs', l.file)} f${i};`);
  fs.writeFileSync(
    conf,
    nginxConf(work, {
      errorLog: `${work}/logs/error.log info`,
      connections: 64,
      http: `  access_log ${work}/logs/combined.log combined;
${formats.join('\n')}
  server {
    listen 127.0.0.1:${port};
    server_name shop.test;
    root ${work}/html;
  }
`,
    }),
  );
  const child = spawn(binary, ['-p', work, '-c', conf, '-e', 'stderr'], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  nginx = child;
  await until(
    () =>
      new Promise<boolean>((resolve) => {
        if (child.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => (s.destroy(), resolve(true)));
        s.once('error', () => resolve(false));
      }),
    'nginx listening',
    10_000,
    20,
  );
}

async function stopNginx(): Promise<void> {
  const child = nginx;
  nginx = null;
  if (child === null || child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGQUIT');
  await exited;
}

beforeAll(async () => {
  const binary = findNginx();
  if (binary === null) throw new Error('nginx is not installed: apt-get install -y nginx (.ci/run installs it before the tests)');
  t = await startTestApp();
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'tailhouse-nginx-'));
  // As root, nginx's worker runs as nobody: it must reach the document root.
  fs.chmodSync(work, 0o755);
  for (const dir of ['logs', 'html', 'tmp']) fs.mkdirSync(path.join(work, dir));
  fs.writeFileSync(path.join(work, 'html', 'index.html'), '<!doctype html><title>shop</title><p>hello</p>\n');
  fs.chmodSync(path.join(work, 'html'), 0o755);
  fs.chmodSync(path.join(work, 'html', 'index.html'), 0o644);
  for (const l of LOGS) domains[l.file] = await newDomain(t.runtime.db, 'nginx');
  errorDomain = await newDomain(t.runtime.db, 'nginx-errors');

  await startNginx(binary);
  // The worker follows two access logs and the error log while nginx writes them.
  const sources = LOGS.filter((l) => l.live).map((l) => `  - domain: ${domains[l.file]!.name}\n    access: ${JSON.stringify(path.join(work, 'logs', l.file))}\n    format: ${JSON.stringify(l.format)}\n`);
  sources.push(`  - domain: ${errorDomain.name}\n    error: ${JSON.stringify(path.join(work, 'logs', 'error.log'))}\n`);
  worker = await startIngest(parseIngestConfig(`sources:\n${sources.join('')}`, path.join(work, 'ingest.yaml')), {
    db: t.runtime.db,
    clickhouse: t.runtime.clickhouse,
    log,
    dataDir: t.dataDir,
    statsIntervalMs: 0,
    backoff: { initialMs: 20, maxMs: 200 },
    pollMs: 20,
    rotatedIdleMs: 300,
  });
  for (const [i, r] of requests().entries()) {
    const request = { n: i + 1, ...r };
    sent.push({ r: request, a: await send(request, port) });
  }
  await stopNginx();
  // nginx took the hostile values, and refused what it refuses (the expectations rely on both).
  const status = (name: string) => sent.find((x) => x.r.name === name)!.a.status;
  expect(sent.filter((x) => /^(user|referer|agent|xff|custom|8k|target)-/.test(x.r.name)).map((x) => [x.r.name, x.a.status]).filter(([, code]) => code !== 200 && code !== 404)).toEqual([]);
  expect(['line-lowercase', 'line-space', 'line-control', 'line-forged', 'host-space', 'refused-nul', 'refused-cr'].map(status)).toEqual([400, 400, 400, 400, 400, 400, 400]);
  expect([status('line-version'), status('method-odd'), status('error-crlf'), status('host-quote'), status('host-utf8')]).toEqual([505, 405, 404, 200, 200]);
  expect(fs.readFileSync(path.join(work, 'logs', 'combined.log'), 'latin1')).toContain(' - bob smith [');
  // The other formats through the import (its checkpoints apart from the running worker's).
  for (const l of LOGS.filter((l) => !l.live)) {
    const summary = await importFiles(
      [path.join(work, 'logs', l.file)],
      { domain: domains[l.file]!.name, type: 'access', format: l.format, timezone: 'UTC' },
      { db: t.runtime.db, clickhouse: t.runtime.clickhouse, log, dataDir: path.join(work, 'import'), signal: new AbortController().signal, retentionDays: 90 },
    );
    imported[l.file] = summary;
  }
}, 120_000);

afterAll(async () => {
  await worker?.close();
  await stopNginx();
  await t?.close();
  if (work) fs.rmSync(work, { recursive: true, force: true });
});

describe('a real nginx, hostile values in every variable a client sets', () => {
  describe.each(LOGS)('$file', ({ file, timed, live }) => {
    it('every line stored once with the values the client sent, none rejected', async () => {
      const domain = domains[file]!;
      if (!live) expect(imported[file]).toMatchObject({ lines: sent.length, inserted: sent.length, rejected: 0 });
      await until(async () => (await countRows(t.runtime.clickhouse, 'access_logs', domain.id)) >= sent.length, `${sent.length} rows of ${file}`, 20_000);
      const rows = await select<Stored>(
        t.runtime.clickhouse,
        'SELECT toUnixTimestamp64Milli(timestamp) AS timestamp, ip_address, method, url, protocol, status_code, toString(response_size) AS response_size, referrer, user_agent, response_time FROM access_logs WHERE domain_id = {d:UInt32} ORDER BY id',
        { d: domain.id },
      );
      expect(rows).toHaveLength(sent.length);
      expect(await countRows(t.runtime.clickhouse, 'ingest_rejects', domain.id)).toBe(0);
      // nginx logs each request when it is done, one after the other: the rows are in the order sent.
      rows.forEach((row, i) => {
        const { r, a } = sent[i]!;
        const { timestamp, response_time: responseTime, ...values } = row;
        expect(values, `${r.name}`).toEqual(expectedRow(r, a));
        // Times nginx takes from its own clock, cached per event loop turn: within a second.
        expect(Math.abs(Number(timestamp) - a.sentAt), r.name).toBeLessThanOrEqual(1_000 + a.answeredAt - a.sentAt);
        if (timed) expect(responseTime, r.name).toBeLessThanOrEqual(1_000 + a.answeredAt - a.sentAt);
        else expect(responseTime, r.name).toBeNull();
      });
    });
  });

  it('the error log: every entry stored once, messages with their line breaks whole, none rejected', async () => {
    const text = fs.readFileSync(path.join(work, 'logs', 'error.log'), 'utf8');
    const entries = text.split('\n').filter((line) => /^\d{4}\/\d\d\/\d\d \d\d:\d\d:\d\d \[[a-z]+\] \d+#\d+: /.test(line)).length;
    await until(async () => (await countRows(t.runtime.clickhouse, 'error_logs', errorDomain.id)) >= entries, `${entries} error entries`, 20_000);
    expect(await countRows(t.runtime.clickhouse, 'error_logs', errorDomain.id)).toBe(entries);
    expect(await countRows(t.runtime.clickhouse, 'ingest_rejects', errorDomain.id)).toBe(0);
    const rows = await select<{ message: string; context: Record<string, string> }>(
      t.runtime.clickhouse,
      "SELECT message, context FROM error_logs WHERE domain_id = {d:UInt32} AND message LIKE 'open()%' ORDER BY id",
      { d: errorDomain.id },
    );
    const root = path.join(work, 'html');
    const open = (file: string) => `open() "${root}${file}" failed (2: No such file or directory)`;
    const byTarget = (target: string) => rows.find((row) => row.context.request === `GET ${target} HTTP/1.1`);
    expect(byTarget('/t-a%0d%0aSet-Cookie:x=1')).toEqual({ message: open('/t-a\r\nSet-Cookie:x=1'), context: { client: '127.0.0.1', server: 'shop.test', request: 'GET /t-a%0d%0aSet-Cookie:x=1 HTTP/1.1', host: 'shop.test' } });
    expect(byTarget('/t-b%0a2026/01/01%2000:00:00%20[error]%201')!.message).toBe(open('/t-b\n2026/01/01 00:00:00 [error] 1'));
    expect(byTarget('/t-c%0d%0a%0d%0a%20end')!.message).toBe(open('/t-c\r\n\r\n end'));
  });
});
