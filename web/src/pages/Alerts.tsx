/**
 * A domain's alerts: each with its state, when it last fired, its last delivery and that
 * delivery's error; create, edit, enable or disable, delete (after a confirmation), each offered
 * only to a user whose permissions allow it. The API's validation messages are shown at their
 * fields.
 */
import { useEffect, useState } from 'preact/hooks';
import { api, ApiError, may } from '../api.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Scroll } from '../components/Scroll.js';
import { utcTime } from '../format.js';

interface Alert {
  id: number;
  name: string;
  condition: string;
  operator: string;
  threshold: number;
  duration: number;
  notificationMethod: string;
  notificationTarget: string;
  enabled: boolean;
  state: 'ok' | 'firing';
  lastTriggeredAt: string | null;
  lastDeliveredAt: string | null;
  lastDeliveryError: string | null;
}
type Draft = Omit<Alert, 'id' | 'state' | 'lastTriggeredAt' | 'lastDeliveredAt' | 'lastDeliveryError'>;

const CONDITIONS: Record<string, string> = {
  errorRate: 'Error rate (5xx share, 0–1)',
  clientErrorRate: 'Client error rate (4xx share, 0–1)',
  requestCount: 'Requests',
  averageResponseTime: 'Average response time (ms)',
  p95ResponseTime: 'p95 response time (ms)',
};
const OPERATORS: Record<string, string> = { greaterThan: '>', greaterThanOrEqual: '≥', lessThan: '<', lessThanOrEqual: '≤' };
const METHODS: Record<string, string> = { email: 'E-mail', webhook: 'Webhook (https URL)' };
const EMPTY: Draft = { name: '', condition: 'errorRate', operator: 'greaterThan', threshold: 0.05, duration: 300, notificationMethod: 'email', notificationTarget: '', enabled: true };

/** The fields of an alert a form edits (the API takes no others). */
const draftOf = (a: Alert): Draft => ({
  name: a.name,
  condition: a.condition,
  operator: a.operator,
  threshold: a.threshold,
  duration: a.duration,
  notificationMethod: a.notificationMethod,
  notificationTarget: a.notificationTarget,
  enabled: a.enabled,
});


function AlertForm({ initial, onSave, onCancel }: { initial: Draft; onSave: (draft: Draft) => Promise<void>; onCancel: () => void }) {
  const [draft, setDraft] = useState<Draft>(initial);
  const [error, setError] = useState<unknown>(null);
  const fieldErrors = error instanceof ApiError ? error.details : {};
  const set = <K extends keyof Draft>(key: K, value: Draft[K]) => setDraft({ ...draft, [key]: value });
  const field = (name: keyof Draft, label: string, input: preact.JSX.Element) => (
    <div class="field">
      <label for={`alert-${name}`}>{label}</label>
      {input}
      {fieldErrors[name] && (
        <span class="error" id={`alert-${name}-error`}>
          {label} {fieldErrors[name]}
        </span>
      )}
    </div>
  );
  const described = (name: keyof Draft) => (fieldErrors[name] ? { 'aria-describedby': `alert-${name}-error`, 'aria-invalid': true } : {});
  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    try {
      await onSave(draft);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="alert-form" onSubmit={submit} noValidate>
      {field('name', 'Name', <input id="alert-name" value={draft.name} onInput={(e) => set('name', e.currentTarget.value)} {...described('name')} />)}
      {field(
        'condition',
        'Condition',
        <select id="alert-condition" value={draft.condition} onChange={(e) => set('condition', e.currentTarget.value)} {...described('condition')}>
          {Object.entries(CONDITIONS).map(([value, label]) => (
            <option value={value}>{label}</option>
          ))}
        </select>,
      )}
      {field(
        'operator',
        'Operator',
        <select id="alert-operator" value={draft.operator} onChange={(e) => set('operator', e.currentTarget.value)} {...described('operator')}>
          {Object.entries(OPERATORS).map(([value, label]) => (
            <option value={value}>{label}</option>
          ))}
        </select>,
      )}
      {field('threshold', 'Threshold', <input id="alert-threshold" type="number" step="any" value={draft.threshold} onInput={(e) => set('threshold', e.currentTarget.valueAsNumber)} {...described('threshold')} />)}
      {field('duration', 'Window (seconds)', <input id="alert-duration" type="number" value={draft.duration} onInput={(e) => set('duration', e.currentTarget.valueAsNumber)} {...described('duration')} />)}
      {field(
        'notificationMethod',
        'Notify by',
        <select id="alert-notificationMethod" value={draft.notificationMethod} onChange={(e) => set('notificationMethod', e.currentTarget.value)} {...described('notificationMethod')}>
          {Object.entries(METHODS).map(([value, label]) => (
            <option value={value}>{label}</option>
          ))}
        </select>,
      )}
      {field('notificationTarget', 'Send to', <input id="alert-notificationTarget" value={draft.notificationTarget} onInput={(e) => set('notificationTarget', e.currentTarget.value)} {...described('notificationTarget')} />)}
      <label class="check">
        <input type="checkbox" checked={draft.enabled} onChange={(e) => set('enabled', e.currentTarget.checked)} />
        Enabled
      </label>
      {error !== null && !(error instanceof ApiError && Object.keys(error.details).length > 0) && <ErrorMessage error={error} />}
      {error instanceof ApiError && Object.keys(error.details).length > 0 && (
        <p class="error" role="alert">
          Please correct the fields marked above.
        </p>
      )}
      <div class="actions">
        <button type="submit">Save</button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

export function Alerts({ id }: { id: number }) {
  const [alerts, setAlerts] = useState<Alert[] | null>(null);
  const [error, setError] = useState<unknown>(null);
  /** 'new', an alert's id being edited, or null. */
  const [editing, setEditing] = useState<'new' | number | null>(null);
  const [allowed, setAllowed] = useState({ create: false, update: false, delete: false });
  const path = `/api/logs/domains/${id}/alerts`;
  useEffect(() => {
    Promise.all([may('alerts', 'create'), may('alerts', 'update'), may('alerts', 'delete')]).then(([create, update, remove]) => setAllowed({ create, update, delete: remove }), setError);
  }, []);
  const load = () => api<{ alerts: Alert[] }>('GET', path).then((data) => setAlerts(data.alerts), setError);
  useEffect(() => {
    load();
  }, [id]);
  const act = async (work: Promise<unknown>) => {
    try {
      await work;
      setError(null);
    } catch (err) {
      setError(err);
    }
    await load();
  };
  const save = async (draft: Draft, alertId?: number) => {
    await api(alertId ? 'PUT' : 'POST', alertId ? `${path}/${alertId}` : path, draft);
    setEditing(null);
    await load();
  };
  return (
    <section aria-label="Alerts">
      {error !== null && <ErrorMessage error={error} />}
      {editing === 'new' ? (
        <AlertForm initial={EMPTY} onSave={(d) => save(d)} onCancel={() => setEditing(null)} />
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
                      <AlertForm initial={draftOf(alert)} onSave={(d) => save(d, alert.id)} onCancel={() => setEditing(null)} />
                    </td>
                  </tr>
                ) : (
                  <tr>
                    <th scope="row">{alert.name}</th>
                    <td>
                      {alert.condition} {OPERATORS[alert.operator] ?? alert.operator} {alert.threshold} over {alert.duration} s, {alert.notificationMethod} to {alert.notificationTarget}
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
    </section>
  );
}
