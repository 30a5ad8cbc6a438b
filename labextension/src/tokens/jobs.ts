/**
 * Types of the jobs area (`jupyter_starverse.server._jobs`: JobView, LogTail, TensorBoardInfo):
 * job states, a job's spec, nodes, ranks and progress line, the job list, log tails and the
 * TensorBoard of a job. Owned by the launch/notebook area; mirrors Job.to_json() + JobProgress.to_json().
 */

/** Life cycle of a job and of each of its nodes (launch/_backend.py `JobState`). */
export type JobState =
  | 'pending'
  | 'running'
  | 'preempted'
  | 'resuming'
  | 'succeeded'
  | 'failed'
  | 'cancelled';

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
  /** catalog entries the ranks read, as the user named them */
  mounts?: string[];
  /** the exact `NAME@VERSION` each mount resolved to at launch (what the job read) */
  mount_versions?: Record<string, string>;
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
  /** This rank's own speed, loss, tokens/s and TFLOPS as it last logged them (null: not logged). */
  steps_per_s: number | null;
  metric: string | null;
  value: number | null;
  tokens_per_s: number | null;
  tflops: number | null;
  /** The same, as the server writes it (`2.00 steps/s  loss 1.9  1.2 TFLOPS`); empty when none. */
  stats: string;
}

/** Which part of a job's progress line a field is, in the order they appear. */
export type JobLineKey =
  | 'state'
  | 'step'
  | 'metric'
  | 'speed'
  | 'tokens'
  | 'tflops'
  | 'eta'
  | 'elapsed'
  | 'cost'
  | 'restarts';

/** One field of `JobProgress.line`, e.g. `{ key: 'step', text: 'step 40/100 (40%)' }`. */
export interface IJobLineField {
  key: JobLineKey;
  text: string;
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
  /** `GET jobs/ID` only: a reproduction's reference curve at the same steps (empty when it has none). */
  reference?: Array<[number, number]>;
  /** What the reference is (its kind and source), or null. */
  reference_label?: string | null;
  steps_per_s: number | null;
  eta_s: number | null;
  elapsed_s: number;
  cost: string | null;
  currency: string | null;
  cost_text: string | null;
  ranks: IRankView[];
  /**
   * The server's one-line summary of the job (`JobProgress.line()`), e.g.
   * `running  step 40/100 (40%)  loss 1.23  4.10 steps/s  ETA 15s  elapsed 10s  cost 0.01 USD`.
   * The frontend shows it as sent and never rebuilds it from the fields above.
   */
  line: string;
  /** `line` split into its fields, in order (fields without a value are left out). */
  line_fields: IJobLineField[];
}

/** A row of `GET /jupyter-starverse/jobs` (`IJobList.items`) and `GET jobs/ID`: `JobView.to_json()`. */
export interface IJob {
  id: string;
  backend: 'local' | 'kubernetes' | 'slurm';
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

/** `GET /jupyter-starverse/jobs?state=&backend=&offset=&limit=`: one page of the job list. */
export interface IJobList {
  items: IJob[];
  /** Jobs that matched the filters (all pages). */
  total: number;
  offset: number;
  limit: number | null;
  /** The server's clock when it answered (pass back as `since` to get what changed). */
  now: number;
  notes: string[];
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
  /** The board of the job's experiment, a path under the server's base_url (its authenticated
   * proxy, so it works from another host); null until POST starts it. */
  url: string | null;
  /** Its loopback port on the server (never opened by the browser). */
  port: number | null;
  proxied: boolean;
  running: boolean;
  /** The board's id: one per experiment, over all of its runs. */
  board: string;
  /** The runs the board shows (TensorBoard's run names). */
  runs: string[];
}
