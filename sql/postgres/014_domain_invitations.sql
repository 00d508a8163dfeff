-- Invitations to a domain by e-mail address (docs/reference/domains.md#invitations): a one-use
-- link (src/auth/links.ts: only the token's SHA-256 is stored, with an expiry) that makes the
-- address's account a member in `role`, creating the account first when there is none. One
-- pending invitation per domain and address: a new one replaces it (and voids its link).
-- Withdrawing one deletes its row, so its link is unknown from then on.
create table domain_invitations (
  id integer generated always as identity primary key,
  domain_id integer not null references domains (id) on delete cascade,
  email text not null,
  role text not null check (role in ('viewer', 'editor')),
  token_hash text not null unique,
  -- Whose right the invitation stands for: it is void once they no longer manage the domain.
  invited_by integer references users (id) on delete set null,
  expires_at timestamptz(3) not null,
  used_at timestamptz(3),
  created_at timestamptz(3) not null default now()
);
create unique index domain_invitations_pending_idx on domain_invitations (domain_id, email) where used_at is null;
