/**
 * A tagged template that turns `sql\`… ${value} …\`` into numbered-parameter SQL (`$1`, `$2`, …)
 * plus a value list, so both Postgres drivers receive bound parameters and never spliced text.
 * Fragments nest: `sql\`select * from t ${where}\`` where `where` is itself a `sql` fragment.
 */
export class SqlFragment {
  constructor(
    readonly strings: readonly string[],
    readonly values: readonly unknown[],
  ) {}
}

export interface SqlQuery {
  text: string;
  values: unknown[];
}

export function sql(strings: TemplateStringsArray, ...values: unknown[]): SqlFragment {
  return new SqlFragment(strings, values);
}

/** Joins fragments with a separator fragment, e.g. `join(conditions, sql\` and \`)`. */
export function join(parts: SqlFragment[], separator: SqlFragment): SqlFragment {
  if (parts.length === 0) return sql``;
  const strings: string[] = [''];
  const values: unknown[] = [];
  parts.forEach((part, i) => {
    if (i > 0) {
      strings.push('');
      values.push(separator);
    }
    values.push(part);
    strings.push('');
  });
  return new SqlFragment(strings, values);
}

export function compile(fragment: SqlFragment): SqlQuery {
  const values: unknown[] = [];
  const walk = (f: SqlFragment): string => {
    let text = f.strings[0] ?? '';
    f.values.forEach((value, i) => {
      if (value instanceof SqlFragment) text += walk(value);
      else {
        values.push(value);
        text += `$${values.length}`;
      }
      text += f.strings[i + 1] ?? '';
    });
    return text;
  };
  return { text: walk(fragment), values };
}

/** A Postgres integer[] from a list of ids, bound as one JSON parameter (any length, one placeholder). */
export const intArray = (ids: readonly number[]): SqlFragment =>
  sql`array(select (jsonb_array_elements_text(${JSON.stringify(ids)}::text::jsonb))::int)`;
