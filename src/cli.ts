/**
 * `tailhouse`: the command line. A command that a running server takes (src/cli/program.ts's
 * runsBesideServer) goes through that server's control socket when one holds the embedded stores'
 * DATA_DIR (src/control/); everything else runs here, opening the stores itself.
 */
import { loadConfig } from '../core/config.js';
import { registerProcessCommands } from './cli/commands/process.js';
import { runCommand, runsBesideServer } from './cli/program.js';
import { localHost } from './cli/local-host.js';
import { connectToServer, runThroughServer } from './control/client.js';
import { assertPrivateDataDir, DataDirPermissionError } from './data-dir-perms.js';

// Everything the commands create (the stores, the outbox, checkpoints, jwt-secret) is their user's
// alone (src/data-dir-perms.ts). Set here, once the CLI's bundle is loaded (bin/bundle.js): the
// checkout's own files are not the commands' to narrow. No worker threads run (process.umask
// throws in one).
process.umask(0o077);

/** The embedded stores' DATA_DIR, if this configuration uses them; null in server mode or when the configuration is bad (the command reports that). */
function embeddedDataDir(): string | null {
  try {
    const config = loadConfig();
    return config.databaseUrl && config.clickhouseUrl ? null : config.dataDir;
  } catch {
    return null;
  }
}

async function main(argv: string[]): Promise<number> {
  const dataDir = runsBesideServer(argv) ? embeddedDataDir() : null;
  if (dataDir) {
    // The control socket is found in DATA_DIR/run/: in a DATA_DIR other users may change, it could
    // be theirs, and the command (its TAILHOUSE_PASSWORD, its answers) would go to them.
    try {
      assertPrivateDataDir(dataDir);
    } catch (err) {
      if (!(err instanceof DataDirPermissionError)) throw err;
      process.stderr.write(`tailhouse: ${err.message}\n`);
      return 1;
    }
  }
  const server = dataDir ? await connectToServer(dataDir) : null;
  if (server) return runThroughServer(server, argv);
  return runCommand(argv, localHost(), registerProcessCommands);
}

const code = await main(process.argv.slice(2));
// `serve` and the ingest worker go on running after their command returns; a failure ends at once.
if (code === 0) process.exitCode = 0;
else process.exit(code);
