/**
 * The check every built-in backend's `write` applies to its options: a key
 * {@link WriteOptions} does not declare (e.g. `expected_revision`, or
 * `expectedRev`) is an `InvalidOptionError` naming the option it likely
 * meant, before anything is read or written.
 *
 * @module
 */
import { checkOptions, optionKeys } from "../core/options.js";
import type { WriteOptions } from "./types.js";

const WRITE_OPTIONS = optionKeys<WriteOptions>({ expectedRevision: true, baseLength: true, force: true });

/**
 * Refuses an unknown key in the options of a backend's `write`.
 *
 * @param backend - the backend's name, for the message (e.g. `sqlite`)
 * @param options - the options given to `write`
 * @throws {InvalidOptionError} naming the unknown key and the option it likely meant
 * @example
 * checkWriteOptions("file", { expectedRevison: 3 }); // did you mean expectedRevision?
 */
export function checkWriteOptions(backend: string, options: WriteOptions | undefined): void {
  checkOptions(`${backend} write`, options, WRITE_OPTIONS);
}
