-- The sources of every ingest worker and how they are doing (ingest/health-report.ts), for a
-- domain's ingest health (GET /api/domains/:domainId/ingest). A worker's state lives in its own
-- process, and in server mode many of them run beside many API processes: each publishes here.
--
-- ingest_workers: one row per worker process, named by its host and checkpoint directory (stable
-- across restarts), with the time of its last report, every few seconds. A worker silent for a day
-- is deleted with its sources by the next report of any worker.
create table ingest_workers (
  id text primary key,
  reported_at timestamptz(3) not null
);

-- One row per source of a worker: a followed file, the syslog listener. A report writes only the
-- rows that changed (a thousand quiet files rewrite nothing) and deletes those no longer in the
-- worker's config. Read by domain: the sources configured for its name, and those whose lines
-- were stored under it in the last day (routed by $host); a few thousand rows, scanned.
create table ingest_sources (
  worker_id text not null references ingest_workers (id) on delete cascade,
  -- `access /var/log/nginx/shop.access.log`, `syslog udp+tcp`: SourceStats.name.
  name text not null,
  -- The domains configured for it (a file's `domain`, the syslog tags' domains); empty when its
  -- lines are routed by their host.
  domains text[] not null,
  stored_domain_ids integer[] not null,
  -- SourceState: running, waiting for domain, retrying, stopped, failed, starting.
  state text not null,
  lag_bytes bigint not null,
  primary key (worker_id, name)
);
