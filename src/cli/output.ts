/**
 * Output helpers of the `dumplings` command: JSON output for scripts,
 * human-readable sizes and one-line message previews (aligned text tables are
 * in `table.ts`). Everything meant for a script goes to stdout; progress and
 * errors go to stderr.
 *
 * @module
 */
import type { Writable } from "node:stream";

/**
 * Writes a value as pretty JSON followed by a newline.
 *
 * @param value - a JSON-compatible value
 * @param out - where to write @default process.stdout
 */
export function printJson(value: unknown, out: Writable = process.stdout): void {
  out.write(`${JSON.stringify(value, null, 2)}\n`);
}

/**
 * Formats a byte count for people: `812 B`, `45.2 KB`, `1.8 MB` (powers of 1024).
 *
 * @param bytes - size in bytes
 * @returns the formatted size
 */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(1)} ${units[unit]}`;
}

/**
 * Formats a duration in milliseconds with a precision that suits its size.
 *
 * @param ms - duration in milliseconds
 * @returns e.g. `0.42`, `12.3`, `1520`
 */
export function formatMs(ms: number): string {
  if (ms < 10) return ms.toFixed(2);
  if (ms < 100) return ms.toFixed(1);
  return ms.toFixed(0);
}

/**
 * Squeezes a text into one line of at most `max` characters: control
 * characters and newlines are shown escaped (`\n`), the rest is cut with `…`.
 *
 * @param text - any text
 * @param max - longest result, in characters @default 100
 * @returns the one-line preview
 */
export function oneLine(text: string, max = 100): string {
  // Only a bounded prefix is escaped and split: a 50 MB prompt is never copied whole (it was 1.5 GB in `show`).
  const head = text.length > 2 * max + 2 ? text.slice(0, 2 * max + 2) : text;
  const escaped = JSON.stringify(head).slice(1, -1).replace(/\\"/g, '"');
  const chars = [...escaped];
  return chars.length <= max && head === text ? escaped : `${chars.slice(0, Math.max(0, max - 1)).join("")}…`;
}
