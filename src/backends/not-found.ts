/**
 * A custom backend's own "nothing stored under this key" error, as every read
 * path recognises it. The storage contract says `load` returns `undefined`
 * for a missing key; a backend written after the original design (or ported
 * from it) often throws instead: Node's `ENOENT` from reading a missing file,
 * or an error named `FileNotFoundError` (Python's, as the original's backends
 * raise it). Those are {@link StateNotFoundError} (`STATE_NOT_FOUND`) on
 * `loadState`, `iterHistory`, the CLI and the inspector alike, not a
 * `BACKEND_ERROR`. The library's own errors are never reinterpreted.
 *
 * @module
 */
import { DumplingsError, StateNotFoundError } from "../core/errors.js";

/**
 * Whether a backend's error says that nothing is stored: `code === "ENOENT"` or
 * `name === "FileNotFoundError"`, on an error that is not one of the library's own.
 *
 * @param error - what a backend's read threw
 * @returns true for a not-found error of the backend's own
 */
export function isBackendNotFound(error: unknown): boolean {
  if (error instanceof DumplingsError || typeof error !== "object" || error === null) return false;
  const { code, name } = error as { code?: unknown; name?: unknown };
  return code === "ENOENT" || name === "FileNotFoundError";
}

/**
 * The error a read path throws for what a backend's read threw: its own
 * not-found error as a {@link StateNotFoundError} (the backend's as `cause`),
 * anything else as it is.
 *
 * @param error - what the backend threw
 * @param key - the key that was read
 * @param label - the backend's label for the message
 * @returns the error to throw
 */
export function readFailure(error: unknown, key: string, label: string): unknown {
  return isBackendNotFound(error) ? new StateNotFoundError(key, label, { cause: error }) : error;
}
