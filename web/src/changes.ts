/**
 * The changes a page makes through the API, and what it tells of them: `act(done, work)` runs
 * `work`, then `reload` (useData's: the page's data as stored, also after a refusal), and only then
 * shows `done` or the error. Nothing on the page changes in between: a render before the data is
 * read again would put a select the user just changed back to the value it showed.
 */
import { useState } from 'preact/hooks';

export function useChanges(reload: () => Promise<unknown>) {
  const [error, setError] = useState<unknown>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const act = async (done: string, work?: () => Promise<unknown>) => {
    let failure: unknown = null;
    try {
      await work?.();
    } catch (err) {
      failure = err;
    }
    failure ??= await reload();
    setError(failure);
    setNotice(failure === null ? done : null);
  };
  return { act, error, notice };
}
