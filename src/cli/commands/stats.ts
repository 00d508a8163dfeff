/** `tailhouse stats DOMAIN`: a domain's statistics as a terminal report, like GoAccess's terminal view. */
import { Option, type Command } from 'commander';
import { STATS_PERIODS, type StatsPeriod } from '../../stats/periods.js';
import type { LogStats } from '../../stats/figures.js';
import { windowStats } from '../../stats/window.js';
import type { CommandHost } from '../host.js';
import { formatJson, formatRows, formatTable } from '../table.js';
import { findDomain } from './domains.js';

const BAR_WIDTH = 20;
const CELL_MAX = 70;

const bar = (percentage: number) => '#'.repeat(Math.round((percentage / 100) * BAR_WIDTH)).padEnd(BAR_WIDTH, '.');
/** Log values are anyone's text: control characters would move the terminal's cursor. */
const printable = (value: string) => {
  const clean = value.replace(/[\u0000-\u001f\u007f-\u009f]/g, '?');
  return clean.length > CELL_MAX ? `${clean.slice(0, CELL_MAX - 1)}…` : clean;
};
const ms = (value: number | null) => (value === null ? '-' : `${value} ms`);

function bytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function topList(title: string, rows: { key: string; count: number; percentage: number }[]): string {
  if (rows.length === 0) return `${title}\n  (none)\n`;
  return `${title}\n${formatTable(['  COUNT', '%', '', 'VALUE'], rows.map((r) => [`  ${r.count}`, r.percentage.toFixed(2), bar(r.percentage), printable(r.key)]))}`;
}

/** The report: headline figures, then the top lists with their share of the requests. */
export function formatStatsReport(domainName: string, stats: LogStats): string {
  const p = stats.responseTimePercentiles;
  const head = formatRows([
      ['requests', stats.totalRequests],
      ['visitors (distinct addresses)', stats.uniqueVisitors],
      ['error rate (5xx)', `${(stats.errorRate * 100).toFixed(2)} %`],
      ['bandwidth', bytes(stats.bandwidth)],
    // Without response times in the log the mean reads 0 (the specification's field); the percentiles tell.
    ['response time: mean', ms(p.p50 === null ? null : stats.averageResponseTime)],
    ['response time: p50 / p95 / p99', `${ms(p.p50)} / ${ms(p.p95)} / ${ms(p.p99)}`],
  ]);
  return [
    `${domainName}, the last ${stats.period}\n\n`,
    head,
    '\n',
    topList('Top URLs', stats.topUrls.map((e) => ({ key: e.url, count: e.requests, percentage: e.percentage }))),
    '\n',
    topList('Status codes', stats.topStatusCodes.map((e) => ({ key: String(e.code), count: e.count, percentage: e.percentage }))),
    '\n',
    topList('User agents', stats.topUserAgents.map((e) => ({ key: e.userAgent, count: e.requests, percentage: e.percentage }))),
    '\n',
    topList('Referrers', stats.topReferrers.map((e) => ({ key: e.referrer || '(none)', count: e.requests, percentage: e.percentage }))),
  ].join('');
}

export function registerStatsCommand(program: Command, host: CommandHost): void {
  program
    .command('stats')
    .description("a domain's statistics: headline figures and top lists")
    .argument('<domain>', 'name or id')
    .addOption(new Option('--period <period>', 'the window, ending now').choices(STATS_PERIODS).default('24h'))
    .option('--json', 'print JSON (the fields of GET /api/logs/domains/{id}/stats)')
    .action(async (given: string, opts: { period: StatsPeriod; json?: boolean }) => {
      await host.withRuntime(async (runtime) => {
        const domain = await findDomain(runtime.db, given);
        const stats = await windowStats(runtime, domain.id, { period: opts.period });
        host.out(opts.json ? formatJson(stats) : formatStatsReport(domain.name, stats));
      });
    });
}
