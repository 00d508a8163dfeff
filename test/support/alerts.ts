import { expect } from 'vitest';
import { createAlertEvaluator, type AlertEvaluator, type AlertEvaluatorOptions } from '../../src/alerts/evaluator.js';
import { call, type TestApp } from './app.js';

/** An evaluator on the test app's stores; the rest (clock, interval, log, base URL …) from `options`. */
export function evaluatorOf(t: TestApp, options: Omit<AlertEvaluatorOptions, 'db' | 'clickhouse' | 'mailer'>): AlertEvaluator {
  return createAlertEvaluator({ db: t.runtime.db, clickhouse: t.runtime.clickhouse, mailer: t.runtime.mailer, ...options });
}

/** Defines an alert through the API (201 expected); returns its id and notification target. */
export async function postAlert(t: TestApp, token: string, domainId: number, body: Record<string, unknown>): Promise<{ id: number; target: string }> {
  const res = await call(t.app, 'POST', `/api/logs/domains/${domainId}/alerts`, { token, body });
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return { id: res.body.data.id, target: String(body.notificationTarget) };
}

/** An alert as GET /api/logs/domains/:domainId/alerts shows it (200 expected). */
export async function alertJson(t: TestApp, token: string, domainId: number, alertId: number): Promise<Record<string, any>> {
  const res = await call(t.app, 'GET', `/api/logs/domains/${domainId}/alerts`, { token });
  expect(res.status, JSON.stringify(res.body)).toBe(200);
  const alert = res.body.data.alerts.find((a: { id: number }) => a.id === alertId);
  expect(alert, `alert ${alertId} in the list of domain ${domainId}`).toBeDefined();
  return alert;
}
