/**
 * Types of the evaluation area (`GET/POST evals`): task kinds, a model's report on one dataset
 * version (metrics, per-label scores), a run with its baselines, its request and the errors it made.
 */

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
