import { Poll } from '@lumino/polling';
import * as React from 'react';

import { errorText } from './format';

/** Options of `usePoll`. */
export interface IUsePollOptions {
  /** Longest wait between tries while `fn` keeps failing, in ms (default 60 s). */
  max?: number;
}

/**
 * Call `fn` every `interval` ms while the component is mounted (the first call at once):
 * backoff while it rejects, up to `max`; standby while the page is hidden. The latest `fn`
 * is always the one called; the poll is recreated when `name`, `interval` or `max` change.
 * To refresh on demand, call `fn` itself.
 */
export function usePoll(
  name: string,
  interval: number,
  fn: () => Promise<void>,
  options: IUsePollOptions = {}
): void {
  const max = options.max ?? 60 * 1000;
  const latest = React.useRef(fn);
  latest.current = fn;
  React.useEffect(() => {
    const poll = new Poll({
      auto: true,
      factory: () => latest.current(),
      frequency: { interval, backoff: true, max },
      name,
      standby: 'when-hidden'
    });
    return () => poll.dispose();
  }, [name, interval, max]);
}

/** What `usePolled` keeps: the latest value, the latest failure's text, and a refresh on demand. */
export interface IPolled<T> {
  /** The last value `fetch` resolved to (`null` until the first one). */
  value: T | null;
  /** The last failure as the user should read it (`errorText`), `null` after a success. */
  error: string | null;
  /** Fetch now (its failure is shown through `error`). */
  refresh: () => Promise<void>;
}

/**
 * `usePoll` of a fetch whose value a component shows: keeps the last value, and the last
 * failure's text until the next success; a failure still backs the poll off.
 */
export function usePolled<T>(
  name: string,
  interval: number,
  fetch: () => Promise<T>,
  options: IUsePollOptions = {}
): IPolled<T> {
  const [value, setValue] = React.useState<T | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const load = async (): Promise<void> => {
    try {
      setValue(await fetch());
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
      throw reason;
    }
  };
  usePoll(name, interval, load, options);
  return { value, error, refresh: () => load().catch(() => undefined) };
}
