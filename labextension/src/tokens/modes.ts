/**
 * Types of the modes area (`jupyter_starverse.modes`: Mode, ModeStatus, SwitchPlan, SwitchResult):
 * the workspace's CPU/GPU mode, the plan and result of a switch, the kernel state saved across it.
 * Mirrors the to_json() of jupyter_starverse/modes/_plan.py.
 */

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
