/**
 * The form of an alert or of a rule over many domains (with `scope`): every condition the API
 * takes with the unit of its threshold, an optional path glob (filters [["glob", "path", [glob]]]),
 * and where notifications go. The API's validation messages are shown at their fields, tied to
 * them (aria-describedby, aria-invalid), and announced.
 */
import { useState } from 'preact/hooks';
import { ApiError } from '../api.js';
import { CONDITIONS, conditionOf, OPERATORS, pathGlobOf, withPathGlob } from '../alerting.js';
import type { Alert, Scope } from '../data/types.js';
import { DomainPicker, type Domain } from './DomainPicker.js';
import { ErrorMessage } from './ErrorMessage.js';

export type Draft = Pick<Alert, 'name' | 'condition' | 'operator' | 'threshold' | 'duration' | 'filters' | 'notificationMethod' | 'notificationTarget' | 'enabled'>;

const METHODS: Record<string, string> = { email: 'E-mail', webhook: 'Webhook (https URL)' };

export const EMPTY_DRAFT: Draft = {
  name: '',
  condition: 'errorRate',
  operator: 'greaterThan',
  threshold: 0.05,
  duration: 300,
  filters: [],
  notificationMethod: 'email',
  notificationTarget: '',
  enabled: true,
};

/** The fields of an alert a form edits (the API takes no others). */
export const draftOf = (a: Alert): Draft => ({
  name: a.name,
  condition: a.condition,
  operator: a.operator,
  threshold: a.threshold,
  duration: a.duration,
  filters: a.filters,
  notificationMethod: a.notificationMethod,
  notificationTarget: a.notificationTarget,
  enabled: a.enabled,
});

interface Props {
  initial: Draft;
  /** A rule's form: the domains it covers, chosen among `domains`. */
  scope?: { initial: Scope; domains: Domain[] | null };
  label: string;
  onSave: (body: Draft & { scope?: Scope }) => Promise<void>;
  onCancel: () => void;
}

export function AlertForm({ initial, scope, label, onSave, onCancel }: Props) {
  const [draft, setDraft] = useState<Draft>(initial);
  const [path, setPath] = useState(pathGlobOf(initial.filters));
  const [covers, setCovers] = useState<'all' | number[]>(scope ? ('domains' in scope.initial ? 'all' : scope.initial.domainIds) : 'all');
  const [error, setError] = useState<unknown>(null);
  const fieldErrors = error instanceof ApiError ? error.details : {};
  const set = <K extends keyof Draft>(key: K, value: Draft[K]) => setDraft({ ...draft, [key]: value });
  const hint = (name: string) => (name === 'threshold' || name === 'filters' ? `alert-${name}-hint` : null);
  const described = (name: string) => {
    const ids = [hint(name), fieldErrors[name] ? `alert-${name}-error` : null].filter(Boolean).join(' ');
    return { ...(ids ? { 'aria-describedby': ids } : {}), ...(fieldErrors[name] ? { 'aria-invalid': true } : {}) };
  };
  const field = (name: string, text: string, input: preact.JSX.Element, hintText?: string) => (
    <div class="field">
      <label for={`alert-${name}`}>{text}</label>
      {input}
      {hintText && (
        <span class="hint" id={`alert-${name}-hint`}>
          {hintText}
        </span>
      )}
      {fieldErrors[name] && (
        <span class="error" id={`alert-${name}-error`}>
          {text} {fieldErrors[name]}
        </span>
      )}
    </div>
  );
  const submit = async (event: Event) => {
    event.preventDefault();
    setError(null);
    const body: Draft & { scope?: Scope } = { ...draft, filters: withPathGlob(draft.filters, path) };
    if (scope) body.scope = covers === 'all' ? { domains: 'all' } : { domainIds: covers };
    try {
      await onSave(body);
    } catch (err) {
      setError(err);
    }
  };
  // requestCount is the specification's name for requests: offered only to an alert that has it.
  const conditions = CONDITIONS.filter((c) => c.value !== 'requestCount' || draft.condition === 'requestCount');
  const scopeError = fieldErrors.scope ?? (error instanceof ApiError && error.status === 404 && scope ? error.message : undefined);
  return (
    <form class="alert-form" onSubmit={submit} noValidate aria-label={label}>
      {field('name', 'Name', <input id="alert-name" value={draft.name} onInput={(e) => set('name', e.currentTarget.value)} {...described('name')} />)}
      {field(
        'condition',
        'Condition',
        <select id="alert-condition" value={draft.condition} onChange={(e) => set('condition', e.currentTarget.value)} {...described('condition')}>
          {conditions.map((c) => (
            <option value={c.value}>{c.label}</option>
          ))}
        </select>,
      )}
      {field(
        'operator',
        'Operator',
        <select id="alert-operator" value={draft.operator} onChange={(e) => set('operator', e.currentTarget.value)} {...described('operator')}>
          {Object.entries(OPERATORS).map(([value, text]) => (
            <option value={value}>{text}</option>
          ))}
        </select>,
      )}
      {field(
        'threshold',
        'Threshold',
        <input id="alert-threshold" type="number" step="any" value={draft.threshold} onInput={(e) => set('threshold', e.currentTarget.valueAsNumber)} {...described('threshold')} />,
        conditionOf(draft.condition)?.hint,
      )}
      {field('duration', 'Window (seconds)', <input id="alert-duration" type="number" value={draft.duration} onInput={(e) => set('duration', e.currentTarget.valueAsNumber)} {...described('duration')} />)}
      {field(
        'filters',
        'Only requests whose path matches',
        <input id="alert-filters" value={path} placeholder="/checkout*" onInput={(e) => setPath(e.currentTarget.value)} {...described('filters')} />,
        'Optional: a glob, * for any run of characters; empty for every request.',
      )}
      {field(
        'notificationMethod',
        'Notify by',
        <select id="alert-notificationMethod" value={draft.notificationMethod} onChange={(e) => set('notificationMethod', e.currentTarget.value)} {...described('notificationMethod')}>
          {Object.entries(METHODS).map(([value, text]) => (
            <option value={value}>{text}</option>
          ))}
        </select>,
      )}
      {field('notificationTarget', 'Send to', <input id="alert-notificationTarget" value={draft.notificationTarget} onInput={(e) => set('notificationTarget', e.currentTarget.value)} {...described('notificationTarget')} />)}
      {scope && (
        <DomainPicker
          id="rule-scope"
          legend="Domains"
          allLabel="Every domain I see, domains added later included"
          value={covers}
          domains={scope.domains}
          onChange={setCovers}
          error={scopeError}
        />
      )}
      <label class="check">
        <input type="checkbox" checked={draft.enabled} onChange={(e) => set('enabled', e.currentTarget.checked)} />
        Enabled
      </label>
      {error !== null && !(error instanceof ApiError && (Object.keys(error.details).length > 0 || scopeError)) && <ErrorMessage error={error} />}
      {error instanceof ApiError && (Object.keys(error.details).length > 0 || scopeError) && (
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
