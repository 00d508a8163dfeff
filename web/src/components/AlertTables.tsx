/** The alerts pages' tables: the history of state changes, and silences. */
import { conditionValue, silenceWhen } from '../alerting.js';
import type { HistoryPage, Silence } from '../data/types.js';
import { counted, utcCell } from '../format.js';
import { linkClick, type Location } from '../router.js';
import { Pager } from './Pager.js';
import { Scroll } from './Scroll.js';

const DomainLink = ({ id, name }: { id: number; name: string }) => (
  <a href={`/domains/${id}/alerts`} onClick={(e) => linkClick(e, `/domains/${id}/alerts`)}>
    {name}
  </a>
);

/** A page of state changes, newest first; `withDomain` adds the domain's column (across domains). */
export function HistoryTable({ history, conditions, location, withDomain }: { history: HistoryPage; conditions: Map<number, string>; location: Location; withDomain: boolean }) {
  const { entries, pagination } = history;
  if (pagination.total === 0) return <p class="hint">No state change in the last 90 days.</p>;
  return (
    <>
      <Scroll label="History">
        <table class="history">
          <caption>{counted(pagination.total, 'state change')}, newest first</caption>
          <thead>
            <tr>
              <th scope="col">Time (UTC)</th>
              {withDomain && <th scope="col">Domain</th>}
              <th scope="col">Alert</th>
              <th scope="col">Change</th>
              <th scope="col" class="number">
                Value
              </th>
              <th scope="col">Notification</th>
            </tr>
          </thead>
          <tbody>
            {entries.map((e) => (
              <tr>
                <td class="nowrap">{e.at.replace('T', ' ').slice(0, 19)}</td>
                {withDomain && (
                  <td class="name">
                    <DomainLink id={e.domainId} name={e.domain} />
                  </td>
                )}
                <th scope="row" class="name">
                  {e.alertName}
                </th>
                <td class="nowrap">
                  <span class={`state ${e.from}`}>{e.from}</span> → <span class={`state ${e.to}`}>{e.to}</span>
                </td>
                <td class="number">{conditionValue(conditions.get(e.alertId), e.value)}</td>
                <td>{e.silencedBy !== null ? `held by silence #${e.silencedBy}` : e.notified ? 'sent' : 'none'}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </Scroll>
      <Pager page={pagination.page} pages={pagination.pages} location={location} />
    </>
  );
}

/** Silences; `onEnd` offers to end those not over yet. */
export function SilencesTable({
  silences,
  caption,
  domainNames,
  describe,
  onEnd,
}: {
  silences: Silence[];
  caption: string;
  domainNames: Map<number, string>;
  /** The domains of a silence in words (default: their names). */
  describe?: (ids: number[]) => string;
  onEnd?: ((s: Silence) => void) | undefined;
}) {
  const domains = (s: Silence) => {
    if (s.domainIds === 'all') return 'All domains';
    if (describe) return describe(s.domainIds);
    const names = s.domainIds.map((id) => domainNames.get(id) ?? `#${id}`);
    return names.length <= 5 ? names.join(', ') : `${names.slice(0, 5).join(', ')} and ${names.length - 5} more`;
  };
  return (
    <Scroll label={caption}>
      <table class="silences">
        <caption>{caption}</caption>
        <thead>
          <tr>
            <th scope="col">Comment</th>
            <th scope="col">Domains</th>
            <th scope="col">When (UTC)</th>
            <th scope="col">State</th>
            {onEnd && <th scope="col">Actions</th>}
          </tr>
        </thead>
        <tbody>
          {silences.map((s) => (
            <tr>
              <th scope="row" class="name">
                {s.comment}
                {s.alertIds && <span class="hint"> (alerts {s.alertIds.map((id) => `#${id}`).join(', ')} only)</span>}
              </th>
              <td class="name">{domains(s)}</td>
              <td>{silenceWhen(s, utcCell)}</td>
              <td class="nowrap">{s.endedAt ? 'ended' : s.state === 'active' ? 'in force' : s.state === 'pending' ? 'to come' : 'expired'}</td>
              {onEnd && (
                <td>
                  {s.state !== 'expired' && (
                    <button type="button" onClick={() => onEnd(s)}>
                      End<span class="visually-hidden"> the silence “{s.comment}”</span>
                    </button>
                  )}
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
    </Scroll>
  );
}
