import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { IErrorReply } from './tokens/info';

/** The REST namespace of the server extension. */
export const NAMESPACE = 'jupyter-starverse';

/** A failed request, with the server's message and hint when it sent them. */
export class StarverseRequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly hint: string | null = null
  ) {
    super(message);
    this.name = 'StarverseRequestError';
  }
}

function isErrorReply(value: unknown): value is IErrorReply {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as IErrorReply).message === 'string'
  );
}

/**
 * Call the server extension. The only function in the frontend that touches
 * ServerConnection; path segments are URL-encoded one by one, never concatenated.
 *
 * @param segments - path below the namespace, e.g. `['store', name, 'pull']`
 * @param init - fetch options (method, body)
 * @param query - query parameters
 */
export async function requestAPI<T>(
  segments: string[],
  init: RequestInit = {},
  query: Record<string, string> = {}
): Promise<T> {
  const settings = ServerConnection.makeSettings();
  const path = URLExt.join(
    settings.baseUrl,
    NAMESPACE,
    ...segments.map(s => encodeURIComponent(s))
  );
  const qs = URLExt.objectToQueryString(query);
  const url = Object.keys(query).length ? path + qs : path;

  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, init, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  const text = await response.text();
  let data: unknown = null;
  if (text.length > 0) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!response.ok) {
    if (isErrorReply(data)) {
      throw new StarverseRequestError(response.status, data.message, data.hint);
    }
    throw new StarverseRequestError(response.status, response.statusText || text);
  }
  return data as T;
}

/** An answer that may be "not modified": `data` is null when the server said 304. */
export interface ICachedReply<T> {
  data: T | null;
  etag: string | null;
}

/**
 * GET with `If-None-Match: etag`: `{data: null}` when nothing changed since that answer
 * (304, no body), else the new data and its validator.
 */
export async function requestIfChanged<T>(
  segments: string[],
  query: Record<string, string>,
  etag: string | null
): Promise<ICachedReply<T>> {
  const settings = ServerConnection.makeSettings();
  const path = URLExt.join(
    settings.baseUrl,
    NAMESPACE,
    ...segments.map(s => encodeURIComponent(s))
  );
  const url = Object.keys(query).length ? path + URLExt.objectToQueryString(query) : path;
  const headers: Record<string, string> = etag ? { 'If-None-Match': etag } : {};
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, { headers }, settings);
  } catch (error) {
    throw new ServerConnection.NetworkError(error as TypeError);
  }
  if (response.status === 304) {
    return { data: null, etag };
  }
  const text = await response.text();
  let data: unknown = null;
  try {
    data = text.length > 0 ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    if (isErrorReply(data)) {
      throw new StarverseRequestError(response.status, data.message, data.hint);
    }
    throw new StarverseRequestError(response.status, response.statusText || text);
  }
  return { data: data as T, etag: response.headers.get('Etag') };
}

/** POST/PUT a JSON body. */
export function sendJSON<T>(
  segments: string[],
  method: 'POST' | 'PUT' | 'DELETE',
  body: object = {}
): Promise<T> {
  return requestAPI<T>(segments, { method, body: JSON.stringify(body) });
}
