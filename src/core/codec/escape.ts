/** The escaping rule of `.duas` string values (`[META]`, `[CONFIG]`): encode and decode one value. */

import { FormatError } from "../errors.js";

const NEEDS_QUOTE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029=#;[\]]/;
const EXTRA_ESCAPES = /[\u007f-\u009f\u2028\u2029]/g;
export const PLAIN_FORBIDDEN = /[\u0000-\u001f\u007f-\u009f]/;
export const IDENT = /^[A-Za-z_$][A-Za-z0-9_$]*$/;
export const JSON_NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

// ---------------------------------------------------------------------------
// Escaping

/**
 * Encodes a string value of `[META]`/`[CONFIG]` by the module's escaping rule.
 *
 * @param value - any string (lone surrogates and control characters included)
 * @returns the text written after `key = ` (plain, or a JSON string literal)
 * @example
 * encodeIniString("gpt-4o")   // 'gpt-4o'
 * encodeIniString("a\nb")     // '"a\\nb"'
 * encodeIniString(" x")       // '" x"'
 */
export function encodeIniString(value: string): string {
  // A long value (a prompt of many MB) is saved again and again unchanged: scan and quote it once.
  if (value.length >= LONG_VALUE && lastLong?.value === value) return lastLong.encoded;
  const encoded =
    value === "" ||
    value.charCodeAt(0) === 0x22 ||
    value !== value.trim() ||
    NEEDS_QUOTE.test(value) ||
    !value.isWellFormed()
      ? quoteString(value)
      : value;
  if (value.length >= LONG_VALUE) lastLong = { value, encoded };
  return encoded;
}

/** Length from which {@link encodeIniString} remembers its last value (one entry: strings compare in O(1) when identical). */
const LONG_VALUE = 64 * 1024;
let lastLong: { value: string; encoded: string } | undefined;

/** JSON string literal with C1 controls, U+2028/9 escaped too (JSON.stringify already escapes lone surrogates). */
export function quoteString(value: string): string {
  return JSON.stringify(value).replace(EXTRA_ESCAPES, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/**
 * Decodes a value written by {@link encodeIniString} (the raw text after `=`).
 *
 * @param raw - text after the `=`, surrounding whitespace allowed
 * @returns the string value
 * @throws {SyntaxError} only internally; callers wrap it into a {@link FormatError}
 */
export function decodeIniString(raw: string): string {
  const text = raw.trim();
  if (text.charCodeAt(0) !== 0x22) {
    // The writer quotes every value holding a control character, so a plain one is malformed input.
    if (PLAIN_FORBIDDEN.test(text)) throw new SyntaxError("a plain value must not contain control characters");
    return text;
  }
  const v: unknown = JSON.parse(text);
  if (typeof v !== "string") throw new SyntaxError("not a single JSON string literal");
  return v;
}
