/**
 * How a page reads the API. useData asks when the page shows and again whenever what it asks
 * changes; the request before is cancelled (its AbortController), as on leaving the page, so
 * that a late answer never replaces the current one. Loaded shows a read's states as the pages do.
 */
import type { ComponentChildren } from 'preact';
import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { ErrorMessage } from '../components/ErrorMessage.js';

export interface Read<T> {
  /** The answer to what is asked now (during a reload, the one before); null until it came, or when it failed. */
  data: T | null;
  /** Why the last read failed; null when it did not. */
  error: unknown;
  /** Asks again, after a change or to retry; what was shown stays until the answer. Resolves once it shows, with why it failed (as `error`) or null. */
  reload: () => Promise<unknown>;
}

interface Options {
  /** Asks from a layout effect, before the browser paints: for requests that follow one another, each would otherwise wait for a paint. */
  beforePaint?: boolean;
  /** When what is asked changes (another page of a listing), the answer before stays shown until the new one comes. */
  keep?: boolean;
}

/** `load`'s answer for `deps` (JSON values: what is asked); `load` gets the signal that cancels it. */
export function useData<T>(deps: readonly unknown[], load: (signal: AbortSignal) => Promise<T>, { beforePaint = false, keep = false }: Options = {}): Read<T> {
  const key = JSON.stringify(deps);
  const [state, setState] = useState<{ key: string | null; data: T | null; error: unknown }>({ key: null, data: null, error: null });
  const latest = useRef({ key, load });
  latest.current = { key, load };
  const running = useRef<AbortController | null>(null);
  const run = () => {
    running.current?.abort();
    const controller = new AbortController();
    running.current = controller;
    const asked = latest.current.key;
    return latest.current.load(controller.signal).then(
      (data) => {
        if (!controller.signal.aborted) setState({ key: asked, data, error: null });
        return null;
      },
      (error: unknown) => {
        // Cancelled: a newer read (or none, the page gone) tells what it has to.
        if (controller.signal.aborted) return null;
        setState((before) => ({ key: asked, data: before.key === asked || keep ? before.data : null, error }));
        return error;
      },
    );
  };
  (beforePaint ? useLayoutEffect : useEffect)(() => {
    run();
    return () => running.current?.abort();
  }, [key]);
  const current = state.key === key || keep;
  return { data: current ? state.data : null, error: current ? state.error : null, reload: run };
}

/** A read as the pages show it: its error, "Loading…" until the first answer, then `children` with the answer. */
export function Loaded<T>({ read, children }: { read: Read<T>; children: (data: T) => ComponentChildren }) {
  return (
    <>
      {read.error !== null && <ErrorMessage error={read.error} />}
      {read.data === null && read.error === null && <p aria-live="polite">Loading…</p>}
      {read.data !== null && children(read.data)}
    </>
  );
}
