/**
 * Galata configuration: Debian's chromium, headless, one worker, no downloads.
 */
import { defineConfig } from '@playwright/test';

const baseConfig = require('@jupyterlab/galata/lib/playwright-config');

/** A free port chosen by tests/ui/test_galata.py, so a second JupyterLab never collides. */
const PORT = process.env.STARVERSE_UI_PORT ?? '8988';

const chromiumArgs = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run'
];

export default defineConfig({
  ...baseConfig,
  testDir: './specs',
  outputDir: './test-results',
  workers: 1,
  retries: 1,
  timeout: 120 * 1000,
  reporter: [['list'], ['html', { open: 'never', outputFolder: 'playwright-report' }]],
  use: {
    ...baseConfig.use,
    baseURL: `http://127.0.0.1:${PORT}`,
    video: 'off',
    trace: 'off',
    screenshot: 'only-on-failure',
    launchOptions: {
      executablePath: process.env.CHROMIUM_PATH ?? '/usr/bin/chromium',
      args: chromiumArgs
    }
  },
  webServer: {
    command: `jlpm start --port ${PORT}`,
    url: `http://127.0.0.1:${PORT}/lab`,
    timeout: 180 * 1000,
    reuseExistingServer: false
  }
});
