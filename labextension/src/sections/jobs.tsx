import { Dialog, showDialog } from '@jupyterlab/apputils';
import * as React from 'react';

import { errorText, formatCount, logText } from '../format';
import { usePoll, usePolled } from '../poll';
import { openTensorBoard } from '../tensorboard';
import { requestAPI, requestIfChanged, sendJSON } from '../request';
import { FINISHED_STATES, IJob, IJobList, IJobProgress, ILogTail, ITensorBoardInfo, JobState } from '../tokens/jobs';

function isFinished(state: JobState): boolean {
  return FINISHED_STATES.includes(state);
}

/** The last lines of a job's logs, refreshed while shown and the job runs. */
function JobLogs(props: { job: IJob }): JSX.Element {
  const { job } = props;
  const { value: tail, error } = usePolled(
    `jupyter-starverse:logs:${job.id}`,
    isFinished(job.state) ? 60 * 1000 : 2000,
    () => requestAPI<ILogTail>(['jobs', job.id, 'logs'], {}, { tail: '200' })
  );
  if (error !== null) {
    return <div className="jp-Starverse-error">{error}</div>;
  }
  if (tail === null) {
    return <div className="jp-Starverse-loading">Loading logs…</div>;
  }
  return <pre className="jp-Starverse-jobLogs">{logText(tail.lines) || '(no output yet)'}</pre>;
}

/** `x1,y1 x2,y2 ...` of `(step, value)` pairs in a `w` x `h` box over the given ranges. */
function polyline(
  pts: Array<[number, number]>,
  [s0, s1]: [number, number],
  [v0, v1]: [number, number],
  w: number,
  h: number
): string {
  return pts
    .map(([s, v]) => `${(((s - s0) / (s1 - s0 || 1)) * w).toFixed(1)},${(((v1 - v) / (v1 - v0 || 1)) * h).toFixed(1)}`)
    .join(' ');
}

/** The live metric by step (`GET jobs/ID`), with a reproduction's reference curve dashed beside it. */
function JobChart(props: { job: IJob }): JSX.Element {
  const { job } = props;
  const { value: p, error } = usePolled<IJobProgress | null>(
    `jupyter-starverse:chart:${job.id}`,
    isFinished(job.state) ? 60 * 1000 : 2000,
    async () => (await requestAPI<IJob>(['jobs', job.id], {}, { backend: job.backend })).progress
  );
  if (error !== null) {
    return <div className="jp-Starverse-error">{error}</div>;
  }
  if (p === null || p.points.length === 0) {
    return <div className="jp-Starverse-note">{p === null ? 'Loading…' : 'waiting for metrics'}</div>;
  }
  const ref = p.reference ?? [];
  const steps = p.points.map(q => q[0]);
  const values = [...p.points, ...ref].map(q => q[1]);
  const sr: [number, number] = [Math.min(...steps), Math.max(...steps)];
  const vr: [number, number] = [Math.min(...values), Math.max(...values)];
  const w = 200;
  const h = 60;
  return (
    <div className="jp-Starverse-jobChart" title={p.reference_label ?? undefined}>
      <svg viewBox={`0 0 ${w} ${h}`} width="100%" height={h} preserveAspectRatio="none" role="img"
        aria-label={`${p.metric ?? 'loss'} by step`}>
        {ref.length >= 2 && (
          <polyline className="jp-Starverse-chartReference" fill="none" stroke="#ff7f0e" strokeWidth={1.2}
            strokeDasharray="4 3" vectorEffect="non-scaling-stroke" points={polyline(ref, sr, vr, w, h)} />
        )}
        <polyline className="jp-Starverse-chartLive" fill="none" stroke="var(--jp-brand-color1)" strokeWidth={1.5}
          vectorEffect="non-scaling-stroke" points={polyline(p.points, sr, vr, w, h)} />
      </svg>
      <div className="jp-Starverse-entryDetail">
        {p.metric ?? 'loss'} {vr[0].toPrecision(3)}–{vr[1].toPrecision(3)} · steps {sr[0]}–{sr[1]}
        {ref.length >= 2 ? ' · dashed: reference' : ''}
      </div>
    </div>
  );
}

/** Where the job's TensorBoard events are; opens the TensorBoard this server runs for it. */
function TensorBoardLink(props: { job: IJob }): JSX.Element {
  const [info, setInfo] = React.useState<ITensorBoardInfo | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [starting, setStarting] = React.useState(false);
  React.useEffect(() => {
    requestAPI<ITensorBoardInfo>(['jobs', props.job.id, 'tensorboard'])
      .then(setInfo)
      .catch(reason => setError(errorText(reason)));
  }, [props.job.id]);
  const open = async (): Promise<void> => {
    setStarting(true);
    try {
      const started = await sendJSON<ITensorBoardInfo>(['jobs', props.job.id, 'tensorboard'], 'POST');
      setInfo(started);
      setError(null);
      if (started.url) {
        openTensorBoard(started.url, started.board, `TensorBoard: ${props.job.spec.experiment ?? props.job.id}`);
      }
    } catch (reason) {
      setError(errorText(reason));
    } finally {
      setStarting(false);
    }
  };
  const stop = async (): Promise<void> => {
    try {
      setInfo(await sendJSON<ITensorBoardInfo>(['jobs', props.job.id, 'tensorboard'], 'DELETE'));
    } catch (reason) {
      setError(errorText(reason));
    }
  };
  if (info === null) {
    return error !== null ? (
      <div className="jp-Starverse-error">{error}</div>
    ) : (
      <div className="jp-Starverse-loading">…</div>
    );
  }
  const command = info.command.join(' ');
  return (
    <div className="jp-Starverse-tensorboard">
      <div>
        {info.has_events ? 'TensorBoard events in' : 'No TensorBoard events yet in'}{' '}
        <code title={info.logdir}>{info.logdir}</code>
      </div>
      <div>
        <button
          className="jp-Button jp-mod-accept jp-mod-minimal jp-Starverse-tbOpen"
          disabled={starting || !info.installed}
          onClick={() => void open()}
          title={info.installed ? 'Start (or find) TensorBoard for this run and open it' : 'tensorboard is not installed'}
        >
          {starting ? 'Starting TensorBoard…' : info.running ? 'Open TensorBoard' : 'Start TensorBoard'}
        </button>
        {info.running && info.url && (
          <>
            {' '}
            <a className="jp-Starverse-tbUrl" href={info.url} target="_blank" rel="noopener noreferrer"
              title={`${info.runs.length} run(s): ${info.runs.join(', ')}`}>
              {info.runs.length} run(s)
            </a>{' '}
            <button className="jp-Button jp-mod-minimal jp-Starverse-tbStop" onClick={() => void stop()}>
              Stop
            </button>
          </>
        )}
      </div>
      <div>
        <code>{command}</code>{' '}
        <button
          className="jp-Button jp-mod-minimal"
          onClick={() => void navigator.clipboard?.writeText(command)}
          title="Copy the command"
        >
          Copy
        </button>
        {!info.installed && <span> (tensorboard is not installed here: pip install &apos;jupyter_starverse[train]&apos;)</span>}
      </div>
      {error !== null && <div className="jp-Starverse-error">{error}</div>}
    </div>
  );
}

/** One job row: state, progress bar, the server's progress line; actions. */
function JobRow(props: { job: IJob; onChanged: () => void }): JSX.Element {
  const { job, onChanged } = props;
  const [open, setOpen] = React.useState<'logs' | 'tensorboard' | 'chart' | null>(null);
  const [busy, setBusy] = React.useState(false);
  const [error, setError] = React.useState<string | null>(null);
  const p = job.progress;
  const finished = isFinished(job.state);
  // POST jobs/ID/<verb> (cancel, preempt), the row busy meanwhile; the list refreshes after it either way.
  const act = async (verb: 'cancel' | 'preempt'): Promise<void> => {
    setBusy(true);
    try {
      await sendJSON<IJob>(['jobs', job.id, verb], 'POST');
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
    } finally {
      setBusy(false);
      onChanged();
    }
  };
  const cancel = (): Promise<void> => act('cancel');
  // The preemption drill: the backend sends what a provider would; the job checkpoints and resumes.
  const preempt = async (): Promise<void> => {
    const answer = await showDialog({
      title: 'Preemption drill',
      body: `Send ${job.id} what a provider sends on a preemption? Its ranks checkpoint, then it is relaunched and resumes from that checkpoint (the steps since it are redone).`,
      buttons: [Dialog.cancelButton(), Dialog.warnButton({ label: 'Preempt' })]
    });
    if (answer.button.accept) {
      await act('preempt');
    }
  };
  const toggle = (what: 'logs' | 'tensorboard' | 'chart'): void => setOpen(open === what ? null : what);
  // The server's progress line, field by field; the state badge above already says the state.
  const stats = p.line_fields.filter(f => f.key !== 'state');
  // The exact version each mount read (pinned at launch), as `jobs show` and `jobs ls` name it.
  const mounted = (job.spec.mounts ?? []).map(m => job.spec.mount_versions?.[m] ?? m);
  return (
    <li className="jp-Starverse-job" data-job-id={job.id} data-state={job.state}>
      <div className="jp-Starverse-jobHead">
        <span className="jp-Starverse-jobId" title={job.id}>
          {job.id}
        </span>
        <span className={`jp-Starverse-state jp-Starverse-state-${job.state}`}>{job.state}</span>
      </div>
      <div className="jp-Starverse-jobTopology">
        {job.spec.nodes}×{job.spec.procs_per_node} {job.spec.template} on {job.spec.accelerator}
        {' · '}
        {job.nodes.map(n => (
          <span
            key={n.index}
            className={`jp-Starverse-node jp-Starverse-state-${n.state}`}
            title={`node${n.index}: ${n.state}${n.reason ? ` (${n.reason})` : ''}`}
          >
            n{n.index}
          </span>
        ))}
      </div>
      {mounted.length > 0 && (
        <div className="jp-Starverse-jobMounts jp-Starverse-entryDetail" title={`mounts ${mounted.join(', ')}`}>
          mounts {mounted.join(', ')}
        </div>
      )}
      {p.fraction !== null && (
        <progress className="jp-Starverse-jobProgress" max={1} value={p.fraction} />
      )}
      <div className="jp-Starverse-jobStats" title={p.line}>
        {stats.map(f => (
          <span key={f.key} className="jp-Starverse-jobStat" data-field={f.key}>
            {f.text}
          </span>
        ))}
      </div>
      {p.ranks.some(r => r.stats) && (
        <ul className="jp-Starverse-rankStats" aria-label="Each rank's throughput and loss">
          {p.ranks
            .filter(r => r.stats)
            .map(r => (
              <li key={r.rank} data-rank={r.rank}>
                <span className="jp-Starverse-rankName">rank {r.rank}</span> {r.stats}
              </li>
            ))}
        </ul>
      )}
      {job.reason && <div className="jp-Starverse-jobReason">{job.reason}</div>}
      <div className="jp-Starverse-jobActions">
        <button className="jp-Button jp-mod-minimal jp-Starverse-logsButton" onClick={() => toggle('logs')}>
          {open === 'logs' ? 'Hide logs' : 'Logs'}
        </button>
        <button className="jp-Button jp-mod-minimal jp-Starverse-chartButton" onClick={() => toggle('chart')}>
          {open === 'chart' ? 'Hide chart' : 'Chart'}
        </button>
        <button
          className="jp-Button jp-mod-minimal jp-Starverse-tbButton"
          onClick={() => toggle('tensorboard')}
        >
          TensorBoard
        </button>
        {!finished && (
          <button
            className="jp-Button jp-mod-warn jp-mod-minimal jp-Starverse-cancelButton"
            disabled={busy}
            onClick={() => void cancel()}
          >
            {busy ? 'Cancelling…' : 'Cancel'}
          </button>
        )}
        {job.state === 'running' && (
          <button
            className="jp-Button jp-mod-minimal jp-Starverse-preemptButton"
            disabled={busy}
            title="Rehearse a spot preemption: checkpoint, relaunch, resume"
            onClick={() => void preempt()}
          >
            Preempt (drill)
          </button>
        )}
      </div>
      {error !== null && <div className="jp-Starverse-error">{error}</div>}
      {open === 'logs' && <JobLogs job={job} />}
      {open === 'tensorboard' && <TensorBoardLink job={job} />}
      {open === 'chart' && <JobChart job={job} />}
    </li>
  );
}

const PAGE = 20;
const STATE_FILTERS: Array<[string, string]> = [
  ['', 'All states'],
  ['running,pending,preempted,resuming', 'Active'],
  ['succeeded', 'Succeeded'],
  ['failed', 'Failed'],
  ['cancelled', 'Cancelled']
];

/**
 * The Jobs section of the side panel: one page of the job list of every backend, live.
 * Reads `GET /jupyter-starverse/jobs?limit=&offset=&state=` with `If-None-Match`, so a poll
 * that finds nothing changed costs a 304 and no body, however many runs there are.
 */
export function JobsSection(props: { interval?: number }): JSX.Element {
  const [list, setList] = React.useState<IJobList | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const [offset, setOffset] = React.useState(0);
  const [state, setState] = React.useState('');
  const etag = React.useRef<string | null>(null);
  const asked = React.useRef('');
  const load = async (): Promise<void> => {
    const query: Record<string, string> = { limit: String(PAGE), offset: String(offset) };
    if (state) {
      query.state = state;
    }
    const key = JSON.stringify(query);
    try {
      const reply = await requestIfChanged<IJobList>(['jobs'], query, asked.current === key ? etag.current : null);
      asked.current = key;
      etag.current = reply.etag;
      if (reply.data !== null) {
        setList(reply.data);
      }
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
      throw reason;
    }
  };
  usePoll(`jupyter-starverse:jobs:${state}:${offset}`, props.interval ?? 3000, load);
  const reload = (): void => {
    etag.current = null;
    load().catch(() => undefined); // shown through `error`
  };
  if (error !== null && list === null) {
    return (
      <div className="jp-Starverse-error" role="alert">
        Cannot list jobs: {error}
      </div>
    );
  }
  if (list === null) {
    return <div className="jp-Starverse-loading">Loading…</div>;
  }
  const jobs = list.items;
  const last = offset + jobs.length;
  return (
    <div className="jp-Starverse-jobs">
      <div className="jp-Starverse-jobFilters">
        <select
          className="jp-Starverse-stateFilter"
          aria-label="Show jobs in state"
          value={state}
          onChange={e => {
            setState(e.target.value);
            setOffset(0);
          }}
        >
          {STATE_FILTERS.map(([value, label]) => (
            <option key={value} value={value}>
              {label}
            </option>
          ))}
        </select>
        <span className="jp-Starverse-jobCount">
          {list.total === 0 ? 'no jobs' : `${formatCount(offset + 1)}–${formatCount(last)} of ${formatCount(list.total)}`}
        </span>
        <button
          className="jp-Button jp-mod-minimal jp-Starverse-prevPage"
          disabled={offset === 0}
          onClick={() => setOffset(Math.max(0, offset - PAGE))}
        >
          Newer
        </button>
        <button
          className="jp-Button jp-mod-minimal jp-Starverse-nextPage"
          disabled={last >= list.total}
          onClick={() => setOffset(offset + PAGE)}
        >
          Older
        </button>
      </div>
      {error !== null && <div className="jp-Starverse-error">{error}</div>}
      {list.notes.map(n => (
        <div key={n} className="jp-Starverse-note">
          {n}
        </div>
      ))}
      {jobs.length === 0 ? (
        <div className="jp-Starverse-empty">
          {list.total === 0 && !state ? (
            <>
              No jobs yet. Launch one from a notebook with <code>%%sv train</code>.
            </>
          ) : (
            'No jobs match.'
          )}
        </div>
      ) : (
        <ul className="jp-Starverse-jobList">
          {jobs.map(job => (
            <JobRow key={job.id} job={job} onChanged={reload} />
          ))}
        </ul>
      )}
    </div>
  );
}
