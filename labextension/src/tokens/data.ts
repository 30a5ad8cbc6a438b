/**
 * Types of the data preparation area (`GET data/reports`, `POST data/estimate`, `POST data/steps`):
 * report summaries and full reports (PII, duplicate clusters, histograms), a step's estimate,
 * its run and its live progress.
 */

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
