/**
 * Types of the chat area: a model loaded in a worker process of the server (`ChatSession`) and one
 * streamed answer of it (`ChatTurn`).
 */

/** `ChatSession.to_json()`: a model loaded in a worker process of the server. */
export interface IChatSession {
  id: string;
  model: string;
  alive: boolean;
  started_at: number;
}

/** `ChatTurn.to_json(after)`: one answer; `pieces` arrived after `after`, ask from `next`. */
export interface IChatTurn {
  id: string;
  prompt: string;
  pieces: string[];
  next: number;
  text: string;
  done: boolean;
  error: string | null;
  tokens: number;
  seconds: number;
}
