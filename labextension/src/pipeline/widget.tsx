/** The `.svpipeline` document: a text file (JSON) edited on a canvas, saved like any file. */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, ReactWidget } from '@jupyterlab/apputils';
import {
  ABCWidgetFactory,
  DocumentRegistry,
  DocumentWidget
} from '@jupyterlab/docregistry';
import { LabIcon } from '@jupyterlab/ui-components';
import * as React from 'react';

import { IPipelineDoc, IStepRun } from '../tokens';
import { PipelineEditor, IPipelineHost } from './editor';
import { emptyPipeline, parsePipeline, serializePipeline } from './graph';
import { JobMonitorWidget } from './monitor';

export const FILE_TYPE = 'svpipeline';
export const FACTORY = 'Starverse Pipeline Editor';
export const NEW_PIPELINE = 'starverse:new-pipeline';

/** The canvas of one document; re-reads the file when it changes on disk (revert, reload). */
class PipelineView extends ReactWidget {
  constructor(
    private readonly _context: DocumentRegistry.Context,
    private readonly _host: IPipelineHost
  ) {
    super();
    this.addClass('jp-SvPipeline');
    void _context.ready.then(() => {
      this._load();
      _context.model.contentChanged.connect(() => {
        if (_context.model.toString() !== this._written) {
          this._load();
        }
      });
    });
  }

  private _load(): void {
    const stem = this._context.path.split('/').pop()?.replace(/\.svpipeline$/, '') ?? 'pipeline';
    try {
      this._doc = parsePipeline(this._context.model.toString(), stem);
      this._error = null;
    } catch (reason) {
      this._error = `this file is not a pipeline: ${String(reason)}`;
    }
    this.update();
  }

  private _change = (doc: IPipelineDoc): void => {
    this._doc = doc;
    this._written = serializePipeline(doc);
    this._context.model.fromString(this._written);
    this.update();
  };

  protected render(): JSX.Element {
    if (this._error !== null) {
      return <div className="jp-Starverse-error">{this._error}</div>;
    }
    if (this._doc === null) {
      return <div className="jp-Starverse-loading">Loading pipeline…</div>;
    }
    return <PipelineEditor doc={this._doc} onDoc={this._change} host={this._host} />;
  }

  private _doc: IPipelineDoc | null = null;
  private _error: string | null = null;
  private _written = '';
}

/** Opens `.svpipeline` files on the canvas. */
class PipelineWidgetFactory extends ABCWidgetFactory<DocumentWidget<PipelineView>> {
  constructor(
    options: DocumentRegistry.IWidgetFactoryOptions<DocumentWidget<PipelineView>>,
    private readonly _app: JupyterFrontEnd
  ) {
    super(options);
  }

  protected createNewWidget(context: DocumentRegistry.Context): DocumentWidget<PipelineView> {
    const app = this._app;
    const host: IPipelineHost = {
      path: () => context.path,
      openJob: (run: IStepRun) => {
        if (!run.job_id) {
          return;
        }
        const id = `jp-SvPipeline-job-${run.job_id}`;
        const open = Array.from(app.shell.widgets('main')).find(w => w.id === id);
        if (open) {
          app.shell.activateById(id);
          return;
        }
        const widget = new MainAreaWidget({ content: new JobMonitorWidget(run.job_id, run.backend) });
        widget.id = id;
        widget.title.label = `${run.node}: ${run.job_id}`;
        widget.title.closable = true;
        app.shell.add(widget, 'main', { mode: 'split-right' });
      },
      openPath: (path: string) => {
        void app.commands.execute('docmanager:open', { path });
      }
    };
    const widget = new DocumentWidget({ context, content: new PipelineView(context, host) });
    widget.title.icon = this._icon;
    return widget;
  }

  set icon(icon: LabIcon) {
    this._icon = icon;
  }

  private _icon: LabIcon | undefined = undefined;
}

/** Register the file type, the editor and the "New pipeline" command. */
export function registerPipelines(
  app: JupyterFrontEnd,
  icon: LabIcon,
  palette: ICommandPalette | null
): void {
  app.docRegistry.addFileType({
    name: FILE_TYPE,
    displayName: 'Starverse pipeline',
    extensions: ['.svpipeline'],
    mimeTypes: ['application/json'],
    fileFormat: 'text',
    contentType: 'file',
    icon
  });
  const factory = new PipelineWidgetFactory(
    { name: FACTORY, label: 'Pipeline editor', fileTypes: [FILE_TYPE], defaultFor: [FILE_TYPE] },
    app
  );
  factory.icon = icon;
  app.docRegistry.addWidgetFactory(factory);

  app.commands.addCommand(NEW_PIPELINE, {
    label: args => (args.isPalette ? 'Starverse: New Pipeline' : 'New pipeline'),
    caption: 'A data -> training pipeline on a canvas (.svpipeline)',
    icon,
    execute: async args => {
      const cwd = typeof args.cwd === 'string' ? args.cwd : '';
      const model = await app.serviceManager.contents.newUntitled({ path: cwd, type: 'file', ext: '.svpipeline' });
      const stem = model.name.replace(/\.svpipeline$/, '');
      await app.serviceManager.contents.save(model.path, {
        type: 'file',
        format: 'text',
        content: serializePipeline(emptyPipeline(stem))
      });
      return app.commands.execute('docmanager:open', { path: model.path, factory: FACTORY });
    }
  });
  if (palette) {
    palette.addItem({ command: NEW_PIPELINE, category: 'Starverse', args: { isPalette: true } });
  }
}
