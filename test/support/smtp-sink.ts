import { simpleParser, type ParsedMail } from 'mailparser';
import { SMTPServer } from 'smtp-server';

/** An SMTP command the sink can refuse: the sender, a recipient, or the message after DATA. */
export type SmtpStage = 'MAIL FROM' | 'RCPT TO' | 'DATA';

/** A reply that refuses a command, e.g. `{ code: 550, message: '5.1.1 mailbox unavailable' }`. */
export interface SmtpRefusal {
  code: number;
  message: string;
}

/** A real SMTP server on 127.0.0.1 that keeps every message it accepts, parsed. */
export interface SmtpSink {
  url: string;
  port: number;
  messages: ParsedMail[];
  /**
   * Decides, per command, whether to refuse it (`address`: the sender for MAIL FROM, the
   * recipient for RCPT TO, the first recipient for DATA); undefined or no answer accepts. Settable
   * at any time, so a test can make a running server start or stop refusing.
   */
  refuse: ((stage: SmtpStage, address: string) => SmtpRefusal | undefined) | undefined;
  /** Every refusal sent, oldest first. */
  refusals: (SmtpRefusal & { stage: SmtpStage; address: string })[];
  /** Resolves with the first message matching, polling until the deadline. */
  waitFor(match: (m: ParsedMail) => boolean, timeoutMs?: number): Promise<ParsedMail>;
  close(): Promise<void>;
}

/** Listens on `port` (default: any free one), e.g. the port a mailer was given while nothing listened. */
export async function startSmtpSink(port = 0): Promise<SmtpSink> {
  const messages: ParsedMail[] = [];
  const refusals: SmtpSink['refusals'] = [];
  // The error smtp-server turns into the reply `code message`, if the sink's `refuse` says so.
  const refusal = (stage: SmtpStage, address: string): Error | null => {
    const answer = sink.refuse?.(stage, address);
    if (!answer) return null;
    refusals.push({ ...answer, stage, address });
    return Object.assign(new Error(answer.message), { responseCode: answer.code });
  };
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ['STARTTLS'],
    logger: false,
    onMailFrom(address, _session, callback) {
      callback(refusal('MAIL FROM', address.address));
    },
    onRcptTo(address, _session, callback) {
      callback(refusal('RCPT TO', address.address));
    },
    onData(stream, session, callback) {
      const refused = refusal('DATA', session.envelope.rcptTo[0]?.address ?? '');
      if (refused) {
        // The message must be read to its end before the reply.
        stream.on('end', () => callback(refused));
        stream.resume();
        return;
      }
      simpleParser(stream)
        .then((mail) => {
          messages.push(mail);
          callback();
        })
        .catch(callback);
    },
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  const bound = (server.server.address() as { port: number }).port;
  const sink: SmtpSink = {
    url: `smtp://127.0.0.1:${bound}`,
    port: bound,
    messages,
    refuse: undefined,
    refusals,
    async waitFor(match, timeoutMs = 10_000) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = messages.find(match);
        if (found) return found;
        if (Date.now() > deadline) throw new Error(`no matching message within ${timeoutMs} ms (${messages.length} received)`);
        await new Promise((r) => setTimeout(r, 25));
      }
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
  return sink;
}
