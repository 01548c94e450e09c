/**
 * The append path of `FileBackend`: a save that adds messages writes only them and the changed
 * header bytes, in place.
 *
 * ## Appends: O(new messages) (`write(key, state, { expectedRevision, baseLength })`)
 *
 * Files written by this backend carry `[META] revision`, `generation`,
 * `key`, `history_crc32`, `history_bytes`, `prior_commit` and `header_crc32`
 * (see "Identity and integrity" in `index.ts`; `key`, the key the file was written
 * under, lets a file system that folds case or normalises Unicode be caught
 * handing `Alice.duas` to the key `alice`: {@link KeyCollisionError}), pad `saved_at`, `message_count`,
 * `revision`, `history_bytes` and `prior_commit` with trailing spaces to fixed
 * widths, and end the header with a padding comment line (`#` + spaces)
 * before `[HISTORY]`, so the header can be rewritten in place without moving
 * a byte of history. When `baseLength` equals the stored `message_count` and
 * `expectedRevision` the stored revision, and the config and state are those
 * on disk (only `[META]` changes), a save makes **one `fdatasync`**:
 *
 * 1. appends `history.slice(baseLength)` as new lines at the end of the
 *    committed history;
 * 2. overwrites, in place, only the head bytes that changed: the new commit
 *    (`message_count`, `revision`, `saved_at`, `history_crc32`,
 *    `history_bytes`) and, in `prior_commit`, the commit it replaces
 *    (`<revision> <message_count> <history_bytes> <history_crc32> <saved_at>`);
 * 3. `fdatasync`.
 *
 * **Crash-safety argument.** `message_count` (with `revision`) is the commit
 * record: readers take exactly the first `message_count` history lines and
 * ignore anything after them. A crash during or after step 1 but before
 * step 2 leaves the old header, so the file reads as the old state; the extra
 * (complete or torn) lines are an uncommitted tail that the next writer
 * truncates (under the lock) before appending — a torn last line is
 * repaired, never returned as data. A process killed after step 2 leaves the
 * lines and the head in the page cache: the new state. Against power loss,
 * a head that reached the disk before its lines reads as its `prior_commit`
 * (above). A one-page header write is all-or-nothing when the process is
 * killed (Linux checks for fatal signals between pages of a buffered write,
 * not inside one), so after `kill -9` such a header is old or new. A write
 * spanning pages can be cut between pages; that is why it goes through the
 * journal: a reader or writer that finds an intact journal for the same
 * inode whose revision is the file's or the next one, while the file does
 * not hold exactly the journal's header and lines, uses the journal's save
 * (a writer also writes it back: roll-forward). A journal torn by a crash
 * fails its checksum and is ignored (the file was not touched yet); an older
 * journal never applies to a newer header, nor to another inode, nor to another
 * `generation` (whole-file writes make a new inode and a new generation). Against power loss the one assumption is that
 * the storage does not tear a single 4096-byte page write (true of drives
 * with 4 KiB atomic writes); the journal path does not even need that.
 *
 * A header that outgrows its padding (e.g. a much longer prompt) makes that
 * save a whole-file write, which re-pads the header.
 *
 * Per key, the backend caches the header bytes, committed end offset, count
 * and revision of the file it last wrote or scanned, with the file's identity
 * (inode, size, mtime, ctime, and the journal file's). A write trusts the
 * cache when that identity is unchanged and the head of the header (through
 * `header_crc32`: revision, generation, count — every writer changes the
 * revision) reads back the same (one small read); otherwise it rescans the
 * file. So a save never re-reads the history, nor the header's `[CONFIG]`/
 * `[STATE]`. When the config and state are those of the header on disk (same
 * config values, same `[STATE]` text), a save encodes, compares and writes
 * only the head: `header_crc32` is sealed from the body's cached CRC-32
 * carried over its length (`crc32_combine`; the value and the format are
 * unchanged), so a one-message save costs the same with a 50 MB prompt as
 * with a 1 KB one. The first save after a rescan encodes the body once.
 *
 * @module
 */

import { type BigIntStats, fdatasyncSync, fstatSync, ftruncateSync, readSync } from "node:fs";
import { crc32, crcHex } from "../../core/codec/crc.js";
import { encodeHistoryLines } from "../../core/codec/encode.js";
import type { PriorCommit } from "../../core/codec/header.js";
import { jsonShape, sameJsonShape } from "../../core/json.js";
import type { Message, Protocol } from "../../core/messages.js";
import { isWellFormedMessage } from "../../core/messages.js";
import type { AgentState } from "../../core/state.js";
import { lentText, messageText } from "../stored.js";
import type { WriteResult } from "../types.js";
import {
  applyJournal,
  changedRanges,
  fileGeneration,
  type HeaderJournals,
  type HeaderPatch,
} from "./header-journal.js";
import { PAGE, safeUnlink, writeAll } from "./io.js";
import { type EncodedHeader, encodeHeaderMemo, type HeaderMemo } from "./layout.js";
import { scanPlain } from "./scan.js";

/** What the backend knows about a plain `.duas` file it has scanned or written. */
export interface FileInfo {
  ino: number;
  /** Committed end offset (= file size once any uncommitted tail is truncated). */
  end: number;
  /** The header bytes, `[HISTORY]\n` included. */
  header: Buffer;
  count: number;
  revision: number;
  protocol: AgentState["meta"]["protocol"];
  /** Compact JSON of the first and the last stored message (checked against `baseLength` before appending). */
  firstLine: string | undefined;
  lastLine: string | undefined;
  /**
   * The first message object of the last save whose JSON was found to be `firstLine`, and its
   * `jsonShape` then: while a save's first message is that object with that structure and values
   * (O(its nodes), not O(its bytes)), its JSON is still `firstLine` and is not serialised again.
   */
  first?: { message: unknown; shape: unknown };
  /** `[META] generation` and `history_crc32` (absent in files of older versions: those are rewritten whole). */
  generation: string | undefined;
  historyCrc32: string | undefined;
  /** `[META] key`: the key the file was written whole under (absent in files of older versions). */
  key: string | undefined;
  /** Bytes of `header` through the `header_crc32` line: the part a save with unchanged config and state rewrites. */
  headBytes: number;
  /** What the header's `[CONFIG]`/`[STATE]` were encoded from (undefined after a scan: the next save encodes them once). */
  memo: HeaderMemo | undefined;
  /** The file's mtime and ctime (ns) right after this backend last wrote or scanned it. */
  mtimeNs: bigint;
  ctimeNs: bigint;
  /** {@link FileBackend.journalId} of the header journal when this backend last wrote or settled it. */
  journal: string | undefined;
  /** `[META] history_bytes` of the commit (undefined in files of older versions: those are rewritten whole). */
  historyBytes: number | undefined;
  /** `saved_at` of the commit (the next append's `prior_commit`). */
  savedAt: string;
  /** The header's own revision when the file holds its prior commit (the next save numbers above both). */
  abandoned?: number;
  /** {@link fixedMetaOf} the header's `[META]`: what a one-sync save must leave as it is. */
  fixedMeta: readonly unknown[];
}

/** The `[META]` values other than the commit's (a one-sync save changes only the commit: see tryAppend). */
export function fixedMetaOf(meta: AgentState["meta"]): readonly unknown[] {
  return [meta.formatVersion, meta.schemaVersion, meta.agentUuid, meta.agentName, meta.protocol, meta.class];
}

/** Whether `meta`'s {@link fixedMetaOf} values are `fixed` (compared in place: asked at every append). */
export function sameFixedMeta(fixed: readonly unknown[], meta: AgentState["meta"]): boolean {
  return (
    fixed[0] === meta.formatVersion &&
    fixed[1] === meta.schemaVersion &&
    fixed[2] === meta.agentUuid &&
    fixed[3] === meta.agentName &&
    fixed[4] === meta.protocol &&
    fixed[5] === meta.class
  );
}

/** Where the header's body (`\n[CONFIG]\n…`) starts: the end of the `header_crc32` line. */
export function headOf(header: Buffer): number {
  const i = header.indexOf("\n[CONFIG]\n");
  return i < 0 ? header.length : i;
}

/**
 * The `.duas` lines of `history[from…]`: a message whose JSON text the persistence layer lent for this
 * write (see `lendTexts`) and that keeps its protocol's schema is not serialised or validated again;
 * any other goes through `encodeHistoryLines` (which names the field at fault).
 */
export function newLines(history: readonly Message[], from: number, protocol: Protocol): string {
  const parts: string[] = [];
  for (let i = from; i < history.length; i++) {
    const lent = lentText(history, i);
    parts.push(
      lent !== undefined && isWellFormedMessage(protocol, history[i])
        ? `${lent}\n`
        : encodeHistoryLines([history[i] as Message], protocol, i),
    );
  }
  return parts.join("");
}

export function jsonOf(message: Message | undefined): string | undefined {
  return message === undefined ? undefined : JSON.stringify(message);
}

/** The append path; returns undefined when the header change cannot be done in place. */
export function tryAppend(
  journals: HeaderJournals,
  cache: Map<string, FileInfo>,
  key: string,
  fd: number,
  info: FileInfo,
  state: AgentState,
  revision: number,
  base: number,
): WriteResult | undefined {
  const count = state.history.length;
  // A file of an older version has no history chain (or no commit pair) to extend: it is rewritten whole once.
  // So is a file whose history is not laid out as written here (blank lines, CRLF: history_bytes would not
  // be its byte length), and one whose newest commit was lost: the header naming that commit must not stay
  // on disk beside new lines where its own were (a crash there would leave neither commit readable).
  if (
    info.generation === undefined ||
    info.historyCrc32 === undefined ||
    info.historyBytes === undefined ||
    info.historyBytes !== info.end - info.header.length ||
    info.abandoned !== undefined
  ) {
    return undefined;
  }
  // "Stored unchanged" is checked, not assumed: the first and the boundary message must match what is on disk.
  if (base > 0) {
    try {
      const m0 = state.history[0];
      const seen = info.first;
      if (seen === undefined || seen.message !== m0 || !sameJsonShape(m0, seen.shape)) {
        if (JSON.stringify(m0) !== info.firstLine) return undefined;
        info.first = { message: m0, shape: jsonShape(m0) };
      }
      if (messageText(state.history, base - 1) !== info.lastLine) return undefined;
    } catch {
      return undefined; // not JSON: the whole-file path reports it with its path
    }
  }
  const lines = Buffer.from(newLines(state.history, base, state.meta.protocol), "utf8");
  // historyCrcOfLines of the text, over its bytes (encoded once)
  const historyCrc32 = crcHex(crc32(lines, Number.parseInt(info.historyCrc32, 16)));
  const historyBytes = info.historyBytes + lines.length;
  const own: PriorCommit = { revision, messageCount: count, historyBytes, historyCrc32, savedAt: state.meta.savedAt };
  // The commit on disk, durable (this backend synced it, or read it back under the lock and synced it).
  const before: PriorCommit = {
    revision: info.revision,
    messageCount: info.count,
    historyBytes: info.historyBytes,
    historyCrc32: info.historyCrc32,
    savedAt: info.savedAt,
  };
  /** The header patches of this save with `prior` as its prior_commit, or undefined when not in place. */
  const plan = (prior: PriorCommit): { enc: EncodedHeader; patches: HeaderPatch[]; pages: Set<number> } | undefined => {
    const layout = {
      revision,
      fixedWidth: true,
      padTo: info.header.length,
      generation: info.generation,
      key: info.key,
      historyCrc32,
      checksum: true,
      historyBytes,
      prior,
    };
    // With the config and state of the header on disk (info.memo), only the head is encoded and compared:
    // the body's bytes and checksum are reused, whatever the size of the prompt.
    let enc: EncodedHeader;
    try {
      enc = encodeHeaderMemo(state, count, layout, info.memo);
      if ((enc.headOnly || enc.tail) && enc.headBytes !== info.headBytes) enc = encodeHeaderMemo(state, count, layout);
    } catch (e) {
      if (e instanceof RangeError) return undefined; // outgrew the padding
      throw e;
    }
    // The new header as pieces at their offsets (head only; head and tail around an unchanged config;
    // or all of it), each cut down to the bytes that differ from the header on disk.
    const pieces: HeaderPatch[] = [{ offset: 0, bytes: Buffer.from(enc.text, "utf8") }];
    if (enc.tail) pieces.push({ offset: enc.tail.offset, bytes: Buffer.from(enc.tail.text, "utf8") });
    const covered = enc.tail ? info.header.length : enc.headOnly ? info.headBytes : info.header.length;
    const last = pieces[pieces.length - 1] as HeaderPatch;
    if (
      last.offset + last.bytes.length !== covered ||
      (pieces.length > 1 && pieces[0]?.bytes.length !== info.headBytes)
    ) {
      return undefined;
    }
    // A head alone within the first page is written whole (one write of a page either way, see below):
    // its bytes are not compared with the header on disk to cut out the unchanged ones.
    let patches =
      enc.headOnly && pieces.length === 1 && info.headBytes <= PAGE ? pieces : changedRanges(pieces, info.header);
    const pages = new Set<number>();
    for (const p of patches) {
      for (let page = Math.floor(p.offset / PAGE); page <= Math.floor((p.offset + p.bytes.length - 1) / PAGE); page++) {
        pages.add(page);
      }
    }
    if (pages.size === 1 && patches.length > 1) {
      // Within one page, one write (all-or-nothing under kill -9, see the module doc), not one per range.
      const from = (patches[0] as HeaderPatch).offset;
      const to =
        (patches[patches.length - 1] as HeaderPatch).offset + (patches[patches.length - 1] as HeaderPatch).bytes.length;
      const bytes = Buffer.from(info.header.subarray(from, to));
      for (const p of patches) p.bytes.copy(bytes, p.offset - from);
      patches = [{ offset: from, bytes }];
    }
    return { enc, patches, pages };
  };
  // One sync when only the commit's [META] values change (one page of the head): the prior commit then
  // holds everything else, and a head on disk without its lines reads as it. Any other save names its own
  // commit as prior_commit (nothing to fall back to) and syncs its lines before its header.
  let oneSync = sameFixedMeta(info.fixedMeta, state.meta);
  let planned = plan(oneSync ? before : own);
  if (planned === undefined) return undefined;
  if (
    oneSync &&
    !(planned.pages.size <= 1 && planned.patches.every((p) => p.offset + p.bytes.length <= info.headBytes))
  ) {
    oneSync = false;
    planned = plan(own);
    if (planned === undefined) return undefined;
  }
  const { enc, patches, pages } = planned;
  let journal = info.journal;
  if (pages.size > 1) {
    // the journal is the commit point; then the file is patched and synced once
    journals.write(key, {
      ino: info.ino,
      generation: info.generation,
      revision,
      headerLength: info.header.length,
      patches,
      dataOffset: info.end,
      lines,
    });
    if (lines.length > 0) writeAll(fd, lines, info.end);
    for (const p of patches) writeAll(fd, p.bytes, p.offset);
    fdatasyncSync(fd);
    journal = journals.id(key); // applied: settled for the next saves
  } else if (oneSync) {
    // Only the commit changes: the lines, then the head naming this commit and the one before it, then one
    // fdatasync. A head on disk without its lines reads as its prior_commit.
    if (lines.length > 0) writeAll(fd, lines, info.end);
    for (const p of patches) writeAll(fd, p.bytes, p.offset);
    fdatasyncSync(fd);
  } else {
    // [CONFIG], [STATE] or other [META] values change too: the lines are synced first.
    if (lines.length > 0) {
      writeAll(fd, lines, info.end);
      fdatasyncSync(fd);
    }
    if (patches.length > 0) {
      for (const p of patches) writeAll(fd, p.bytes, p.offset);
      fdatasyncSync(fd);
    }
  }
  // Our own copy of the header (same length: fixed width), patched as the file was.
  for (const p of patches) p.bytes.copy(info.header, p.offset);
  const header = info.header;
  const st = fstatSync(fd, { bigint: true });
  cache.set(key, {
    ino: info.ino,
    end: info.end + lines.length,
    header,
    count,
    revision,
    protocol: info.protocol,
    firstLine: base === 0 ? jsonOf(state.history[0]) : info.firstLine,
    first: base === 0 ? undefined : info.first,
    lastLine: count > base ? messageText(state.history, count - 1) : info.lastLine,
    generation: info.generation,
    historyCrc32,
    key: info.key,
    headBytes: enc.headBytes,
    memo: enc.memo,
    mtimeNs: st.mtimeNs,
    ctimeNs: st.ctimeNs,
    journal,
    historyBytes,
    savedAt: state.meta.savedAt,
    fixedMeta: oneSync ? info.fixedMeta : fixedMetaOf(state.meta),
  });
  return { revision, written: count - base, rewritten: false };
}

/** Validates the cached info of `key` against the open file, or rescans it (repairing an uncommitted tail). */
export function validInfo(
  journals: HeaderJournals,
  cache: Map<string, FileInfo>,
  key: string,
  fd: number,
  file: string,
  stat?: BigIntStats,
): FileInfo {
  const st = stat ?? fstatSync(fd, { bigint: true });
  const size = Number(st.size);
  const ino = Number(st.ino);
  const cached = cache.get(key);
  // The file is the one this backend last wrote or scanned when its identity (inode, size, mtime, ctime,
  // the journal's) is unchanged and so is its head: revision, generation, count and header_crc32 (every
  // writer changes the revision). The body of the header (a prompt of any size) is not read again.
  if (
    cached &&
    cached.ino === ino &&
    cached.end === size &&
    cached.mtimeNs === st.mtimeNs &&
    cached.ctimeNs === st.ctimeNs &&
    journals.id(key) === cached.journal
  ) {
    const head = Buffer.allocUnsafe(cached.headBytes);
    const n = readSync(fd, head, 0, head.length, 0);
    if (n === head.length && head.equals(cached.header.subarray(0, cached.headBytes))) return cached;
  }
  const journal = journals.read(key);
  const buf = Buffer.allocUnsafe(size);
  let got = 0;
  while (got < size) {
    const n = readSync(fd, buf, got, size - got, got);
    if (n === 0) break;
    got += n;
  }
  let data: Buffer = buf.subarray(0, got);
  if (journal && journal.generation !== fileGeneration(data)) {
    // another incarnation's journal (a crash between a delete's two unlinks): garbage, never applied
    safeUnlink(journals.of(key));
  } else if (journal) {
    const patched = applyJournal(data, journal, ino);
    if (patched) {
      // roll the interrupted save forward (we hold the lock); the tail check below truncates what follows
      writeAll(fd, journal.lines, journal.dataOffset);
      for (const p of journal.patches) writeAll(fd, p.bytes, p.offset);
      fdatasyncSync(fd);
      data = patched;
      got = Math.max(got, journal.dataOffset + journal.lines.length);
    }
  }
  const scan = scanPlain(data, file, true);
  if (got > scan.end) {
    // An interrupted append left lines beyond message_count: drop them (we hold the lock).
    ftruncateSync(fd, scan.end);
  }
  // The commit read here becomes the next append's prior_commit: it must be on disk before a header
  // naming it is (a writer killed between its write and its fdatasync left it in the page cache only).
  fdatasyncSync(fd);
  const after = fstatSync(fd, { bigint: true });
  const header = Buffer.from(data.subarray(0, scan.headerEnd));
  const info: FileInfo = {
    ino,
    end: scan.end,
    header,
    count: scan.header.meta.messageCount,
    revision: scan.header.revision ?? 1,
    protocol: scan.header.meta.protocol,
    firstLine: scan.header.meta.messageCount > 0 ? data.toString("utf8", ...scan.first) : undefined,
    lastLine: scan.header.meta.messageCount > 0 ? data.toString("utf8", ...scan.last) : undefined,
    generation: scan.header.generation,
    historyCrc32: scan.header.historyCrc32,
    key: scan.header.key,
    headBytes: headOf(header),
    memo: undefined,
    mtimeNs: after.mtimeNs,
    ctimeNs: after.ctimeNs,
    // examined under the lock: rolled forward, or not applicable to this file (now or later)
    journal: journals.id(key),
    historyBytes: scan.header.historyBytes,
    savedAt: scan.header.meta.savedAt,
    fixedMeta: fixedMetaOf(scan.header.meta),
  };
  if (scan.commit !== undefined && scan.written !== undefined) info.abandoned = scan.written;
  cache.set(key, info);
  return info;
}
