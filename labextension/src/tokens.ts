/**
 * Interfaces mirroring the JSON of the server extension (REST namespace `jupyter-starverse`).
 * One block per area; each block mirrors the `to_json()` of the Python dataclass it names.
 */

/** Error body of every non-2xx answer (server/_base.py `StarverseHandler.write_error`). */
export interface IErrorReply {
  error: string;
  message: string;
  hint: string | null;
  field: string | null;
}

// ---- info (jupyter_starverse.client.Info) ----------------------------------------------
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

// ---- jobs (jupyter_starverse.server._jobs: JobView, LogTail, TensorBoardInfo) ----------
// Owned by the launch/notebook area; mirrors Job.to_json() + JobProgress.to_json().

/** Life cycle of a job and of each of its nodes (launch/_backend.py `JobState`). */
export type JobState = 'pending' | 'running' | 'succeeded' | 'failed' | 'cancelled';

/** The job states after which nothing changes any more. */
export const FINISHED_STATES: ReadonlyArray<JobState> = ['succeeded', 'failed', 'cancelled'];

/** The part of `JobSpec.to_json()` the panel shows. */
export interface IJobSpec {
  name: string;
  nodes: number;
  procs_per_node: number;
  accelerator: string;
  template: 'ddp' | 'fsdp' | 'tp' | 'pp';
  steps: number | null;
  experiment: string | null;
  billing: string;
  budget: string | null;
}

/** `NodeStatus.to_json()`. */
export interface IJobNode {
  index: number;
  state: JobState;
  name: string;
  pid: number | null;
  exit_code: number | null;
  reason: string | null;
  started: number | null;
  finished: number | null;
}

/** `RankView.to_json()`. */
export interface IRankView {
  rank: number;
  node: number;
  local_rank: number;
  state: JobState;
  last_step: number | null;
  pid: number | null;
  restarts: number;
  error: string | null;
}

/** `JobProgress.to_json()`; `points` is only filled by `GET jobs/ID`. */
export interface IJobProgress {
  job_id: string;
  state: JobState;
  step: number | null;
  total_steps: number | null;
  fraction: number | null;
  metric: string | null;
  value: number | null;
  points: Array<[number, number]>;
  steps_per_s: number | null;
  eta_s: number | null;
  elapsed_s: number;
  cost: string | null;
  currency: string | null;
  cost_text: string | null;
  ranks: IRankView[];
}

/** `GET /jupyter-starverse/jobs` (a list) and `GET jobs/ID`: `JobView.to_json()`. */
export interface IJob {
  id: string;
  backend: 'local' | 'kubernetes';
  name: string;
  spec: IJobSpec;
  state: JobState;
  experiment_dir: string;
  created: number;
  started: number | null;
  finished: number | null;
  reason: string | null;
  nodes: IJobNode[];
  progress: IJobProgress;
}

/** One log line; `rank` is null for agent/pod-level lines. */
export interface ILogLine {
  node: number;
  rank: number | null;
  text: string;
}

/** `GET jobs/ID/logs?tail=N`. */
export interface ILogTail {
  job_id: string;
  lines: ILogLine[];
}

/** `GET jobs/ID/tensorboard`. */
export interface ITensorBoardInfo {
  job_id: string;
  logdir: string;
  has_events: boolean;
  installed: boolean;
  command: string[];
}
// ---- end jobs ----------------------------------------------------------------------------
