import { closeIcon, listIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { errorText, formatDuration, formatHeadline } from '../format';
import { usePolled } from '../poll';
import { requestAPI, sendJSON } from '../request';
import { EvalTask, IEvalErrors, IEvalReport, IEvalRequest, IEvalRun } from '../tokens/evals';
import { IStoreEntry } from '../tokens/store';
import { IconButton } from './catalog';

/** The task kinds the form offers (`evals.TASKS`). */
const TASKS: EvalTask[] = ['classification', 'extraction', 'qa', 'generation', 'perplexity'];

// Layout: style/base.css (.jp-Starverse-eval*): two lines per report, as the catalog's rows:
// model (ellipsed, full name as title), headline metric and an icon button; then dataset · task
// · examples · engine, muted. Errors open below the row, each example wrapped at the panel width.

/** The examples a report got wrong: input, expected, predicted (`GET evals/ID/errors`). */
function ErrorList(props: { errors: IEvalErrors }): JSX.Element {
  const { errors } = props;
  const shown = errors.examples.length;
  return (
    <div className="jp-Starverse-evalErrors">
      <div className="jp-Starverse-note">
        {errors.total} wrong{shown < errors.total ? ` (first ${shown})` : ''}
      </div>
      <ol className="jp-Starverse-evalErrorList">
        {errors.examples.map(e => (
          <li key={e.idx} className="jp-Starverse-evalError" data-idx={e.idx}>
            <div className="jp-Starverse-evalInput" title={e.input}>
              #{e.idx} {e.input}
            </div>
            <div>
              expected <code>{e.expected}</code> · predicted <code>{e.predicted}</code>
            </div>
          </li>
        ))}
      </ol>
    </div>
  );
}

/** One report in two lines; its errors load when asked for. */
function ReportRow(props: { report: IEvalReport }): JSX.Element {
  const { report } = props;
  const [errors, setErrors] = React.useState<IEvalErrors | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const toggle = async (): Promise<void> => {
    if (errors !== null) {
      setErrors(null);
      return;
    }
    try {
      setErrors(await requestAPI<IEvalErrors>(['evals', report.id, 'errors']));
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
    }
  };
  const headline = formatHeadline(report.task, report.metrics);
  const detail = [
    report.dataset,
    report.task,
    `n=${report.examples}`,
    report.engine,
    formatDuration(report.seconds)
  ]
    .filter(Boolean)
    .join(' · ');
  return (
    <li className="jp-Starverse-evalReport" data-report={report.id} data-model={report.model}>
      <div className="jp-Starverse-entryHead">
        <span className="jp-Starverse-entryRef" title={`${report.model} (report ${report.id})`}>
          {report.model}
        </span>
        <span className="jp-Starverse-evalMetric" title={headline}>
          {headline}
        </span>
        <IconButton
          icon={errors === null ? listIcon : closeIcon}
          label={errors === null ? `Show the examples ${report.model} got wrong` : 'Hide the errors'}
          onClick={() => void toggle()}
        />
      </div>
      <div className="jp-Starverse-entryDetail" title={detail}>
        {detail}
      </div>
      {error && <div className="jp-Starverse-error">{error}</div>}
      {errors !== null && <ErrorList errors={errors} />}
    </li>
  );
}

/** Start an evaluation: a model of the store, a dataset, a task (`POST evals`). */
function StartEval(props: { models: string[]; onDone: (run: IEvalRun) => void }): JSX.Element {
  const [model, setModel] = React.useState('');
  const [data, setData] = React.useState('');
  const [task, setTask] = React.useState<EvalTask>('classification');
  const [busy, setBusy] = React.useState(false);
  const [error, setError] = React.useState<string | null>(null);
  const chosen = model || props.models[0] || '';
  const submit = async (event: React.FormEvent): Promise<void> => {
    event.preventDefault();
    setBusy(true);
    try {
      const body: IEvalRequest = { model: chosen, data: data.trim(), task };
      props.onDone(await sendJSON<IEvalRun>(['evals'], 'POST', body));
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
    } finally {
      setBusy(false);
    }
  };
  return (
    <form className="jp-Starverse-evalForm" onSubmit={submit}>
      <input
        className="jp-mod-styled"
        list="jp-Starverse-evalModels"
        placeholder="model (store name, hf:ORG/REPO, run folder)"
        aria-label="model"
        value={chosen}
        onChange={e => setModel(e.target.value)}
      />
      <datalist id="jp-Starverse-evalModels">
        {props.models.map(m => (
          <option key={m} value={m} />
        ))}
      </datalist>
      <input
        className="jp-mod-styled"
        placeholder="dataset[@version]"
        aria-label="dataset"
        value={data}
        onChange={e => setData(e.target.value)}
      />
      <select
        className="jp-mod-styled"
        aria-label="task"
        value={task}
        onChange={e => setTask(e.target.value as EvalTask)}
      >
        {TASKS.map(t => (
          <option key={t} value={t}>
            {t}
          </option>
        ))}
      </select>
      <button className="jp-mod-styled" type="submit" disabled={busy || !chosen || !data.trim()}>
        {busy ? 'Evaluating…' : 'Evaluate'}
      </button>
      {error && <div className="jp-Starverse-error">{error}</div>}
    </form>
  );
}

/**
 * The Evaluation section: every report on the store (newest first) with its headline metric,
 * the examples each got wrong, and a form that scores a store model on a dataset.
 */
export function EvalsSection(): JSX.Element {
  const [last, setLast] = React.useState<string | null>(null);
  const polled = usePolled(
    'jupyter-starverse:evals',
    5000,
    async () => {
      const [list, store] = await Promise.all([
        requestAPI<IEvalReport[]>(['evals']),
        requestAPI<IStoreEntry[]>(['store'])
      ]);
      return { reports: [...list].reverse(), models: store.filter(e => e.kind === 'model').map(e => e.ref) };
    },
    { max: 60 * 1000 }
  );
  const { reports, models } = polled.value ?? { reports: [], models: [] };
  const { error, refresh } = polled;

  const done = (run: IEvalRun): void => {
    setLast(run.reports.map(r => `${r.model}: ${formatHeadline(r.task, r.metrics)}`).join(' · '));
    void refresh(); // a failure is shown through `error`
  };

  return (
    <div className="jp-Starverse-evals">
      {error && <div className="jp-Starverse-error">{error}</div>}
      {reports.length === 0 && (
        <div className="jp-Starverse-note">No evaluation yet: score a model on a labelled dataset below.</div>
      )}
      <ul className="jp-Starverse-entries">
        {reports.map(r => (
          <ReportRow key={r.id} report={r} />
        ))}
      </ul>
      {last && <div className="jp-Starverse-note jp-Starverse-evalLast">{last}</div>}
      <StartEval models={models} onDone={done} />
    </div>
  );
}
