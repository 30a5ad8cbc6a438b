import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');
/** The server's root folder (set by tests/ui/test_galata.py). */
const ROOT = process.env.STARVERSE_UI_ROOT ?? '';

// The training step: every rank says which files of the dropped dataset it sees.
const TRAIN = [
  'import os',
  'files = sorted(os.listdir(os.environ["DATA_PATH"]))',
  'print(f"rank {os.environ[\'RANK\']} of {os.environ[\'WORLD_SIZE\']} sees {files}", flush=True)'
].join('\n');

test.describe('Starverse pipeline editor', () => {
  test('drag a dataset onto a training step, 2 nodes, cost, export sbatch, run locally to success', async ({
    page
  }) => {
    test.setTimeout(300 * 1000);
    expect(ROOT).not.toBe('');
    await page.contents.uploadContent('{"text": "hello pipeline"}\n', 'text', 'pipedata/part-0.jsonl');
    await page.contents.uploadContent(TRAIN + '\n', 'text', 'work/train.py');

    // A dataset on the store, added and pulled from the side panel as a user does.
    await page.sidebar.openTab('jupyter-starverse-panel');
    const catalog = page.locator('.jp-Starverse-section[data-section="catalog"]');
    const form = catalog.locator('form.jp-Starverse-addDataset');
    await form.locator('input[placeholder="name"]').fill('pipedata');
    await form.locator('input').nth(1).fill(path.join(ROOT, 'pipedata'));
    await form.locator('button[type="submit"]').click();
    const entry = catalog.locator('.jp-Starverse-entry', { hasText: 'pipedata' });
    await entry.getByRole('button', { name: /pull/i }).click();
    await expect(entry).toHaveAttribute('data-state', 'cached', { timeout: 60000 });

    // "New pipeline" (the palette command) makes and opens work/untitled.svpipeline.
    await page.evaluate(async () => {
      await (window as any).jupyterapp.commands.execute('starverse:new-pipeline', { cwd: 'work' });
    });
    const editor = page.locator('.jp-SvPipeline-editor');
    await expect(editor).toBeVisible();
    await page.sidebar.close('left'); // room for the canvas

    // Drag a DDP training step onto the canvas, then the dataset onto that step.
    const pane = editor.locator('.react-flow__pane');
    await editor.locator('.jp-SvPipeline-paletteItem[data-palette-ref="ddp"]').dragTo(pane);
    const train = editor.locator('.jp-SvPipeline-train[data-node-id="train"]');
    await expect(train).toBeVisible();
    const dataset = editor.locator('.jp-SvPipeline-paletteItem[data-palette-ref="pipedata@1"]');
    await expect(dataset).toBeVisible({ timeout: 15000 });
    await dataset.dragTo(train);

    // The dataset became a node wired into the step, which now mounts it and knows its path.
    await expect(editor.locator('.jp-SvPipeline-entry[data-node-id="pipedata"]')).toBeVisible();
    await expect(editor.locator('.react-flow__edge')).toHaveCount(1);
    await expect(train.locator('.jp-SvPipeline-mount')).toHaveText('data: pipedata@1', { timeout: 15000 });
    await train.click();
    const side = editor.locator('.jp-SvPipeline-form[data-form="train"]');
    await expect(side.locator('.jp-SvPipeline-paths')).toContainText('DATA_PATH');

    // Validation on the node: 2 nodes with data parallel 3 cannot be; then fix it.
    await side.locator('input[name="script"]').fill('train.py');
    await side.locator('input[name="nodes"]').fill('2');
    await side.locator('input[name="data_parallel"]').fill('3');
    await expect(train.locator('.jp-SvPipeline-issue.jp-mod-error')).toContainText('but the step has 2 card(s)');
    await expect(editor.locator('[data-role="status"]')).toHaveText('1 error(s)');
    await side.locator('input[name="data_parallel"]').fill('2');
    await expect(editor.locator('[data-role="status"]')).toHaveText('ready to run', { timeout: 15000 });
    await expect(train.locator('[data-role="topology"]')).toContainText('2 node(s) x 1');
    await expect(train.locator('[data-role="parallel"]')).toHaveText('dp 2 x tp 1 x pp 1');

    // The live cost of the whole pipeline: 2 CPU nodes for the estimated hour.
    await expect(editor.locator('[data-role="total-cost"]')).toContainText('estimated 0.20 CNY');
    await expect(train.locator('[data-role="cost"]')).toContainText('CNY');
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-editor.png') });

    // Export the sbatch scripts: written beside the pipeline, submit.sh opens.
    await editor.getByRole('button', { name: 'Export sbatch' }).click();
    await expect(editor.locator('.jp-SvPipeline-message')).toContainText('work/untitled-sbatch/submit.sh');
    const submit = await page.contents.getContentMetadata('work/untitled-sbatch/submit.sh');
    expect(submit?.type).toBe('file');
    const sbatch = await page.evaluate(async () => {
      const app = (window as any).jupyterapp;
      const model = await app.serviceManager.contents.get('work/untitled-sbatch/train.sbatch', { content: true });
      return model.content as string;
    });
    expect(sbatch).toContain('#SBATCH --nodes=2');
    expect(sbatch).toContain('pipedata@1');
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-sbatch.png') });

    // Save, run locally, watch the node's state on the canvas until it succeeded.
    await page.activity.activateTab('untitled.svpipeline');
    await editor.locator('.jp-SvPipeline-name').click();
    await page.keyboard.press('Control+s');
    await editor.getByRole('button', { name: 'Run' }).click();
    const badge = train.locator('.jp-SvPipeline-run');
    await expect(badge).toBeVisible({ timeout: 30000 });
    await expect(badge).toHaveText('succeeded', { timeout: 180 * 1000 });
    await expect(editor.locator('[data-role="run-state"]')).toHaveText('run succeeded');
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-run.png') });

    // A click on the node's state opens the job's monitor with its logs.
    await badge.click();
    const monitor = page.locator('.jp-SvPipeline-monitor');
    await expect(monitor).toBeVisible();
    await expect(monitor.locator('.jp-SvPipeline-logs')).toContainText("of 2 sees ['part-0.jsonl']", {
      timeout: 30000
    });
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-monitor.png') });

    // The saved file is plain JSON with the step, the dataset and the edge between them.
    const saved = await page.evaluate(async () => {
      const app = (window as any).jupyterapp;
      const model = await app.serviceManager.contents.get('work/untitled.svpipeline', { content: true });
      return model.content as string;
    });
    const doc = JSON.parse(saved);
    expect(doc.edges).toEqual([{ source: 'pipedata', target: 'train' }]);
    expect(doc.nodes.find((n: { id: string }) => n.id === 'train').params.nodes).toBe(2);
  });
});
