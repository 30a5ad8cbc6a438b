import { ReactWidget, UseSignal } from '@jupyterlab/ui-components';
import * as React from 'react';

import { StarverseModel } from './model';
import { IInfo } from './tokens';

/** Text of the status bar item for a given info. */
export function modeLabel(info: IInfo | null): string {
  if (info === null) {
    return 'Starverse: …';
  }
  return info.mode === 'gpu'
    ? `GPU · ${info.gpu_type ?? 'unknown'}`
    : 'CPU (no-GPU mode)';
}

/** Status bar item showing the workspace mode; a click runs `onClick`. */
export class ModeStatus extends ReactWidget {
  constructor(
    private readonly model: StarverseModel,
    private readonly onClick: () => void
  ) {
    super();
    this.addClass('jp-Starverse-modeStatus');
  }

  render(): JSX.Element {
    return (
      <UseSignal signal={this.model.changed}>
        {() => (
          <span
            className="jp-Starverse-modeLabel"
            data-mode={this.model.info?.mode ?? ''}
            title="Workspace mode (Starverse). Click to switch."
            onClick={this.onClick}
          >
            {modeLabel(this.model.info)}
          </span>
        )}
      </UseSignal>
    );
  }
}
