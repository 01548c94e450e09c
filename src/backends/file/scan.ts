/**
 * Reading a plain `.duas` file's bytes: its header (whole, or in bounded memory with long values
 * clipped), where its committed history ends, and the committed lines checked against
 * `history_crc32`.
 *
 * @module
 */

import { readSync } from "node:fs";
import { decodeUtf8 } from "../../core/codec/bytes.js";
import { crc32, crcHex, HISTORY_CRC_START, historyCrc } from "../../core/codec/crc.js";
import { encodeIniString } from "../../core/codec/escape.js";
import type { PriorCommit } from "../../core/codec/header.js";
import { DuasLineParser, type ParsedHeader } from "../../core/codec/parse.js";
import { FormatError } from "../../core/errors.js";
import type { ClippedValue } from "../types.js";
import { eachLine, lineHasContent, NEWLINE, readAtBuffer, readAtFd } from "./io.js";
import { historyLinesCrc, priorCommitToUse } from "./power-loss.js";
import { iniKeyOf, LongValueSummary } from "./value-summary.js";

export const HISTORY_MARKER = Buffer.from("\n[HISTORY]\n");

export const HISTORY_LINE = "[HISTORY]\n";

/**
 * Reads a plain `.duas` file's header bytes (through the `[HISTORY]` line) with
 * positional reads, or undefined when no `[HISTORY]` line is found (then the
 * caller falls back to a whole-file read and its own checks).
 */
export function readHead(fd: number): Buffer | undefined {
  for (let size = 64 * 1024; size <= 64 * 1024 * 1024; size *= 4) {
    const b = Buffer.allocUnsafe(size);
    const n = readSync(fd, b, 0, size, 0);
    const i = b.subarray(0, n).indexOf(HISTORY_MARKER);
    if (i >= 0) return Buffer.from(b.subarray(0, i + HISTORY_MARKER.length));
    if (n < size) return undefined;
  }
  return undefined;
}

/**
 * Reads the `message_count` history lines of a plain file from byte `start`
 * (just after `[HISTORY]`) and checks them against the header's
 * `history_crc32`, with the parser's rules (a `\r` before the `\n` and blank
 * lines are not part of the checksum), before {@link FileBackend.iterHistory}
 * returns any of them. Lines past the count are an uncommitted tail and not
 * read. A header without `history_crc32` (not written by FileBackend) has
 * nothing to check here; its lines are checked one by one as they stream.
 *
 * @throws {FormatError} when fewer lines than `message_count` are there, or they do not match
 */
export function verifyCommitted(fd: number, start: number, parser: DuasLineParser): void {
  const header = parser.header;
  if (header === undefined || header.historyCrc32 === undefined) return;
  const target = header.meta.messageCount;
  const { count, crc } = historyLinesCrc(readAtFd(fd), start, target);
  if (count === target && crcHex(crc) === header.historyCrc32) return;
  // Something is wrong: the lines are parsed (nothing returned) for the error the stream would give at
  // its line (invalid UTF-8, bad JSON, a truncated last line), else the count or checksum error.
  const file = parser.source;
  const more = () => parser.messages < target;
  const rest = eachLine(readAtFd(fd), start, more, (bytes) =>
    parser.feed(decodeUtf8(bytes, file, parser.line + 1, true)),
  );
  if (rest !== undefined && more()) {
    parser.feed(decodeUtf8(rest, file, parser.line + 1, true));
    parser.fail("truncated: the last line does not end with a newline");
  }
  parser.end();
  parser.fail(
    "the history does not match history_crc32 (a message was changed, duplicated, reordered or cut: edited or corrupted file)",
    { line: header.historyLine },
  );
}

/** Header lines longer than this many bytes are read in pieces by {@link readHeadBounded}. */
export const LONG_LINE_BYTES = 64 * 1024;

/** The `[CONFIG]` keys whose value is an INI string (a long one can be clipped), with their paths. */
export const CLIPPABLE_CONFIG: ReadonlyMap<string, string> = new Map([
  ["prompt", "config.prompt"],
  ["api_provider", "config.apiProvider"],
  ["api_key_env", "config.apiKeyEnv"],
  ["model_name", "config.modelName"],
]);

/** What {@link readHeadBounded} read: the parsed header, where the history starts, the values it clipped. */
export interface BoundedHead {
  parser: DuasLineParser;
  /** Byte offset just after the `[HISTORY]` line. */
  end: number;
  clipped: ClippedValue[];
}

/**
 * Reads a plain `.duas` file's header with memory bounded whatever its size:
 * lines up to {@link LONG_LINE_BYTES} are parsed as {@link feedHeader} parses
 * them; a longer `[CONFIG]` string or `[STATE]` value is read in 64 KB pieces
 * and kept as its first `clipAt` code units and its length
 * ({@link LongValueSummary}), the parser given a short line in its place.
 * The bytes of the body (`[CONFIG]` and `[STATE]`, as written) are checksummed
 * as they pass, and the header is accepted only when that matches
 * `header_crc32` (see {@link DuasLineParser.checkSeal}): a clipped value is
 * exactly what the writer wrote.
 *
 * @returns the header, or undefined when the bounded read does not apply (no `[HISTORY]` line, a long
 *   line in `[META]` or of a non-string key, a header without `header_crc32`, bytes that do not match
 *   it): the caller then reads the header whole, whose checks give the error if there is one
 * @throws {FormatError} for a malformed short header line (as {@link feedHeader})
 */
export function readHeadBounded(fd: number, file: string, clipAt: number): BoundedHead | undefined {
  const parser = new DuasLineParser(file);
  const chunk = Buffer.allocUnsafe(64 * 1024);
  const clipped: ClippedValue[] = [];
  let section = "";
  let bodyStart = -1; // offset after the header_crc32 line
  let bodyEnd = -1; // offset of the padding comment or [HISTORY]
  let bodyCrc = 0;
  let lineStart = 0; // file offset of the current line
  let parts: Buffer[] = []; // the current (short so far) line's bytes
  let partBytes = 0;
  let long:
    | { key: string; summary: LongValueSummary; decoder: InstanceType<typeof TextDecoder>; path: string }
    | undefined;
  let deferred = false; // a line was summarised: header_crc32 is checked against the body's bytes

  /** Starts reading the current line in pieces; false when it cannot be. */
  const startLong = (prefix: Buffer): boolean => {
    if (bodyStart < 0 || bodyEnd >= 0 || (section !== "CONFIG" && section !== "STATE")) return false;
    const decoder = new TextDecoder("utf-8", { fatal: true });
    let text: string;
    try {
      text = decoder.decode(prefix, { stream: true });
    } catch {
      return false;
    }
    const split = iniKeyOf(text);
    if (split === undefined) return false;
    const { key, valueStart } = split;
    let path: string | undefined;
    let kind: "string" | "json" = "string";
    if (section === "CONFIG") path = CLIPPABLE_CONFIG.get(key);
    else if (key === "current_task_id") path = "state.currentTaskId";
    else if (key.startsWith("field.")) {
      kind = "json";
      let name = key.slice(6);
      try {
        if (name.startsWith('"')) name = JSON.parse(name) as string;
      } catch {
        return false;
      }
      path = `state.fields.${name}`;
    }
    if (path === undefined) return false;
    const summary = new LongValueSummary(kind, clipAt);
    summary.push(text.slice(valueStart));
    long = { key, summary, decoder, path };
    parser.deferSeal();
    deferred = true;
    return true;
  };

  /** A whole line (without its `\n`), read at `at`; returns true once `[HISTORY]` is read. */
  const shortLine = (bytes: Buffer, at: number): boolean => {
    const text = decodeUtf8(bytes, file, parser.line + 1, parser.line > 0);
    const trimmed = text.trim();
    if (bodyStart >= 0 && bodyEnd < 0 && section === "STATE" && (trimmed.startsWith("#") || trimmed === "[HISTORY]")) {
      bodyEnd = at;
    }
    parser.feed(text);
    if (trimmed.startsWith("[")) section = trimmed.slice(1, -1);
    else if (section === "META" && /^header_crc32\s*=/.test(trimmed)) bodyStart = at + bytes.length + 1;
    return parser.header !== undefined;
  };

  /**
   * Ends the long line: the parser gets `key = <short value>` in its place. False when the value cannot
   * be summarised (then the header is read whole).
   */
  const endLong = (): boolean => {
    const { key, summary, decoder, path } = long as NonNullable<typeof long>;
    long = undefined;
    try {
      summary.push(decoder.decode());
    } catch {
      return false;
    }
    const s = summary.finish();
    if (s === undefined || (path === "state.currentTaskId" && !summary.quoted)) return false;
    const whole = s.length <= clipAt;
    if (!whole) clipped.push({ path, kind: summary.kind, preview: s.preview, length: s.length });
    const value =
      summary.kind === "json"
        ? whole
          ? s.preview
          : "null"
        : path === "state.currentTaskId"
          ? JSON.stringify(s.preview)
          : encodeIniString(s.preview);
    parser.feed(`${key} = ${value}`);
    return true;
  };

  for (let pos = 0; ; ) {
    const n = readSync(fd, chunk, 0, chunk.length, pos);
    if (n === 0) return undefined; // no [HISTORY] line: the whole read gives the error
    let i = 0;
    while (i < n) {
      const found = chunk.indexOf(0x0a, i);
      const lineEnds = found >= 0 && found < n;
      const end = lineEnds ? found : n;
      const piece = chunk.subarray(i, end);
      if (long !== undefined) {
        bodyCrc = crc32(piece, bodyCrc);
        try {
          long.summary.push(long.decoder.decode(piece, { stream: true }));
        } catch {
          return undefined;
        }
      } else {
        parts.push(Buffer.from(piece));
        partBytes += piece.length;
        if (partBytes > LONG_LINE_BYTES && !lineEnds) {
          const prefix = Buffer.concat(parts);
          parts = [];
          partBytes = 0;
          if (!startLong(prefix)) return undefined;
          bodyCrc = crc32(prefix, bodyCrc);
        }
      }
      if (!lineEnds) break;
      // a line ends at `end`
      const at = lineStart;
      lineStart = pos + end + 1;
      if (long !== undefined) {
        bodyCrc = crc32(NEWLINE, bodyCrc);
        if (!endLong()) return undefined;
      } else {
        const bytes = parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts);
        parts = [];
        partBytes = 0;
        const inBody = bodyStart >= 0 && at >= bodyStart;
        if (shortLine(bytes, at)) {
          if (!deferred) return { parser, end: lineStart, clipped };
          return parser.checkSeal(bodyCrc, bodyEnd - bodyStart) ? { parser, end: lineStart, clipped } : undefined;
        }
        if (inBody && bodyEnd < 0) bodyCrc = crc32(NEWLINE, crc32(bytes, bodyCrc));
      }
      i = end + 1;
    }
    pos += n;
  }
}

/**
 * Feeds the header bytes of {@link readHead} (through the `[HISTORY]` line) to `parser`, line by line
 * with the same UTF-8 rules as the streaming read.
 *
 * @throws {FormatError} for a malformed header or one that fails `header_crc32`
 */
export function feedHeader(parser: DuasLineParser, head: Buffer, file: string): void {
  let pos = 0;
  while (pos < head.length) {
    const nl = head.indexOf(0x0a, pos);
    const end = nl < 0 ? head.length : nl;
    parser.feed(decodeUtf8(head.subarray(pos, end), file, parser.line + 1, parser.line > 0));
    pos = end + 1;
  }
}

/**
 * Scans a plain `.duas` file's bytes: parses the header and finds the end of
 * the `message_count`-th history line (the committed end). With `verify`, the
 * committed lines are also checked against `history_crc32` (a writer does so
 * before it truncates what follows them: a duplicated or edited line must not
 * turn a real message into a "tail" that is cut off).
 *
 * @throws {FormatError} for a bad header, fewer complete history lines than `message_count`,
 *   or (with `verify`) lines that do not match `history_crc32`
 */
export function scanPlain(
  buf: Buffer,
  source: string,
  verify = false,
): {
  header: ParsedHeader;
  headerEnd: number;
  end: number;
  first: [number, number];
  last: [number, number];
  /** The header's `prior_commit`, when that is the commit the history holds (see {@link priorCommitToUse}). */
  commit: PriorCommit | undefined;
  /** The header's own revision (newer than `header.revision` when `commit` is set). */
  written: number | undefined;
} {
  const parser = new DuasLineParser(source);
  let pos = 0;
  let header: ParsedHeader | undefined;
  while (header === undefined) {
    const nl = buf.indexOf(0x0a, pos);
    if (nl < 0) {
      if (pos === 0 && buf.length === 0) parser.fail("empty file: not a .duas file", { line: 1 });
      parser.feed(decodeUtf8(buf.subarray(pos), source, parser.line + 1));
      parser.fail("truncated: the header has no [HISTORY] line");
    }
    parser.feed(decodeUtf8(buf.subarray(pos, nl), source, parser.line + 1));
    pos = nl + 1;
    header = parser.header;
  }
  const headerEnd = pos;
  const written = header.revision;
  const commit = priorCommitToUse(header, headerEnd, readAtBuffer(buf));
  if (commit !== undefined) {
    parser.useCommit(commit);
    header = parser.header as ParsedHeader;
  }
  let n = 0;
  let first: [number, number] = [pos, pos];
  let last: [number, number] = [pos, pos];
  let crc = verify && header.historyCrc32 !== undefined ? HISTORY_CRC_START : undefined;
  while (n < header.meta.messageCount) {
    const nl = buf.indexOf(0x0a, pos);
    if (nl < 0) {
      throw new FormatError(
        `message_count is ${header.meta.messageCount} but [HISTORY] holds only ${n} complete lines (truncated file)`,
        { file: source },
      );
    }
    if (lineHasContent(buf, pos, nl)) {
      if (n === 0) first = [pos, nl];
      last = [pos, nl];
      n++;
      if (crc !== undefined) crc = historyCrc(crc, buf.subarray(pos, buf[nl - 1] === 0x0d ? nl - 1 : nl));
    }
    pos = nl + 1;
  }
  if (crc !== undefined && crcHex(crc) !== header.historyCrc32) {
    throw new FormatError(
      "the history does not match history_crc32 (a message was changed, duplicated, reordered or cut: edited or corrupted file)",
      { file: source, line: header.historyLine },
    );
  }
  // Only files written by FileBackend (they carry a revision) can have an uncommitted tail after the
  // message_count-th line. Any other file (hand-written, or one whose checksum lines were removed by
  // hand) is read whole, with decodeState's rules (no extra lines).
  const whole = header.revision === undefined || header.handWritten === true;
  return { header, headerEnd, end: whole ? buf.length : pos, first, last, commit, written };
}
