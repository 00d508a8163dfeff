/**
 * The page's state lives in its URL (path and query string), so that a view can be bookmarked,
 * shared and reloaded, and the back button works: pages read it with useLocation and change it
 * with navigate.
 */
import { useEffect, useState } from 'preact/hooks';

export interface Location {
  path: string;
  query: URLSearchParams;
}

const current = (): Location => ({ path: window.location.pathname, query: new URLSearchParams(window.location.search) });
const CHANGE = 'tailhouse:navigate';

export function navigate(to: string, options: { replace?: boolean } = {}): void {
  if (to === window.location.pathname + window.location.search) return;
  if (options.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  window.dispatchEvent(new Event(CHANGE));
}

/** The path with the query string changed: `null` or '' removes a parameter. */
export function withQuery(location: Location, changes: Record<string, string | number | null>): string {
  const query = new URLSearchParams(location.query);
  for (const [key, value] of Object.entries(changes)) {
    if (value === null || value === '') query.delete(key);
    else query.set(key, String(value));
  }
  const search = query.toString();
  return search ? `${location.path}?${search}` : location.path;
}

export function useLocation(): Location {
  const [location, setLocation] = useState(current);
  useEffect(() => {
    const update = () => setLocation(current());
    window.addEventListener('popstate', update);
    window.addEventListener(CHANGE, update);
    return () => {
      window.removeEventListener('popstate', update);
      window.removeEventListener(CHANGE, update);
    };
  }, []);
  return location;
}

/** A link that navigates inside the page (a plain click) and stays a link (new tab, copy). */
export function linkClick(event: MouseEvent, to: string): void {
  if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(to);
}
