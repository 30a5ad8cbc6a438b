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
// ---- end jobs ----------------------------------------------------------------------------

// ---- costs (jupyter_starverse.costs: PriceTable, Estimate, Comparison, Cost, UserTotal) ---
// Owned by the costs area; mirrors server/_cost.py. Money is a decimal string, never a float.

/** A billing mode (launch/_spec.py `BILLING_MODES`). */
export type BillingMode = 'on_demand' | 'daily' | 'weekly' | 'spot';

/** Every billing mode, in the order the server compares them. */
export const BILLING_MODES: ReadonlyArray<BillingMode> = ['on_demand', 'daily', 'weekly', 'spot'];

/** `GpuPrice.to_json()`: per card-hour (GPU) or node-hour (CPU); `spot` is `[low, high]`. */
export interface IUnitPrice {
  on_demand: string;
  spot: [string, string] | null;
}

/** `Package.to_json()`: `hours` per card at `discount` off (0.30 = 30% off). */
export interface IPackage {
  name: 'daily' | 'weekly';
  hours: number;
  discount: string;
}

/** `GET cost/prices`: `PriceTable.to_json()`. */
export interface IPriceTable {
  currency: string;
  decimals: number;
  source: string;
  gpus: Record<string, IUnitPrice>;
  cpu_node: IUnitPrice;
  packages: Partial<Record<'daily' | 'weekly', IPackage>>;
}

/** `GET cost/estimate`: `Estimate.to_json()`; `low == high` except for spot. */
export interface IEstimate {
  accelerator: string;
  count: number;
  unit: 'card' | 'node';
  billing: BillingMode;
  seconds: number;
  billed_seconds: number;
  rate_low: string;
  rate_high: string;
  low: string;
  high: string;
  amount: string;
  currency: string;
  packages: number | null;
  note: string;
}

/** `GET cost/compare`: `Comparison.to_json()`. */
export interface IComparison {
  seconds: number;
  currency: string;
  rows: IEstimate[];
  cheapest: { accelerator: string; billing: BillingMode; amount: string };
  skipped: string[];
}

/** `NodeCost.to_json()`. */
export interface INodeCost {
  node: number;
  seconds: number;
  running: boolean;
  packages: number | null;
}

/** `GET cost/jobs/ID`: `Cost.to_json()`, the live meter of one job. */
export interface ICost {
  job_id: string | null;
  user: string | null;
  accelerator: string;
  billing: BillingMode;
  units_per_node: number;
  rate: string;
  currency: string;
  amount: string;
  budget: string | null;
  upper_bound: boolean;
  as_of: number;
  running: boolean;
  unit_seconds: number;
  nodes: INodeCost[];
}

/** `CostRecord.to_json()`: a run's `cost.json`; `reason` is set when the budget cap stopped it. */
export interface ICostRecord extends ICost {
  reason: string | null;
  path: string;
}

/** `GET cost/total`: `UserTotal.to_json()`, one amount per currency. */
export interface IUserTotal {
  user: string;
  amounts: Array<{ currency: string; amount: string }>;
  runs: number;
  running: number;
  records: ICostRecord[];
  unreadable: string[];
}
/** `POST cost/preview` (body `{spec, hours?, duration?}`): `Preview.to_json()`, shown before a launch. */
export interface ICostPreview {
  accelerator: string;
  count: number;
  unit: 'card' | 'node';
  billing: BillingMode;
  currency: string;
  per_hour_low: string;
  per_hour_high: string;
  budget: string | null;
  budget_lasts: number | null;
  minimum: string | null;
  estimate: IEstimate | null;
  warning: string | null;
}
// ---- end costs ---------------------------------------------------------------------------

// ---- store (jupyter_starverse.catalog: EntryStatus, PullProgress, Entry; server/_store.py) --
// Owned by the store area; mirrors EntryStatus.to_json(), PullProgress.to_json(), Entry.to_json().

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
// ---- end store ---------------------------------------------------------------------------

// ---- mode (jupyter_starverse.modes: Mode, ModeStatus, SwitchPlan, SwitchResult) -----------
// Owned by the modes area; mirrors the to_json() of jupyter_starverse/modes/_plan.py.

/** `Mode.to_json()`: `gpu_type` is null and `gpus` 0 in CPU mode. */
export interface IMode {
  kind: 'cpu' | 'gpu';
  gpu_type: string | null;
  gpus: number;
}

/** Where the workspace runs, which decides how a switch is made. */
export type WorkspaceKind = 'local' | 'kubernetes' | 'jupyterhub';

/** `PriceChange.to_json()`: amounts per hour as decimal strings (null when unknown). */
export interface IPriceChange {
  currency: string;
  before_per_hour: string | null;
  after_per_hour: string | null;
  difference_per_hour: string | null;
}

/** `SavedState.to_json()`: a kernel's variables waiting on disk to be restored. */
export interface ISavedState {
  id: string;
  path: string;
  created: number;
  names: string[];
  not_kept: Record<string, string>;
  notes: Record<string, string>;
  from_mode: string;
  to_mode: string;
  kernel_id: string | null;
}

/** `RestoreReport.to_json()`. */
export interface IRestoreReport {
  state_id: string;
  restored: string[];
  failed: Record<string, string>;
  not_kept: Record<string, string>;
  kept_on_disk: string | null;
}

/** `GET mode`: `ModeStatus.to_json()`. */
export interface IModeStatus {
  mode: IMode;
  where: WorkspaceKind;
  currency: string;
  price_per_hour: string | null;
  gpu_types: string[];
  saved: ISavedState[];
  last_restore: IRestoreReport | null;
}

/** `GET mode/plan?kind=`: `SwitchPlan.to_json()`. */
export interface ISwitchPlan {
  current: IMode;
  target: IMode;
  where: WorkspaceKind;
  price: IPriceChange;
  changes: boolean;
  warnings: string[];
}

/** `SwitchOutcome.to_json()`. */
export interface ISwitchOutcome {
  where: WorkspaceKind;
  action: string;
  restarts_workspace: boolean;
}

/** `KernelSwitchReport.to_json()`: one kernel's switch. */
export interface IKernelSwitchReport {
  kernel_id: string;
  saved: ISavedState;
  restore: IRestoreReport | null;
  error: string | null;
}

/** `PUT mode` body. */
export interface ISwitchRequest {
  kind: 'cpu' | 'gpu';
  gpu_type?: string;
  gpus?: number;
  force?: boolean;
}

/** `PUT mode` answer: `SwitchResult.to_json()`. */
export interface ISwitchResult {
  plan: ISwitchPlan;
  mode: IMode;
  price: IPriceChange;
  outcome: ISwitchOutcome | null;
  kernels: IKernelSwitchReport[];
  saved: ISavedState[];
  message: string;
  restart_requested: boolean;
}
// ---- end mode ----------------------------------------------------------------------------

// ---- pipelines (jupyter_starverse.pipelines) ------------------------------------------------
// Owned by the pipelines area; mirrors the to_json() of jupyter_starverse/pipelines/.

/** Node kinds of a `.svpipeline` document: catalog entries and steps. */
export type PipelineNodeKind = 'dataset' | 'model' | 'train' | 'recipe' | 'prep' | 'eval';

/** A train step's parameters (every one optional; the server fills the defaults). */
export interface ITrainParams {
  script?: string;
  args?: string[];
  template?: 'ddp' | 'fsdp' | 'tp' | 'pp';
  nodes?: number;
  gpus_per_node?: number;
  gpu?: string;
  data_parallel?: number;
  tensor_parallel?: number;
  pipeline_parallel?: number;
  steps?: number;
  hours?: number;
  budget?: string;
  billing?: BillingMode;
  backend?: 'local' | 'kubernetes' | 'slurm';
  env?: Record<string, string>;
  experiment?: string;
  /** recipe steps: the recipe's name and its parameters */
  recipe?: string;
  recipe_params?: Record<string, string | number | boolean>;
  /** data preparation steps (run in the workspace): the step and its options */
  step?: 'clean' | 'dedup' | 'score';
  options?: Record<string, unknown>;
  /** a data preparation step as a job of N ranks ("NxP": nodes x processes); unset: one */
  shards?: number | string;
  /** eval steps (`pipelines.EVAL_PARAMS`): the task kind, the fields, the first N examples */
  task?: EvalTask;
  input_field?: string;
  target_field?: string;
  limit?: number;
}

/** `Node.to_json()`: one box of the canvas. */
export interface IPipelineNode {
  id: string;
  kind: PipelineNodeKind;
  /** entries: `ref` as picked; `pinned`, the exact version a bare name was pinned to (what the steps read) */
  params: ITrainParams & { ref?: string; pinned?: string };
  position: { x: number; y: number };
}

/** `Pipeline.to_json()`: the `.svpipeline` file. */
export interface IPipelineDoc {
  version: 1;
  name: string;
  backend: 'local' | 'kubernetes' | 'slurm';
  nodes: IPipelineNode[];
  edges: { source: string; target: string }[];
}

/** `Issue.to_json()`: pinned to a node and a field of its form. */
export interface IPipelineIssue {
  node: string | null;
  field: string | null;
  level: 'error' | 'warning';
  message: string;
  hint: string | null;
}

/** `PipelineCheck.to_json()`: `POST pipelines/validate` and `pipelines/cost`. */
export interface IPipelineCheck {
  name: string;
  ok: boolean;
  issues: IPipelineIssue[];
  costs: { node: string; preview: ICostPreview | null; reason: string | null }[];
  currency: string;
  total_low: string;
  total_high: string;
  total: string;
  unpriced: string[];
  info: Record<
    string,
    {
      cards: number;
      data_parallel: number | null;
      /** the degrees the step runs with (the tp / pp templates derive theirs from the cards) */
      tensor_parallel?: number;
      pipeline_parallel?: number;
      backend: string;
      accelerator: string;
      job_name: string;
      mounts: string[];
      paths: Record<string, string | null>;
      script?: string;
      /** the prep step whose output a mount is (its source stands in until it ran) */
      produced_by?: Record<string, string>;
      /** prep steps: what it reads and about how long it takes here */
      step?: string;
      source?: string;
      seconds?: number | null;
      /** entries: what the steps read (the pin, else the name), the pin, and what the bare name means now */
      ref?: string;
      pinned?: string | null;
      latest?: string | null;
    }
  >;
}

/** `PipelineExport.to_json()`: `POST pipelines/export`. */
export interface IPipelineExport {
  name: string;
  format: 'sbatch' | 'yaml' | 'python';
  files: { name: string; text: string; executable: boolean }[];
  written: string[];
}

/** `StepRun.to_json()`: a step's job and state (a job state, `waiting`, `skipped` or `not_submitted`). */
export interface IStepRun {
  node: string;
  backend: string;
  state: JobState | 'waiting' | 'skipped' | 'not_submitted';
  job_id: string | null;
  reason: string | null;
  experiment_dir: string | null;
}

/** `PipelineRun.to_json()`: `POST pipelines/run`, `GET pipelines/runs/ID`. */
export interface IPipelineRun {
  run_id: string;
  name: string;
  created: number;
  state: 'running' | 'succeeded' | 'failed' | 'stopped' | 'cancelled';
  error: string | null;
  driver: 'running' | 'gone' | null;
  steps: IStepRun[];
}
// ---- end pipelines -------------------------------------------------------------------------

/** One recipe parameter: `Param.to_json()`. */
export interface IRecipeParam {
  name: string;
  default: string | number | boolean;
  kind: 'int' | 'float' | 'str' | 'bool';
  help: string;
  choices: string[];
}

/** A published set-up of a reproduction: `Topology.to_json()`. */
export interface IRecipeTopology {
  nodes: number;
  gpus_per_node: number;
  gpu: string;
  hours: number;
  cards: number;
}

/** `Reproduction.to_json()`. */
export interface IRecipeReproduction {
  model: string;
  stage: string;
  source: string;
  published: IRecipeTopology;
  schedule: Record<string, string | number | number[]>;
  reported: Record<string, number>;
  small: Record<string, string | number>;
  caveat: string;
  /** the store model / dataset a full-size launch uses unless told otherwise */
  model_ref: string;
  data_ref: string;
  /** those of `--small` (built offline into the store on first use) */
  small_model: string;
  small_data: string;
  /** what the stage trains (the rest is frozen) */
  trains: string;
}

/** `GET recipes` items and `GET recipes/NAME`: `RecipeInfo.to_json()`. */
export interface IRecipe {
  name: string;
  title: string;
  objective: 'cpt' | 'sft' | 'dpo' | 'kto' | 'reward' | 'ppo' | 'vlm';
  description: string;
  data_format: string;
  runner: 'starverse' | 'llamafactory' | 'megatron';
  templates: string[];
  params: IRecipeParam[];
  resources: { nodes: number; procs_per_node: number; accelerator: string; hours: number };
  reference_model: boolean;
  reproduction: IRecipeReproduction | null;
  /** The estimate of the default (or published) resources, or why it could not be priced. */
  cost: IEstimate | string;
}

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

/** `FeedbackRecord.to_json()`. */
export interface IFeedbackRecord {
  id: string;
  at: number;
  user: string;
  model: string;
  prompt: string;
  answer: string;
  answer_id: string;
  vote: 'up' | 'down' | null;
  better: string | null;
  comment: string | null;
  session: string | null;
}

/** `GET feedback/table?ref=LOG`: `FeedbackTable.to_json()`. */
export interface IFeedbackTable {
  ref: string;
  records: IFeedbackRecord[];
  total: number;
  pairs: number;
  labels: number;
}

/** One graph's figures in an export report: `GraphFigures.to_json()`. */
export interface IGraphFigures {
  graph: string;
  bytes: number;
  max_abs_logit_diff: number;
  greedy_agreement: number;
  exact_continuations: number;
  perplexity: number;
  perplexity_change: number;
  ms_per_token: number;
  ms_per_token_torch: number;
  failures: string[];
}

/** `ExportResult.to_json()`. */
export interface IExportResult {
  id: string;
  model: string;
  format: string;
  state: 'ok' | 'failed' | 'overridden';
  target: string | null;
  figures: IGraphFigures[];
  failures: string[];
  seconds: number;
}

/** `GET export/ID`: an export started from the panel. */
export interface IExportTask {
  id: string;
  model: string;
  format: string;
  state: 'running' | 'ok' | 'failed' | 'overridden' | 'error';
  phase: string;
  started: number;
  result: IExportResult | null;
  error: string | null;
}

/** `ReportSummary.to_json()`: one line of `GET data/reports`. */
export interface IDataReportSummary {
  id: string;
  step: 'scan' | 'clean' | 'dedup' | 'score';
  source: string;
  output: string | null;
  docs_in: number;
  docs_out: number;
  removed_share: number;
  created_at: number;
}

/** `StepEstimate.to_json()`: what `POST data/estimate` answers before a step runs. */
export interface IStepEstimate {
  step: string;
  source: string;
  bytes: number;
  docs: number;
  seconds: number;
  memory_bytes: number;
  basis: string;
}

/** `StepProgress.to_json()`: how far a running data step is (`docs_total` is estimated until `total_exact`). */
export interface IStepProgress {
  step: string;
  phase: 'starting' | 'estimating' | 'reading' | 'publishing' | 'done';
  docs_done: number;
  docs_total: number | null;
  total_exact: boolean;
  bytes_done: number;
  bytes_total: number | null;
  pass_no: number;
  passes: number;
  elapsed_s: number;
  fraction: number | null;
  eta_s: number | null;
}

/** `StepRun.to_json()`: `POST data/steps` (202) and `GET data/steps/ID`. */
export interface IDataStepRun {
  id: string;
  step: string;
  source: string;
  state: 'running' | 'succeeded' | 'failed' | 'interrupted';
  progress: IStepProgress;
  started_at: number;
  finished_at: number | null;
  report_id: string | null;
  output: string | null;
  error: { error: string; message: string; hint: string | null } | null;
}

/** A masked before/after example of a data report. */
export interface IDataExample {
  where: string;
  before: string;
  after: string;
  note: string;
}

/** A document named in a data report (its snippet is masked). */
export interface IDataDocRef {
  idx: number;
  where: string;
  snippet: string;
}

/** `DataReport.to_json()` (the fields the panel shows). */
export interface IDataReport extends IDataReportSummary {
  params: Record<string, string | number | boolean | null | string[] | Record<string, string>>;
  removed: Record<string, number>;
  malformed_total: number;
  pii: {
    type: string;
    count: number;
    docs: number;
    action: string;
    suggested: string;
    why: string;
    examples: IDataExample[];
  }[];
  /** Largest first: the kept document, `count` removed as its duplicates, a sample of them. */
  clusters: {
    kept: IDataDocRef;
    members: { doc: IDataDocRef; method: string; similarity: number }[];
    count: number;
  }[];
  preview: [number, number][];
  histograms: { name: string; edges: number[]; counts: number[]; threshold: number | null }[];
  elapsed_s: number;
  lines_per_s: number;
}

/** Task kinds of `starverse eval` (`evals.TASKS`). */
export type EvalTask = 'classification' | 'extraction' | 'qa' | 'generation' | 'perplexity';

/** One label's scores of a classification report. */
export interface IEvalLabel {
  label: string;
  precision: number;
  recall: number;
  f1: number;
  support: number;
}

/** `EvalReport.to_json()`: one model's scores on one dataset version (`GET evals`, `GET evals/ID`). */
export interface IEvalReport {
  id: string;
  model: string;
  model_version: string | null;
  dataset: string;
  dataset_version: string | null;
  task: EvalTask;
  examples: number;
  metrics: Record<string, number>;
  per_label: IEvalLabel[];
  predictions: string;
  engine: string;
  seconds: number;
  created_at: number;
  user: string;
  notes: string[];
}

/** `EvalRun.to_json()`: `POST evals` answer (the model first, then its baselines). */
export interface IEvalRun {
  reports: IEvalReport[];
}

/** `POST evals` body. */
export interface IEvalRequest {
  model: string;
  data: string;
  task: EvalTask;
  baselines?: string[];
  input_field?: string;
  target_field?: string;
  limit?: number;
}

/** `EvalErrors.to_json()`: the examples a model got wrong (`GET evals/ID/errors`). */
export interface IEvalErrors {
  model: string;
  dataset: string;
  total: number;
  examples: { idx: number; input: string; expected: string; predicted: string; score: number | null }[];
}
