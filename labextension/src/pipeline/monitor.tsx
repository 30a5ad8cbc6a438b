/** A step's job opened from the canvas: its progress line and its logs, live while it runs. */
import { ReactWidget } from '@jupyterlab/apputils';
import * as React from 'react';

import { errorText, logText } from '../format';
import { usePoll } from '../poll';
import { requestAPI } from '../request';
import { FINISHED_STATES, IJob, ILogTail } from '../tokens/jobs';

function JobMonitor(props: { jobId: string; backend: string }): JSX.Element {
  const [job, setJob] = React.useState<IJob | null>(null);
  const [tail, setTail] = React.useState<ILogTail | null>(null);
  const [error, setError] = React.useState<string | null>(null);
  const query = { backend: props.backend };
  const load = async (): Promise<void> => {
    try {
      const [j, t] = await Promise.all([
        requestAPI<IJob>(['jobs', props.jobId], {}, query),
        requestAPI<ILogTail>(['jobs', props.jobId, 'logs'], {}, { ...query, tail: '300' })
      ]);
      setJob(j);
      setTail(t);
      setError(null);
    } catch (reason) {
      setError(errorText(reason));
      throw reason;
    }
  };
  const done = job !== null && FINISHED_STATES.includes(job.state);
  usePoll(`jupyter-starverse:pipeline-job:${props.jobId}`, done ? 60 * 1000 : 1500, load);
  const text = logText(tail?.lines ?? []);
  return (
    <div className="jp-SvPipeline-monitor" data-job-id={props.jobId}>
      <div className="jp-SvPipeline-monitorHead">
        <b>{job?.name ?? props.jobId}</b>{' '}
        <span className={`jp-SvPipeline-run jp-mod-${job?.state ?? 'pending'}`}>{job?.state ?? '…'}</span>
        {job?.reason && <span className="jp-SvPipeline-reason"> {job.reason}</span>}
      </div>
      {job && <div className="jp-SvPipeline-monitorLine">{job.progress.line}</div>}
      {error !== null && <div className="jp-Starverse-error">{error}</div>}
      <pre className="jp-SvPipeline-logs">{text || '(no output yet)'}</pre>
    </div>
  );
}

/** The monitor of one job as a main-area widget. */
export class JobMonitorWidget extends ReactWidget {
  constructor(
    readonly jobId: string,
    readonly backend: string
  ) {
    super();
    this.id = `jp-SvPipeline-job-${jobId}`;
    this.title.label = jobId;
    this.title.closable = true;
    this.addClass('jp-SvPipeline-monitorWidget');
  }

  protected render(): JSX.Element {
    return <JobMonitor jobId={this.jobId} backend={this.backend} />;
  }
}
