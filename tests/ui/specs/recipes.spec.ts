import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');

test.describe('Starverse recipes section', () => {
  test.beforeEach(async ({ page }) => {
    await page.sidebar.openTab('jupyter-starverse-panel');
  });

  test('recipes: the catalog lists each recipe with its cost, and opens to its defaults', async ({ page }) => {
    const section = page.locator('.jp-Starverse-section[data-section="recipes"]');
    await section.scrollIntoViewIfNeeded();
    const cpt = section.locator('.jp-Starverse-recipe[data-recipe="cpt"]');
    await expect(cpt).toBeVisible({ timeout: 30000 });
    await expect(section.locator('.jp-Starverse-recipe')).toHaveCount(11); // ppo joined dpo, kto and reward

    // The article's set-up: 32 x RTX 4090 for 4 h, priced by the shipped table (1.80 CNY per card-hour).
    const cogvlm = section.locator('.jp-Starverse-recipe[data-recipe="cogvlm-stage1"]');
    await expect(cogvlm.locator('.jp-Starverse-recipeCost')).toHaveText('230.40 CNY');
    // a large cost is compact in the narrow row, exact in its title
    const qwen = section.locator('.jp-Starverse-recipe[data-recipe="qwen-vl-stage1"] .jp-Starverse-recipeCost');
    await expect(qwen).toHaveText('1.20M CNY');
    await expect(qwen).toHaveAttribute('title', /^1,198,080\.00 CNY · /);

    await cpt.locator('summary').click();
    const params = cpt.locator('.jp-Starverse-recipeParams');
    await expect(params).toBeVisible();
    await expect(params.locator('tr', { hasText: 'warmup_steps' })).toContainText('50');
    await expect(params.locator('tr', { hasText: 'global_batch' })).toContainText('32');
    await expect(cpt.locator('.jp-Starverse-recipeCommand')).toContainText('--recipe cpt');
    // a reproduction's Launch form is filled from the recipe: its small CPU set-up first, the article's topology
    await cogvlm.locator('summary').click();
    const form = cogvlm.locator('.jp-Starverse-recipeLaunch');
    await expect(form.locator('input[name="model"]')).toHaveValue('hf:starverse/tiny-llava@v1');
    await expect(form.locator('input[name="data"]')).toHaveValue('image-text-tiny@v1');
    await expect(form.locator('input[name="nodes"]')).toHaveValue('1');
    await expect(form.locator('input[name="gpus"]')).toHaveValue('1');
    await expect(form.locator('label', { has: page.locator('input[name="gpus"]') })).toContainText('procs'); // CPU
    await form.locator('input[name="small"]').uncheck();
    await expect(form.locator('input[name="nodes"]')).toHaveValue('4');
    await expect(form.locator('input[name="gpus"]')).toHaveValue('8');
    await expect(form.locator('label', { has: page.locator('input[name="gpus"]') })).toContainText('gpus');
    await expect(form.locator('input[name="model"]')).toHaveValue('hf:THUDM/cogvlm-chat-hf');
    await expect(form.locator('input[name="data"]')).toHaveValue('image-text');
    await section.screenshot({ path: path.join(ARTIFACTS, 'starverse-recipes.png') });

    // one click: the small set-up launches as filled in (its tiny model and data built into the store
    // on first use) and the job trains to the end in the Jobs section
    test.setTimeout(300 * 1000);
    await form.locator('input[name="small"]').check();
    await expect(form.locator('input[name="model"]')).toHaveValue('hf:starverse/tiny-llava@v1');
    await form.locator('button', { hasText: 'Launch' }).click();
    const note = form.locator('.jp-Starverse-recipeLaunchNote');
    await expect(note).toHaveText(/^launched cogvlm-stage1-/, { timeout: 120 * 1000 });
    const id = (await note.innerText()).replace('launched ', '');
    const row = page.locator(`#jupyter-starverse-panel li.jp-Starverse-job[data-job-id="${id}"]`);
    await expect(row).toHaveAttribute('data-state', 'succeeded', { timeout: 150 * 1000 });
  });
});
