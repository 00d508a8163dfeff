-- Leases for background jobs that one process of many should run at a time (core/db/leases.ts):
-- the stats rollup builder (src/rollups/builder.ts). A holder renews its lease before each round; a
-- lease not renewed by `expires_at` (its process died) may be taken by another process.
CREATE TABLE IF NOT EXISTS job_leases (
  name text PRIMARY KEY,
  holder text NOT NULL,
  expires_at timestamptz NOT NULL
);
