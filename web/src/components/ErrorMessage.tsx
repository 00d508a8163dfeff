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

/** A form's error: a 422's messages by field, or else the error as ErrorMessage tells it. */
export function FormErrors({ error }: { error: unknown }) {
  if (error === null) return null;
  if (error instanceof ApiError && Object.keys(error.details).length > 0) {
    return (
      <p class="error" role="alert">
        {Object.entries(error.details)
          .map(([field, text]) => `${field} ${text}`)
          .join('; ')}
      </p>
    );
  }
  return <ErrorMessage error={error} />;
}
