/**
 * A live tail (GET /api/logs/domains/:id/tail, Server-Sent Events) read with fetch, which can
 * send the bearer token that EventSource cannot. Each event's id is kept, so that a reconnection
 * (after a pause, or when the server ends the stream because the access token expired) resumes
 * with Last-Event-ID: nothing lost, nothing twice.
 */
import { authorization, restoreSession } from './api.js';

export interface TailEvent {
  type: 'access' | 'error';
  entry: Record<string, unknown>;
}

export interface Tail {
  /** Stops reading; the last event id stays for `start` again. */
  stop(): void;
  start(): void;
}

export function openTail(path: string, onEvent: (event: TailEvent) => void, onProblem: (message: string | null) => void): Tail {
  let lastId: string | null = null;
  let controller: AbortController | null = null;

  async function run(signal: AbortSignal): Promise<void> {
    const res = await fetch(path, { headers: { ...authorization(), ...(lastId ? { 'Last-Event-ID': lastId } : {}) }, signal });
    if (res.status === 401 && (await restoreSession())) return run(signal);
    if (!res.ok || !res.body) {
      const body = await res.json().catch(() => null);
      throw new Error(body?.error ?? `The live tail answered ${res.status}`);
    }
    onProblem(null);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end: number;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const fields = { id: null as string | null, event: 'message', data: '' };
        for (const line of block.split('\n')) {
          const colon = line.indexOf(':');
          if (colon <= 0) continue;
          const [name, text] = [line.slice(0, colon), line.slice(colon + 1).replace(/^ /, '')];
          if (name === 'id') fields.id = text;
          else if (name === 'event') fields.event = text;
          else if (name === 'data') fields.data += text;
        }
        if (fields.id) lastId = fields.id;
        if (fields.event === 'access' || fields.event === 'error') onEvent({ type: fields.event, entry: JSON.parse(fields.data) });
        if (fields.event === 'end') {
          const reason = (JSON.parse(fields.data || '{}') as { reason?: string }).reason;
          // An expired token: renew it and go on where the stream stopped.
          if (reason === 'token-expired' && (await restoreSession())) return run(signal);
          throw new Error(`The live tail ended (${reason ?? 'closed by the server'})`);
        }
      }
    }
  }

  const tail: Tail = {
    start() {
      if (controller) return;
      const own = new AbortController();
      controller = own;
      run(own.signal).then(
        () => {
          if (controller === own) {
            controller = null;
            onProblem('The live tail was closed by the server; resume to go on.');
          }
        },
        (err: unknown) => {
          if (own.signal.aborted) return;
          if (controller === own) controller = null;
          onProblem(err instanceof Error ? err.message : 'The live tail stopped.');
        },
      );
    },
    stop() {
      controller?.abort();
      controller = null;
    },
  };
  return tail;
}
