import * as React from 'react';

import { errorText, formatBytes, formatCount, formatDuration, formatShare } from '../format';
import { usePoll } from '../poll';
import { requestAPI, sendJSON } from '../request';
import { IDataReport, IDataReportSummary, IDataStepRun, IStepEstimate } from '../tokens/data';
import { IJob } from '../tokens/jobs';

const STEPS = ['scan', 'clean', 'dedup', 'score'] as const;
/** Where a step runs: in this server (empty), or as a job of its own on a backend. */
const BACKENDS = ['local', 'slurm', 'kubernetes'] as const;

/** A running step's bar: documents (of the estimate until a pass has been read), bytes, pass, ETA. */
function StepProgressBar(props: { run: IDataStepRun }): JSX.Element {
  const p = props.run.progress;
  const total = p.docs_total === null ? '' : ` of ${p.total_exact ? '' : '~'}${formatCount(p.docs_total)}`;
  const pass = p.passes > 1 && p.pass_no > 0 ? `pass ${p.pass_no}/${p.passes}: ` : '';
  return (
    <div className="jp-Starverse-dataProgress" data-phase={p.phase}>
      <progress
        style={{ width: '100%' }}
        max={1}
        value={p.fraction ?? undefined}
        aria-label={`${props.run.step} progress`}
      />
      <div className="jp-Starverse-note">
        {p.phase === 'reading'
          ? `${pass}${formatCount(p.docs_done)}${total} documents, ${formatBytes(p.bytes_done)} read` +
            (p.fraction !== null ? `, ${formatShare(p.fraction)}` : '') +
            (p.eta_s !== null ? `, ETA ${formatDuration(p.eta_s)}` : '')
          : `${p.phase}…`}{' '}
        ({formatDuration(p.elapsed_s)})
      </div>
    </div>
  );
}

/** Polls `GET data/steps/ID` while mounted (the parent unmounts it once the run ended). */
function StepPoller(props: { id: string; onUpdate: (run: IDataStepRun) => void }): null {
  usePoll(`jupyter-starverse:data-step:${props.id}`, 1000, async () => {
    props.onUpdate(await requestAPI<IDataStepRun>(['data', 'steps', props.id]));
  });
  return null;
}

/**
 * Run one step on a store dataset (its options are the defaults; the CLI and notebooks take
 * the rest). The server answers at once with a run id; the form polls it and shows a bar.
 * With a backend the step is one job of `shards` ranks there (rank 0 publishes the version):
 * the answer is the job, followed in the Jobs section. Shards without a backend split the
 * step's work over local shard jobs. The server parses `N` / `NxP` (`data.parse_shards`).
 */
function RunStep(props: { onDone: (report: IDataReport) => void }): JSX.Element {
  const [source, setSource] = React.useState('');
  const [step, setStep] = React.useState<string>('scan');
  const [salt, setSalt] = React.useState('');
  const [backend, setBackend] = React.useState('');
  const [shards, setShards] = React.useState('');
  const [job, setJob] = React.useState<IJob | null>(null);
  const [starting, setStarting] = React.useState(false);
  const [run, setRun] = React.useState<IDataStepRun | null>(null);
  const [estimate, setEstimate] = React.useState<IStepEstimate | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const running = starting || run?.state === 'running';
  const submit = async (event: React.FormEvent): Promise<void> => {
    event.preventDefault();
    setStarting(true);
    setEstimate(null);
    setRun(null);
    setJob(null);
    setError(null);
    try {
      // the time and memory it will take, shown while it runs
      setEstimate(await sendJSON<IStepEstimate>(['data', 'estimate'], 'POST', { step, source }));
      const options: Record<string, unknown> = step === 'clean' && salt ? { salt } : {};
      if (shards.trim() && step !== 'score') {
        options.shards = shards.trim();
      }
      if (backend) {
        setJob(await sendJSON<IJob>(['data', 'steps'], 'POST', { step, source, options, backend }));
      } else {
        setRun(await sendJSON<IDataStepRun>(['data', 'steps'], 'POST', { step, source, options }));
      }
    } catch (reason) {
      setError(errorText(reason));
    } finally {
      setStarting(false);
    }
  };
  const update = (next: IDataStepRun): void => {
    setRun(next);
    if (next.state === 'succeeded' && next.report_id) {
      requestAPI<IDataReport>(['data', 'report'], {}, { id: next.report_id })
        .then(props.onDone)
        .catch(reason => setError(errorText(reason)));
    } else if (next.error) {
      setError(`${next.step} ${next.state}: ${next.error.message}` + (next.error.hint ? ` (${next.error.hint})` : ''));
    }
  };
  return (
    <form className="jp-Starverse-dataRun" onSubmit={submit}>
      <input
        className="jp-mod-styled"
        placeholder="dataset, e.g. corpus@1"
        value={source}
        onChange={e => setSource(e.target.value)}
      />
      <select className="jp-mod-styled" value={step} onChange={e => setStep(e.target.value)}>
        {STEPS.map(s => (
          <option key={s} value={s}>
            {s}
          </option>
        ))}
      </select>
      {step === 'clean' && (
        <input
          className="jp-mod-styled"
          placeholder="salt reference, env:NAME"
          value={salt}
          onChange={e => setSalt(e.target.value)}
        />
      )}
      <select
        className="jp-mod-styled"
        aria-label="backend"
        value={backend}
        onChange={e => setBackend(e.target.value)}
        title="where the step runs: here, or as a job on a backend"
      >
        <option value="">here (this server)</option>
        {BACKENDS.map(b => (
          <option key={b} value={b}>
            job on {b}
          </option>
        ))}
      </select>
      <input
        className="jp-mod-styled"
        aria-label="shards"
        placeholder={step === 'score' ? 'one rank' : 'shards: N or NxP'}
        disabled={step === 'score'}
        value={step === 'score' ? '' : shards}
        onChange={e => setShards(e.target.value)}
      />
      <button className="jp-mod-styled" type="submit" disabled={!source || running}>
        {running ? 'Running…' : 'Run'}
      </button>
      {estimate && (
        <div className="jp-Starverse-note jp-Starverse-dataEstimate">
          {running ? 'running: ' : ''}~{formatCount(estimate.docs)} documents ({formatBytes(estimate.bytes)}), ~
          {formatDuration(estimate.seconds)}, peak memory ~{formatBytes(estimate.memory_bytes)}
        </div>
      )}
      {run?.state === 'running' && <StepPoller key={run.id} id={run.id} onUpdate={update} />}
      {run?.state === 'running' && <StepProgressBar run={run} />}
      {job && (
        <div className="jp-Starverse-note jp-Starverse-dataJob" data-job={job.id}>
          submitted as job <b>{job.id}</b> on {job.backend} ({job.spec.nodes}×{job.spec.procs_per_node} ranks); follow
          it in Jobs
        </div>
      )}
      {error && <div className="jp-Starverse-error">{error}</div>}
    </form>
  );
}

/** The near-duplicate preview: how many documents another Jaccard threshold would remove. */
function ThresholdPreview(props: { report: IDataReport }): JSX.Element | null {
  const { preview, params } = props.report;
  const start = typeof params.threshold === 'number' ? params.threshold : preview.length ? preview[0][0] : 0;
  const [value, setValue] = React.useState(start);
  if (!preview.length) {
    return null;
  }
  const nearest = preview.reduce((best, p) => (Math.abs(p[0] - value) < Math.abs(best[0] - value) ? p : best));
  return (
    <div className="jp-Starverse-dataPreview">
      <label>
        Jaccard ≥ <b className="jp-Starverse-dataThreshold">{value.toFixed(2)}</b>
        <input
          type="range"
          min={preview[0][0]}
          max={preview[preview.length - 1][0]}
          step={0.05}
          value={value}
          onChange={e => setValue(parseFloat(e.target.value))}
        />
      </label>
      <span>
        removes <b className="jp-Starverse-dataRemoved">{formatCount(nearest[1])}</b> near duplicates
      </span>
    </div>
  );
}

/** One report: counts, what was removed and why, sensitive types, the first clusters. */
function ReportDetail(props: { report: IDataReport }): JSX.Element {
  const r = props.report;
  return (
    <div className="jp-Starverse-dataReport" data-id={r.id}>
      <div>
        {formatCount(r.docs_in)} in, {formatCount(r.docs_out)} out, removed {formatShare(r.removed_share)}
        {r.malformed_total > 0 && `, ${r.malformed_total} malformed lines`}; took {formatDuration(r.elapsed_s)}
      </div>
      {Object.keys(r.removed).length > 0 && (
        <div className="jp-Starverse-dataRemovedBy">
          {Object.entries(r.removed)
            .map(([why, n]) => `${why} ${formatCount(n)}`)
            .join(', ')}
        </div>
      )}
      {r.pii.length > 0 && (
        <table className="jp-Starverse-dataPii">
          <tbody>
            {r.pii.map(p => (
              <tr key={p.type} data-type={p.type} title={p.examples.length ? p.examples[0].before : ''}>
                <td>{p.type}</td>
                <td>{formatCount(p.count)}</td>
                <td>{p.action}</td>
                <td className="jp-Starverse-dataExample">{p.examples.length ? p.examples[0].after : ''}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <ThresholdPreview key={r.id} report={r} />
      {r.clusters.slice(0, 5).map(c => (
        <details key={c.kept.idx} className="jp-Starverse-dataCluster" data-count={c.count}>
          <summary title={c.kept.snippet}>
            <b>{formatCount(c.count ?? c.members.length)}</b> duplicate(s) of {c.kept.where}
          </summary>
          <ul>
            {c.members.map(m => (
              <li key={m.doc.idx} title={m.doc.snippet}>
                {m.doc.where} ({m.method} {m.similarity.toFixed(2)})
              </li>
            ))}
            {(c.count ?? 0) > c.members.length && <li>and {formatCount(c.count - c.members.length)} more</li>}
          </ul>
        </details>
      ))}
    </div>
  );
}

/**
 * The Data section: every data step's report, newest first (also those run from notebooks or
 * the CLI); pick one to see its counts, sensitive types, clusters and a threshold preview.
 */
export function DataSection(): JSX.Element {
  const [reports, setReports] = React.useState<IDataReportSummary[]>([]);
  const [selected, setSelected] = React.useState<IDataReport | null>(null);
  const [error, setError] = React.useState<string | null>(null);

  const refresh = async (): Promise<void> => {
    try {
      setReports(await requestAPI<IDataReportSummary[]>(['data', 'reports']));
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
      throw reason;
    }
  };
  usePoll('jupyter-starverse:data', 5000, refresh, { max: 60 * 1000 });

  const open = async (id: string): Promise<void> => {
    try {
      setSelected(await requestAPI<IDataReport>(['data', 'report'], {}, { id }));
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
    }
  };

  return (
    <div className="jp-Starverse-data">
      {error && <div className="jp-Starverse-error">{error}</div>}
      <RunStep
        onDone={report => {
          setSelected(report);
          refresh().catch(() => undefined); // shown through `error`
        }}
      />
      {reports.length === 0 && <div className="jp-Starverse-note">No data steps yet.</div>}
      <ul className="jp-Starverse-entries jp-Starverse-dataReports">
        {reports.map(r => (
          <li
            key={r.id}
            className="jp-Starverse-entry jp-Starverse-dataItem"
            data-step={r.step}
            aria-selected={selected?.id === r.id}
            onClick={() => void open(r.id)}
          >
            <span className="jp-Starverse-dataStep">{r.step}</span> {r.source}
            {r.output ? ` → ${r.output}` : ''} · {formatCount(r.docs_in)} docs · removed {formatShare(r.removed_share)}
          </li>
        ))}
      </ul>
      {selected && <ReportDetail report={selected} />}
    </div>
  );
}
