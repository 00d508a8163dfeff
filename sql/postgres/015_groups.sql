-- Groups (docs/reference/groups.md): administrators put users in a group and give the group a
-- role on many domains at once, or on every domain (`domain_id` null: the provider's support
-- team, which reads every domain without any power over users or domains). A member of a group
-- holds, on each domain, the best of its own grants and its groups' (grantsOf in
-- src/domains/store.ts, the one rule).
create table groups (
  id serial primary key,
  name text not null unique,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);

create table group_members (
  group_id integer not null references groups (id) on delete cascade,
  user_id integer not null references users (id) on delete cascade,
  added_at timestamptz(3) not null default now(),
  primary key (group_id, user_id)
);
-- A user's groups: every visibility check of a non-administrator reads it.
create index group_members_user_idx on group_members (user_id, group_id);

create table group_domains (
  group_id integer not null references groups (id) on delete cascade,
  -- null: every domain, those registered later too.
  domain_id integer references domains (id) on delete cascade,
  role text not null check (role in ('viewer', 'editor')),
  granted_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now()
);
-- One grant per group and domain, and one on all domains (null is not equal to null in a unique index).
create unique index group_domains_one_idx on group_domains (group_id, coalesce(domain_id, 0));
-- Who holds a grant on a domain (its members' page lists the groups).
create index group_domains_domain_idx on group_domains (domain_id);
