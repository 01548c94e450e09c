/** Whole-text and whole-bytes decoding of `.duas` (gzip, strict UTF-8), over the line parser. */

import { isUtf8 } from "node:buffer";
import { gunzipSync } from "node:zlib";
import { FormatError } from "../errors.js";
import type { Message } from "../messages.js";
import { checkOptions, optionKeys } from "../options.js";
import type { AgentState } from "../state.js";
import { crc32 } from "./crc.js";
import type { PriorCommit } from "./header.js";
import { DuasLineParser } from "./parse.js";

/** The keys of the options of `decodeState` / `decodeStateBytes`. */
const DECODE_OPTIONS = optionKeys<{ source?: string }>({ source: true });

/**
 * Decodes `.duas` text into a validated state. Never returns a partly filled
 * state and never throws a bare `SyntaxError`.
 *
 * @param text - the whole `.duas` text
 * @param options - `source`: file name (or label) used in error messages
 * @returns the state (`meta.messageCount === history.length`)
 * @throws {FormatError} with `file`, 1-based `line`, and `version` for an unknown
 *   `format_version`: malformed/duplicate/missing/unknown keys, bad numbers, bad
 *   JSON, invalid messages, a missing final newline, or a `message_count` that
 *   does not match the history (a truncated file)
 * @example
 * const state = decodeState(readFileSync("a.duas", "utf8"), { source: "a.duas" });
 */
export function decodeState(text: string, options: { source?: string } = {}): AgentState {
  checkOptions("decodeState", options, DECODE_OPTIONS);
  return decodeStateDetailed(text, options).state;
}

/**
 * {@link decodeState}, also returning `[META] revision` (written by FileBackend). @internal
 *
 * @param text - the whole `.duas` text
 * @param options - `source`: file name used in errors
 * @returns the state and the revision (`undefined` when the file has none)
 * @throws {FormatError} as {@link decodeState}
 */
export function decodeStateDetailed(text: string, options: DecodeContext = {}): DecodedDetail {
  try {
    return decodeText(text, options);
  } catch (e) {
    if (e instanceof FormatError) throw e;
    // Defensive: e.g. a RangeError from absurdly deep nesting in a hand-made file.
    throw new FormatError(`cannot decode: ${(e as Error)?.message ?? String(e)}`, { file: options.source, cause: e });
  }
}

/** What the detailed decoders return: the state, and `[META] revision` and `key` when present. @internal */
export interface DecodedDetail {
  state: AgentState;
  revision: number | undefined;
  /** `[META] key` (FileBackend: the key the file was written under), when present. */
  key?: string | undefined;
}

/** What the internal decoders are told about their input. @internal */
export interface DecodeContext {
  /** File name (or label) used in errors. */
  source?: string;
  /** Read the header's `prior_commit` instead of its own commit ({@link DuasLineParser.useCommit}). */
  commit?: PriorCommit;
}

function decodeText(text: string, options: DecodeContext): DecodedDetail {
  const parser = new DuasLineParser(options.source);
  if (text === "") parser.fail("empty input: not a .duas file", { line: 1 });
  const lines = text.split("\n");
  const last = lines.pop();
  const history: Message[] = [];
  let commit = options.commit;
  for (const l of lines) {
    const m = parser.feed(l);
    if (m !== undefined) history.push(m);
    else if (commit !== undefined && parser.header !== undefined) {
      parser.useCommit(commit); // right after the [HISTORY] line
      commit = undefined;
    }
  }
  if (last !== "") {
    parser.feed(last ?? "");
    parser.fail("truncated: the last line does not end with a newline");
  }
  const h = parser.end();
  return { state: { meta: h.meta, config: h.config, state: h.state, history }, revision: h.revision, key: h.key };
}

/**
 * {@link decodeStateDetailed} over the UTF-8 bytes of a plain `.duas` file,
 * without decoding them into one string first: each line is decoded on its
 * own (ASCII lines become one-byte strings), and the history is checked
 * against `history_crc32` in one pass over its bytes. Same result and errors
 * as `decodeStateDetailed(decodeUtf8(bytes))`. @internal used by FileBackend
 *
 * @param bytes - the file's bytes (not gzip)
 * @param options - `source`: file name used in errors
 * @returns the state and the revision (`undefined` when the file has none)
 * @throws {FormatError} as {@link decodeStateDetailed}, and for invalid UTF-8 (with its line)
 */
export function decodeBytesDetailed(bytes: Buffer, options: DecodeContext = {}): DecodedDetail {
  const source = options.source;
  // Anything unusual (invalid UTF-8, no final newline) takes the text path, whose errors name the line.
  if (bytes.length === 0 || bytes[bytes.length - 1] !== 0x0a || !isUtf8(bytes)) {
    return decodeStateDetailed(decodeUtf8(bytes, source), options);
  }
  try {
    const parser = new DuasLineParser(source);
    let pos = 0;
    while (parser.header === undefined && pos < bytes.length) {
      const nl = bytes.indexOf(0x0a, pos);
      parser.feed(bytes.toString("utf8", pos, nl));
      pos = nl + 1;
    }
    const history: Message[] = [];
    if (parser.header !== undefined) {
      if (options.commit !== undefined) parser.useCommit(options.commit);
      const body = bytes.subarray(pos);
      // A \r before a \n is not in the checksum; a blank line (not either) sends the read down the text path below.
      const given = body.length > 0 && body.indexOf(0x0d) < 0;
      if (given) parser.historyCrcOfBytes(crc32(body));
      while (pos < bytes.length) {
        const nl = bytes.indexOf(0x0a, pos);
        const m = parser.feed(bytes.toString("utf8", pos, nl));
        // a blank (whitespace) line is not part of the checksum: the text path checks it line by line
        if (m === undefined && given) return decodeStateDetailed(decodeUtf8(bytes, source), options);
        if (m !== undefined) history.push(m);
        pos = nl + 1;
      }
    }
    const h = parser.end();
    return { state: { meta: h.meta, config: h.config, state: h.state, history }, revision: h.revision, key: h.key };
  } catch (e) {
    if (e instanceof FormatError) throw e;
    throw new FormatError(`cannot decode: ${(e as Error)?.message ?? String(e)}`, { file: source, cause: e });
  }
}

/**
 * Decodes `.duas` bytes: gzip is detected by its magic bytes (`1f 8b`), then
 * the text must be valid UTF-8.
 *
 * @param bytes - file contents (`.duas` or `.duas.gz`)
 * @param options - `source`: file name used in error messages
 * @returns the state
 * @throws {FormatError} for corrupt gzip, invalid UTF-8 (with its line), or any
 *   error of {@link decodeState}
 * @example
 * const state = decodeStateBytes(readFileSync("a.duas.gz"), { source: "a.duas.gz" });
 */
export function decodeStateBytes(bytes: Uint8Array, options: { source?: string } = {}): AgentState {
  checkOptions("decodeStateBytes", options, DECODE_OPTIONS);
  let data = bytes;
  if (isGzip(bytes)) {
    try {
      data = gunzipSync(bytes);
    } catch (e) {
      throw new FormatError(`corrupt gzip data: ${(e as Error).message}`, { file: options.source, cause: e });
    }
  }
  return decodeState(decodeUtf8(data, options.source), options);
}

/** True when `bytes` start with the gzip magic `1f 8b`. */
export function isGzip(bytes: Uint8Array): boolean {
  return bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
}

const utf8 = new TextDecoder("utf-8", { fatal: true });
const utf8KeepBom = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * Decodes strict UTF-8 (a leading BOM is removed). @internal
 *
 * @param bytes - the bytes
 * @param source - file name for errors
 * @param firstLine - line number of the first byte's line, for errors
 * @param keepBom - keep a leading U+FEFF (for a piece that does not start the text) @default false
 * @throws {FormatError} naming the line holding the first invalid byte
 */
export function decodeUtf8(bytes: Uint8Array, source?: string, firstLine = 1, keepBom = false): string {
  // Validated by simdutf, then decoded by Buffer's fast path: a fatal TextDecoder takes ICU's slow
  // path on non-ASCII text (it was a third of a 10,000-message load).
  if (bytes.length === 0) return "";
  if (isUtf8(bytes)) {
    const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const text = buf.toString("utf8");
    return !keepBom && text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
  }
  try {
    return (keepBom ? utf8KeepBom : utf8).decode(bytes);
  } catch (e) {
    let lineNo = firstLine;
    let start = 0;
    for (let i = 0; i <= bytes.length; i++) {
      if (i === bytes.length || bytes[i] === 0x0a) {
        try {
          utf8.decode(bytes.subarray(start, i));
        } catch {
          break;
        }
        lineNo++;
        start = i + 1;
      }
    }
    throw new FormatError("invalid UTF-8", { file: source, line: lineNo, cause: e });
  }
}
