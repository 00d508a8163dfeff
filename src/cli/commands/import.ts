/** `tailhouse import`: finished log files (rotated, archived, .gz) into ClickHouse, exactly once. */
import v8 from 'node:v8';
import { Option, type Command } from 'commander';
import { CliError, operatorPath, parseWith, type CommandHost } from '../host.js';
import { importOptionsSchema, importReport } from '../import-report.js';

/** How much V8's heap may grow past what a full collection left, in percent, during an import. */
const IMPORT_HEAP_GROWING_PERCENT = 50;

export function registerImportCommand(program: Command, host: CommandHost): void {
  program
    .command('import')
    .description('backfill finished log files (rotated, archived, .gz) into ClickHouse; running it again adds nothing twice')
    .argument('<files...>', 'log files, plain or gzip-compressed')
    .option('--domain <name>', "the registered domain of the lines (default: each access line's $host)")
    .addOption(new Option('--type <type>', 'what the files hold').choices(['access', 'error']).default('access'))
    .option('--format <format>', 'access logs: combined, main or the nginx log_format string', 'combined')
    .option('--timezone <zone>', 'error logs: the IANA zone of their times', 'UTC')
    .action(async (given: string[], opts: { domain?: string; type: 'access' | 'error'; format: string; timezone: string }) => {
      const options = parseWith(importOptionsSchema, opts, 'import:');
      const files = given.map((f) => operatorPath(host, f));
      const { ImportError, importFiles } = await import('../../../ingest/import.js');
      // An import's rows live for one insert, long enough to reach V8's old generation, which V8
      // let grow to 230 MB of them before a full collection (48 MB live after it): the peak RSS of
      // a 1M-line import in embedded mode about 730 → 570 MB at the same rate (bench/README, "The
      // import's memory"). The flag holds for the rest of the process, a server running the
      // command for the shell (docs/cli.md, "Beside a running server") included.
      v8.setFlagsFromString(`--heap-growing-percent=${IMPORT_HEAP_GROWING_PERCENT}`);
      await host.withRuntime(async (runtime) => {
        const signal = host.interruption();
        const progress = await host.progress(files);
        try {
          const summary = await importFiles(files, options, {
            db: runtime.db,
            clickhouse: runtime.clickhouse,
            log: runtime.log,
            dataDir: runtime.config.dataDir,
            signal,
            retentionDays: runtime.config.logRetentionDays,
            onProgress: progress.update,
          });
          progress.stop();
          // The report names the files as the operator gave them.
          host.out(importReport({ ...summary, files: summary.files.map((f, i) => ({ ...f, path: given[i] ?? f.path })) }));
          if (summary.interrupted) host.exitCode = 130;
        } catch (err) {
          progress.stop();
          if (err instanceof ImportError) throw new CliError(err.message);
          throw err;
        }
      });
    });
}
