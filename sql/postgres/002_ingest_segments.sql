-- Segment numbers for entry ids (ingest/ids.ts): id = number × 2^32 + (byte offset mod 2^32).
-- One number per domain, source identity and 4 GiB segment of that source, handed out once (the
-- domain's highest plus one) and never changed, so a line ingested again gets its id again.
-- Numbers stop at 2^21 − 1, which keeps every id below 2^53.

create table ingest_segments (
  domain_id integer not null references domains (id) on delete cascade,
  source_identity text not null,
  -- byte offset ÷ 2^32 within the source
  segment_index integer not null check (segment_index >= 0),
  number integer not null constraint ingest_segments_number_range check (number between 1 and 2097151),
  created_at timestamptz(3) not null default now(),
  primary key (domain_id, source_identity, segment_index),
  constraint ingest_segments_number_key unique (domain_id, number)
);
