-- Members of a domain (docs/reference/domains.md#members): users besides its owner who see it,
-- each in a role: `viewer` (reads its logs, statistics and alerts) or `editor` (also creates,
-- changes and deletes its alerts and silences). The owner stays one user, domains.owner_id.
-- Who sees which domain in which role is read in one place only, grantsOf in
-- src/domains/store.ts: its owner, its members; a group's grant will be one more branch there.
create table domain_members (
  domain_id integer not null references domains (id) on delete cascade,
  user_id integer not null references users (id) on delete cascade,
  role text not null check (role in ('viewer', 'editor')),
  -- Who granted the role last (null: the command line, or a user deleted since).
  granted_by integer references users (id) on delete set null,
  created_at timestamptz(3) not null default now(),
  updated_at timestamptz(3) not null default now(),
  primary key (domain_id, user_id)
);
-- The domains a user is a member of: every listing of a non-administrator reads it.
create index domain_members_user_idx on domain_members (user_id, domain_id);
