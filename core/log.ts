import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * One JSON object per line on stdout. Secrets never reach the logger: callers log ids and e-mail
 * addresses, never passwords, tokens or message bodies; the redact list is a second line of defence.
 */
export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      base: { service: 'tailhouse' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
      redact: {
        paths: ['password', '*.password', 'newPassword', '*.newPassword', 'currentPassword', 'token', '*.token', 'refreshToken', '*.refreshToken', 'authorization', '*.authorization'],
        censor: '[redacted]',
      },
    },
    destination,
  );
}
