import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

// Flat cell bodies: galata types the source and the editor would auto-indent a block.
const QUICK = [
  '%%sv train --name uiquick --steps 5',
  'import time',
  'from jupyter_starverse import runtime as sv',
  '[sv.log_metrics(s, loss=2.0 / (s + 1)) or time.sleep(0.2) for s in range(5)]',
  "print('all steps done', flush=True)"
].join('\n');

const SLOW = [
  '%%sv train --name uislow --steps 600',
  'import time',
  'from jupyter_starverse import runtime as sv',
  '[sv.log_metrics(s, loss=1.0 / (s + 1)) or time.sleep(0.5) for s in range(600)]'
].join('\n');

// Flat lines again: 45 finished run folders written as the local backend writes them, the newest
// 0.44 s ahead (not 44 s: a job a later spec launches must be newer than all of them).
const BULK = [
  'import time',
  'from jupyter_starverse.client import Starverse',
  'from jupyter_starverse.experiments import ExperimentPaths, RunStatus, write_json, write_status',
  'from jupyter_starverse.jobmodel import JobSpec',
  "exp = ExperimentPaths.of(Starverse().settings.experiments, 'uibulk')",
  "runs = [exp.run(f'uibulk{i:03d}-20261201-000000-0000') for i in range(45)]",
  'now = time.time()',
  "spec = JobSpec(name='uibulk', code='print(1)', experiment='uibulk').to_json()",
  "[r.make() or write_json(r.spec, spec) or write_status(r, RunStatus(job_id=r.job_id, state='failed' if i % 15 == 0 else 'succeeded', created=now + i / 100, started=now + i / 100, finished=now + i / 100 + 1)) for i, r in enumerate(runs)]",
  "print('bulk runs written', flush=True)"
].join('\n');

test.describe('Starverse jobs', () => {
  test('%%sv train shows the monitor; the Jobs section lists, shows logs and cancels', async ({ page }) => {
    test.setTimeout(300 * 1000);
    await page.notebook.createNew('train.ipynb');
    // all cells first: running the last cell appends a new one and would shift the indices
    await page.notebook.setCell(0, 'code', '%load_ext jupyter_starverse');
    await page.notebook.addCell('code', QUICK);
    await page.notebook.addCell('code', SLOW);
    await page.notebook.runCell(0, true);
    await page.notebook.runCell(1, true);

    // The monitor widget: progress bar, loss chart, ranks, log tail, cancel button.
    const monitor = page.locator('.starverse-monitor').first();
    await expect(monitor).toBeVisible({ timeout: 60 * 1000 });
    await expect(monitor.locator('.widget-hprogress')).toBeVisible();
    await expect(monitor.locator('.starverse-state').first()).toHaveText('succeeded', { timeout: 180 * 1000 });
    await expect(monitor.locator('svg.starverse-chart polyline')).toHaveCount(1);
    await expect(monitor.locator('.starverse-log')).toContainText('[0] all steps done');
    await expect(monitor.locator('.starverse-stats')).toContainText('step 5/5');
    await expect(monitor.locator('button', { hasText: 'Finished' })).toBeDisabled();
    await monitor.screenshot({ path: path.join(ARTIFACTS, 'starverse-monitor.png') });

    // The Jobs section of the side panel shows the same job, read from its experiment folder.
    await page.sidebar.openTab('jupyter-starverse-panel');
    const section = page.locator('#jupyter-starverse-panel details[data-section="jobs"]');
    await expect(section).toBeVisible();
    const quick = section.locator('li.jp-Starverse-job[data-job-id^="uiquick-"]');
    await expect(quick).toHaveAttribute('data-state', 'succeeded', { timeout: 30 * 1000 });
    await expect(quick.locator('.jp-Starverse-jobStats')).toContainText('step 5/5');
    await quick.locator('.jp-Starverse-logsButton').click();
    await expect(quick.locator('.jp-Starverse-jobLogs')).toContainText('[0] all steps done');
    await quick.locator('.jp-Starverse-tbButton').click();
    await expect(quick.locator('.jp-Starverse-tensorboard')).toContainText('tensorboard --logdir');

    // A long job, cancelled from the panel: the row and the notebook's monitor both say so.
    await page.notebook.runCell(2, true);
    const slow = section.locator('li.jp-Starverse-job[data-job-id^="uislow-"]');
    await expect(slow).toHaveAttribute('data-state', 'running', { timeout: 120 * 1000 });
    await expect(slow.locator('.jp-Starverse-jobStats')).toContainText('steps/s', { timeout: 120 * 1000 });
    await section.screenshot({ path: path.join(ARTIFACTS, 'starverse-jobs.png') });
    await slow.locator('.jp-Starverse-cancelButton').click();
    await expect(slow).toHaveAttribute('data-state', 'cancelled', { timeout: 90 * 1000 });
    const slowMonitor = page.locator('.starverse-monitor').nth(1);
    await expect(slowMonitor.locator('.starverse-state').first()).toHaveText('cancelled', { timeout: 30 * 1000 });
  });

  test('the Jobs section pages through many runs, filters by state and opens TensorBoard', async ({ page }) => {
    test.setTimeout(240 * 1000);
    await page.notebook.createNew('bulk.ipynb');
    // 45 finished runs, as the local backend leaves them (spec + status), the newest on top
    await page.notebook.setCell(0, 'code', BULK);
    await page.notebook.runCell(0, true);
    await page.sidebar.openTab('jupyter-starverse-panel');
    const section = page.locator('#jupyter-starverse-panel details[data-section="jobs"]');
    await expect(section).toBeVisible();
    const count = section.locator('.jp-Starverse-jobCount');
    await expect(count).toHaveText(/^1–20 of \d+$/, { timeout: 30 * 1000 });
    const total = Number((await count.innerText()).split(' of ')[1].replace(/,/g, ''));
    expect(total).toBeGreaterThanOrEqual(45);
    await expect(section.locator('li.jp-Starverse-job')).toHaveCount(20);
    await expect(section.locator('li.jp-Starverse-job').first()).toHaveAttribute('data-job-id', 'uibulk044-20261201-000000-0000');
    await expect(section.locator('.jp-Starverse-prevPage')).toBeDisabled();

    // the next page: older runs, counted on
    await section.locator('.jp-Starverse-nextPage').click();
    await expect(count).toHaveText(`21–40 of ${total.toLocaleString('en-US')}`);
    await expect(section.locator('li.jp-Starverse-job').first()).toHaveAttribute('data-job-id', 'uibulk024-20261201-000000-0000');
    await expect(section.locator('.jp-Starverse-prevPage')).toBeEnabled();

    // only the failed ones (every 15th run failed): the filter starts again at the first page
    await section.locator('select.jp-Starverse-stateFilter').selectOption({ label: 'Failed' });
    await expect(count).toHaveText(/^1–\d+ of \d+$/);
    const failed = section.locator('li.jp-Starverse-job');
    await expect(failed.first()).toHaveAttribute('data-state', 'failed');
    for (const id of ['uibulk030', 'uibulk015', 'uibulk000']) {
      await expect(section.locator(`li.jp-Starverse-job[data-job-id^="${id}-"]`)).toHaveAttribute('data-state', 'failed');
    }
    expect(await section.locator('li.jp-Starverse-job:not([data-state="failed"])').count()).toBe(0);
    await section.screenshot({ path: path.join(ARTIFACTS, 'starverse-jobs-paged.png') });

    // TensorBoard of the run's experiment, started by the server, opened in a JupyterLab tab on
    // the server's authenticated proxy (same origin and port as JupyterLab, not 127.0.0.1:PORT)
    const row = section.locator('li.jp-Starverse-job[data-job-id^="uibulk030-"]');
    await row.locator('.jp-Starverse-tbButton').click();
    const start = row.locator('.jp-Starverse-tbOpen');
    await expect(start).toHaveText('Start TensorBoard');
    await start.click();
    const frame = page.locator('.jp-Starverse-tensorboardFrame iframe');
    await expect(frame).toBeVisible({ timeout: 90 * 1000 });
    await expect(frame).toHaveAttribute('src', /\/jupyter-starverse\/tensorboard\/[A-Za-z0-9_-]+\/$/);
    const board = page.frameLocator('.jp-Starverse-tensorboardFrame iframe');
    // the board's own page ran (its app element rendered), not its HTML shown as text
    await expect(board.locator('tb-webapp')).toHaveCount(1, { timeout: 60 * 1000 });
    await expect(board.locator('body')).not.toContainText('<!doctype html>');
    await expect(board.locator('body')).toContainText('TensorBoard', { timeout: 60 * 1000 });
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-tensorboard-tab.png') });
    await expect(row.locator('.jp-Starverse-tbOpen')).toHaveText('Open TensorBoard');
    await expect(row.locator('a.jp-Starverse-tbUrl')).toHaveAttribute('href', /\/jupyter-starverse\/tensorboard\//);
    await row.screenshot({ path: path.join(ARTIFACTS, 'starverse-tensorboard.png') });
    await row.locator('.jp-Starverse-tbStop').click();
    await expect(row.locator('.jp-Starverse-tbOpen')).toHaveText('Start TensorBoard');
  });
});
