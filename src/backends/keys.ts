/**
 * Key validation, in one place for every backend (built-in and custom: the
 * persistence layer checks keys before calling any backend).
 *
 * @module
 */
import { InvalidKeyError } from "../core/errors.js";

/** Longest accepted key, in UTF-8 bytes. */
export const MAX_KEY_BYTES = 200;

/**
 * Checks a state key.
 *
 * Refused: a non-string, the empty string, more than {@link MAX_KEY_BYTES}
 * UTF-8 bytes, `/`, `\`, NUL or any other control character (C0, DEL, C1),
 * a lone UTF-16 surrogate, `.` or `..`, or a leading `.`.
 *
 * @param key - the key to check
 * @returns the key, unchanged
 * @throws {InvalidKeyError} with the reason
 */
export function validateKey(key: unknown): string {
  // A session is saved under the same key again and again (by the persistence layer, then its backend).
  if (typeof key === "string" && key === lastValidKey) return key;
  if (typeof key !== "string") throw new InvalidKeyError(String(key), "a key must be a string");
  if (key.length === 0) throw new InvalidKeyError(key, "a key must not be empty");
  if (Buffer.byteLength(key, "utf8") > MAX_KEY_BYTES) {
    throw new InvalidKeyError(key, `a key must be at most ${MAX_KEY_BYTES} bytes of UTF-8`);
  }
  if (key === "." || key === "..") throw new InvalidKeyError(key, "a key must not be . or ..");
  if (key.startsWith(".")) throw new InvalidKeyError(key, "a key must not start with .");
  if (/[/\\]/.test(key)) throw new InvalidKeyError(key, "a key must not contain / or \\");
  if (/[\u0000-\u001f\u007f-\u009f]/.test(key))
    throw new InvalidKeyError(key, "a key must not contain control characters");
  if (!key.isWellFormed()) throw new InvalidKeyError(key, "a key must not contain a lone UTF-16 surrogate");
  lastValidKey = key;
  return key;
}

/** The last key {@link validateKey} accepted. */
let lastValidKey: string | undefined;
