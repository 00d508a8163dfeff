/** A role on a domain (a member's, a group's): viewer or editor (docs/reference/domains.md#members). */
export type Role = 'viewer' | 'editor';
const ROLES: Role[] = ['viewer', 'editor'];

/** "a viewer", "an editor". */
export const roleName = (role: Role) => (role === 'editor' ? 'an editor' : 'a viewer');

/** The select of a role: named by a `<label for={id}>`, or by `label` where it stands in a table row. */
export function RoleSelect({ id, label, value, onChange }: { id?: string; label?: string; value: Role; onChange: (role: Role) => void }) {
  return (
    <select id={id} aria-label={label} value={value} onChange={(e) => onChange(e.currentTarget.value as Role)}>
      {ROLES.map((role) => (
        <option value={role}>{role}</option>
      ))}
    </select>
  );
}
