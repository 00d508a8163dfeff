export const RESOURCES = ['users', 'domains', 'logs', 'alerts'] as const;
export const ACTIONS = ['read', 'create', 'update', 'delete'] as const;
export type Resource = (typeof RESOURCES)[number];
export type Action = (typeof ACTIONS)[number];
export type Role = 'admin' | 'user';

export interface PermissionEntry {
  resource: Resource;
  actions: Action[];
}

/** What a new `user` may do (docs/reference/permissions.md#the-permissions-catalogue). */
export const DEFAULT_USER_PERMISSIONS: PermissionEntry[] = [
  { resource: 'logs', actions: ['read'] },
  { resource: 'alerts', actions: ['read', 'create', 'delete'] },
];

export const ALL_PERMISSIONS: PermissionEntry[] = RESOURCES.map((resource) => ({ resource, actions: [...ACTIONS] }));

/** Pairs as stored, grouped into entries in catalog order; resources without actions are left out. */
export function toEntries(pairs: { resource: string; action: string }[]): PermissionEntry[] {
  return RESOURCES.map((resource) => ({
    resource,
    actions: ACTIONS.filter((action) => pairs.some((p) => p.resource === resource && p.action === action)),
  })).filter((entry) => entry.actions.length > 0);
}

export function toPairs(entries: PermissionEntry[]): { resource: Resource; action: Action }[] {
  const pairs = entries.flatMap((e) => e.actions.map((action) => ({ resource: e.resource, action })));
  return pairs.filter((p, i) => pairs.findIndex((q) => q.resource === p.resource && q.action === p.action) === i);
}

/** What one caller may do, read fresh for each request. An admin may do everything. */
export class PermissionSet {
  private readonly granted: Set<string>;
  constructor(
    readonly role: Role,
    pairs: { resource: string; action: string }[],
  ) {
    this.granted = new Set(pairs.map((p) => `${p.resource}:${p.action}`));
  }
  can(resource: Resource, action: Action): boolean {
    return this.role === 'admin' || this.granted.has(`${resource}:${action}`);
  }
  entries(): PermissionEntry[] {
    if (this.role === 'admin') return ALL_PERMISSIONS.map((e) => ({ ...e, actions: [...e.actions] }));
    return toEntries([...this.granted].map((g) => ({ resource: g.split(':')[0]!, action: g.split(':')[1]! })));
  }
}
