/** The host of a command running alone: the terminal it was started from, and stores it opens itself. */
import readline from 'node:readline/promises';
import { pino } from 'pino';
import { loadConfig } from '../../core/config.js';
import { createLogger } from '../../core/log.js';
import type { CommandHost } from './host.js';
import { importProgress } from './import-report.js';

/** `serve` logs to stdout; other commands print their results there, so their log goes to stderr. */
export const logToStderr = () => pino.destination({ dest: 2, sync: true });

export function localHost(): CommandHost {
  let interruption: AbortController | undefined;
  return {
    out: (text) => process.stdout.write(text),
    err: (text) => process.stderr.write(text),
    env: process.env,
    cwd: process.cwd(),
    exitCode: 0,
    async withRuntime(work) {
      const config = loadConfig();
      const log = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel, logToStderr());
      const { openRuntime } = await import('../runtime.js');
      const runtime = await openRuntime(config, log, (line) => process.stderr.write(`${line}\n`));
      try {
        return await work(runtime);
      } finally {
        await runtime.close();
      }
    },
    interruption() {
      if (!interruption) {
        const controller = (interruption = new AbortController());
        process.once('SIGINT', () => controller.abort());
        process.once('SIGTERM', () => controller.abort());
      }
      return interruption.signal;
    },
    progress: (files) => importProgress(files),
    stdin: () => process.stdin,
    confirm: async (question) => Boolean(process.stdin.isTTY) && askOnTerminal(question),
  };
}

/** Asks yes or no on the terminal (no unless the answer is y or yes). */
export async function askOnTerminal(question: string): Promise<boolean> {
  const prompt = readline.createInterface({ input: process.stdin, output: process.stderr });
  try {
    return /^y(es)?$/i.test((await prompt.question(`${question} [y/N] `)).trim());
  } finally {
    prompt.close();
  }
}
