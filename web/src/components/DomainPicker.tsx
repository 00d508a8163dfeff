/**
 * Which domains a rule or a silence covers: all of them (the API's "all", which takes in domains
 * added later), or those ticked in a list that a search narrows. A fieldset whose legend names it,
 * with its error (the API's message for the field) tied to it.
 */
import { useState } from 'preact/hooks';

export interface Domain {
  id: number;
  name: string;
}

interface Props {
  id: string;
  legend: string;
  allLabel: string;
  value: 'all' | number[];
  domains: Domain[] | null;
  onChange: (value: 'all' | number[]) => void;
  error?: string | undefined;
}

const SHOWN = 200;

export function DomainPicker({ id, legend, allLabel, value, domains, onChange, error }: Props) {
  const [find, setFind] = useState('');
  const chosen = new Set(value === 'all' ? [] : value);
  const matching = (domains ?? []).filter((d) => d.name.includes(find.trim().toLowerCase()));
  const toggle = (domainId: number) => {
    const next = new Set(chosen);
    if (next.has(domainId)) next.delete(domainId);
    else next.add(domainId);
    onChange([...next].sort((a, b) => a - b));
  };
  return (
    <fieldset class="domain-picker" aria-describedby={error ? `${id}-error` : undefined}>
      <legend>{legend}</legend>
      <label class="check">
        <input type="radio" name={`${id}-which`} checked={value === 'all'} onChange={() => onChange('all')} />
        {allLabel}
      </label>
      <label class="check">
        <input type="radio" name={`${id}-which`} checked={value !== 'all'} onChange={() => onChange([])} />
        Chosen domains
      </label>
      {value !== 'all' && (
        <div class="choose">
          <label for={`${id}-find`}>Find a domain</label>
          <input id={`${id}-find`} type="search" value={find} onInput={(e) => setFind(e.currentTarget.value)} />
          {domains === null ? (
            <p aria-live="polite">Loading…</p>
          ) : (
            <ul class="pick-list" aria-label={`${legend}: the list`}>
              {matching.slice(0, SHOWN).map((d) => (
                <li>
                  <label class="check">
                    <input type="checkbox" checked={chosen.has(d.id)} onChange={() => toggle(d.id)} />
                    {d.name}
                  </label>
                </li>
              ))}
            </ul>
          )}
          <p class="hint" aria-live="polite">
            {chosen.size} chosen{matching.length > SHOWN ? `; ${matching.length - SHOWN} more match: narrow the search` : ''}
          </p>
        </div>
      )}
      {error && (
        <span class="error" id={`${id}-error`}>
          {legend}: {error.replace(/^domainIds: /, '')}
        </span>
      )}
    </fieldset>
  );
}
