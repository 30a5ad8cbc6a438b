import { Dialog, Notification, showDialog, showErrorMessage } from '@jupyterlab/apputils';
import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { formatMoney } from './format';
import { StarverseModel } from './model';
import { requestAPI, sendJSON } from './request';
import { IInfo } from './tokens/info';
import { IModeStatus, ISwitchPlan, ISwitchRequest, ISwitchResult } from './tokens/modes';

/** Text of the status bar item for a given info. */
export function modeLabel(info: IInfo | null): string {
  if (info === null) {
    return 'Starverse: …';
  }
  return info.mode === 'gpu'
    ? `GPU · ${info.gpu_type ?? 'unknown'}`
    : 'CPU (no-GPU mode)';
}

/** " · 2 × · 13.0 CNY/h" after the label, once the price of the shown mode is known. */
export function modePrice(info: IInfo | null, status: IModeStatus | null): string {
  if (info === null || status === null || status.mode.kind !== info.mode) {
    return '';
  }
  if (status.price_per_hour === null) {
    return '';
  }
  const cards = status.mode.kind === 'gpu' && status.mode.gpus > 1 ? ` · ${status.mode.gpus} cards` : '';
  return `${cards} · ${formatMoney(status.price_per_hour, status.currency)}/h`;
}

/** "+6.4 CNY/h" / "−6.4 CNY/h" for a plan, or a note that the price is unknown. */
export function priceDifference(plan: ISwitchPlan): string {
  const diff = plan.price.difference_per_hour;
  if (diff === null) {
    return 'price difference unknown';
  }
  const negative = diff.startsWith('-');
  const amount = negative ? diff.slice(1) : diff;
  return `${negative ? '−' : '+'}${formatMoney(amount, plan.price.currency)}/h`;
}

function modeName(kind: 'cpu' | 'gpu', gpuType: string | null, gpus: number): string {
  return kind === 'gpu' ? `GPU (${gpus} × ${gpuType ?? '?'})` : 'CPU';
}

/** Body of the confirmation dialog: from → to, prices, what happens to notebooks and jobs. */
export function SwitchSummary(props: { plan: ISwitchPlan }): JSX.Element {
  const { plan } = props;
  const { current, target, price } = plan;
  const restarts =
    plan.where === 'local'
      ? 'Running kernels are restarted; their variables are saved first and restored after.'
      : 'The workspace restarts on the other node pool; variables are saved to disk and come back with `%sv mode restore`.';
  return (
    <div className="jp-Starverse-switchSummary">
      <p>
        {modeName(current.kind, current.gpu_type, current.gpus)} →{' '}
        <strong>{modeName(target.kind, target.gpu_type, target.gpus)}</strong>
      </p>
      <p>
        {price.before_per_hour ?? '?'} → {price.after_per_hour ?? '?'} {price.currency}/h (
        <strong className="jp-Starverse-priceDifference">{priceDifference(plan)}</strong>)
      </p>
      <p>{restarts}</p>
      <p>Running jobs are not affected.</p>
      {plan.warnings.map(w => (
        <p key={w} className="jp-Starverse-warning">
          {w}
        </p>
      ))}
    </div>
  );
}

/** One line for the notification after a switch: what came back, what could not be kept. */
export function switchSummaryText(result: ISwitchResult): string {
  const parts = [`Now in ${modeName(result.mode.kind, result.mode.gpu_type, result.mode.gpus)}.`];
  for (const kernel of result.kernels) {
    if (kernel.error) {
      parts.push(`Kernel ${kernel.kernel_id.slice(0, 8)}: ${kernel.error}`);
      continue;
    }
    const lost = Object.entries(kernel.saved.not_kept).map(([name, why]) => `${name} (${why})`);
    parts.push(
      `Kernel ${kernel.kernel_id.slice(0, 8)}: restored ${kernel.restore?.restored.length ?? 0} variable(s)` +
        (lost.length ? `; not kept: ${lost.join(', ')}` : '')
    );
  }
  if (result.message) {
    parts.push(result.message);
  }
  return parts.join(' ');
}

/**
 * Ask for confirmation with the price difference, then switch. Resolves to the result,
 * or null when the user cancelled.
 */
export async function switchModeWithDialog(
  model: StarverseModel,
  onDetails: () => void = () => undefined
): Promise<ISwitchResult | null> {
  const current = model.info?.mode ?? 'cpu';
  const kind: 'cpu' | 'gpu' = current === 'gpu' ? 'cpu' : 'gpu';
  let plan: ISwitchPlan;
  try {
    plan = await requestAPI<ISwitchPlan>(['mode', 'plan'], {}, { kind });
  } catch (reason) {
    await showErrorMessage('Cannot switch the mode', reason as Error);
    return null;
  }
  const details = Dialog.createButton({ label: 'Open panel', displayType: 'default' });
  const answer = await showDialog({
    title: `Switch to ${kind === 'gpu' ? 'GPU' : 'CPU'} mode?`,
    body: <SwitchSummary plan={plan} />,
    buttons: [
      Dialog.cancelButton(),
      details,
      Dialog.okButton({ label: `Switch (${priceDifference(plan)})` })
    ]
  });
  if (answer.button.label === details.label) {
    onDetails();
    return null;
  }
  if (!answer.button.accept) {
    return null;
  }
  const request: ISwitchRequest = { kind };
  if (plan.target.gpu_type) {
    request.gpu_type = plan.target.gpu_type;
    request.gpus = plan.target.gpus;
  }
  try {
    const result = await sendJSON<ISwitchResult>(['mode'], 'PUT', request);
    Notification.success(switchSummaryText(result), { autoClose: 10000 });
    return result;
  } catch (reason) {
    await showErrorMessage('The mode was not switched', reason as Error);
    return null;
  } finally {
    void model.refresh().catch(() => undefined);
  }
}

/**
 * Status bar item showing the workspace mode, GPU type and price per hour. A click asks
 * for confirmation (showing the price difference) and switches; `onClick` opens details.
 */
export class ModeStatus extends ReactWidget {
  constructor(
    private readonly model: StarverseModel,
    private readonly onClick: () => void
  ) {
    super();
    this.addClass('jp-Starverse-modeStatus');
    this.model.changed.connect(this._onModelChanged, this);
  }

  /** The last `GET mode` answer (price per hour of the current mode). */
  get status(): IModeStatus | null {
    return this._status;
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <span
            className="jp-Starverse-modeItem"
            title="Workspace mode (Starverse). Click to switch between GPU and CPU."
            onClick={() => void this._switch()}
          >
            <span className="jp-Starverse-modeLabel" data-mode={this.model.info?.mode ?? ''}>
              {modeLabel(this.model.info)}
            </span>
            <span className="jp-Starverse-modePrice">{modePrice(this.model.info, this._status)}</span>
          </span>
        )}
      </UseSignal>
    );
  }

  dispose(): void {
    this.model.changed.disconnect(this._onModelChanged, this);
    super.dispose();
  }

  private async _switch(): Promise<void> {
    if (this._busy) {
      return;
    }
    this._busy = true;
    try {
      await switchModeWithDialog(this.model, this.onClick);
      this._key = '';
      this._onModelChanged();
    } finally {
      this._busy = false;
    }
  }

  private _onModelChanged(): void {
    const info = this.model.info;
    const key = info ? `${info.mode}/${info.gpu_type ?? ''}` : '';
    if (!info || key === this._key) {
      return;
    }
    this._key = key;
    requestAPI<IModeStatus>(['mode'])
      .then(status => {
        this._status = status;
        this.update();
      })
      .catch(() => undefined); // the label still shows the mode without its price
  }

  private _status: IModeStatus | null = null;
  private _key = '';
  private _busy = false;
}
