/** `tailhouse ingest validate --config FILE`: the config checked, and each source's first lines parsed as ingest would. */
import type { Command } from 'commander';
import { DEFAULT_SAMPLE_LINES, formatValidationReport, sampleLinesSchema, validateIngestConfig } from '../../../ingest/validate.js';
import { operatorPath, parseWith, type CommandHost } from '../host.js';
import { formatJson } from '../table.js';

export function registerIngestValidateCommand(ingest: Command, host: CommandHost): void {
  ingest
    .command('validate')
    .description("check an ingest config before deploying it: its keys, each source's files and how their first lines parse")
    .requiredOption('--config <file>', 'the ingest config (YAML)')
    .option('--lines <n>', 'lines read from each file', String(DEFAULT_SAMPLE_LINES))
    .option('--json', 'print JSON')
    .action(async (opts: { config: string; lines: string; json?: boolean }) => {
      const sampleLines = parseWith(sampleLinesSchema, opts.lines, '--lines');
      await host.withRuntime(async (runtime) => {
        const report = await validateIngestConfig(operatorPath(host, opts.config), { db: runtime.db, log: runtime.log, sampleLines });
        host.out(opts.json ? formatJson(report) : formatValidationReport(report));
        if (report.problems > 0) host.exitCode = 1;
      });
    });
}
