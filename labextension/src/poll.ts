import { Poll } from '@lumino/polling';
import * as React from 'react';

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
