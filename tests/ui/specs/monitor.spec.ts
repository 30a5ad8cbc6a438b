import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

// A real local launch of 2 nodes x 2 ranks. Each rank waits a few seconds before its first step
// (what loading a model looks like), so the start-up phase is on screen long enough to be seen.
// Flat cell body: galata types the source and the editor would auto-indent a block.
const PHASES = [
  '%%sv train --name uiphases --nodes 2 --procs 2 --steps 6',
  'import time',
  'from jupyter_starverse import runtime as sv',
  'time.sleep(8)',
  '[sv.log_metrics(s, loss=1.0 / (s + 1)) or time.sleep(0.3) for s in range(6)]'
].join('\n');

test.describe('Starverse monitor start-up', () => {
  test('a 2 x 2 launch shows its start-up phases, then the same final step on every rank', async ({ page }) => {
    test.setTimeout(300 * 1000);
    await page.notebook.createNew('phases.ipynb');
    await page.notebook.setCell(0, 'code', '%load_ext jupyter_starverse');
    await page.notebook.addCell('code', PHASES);
    await page.notebook.runCell(0, true);
    await page.notebook.runCell(1, true);

    const monitor = page.locator('.starverse-monitor').first();
    await expect(monitor).toBeVisible({ timeout: 60 * 1000 });
    // before any step: what the job is doing (not "running" beside four "pending" ranks)
    const phase = monitor.locator('.starverse-phase');
    await expect(phase).toHaveText(/starting|waiting for rendezvous|loading the model/, { timeout: 120 * 1000 });
    // every rank is up and none has logged a step yet: the phase counts them
    await expect(phase).toHaveText('joining the process group and loading the model (4/4 ranks up)', {
      timeout: 120 * 1000
    });
    await expect(monitor.locator('table.starverse-ranks tr')).toHaveCount(5); // a header and four ranks
    await monitor.screenshot({ path: path.join(ARTIFACTS, 'starverse-monitor-startup.png') });

    await expect(monitor.locator('.starverse-state').first()).toHaveText('succeeded', { timeout: 180 * 1000 });
    await expect(phase).toHaveCount(0); // the phase goes once steps come
    await expect(monitor.locator('.starverse-stats')).toContainText('step 6/6');
    // the final step of each rank is the job's last step, on all four (not 5 beside rank 0's 6)
    await expect(monitor.locator('table.starverse-ranks tr td:nth-child(4)')).toHaveText(['6', '6', '6', '6']);
    await monitor.screenshot({ path: path.join(ARTIFACTS, 'starverse-monitor-final-steps.png') });
  });
});
