import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // Each file runs in its own process: embedded chDB and PGlite bind one data directory per process.
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
