/**
 * Types of the server's own answers: the error body every failing REST call returns, and
 * `GET info` (`jupyter_starverse.client.Info`): version, store, backend, mode, currency, user.
 */

/** Error body of every non-2xx answer (server/_base.py `StarverseHandler.write_error`). */
export interface IErrorReply {
  error: string;
  message: string;
  hint: string | null;
  field: string | null;
}

/** `GET info`: `Info.to_json()` (jupyter_starverse.client). */
export interface IInfo {
  version: string;
  store: string;
  experiments: string;
  backend: 'local' | 'kubernetes';
  mode: 'cpu' | 'gpu';
  gpu_type: string | null;
  currency: string;
  user: string;
}
