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
});
