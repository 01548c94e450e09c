/**
 * Output of the `dumplings` command: JSON for scripts (sizes, durations and
 * one-line previews are written by `ops/format.ts`, aligned text tables by
 * `table.ts`). Everything meant for a script goes to stdout; progress and
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
