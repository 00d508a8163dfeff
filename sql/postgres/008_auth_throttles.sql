-- Auth throttles counted atomically (src/auth/throttle.ts), e-mail changes confirmed by a link to
-- the new address, and the addresses each account has signed in from.

-- One row per throttled key (login per e-mail+address, per address, per e-mail; reset and
-- confirmation links per address; current-password checks and e-mail change requests per user).
-- An attempt is counted in `in_flight` by one upsert before the work it guards, so concurrent
-- attempts cannot all pass a check made before any of them was counted; when it ends it leaves
-- `in_flight` and, if it failed, adds to `failures`. The window starts at the first attempt and
-- lasts 15 minutes.
create table auth_throttles (
  scope text not null,
  key text not null,
  window_start timestamptz(3) not null,
  failures integer not null,
  in_flight integer not null,
  primary key (scope, key)
);
create index auth_throttles_window_idx on auth_throttles (window_start);

-- Replaced by auth_throttles; its rows are at most 15 minutes of history.
drop table login_failures;

-- Addresses (IPv6 by /64) an account signed in from with its password: once an account has many
-- failures from many addresses (distributed guessing), only these still get to try.
create table login_known_addresses (
  user_id integer not null references users (id) on delete cascade,
  address text not null,
  last_login_at timestamptz(3) not null default now(),
  primary key (user_id, address)
);

-- A self-service e-mail change waits here until the link sent to the new address is used.
create table email_changes (
  id integer generated always as identity primary key,
  user_id integer not null references users (id) on delete cascade,
  new_email text not null,
  token_hash text not null unique,
  expires_at timestamptz(3) not null,
  used_at timestamptz(3),
  created_at timestamptz(3) not null default now()
);
create index email_changes_user_idx on email_changes (user_id);

create index password_resets_user_idx on password_resets (user_id);
