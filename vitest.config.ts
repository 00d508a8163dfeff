import os from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each file runs in its own process: embedded chDB and PGlite bind one data directory per process.
    pool: 'forks',
    // Two files at a time even on 2 cores (vitest's default there is one): the files spend much of
    // their time waiting on child processes, files and polls, so the suite took 394 s instead of
    // 544 s on this machine.
    maxWorkers: Math.max(2, os.availableParallelism() - 1),
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // expect.poll waits up to 1 s by default; a browser flow under two files' load (the dashboard's
    // queries beside another file's chDB work) can need more. Only a failing poll waits longer.
    expect: { poll: { timeout: 15_000 } },
  },
});
