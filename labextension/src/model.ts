import { Poll } from '@lumino/polling';
import { ISignal, Signal } from '@lumino/signaling';

import { errorText } from './format';
import { requestAPI } from './request';
import { IInfo } from './tokens/info';

/**
 * The workspace info shared by the panel and the status bar; polled with backoff,
 * on standby while the page is hidden.
 */
export class StarverseModel {
  constructor(interval = 5000) {
    this._poll = new Poll({
      auto: true,
      factory: () => this.refresh(),
      frequency: { interval, backoff: true, max: 60 * 1000 },
      name: 'jupyter-starverse:info',
      standby: 'when-hidden'
    });
  }

  get info(): IInfo | null {
    return this._info;
  }

  get error(): string | null {
    return this._error;
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  async refresh(): Promise<void> {
    try {
      this._info = await requestAPI<IInfo>(['info']);
      this._error = null;
    } catch (reason) {
      this._error = errorText(reason);
      this._changed.emit();
      throw reason;
    }
    this._changed.emit();
  }

  dispose(): void {
    this._poll.dispose();
    Signal.clearData(this);
  }

  private _info: IInfo | null = null;
  private _error: string | null = null;
  private _changed = new Signal<this, void>(this);
  private _poll: Poll;
}
