import { ApiError } from '../api.js';

/** An error as a sentence for the user, never raw JSON or a blank page. */
export function ErrorMessage({ error }: { error: unknown }) {
  const text =
    error instanceof ApiError
      ? `${error.message}${Object.keys(error.details).length ? `: ${Object.entries(error.details).map(([field, message]) => `${field} ${message}`).join('; ')}` : ''}`
      : error instanceof TypeError
        ? 'The server cannot be reached; check the connection and try again.'
        : 'Something went wrong; reload the page to try again.';
  return (
    <p class="error" role="alert">
      {text}
    </p>
  );
}

/**
 * A form's error: a 422's messages by field, but for `atFields`, whose FieldError shows them at
 * the field; or else the error as ErrorMessage tells it.
 */
export function FormErrors({ error, atFields = [] }: { error: unknown; atFields?: string[] }) {
  if (error === null) return null;
  if (error instanceof ApiError && Object.keys(error.details).length > 0) {
    const rest = Object.entries(error.details).filter(([field]) => !atFields.includes(field));
    if (rest.length === 0) return null;
    return (
      <p class="error" role="alert">
        {rest.map(([field, text]) => `${field} ${text}`).join('; ')}
      </p>
    );
  }
  return <ErrorMessage error={error} />;
}

/** The attributes that tie an input to its message from the API (FieldError's, same `id`). */
export const invalid = (id: string, message: string | undefined) => (message ? { 'aria-invalid': true, 'aria-describedby': `${id}-error` } : {});

/** A field's message from the API (an entry of a 422's details), at the field and announced: "User id: no user has this id". */
export function FieldError({ id, label, message }: { id: string; label: string; message: string | undefined }) {
  if (!message) return null;
  return (
    <span class="error" id={`${id}-error`} role="alert">
      {label}: {message}
    </span>
  );
}
