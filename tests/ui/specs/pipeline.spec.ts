import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { addDataset, newPipeline } from './steps';

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
    await addDataset(page, 'pipedata', path.join(ROOT, 'pipedata'), { pull: true });

    // "New pipeline" (the palette command) makes and opens work/untitled.svpipeline.
    // (not newPipeline's visible editor: this test opens the exported script in a tab of its own)
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

    // The side panel's job list names the exact version the step's job mounted.
    await page.sidebar.openTab('jupyter-starverse-panel');
    const jobs = page.locator('#jupyter-starverse-panel details[data-section="jobs"]');
    await expect(jobs.locator('.jp-Starverse-jobMounts', { hasText: 'mounts pipedata@1' }).first()).toBeVisible({
      timeout: 30000
    });
    await page.sidebar.close('left');

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

  test('a bare dataset name is pinned to its exact version on the canvas and in the saved file', async ({ page }) => {
    await page.contents.uploadContent('{"text": "hello pin"}\n', 'text', 'pindata/part-0.jsonl');
    await page.sidebar.openTab('jupyter-starverse-panel');
    await addDataset(page, 'pindata', path.join(ROOT, 'pindata'));
    await page.sidebar.close('left');
    // a file written by hand (or by a colleague) names the dataset without a version
    const file = 'pin/bare.svpipeline';
    const doc = {
      version: 1,
      name: 'bare',
      backend: 'local',
      nodes: [
        { id: 'data', kind: 'dataset', params: { ref: 'pindata' }, position: { x: 0, y: 0 } },
        { id: 'train', kind: 'train', params: { script: 'train.py' }, position: { x: 300, y: 0 } }
      ],
      edges: [{ source: 'data', target: 'train' }]
    };
    await page.contents.uploadContent(JSON.stringify(doc), 'text', file);
    await page.evaluate(async (p: string) => {
      await (window as any).jupyterapp.commands.execute('docmanager:open', { path: p });
    }, file);
    const editor = page.locator('.jp-SvPipeline-editor').filter({ visible: true });
    const entry = editor.locator('.jp-SvPipeline-entry[data-node-id="data"]');
    // the first check pins it: shown on the node, an edit of the document (dirty), kept by Ctrl+S
    await expect(entry.locator('.jp-SvPipeline-pinned')).toHaveText('pinned pindata@1', { timeout: 15000 });
    const tab = page.locator(`.lm-TabBar-tab[title*="${file}"]`);
    await expect(tab).toHaveClass(/jp-mod-dirty/);
    await editor.locator('.jp-SvPipeline-canvas').focus();
    await page.keyboard.press('Control+s');
    await expect(tab).not.toHaveClass(/jp-mod-dirty/);
    const saved = JSON.parse(
      await page.evaluate(async (p: string) => {
        const app = (window as any).jupyterapp;
        return (await app.serviceManager.contents.get(p, { content: true })).content as string;
      }, file)
    );
    expect(saved.nodes.find((n: { id: string }) => n.id === 'data').params).toEqual({
      ref: 'pindata',
      pinned: 'pindata@1'
    });
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-pinned.png') });
  });

  test('a pipeline is a document: dirty after an edit, saved by Ctrl+S, undo/redo, asked about on close', async ({
    page
  }) => {
    const file = 'doc/untitled.svpipeline';
    await page.contents.createDirectory('doc');
    const editor = await newPipeline(page, 'doc');
    // a new pipeline is empty, not an error
    await expect(editor.locator('[data-role="status"]')).toHaveText('empty: drag a training step from the palette');
    await expect(editor.locator('.jp-SvPipeline-message.jp-mod-error')).toHaveCount(0);
    const tab = page.locator(`.lm-TabBar-tab[title*="${file}"]`);
    await expect(tab).not.toHaveClass(/jp-mod-dirty/);

    // add a node: the tab is dirty; Ctrl+S writes it to disk
    const pane = editor.locator('.react-flow__pane');
    await editor.locator('.jp-SvPipeline-paletteItem[data-palette-ref="tp"]').dragTo(pane);
    const train = editor.locator('.jp-SvPipeline-train[data-node-id="train"]');
    await expect(train).toBeVisible();
    await expect(tab).toHaveClass(/jp-mod-dirty/);
    await train.click();
    const side = editor.locator('.jp-SvPipeline-form[data-form="train"]');
    await side.locator('select[name="gpu"]').selectOption({ index: 1 }); // tp needs GPUs
    await expect(side.locator('input[name="tensor_parallel"]')).toHaveAttribute('placeholder', '2 (derived)', {
      timeout: 15000
    });
    await side.locator('input[name="gpus_per_node"]').fill('3');
    // the form's derived degree follows the template: tp on 3 cards splits 3 ways
    await expect(side.locator('input[name="tensor_parallel"]')).toHaveAttribute('placeholder', '3 (derived)', {
      timeout: 15000
    });
    await editor.locator('.jp-SvPipeline-canvas').focus();
    await page.keyboard.press('Control+s');
    await expect(tab).not.toHaveClass(/jp-mod-dirty/);
    const onDisk = async (): Promise<any> =>
      JSON.parse(
        await page.evaluate(async (p: string) => {
          const app = (window as any).jupyterapp;
          return (await app.serviceManager.contents.get(p, { content: true })).content as string;
        }, file)
      );
    const saved = await onDisk();
    expect(saved.nodes.map((n: { id: string }) => n.id)).toEqual(['train']);
    expect(saved.nodes[0].params.gpus_per_node).toBe(3);

    // undo (toolbar) takes the card count back, redo restores it; back at the saved text it is clean
    const undo = page.locator('.jp-SvPipeline-undo');
    const redo = page.locator('.jp-SvPipeline-redo');
    await undo.click();
    await expect(side.locator('input[name="gpus_per_node"]')).toHaveValue('2');
    await expect(tab).toHaveClass(/jp-mod-dirty/);
    await redo.click();
    await expect(side.locator('input[name="gpus_per_node"]')).toHaveValue('3');
    await expect(tab).not.toHaveClass(/jp-mod-dirty/);

    // drag the node: dirty again; closing the tab asks about the unsaved change
    const box = await train.boundingBox();
    expect(box).not.toBeNull();
    await page.mouse.move(box!.x + 20, box!.y + 10);
    await page.mouse.down();
    await page.mouse.move(box!.x + 120, box!.y + 90, { steps: 5 });
    await page.mouse.up();
    await expect(tab).toHaveClass(/jp-mod-dirty/);
    await tab.locator('.lm-TabBar-tabCloseIcon').click();
    const dialog = page.locator('.jp-Dialog');
    await expect(dialog).toContainText('Save changes in "untitled.svpipeline" before closing?');
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-unsaved.png') });
    await dialog.getByRole('button', { name: /discard/i }).click();
    await expect(editor).toHaveCount(0);
    // the file keeps the saved position, not the dragged one
    expect((await onDisk()).nodes[0].position).toEqual(saved.nodes[0].position);
  });

  test('a prep node runs as a job: backend and shards from its form, checked by the server', async ({ page }) => {
    await page.contents.uploadContent('{"text": "hello prep"}\n', 'text', 'prepdata/part-0.jsonl');
    await page.sidebar.openTab('jupyter-starverse-panel');
    await addDataset(page, 'prepdata', path.join(ROOT, 'prepdata'));
    await page.contents.createDirectory('prepdoc');
    const editor = await newPipeline(page, 'prepdoc');
    const item = editor.locator('.jp-SvPipeline-paletteItem', { hasText: 'Prep · dedup' });
    await expect(item).toBeVisible({ timeout: 15000 });
    await item.dragTo(editor.locator('.react-flow__pane'));
    const node = editor.locator('.jp-SvPipeline-prep[data-node-id="dedup"]');
    const dataset = editor.locator('.jp-SvPipeline-paletteItem[data-palette-ref="prepdata@1"]');
    await expect(dataset).toBeVisible({ timeout: 15000 });
    await dataset.dragTo(node);
    await node.click();
    const side = editor.locator('.jp-SvPipeline-form[data-form="dedup"]');
    await side.locator('select[name="backend"]').selectOption('kubernetes');
    // the server's check (data.parse_shards) names a bad value on the field
    await side.locator('input[name="shards"]').fill('2x2x2');
    await expect(side.locator('.jp-SvPipeline-fieldIssue')).toContainText('is not N or NxP', { timeout: 15000 });
    await side.locator('input[name="shards"]').fill('2x3');
    await expect(side.locator('.jp-SvPipeline-fieldIssue', { hasText: 'NxP' })).toHaveCount(0, { timeout: 15000 });
    const text = await page.evaluate(async () => {
      const app = (window as any).jupyterapp;
      const widget = app.shell.currentWidget;
      return widget.context.model.toString() as string;
    });
    const params = JSON.parse(text).nodes.find((n: { id: string }) => n.id === 'dedup').params;
    expect(params).toMatchObject({ step: 'dedup', backend: 'kubernetes', shards: '2x3' });
    // score runs on one rank: no shards to give
    await side.locator('select[name="step"]').selectOption('score');
    await expect(side.locator('input[name="shards"]')).toBeDisabled();
  });
});
