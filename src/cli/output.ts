/**
 * Output helpers of the `dumplings` command: aligned text tables, JSON
 * output for scripts, human-readable sizes and one-line message previews.
 * Everything meant for a script goes to stdout; progress and errors go to
 * stderr.
 *
 * @module
 */
import type { Writable } from "node:stream";
import stringWidth from "string-width";

/** Column alignment of a {@link renderTable} column. */
export type Align = "left" | "right";

/** A column of a {@link renderTable} table. */
export interface Column {
  /** Header text. */
  header: string;
  /** Alignment of the cells. @default "left" */
  align?: Align;
}

/**
 * Renders rows as an aligned plain-text table with a header rule. Columns are
 * as wide as their widest cell's display width (CJK and emoji count two
 * columns), so they line up in a terminal.
 *
 * @param columns - header and alignment of each column
 * @param rows - cell texts, one array per row (same length as `columns`)
 * @param options - `footer`: rows printed after a second rule (totals)
 * @returns the table text, lines joined by `\n`, no trailing newline
 * @example
 * renderTable([{ header: "key" }, { header: "n", align: "right" }], [["a", "1"]])
 */
export function renderTable(
  columns: readonly Column[],
  rows: readonly string[][],
  options: { footer?: string[][] } = {},
): string {
  const all = [columns.map((c) => c.header), ...rows, ...(options.footer ?? [])];
  const widths = columns.map((_, i) => Math.max(...all.map((r) => displayWidth(r[i] ?? ""))));
  const line = (cells: readonly string[]) =>
    cells
      .map((cell, i) => {
        const pad = " ".repeat(Math.max(0, (widths[i] ?? 0) - displayWidth(cell)));
        return columns[i]?.align === "right" ? pad + cell : cell + pad;
      })
      .join("  ")
      .trimEnd();
  const rule = widths.map((w) => "-".repeat(w)).join("  ");
  const out = [line(columns.map((c) => c.header)), rule, ...rows.map(line)];
  if (options.footer && options.footer.length > 0) out.push(rule, ...options.footer.map(line));
  return out.join("\n");
}

/**
 * The columns a text takes in a terminal: East Asian wide characters (CJK) and emoji take two,
 * combining marks and zero-width characters none, ANSI escapes none (`string-width`).
 *
 * @param text - a cell's text
 * @returns its display width, in terminal columns
 * @example
 * displayWidth("東京") // 4
 */
export function displayWidth(text: string): number {
  return stringWidth(text);
}

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
