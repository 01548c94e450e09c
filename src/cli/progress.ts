/**
 * Progress reporting of long CLI commands (`import`, `convert`), always on
 * stderr so stdout stays clean for `--json` and pipes: a redrawn bar when
 * stderr is a terminal, plain lines (`import 3/17 name`) otherwise, so logs
 * and CI output stay readable.
 *
 * @module
 */

/** The stream a {@link Progress} writes to (stderr, or a test double with the same shape). */
export interface ProgressStream {
  write(chunk: string): unknown;
  /** True when the stream is a terminal (bar mode). */
  isTTY?: boolean;
  /** Terminal width in characters. */
  columns?: number;
}

/** Options of a {@link Progress}. */
export interface ProgressOptions {
  /** Where to write. @default process.stderr */
  stream?: ProgressStream;
  /** Draw a bar (true) or print lines (false). @default stream.isTTY */
  bar?: boolean;
  /** Print nothing at all (e.g. `--quiet`). @default false */
  silent?: boolean;
}

/**
 * Counts work items and reports each one.
 *
 * @example
 * const p = new Progress("import", files.length);
 * for (const f of files) { await importOne(f); p.tick(f); }
 * p.done();
 */
export class Progress {
  private readonly stream: ProgressStream;
  private readonly bar: boolean;
  private readonly silent: boolean;
  private current = 0;
  private drawn = false;

  /**
   * @param label - what is being done, e.g. `"import"`
   * @param total - number of items expected
   * @param options - stream, bar mode, silence
   */
  constructor(
    private readonly label: string,
    private readonly total: number,
    options: ProgressOptions = {},
  ) {
    this.stream = options.stream ?? process.stderr;
    this.bar = options.bar ?? this.stream.isTTY === true;
    this.silent = options.silent ?? false;
  }

  /**
   * Records one finished item.
   *
   * @param item - name of the item (file or key), shown beside the count
   * @param note - optional short status, e.g. `"ok"` or `"DIFFERS"`
   */
  tick(item: string, note?: string): void {
    this.current++;
    if (this.silent) return;
    const count = `${this.current}/${this.total}`;
    const suffix = note ? ` ${note}` : "";
    if (!this.bar) {
      this.stream.write(`${this.label} ${count} ${item}${suffix}\n`);
      return;
    }
    const width = 24;
    const filled = this.total > 0 ? Math.round((this.current / this.total) * width) : width;
    const bar = `[${"#".repeat(filled)}${"-".repeat(width - filled)}]`;
    let text = `${this.label} ${bar} ${count} ${item}${suffix}`;
    const columns = this.stream.columns || 80; // 0 when the terminal size is unknown
    if (text.length > columns - 1) text = `${text.slice(0, Math.max(0, columns - 2))}…`;
    this.stream.write(`\r\x1b[2K${text}`);
    this.drawn = true;
  }

  /**
   * Writes a line that must be seen whatever the mode (an item that failed): even when silent; a drawn bar is
   * cleared first and drawn again at the next {@link tick}.
   *
   * @param line - the text, without a trailing newline
   */
  log(line: string): void {
    if (this.drawn) this.stream.write("\r\x1b[2K");
    this.drawn = false;
    this.stream.write(`${line}\n`);
  }

  /** Ends the report: moves a drawn bar's line out of the way. */
  done(): void {
    if (this.silent) return;
    if (this.bar && this.drawn) this.stream.write("\n");
    this.drawn = false;
  }
}
