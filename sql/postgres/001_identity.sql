-- Users, their permissions, sessions and machine tokens, activity, and domains (docs/reference/permissions.md, docs/reference/domains.md).
-- Times are timestamptz(3): milliseconds, as the API returns them, so a returned time used as
-- a range bound includes its own row.

create table users (
  id integer generated always as identity primary key,
  name text not null default '',
  email text not null,
  password_hash text not null,
  role text not null default 'user' check (role in ('admin', 'user')),
  active boolean not null default true,
  -- Bumped whenever the user's sessions must end (password change or reset, deactivation, role
  -- change); access tokens carry the version they were issued under.
  token_version integer not null default 0,
  last_login_at timestamptz(3),
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint users_email_key unique (email)
);

create table user_permissions (
  user_id integer not null references users (id) on delete cascade,
  resource text not null check (resource in ('users', 'domains', 'logs', 'alerts')),
  action text not null check (action in ('read', 'create', 'update', 'delete')),
  primary key (user_id, resource, action)
);

create table refresh_tokens (
  id bigint generated always as identity primary key,
  user_id integer not null references users (id) on delete cascade,
  -- All tokens descended from one login; reuse of a spent token revokes the whole family.
  family uuid not null,
  token_hash text not null unique,
  expires_at timestamptz(3) not null,
  used_at timestamptz(3),
  revoked_at timestamptz(3),
  created_at timestamptz(3) not null default now()
);
create index refresh_tokens_family_idx on refresh_tokens (family);
create index refresh_tokens_user_idx on refresh_tokens (user_id);

create table api_tokens (
  id integer generated always as identity primary key,
  user_id integer not null references users (id) on delete cascade,
  name text not null,
  token_hash text not null unique,
  last_used_at timestamptz(3),
  revoked_at timestamptz(3),
  created_at timestamptz(3) not null default now()
);
create index api_tokens_user_idx on api_tokens (user_id);

create table password_resets (
  id integer generated always as identity primary key,
  user_id integer not null references users (id) on delete cascade,
  token_hash text not null unique,
  expires_at timestamptz(3) not null,
  used_at timestamptz(3),
  created_at timestamptz(3) not null default now()
);

-- Failed logins of the last 15 minutes, for throttling by e-mail and by client address. Kept in
-- Postgres so that several API processes count together.
create table login_failures (
  id bigint generated always as identity primary key,
  email text not null,
  ip_address text not null,
  failed_at timestamptz(3) not null default now()
);
create index login_failures_email_idx on login_failures (email, failed_at);
create index login_failures_ip_idx on login_failures (ip_address, failed_at);

create table activity (
  id bigint generated always as identity primary key,
  user_id integer not null references users (id) on delete cascade,
  action text not null,
  resource text not null,
  details text not null,
  ip_address text not null,
  user_agent text not null,
  created_at timestamptz(3) not null default now()
);
create index activity_user_time_idx on activity (user_id, created_at desc, id desc);

create table domains (
  id integer generated always as identity primary key,
  name text not null,
  -- A deleted owner leaves the domain to the administrators.
  owner_id integer references users (id) on delete set null,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  constraint domains_name_key unique (name)
);
create index domains_owner_idx on domains (owner_id);
