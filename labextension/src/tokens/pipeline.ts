/**
 * Types of the pipelines area (`jupyter_starverse.pipelines`): the `.svpipeline` document (nodes,
 * their params, edges), its check (issues, costs, per-node info), its export and its runs.
 * Mirrors the to_json() of jupyter_starverse/pipelines/.
 */

import { BillingMode, ICostPreview } from './costs';
import { EvalTask } from './evals';
import { JobState } from './jobs';

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
