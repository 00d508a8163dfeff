import fs from 'node:fs/promises';
import path from 'node:path';
import nodemailer from 'nodemailer';
import type { Logger } from '../../core/log.js';

export interface Mail {
  to: string;
  subject: string;
  text: string;
  html?: string;
}

export interface Mailer {
  send(mail: Mail): Promise<void>;
  close(): void;
}

/**
 * SMTP at SMTP_URL, or, without it, `.eml` files in DATA_DIR/outbox (embedded mode), both through
 * nodemailer so the message bytes are the same. Logs name the recipient and subject, never the body.
 */
export function createMailer(options: { smtpUrl?: string | undefined; from: string; outboxDir: string; log: Logger }): Mailer {
  const { log } = options;
  if (options.smtpUrl) {
    const transport = nodemailer.createTransport(options.smtpUrl);
    return {
      async send(mail) {
        const info = await transport.sendMail({ from: options.from, ...mail });
        log.info({ to: mail.to, subject: mail.subject, messageId: info.messageId }, 'mail sent');
      },
      close: () => transport.close(),
    };
  }
  const transport = nodemailer.createTransport({ streamTransport: true, buffer: true, newline: 'windows' });
  return {
    async send(mail) {
      const info = await transport.sendMail({ from: options.from, ...mail });
      await fs.mkdir(options.outboxDir, { recursive: true });
      const id = String(info.messageId).replace(/[^\w.-]/g, '');
      const file = path.join(options.outboxDir, `${new Date().toISOString().replace(/[:.]/g, '-')}-${id}.eml`);
      await fs.writeFile(file, info.message as Buffer, { mode: 0o600 });
      log.info({ to: mail.to, subject: mail.subject, file }, 'mail written to outbox');
    },
    close: () => transport.close(),
  };
}
