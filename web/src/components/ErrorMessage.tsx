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
