import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

test.describe('Starverse costs section', () => {
  test('prices, the seed estimate, a comparison and a clear error', async ({ page }) => {
    await page.sidebar.openTab('jupyter-starverse-panel');
    const section = page.locator('#jupyter-starverse-panel details[data-section="cost"]');
    await expect(section).toBeVisible();
    await expect(section.locator('table.jp-Starverse-prices tr[data-gpu="rtx4090"] td').first()).toHaveText('1.8');

    const form = section.locator('form.jp-Starverse-estimateForm');
    await form.locator('select[name="gpu"]').selectOption('rtx4090');
    await form.locator('input[name="cards"]').fill('32');
    await form.locator('input[name="hours"]').fill('4');
    await form.locator('button[type="submit"]').click();
    await expect(form.locator('.jp-Starverse-estimate strong')).toHaveText('230.40 CNY');

    // A 3-day job under every billing mode: spot's upper bound is the cheapest.
    await form.locator('select[name="billing"]').selectOption('all');
    await form.locator('input[name="hours"]').fill('72');
    await form.locator('button[type="submit"]').click();
    const cheapest = form.locator('tr.jp-Starverse-cheapest');
    await expect(cheapest.locator('td').first()).toHaveText('Spot (range)');
    await expect(cheapest.locator('td').nth(1)).toHaveText('921.60 – 2,764.80 CNY');

    // Bad input: the server's message (never a 0).
    await form.locator('select[name="billing"]').selectOption('on_demand');
    await form.locator('input[name="hours"]').fill('0');
    await form.locator('button[type="submit"]').click();
    await expect(form.locator('.jp-Starverse-error')).toContainText('must be positive');
    await expect(form.locator('.jp-Starverse-estimate')).toHaveCount(0);

    await expect(section.locator('.jp-Starverse-total')).toContainText('nothing spent yet');
    await section.screenshot({ path: path.join(ARTIFACTS, 'starverse-costs.png') });
  });
});
