/**
 * The one place the frontend formats values for display: errors, durations, sizes, money.
 * Lines the server already computes (a job's progress line) are shown as sent, not rebuilt.
 */

import { StarverseRequestError } from './request';

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

/** `230.40 CNY`. Money stays the server's decimal string, never a float. */
export function formatMoney(amount: string, currency: string): string {
  return `${amount} ${currency}`;
}

/** `1234567` -> `1,234,567` (like `_format.format_count`). */
export function formatCount(n: number): string {
  return n.toLocaleString('en-US');
}

/** `0.234` -> `23.4%` (a share of documents, like the Python reports). */
export function formatShare(share: number): string {
  return `${(share * 100).toFixed(1)}%`;
}
