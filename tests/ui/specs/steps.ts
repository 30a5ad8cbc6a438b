/**
 * Steps several UI tests take the same way a user does, in one place.
 */
import { expect, IJupyterLabPageFixture } from '@jupyterlab/galata';
import { Locator } from '@playwright/test';

/**
 * Add `folder` as dataset `name` from the side panel's catalog section (the panel must be
 * open); with `pull`, pull it too and wait until it is cached. Returns the entry's row.
 */
export async function addDataset(
  page: IJupyterLabPageFixture,
  name: string,
  folder: string,
  options: { pull?: boolean } = {}
): Promise<Locator> {
  const catalog = page.locator('.jp-Starverse-section[data-section="catalog"]');
  const form = catalog.locator('form.jp-Starverse-addDataset');
  await form.locator('input[placeholder="name"]').fill(name);
  await form.locator('input').nth(1).fill(folder);
  await form.locator('button[type="submit"]').click();
  const entry = catalog.locator('.jp-Starverse-entry', { hasText: name });
  await expect(entry).toBeVisible({ timeout: 30000 });
  if (options.pull) {
    await entry.getByRole('button', { name: /pull/i }).click();
    await expect(entry).toHaveAttribute('data-state', 'cached', { timeout: 60000 });
  }
  return entry;
}

/**
 * "New pipeline" (the palette command) in folder `cwd`: makes and opens `cwd/untitled.svpipeline`.
 * Returns its editor (the visible one: an earlier test's pipeline may still be open in a hidden tab).
 */
export async function newPipeline(page: IJupyterLabPageFixture, cwd: string): Promise<Locator> {
  await page.evaluate(async (folder: string) => {
    await (window as any).jupyterapp.commands.execute('starverse:new-pipeline', { cwd: folder });
  }, cwd);
  const editor = page.locator('.jp-SvPipeline-editor').filter({ visible: true });
  await expect(editor).toBeVisible();
  return editor;
}
