import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');
/** The server's root folder (set by tests/ui/test_galata.py). */
const ROOT = process.env.STARVERSE_UI_ROOT ?? '';

test.describe('Starverse catalog section', () => {
  test.beforeEach(async ({ page }) => {
    await page.sidebar.openTab('jupyter-starverse-panel');
  });

  test('catalog: add a dataset folder, pull it, copy its mount path', async ({ page }) => {
    expect(ROOT).not.toBe('');
    // A small dataset folder, made through the contents API like a user uploading files.
    await page.contents.uploadContent('hello starverse\n', 'text', 'corpus/part-0.txt');
    await page.contents.uploadContent('second shard\n', 'text', 'corpus/part-1.txt');

    const catalog = page.locator('.jp-Starverse-section[data-section="catalog"]');
    const form = catalog.locator('form.jp-Starverse-addDataset');
    await form.locator('input[placeholder="name"]').fill('corpus');
    await form.locator('input').nth(1).fill(path.join(ROOT, 'corpus'));
    await form.locator('button[type="submit"]').click();

    const entry = catalog.locator('.jp-Starverse-entry', { hasText: 'corpus' });
    await expect(entry).toBeVisible();
    await entry.getByRole('button', { name: /pull/i }).click();
    await expect(entry).toHaveAttribute('data-state', 'cached', { timeout: 60000 });

    await entry.getByRole('button', { name: /copy/i }).click();
    await expect(catalog.locator('.jp-Starverse-note', { hasText: 'Copied' })).toContainText('corpus');
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-catalog.png') });
  });
});
