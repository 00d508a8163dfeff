/**
 * One client's Server-Sent Events body, with a bounded queue in front of it.
 *
 * The body is pulled by the HTTP layer only as fast as the socket takes it (@hono/node-server
 * waits for `drain` before reading again), so whatever the client does not read piles up here. A
 * poll's messages are always taken whole (one poll may bring more than the bound, and a client
 * that reads fast must not be cut for a burst), but a client that still has more than
 * `maxQueuedBytes` unread when the next messages come is cut: its connection is destroyed. So a
 * client holds at most `maxQueuedBytes` plus one poll's messages, whose entry text is shared with
 * every other client of the poll. Bytes already handed on are at most one piece (PIECE_BYTES) in
 * the socket's own buffer.
 *
 * A stream ends in one of four ways, reported once to `onClose`: the client goes away, it is cut
 * for reading too slowly, or `end(reason)` closes it after a last `event: end` message (token
 * expired, access revoked, shutdown); an end whose last message the client does not read within
 * `endGraceMs` is cut as well, so an end never waits on the client.
 */

/** Why a stream was closed: an end reason sent to the client, or one the client cannot be told. */
export type EndReason = 'token-expired' | 'access-revoked' | 'access-check-failed' | 'shutdown';
export type CloseReason = EndReason | 'client-gone' | 'too-slow';

export interface StreamLimits {
  /** The most bytes waiting for a client that does not read; past this it is cut. */
  maxQueuedBytes: number;
  /** A `: keepalive` comment this often, so proxies and clients see the connection alive. */
  keepaliveMs: number;
  /** How long an ended stream may take to hand its last message over before it is cut. */
  endGraceMs: number;
  /** The reconnection delay the client is asked to use (`retry:`). */
  retryMs: number;
}

/** The most handed to the HTTP layer at once; messages are joined up to this. */
export const PIECE_BYTES = 64 * 1024;

/** One message, as parts: text, or bytes shared with other clients (an entry's JSON). */
export type Message = (string | Uint8Array)[];

/** The error a cut stream is failed with when there is no `disconnect`; the HTTP layer destroys the connection on it. */
export class TailStreamCut extends Error {
  constructor(readonly reason: CloseReason) {
    super(`live tail cut: ${reason}`);
    this.name = 'TailStreamCut';
  }
}

/** One SSE message: `id:`, `event:`, `data:` lines as given (values hold no line break), ended by a blank line. */
export function sseMessage(fields: { id?: string; event?: string; data?: string; retry?: number }): string {
  let text = '';
  if (fields.retry !== undefined) text += `retry: ${fields.retry}\n`;
  if (fields.id !== undefined) text += `id: ${fields.id}\n`;
  if (fields.event !== undefined) text += `event: ${fields.event}\n`;
  if (fields.data !== undefined) text += `data: ${fields.data}\n`;
  return `${text}\n`;
}

const encoder = new TextEncoder();

export class TailStream {
  readonly body: ReadableStream<Uint8Array>;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private queue: Uint8Array[] = [];
  private queuedBytes = 0;
  /** A read is waiting and nothing was queued for it. */
  private wanted = false;
  private state: 'open' | 'ending' | 'closed' = 'open';
  private endReason: EndReason | undefined;
  private keepalive: NodeJS.Timeout | undefined;
  private grace: NodeJS.Timeout | undefined;

  /**
   * `disconnect` destroys the connection (given by the node server); without it a cut errors the
   * body, which makes the server destroy the connection too, but also report the error.
   */
  constructor(
    private readonly limits: StreamLimits,
    private readonly onClose: (reason: CloseReason) => void,
    private readonly disconnect?: () => void,
  ) {
    this.body = new ReadableStream<Uint8Array>(
      {
        start: (controller) => {
          this.controller = controller;
        },
        pull: () => {
          if (this.queue.length > 0) this.handOver();
          else if (this.state === 'ending') this.finish('closed', this.endReason!);
          else this.wanted = true;
        },
        cancel: () => this.finish('cancelled', 'client-gone'),
      },
      // Nothing is taken from the queue before the socket asks for it.
      { highWaterMark: 0 },
    );
  }

  /** Queues the first message and starts the keepalive comments. */
  begin(first: string): void {
    this.send([[first]]);
    this.keepalive = setInterval(() => this.send([[': keepalive\n\n']]), this.limits.keepaliveMs).unref();
  }

  get open(): boolean {
    return this.state === 'open';
  }

  /** Queues messages, all of them; a client that has more than maxQueuedBytes unread from before is cut instead. */
  send(messages: Message[]): void {
    if (this.state !== 'open') return;
    if (this.queuedBytes > this.limits.maxQueuedBytes) {
      this.finish('cut', 'too-slow');
      return;
    }
    for (const message of messages) for (const part of message) this.enqueue(typeof part === 'string' ? encoder.encode(part) : part);
    if (this.wanted) this.handOver();
  }

  /** Sends `event: end` with the reason, then closes; cut if the client does not take it within endGraceMs. */
  end(reason: EndReason): void {
    if (this.state !== 'open') return;
    this.enqueue(encoder.encode(sseMessage({ event: 'end', data: JSON.stringify({ reason }) })));
    this.state = 'ending';
    this.endReason = reason;
    this.grace = setTimeout(() => this.finish('cut', reason), this.limits.endGraceMs).unref();
    if (this.wanted) this.handOver();
  }

  private enqueue(bytes: Uint8Array): void {
    this.queue.push(bytes);
    this.queuedBytes += bytes.length;
  }

  /** Hands the waiting read the queued messages, joined up to PIECE_BYTES. */
  private handOver(): void {
    this.wanted = false;
    let size = 0;
    let count = 0;
    while (count < this.queue.length && (count === 0 || size + this.queue[count]!.length <= PIECE_BYTES)) size += this.queue[count++]!.length;
    const taken = this.queue.splice(0, count);
    this.queuedBytes -= size;
    this.controller.enqueue(taken.length === 1 ? taken[0]! : Buffer.concat(taken, size));
  }

  private finish(how: 'closed' | 'cut' | 'cancelled', reason: CloseReason): void {
    if (this.state === 'closed') return;
    this.state = 'closed';
    clearInterval(this.keepalive);
    clearTimeout(this.grace);
    this.queue = [];
    this.queuedBytes = 0;
    if (how === 'closed') this.controller.close();
    else if (how === 'cut' && this.disconnect) this.disconnect();
    else if (how === 'cut') this.controller.error(new TailStreamCut(reason));
    this.onClose(reason);
  }
}
