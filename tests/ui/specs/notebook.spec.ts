import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

// A tiny DDP script: every rank trains a linear model and logs its loss through the runtime.
const SCRIPT = [
  '%%sv train --nodes 1 --procs 2 --steps 8 --name ui-train',
  'import torch',
  'from jupyter_starverse import runtime as sv',
  'ctx = sv.init()',
  'torch.manual_seed(0)',
  'model = sv.wrap(torch.nn.Linear(4, 1))',
  'opt = torch.optim.SGD(model.parameters(), lr=0.1)',
  'x, y = torch.randn(64, 4), torch.randn(64, 1)',
  'for step in sv.steps(model=model, optimizer=opt):',
  '    loss = torch.nn.functional.mse_loss(model(x), y)',
  '    opt.zero_grad(); loss.backward(); opt.step()',
  '    sv.log_metrics(step, loss=loss.item())'
].join('\n');

test('a notebook cell trains on 2 local processes; the panel lists the job', async ({ page }) => {
  test.setTimeout(300 * 1000);
  await page.notebook.createNew('train.ipynb');
  await page.notebook.setCell(0, 'code', '%load_ext jupyter_starverse');
  await page.notebook.runCell(0);
  await page.notebook.addCell('code', 'pass');
  // setCell types into the editor (auto-indent); set the source through the model instead.
  await page.evaluate(source => {
    type Cell = { sharedModel: { setSource(text: string): void } };
    type App = { shell: { currentWidget: { content: { model: { cells: { get(i: number): Cell } } } } } };
    const app = (window as unknown as { jupyterapp: App }).jupyterapp;
    app.shell.currentWidget.content.model.cells.get(1).sharedModel.setSource(source);
  }, SCRIPT);
  await page.notebook.runCell(1);

  const output = page.locator('.jp-Cell').nth(1).locator('.jp-OutputArea');
  await expect(output).toContainText('ui-train', { timeout: 60000 });

  await page.sidebar.openTab('jupyter-starverse-panel');
  const job = page.locator('.jp-Starverse-job', { hasText: 'ui-train' }).first();
  await expect(job).toBeVisible({ timeout: 60000 });
  await expect(job).toHaveAttribute('data-state', 'succeeded', { timeout: 240000 });
  await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-notebook.png') });
});
