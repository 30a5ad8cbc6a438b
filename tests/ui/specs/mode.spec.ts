import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

test.describe('Starverse mode switch', () => {
  test('click the status bar item, confirm with the price difference, see the mode change', async ({
    page
  }) => {
    const label = page.locator('.jp-Starverse-modeLabel');
    await expect(label).toHaveText('CPU (no-GPU mode)');
    await expect(page.locator('.jp-Starverse-modePrice')).toHaveText(' · 0.10 CNY/h');

    // CPU -> GPU: the dialog shows the price difference before anything changes.
    await page.locator('.jp-Starverse-modeItem').click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog.locator('.jp-Starverse-priceDifference')).toHaveText('+6.40 CNY/h');
    await expect(dialog).toContainText('Running jobs are not affected.');
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-mode-dialog.png') });
    await dialog.locator('button', { hasText: 'Switch (+6.40 CNY/h)' }).click();
    await expect(label).toHaveText('GPU · a100-80g', { timeout: 20000 });
    await expect(label).toHaveAttribute('data-mode', 'gpu');
    await expect(page.locator('.jp-Starverse-modePrice')).toHaveText(' · 6.50 CNY/h');

    // Cancel changes nothing.
    await page.locator('.jp-Starverse-modeItem').click();
    await dialog.locator('button', { hasText: 'Cancel' }).click();
    await expect(label).toHaveText('GPU · a100-80g');

    // GPU -> CPU, back to where the other UI tests expect the workspace.
    await page.locator('.jp-Starverse-modeItem').click();
    await expect(dialog.locator('.jp-Starverse-priceDifference')).toHaveText('−6.40 CNY/h');
    await dialog.locator('button', { hasText: 'Switch' }).click();
    await expect(label).toHaveText('CPU (no-GPU mode)', { timeout: 20000 });
  });
});
