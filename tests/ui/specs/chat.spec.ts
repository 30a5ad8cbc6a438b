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

    const chat = page.locator('.jp-Starverse-section[data-section="chat"]');
    await chat.scrollIntoViewIfNeeded();
    await chat.getByLabel('model').fill(folder);
    await chat.getByRole('button', { name: 'load model' }).click();
    await expect(chat.locator('.jp-Starverse-chatReady')).toContainText('chatting with', { timeout: 60000 });

    await chat.getByLabel('prompt').fill('How many cards do I need?');
    await chat.getByRole('button', { name: 'send' }).click();
    const answer = chat.locator('.jp-Starverse-chatAnswer').first();
    await expect(answer).toHaveAttribute('data-done', 'true', { timeout: 60000 });
    await expect(answer.locator('.jp-Starverse-chatPrompt')).toContainText('How many cards do I need?');

    await answer.getByRole('button', { name: 'thumbs up' }).click();
    await expect(answer.locator('.jp-Starverse-note')).toHaveText('recorded in chat');
    await expect(answer.locator('.jp-Starverse-thumbUp')).toHaveClass(/jp-mod-active/);
    // What the server stored: one record, voted up, for this model.
    await expect(chat.locator('.jp-Starverse-chatSummary')).toContainText('chat: 1 records · 1 up · 0 down');
    await chat.screenshot({ path: path.join(ARTIFACTS, 'starverse-chat.png') });
  });
});
