/**
 * The one place the frontend formats values for display: errors, durations, sizes, money.
 * Lines the server already computes (a job's progress line) are shown as sent, not rebuilt.
 */

import { StarverseRequestError } from './request';
import { ILogLine } from './tokens/jobs';

/** The server's message plus its hint (`message (hint)`), so a 400 says what to do. */
export function errorText(reason: unknown): string {
  if (reason instanceof StarverseRequestError && reason.hint) {
    return `${reason.message} (${reason.hint})`;
  }
  return reason instanceof Error ? reason.message : String(reason);
}

/** Seconds as `45s`, `1m15s` (75) or `1h01m` (3700), like the notebook monitor. */
export function formatDuration(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) {
    return `${s}s`;
  }
  if (s < 3600) {
    return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  }
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

/** `1536` -> `1.5 KiB`; null -> `–`. */
export function formatBytes(n: number | null): string {
  if (n === null) {
    return '–';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (Math.abs(value) >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

/**
 * `230.4` -> `230.40 CNY`, `26624` -> `26,624.00 CNY`: two decimals (half up) and thousands
 * separated, like `_format.format_money`. Money stays the server's decimal string: the
 * rounding works on its digits, never through a float.
 */
export function formatMoney(amount: string, currency: string): string {
  const m = /^([+-]?)(\d+)(?:\.(\d*))?$/.exec(amount.trim());
  if (m === null) {
    return `${amount} ${currency}`.trim();
  }
  const [, sign, whole, frac = ''] = m;
  let cents = BigInt(whole) * BigInt(100) + BigInt((frac + '00').slice(0, 2));
  if ((frac[2] ?? '0') >= '5') {
    cents += BigInt(1);
  }
  const units = (cents / BigInt(100)).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ',');
  const rest = (cents % BigInt(100)).toString().padStart(2, '0');
  const minus = sign === '-' && cents > BigInt(0) ? '-' : '';
  return `${minus}${units}.${rest} ${currency}`.trim();
}

/** `1234567` -> `1,234,567` (like `_format.format_count`). */
export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

/** `0.234` -> `23.4%` (a share of documents, like the Python reports). */
export function formatShare(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}

/**
 * Money that fits a narrow column: `230.40 CNY` below 10,000, then `26.6k CNY`, `1.20M CNY`,
 * `3.4B CNY`. For display beside the exact `formatMoney` text (a title), never for sums.
 */
export function formatMoneyCompact(amount: string, currency: string): string {
  const value = Number(amount);
  if (!Number.isFinite(value) || Math.abs(value) < 10000) {
    return formatMoney(amount, currency);
  }
  const steps: [number, string][] = [
    [1e9, 'B'],
    [1e6, 'M'],
    [1e3, 'k']
  ];
  const [scale, unit] = steps.find(([n]) => Math.abs(value) >= n) ?? [1, ''];
  const scaled = value / scale;
  const digits = Math.abs(scaled) < 10 ? 2 : Math.abs(scaled) < 100 ? 1 : 0;
  return `${scaled.toFixed(digits)}${unit} ${currency}`.trim();
}

/** The headline metric of each task kind (`evals._report.HEADLINE`). */
export const EVAL_HEADLINE: Record<string, string> = {
  classification: 'f1_macro',
  extraction: 'f1_macro',
  qa: 'token_f1',
  generation: 'rouge_l',
  perplexity: 'perplexity'
};

/** A metric as the CLI prints it (`evals.metric_text`): ratios in points, perplexity as itself. */
export function formatMetric(metric: string, value: number | undefined): string {
  if (value === undefined || value === null) {
    return '-';
  }
  return ['perplexity', 'nll_per_token'].includes(metric) ? value.toFixed(3) : (value * 100).toFixed(1);
}

/** `f1_macro 87.5` for a report's task. */
export function formatHeadline(task: string, metrics: Record<string, number>): string {
  const m = EVAL_HEADLINE[task] ?? Object.keys(metrics)[0] ?? '';
  return `${m} ${formatMetric(m, metrics[m])}`;
}

/** Log lines as the panel shows them: each prefixed by its rank (`[0]`), or by its node when no rank wrote it. */
export function logText(lines: ILogLine[]): string {
  return lines.map(l => `${l.rank === null ? `[node${l.node}]` : `[${l.rank}]`} ${l.text}`).join('\n');
}
