/** TensorBoard in a JupyterLab main-area tab (an IFrame on the server's authenticated proxy). */
import { JupyterFrontEnd } from '@jupyterlab/application';
import { IFrame, MainAreaWidget } from '@jupyterlab/apputils';

let app: JupyterFrontEnd | null = null;

/** Called once by the plugin: where the tabs open. */
export function setTensorBoardApp(frontEnd: JupyterFrontEnd): void {
  app = frontEnd;
}

/**
 * Open (or show again) the board at `url` (a path under the server's base_url, proxied with the
 * Jupyter token or cookie, so it works when the browser is not on the server's host).
 * Without the JupyterLab shell (tests of a section alone) it opens a browser tab instead.
 */
export function openTensorBoard(url: string, board: string, label: string): void {
  if (app === null) {
    window.open(url, '_blank', 'noopener');
    return;
  }
  const id = `jp-Starverse-tensorboard-${board}`;
  const open = Array.from(app.shell.widgets('main')).find(w => w.id === id);
  if (open) {
    app.shell.activateById(id);
    return;
  }
  // its own page on the same origin: scripts and same-origin requests (its data API) are allowed
  const frame = new IFrame({ sandbox: ['allow-scripts', 'allow-same-origin', 'allow-popups', 'allow-downloads'] });
  frame.url = url;
  frame.addClass('jp-Starverse-tensorboardFrame');
  const widget = new MainAreaWidget({ content: frame });
  widget.id = id;
  widget.title.label = label;
  widget.title.caption = `TensorBoard: ${url}`;
  widget.title.closable = true;
  app.shell.add(widget, 'main');
  app.shell.activateById(id);
}
