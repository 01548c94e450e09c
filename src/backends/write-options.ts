/**
 * The check every built-in backend's `write` applies to its options: a key
 * {@link WriteOptions} does not declare (e.g. `expected_revision`, or
 * `expectedRev`) is an `InvalidOptionError` naming the option it likely
 * meant, before anything is read or written.
 *
 * @module
 */

import { InvalidOptionError } from "../core/errors.js";
import { checkOptions, optionKeys } from "../core/options.js";
import type { HeaderReadOptions, HistoryReadOptions, WriteOptions } from "./types.js";

const WRITE_OPTIONS = optionKeys<WriteOptions>({ expectedRevision: true, baseLength: true, force: true });
const HISTORY_READ_OPTIONS = optionKeys<HistoryReadOptions>({ revision: true });
const HEADER_READ_OPTIONS = optionKeys<HeaderReadOptions>({ clipAt: true });

/**
 * Refuses an unknown key, or a `clipAt` that is not an integer >= 0, in the
 * options of a backend's `readHeader`.
 *
 * @param backend - the backend's name, for the message (e.g. `file`)
 * @param options - the options given to `readHeader`
 * @returns `clipAt`, when given
 * @throws {InvalidOptionError} naming the option at fault
 */
export function checkHeaderReadOptions(backend: string, options: HeaderReadOptions | undefined): number | undefined {
  checkOptions(`${backend} readHeader`, options, HEADER_READ_OPTIONS);
  const clipAt = options?.clipAt;
  if (clipAt !== undefined && !(Number.isSafeInteger(clipAt) && clipAt >= 0)) {
    throw new InvalidOptionError(`${backend} readHeader`, "clipAt", `must be an integer >= 0, got ${String(clipAt)}`);
  }
  return clipAt;
}

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
  if (options === undefined) return;
  const component = `${backend} write`;
  checkRevisionOption(component, "expectedRevision", options.expectedRevision);
  const { baseLength, force } = options;
  if (baseLength !== undefined && !(Number.isSafeInteger(baseLength) && baseLength >= 0)) {
    throw new InvalidOptionError(component, "baseLength", `must be a whole number >= 0, got ${shown(baseLength)}`);
  }
  if (force !== undefined && typeof force !== "boolean") {
    throw new InvalidOptionError(component, "force", `must be true or false, got ${shown(force)}`);
  }
}

/**
 * Refuses a compare-and-set revision (`expectedRevision`, `ifRevision`) that is
 * neither `null` (must not exist) nor a whole number >= 1: a string from an HTTP
 * header (`"5"`) or `-1` was a `ConflictError` naming the same revision twice.
 *
 * @throws {InvalidOptionError} naming the option
 */
export function checkRevisionOption(component: string, option: string, value: unknown): void {
  if (value === undefined || value === null) return;
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 1) return;
  throw new InvalidOptionError(component, option, `must be null or a whole number >= 1, got ${shown(value)}`);
}

function shown(value: unknown): string {
  return typeof value === "bigint" ? `${value}n` : (JSON.stringify(value) ?? String(value));
}

/**
 * Refuses an unknown key, or a `revision` that is not a positive integer, in
 * the options of a backend's `iterHistory`.
 *
 * @param backend - the backend's name, for the message (e.g. `sqlite`)
 * @param options - the options given to `iterHistory`
 * @throws {InvalidOptionError} naming the option at fault
 */
export function checkHistoryReadOptions(backend: string, options: HistoryReadOptions | undefined): void {
  checkOptions(`${backend} iterHistory`, options, HISTORY_READ_OPTIONS);
  const revision = options?.revision;
  if (revision !== undefined && !(Number.isSafeInteger(revision) && revision >= 1)) {
    throw new InvalidOptionError(
      `${backend} iterHistory`,
      "revision",
      `must be an integer >= 1, got ${String(revision)}`,
    );
  }
}
