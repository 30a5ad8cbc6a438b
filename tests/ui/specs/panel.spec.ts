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

  test('fits the default sidebar width: nothing overflows its row, similar names differ on hover', async ({
    page
  }) => {
    // two datasets whose names only differ at the end, as data steps make them
    const root = process.env.STARVERSE_UI_ROOT ?? '';
    await page.contents.uploadContent('one\n', 'text', 'fit/part-0.txt');
    const names = ['mycorpus-cleaned-deduplicated-scored', 'mycorpus-cleaned-deduplicated'];
    for (const name of names) {
      const status = await page.evaluate(
        async ([n, source]) => {
          const response = await fetch('/jupyter-starverse/store', {
            method: 'POST',
            headers: { 'X-XSRFToken': document.cookie.match(/_xsrf=([^;]+)/)?.[1] ?? '' },
            body: JSON.stringify({ name: n, source })
          });
          return response.status;
        },
        [name, path.join(root, 'fit')]
      );
      expect(status).toBeLessThan(300);
    }
    await page.sidebar.openTab('jupyter-starverse-panel');
    const panel = page.locator('#jupyter-starverse-panel');
    const catalog = panel.locator('.jp-Starverse-section[data-section="catalog"]');
    const first = catalog.locator(`.jp-Starverse-entry[data-ref^="${names[0]}@"]`);
    const second = catalog.locator(`.jp-Starverse-entry[data-ref^="${names[1]}@"]`);
    await expect(first).toBeVisible();
    await first.getByRole('button', { name: /pull/i }).click();
    await expect(first).toHaveAttribute('data-state', 'cached', { timeout: 60000 });
    // the recipes and their costs are in
    await expect(panel.locator('.jp-Starverse-recipe[data-recipe="qwen-vl-stage1"]')).toBeVisible({ timeout: 30000 });

    // JupyterLab's default sidebar width, not widened
    const width = await panel.evaluate(el => el.clientWidth);
    expect(width).toBeLessThan(320);

    // the names are ellipsed alike, their titles (the hover) are the full, different names
    const titles = [
      await first.locator('.jp-Starverse-entryRef').getAttribute('title'),
      await second.locator('.jp-Starverse-entryRef').getAttribute('title')
    ];
    expect(titles[0]).toMatch(new RegExp(`^${names[0]}@`));
    expect(titles[1]).toMatch(new RegExp(`^${names[1]}@`));
    expect(titles[0]).not.toBe(titles[1]);
    // icon buttons, labelled, instead of full-width text buttons
    const copy = first.getByRole('button', { name: /copy the mount path/i });
    await expect(copy).toBeVisible();
    expect((await copy.boundingBox())!.width).toBeLessThan(40);

    // an open recipe's description is readable (lines, not a character per line)
    const qwen = panel.locator('.jp-Starverse-recipe[data-recipe="qwen-vl-stage1"]');
    await qwen.locator('summary').click();
    const description = qwen.locator('.jp-Starverse-recipeBody p').first();
    expect((await description.boundingBox())!.width).toBeGreaterThan(width * 0.6);

    // no row is wider than its box: no clipped cost, no hidden button
    const overflowing = await panel.evaluate(el =>
      Array.from(
        el.querySelectorAll(
          '.jp-Starverse-sectionBody, .jp-Starverse-entry, .jp-Starverse-entryHead, .jp-Starverse-recipe, ' +
            '.jp-Starverse-recipeLine, .jp-Starverse-recipeCost, .jp-Starverse-job, .jp-Starverse-jobHead, ' +
            '.jp-Starverse-state'
        )
      )
        .filter(row => (row as HTMLElement).offsetParent !== null && row.scrollWidth > row.clientWidth + 1)
        .map(row => `${row.className}: ${row.scrollWidth} > ${row.clientWidth} (${row.textContent?.slice(0, 40)})`)
    );
    expect(overflowing).toEqual([]);
    await catalog.scrollIntoViewIfNeeded();
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-panel-default-width.png') });
  });
});
