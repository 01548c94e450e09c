/** Reading one long header value in pieces (a 50 MB prompt in bounded memory): its preview and length. */

import { DuasLineParser, jsonStringEnd } from "../../core/codec/parse.js";

/** A value of a header line summarised by {@link LongValueSummary}. */
export interface ValueSummary {
  /** The value's first `clipAt` UTF-16 code units: decoded for a string, the JSON text for a JSON value. */
  preview: string;
  /** Its whole length in UTF-16 code units (a string's `length`; for a JSON value, its text's). */
  length: number;
}

/**
 * The `key = value` split of a header line as {@link DuasLineParser} reads it
 * (a quoted `field."…"` name included), from the start of the line alone.
 * @internal used by FileBackend's bounded header read
 *
 * @param text - the start of a line (at least through its `=`)
 * @returns the key as written and the index just after its `=`, or undefined when no `=` is found
 */
export function iniKeyOf(text: string): { key: string; valueStart: number } | undefined {
  const lead = text.length - text.trimStart().length;
  const t = text.slice(lead);
  if (t.startsWith('field."')) {
    const end = jsonStringEnd(t, 6);
    if (end < 0) return undefined;
    const eq = t.indexOf("=", end);
    if (eq < 0 || t.slice(end, eq).trim() !== "") return undefined;
    return { key: t.slice(0, end), valueStart: lead + eq + 1 };
  }
  const eq = t.indexOf("=");
  return eq < 0 ? undefined : { key: t.slice(0, eq).trim(), valueStart: lead + eq + 1 };
}

/**
 * Reads one header value in pieces, keeping only its first `clipAt` code
 * units and its length: how a reader shows a value of many MB (a 50 MB
 * prompt) in bounded memory. `string` decodes the INI string rule (plain, or a
 * JSON string literal); `json` keeps the JSON text as written. It does not
 * validate the value: the reader checks the bytes against `header_crc32`
 * (see {@link DuasLineParser.checkSeal}). @internal used by FileBackend
 *
 * @example
 * const s = new LongValueSummary("string", 80);
 * s.push(' "ab\\n'); s.push('c"');
 * s.finish(); // { preview: "ab\nc", length: 4 }
 */
export class LongValueSummary {
  private started = false;
  /** The value is a JSON string literal (else plain text, or JSON text for `json`). */
  quoted = false;
  private closed = false;
  /** 0: not in an escape; 1: after `\`; 2–5: hex digits of `\u` still to come. */
  private escape = 0;
  private hex = "";
  private trailingSpace = 0;
  private count = 0;
  private text = "";
  /** Set when the value is not one string literal (the caller reads the line whole instead). */
  bad = false;

  /**
   * @param kind - `string` (an INI string, e.g. `prompt`) or `json` (a `[STATE]` value)
   * @param clipAt - how many code units of the value to keep
   */
  constructor(
    readonly kind: "string" | "json",
    readonly clipAt: number,
  ) {}

  /** Continues the value with `chunk` (text after the `=`, in order; the line's `\n` excluded). */
  push(chunk: string): void {
    let i = 0;
    if (!this.started) {
      while (i < chunk.length && (chunk.charCodeAt(i) === 0x20 || chunk.charCodeAt(i) === 0x09)) i++;
      if (i === chunk.length) return;
      this.started = true;
      this.quoted = this.kind === "string" && chunk.charCodeAt(i) === 0x22;
      if (this.quoted) i++;
    }
    if (!this.quoted) {
      for (let j = i; j < chunk.length; j++) {
        const c = chunk.charCodeAt(j);
        this.trailingSpace = c === 0x20 || c === 0x09 || c === 0x0d ? this.trailingSpace + 1 : 0;
      }
      this.count += chunk.length - i;
      if (this.text.length < this.clipAt) this.text += chunk.slice(i, i + this.clipAt - this.text.length);
      return;
    }
    let run = i;
    const flush = (end: number) => {
      if (end > run && this.text.length < this.clipAt) {
        this.text += chunk.slice(run, Math.min(end, run + this.clipAt - this.text.length));
      }
      this.count += end - run;
    };
    while (i < chunk.length) {
      if (this.closed) {
        if (!/^[ \t\r]*$/.test(chunk.slice(i))) this.bad = true;
        return;
      }
      if (this.escape === 0) {
        // the run of plain characters up to the next quote or backslash, found by the regex engine
        SPECIAL.lastIndex = i;
        const m = SPECIAL.exec(chunk);
        if (m === null) {
          flush(chunk.length);
          return;
        }
        flush(m.index);
        if (chunk.charCodeAt(m.index) === 0x22) this.closed = true;
        else this.escape = 1;
        i = m.index + 1;
        run = i;
        continue;
      }
      const ch = chunk[i] as string;
      if (this.escape === 1) {
        const simple = ESCAPES[ch];
        if (ch === "u") {
          this.escape = 2;
          this.hex = "";
        } else {
          if (simple === undefined) this.bad = true;
          else this.unit(simple);
          this.escape = 0;
        }
      } else {
        this.hex += ch;
        if (this.escape++ === 5) {
          if (!/^[0-9a-fA-F]{4}$/.test(this.hex)) this.bad = true;
          this.unit(String.fromCharCode(Number.parseInt(this.hex, 16)));
          this.escape = 0;
        }
      }
      i++;
      run = i;
    }
  }

  private unit(c: string): void {
    if (this.text.length < this.clipAt) this.text += c;
    this.count++;
  }

  /**
   * @returns the preview and length, or undefined when the value was not one
   *   well-formed string literal (or an empty/unterminated one)
   */
  finish(): ValueSummary | undefined {
    if (this.quoted && (!this.closed || this.escape !== 0)) this.bad = true;
    if (this.bad || !this.started) return undefined;
    const length = this.quoted ? this.count : this.count - this.trailingSpace;
    return { preview: this.text.slice(0, Math.min(this.clipAt, length)), length };
  }
}

const SPECIAL = /["\\]/g;
const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
