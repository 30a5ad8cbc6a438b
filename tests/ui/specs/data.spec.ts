import { expect, test } from '@jupyterlab/galata';
import * as path from 'path';

import { addDataset } from './steps';

const ARTIFACTS = path.join(__dirname, '..', 'artifacts');
/** The server's root folder (set by tests/ui/test_galata.py). */
const ROOT = process.env.STARVERSE_UI_ROOT ?? '';

/** JSON lines with planted sensitive values and two near copies. */
function corpus(): string {
  const lines: string[] = [];
  const products = ['GPU cluster', 'object storage', 'notebook server', 'billing portal', 'model registry'];
  const problems = ['times out after an upgrade', 'shows the wrong invoice', 'cannot mount the dataset', 'is slow'];
  for (let i = 0; i < 30; i++) {
    let text =
      `Ticket ${i} from account ${10000 + i * 7919}: the ${products[i % 5]} ${problems[(i * 3) % 4]} ` +
      `since ${(i % 27) + 1} May, ${(i * 13) % 97} users affected, priority ${['low', 'high'][i % 2]}.`;
    if (i % 3 === 0) {
      text += ' 联系人：张伟，手机13812345678，身份证号11010519491231002X。';
    }
    lines.push(JSON.stringify({ text }));
  }
  lines.push(lines[4].replace('Ticket 4', 'Ticket 4 again'), lines[8].replace('.', '!'));
  return lines.join('\n') + '\n';
}

test.describe('Starverse data section', () => {
  test.beforeEach(async ({ page }) => {
    await page.sidebar.openTab('jupyter-starverse-panel');
  });

  test('data: scan and dedup a store dataset, read the report, preview another threshold', async ({ page }) => {
    expect(ROOT).not.toBe('');
    await page.contents.uploadContent(corpus(), 'text', 'tickets/part-0.jsonl');

    // register the folder through the catalog section, as a user would
    await addDataset(page, 'tickets', path.join(ROOT, 'tickets'));

    const data = page.locator('.jp-Starverse-section[data-section="data"]');
    await data.scrollIntoViewIfNeeded();
    const run = data.locator('form.jp-Starverse-dataRun');
    await run.locator('input').first().fill('tickets@1');
    await run.locator('select').first().selectOption('scan');
    await run.locator('button[type="submit"]').click();

    await expect(run.locator('.jp-Starverse-dataEstimate')).toContainText('peak memory', { timeout: 60000 });
    const report = data.locator('.jp-Starverse-dataReport');
    await expect(report.locator('tr[data-type="id_card"]')).toContainText('10', { timeout: 60000 });
    await expect(report.locator('tr[data-type="mobile"]')).toHaveAttribute('title', /138\*\*\*\*5678/); // masked
    await expect(report).not.toContainText('13812345678');

    await run.locator('select').first().selectOption('dedup');
    await run.locator('button[type="submit"]').click();
    await expect(data.locator('.jp-Starverse-dataItem[data-step="dedup"]')).toContainText('tickets@1-dedup', {
      timeout: 60000
    });
    // a cluster: the kept document and how many duplicates, collapsed until opened
    const cluster = report.locator('.jp-Starverse-dataCluster').first();
    await expect(cluster.locator('summary')).toContainText(/duplicate\(s\) of \S+:\d+/);
    await expect(cluster).not.toHaveAttribute('open', /.*/);
    await cluster.locator('summary').click();
    await expect(cluster.locator('li').first()).toBeVisible();
    await expect(cluster).toContainText('near');
    // the step ran in the background and was polled to its end: no bar left, the form is free again
    await expect(run.locator('.jp-Starverse-dataProgress')).toHaveCount(0);
    await expect(run.locator('button[type="submit"]')).toHaveText('Run');
    const removed = report.locator('.jp-Starverse-dataRemoved');
    const atDefault = Number((await removed.textContent()) ?? '0');
    expect(atDefault).toBeGreaterThanOrEqual(2);
    await report.locator('input[type="range"]').fill('1');
    await expect(report.locator('.jp-Starverse-dataThreshold')).toHaveText('1.00');
    expect(Number((await removed.textContent()) ?? '0')).toBeLessThanOrEqual(atDefault);

    // shards are parsed by the server (data.parse_shards): a bad value is named, nothing runs
    await run.locator('select[aria-label="backend"]').selectOption('local');
    await run.locator('input[aria-label="shards"]').fill('2x2x2');
    await run.locator('button[type="submit"]').click();
    await expect(run.locator('.jp-Starverse-error')).toContainText('is not N or NxP', { timeout: 30000 });
    await expect(run.locator('.jp-Starverse-dataJob')).toHaveCount(0);
    await run.locator('select[aria-label="backend"]').selectOption('');
    await run.locator('input[aria-label="shards"]').fill('');

    // the scan's report is still listed and opens again
    await data.locator('.jp-Starverse-dataItem[data-step="scan"]').click();
    await expect(report.locator('tr[data-type="id_card"]')).toBeVisible();
    await page.screenshot({ path: path.join(ARTIFACTS, 'starverse-data.png') });
  });
});
