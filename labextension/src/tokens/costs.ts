/**
 * Types of the costs area (`jupyter_starverse.costs`: PriceTable, Estimate, Comparison, Cost,
 * UserTotal, Preview): billing modes, the price table, estimates and comparisons, a job's live meter,
 * a user's totals and the preview shown before a launch. Mirrors server/_cost.py.
 * Money is a decimal string, never a float.
 */

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
