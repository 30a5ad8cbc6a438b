/**
 * Types of the store area (`jupyter_starverse.catalog`: EntryStatus, PullProgress, Entry;
 * server/_store.py): cache states, owners, pulls in progress, catalog entries and their mounts.
 * Mirrors EntryStatus.to_json(), PullProgress.to_json(), Entry.to_json().
 */

/** Cache state of an entry on the shared store; `corrupt`: its files changed since publication. */
export type StoreState = 'cached' | 'partial' | 'missing' | 'corrupt';

/** Who owns a record on the shared volume (`jupyter_starverse._volume.Owner`). */
export interface IOwner {
  uid: number;
  name: string;
}

/** Phase of a pull; `waiting` means another process or node moves the bytes. */
export type PullPhase = 'waiting' | 'downloading' | 'verifying' | 'done' | 'failed';

/** `PullProgress.to_json()`: also persisted on the store, so pulls started elsewhere show. */
export interface IPullProgress {
  ref: string;
  phase: PullPhase;
  bytes_done: number;
  bytes_total: number | null;
  files_done: number;
  files_total: number | null;
  rate: number;
  eta_s: number | null;
  owner: boolean;
  updated_at: number;
  error: string | null;
  percent: number;
}

/** `GET store` (a list) and `GET store/entry?ref=`: `EntryStatus.to_json()`. */
export interface IStoreEntry {
  ref: string;
  /** `hf-dataset`: a Hugging Face dataset repo (`hf:datasets/ORG/NAME`), mounted like any dataset. */
  kind: StoreEntryKind;
  name: string;
  version: string;
  source: string;
  description: string | null;
  license: string | null;
  state: StoreState;
  size: number;
  files: number;
  expected_size: number | null;
  last_used: number | null;
  path: string | null;
  commit: string | null;
  pulling: IPullProgress | null;
  /** Who created the entry: only they (or an admin) remove, evict or add versions. */
  owner: IOwner | null;
  /** Why the entry is `corrupt` (the changed files), else null. */
  problem: string | null;
  /** A caveat of the check, e.g. an older manifest checked by size only. */
  note: string | null;
}

/** Kinds of catalog entries. */
export type StoreEntryKind = 'dataset' | 'model' | 'hf-dataset';

/** `POST store` answer: `Entry.to_json()`. */
export interface ICatalogEntry {
  kind: StoreEntryKind;
  name: string;
  version: string;
  source: string;
  ref: string;
  description: string | null;
  license: string | null;
  added_at: number;
}

/** `GET store/mount?ref=`: `MountInfo.to_json()`. */
export interface IMountInfo {
  ref: string;
  path: string;
}
