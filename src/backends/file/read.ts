/**
 * The read paths of `FileBackend`: a whole file loaded (the header journal applied, re-read while
 * a writer moves the header: a seqlock), and the history streamed line by line from one open file.
 *
 * @module
 */

import { closeSync, constants, createReadStream, fstatSync, openSync, readFileSync, readSync } from "node:fs";
import { createGunzip, gunzipSync } from "node:zlib";
import { decodeBytesDetailed, decodeStateDetailed, decodeUtf8, isGzip } from "../../core/codec/bytes.js";
import { encodeHeader } from "../../core/codec/header.js";
import { DuasLineParser, type ParsedHeader } from "../../core/codec/parse.js";
import { ConflictError, FormatError } from "../../core/errors.js";
import type { Message } from "../../core/messages.js";
import type { AgentState } from "../../core/state.js";
import type { ClippedValue } from "../types.js";
import { applyJournal, type HeaderJournals, journalPending } from "./header-journal.js";
import { NOFOLLOW, PAGE, readAtFd, splitLines } from "./io.js";
import { priorCommitToUse } from "./power-loss.js";
import { feedHeader, readHead, readHeadBounded, scanPlain, verifyCommitted } from "./scan.js";

/** What {@link FileBackend}'s line reader leaves behind: the parser (its header) and the values it clipped. */
export interface LinesRef {
  parser: DuasLineParser;
  clipped: ClippedValue[];
}

/** True when the file's first bytes are no longer `before` (a writer updated the header meanwhile). */
export function headerMoved(fd: number, before: Buffer): boolean {
  const now = Buffer.alloc(before.length);
  const n = readSync(fd, now, 0, now.length, 0);
  return n !== before.length || !now.equals(before);
}

/** What the read paths need of their backend. */
export interface ReadContext {
  /** The backend's name, for errors. */
  readonly name: string;
  readonly journals: HeaderJournals;
  /** Refuses a file written under another key that names the same file (see `FileBackend`). */
  assertKeyOf(key: string, file: string, stored: string | undefined): void;
}

/** Reads and decodes one file: the committed part of a plain file (seqlock-checked), or a whole gzip file. */
export function readFileWhole(
  ctx: ReadContext,
  key: string,
  file: string,
  gz: boolean,
): { state: AgentState; revision: number; key: string | undefined } {
  if (gz) {
    const gfd = openSync(file, constants.O_RDONLY | NOFOLLOW);
    let raw: Buffer;
    try {
      raw = readFileSync(gfd);
    } finally {
      closeSync(gfd);
    }
    if (!isGzip(raw)) {
      // Plain text under a .duas.gz name: read as a plain file (its commits and tail rule), as the stream reads it.
      const scan = scanPlain(raw, file);
      const r = decodeBytesDetailed(raw.subarray(0, scan.end), { source: file, commit: scan.commit });
      return { state: r.state, revision: r.revision ?? 1, key: r.key };
    }
    let bytes: Buffer;
    try {
      bytes = gunzipSync(raw);
    } catch (e) {
      throw new FormatError(`corrupt gzip data: ${(e as Error).message}`, { file, cause: e });
    }
    const r = decodeStateDetailed(decodeUtf8(bytes, file), { source: file });
    return { state: r.state, revision: r.revision ?? 1, key: r.key };
  }
  for (let attempt = 0; ; attempt++) {
    const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
    try {
      // Header first, body second: a writer appends lines before it updates the fixed-width header
      // in place, so the body read afterwards holds at least the lines this header counts (later
      // appends are beyond message_count and ignored). Reading the whole file in one go could pair
      // a newer header with an older, shorter body while appends go on.
      const head = readHead(fd);
      const buf = readFileSync(fd);
      if (head && buf.length >= head.length) head.copy(buf, 0);
      try {
        const journal = ctx.journals.read(key);
        const data = (journal && applyJournal(buf, journal, fstatSync(fd).ino)) || buf;
        const scan = scanPlain(data, file);
        if (!head || journal) {
          // seqlock: the header must not have changed while we read (a writer updates it last)
          const again = Buffer.allocUnsafe(scan.headerEnd);
          const n = readSync(fd, again, 0, again.length, 0);
          if ((n !== again.length || !again.equals(buf.subarray(0, scan.headerEnd))) && attempt < 20) continue;
        }
        const r = decodeBytesDetailed(data.subarray(0, scan.end), { source: file, commit: scan.commit });
        return { state: r.state, revision: r.revision ?? 1, key: r.key };
      } catch (e) {
        // A header caught half-way through an in-place update by a writer of another process fails its
        // checksum: read again while the bytes on disk move; what stays malformed is the error.
        if (e instanceof FormatError && attempt < 20 && headerMoved(fd, buf.subarray(0, head?.length ?? PAGE))) {
          continue;
        }
        throw e;
      }
    } finally {
      closeSync(fd);
    }
  }
}

/**
 * Streams `file` through `ref.parser`: the header first, read whole with positional reads and
 * verified (`header_crc32`) before any message is returned, then the history from the same open
 * descriptor. The committed lines a header counts never change on its inode (writers append past
 * them, truncate only an uncommitted tail past the newest count, and replace the file by rename),
 * so the stream is exactly the saved state that header describes, whatever saves run meanwhile.
 * A header that fails its checks (a writer of another process caught half-way through an in-place
 * update, or a crash there) is read through the whole-file path, which applies the header journal
 * and re-reads while the bytes move; what stays malformed is the error.
 */
export async function* fileLines(
  ctx: ReadContext,
  key: string,
  file: string,
  gz: boolean,
  ref: LinesRef,
  options: { headerOnly?: boolean; revision?: number; clipAt?: number },
): AsyncGenerator<Message> {
  const { headerOnly = false, revision } = options;
  // The history stream needs the header's counts and checksums only: its long values are not kept.
  const clipAt = headerOnly ? options.clipAt : 0;
  const pin = (h: ParsedHeader) => {
    ctx.assertKeyOf(key, file, h.key);
    if (revision !== undefined && (h.revision ?? 1) !== revision) {
      throw new ConflictError(key, revision, h.revision ?? 1, ctx.name);
    }
  };
  const journal = gz ? undefined : ctx.journals.read(key);
  if (journal && journalPending(file, journal)) {
    // A save interrupted by a crash, not rolled forward yet (no writer since): the journal holds it.
    yield* linesOfWholeRead(ctx, key, file, ref, headerOnly, pin);
    return;
  }
  const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
  // As the whole-file path: a `.duas.gz` name holding plain text is read as plain text.
  const magic = Buffer.alloc(2);
  let stream: ReturnType<typeof createReadStream> | undefined;
  let start = 0;
  let whole = false;
  try {
    gz = gz && readSync(fd, magic, 0, 2, 0) === 2 && isGzip(magic);
    try {
      const bounded = gz || clipAt === undefined ? undefined : readHeadBounded(fd, file, clipAt);
      if (bounded !== undefined) {
        ref.parser = bounded.parser;
        ref.clipped = bounded.clipped;
        start = bounded.end;
      } else {
        const head = gz ? undefined : readHead(fd);
        if (head !== undefined) {
          const parser = new DuasLineParser(file);
          feedHeader(parser, head, file);
          ref.parser = parser;
          start = head.length;
        }
      }
      const parsed = ref.parser.header;
      if (parsed !== undefined && start > 0) {
        const commit = priorCommitToUse(parsed, start, readAtFd(fd));
        if (commit !== undefined) ref.parser.useCommit(commit);
      }
      if (ref.parser.header) pin(ref.parser.header);
    } catch (e) {
      if (!(e instanceof FormatError)) throw e;
      whole = true;
    }
    // Every committed line is checked against history_crc32 before the first is returned: a stream never
    // hands out an edited, duplicated or reordered message and only then fails.
    if (!whole && !headerOnly && start > 0) verifyCommitted(fd, start, ref.parser);
    if (!whole && !(headerOnly && start > 0)) stream = createReadStream("", { fd, start, highWaterMark: 64 * 1024 });
  } finally {
    if (stream === undefined) closeSync(fd);
  }
  if (whole) {
    yield* linesOfWholeRead(ctx, key, file, ref, headerOnly, pin);
    return;
  }
  if (stream === undefined) return; // header only, read and verified
  const parser = ref.parser;
  const input = gz ? stream.pipe(createGunzip()) : stream;
  if (gz) stream.on("error", (e) => input.destroy(e));
  // Same rules as decodeState over the whole text: lines split on "\n" only, strict UTF-8 per line,
  // the last line must end with "\n", message_count and history_crc32 checked at the end. Only a
  // FileBackend file (it has a revision, and its checksum lines) may carry an uncommitted tail after its
  // message_count lines.
  let any = start > 0;
  let pinned = start > 0;
  try {
    for await (const { bytes, terminated } of splitLines(input)) {
      any = true;
      const header = parser.header;
      if (
        header !== undefined &&
        !gz &&
        header.revision !== undefined &&
        header.handWritten !== true &&
        parser.messages >= header.meta.messageCount
      ) {
        parser.end();
        return; // the rest is an uncommitted tail
      }
      const text = decodeUtf8(bytes, file, parser.line + 1, parser.line > 0);
      if (!terminated) {
        parser.feed(text);
        parser.fail("truncated: the last line does not end with a newline");
      }
      const m = parser.feed(text);
      if (!pinned && parser.header !== undefined) {
        pinned = true;
        if (!gz && parser.header.prior !== undefined) {
          // A header this long was not read ahead: which of its commits holds is found by the whole read.
          yield* linesOfWholeRead(ctx, key, file, ref, headerOnly, pin);
          return;
        }
        pin(parser.header);
      }
      if (parser.header !== undefined && headerOnly) return;
      if (m !== undefined) yield m;
    }
    if (!any) parser.fail("empty file: not a .duas file", { line: 1 });
    parser.end();
  } catch (e) {
    if ((e as { code?: string }).code?.startsWith("Z_")) {
      throw new FormatError(`corrupt gzip data: ${(e as Error).message}`, { file, cause: e });
    }
    throw e;
  } finally {
    input.destroy();
    stream.destroy();
  }
}

/**
 * The rare path of {@link lines}: the whole file read and checked as `load` reads it (header journal
 * applied, re-read while a writer moves the bytes), then fed to a fresh parser as its text.
 */
async function* linesOfWholeRead(
  ctx: ReadContext,
  key: string,
  file: string,
  ref: { parser: DuasLineParser },
  headerOnly: boolean,
  pin: (h: ParsedHeader) => void,
): AsyncGenerator<Message> {
  const { state, revision, key: stored } = readFileWhole(ctx, key, file, false);
  ctx.assertKeyOf(key, file, stored);
  const parser = new DuasLineParser(file);
  const text = encodeHeader(state, state.history.length, { revision }).split("\n");
  text.pop();
  for (const l of text) parser.feed(l);
  ref.parser = parser;
  if (parser.header) pin(parser.header);
  if (headerOnly) return;
  for (const m of state.history) yield m;
}
