import { Clipboard } from '@jupyterlab/apputils';
import { copyIcon, downloadIcon, LabIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { errorText, formatBytes, formatDuration, formatHeadline } from '../format';
import { usePoll } from '../poll';
import { requestAPI, sendJSON } from '../request';
import { IEvalReport } from '../tokens/evals';
import { ICatalogEntry, IMountInfo, IPullProgress, IStoreEntry } from '../tokens/store';

/** `downloading 12.0 MiB / 40.0 MiB · 8.0 MiB/s · ETA 4s`. */
export function formatProgress(p: IPullProgress): string {
  const eta = p.eta_s === null ? '–' : formatDuration(p.eta_s);
  const who = p.owner || p.phase === 'done' ? '' : ' (another process)';
  return (
    `${p.phase}${who} ${formatBytes(p.bytes_done)} / ${formatBytes(p.bytes_total)}` +
    ` · ${formatBytes(p.rate)}/s · ETA ${eta}`
  );
}

/** One pull's bar (HTML progress element, so it is accessible and themable). */
function PullBar(props: { progress: IPullProgress }): JSX.Element {
  const { progress } = props;
  return (
    <div className="jp-Starverse-pull" data-phase={progress.phase}>
      <progress max={100} value={progress.percent} />
      <span>{formatProgress(progress)}</span>
      {progress.error && <div className="jp-Starverse-error">{progress.error}</div>}
    </div>
  );
}

/** A small icon button (as jupyterlab-git's): its title and aria-label say what it does. */
export function IconButton(props: {
  icon: LabIcon;
  label: string;
  disabled?: boolean;
  className?: string;
  onClick: () => void;
}): JSX.Element {
  return (
    <button
      type="button"
      className={`jp-Starverse-iconButton ${props.className ?? ''}`}
      title={props.label}
      aria-label={props.label}
      disabled={props.disabled}
      onClick={props.onClick}
    >
      <props.icon.react tag="span" elementSize="normal" />
    </button>
  );
}

/**
 * A model's card: every evaluation score of it (as `store show MODEL`), one line each:
 * dataset, task and headline metric; the report id and example count in its title.
 */
function ScoreList(props: { reports: IEvalReport[] }): JSX.Element {
  return (
    <details className="jp-Starverse-scores">
      <summary>
        {props.reports.length} score{props.reports.length === 1 ? '' : 's'}
      </summary>
      <ul>
        {props.reports.map(r => {
          const line = `${r.dataset} · ${r.task} · ${formatHeadline(r.task, r.metrics)}`;
          return (
            <li key={r.id} className="jp-Starverse-score" data-report={r.id} title={`${line} · n=${r.examples} · ${r.id}`}>
              {line}
            </li>
          );
        })}
      </ul>
    </details>
  );
}

/**
 * One catalog entry in two lines: the name (ellipsed; its title is the full name), the state
 * and icon buttons (pull, copy the mount path); then size, owner and source, muted.
 */
function EntryRow(props: {
  entry: IStoreEntry;
  progress: IPullProgress | undefined;
  scores: IEvalReport[];
  onPull: (ref: string) => void;
  onCopy: (ref: string) => void;
}): JSX.Element {
  const { entry, progress } = props;
  const running = progress !== undefined && ['waiting', 'downloading', 'verifying'].includes(progress.phase);
  const detail = [formatBytes(entry.size), entry.owner?.name, entry.description ?? entry.source]
    .filter(Boolean)
    .join(' · ');
  return (
    <li className="jp-Starverse-entry" data-ref={entry.ref} data-state={entry.state}>
      <div className="jp-Starverse-entryHead">
        <span className="jp-Starverse-entryRef" title={entry.ref}>
          {entry.ref}
        </span>
        <span className={`jp-Starverse-state jp-Starverse-state-${entry.state}`}>{entry.state}</span>
        {entry.state !== 'cached' && (
          <IconButton
            icon={downloadIcon}
            label={running ? `Pulling ${entry.ref}…` : `Pull ${entry.ref}`}
            disabled={running}
            onClick={() => props.onPull(entry.ref)}
          />
        )}
        {entry.state === 'cached' && (
          <IconButton
            icon={copyIcon}
            label={`Copy the mount path of ${entry.ref}${entry.path ? `: ${entry.path}` : ''}`}
            onClick={() => props.onCopy(entry.ref)}
          />
        )}
      </div>
      <div className="jp-Starverse-entryDetail" title={detail}>
        {detail}
      </div>
      {entry.problem && <div className="jp-Starverse-entryProblem">{entry.problem}</div>}
      {props.scores.length > 0 && <ScoreList reports={props.scores} />}
      {progress !== undefined && <PullBar progress={progress} />}
    </li>
  );
}

/** Register a dataset: a name and a folder or fsspec URL. */
function AddDataset(props: { onAdded: () => void }): JSX.Element {
  const [name, setName] = React.useState('');
  const [source, setSource] = React.useState('');
  const [error, setError] = React.useState<string | null>(null);
  const submit = async (event: React.FormEvent): Promise<void> => {
    event.preventDefault();
    try {
      await sendJSON<ICatalogEntry>(['store'], 'POST', { name, source });
      setName('');
      setSource('');
      setError(null);
      props.onAdded();
    } catch (reason) {
      setError(errorText(reason));
    }
  };
  return (
    <form className="jp-Starverse-addDataset" onSubmit={submit}>
      <input className="jp-mod-styled" placeholder="name" value={name} onChange={e => setName(e.target.value)} />
      <input
        className="jp-mod-styled"
        placeholder="folder or URL (s3://, https://)"
        value={source}
        onChange={e => setSource(e.target.value)}
      />
      <button className="jp-mod-styled" type="submit" disabled={!name || !source}>
        Add
      </button>
      {error && <div className="jp-Starverse-error">{error}</div>}
    </form>
  );
}

/**
 * The Catalog section: every store entry with its state and size; pulls show live
 * progress (also pulls started by notebooks, the CLI or other nodes); cached entries
 * copy their mount path.
 */
export function CatalogSection(): JSX.Element {
  const [entries, setEntries] = React.useState<IStoreEntry[]>([]);
  const [pulls, setPulls] = React.useState<IPullProgress[]>([]);
  const [scores, setScores] = React.useState<IEvalReport[]>([]);
  const [error, setError] = React.useState<string | null>(null);
  const [copied, setCopied] = React.useState<string | null>(null);

  const refresh = async (): Promise<void> => {
    try {
      const [list, active] = await Promise.all([
        requestAPI<IStoreEntry[]>(['store']),
        requestAPI<IPullProgress[]>(['store', 'pulls'])
      ]);
      setEntries(list);
      setPulls(active);
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
      throw reason;
    }
  };
  // The scores under a model's row change when an evaluation ends, not with a pull's
  // progress: every report is read on its own slower poll, not each second.
  const refreshScores = async (): Promise<void> => {
    setScores(await requestAPI<IEvalReport[]>(['evals']));
  };

  usePoll('jupyter-starverse:store', 1000, refresh, { max: 30 * 1000 });
  usePoll('jupyter-starverse:store-scores', 10 * 1000, refreshScores, { max: 60 * 1000 });
  const reload = (): void => {
    refresh().catch(() => undefined); // shown through `error`
  };

  const pull = async (ref: string): Promise<void> => {
    try {
      await sendJSON<IPullProgress>(['store', 'pull'], 'POST', { ref });
      setError(null);
      reload();
    } catch (reason) {
      setError(errorText(reason));
    }
  };

  const copy = async (ref: string): Promise<void> => {
    try {
      const info = await requestAPI<IMountInfo>(['store', 'mount'], {}, { ref });
      Clipboard.copyToSystem(info.path);
      setCopied(info.path);
    } catch (reason) {
      setError(errorText(reason));
    }
  };

  const byRef = new Map<string, IPullProgress>(pulls.map(p => [p.ref, p]));
  return (
    <div className="jp-Starverse-catalog">
      {error && <div className="jp-Starverse-error">{error}</div>}
      {entries.length === 0 && <div className="jp-Starverse-note">The store is empty.</div>}
      <ul className="jp-Starverse-entries">
        {entries.map(entry => (
          <EntryRow
            key={entry.ref}
            entry={entry}
            progress={byRef.get(entry.ref) ?? entry.pulling ?? undefined}
            scores={entry.kind === 'model' ? scores.filter(r => r.model === entry.ref) : []}
            onPull={ref => void pull(ref)}
            onCopy={ref => void copy(ref)}
          />
        ))}
      </ul>
      {copied && <div className="jp-Starverse-note">Copied {copied}</div>}
      <AddDataset onAdded={reload} />
    </div>
  );
}
