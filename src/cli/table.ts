/**
 * Aligned text tables of the `dumplings` command, by display width (CJK and
 * emoji take two terminal columns). A module of its own: `string-width`, its
 * Unicode tables and emoji pattern take tens of milliseconds to load, which
 * `dumplings ls` spends only when it prints a table (`--long`).
 *
 * @module
 */
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
