/**
 * Whole-file writes (first write, `save`, `force`, edits in the middle, `.duas.gz`): temp file,
 * fsync, rename, fsync of the directory; the header padded for later in-place saves.
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import { closeSync, constants, fstatSync, fsyncSync, lstatSync, openSync, renameSync } from "node:fs";
import { gzipSync } from "node:zlib";
import { crcHex, HISTORY_CRC_START, historyCrcOfLines } from "../../core/codec/crc.js";
import { encodeHistoryLines } from "../../core/codec/encode.js";
import { encodeHeader } from "../../core/codec/header.js";
import type { AgentState } from "../../core/state.js";
import type { WriteResult } from "../types.js";
import { type FileInfo, fixedMetaOf, jsonOf } from "./append.js";
import type { HeaderJournals } from "./header-journal.js";
import { dropFile, NOFOLLOW, safeUnlink, syncDir, writeAll } from "./io.js";
import { type EncodedHeader, encodeHeaderMemo } from "./layout.js";
import { HISTORY_LINE } from "./scan.js";

/** What a whole-file write needs of its backend. */
export interface WholeWriteContext {
  readonly baseDir: string;
  /** Write `.duas.gz` (always whole). */
  readonly gzip: boolean;
  /** Bytes of padding before `[HISTORY]`, for in-place saves. */
  readonly headerSlack: number;
  readonly journals: HeaderJournals;
  /** What the backend knows of each key's plain file (set or cleared here). */
  readonly cache: Map<string, FileInfo>;
  /** Revision of the `.duas.gz` file the backend last wrote, by key. */
  readonly gzCache: Map<string, { ino: number; size: number; revision: number }>;
}

/** Whole-file atomic write: temp file, fsync, rename, fsync of the directory. */
export function rewrite(
  w: WholeWriteContext,
  key: string,
  tmp: string,
  target: string,
  state: AgentState,
  revision: number,
  current: { file: string; gz: boolean } | undefined,
): WriteResult {
  const count = state.history.length;
  const lines = encodeHistoryLines(state.history, state.meta.protocol);
  // A new incarnation of the file: a header journal of any earlier one never applies to it.
  const generation = randomBytes(16).toString("hex");
  const historyCrc32 = crcHex(historyCrcOfLines(HISTORY_CRC_START, lines));
  // The key the file is written under: a read or write under another key naming this file is refused.
  const sealed = { revision, generation, key, historyCrc32, checksum: true };
  let header: string;
  let enc: EncodedHeader | undefined;
  let historyBytes: number | undefined;
  if (w.gzip) {
    header = encodeHeader(state, count, sealed);
  } else {
    // The natural header, then `headerSlack` bytes of padding in a comment line before [HISTORY]
    // (what encodeHeader's padTo writes for padTo = natural + headerSlack + 2, encoded once). Its
    // prior_commit is its own commit (a whole-file write is synced before the rename makes it visible).
    historyBytes = Buffer.byteLength(lines);
    const prior = { revision, messageCount: count, historyBytes, historyCrc32, savedAt: state.meta.savedAt };
    enc = encodeHeaderMemo(state, count, { ...sealed, fixedWidth: true, historyBytes, prior });
    header = `${enc.text.slice(0, -HISTORY_LINE.length)}#${" ".repeat(w.headerSlack)}\n${HISTORY_LINE}`;
  }
  const text = Buffer.from(header + lines, "utf8");
  const bytes = w.gzip ? gzipSync(text) : text;
  // One temp name per key is safe: we hold the key's lock. A temp file left by a crash is simply overwritten.
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | NOFOLLOW, 0o644);
  let ino: number;
  try {
    writeAll(fd, bytes, 0);
    fsyncSync(fd);
    ino = fstatSync(fd).ino;
  } catch (e) {
    closeSync(fd);
    safeUnlink(tmp);
    throw e;
  }
  closeSync(fd);
  try {
    renameSync(tmp, target);
  } catch (e) {
    safeUnlink(tmp);
    throw e;
  }
  dropFile(target); // the replaced file's descriptor (the next save opens the new one)
  if (current && current.file !== target) {
    dropFile(current.file);
    safeUnlink(current.file);
  }
  syncDir(w.baseDir);
  // The old incarnation's journal is garbage now (it could never apply: other generation); tidy it up.
  safeUnlink(w.journals.of(key));
  // rename changes the ctime: the identity the next save checks is taken after it
  const st = w.gzip ? undefined : lstatSync(target, { bigint: true });
  if (w.gzip || enc === undefined || st === undefined || Number(st.ino) !== ino) {
    w.cache.delete(key);
    if (w.gzip) w.gzCache.set(key, { ino, size: bytes.length, revision });
    else w.gzCache.delete(key);
  } else {
    w.gzCache.delete(key);
    const headerLen = Buffer.byteLength(header);
    w.cache.set(key, {
      ino,
      end: text.length,
      header: Buffer.from(text.subarray(0, headerLen)),
      count,
      revision,
      protocol: state.meta.protocol,
      firstLine: jsonOf(state.history[0]),
      lastLine: jsonOf(state.history[count - 1]),
      generation,
      historyCrc32,
      key,
      headBytes: enc.headBytes,
      memo: enc.memo,
      mtimeNs: st.mtimeNs,
      ctimeNs: st.ctimeNs,
      journal: w.journals.id(key),
      historyBytes,
      savedAt: state.meta.savedAt,
      fixedMeta: fixedMetaOf(state.meta),
    });
  }
  return { revision, written: count, rewritten: true };
}
