/**
 * Alerting across domains (users with alerts:read; the navigation shows it to them only, and the
 * API decides anyway): the rules over many domains with the domains they fire on, a form for a
 * new rule over every domain or chosen ones; silences in force, to come or expired, a form for a
 * new one (every domain or chosen ones; for a while or until a time, or every week on chosen
 * weekdays from a time to a time in a time zone) and ending one; the history
 * of state changes of every domain, paged. Which silences are shown and the history's page are in
 * the URL.
 */
import { useState } from 'preact/hooks';
import { api, ApiError, may } from '../api.js';
import { browserTimeZone, conditionValue, recurrenceError, ruleText, timeZoneOptions, WEEKDAYS } from '../alerting.js';
import type { HistoryPage, Rule, Silence } from '../data/types.js';
import { AlertForm, EMPTY_DRAFT } from '../components/AlertForm.js';
import { HistoryTable, SilencesTable } from '../components/AlertTables.js';
import { DomainPicker, type Domain } from '../components/DomainPicker.js';
import { ErrorMessage } from '../components/ErrorMessage.js';
import { Scroll } from '../components/Scroll.js';
import { allDomains } from '../data/reads.js';
import { useData } from '../data/use-data.js';
import { linkClick, navigate, withQuery, type Location } from '../router.js';
import { counted } from '../format.js';

const HISTORY_PAGE = 25;
/** The firing domains a rule's row names before "and N more". */
const FIRING_SHOWN = 10;
const DURATIONS = [
  { minutes: 30, label: '30 minutes' },
  { minutes: 60, label: '1 hour' },
  { minutes: 120, label: '2 hours' },
  { minutes: 240, label: '4 hours' },
  { minutes: 480, label: '8 hours' },
  { minutes: 1440, label: '1 day' },
  { minutes: 4320, label: '3 days' },
  { minutes: 10080, label: '1 week' },
];

interface Rights {
  read: boolean;
  create: boolean;
  update: boolean;
  delete: boolean;
}

const namesOf = (ids: number[], domains: Map<number, string>, shown = 5) => {
  const names = ids.map((id) => domains.get(id) ?? `#${id}`);
  return names.length <= shown ? names.join(', ') : `${names.slice(0, shown).join(', ')} and ${names.length - shown} more`;
};

function Rules({ rules, domainNames, rights, onChanged, onError }: { rules: Rule[]; domainNames: Map<number, string>; rights: Rights; onChanged: () => void; onError: (err: unknown) => void }) {
  if (rules.length === 0) return <p class="hint">No rule over many domains yet.</p>;
  const act = async (work: Promise<unknown>) => {
    try {
      await work;
      onError(null);
    } catch (err) {
      onError(err);
    }
    onChanged();
  };
  return (
    <Scroll label="Rules">
      <table class="rules">
        <caption>{counted(rules.length, 'rule')}</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Condition</th>
            <th scope="col">Covers</th>
            <th scope="col">Firing on</th>
            <th scope="col">Notifies</th>
            {(rights.update || rights.delete) && <th scope="col">Actions</th>}
          </tr>
        </thead>
        <tbody>
          {rules.map((rule) => {
            const firing = rule.domains.filter((d) => d.state === 'firing');
            return (
              <tr>
                <th scope="row" class="name">
                  {rule.name}
                  {!rule.enabled && <span class="state disabled"> (disabled)</span>}
                </th>
                <td class="rule">{ruleText(rule)}</td>
                <td class="name">{'domains' in rule.scope ? 'All domains' : namesOf(rule.scope.domainIds, domainNames)}</td>
                <td class="firing-on">
                  {firing.length === 0 ? (
                    <span class="state ok">none</span>
                  ) : (
                    <ul class="plain">
                      {firing.slice(0, FIRING_SHOWN).map((d) => (
                        <li>
                          <a class="state firing" href={`/domains/${d.domainId}/alerts`} onClick={(e) => linkClick(e, `/domains/${d.domainId}/alerts`)}>
                            {d.domain}
                          </a>{' '}
                          <span class="nowrap">{conditionValue(rule.condition, d.value)}</span>
                          {d.silencedBy !== null && <span class="hint"> (silenced)</span>}
                        </li>
                      ))}
                      {firing.length > FIRING_SHOWN && <li>and {firing.length - FIRING_SHOWN} more</li>}
                    </ul>
                  )}
                </td>
                <td class="name">
                  {rule.notificationMethod} to {rule.notificationTarget}
                  {rule.lastDeliveryError && <span class="error"> — {rule.lastDeliveryError}</span>}
                </td>
                {(rights.update || rights.delete) && (
                  <td class="actions">
                    {rights.update && (
                      <button type="button" onClick={() => act(api('PUT', `/api/logs/alerts/${rule.id}`, { enabled: !rule.enabled }))}>
                        {rule.enabled ? 'Disable' : 'Enable'}
                        <span class="visually-hidden"> {rule.name}</span>
                      </button>
                    )}
                    {rights.delete && (
                      <button
                        type="button"
                        onClick={() => {
                          if (window.confirm(`Delete the rule "${rule.name}"?`)) act(api('DELETE', `/api/logs/alerts/${rule.id}`));
                        }}
                      >
                        Delete<span class="visually-hidden"> {rule.name}</span>
                      </button>
                    )}
                  </td>
                )}
              </tr>
            );
          })}
        </tbody>
      </table>
    </Scroll>
  );
}

/** A new silence: its domains, when (a duration from now, until a time, or a weekly window), and why. */
function SilenceForm({ domains, onCreated, onCancel }: { domains: Domain[] | null; onCreated: () => void; onCancel: () => void }) {
  const [covers, setCovers] = useState<'all' | number[]>('all');
  const [when, setWhen] = useState<'while' | 'weekly'>('while');
  const [mode, setMode] = useState<'for' | 'until'>('for');
  const [minutes, setMinutes] = useState(120);
  const [until, setUntil] = useState('');
  const [weekdays, setWeekdays] = useState<string[]>([]);
  const [start, setStart] = useState('');
  const [end, setEnd] = useState('');
  const [timezone, setTimezone] = useState(browserTimeZone);
  const [zones] = useState(() => timeZoneOptions(timezone));
  const [comment, setComment] = useState('');
  const [error, setError] = useState<unknown>(null);
  const details = error instanceof ApiError ? error.details : {};
  const domainError = details.domainIds ?? (error instanceof ApiError && error.status === 404 ? error.message : undefined);
  const invalid = (name: string) => (details[name] ? { 'aria-invalid': true, 'aria-describedby': `silence-${name}-error` } : {});
  const fieldError = (name: string, label: string) =>
    details[name] && (
      <span class="error" id={`silence-${name}-error`}>
        {label} {details[name]}
      </span>
    );
  // The recurrence's error, at the part of it that it is about.
  const weekly = recurrenceError(details.recurrence);
  const weeklyInvalid = (part: string) => (weekly?.part === part ? { 'aria-invalid': true, 'aria-describedby': `silence-recurrence-${part}-error` } : {});
  const weeklyError = (part: string, label: string) =>
    weekly?.part === part && (
      <span class="error" id={`silence-recurrence-${part}-error`}>
        {label} {weekly.message}
      </span>
    );
  const toggleDay = (day: string) => setWeekdays((days) => (days.includes(day) ? days.filter((d) => d !== day) : [...days, day]));
  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    let period: Record<string, unknown>;
    if (when === 'weekly') {
      period = { recurrence: { weekdays: WEEKDAYS.map((d) => d.value).filter((d) => weekdays.includes(d)), start, end, timezone } };
    } else {
      // A time typed "until" is UTC, as every time the dashboard shows.
      const endsAt = mode === 'for' ? new Date(Date.now() + minutes * 60_000).toISOString() : until ? `${until}:00Z` : undefined;
      period = endsAt ? { endsAt } : {};
    }
    try {
      await api('POST', '/api/logs/silences', { domainIds: covers, ...period, comment });
      onCreated();
    } catch (err) {
      setError(err);
    }
  };
  return (
    <form class="alert-form silence-form" onSubmit={submit} noValidate aria-label="New silence">
      <DomainPicker id="silence-domains" legend="Domains" allLabel="Every domain whose alerts I may change" value={covers} domains={domains} onChange={setCovers} error={domainError} />
      <fieldset>
        <legend>When</legend>
        <label class="check">
          <input type="radio" name="silence-when" checked={when === 'while'} onChange={() => setWhen('while')} />
          For a while
        </label>
        <label class="check">
          <input type="radio" name="silence-when" checked={when === 'weekly'} onChange={() => setWhen('weekly')} />
          Every week
        </label>
      </fieldset>
      {when === 'while' ? (
        <fieldset>
          <legend>How long</legend>
          <label class="check">
            <input type="radio" name="silence-mode" checked={mode === 'for'} onChange={() => setMode('for')} />
            For a while from now
          </label>
          <label class="check">
            <input type="radio" name="silence-mode" checked={mode === 'until'} onChange={() => setMode('until')} />
            Until a time
          </label>
          {mode === 'for' ? (
            <div class="field">
              <label for="silence-for">Duration</label>
              <select id="silence-for" value={minutes} onChange={(e) => setMinutes(Number(e.currentTarget.value))} {...invalid('endsAt')}>
                {DURATIONS.map((d) => (
                  <option value={d.minutes}>{d.label}</option>
                ))}
              </select>
            </div>
          ) : (
            <div class="field">
              <label for="silence-until">Ends at (UTC)</label>
              <input id="silence-until" type="datetime-local" value={until} onInput={(e) => setUntil(e.currentTarget.value)} {...invalid('endsAt')} />
            </div>
          )}
          {fieldError('endsAt', 'End')}
        </fieldset>
      ) : (
        <fieldset class="weekly" aria-describedby={weekly?.part === 'whole' ? 'silence-recurrence-whole-error' : undefined}>
          <legend>Every week</legend>
          <fieldset class="weekdays" aria-describedby={weekly?.part === 'weekdays' ? 'silence-recurrence-weekdays-error' : undefined}>
            <legend>On</legend>
            <div class="days">
              {WEEKDAYS.map((d) => (
                <label class="check">
                  <input type="checkbox" checked={weekdays.includes(d.value)} onChange={() => toggleDay(d.value)} {...(weekly?.part === 'weekdays' ? { 'aria-invalid': true } : {})} />
                  {d.label}
                </label>
              ))}
            </div>
            {weeklyError('weekdays', 'Weekdays')}
          </fieldset>
          <div class="times">
            <div class="field">
              <label for="silence-start">From</label>
              <input id="silence-start" type="time" value={start} onInput={(e) => setStart(e.currentTarget.value)} {...weeklyInvalid('start')} />
              {weeklyError('start', 'Start')}
            </div>
            <div class="field">
              <label for="silence-end">To</label>
              <input
                id="silence-end"
                type="time"
                value={end}
                onInput={(e) => setEnd(e.currentTarget.value)}
                {...weeklyInvalid('end')}
                aria-describedby={weekly?.part === 'end' ? 'silence-recurrence-end-error silence-end-hint' : 'silence-end-hint'}
              />
              {weeklyError('end', 'End')}
            </div>
          </div>
          <p class="hint" id="silence-end-hint">
            An end before the start crosses midnight: 22:00 to 02:00 ends the next day.
          </p>
          <div class="field">
            <label for="silence-timezone">Time zone</label>
            <select id="silence-timezone" value={timezone} onChange={(e) => setTimezone(e.currentTarget.value)} {...weeklyInvalid('timezone')}>
              {zones.map((z) => (
                <option value={z}>{z}</option>
              ))}
            </select>
            {weeklyError('timezone', 'Time zone')}
          </div>
          {weeklyError('whole', 'Weekly window:')}
        </fieldset>
      )}
      <div class="field">
        <label for="silence-comment">Comment</label>
        <input id="silence-comment" value={comment} placeholder="PHP 8.4 upgrade" onInput={(e) => setComment(e.currentTarget.value)} {...invalid('comment')} />
        {fieldError('comment', 'Comment')}
      </div>
      {error !== null && !(error instanceof ApiError && (Object.keys(details).length > 0 || domainError)) && <ErrorMessage error={error} />}
      {error instanceof ApiError && (Object.keys(details).length > 0 || domainError) && (
        <p class="error" role="alert">
          Please correct the fields marked above.
        </p>
      )}
      <div class="actions">
        <button type="submit">Create silence</button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}

export function Alerting({ location }: { location: Location }) {
  const page = Math.max(1, Number(location.query.get('page')) || 1);
  const expired = location.query.get('silences') === 'expired';
  const rightsRead = useData([], async (): Promise<Rights> => {
    const [read, create, update, remove] = await Promise.all([may('alerts', 'read'), may('alerts', 'create'), may('alerts', 'update'), may('alerts', 'delete')]);
    return { read, create, update, delete: remove };
  });
  const rights = rightsRead.data;
  const domainsRead = useData([], (signal) => allDomains(false, signal));
  const domains = domainsRead.data;
  // Each read waits for the rights: without alerts:read the page asks nothing more.
  const rulesRead = useData([rights?.read], async (signal) => (rights?.read ? api<{ alerts: Rule[] }>('GET', '/api/logs/alerts', undefined, signal) : null));
  const silencesRead = useData(
    [rights?.read, expired],
    async (signal) => (rights?.read ? api<{ silences: Silence[] }>('GET', `/api/logs/silences?state=${expired ? 'expired' : 'active'}`, undefined, signal) : null),
    { keep: true },
  );
  const historyRead = useData([rights?.read, page], async (signal) => (rights?.read ? api<HistoryPage>('GET', `/api/logs/alerts/history?page=${page}&limit=${HISTORY_PAGE}`, undefined, signal) : null), { keep: true });
  const rules = rulesRead.data?.alerts.filter((a) => a.domainId === null) ?? null;
  const conditions = new Map((rulesRead.data?.alerts ?? []).map((a) => [a.id, a.condition]));
  const silences = silencesRead.data?.silences ?? null;
  const history = historyRead.data;
  // The errors of changes, each shown where that part of the page reads its own.
  const [ruleChangeError, setRuleError] = useState<unknown>(null);
  const [silenceChangeError, setSilenceError] = useState<unknown>(null);
  const ruleError = ruleChangeError ?? rulesRead.error;
  const silenceError = silenceChangeError ?? silencesRead.error;
  const error = rightsRead.error ?? domainsRead.error ?? historyRead.error;
  const [form, setForm] = useState<'rule' | 'silence' | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const reload = () => {
    rulesRead.reload();
    silencesRead.reload();
    historyRead.reload();
  };

  const domainNames = new Map((domains ?? []).map((d) => [d.id, d.name]));
  const done = (text: string) => {
    setForm(null);
    setNotice(text);
    reload();
  };
  const endSilence = async (s: Silence) => {
    if (!window.confirm(`End the silence "${s.comment}" now?`)) return;
    try {
      await api('DELETE', `/api/logs/silences/${s.id}`);
      setSilenceError(null);
      setNotice(`Silence “${s.comment}” ended`);
    } catch (err) {
      setSilenceError(err);
    }
    reload();
  };

  if (rights === null) return <main>{error !== null ? <ErrorMessage error={error} /> : <p aria-live="polite">Loading…</p>}</main>;
  if (!rights.read) {
    return (
      <main>
        <h1>Alerting</h1>
        <p class="error" role="alert">
          Alerting is for users who may read alerts.
        </p>
      </main>
    );
  }
  return (
    <main class="alerting">
      <h1>Alerting</h1>
      <p class="hint">Rules over many domains, silences, and the state changes of every domain you see.</p>
      {error !== null && <ErrorMessage error={error} />}
      <p class="notice" aria-live="polite">
        {notice}
      </p>

      <section aria-labelledby="rules-heading">
        <h2 id="rules-heading">Rules</h2>
        {form === 'rule' ? (
          <AlertForm
            label="New rule"
            initial={EMPTY_DRAFT}
            scope={{ initial: { domains: 'all' }, domains }}
            onSave={async (body) => {
              await api('POST', '/api/logs/alerts', body);
              done(`Rule “${body.name.trim()}” created`);
            }}
            onCancel={() => setForm(null)}
          />
        ) : (
          rights.create && (
            <button type="button" onClick={() => setForm('rule')}>
              New rule
            </button>
          )
        )}
        {ruleError !== null && <ErrorMessage error={ruleError} />}
        {rules === null && ruleError === null && <p aria-live="polite">Loading…</p>}
        {rules !== null && <Rules rules={rules} domainNames={domainNames} rights={rights} onChanged={reload} onError={setRuleError} />}
      </section>

      <section aria-labelledby="silences-heading">
        <h2 id="silences-heading">Silences</h2>
        <p class="hint">While a silence holds, alerts are still evaluated and their state shown, but no notification is sent.</p>
        {form === 'silence' ? (
          <SilenceForm domains={domains} onCreated={() => done('Silence created')} onCancel={() => setForm(null)} />
        ) : (
          rights.update && (
            <button type="button" onClick={() => setForm('silence')}>
              New silence
            </button>
          )
        )}
        <div class="tabs" role="group" aria-label="Which silences">
          <button type="button" aria-pressed={!expired} onClick={() => navigate(withQuery(location, { silences: null }))}>
            In force and to come
          </button>
          <button type="button" aria-pressed={expired} onClick={() => navigate(withQuery(location, { silences: 'expired' }))}>
            Expired
          </button>
        </div>
        {silenceError !== null && <ErrorMessage error={silenceError} />}
        {silences === null && silenceError === null && <p aria-live="polite">Loading…</p>}
        {silences !== null && silences.length === 0 && <p class="hint">{expired ? 'No expired silence.' : 'No silence in force or to come.'}</p>}
        {silences !== null && silences.length > 0 && (
          <SilencesTable
            silences={silences}
            caption={expired ? 'Expired, newest first' : 'In force and to come, newest first'}
            domainNames={domainNames}
            onEnd={rights.update && !expired ? endSilence : undefined}
          />
        )}
      </section>

      <section aria-labelledby="history-heading">
        <h2 id="history-heading">History</h2>
        <p class="hint">Every state change on the domains you see, kept 90 days.</p>
        {history === null && error === null && <p aria-live="polite">Loading…</p>}
        {history !== null && <HistoryTable history={history} conditions={conditions} location={location} withDomain />}
      </section>
    </main>
  );
}
