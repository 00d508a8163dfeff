/**
 * A form of one field in a row (a name, an address, a user id, or a choice among `options`), with
 * a role when `role` is given: the API's message for the field shown at it (FieldError), any
 * other error below. `onSubmit` throws what the API refused; once it resolves the field empties
 * (back to `initial`).
 */
import { useState } from 'preact/hooks';
import { ApiError } from '../api.js';
import { FieldError, FormErrors, invalid } from './ErrorMessage.js';
import { RoleSelect, type Role } from './RoleSelect.js';

interface Props {
  /** The form's accessible name. */
  name: string;
  /** The input's id; the role's select is `${id}-role`. */
  id: string;
  /** The body's field the input fills, whose 422 message is shown at it. */
  field: string;
  label: string;
  button: string;
  initial?: string;
  /** The attributes of a text input (`type`, `inputMode`, `placeholder`). */
  input?: Record<string, string>;
  /** A select of these instead of a text input; the first is chosen at first. */
  options?: { value: string; label: string }[];
  /** With a role's select, starting at this role. */
  role?: Role;
  onSubmit: (value: string, role: Role) => Promise<void>;
}

export function FieldForm({ name, id, field, label, button, initial = '', input = {}, options, role: firstRole, onSubmit }: Props) {
  const [value, setValue] = useState(initial);
  const [role, setRole] = useState<Role>(firstRole ?? 'viewer');
  const [error, setError] = useState<unknown>(null);
  const message = error instanceof ApiError ? error.details[field] : undefined;
  // A choice no longer offered (it was just added) falls back to the first offered.
  const chosen = options && !options.some((o) => o.value === value) ? (options[0]?.value ?? '') : value;
  const submit = async (e: Event) => {
    e.preventDefault();
    try {
      await onSubmit(chosen, role);
      setValue(initial);
      setError(null);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="inline-form fields" onSubmit={submit} noValidate aria-label={name}>
      <div class="field">
        <label for={id}>{label}</label>
        {options ? (
          <select id={id} value={chosen} onChange={(e) => setValue(e.currentTarget.value)} {...invalid(id, message)}>
            {options.map((o) => (
              <option value={o.value}>{o.label}</option>
            ))}
          </select>
        ) : (
          <input id={id} {...input} value={value} onInput={(e) => setValue(e.currentTarget.value)} {...invalid(id, message)} />
        )}
      </div>
      {firstRole && (
        <div class="field">
          <label for={`${id}-role`}>Role</label>
          <RoleSelect id={`${id}-role`} value={role} onChange={setRole} />
        </div>
      )}
      <button type="submit" disabled={options?.length === 0}>
        {button}
      </button>
      <FieldError id={id} label={label} message={message} />
      <FormErrors error={error} atFields={[field]} />
    </form>
  );
}
