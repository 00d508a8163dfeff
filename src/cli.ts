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
  const server = dataDir ? await connectToServer(dataDir) : null;
  if (server) return runThroughServer(server, argv);
  return runCommand(argv, localHost(), registerProcessCommands);
}

const code = await main(process.argv.slice(2));
// `serve` and the ingest worker go on running after their command returns; a failure ends at once.
if (code === 0) process.exitCode = 0;
else process.exit(code);
