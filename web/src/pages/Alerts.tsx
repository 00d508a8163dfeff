/**
 * A domain's alerts: each with its state, when it last fired, its last delivery and that
 * delivery's error; create, edit, enable or disable, delete (after a confirmation), each offered
 * only to a user whose permissions allow it. The API's validation messages are shown at their
 * fields. Below them, what else bears on the domain: the rules over many domains that cover it
 * (with their state here), the silences in force or to come that cover it, and its history of
 * state changes (paged, newest first; the page is in the URL).
 */
import { useState } from 'preact/hooks';
import { api, may } from '../api.js';
import { ruleText, silenceCovers, conditionValue } from '../alerting.js';
import type { Alert, HistoryPage, Rule, Silence } from '../data/types.js';
import { AlertForm, draftOf, EMPTY_DRAFT, type Draft } from '../components/AlertForm.js';
import { HistoryTable, SilencesTable } from '../components/AlertTables.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Scroll } from '../components/Scroll.js';
import { useData } from '../data/use-data.js';
import { counted, utcCell, utcTime } from '../format.js';
import { linkClick, type Location } from '../router.js';

const HISTORY_PAGE = 20;

/** The rules over many domains that cover this one, with their state here. */
function CoveringRules({ rules }: { rules: Rule[] }) {
  if (rules.length === 0) return <p class="hint">No rule over many domains covers this domain.</p>;
  return (
    <Scroll label="Rules covering this domain">
      <table class="rules">
        <caption>{counted(rules.length, 'rule')} {rules.length === 1 ? 'covers' : 'cover'} this domain</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Condition</th>
            <th scope="col">State here</th>
            <th scope="col" class="number">
              Value
            </th>
            <th scope="col">Since (UTC)</th>
            <th scope="col">Silenced by</th>
          </tr>
        </thead>
        <tbody>
          {rules.map((rule) => {
            const here = rule.domains[0];
            const state = !rule.enabled ? 'disabled' : (here?.state ?? 'ok');
            return (
              <tr>
                <th scope="row" class="name">
                  {rule.name}
                </th>
                <td class="rule">{ruleText(rule)}</td>
                <td>
                  <span class={`state ${state}`}>{state}</span>
                </td>
                <td class="number">{conditionValue(rule.condition, here?.value ?? null)}</td>
                <td class="nowrap">{here?.since ? utcCell(here.since, true) : '–'}</td>
                <td>{here?.silencedBy != null ? `silence #${here.silencedBy}` : 'none'}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </Scroll>
  );
}

/** What covers the domain beyond its own alerts: rules, silences, and its history. */
function Coverage({ id, location, alerts }: { id: number; location: Location; alerts: Alert[] | null }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  const rulesRead = useData([id], (signal) => api<{ rules: Rule[] }>('GET', `/api/logs/domains/${id}/alerts/rules`, undefined, signal));
  const silencesRead = useData([id], (signal) => api<{ silences: Silence[] }>('GET', '/api/logs/silences', undefined, signal));
  // The page before stays until the next comes.
  const historyRead = useData([id, page], (signal) => api<HistoryPage>('GET', `/api/logs/domains/${id}/alerts/history?page=${page}&limit=${HISTORY_PAGE}`, undefined, signal), { keep: true });
  const rules = rulesRead.data?.rules ?? null;
  const silences = silencesRead.data?.silences.filter((s) => silenceCovers(s, id)) ?? null;
  const history = historyRead.data;
  const error = rulesRead.error ?? silencesRead.error ?? historyRead.error;
  const conditions = new Map<number, string>([...(alerts ?? []), ...(rules ?? [])].map((a) => [a.id, a.condition]));
  return (
    <>
      {error !== null && <ErrorMessage error={error} />}
      <section aria-labelledby="covering-rules">
        <h2 id="covering-rules">Rules covering this domain</h2>
        {rules === null && error === null && <p aria-live="polite">Loading…</p>}
        {rules !== null && <CoveringRules rules={rules} />}
      </section>
      <section aria-labelledby="domain-silences">
        <h2 id="domain-silences">Silences</h2>
        <p class="hint">
          In force or to come. Silences and rules over many domains are managed on the{' '}
          <a href="/alerting" onClick={(e) => linkClick(e, '/alerting')}>
            Alerting
          </a>{' '}
          page.
        </p>
        {silences === null && error === null && <p aria-live="polite">Loading…</p>}
        {silences !== null && silences.length === 0 && <p class="hint">No silence holds this domain's notifications now or later.</p>}
        {silences !== null && silences.length > 0 && (
          <SilencesTable
            silences={silences}
            caption="Silences covering this domain"
            domainNames={new Map()}
            describe={(ids) => (ids.length === 1 ? 'This domain' : `This domain and ${ids.length - 1} more`)}
          />
        )}
      </section>
      <section aria-labelledby="domain-history">
        <h2 id="domain-history">History</h2>
        <p class="hint">Every state change of the domain's alerts and of the rules covering it, kept 90 days.</p>
        {history === null && error === null && <p aria-live="polite">Loading…</p>}
        {history !== null && <HistoryTable history={history} conditions={conditions} location={location} withDomain={false} />}
      </section>
    </>
  );
}

export function Alerts({ id, location }: { id: number; location: Location }) {
  /** 'new', an alert's id being edited, or null. */
  const [editing, setEditing] = useState<'new' | number | null>(null);
  const path = `/api/logs/domains/${id}/alerts`;
  const allowedRead = useData([], async () => {
    const [create, update, remove] = await Promise.all([may('alerts', 'create'), may('alerts', 'update'), may('alerts', 'delete')]);
    return { create, update, delete: remove };
  });
  const allowed = allowedRead.data ?? { create: false, update: false, delete: false };
  const read = useData([id], (signal) => api<{ alerts: Alert[] }>('GET', path, undefined, signal));
  const alerts = read.data?.alerts ?? null;
  const [changeError, setChangeError] = useState<unknown>(null);
  const error = changeError ?? read.error ?? allowedRead.error;
  const act = async (work: Promise<unknown>) => {
    try {
      await work;
      setChangeError(null);
    } catch (err) {
      setChangeError(err);
    }
    await read.reload();
  };
  const save = async (draft: Draft, alertId?: number) => {
    await api(alertId ? 'PUT' : 'POST', alertId ? `${path}/${alertId}` : path, draft);
    setEditing(null);
    await read.reload();
  };
  return (
    <section class="domain-alerts" aria-label="Alerts">
      <h2>This domain's alerts</h2>
      {error !== null && <ErrorMessage error={error} />}
      {editing === 'new' ? (
        <AlertForm label="New alert" initial={EMPTY_DRAFT} onSave={(d) => save(d)} onCancel={() => setEditing(null)} />
      ) : (
        allowed.create && (
          <button type="button" onClick={() => setEditing('new')}>
            New alert
          </button>
        )
      )}
      {alerts === null && error === null && <p aria-live="polite">Loading…</p>}
      {alerts !== null && alerts.length === 0 && <p class="hint">No alerts yet.</p>}
      {alerts !== null && alerts.length > 0 && (
        <Scroll label="Alerts">
          <table class="alerts">
            <caption>{alerts.length} alerts</caption>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Rule</th>
                <th scope="col">State</th>
                <th scope="col">Last triggered</th>
                <th scope="col">Last delivery</th>
                <th scope="col">Actions</th>
              </tr>
            </thead>
            <tbody>
              {alerts.map((alert) =>
                editing === alert.id ? (
                  <tr>
                    <td colSpan={6}>
                      <AlertForm label={`Edit ${alert.name}`} initial={draftOf(alert)} onSave={(d) => save(d, alert.id)} onCancel={() => setEditing(null)} />
                    </td>
                  </tr>
                ) : (
                  <tr>
                    <th scope="row">{alert.name}</th>
                    <td class="rule">
                      {ruleText(alert)}, {alert.notificationMethod} to {alert.notificationTarget}
                    </td>
                    <td>
                      <span class={`state ${alert.state}`}>{alert.enabled ? alert.state : 'disabled'}</span>
                    </td>
                    <td>{utcTime(alert.lastTriggeredAt, true)}</td>
                    <td>
                      {utcTime(alert.lastDeliveredAt, true)}
                      {alert.lastDeliveryError && <span class="error"> — {alert.lastDeliveryError}</span>}
                    </td>
                    <td class="actions">
                      {allowed.update && (
                        <>
                          <button type="button" onClick={() => setEditing(alert.id)}>
                            Edit
                          </button>
                          <button type="button" onClick={() => act(api('PUT', `${path}/${alert.id}`, { enabled: !alert.enabled }))}>
                            {alert.enabled ? 'Disable' : 'Enable'}
                          </button>
                        </>
                      )}
                      {allowed.delete && (
                        <button
                          type="button"
                          onClick={() => {
                            if (window.confirm(`Delete the alert "${alert.name}"?`)) act(api('DELETE', `${path}/${alert.id}`));
                          }}
                        >
                          Delete
                        </button>
                      )}
                    </td>
                  </tr>
                ),
              )}
            </tbody>
          </table>
        </Scroll>
      )}
      <Coverage id={id} location={location} alerts={alerts} />
    </section>
  );
}
