/**
 * Unknown-option checks shared by every public function and constructor
 * that takes an options object: a key the options type does not declare
 * (a typo, or the original design's snake_case `base_dir`) is an
 * {@link InvalidOptionError} naming the key and the option it most likely
 * meant ("did you mean baseDir?"), never silently ignored.
 *
 * Each call site lists its type's keys once with {@link optionKeys}, typed
 * against the options interface, so the list cannot drift from the type: a
 * key added to the interface and not to the list (or the reverse) is a
 * compile error.
 *
 * @module
 */
import { InvalidOptionError } from "./errors.js";

/** Every key of every member of a union (`keyof (A | B)` is only the common keys). */
type KeysOfUnion<T> = T extends unknown ? keyof T : never;

/**
 * One `true` per key of an options type (deprecated aliases included), as
 * {@link optionKeys} takes them.
 *
 * @typeParam T - the options interface (or a union of them)
 */
export type OptionKeyList<T> = { readonly [K in KeysOfUnion<NonNullable<T>> & string]-?: true };

/** The accepted keys of one options type, made by {@link optionKeys}. */
export interface KnownOptions {
  /** The accepted keys. */
  readonly keys: ReadonlySet<string>;
}

/**
 * Declares the accepted keys of an options type, for {@link checkOptions}.
 *
 * @typeParam T - the options interface; every key of it must be listed, and nothing else
 * @param keys - `{ key: true, … }`, one entry per key of `T`
 * @returns the key set
 * @example
 * const KNOWN = optionKeys<FileBackendOptions>({ baseDir: true, gzip: true, lockTimeoutMs: true });
 */
export function optionKeys<T>(keys: OptionKeyList<T>): KnownOptions {
  return Object.freeze({ keys: new Set(Object.keys(keys)) });
}

/**
 * Refuses an options object holding a key its type does not declare.
 * `undefined` and `null` pass (no options); a value that is not an object is
 * left to the caller's own checks.
 *
 * @param component - whose options, for the message, e.g. `configure`, `redis`, `saveState`
 * @param options - the options object as given
 * @param known - its accepted keys, from {@link optionKeys}
 * @param extra - further accepted keys (for a function that takes `T & { more }`)
 * @throws {InvalidOptionError} (code `INVALID_OPTION`, `option` = the unknown key) naming the
 *   likely intended option and listing the accepted ones
 * @example
 * checkOptions("configure", { base_dir: "x" }, KNOWN);
 * // InvalidOptionError: [dumplings:configure] option base_dir: unknown option (did you mean baseDir?); …
 */
export function checkOptions(
  component: string,
  options: unknown,
  known: KnownOptions,
  extra?: readonly string[],
): void {
  if (options === null || typeof options !== "object") return;
  for (const key of Object.keys(options)) {
    if (known.keys.has(key) || extra?.includes(key)) continue;
    const accepted = [...known.keys, ...(extra ?? [])];
    const guess = suggestOption(key, accepted);
    const hint = guess === undefined ? "" : ` (did you mean ${guess}?)`;
    const list = accepted.length > 0 ? `accepted options: ${[...accepted].sort().join(", ")}` : "it takes no options";
    throw new InvalidOptionError(component, key, `unknown option${hint}; ${list}`);
  }
}

/** Lower case without separators: `base_dir`, `base-dir`, `BaseDir` → `basedir`. */
function loose(name: string): string {
  return name.toLowerCase().replace(/[_\-\s.]/g, "");
}

/** Edit distance (insertions, deletions, substitutions), bounded by `max` (returns max + 1 beyond it). */
function distance(a: string, b: string, max: number): number {
  if (Math.abs(a.length - b.length) > max) return max + 1;
  let prev = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    let best = i;
    for (let j = 1; j <= b.length; j++) {
      const v = Math.min(
        (prev[j] as number) + 1,
        (cur[j - 1] as number) + 1,
        (prev[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
      cur.push(v);
      best = Math.min(best, v);
    }
    if (best > max) return max + 1;
    prev = cur;
  }
  return prev[b.length] as number;
}

/**
 * The accepted option an unknown key most likely meant: the same name in
 * another case or spelling (`base_dir` → `baseDir`), else one it is the
 * start of or starts with (`ttl` → `ttlMs`), else the closest by edit
 * distance (at most 1 edit per 4 characters, at least 2), else none.
 *
 * @param key - the unknown key
 * @param accepted - the accepted keys
 * @returns the accepted key, or undefined
 * @example
 * suggestOption("db_path", ["baseDir", "dbPath"]) // "dbPath"
 */
export function suggestOption(key: string, accepted: readonly string[]): string | undefined {
  const k = loose(key);
  const same = accepted.find((a) => loose(a) === k);
  if (same !== undefined) return same;
  // A unit or word left out or added: `ttl` → `ttlMs`, `dbPathName` → `dbPath`.
  if (k.length >= 3) {
    const prefix = accepted.find((a) => loose(a).startsWith(k) || k.startsWith(loose(a)));
    if (prefix !== undefined) return prefix;
  }
  const max = Math.max(2, Math.floor(k.length / 4));
  let best: string | undefined;
  let bestDistance = max + 1;
  for (const a of accepted) {
    const d = distance(k, loose(a), max);
    if (d < bestDistance) {
      best = a;
      bestDistance = d;
    }
  }
  return best;
}

/**
 * An option's value as the caller gave it, for an error message: text quoted (`"5"`), numbers as
 * written (`NaN`, `Infinity`, `-1`; JSON would print `null` for the first two), `undefined`,
 * `null`, `5n`, `a function`, a symbol's description, an object or array as JSON (cut at 80 characters).
 *
 * @param value - the value given
 * @returns its text for a message
 * @example
 * shownValue(Number.NaN) // "NaN"
 * shownValue("5") // "\"5\""
 */
export function shownValue(value: unknown): string {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value);
    case "number":
    case "boolean":
    case "undefined":
    case "symbol":
      return String(value);
    case "bigint":
      return `${value}n`;
    case "function":
      return "a function";
    default: {
      if (value === null) return "null";
      let text: string | undefined;
      try {
        text = JSON.stringify(value);
      } catch {
        text = undefined; // a cycle, a BigInt inside
      }
      if (text === undefined) return Object.prototype.toString.call(value);
      return text.length > 80 ? `${text.slice(0, 80)}…` : text;
    }
  }
}
