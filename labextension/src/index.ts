import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette } from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';

import { starverseIcon } from './icon';
import { StarverseModel } from './model';
import { StarversePanel } from './panel';
import { registerPipelines } from './pipeline/widget';
import { setTensorBoardApp } from './tensorboard';
import { ModeStatus } from './statusbar';

/** Command ids, also shown in the command palette under "Starverse". */
export namespace CommandIDs {
  export const open = 'starverse:open-panel';
  export const refresh = 'starverse:refresh';
  export const switchMode = 'starverse:switch-mode';
}

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'jupyter-starverse:plugin',
  description:
    'Starverse side panel, mode status bar item and commands for training on rented GPUs.',
  autoStart: true,
  optional: [ICommandPalette, IStatusBar, ILayoutRestorer],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    statusBar: IStatusBar | null,
    restorer: ILayoutRestorer | null
  ) => {
    const model = new StarverseModel();
    const panel = new StarversePanel(model);
    panel.title.icon = starverseIcon;
    panel.title.caption = 'Starverse';
    app.shell.add(panel, 'left', { rank: 600 });
    if (restorer) {
      restorer.add(panel, 'jupyter-starverse-panel');
    }

    app.commands.addCommand(CommandIDs.open, {
      label: 'Starverse: Open Panel',
      icon: starverseIcon,
      execute: () => app.shell.activateById(panel.id)
    });
    app.commands.addCommand(CommandIDs.refresh, {
      label: 'Starverse: Refresh',
      execute: () => model.refresh()
    });
    if (palette) {
      for (const command of [CommandIDs.open, CommandIDs.refresh]) {
        palette.addItem({ command, category: 'Starverse' });
      }
    }
    registerPipelines(app, starverseIcon, palette);
    setTensorBoardApp(app);

    if (statusBar) {
      const item = new ModeStatus(model, () => {
        const id = app.commands.hasCommand(CommandIDs.switchMode)
          ? CommandIDs.switchMode
          : CommandIDs.open;
        void app.commands.execute(id);
      });
      statusBar.registerStatusItem('jupyter-starverse:mode', {
        item,
        align: 'left',
        rank: 4,
        isActive: () => true,
        activeStateChanged: model.changed
      });
    }
  }
};

export default plugin;
