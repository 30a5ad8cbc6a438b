/**
 * Types of the model export area: an export started from the panel (`GET export/ID`), its result
 * and the figures of each exported graph.
 */

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
