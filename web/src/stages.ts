/**
 * The dashboard's requests in two stages: the headline (tiles and charts) first, the panels once
 * the headline has answered. The embedded ClickHouse runs one query at a time, so the order in
 * which a page's queries reach the server is the order in which its parts fill; sent all at once,
 * in the order the components' effects ran (children first, so the tiles last), a 30-day view
 * showed its tiles after 6.6 s of URL panels (bench/README, 2026-11-29). The whole page takes as
 * long either way: the server does the same work one query after the other.
 */
export type Stage = 'headline' | 'panels';

interface Queued {
  stage: Stage;
  send: () => Promise<unknown>;
  cancelled: boolean;
}

/** The requests asked for since the last flush: one render's effects run together, before the microtask. */
let queued: Queued[] = [];

async function flush(): Promise<void> {
  const batch = queued;
  queued = [];
  const sendAll = (stage: Stage) => batch.filter((q) => q.stage === stage && !q.cancelled).map((q) => q.send().catch(() => undefined));
  await Promise.all(sendAll('headline'));
  sendAll('panels');
}

/**
 * Sends `send` with the other requests of the same render, in its stage. The function returned
 * takes the request back if it has not gone out yet (the component left, or asks something else).
 */
export function sendInStage(stage: Stage, send: () => Promise<unknown>): () => void {
  const entry: Queued = { stage, send, cancelled: false };
  if (queued.push(entry) === 1) queueMicrotask(() => void flush());
  return () => {
    entry.cancelled = true;
  };
}
