/** The `.svpipeline` document: a text file (JSON) edited on a canvas, saved like any file. */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { ICommandPalette, MainAreaWidget, ReactWidget } from '@jupyterlab/apputils';
import {
  ABCWidgetFactory,
  DocumentRegistry,
  DocumentWidget
} from '@jupyterlab/docregistry';
import { LabIcon, redoIcon, ToolbarButton, undoIcon } from '@jupyterlab/ui-components';
import { Signal } from '@lumino/signaling';
import * as React from 'react';

import { IPipelineDoc, IStepRun } from '../tokens/pipeline';
import { PipelineEditor, IPipelineHost } from './editor';
import { emptyPipeline, parsePipeline, serializePipeline } from './graph';
import { JobMonitorWidget } from './monitor';

export const FILE_TYPE = 'svpipeline';
export const FACTORY = 'Starverse Pipeline Editor';
export const NEW_PIPELINE = 'starverse:new-pipeline';
export const UNDO = 'starverse:pipeline-undo';
export const REDO = 'starverse:pipeline-redo';

/** How many edits undo can go back. */
const HISTORY = 200;

/**
 * The canvas of one document. The document model (the file's text) is the truth: every edit
 * writes it and marks it dirty unless it equals what is on disk, so Ctrl+S saves it, closing
 * asks about unsaved changes, and revert / reload re-read it. Undo and redo walk the model's
 * history (the texts it held since it was loaded).
 */
export class PipelineView extends ReactWidget {
  constructor(
    private readonly _context: DocumentRegistry.Context,
    private readonly _host: IPipelineHost
  ) {
    super();
    this.addClass('jp-SvPipeline');
    void _context.ready.then(() => {
      this._saved = _context.model.toString();
      this._load(true);
      _context.model.contentChanged.connect(() => {
        if (_context.model.toString() !== this._written) {
          this._load(true); // revert, reload from disk, or another client's edit
        }
      });
      _context.saveState.connect((_, state) => {
        if (state === 'completed') {
          this._saved = _context.model.toString();
          this._syncDirty();
        }
      });
    });
  }

  /** Emitted when undo or redo becomes possible or impossible. */
  get historyChanged(): Signal<this, void> {
    return this._historyChanged;
  }

  get canUndo(): boolean {
    return this._index > 0;
  }

  get canRedo(): boolean {
    return this._index < this._history.length - 1;
  }

  /** Back to the document before the last edit. */
  undo(): void {
    if (this.canUndo) {
      this._index -= 1;
      this._write(this._history[this._index]);
    }
  }

  /** Forward to the edit undone last. */
  redo(): void {
    if (this.canRedo) {
      this._index += 1;
      this._write(this._history[this._index]);
    }
  }

  private _load(fresh: boolean): void {
    const stem = this._context.path.split('/').pop()?.replace(/\.svpipeline$/, '') ?? 'pipeline';
    const text = this._context.model.toString();
    try {
      this._doc = parsePipeline(text, stem);
      this._error = null;
    } catch (reason) {
      this._error = `this file is not a pipeline: ${String(reason)}`;
    }
    if (fresh) {
      this._written = text;
      this._history = [text];
      this._index = 0;
      this._historyChanged.emit();
    }
    this.update();
  }

  /** Put `text` into the model (one history step is the caller's business). */
  private _write(text: string): void {
    this._written = text;
    this._context.model.fromString(text);
    this._syncDirty();
    this._load(false);
    this._historyChanged.emit();
  }

  private _syncDirty(): void {
    this._context.model.dirty = this._context.model.toString() !== this._saved;
  }

  private _change = (doc: IPipelineDoc): void => {
    const text = serializePipeline(doc);
    if (text === this._written) {
      return;
    }
    this._history = this._history.slice(0, this._index + 1);
    this._history.push(text);
    if (this._history.length > HISTORY) {
      this._history.shift();
    }
    this._index = this._history.length - 1;
    this._write(text);
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
  private _saved = '';
  private _history: string[] = [];
  private _index = 0;
  private _historyChanged = new Signal<this, void>(this);
}

/** An undo or redo button of the document's toolbar, enabled while it can act. */
function historyButton(view: PipelineView, which: 'undo' | 'redo'): ToolbarButton {
  const button = new ToolbarButton({
    icon: which === 'undo' ? undoIcon : redoIcon,
    tooltip: which === 'undo' ? 'Undo the last edit (Ctrl+Z)' : 'Redo (Ctrl+Shift+Z)',
    label: '',
    className: `jp-SvPipeline-${which}`,
    enabled: false,
    onClick: () => (which === 'undo' ? view.undo() : view.redo())
  });
  button.node.setAttribute('aria-label', which === 'undo' ? 'Undo' : 'Redo');
  view.historyChanged.connect(() => {
    button.enabled = which === 'undo' ? view.canUndo : view.canRedo;
  });
  return button;
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
    const view = new PipelineView(context, host);
    const widget = new DocumentWidget({ context, content: view });
    widget.title.icon = this._icon;
    widget.toolbar.addItem('undo', historyButton(view, 'undo'));
    widget.toolbar.addItem('redo', historyButton(view, 'redo'));
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
  // Ctrl+Z / Ctrl+Shift+Z on the canvas walk the document's history (inputs keep their own).
  const current = (): PipelineView | null => {
    const widget = app.shell.currentWidget;
    return widget instanceof DocumentWidget && widget.content instanceof PipelineView ? widget.content : null;
  };
  app.commands.addCommand(UNDO, {
    label: 'Undo pipeline edit',
    isEnabled: () => current()?.canUndo ?? false,
    execute: () => current()?.undo()
  });
  app.commands.addCommand(REDO, {
    label: 'Redo pipeline edit',
    isEnabled: () => current()?.canRedo ?? false,
    execute: () => current()?.redo()
  });
  const canvas = '.jp-SvPipeline .jp-SvPipeline-canvas';
  app.commands.addKeyBinding({ command: UNDO, keys: ['Accel Z'], selector: canvas });
  app.commands.addKeyBinding({ command: REDO, keys: ['Accel Shift Z'], selector: canvas });
  app.commands.addKeyBinding({ command: REDO, keys: ['Accel Y'], selector: canvas });
  if (palette) {
    palette.addItem({ command: NEW_PIPELINE, category: 'Starverse', args: { isPalette: true } });
  }
}
