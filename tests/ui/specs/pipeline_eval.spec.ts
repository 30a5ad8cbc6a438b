import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { addDataset, newPipeline } from './steps';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');
/** The server's root folder (set by tests/ui/test_galata.py). */
const ROOT = process.env.STARVERSE_UI_ROOT ?? '';

test.describe('Starverse pipeline editor: evaluation', () => {
  test('drag the eval item onto the canvas, feed it the training step and a labelled set, fill it, save', async ({
    page
  }) => {
    test.setTimeout(180 * 1000);
    expect(ROOT).not.toBe('');
    const rows = [
      { question: 'what is a node?', answer: 'a machine' },
      { question: 'what is a card?', answer: 'a GPU' }
    ];
    await page.contents.uploadContent(rows.map(r => JSON.stringify(r)).join('\n') + '\n', 'text', 'qaset/test.jsonl');

    // a labelled dataset on the store, added from the side panel as a user does
    await page.sidebar.openTab('jupyter-starverse-panel');
    await addDataset(page, 'qaset', path.join(ROOT, 'qaset'), { pull: true });

    const file = 'evalpipe/untitled.svpipeline';
    await page.contents.createDirectory('evalpipe');
    const editor = await newPipeline(page, 'evalpipe');
    await page.sidebar.close('left');

    // a training step, then the eval item of the palette, dropped on the canvas
    const pane = editor.locator('.react-flow__pane');
    await editor.locator('.jp-SvPipeline-paletteItem[data-palette-ref="ddp"]').dragTo(pane, {
      targetPosition: { x: 150, y: 150 }
    });
    const train = editor.locator('.jp-SvPipeline-train[data-node-id="train"]');
    await expect(train).toBeVisible();
    const item = editor.locator('.jp-SvPipeline-paletteItem[data-palette-kind="eval"]');
    await expect(item).toHaveText('Eval · score a model on a labelled set');
    await item.dragTo(pane, { targetPosition: { x: 150, y: 430 } });
    const evalNode = editor.locator('.jp-SvPipeline-eval[data-node-id="eval"]');
    await expect(evalNode).toBeVisible();
    await expect(evalNode.locator('.jp-SvPipeline-tag')).toHaveText('eval classification');

    // the training step's output is what it scores: draw the edge train -> eval
    await train.locator('.react-flow__handle.source').dragTo(evalNode.locator('.react-flow__handle.target'));
    await expect(editor.locator('.react-flow__edge')).toHaveCount(1);

    // the form: the model is the training step's output; pick the dataset, the task and its fields
    await evalNode.click();
    const side = editor.locator('.jp-SvPipeline-form[data-form="eval"]');
    await expect(side.locator('select[name="model"] option').first()).toHaveText('output of train');
    await side.locator('select[name="data"]').selectOption('qaset@1');
    await side.locator('select[name="task"]').selectOption('qa');
    await side.locator('input[name="input_field"]').fill('question');
    await side.locator('input[name="target_field"]').fill('answer');
    await side.locator('input[name="limit"]').fill('2');

    // the dataset became a node wired into the step; the check says what the step scores, on what
    await expect(editor.locator('.jp-SvPipeline-entry[data-node-id="qaset"]')).toBeVisible();
    await expect(editor.locator('.react-flow__edge')).toHaveCount(2);
    await expect(evalNode.locator('.jp-SvPipeline-tag')).toHaveText('eval qa');
    await expect(evalNode.locator('[data-role="scores"]')).toHaveText('scores output of train', { timeout: 15000 });
    await expect(evalNode.locator('[data-role="on"]')).toHaveText('on qaset@1 (first 2)');
    await expect(evalNode.locator('.jp-SvPipeline-issue.jp-mod-error')).toHaveCount(0);
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-pipeline-eval.png') });

    // saved: the file on disk holds the eval node, its parameters and both edges into it
    await editor.locator('.jp-SvPipeline-canvas').focus();
    await page.keyboard.press('Control+s');
    const tab = page.locator(`.lm-TabBar-tab[title*="${file}"]`);
    await expect(tab).not.toHaveClass(/jp-mod-dirty/);
    const saved = JSON.parse(
      await page.evaluate(async (p: string) => {
        const app = (window as any).jupyterapp;
        return (await app.serviceManager.contents.get(p, { content: true })).content as string;
      }, file)
    );
    const node = saved.nodes.find((n: { id: string }) => n.id === 'eval');
    expect(node.kind).toBe('eval');
    expect(node.params).toEqual({ task: 'qa', input_field: 'question', target_field: 'answer', limit: 2 });
    expect(saved.edges).toEqual(
      expect.arrayContaining([
        { source: 'train', target: 'eval' },
        { source: 'qaset', target: 'eval' }
      ])
    );
    expect(saved.edges).toHaveLength(2);
  });
});
