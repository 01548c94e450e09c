/**
 * How the operator tools (the `dumplings` command and the web inspector) write
 * numbers and texts for people: human-readable sizes, durations, and one-line
 * previews of any text.
 *
 * @module
 */

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

/**
 * A timestamp as ISO-8601 UTC without milliseconds.
 *
 * @param ms - ms since the epoch (undefined renders empty)
 * @returns the text
 */
export function when(ms: number | undefined): string {
  return ms === undefined ? "" : new Date(ms).toISOString().replace(/\.\d+Z$/, "Z");
}
