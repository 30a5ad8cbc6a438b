import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

/** Where screenshots go; CI keeps this folder as the test artifact. */
const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

test.describe('Starverse panel', () => {
  test('shows the workspace info served by the extension', async ({ page }) => {
    // The real server answer, fetched through the same page (same token, same cookies).
    const info = await page.evaluate(async () => {
      const response = await fetch('/jupyter-starverse/info', {
        headers: { 'X-XSRFToken': document.cookie.match(/_xsrf=([^;]+)/)?.[1] ?? '' }
      });
      return response.json();
    });
    expect(info.mode).toBe('cpu');

    await page.sidebar.openTab('jupyter-starverse-panel');
    const panel = page.locator('#jupyter-starverse-panel');
    await expect(panel).toBeVisible();
    await expect(panel.locator('tr[data-field="version"] td')).toHaveText(info.version);
    await expect(panel.locator('tr[data-field="store"] td')).toHaveText(info.store);
    await expect(panel.locator('tr[data-field="backend"] td')).toHaveText('local');
    await expect(panel.locator('tr[data-field="currency"] td')).toHaveText('CNY');

    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-panel.png') });
  });

  test('status bar shows the current mode', async ({ page }) => {
    const item = page.locator('.jp-Starverse-modeLabel');
    await expect(item).toHaveText('CPU (no-GPU mode)');
    await expect(item).toHaveAttribute('data-mode', 'cpu');
  });

  test('palette has the Starverse commands', async ({ page }) => {
    await page.keyboard.press('Control+Shift+C');
    const palette = page.locator('#command-palette');
    await palette.locator('input').fill('Starverse');
    await expect(palette.locator('.lm-CommandPalette-item', { hasText: 'Starverse: Open Panel' })).toBeVisible();
    await palette.locator('.lm-CommandPalette-item', { hasText: 'Starverse: Open Panel' }).click();
    await expect(page.locator('#jupyter-starverse-panel')).toBeVisible();
  });
});
