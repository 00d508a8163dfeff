import { navigate, withQuery, type Location } from '../router.js';

/** Previous / next over the URL's `page`; hidden for a single page unless `always`. */
export function Pager({ page, pages, location, always = false }: { page: number; pages: number; location: Location; always?: boolean }) {
  if (pages <= 1 && !always) return null;
  return (
    <nav class="pages" aria-label="Pages">
      <button type="button" disabled={page <= 1} onClick={() => navigate(withQuery(location, { page: page - 1 }))}>
        Previous
      </button>
      <span>
        Page {page} of {Math.max(1, pages)}
      </span>
      <button type="button" disabled={page >= pages} onClick={() => navigate(withQuery(location, { page: page + 1 }))}>
        Next
      </button>
    </nav>
  );
}
