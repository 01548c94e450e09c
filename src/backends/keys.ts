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

/** Characters Windows file names cannot hold (control characters are refused for every key). */
const WINDOWS_FORBIDDEN = /[<>:"|?*]/;
/** Windows device names, which name a device whatever their extension (`NUL.duas` is `NUL`). */
const WINDOWS_DEVICE = /^(con|prn|aux|nul|com[0-9\u00b9\u00b2\u00b3]|lpt[0-9\u00b9\u00b2\u00b3]) *(\.|$)/i;

/**
 * Why `key` cannot name a file on Windows, or undefined when it can. Windows
 * refuses `<>:"|?*` in names (and takes `a:b` for the stream `b` of the file
 * `a`, which no directory listing shows), and sends the device names `CON`,
 * `PRN`, `AUX`, `NUL`, `COM0`–`COM9` and `LPT0`–`LPT9` (with any extension)
 * to the device: a session saved there would be lost. Source: Microsoft,
 * "Naming Files, Paths, and Namespaces".
 *
 * @param key - a key {@link validateKey} accepted
 * @returns the reason, for an {@link InvalidKeyError}
 * @internal used by FileBackend on Windows
 */
export function windowsFileNameProblem(key: string): string | undefined {
  const bad = WINDOWS_FORBIDDEN.exec(key);
  if (bad) {
    return `a file name on Windows cannot hold ${JSON.stringify(bad[0])} (use another character, or a SQLite, Redis or PostgreSQL backend, whose keys may)`;
  }
  if (WINDOWS_DEVICE.test(key)) {
    return `${JSON.stringify(key.split(".")[0]?.trim())} is a Windows device name: a file of that name is the device (use another key, or a SQLite, Redis or PostgreSQL backend)`;
  }
  return undefined;
}
