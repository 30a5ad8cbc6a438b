import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');
/** The server's root folder (set by tests/ui/test_galata.py); the store is STARVERSE_HOME/store below it. */
const ROOT = process.env.STARVERSE_UI_ROOT ?? '';
const REPORT = '20261202-000000-uitest';
const STORE_EVALS = 'starverse-home/store/evals';

test.describe('Starverse evaluation section', () => {
  test('evals: a stored report lists its headline metric, opens its errors, and a bad model says what to do', async ({
    page
  }) => {
    expect(ROOT).not.toBe('');
    // A report as `starverse eval` writes it on the store (report.json + predictions.jsonl),
    // placed through the contents API: scoring a model is the Python tests' job, not the UI's.
    const predictions = [
      { idx: 0, input: 'the film was wonderful', expected: 'pos', predicted: 'pos', correct: true },
      { idx: 1, input: 'a dull, long evening at the cinema', expected: 'neg', predicted: 'pos', correct: false },
      { idx: 2, input: 'not bad at all', expected: 'pos', predicted: 'neg', correct: false }
    ];
    await page.contents.uploadContent(
      predictions.map(p => JSON.stringify(p)).join('\n') + '\n',
      'text',
      `${STORE_EVALS}/${REPORT}/predictions.jsonl`
    );
    const report = {
      id: REPORT,
      model: 'exp:sentiment-sft-with-a-long-experiment-name',
      model_version: null,
      dataset: 'reviews@1',
      dataset_version: '1',
      task: 'classification',
      examples: 3,
      metrics: { accuracy: 1 / 3, f1_macro: 0.25 },
      per_label: [],
      predictions: path.join(ROOT, STORE_EVALS, REPORT, 'predictions.jsonl'),
      engine: 'transformers',
      seconds: 1.5,
      created_at: 1764633600,
      user: 'ui',
      options: {},
      lineage: {},
      notes: []
    };
    await page.contents.uploadContent(JSON.stringify(report), 'text', `${STORE_EVALS}/${REPORT}/report.json`);

    await page.sidebar.openTab('jupyter-starverse-panel');
    const panel = page.locator('#jupyter-starverse-panel');
    const section = panel.locator('.jp-Starverse-section[data-section="evals"]');
    await section.scrollIntoViewIfNeeded();
    const row = section.locator(`.jp-Starverse-evalReport[data-report="${REPORT}"]`);
    await expect(row).toBeVisible({ timeout: 30000 });
    await expect(row.locator('.jp-Starverse-evalMetric')).toHaveText('f1_macro 25.0');
    await expect(row.locator('.jp-Starverse-entryDetail')).toContainText('reviews@1 · classification · n=3');

    await row.getByRole('button', { name: /got wrong/i }).click();
    const wrong = row.locator('.jp-Starverse-evalError');
    await expect(wrong).toHaveCount(2);
    await expect(wrong.first()).toContainText('expected neg · predicted pos');
    await expect(row.locator('.jp-Starverse-evalErrors .jp-Starverse-note')).toHaveText('2 wrong');

    // at JupyterLab's default sidebar width nothing of the section overflows its row
    expect(await panel.evaluate(el => el.clientWidth)).toBeLessThan(320);
    const overflowing = await section.evaluate(el =>
      Array.from(
        el.querySelectorAll(
          '.jp-Starverse-evalReport, .jp-Starverse-entryHead, .jp-Starverse-evalMetric, .jp-Starverse-evalError, ' +
            '.jp-Starverse-evalForm, .jp-Starverse-evalForm > *'
        )
      )
        .filter(r => (r as HTMLElement).offsetParent !== null && r.scrollWidth > r.clientWidth + 1)
        .map(r => `${r.className}: ${r.scrollWidth} > ${r.clientWidth}`)
    );
    expect(overflowing).toEqual([]);

    // starting an evaluation goes through POST evals; a name that is no model is refused with its hint
    const form = section.locator('form.jp-Starverse-evalForm');
    await form.getByLabel('model').fill('no-such-model');
    await form.getByLabel('dataset').fill('reviews@1');
    await form.getByLabel('task').selectOption('classification');
    await form.getByRole('button', { name: 'Evaluate' }).click();
    await expect(form.locator('.jp-Starverse-error')).toContainText("'no-such-model' is not a model");
    await expect(form.locator('.jp-Starverse-error')).toContainText('exp:EXPERIMENT');
    await section.screenshot({ path: path.join(ARTIFACTS, 'starverse-evals.png') });
  });
});
