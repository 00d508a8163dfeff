/**
 * A table of entries in its own sideways scroll, each row led by the entry's name (its row header)
 * and ending in one action (remove, withdraw, revoke) whose button names the entry for a screen
 * reader: the shape of the members', invitations', groups' and tokens' tables.
 */
import type { ComponentChildren } from 'preact';
import { Scroll } from './Scroll.js';

export interface Column<T> {
  header: string;
  cell: (entry: T) => ComponentChildren;
  /** The cells' class (`nowrap` for times). */
  class?: string;
}

export interface EntryAction<T> {
  /** The action column's header, read by screen readers only. */
  header: string;
  /** The button's text, and its accessible name for the entry. */
  text: string;
  label: (entry: T) => string;
  onClick: (entry: T) => void;
  /** Entries that offer the action (default all). */
  offered?: (entry: T) => boolean;
}

export function EntryTable<T>({
  label,
  kind,
  caption,
  name,
  columns,
  action,
  entries,
}: {
  /** The scrolling region's name. */
  label: string;
  /** The table's class beside `entries`. */
  kind?: string;
  caption?: ComponentChildren;
  name: Column<T>;
  columns: Column<T>[];
  action: EntryAction<T>;
  entries: T[];
}) {
  return (
    <Scroll label={label}>
      <table class={kind ? `entries ${kind}` : 'entries'}>
        {caption !== undefined && <caption>{caption}</caption>}
        <thead>
          <tr>
            <th scope="col">{name.header}</th>
            {columns.map((column) => (
              <th scope="col">{column.header}</th>
            ))}
            <th scope="col">
              <span class="visually-hidden">{action.header}</span>
            </th>
          </tr>
        </thead>
        <tbody>
          {entries.map((entry) => (
            <tr>
              <th scope="row" class="name">
                {name.cell(entry)}
              </th>
              {columns.map((column) => (
                <td class={column.class}>{column.cell(entry)}</td>
              ))}
              <td>
                {(action.offered?.(entry) ?? true) && (
                  <button type="button" aria-label={action.label(entry)} onClick={() => action.onClick(entry)}>
                    {action.text}
                  </button>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </Scroll>
  );
}
