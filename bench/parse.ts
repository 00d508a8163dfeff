/**
 * bench/parse: parse rate of the ingest parsers on one core, lines generated in memory.
 *
 *   npx tsx bench/parse.ts              (BENCH_LINES=200000 for a shorter run)
 *
 * Generates 1,000,000 realistic `combined` access lines (IPv4 and IPv6 clients, escaped user
 * agents, some `-` fields and 400s for TLS probes) and as many error-log lines, then times
 * compileAccessFormat('combined') and parseErrorLine over them, best of three passes. For scale,
 * the same access lines go through a plain regex with `new Date()` (the naive JS parse that the
 * ingest issue measured at about 1.6 s per million lines). Figures are printed, never asserted.
 *
 * With BENCH_BASELINE=<git revision>, the access compiler of that revision (checked out in a
 * temporary worktree, removed afterwards) is timed against this checkout's on the same lines,
 * BENCH_ROUNDS rounds (default 9) alternating the two, and the medians are compared.
 */
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { compileAccessFormat } from '../ingest/parsers/access-format.js';
import { parseErrorLine } from '../ingest/parsers/error-log.js';
import { checkoutBaseline, describeCheckout, median } from './lib/baseline.js';

const LINES = Number(process.env.BENCH_LINES ?? 1_000_000);
const PASSES = 3;

// A fixed-seed generator keeps runs comparable.
let seed = 42;
const random = () => {
  seed = (seed * 1_103_515_245 + 12_345) & 0x7fffffff;
  return seed / 0x80000000;
};
const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const PATHS = ['/', '/index.html', '/api/v1/products', '/api/v1/cart', '/static/app.3f9a1c.js', '/static/style.css', '/images/logo.png', '/search', '/checkout', '/wp-login.php'];
const QUERIES = ['', '', '', '?q=shoes&page=2', '?utm_source=newsletter&utm_medium=email', '?id=12345'];
const AGENTS = [
  'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36',
  'Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.1 Mobile/15E148 Safari/604.1',
  'Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)',
  'curl/8.5.0',
  'Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0',
  'Mozilla/5.0 \\xE2\\x80\\x9Cquoted\\xE2\\x80\\x9D \\x22agent\\x22',
  '-',
];
const REFERRERS = ['-', '-', 'https://www.google.com/', 'https://shop.example.com/search?q=shoes', 'https://news.example.org/article/42'];
const STATUSES = [200, 200, 200, 200, 200, 304, 301, 404, 500, 502];

const two = (n: number) => String(n).padStart(2, '0');

function client(): string {
  if (random() < 0.15) return `2001:db8:${Math.floor(random() * 0xffff).toString(16)}::${Math.floor(random() * 0xffff).toString(16)}`;
  return `${Math.floor(random() * 223) + 1}.${Math.floor(random() * 256)}.${Math.floor(random() * 256)}.${Math.floor(random() * 256)}`;
}

function accessLine(i: number): string {
  const t = new Date(Date.UTC(2026, 10, 21, 8) + i * 37);
  const time = `${two(t.getUTCDate())}/${MONTHS[t.getUTCMonth()]}/${t.getUTCFullYear()}:${two(t.getUTCHours())}:${two(t.getUTCMinutes())}:${two(t.getUTCSeconds())} +0000`;
  if (random() < 0.005) return `${client()} - - [${time}] "\\x16\\x03\\x01\\x02\\x00\\x01\\x00\\x01\\xFC\\x03\\x03" 400 157 "-" "-"`;
  const request = `${pick(['GET', 'GET', 'GET', 'POST', 'HEAD'])} ${pick(PATHS)}${pick(QUERIES)} ${pick(['HTTP/1.1', 'HTTP/1.1', 'HTTP/2.0'])}`;
  const user = random() < 0.02 ? 'alice' : '-';
  return `${client()} - ${user} [${time}] "${request}" ${pick(STATUSES)} ${Math.floor(random() * 50_000)} "${pick(REFERRERS)}" "${pick(AGENTS)}"`;
}

const ERROR_MESSAGES = [
  'open() "/srv/www/favicon.ico" failed (2: No such file or directory)',
  'upstream timed out (110: Connection timed out) while reading response header from upstream',
  'connect() failed (111: Connection refused) while connecting to upstream',
  'client intended to send too large body: 10485761 bytes',
];

function errorLine(i: number): string {
  const t = new Date(Date.UTC(2026, 10, 21, 8) + i * 37);
  const time = `${t.getUTCFullYear()}/${two(t.getUTCMonth() + 1)}/${two(t.getUTCDate())} ${two(t.getUTCHours())}:${two(t.getUTCMinutes())}:${two(t.getUTCSeconds())}`;
  if (random() < 0.2) return `${time} [notice] 1234#1234: signal process started`;
  const context = `client: ${client()}, server: shop.example.com, request: "GET ${pick(PATHS)} HTTP/1.1", upstream: "http://127.0.0.1:8080${pick(PATHS)}", host: "shop.example.com"`;
  return `${time} [${pick(['error', 'error', 'warn', 'crit'])}] 1234#1234: *${i} ${pick(ERROR_MESSAGES)}, ${context}`;
}

/** Best of PASSES: lines per second of `parse` over `lines`, plus the count that failed. */
function measure(lines: string[], parse: (line: string) => { ok: boolean }): { rate: number; seconds: number; failed: number } {
  let best = Infinity;
  let failed = 0;
  for (let pass = 0; pass < PASSES; pass++) {
    failed = 0;
    const start = process.hrtime.bigint();
    for (const line of lines) if (!parse(line).ok) failed++;
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  return { rate: lines.length / best, seconds: best, failed };
}

const NAIVE = /^(\S+) - (\S+) \[([^\]]+)\] "(\S+) (.*?) (\S+)" (\d{3}) (\d+|-) "(.*?)" "(.*?)"$/;

/** The straightforward parse: one regex, Date for the time, numbers by Number(). */
function naive(line: string): { ok: boolean } {
  const m = NAIVE.exec(line);
  if (m === null) return { ok: false };
  const time = m[3]!;
  const timestamp = new Date(`${time.slice(7, 11)}-${time.slice(3, 6)}-${time.slice(0, 2)} ${time.slice(12, 20)} ${time.slice(21)}`).getTime();
  const entry = { timestamp, ipAddress: m[1], method: m[4], url: m[5], protocol: m[6], statusCode: Number(m[7]), responseSize: m[8] === '-' ? 0 : Number(m[8]), referrer: m[9], userAgent: m[10] };
  return { ok: entry.statusCode > 0 };
}

const report = (name: string, r: { rate: number; seconds: number; failed: number }) =>
  console.log(`${name.padEnd(34)} ${Math.round(r.rate).toLocaleString('en-US').padStart(12)} lines/s   ${r.seconds.toFixed(3)} s per ${LINES.toLocaleString('en-US')} lines   (${r.failed} rejected)`);

/** Lines as a file reader has them: one decoded text split at newlines. */
const generate = (line: (i: number) => string) => Array.from({ length: LINES }, (_, i) => line(i)).join('\n').split('\n');

/**
 * One pass of `parse` over `lines`: lines per CPU-second of this process. On a shared machine the
 * CPU time varies far less than the wall time, which counts the turns other work takes.
 */
function rateOf(lines: string[], parse: (line: string) => { ok: boolean }): number {
  const start = process.cpuUsage();
  for (const line of lines) parse(line);
  const used = process.cpuUsage(start);
  return lines.length / ((used.user + used.system) / 1e6);
}

/** This checkout's access compiler against BENCH_BASELINE's, alternating passes over the same lines. */
async function compareWithBaseline(revision: string, lines: string[]): Promise<void> {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const rounds = Number(process.env.BENCH_ROUNDS ?? 9);
  const baseline = checkoutBaseline(root, revision);
  try {
    const old = (await import(path.join(baseline.root, 'ingest', 'parsers', 'access-format.ts'))) as { compileAccessFormat: typeof compileAccessFormat };
    const parsers = [
      { name: describeCheckout(root), parse: compileAccessFormat('combined'), rates: [] as number[] },
      { name: `baseline ${baseline.rev}`, parse: old.compileAccessFormat('combined'), rates: [] as number[] },
    ];
    for (const p of parsers) rateOf(lines, p.parse); // warm up both
    for (let round = 0; round < rounds; round++) {
      for (const p of round % 2 === 0 ? parsers : [...parsers].reverse()) p.rates.push(rateOf(lines, p.parse));
    }
    const [current, base] = parsers.map((p) => median(p.rates)) as [number, number];
    console.log(`access (combined), median of ${rounds} alternating passes, lines per CPU-second: ${parsers[0]!.name} ${Math.round(current).toLocaleString('en-US')}, ${parsers[1]!.name} ${Math.round(base).toLocaleString('en-US')} lines/s: ${(current / base).toFixed(3)}×`);
  } finally {
    baseline.remove();
  }
}

console.log(`node ${process.version}, best of ${PASSES} passes, one core`);
let lines = generate(accessLine);
const access = measure(lines, compileAccessFormat('combined'));
report('access (combined)', access);
const baseline = measure(lines, naive);
report('  naive regex + Date, for scale', baseline);
console.log(`  ratio naive / tailhouse: ${(baseline.seconds / access.seconds).toFixed(2)}×`);
// What a line the first expression refuses costs: a $remote_user with a space, read by stretches.
report('  every $remote_user with a space', measure(lines.map((line) => line.replace(/^(\S+) - \S+ \[/, '$1 - bob smith [')), compileAccessFormat('combined')));
if (process.env.BENCH_BASELINE) await compareWithBaseline(process.env.BENCH_BASELINE, lines);
lines = generate(errorLine);
report('error log (UTC)', measure(lines, (line) => parseErrorLine(line)));
report('error log (Europe/Berlin)', measure(lines, (line) => parseErrorLine(line, 'Europe/Berlin')));
