import { expect, test } from '@jupyterlab/galata';
import { execFileSync } from 'child_process';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');
/** The server's root folder (set by tests/ui/test_galata.py). */
const ROOT = process.env.STARVERSE_UI_ROOT ?? '';
const REPO = path.join(__dirname, '..', '..', '..');

test.describe('Starverse chat and feedback section', () => {
  test.beforeEach(async ({ page }) => {
    await page.sidebar.openTab('jupyter-starverse-panel');
  });

  test('chat: load a model, an answer streams in, thumbs up is recorded in the log', async ({ page }) => {
    expect(ROOT).not.toBe('');
    // A tiny Llama (tests/_tiny.py) in the server's root, as a trained model folder would be.
    const folder = path.join(ROOT, 'tiny-llama');
    execFileSync(
      'python',
      ['-c', 'import sys; from pathlib import Path; from tests._tiny import build_tiny_llama; build_tiny_llama(Path(sys.argv[1]))', folder],
      { cwd: REPO, env: { ...process.env, PYTHONPATH: REPO, OMP_NUM_THREADS: '1' } }
    );

    // ... imported into the store, so the chat's picker lists it (the server's store: its root's starverse-home)
    const ref = execFileSync(
      'python',
      [
        '-c',
        'import sys; from jupyter_starverse.client import Starverse; ' +
          'print(Starverse().catalog.import_model(sys.argv[1], repo="ui/tiny-llama").ref)',
        folder
      ],
      { cwd: REPO, env: { ...process.env, PYTHONPATH: REPO, STARVERSE_HOME: path.join(ROOT, 'starverse-home') } }
    )
      .toString()
      .trim();

    const chat = page.locator('.jp-Starverse-section[data-section="chat"]');
    await chat.scrollIntoViewIfNeeded();
    const picker = chat.getByLabel('store model');
    await picker.focus(); // re-reads the store's models
    await expect(picker.locator('option', { hasText: ref })).toHaveCount(1);
    await picker.selectOption(ref);
    await expect(chat.getByLabel('model', { exact: true })).toHaveValue(ref);
    await chat.getByRole('button', { name: 'load model' }).click();
    await expect(chat.locator('.jp-Starverse-chatReady')).toContainText('chatting with', { timeout: 60000 });

    await chat.getByLabel('prompt').fill('How many cards do I need?');
    await chat.getByRole('button', { name: 'send' }).click();
    const answer = chat.locator('.jp-Starverse-chatAnswer').first();
    await expect(answer).toHaveAttribute('data-done', 'true', { timeout: 60000 });
    await expect(answer.locator('.jp-Starverse-chatPrompt')).toContainText('How many cards do I need?');

    // the thumbs are labelled and drawn without an emoji font (SVG and a word)
    const up = answer.getByRole('button', { name: 'thumbs up' });
    await expect(up).toHaveText('good');
    await expect(up.locator('svg')).toHaveCount(1);
    await expect(answer.getByRole('button', { name: 'thumbs down' })).toHaveText('bad');
    await up.click();
    await expect(answer.locator('.jp-Starverse-note')).toHaveText('recorded in chat');
    await expect(answer.locator('.jp-Starverse-thumbUp')).toHaveClass(/jp-mod-active/);
    // What the server stored: one record, voted up, for this model.
    await expect(chat.locator('.jp-Starverse-chatSummary')).toContainText('chat: 1 records · 1 up · 0 down');
    await chat.screenshot({ path: path.join(ARTIFACTS, 'starverse-chat.png') });
  });
});
