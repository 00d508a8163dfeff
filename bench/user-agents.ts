/**
 * bench/user-agents: what classifying user agents costs (ingest/transforms/user-agent.ts), by the
 * agents' count rather than the lines': the first agents of a process (the lists' expressions
 * compile), then distinct agents of each kind, and a flood of one-off junk agents.
 *
 *   npx tsx bench/user-agents.ts        # BENCH_AGENTS distinct agents per kind (default 2,000)
 *
 * Browsers are made from real templates with varied versions and models; bots are the real agents
 * crawler-user-agents ships as its patterns' instances. Figures are CPU time of this process.
 */
import { createRequire } from 'node:module';
import os from 'node:os';
import { classifyUserAgent, UserAgentClasses } from '../ingest/transforms/user-agent.js';
import { prng } from '../test/support/random.js';

const AGENTS = Number(process.env.BENCH_AGENTS ?? 2_000);

const cpuMs = (from: NodeJS.CpuUsage) => {
  const u = process.cpuUsage(from);
  return (u.user + u.system) / 1000;
};

const rnd = prng(20261125);
const int = (n: number) => Math.floor(rnd() * n);
const version = () => `${100 + int(32)}.0.${int(7000)}.${int(200)}`;
const BROWSERS: (() => string)[] = [
  () => `Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${version()} Safari/537.36`,
  () => `Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_${int(8)}) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/${15 + int(4)}.${int(6)} Safari/605.1.15`,
  () => `Mozilla/5.0 (X11; Linux x86_64; rv:${100 + int(35)}.0) Gecko/20100101 Firefox/${100 + int(35)}.0`,
  () => `Mozilla/5.0 (iPhone; CPU iPhone OS ${15 + int(4)}_${int(7)} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/${15 + int(4)}.${int(7)} Mobile/15E148 Safari/604.1`,
  () => `Mozilla/5.0 (Linux; Android ${10 + int(5)}; SM-${'ASGAN'[int(5)]}${100 + int(900)}${'BFU'[int(3)]}) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${version()} Mobile Safari/537.36`,
  () => `Mozilla/5.0 (Linux; Android ${10 + int(5)}; K) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/${version()} Safari/537.36`,
  () => `Mozilla/5.0 (iPad; CPU OS ${15 + int(4)}_${int(7)} like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/${15 + int(4)}.${int(7)} Mobile/15E148 Safari/604.1`,
];

function distinct(make: () => string, count: number): string[] {
  const seen = new Set<string>();
  for (let tries = 0; seen.size < count && tries < count * 20; tries++) seen.add(make());
  return [...seen];
}

/** CPU ms per agent of classifying `agents` (each once), and the classes' devices. */
function perAgent(agents: string[]): { ms: number; devices: Record<string, number> } {
  const from = process.cpuUsage();
  const devices: Record<string, number> = {};
  for (const ua of agents) {
    const device = classifyUserAgent(ua).device;
    devices[device] = (devices[device] ?? 0) + 1;
  }
  return { ms: cpuMs(from) / agents.length, devices };
}

const require = createRequire(import.meta.url);
const crawlers = require('crawler-user-agents') as { instances: string[] }[];
const bots = [...new Set(crawlers.flatMap((c) => c.instances))].slice(0, AGENTS);
const browsers = distinct(() => BROWSERS[int(BROWSERS.length)]!(), AGENTS);
const junk = Array.from({ length: AGENTS }, (_, i) => `${'x'.repeat(int(400))}${i}/${rnd().toString(36)} (${'%_;'.repeat(int(50))})`);

console.log(`bench/user-agents: Node ${process.version}, ${os.cpus().length} CPUs, load average ${os.loadavg().map((l) => l.toFixed(1)).join(' ')}`);
let from = process.cpuUsage();
classifyUserAgent(browsers[0]!);
console.log(`first browser agent (loads ua-parser-js): ${cpuMs(from).toFixed(0)} ms CPU`);
from = process.cpuUsage();
classifyUserAgent('curl/8.5.0');
console.log(`first agent isbot suspects and Matomo's list does not name (loads and scans the whole bot list): ${cpuMs(from).toFixed(0)} ms CPU`);
for (const [kind, agents] of [
  ['browsers', browsers],
  ['bots (crawler-user-agents instances)', bots],
  ['junk, up to 550 characters', junk],
] as const) {
  const { ms, devices } = perAgent(agents);
  console.log(`${kind}: ${agents.length} distinct, ${ms.toFixed(3)} ms CPU per agent; ${JSON.stringify(devices)}`);
}

// The same agents again through the cache, as the lines of a log would ask for them.
const classes = new UserAgentClasses();
const lookups = [...browsers, ...bots].map((ua) => ` ${ua}`.slice(1));
for (const ua of lookups) classes.of(ua);
from = process.cpuUsage();
const rounds = Math.ceil(1_000_000 / lookups.length);
for (let r = 0; r < rounds; r++) for (const ua of lookups) classes.of(ua);
console.log(`cached: ${((cpuMs(from) * 1e6) / (rounds * lookups.length)).toFixed(0)} ns CPU per lookup (${rounds * lookups.length} lookups of ${lookups.length} agents)`);
