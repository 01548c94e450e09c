/**
 * What a reader falls back to after a power loss: the header's `prior_commit` when the newest
 * save's lines did not reach the disk.
 *
 * ### One sync per save: the commit pair (after the two meta pages of LMDB)
 *
 * Without a sync between steps 1 and 2 of an append (`append.ts`), a power loss can leave the head on disk and
 * not the lines. A reader then finds the bytes of the newest save (between the
 * two commits' `history_bytes`) missing: the file ends before them (it was not
 * extended) or a whole 512-byte sector of them, cut to their range, holds
 * only NUL bytes (storage allocated, never written; JSON lines never hold a
 * NUL, and one NUL among written bytes is damage, not this shape). It then reads the file as `prior_commit` — checked
 * against its own lines and `history_crc32` — exactly as the save before: that
 * save was synced before this one began (a writer that finds a commit it did
 * not write itself syncs it before naming it in a header). Any other damage to
 * the newest save's lines is a `FormatError`, as before. The next writer
 * continues from the prior commit, numbers its save above the lost one's
 * revision (never reused), and cuts the lost bytes. A save that also changes
 * `[CONFIG]`/`[STATE]` keeps two syncs (lines, then header): the prior commit
 * does not hold those values.
 *
 * @module
 */

import { crc32, crcHex, HISTORY_CRC_START } from "../../core/codec/crc.js";
import type { PriorCommit } from "../../core/codec/header.js";
import type { ParsedHeader } from "../../core/codec/parse.js";
import { eachLine, lineHasContent, NEWLINE, type ReadAt } from "./io.js";

/**
 * The number of message lines and their running history CRC-32, over the first `target` message
 * lines from byte `start`, with the readers' rules: a `\r` before the `\n` and blank lines are not
 * in the checksum (see `historyCrc`).
 */
export function historyLinesCrc(read: ReadAt, start: number, target: number): { count: number; crc: number } {
  let crc = HISTORY_CRC_START;
  let count = 0;
  eachLine(
    read,
    start,
    () => count < target,
    (bytes) => {
      let end = bytes.length;
      if (end > 0 && bytes[end - 1] === 0x0d) end--;
      if (!lineHasContent(bytes, 0, end)) return; // blank: not a message, not in the checksum
      crc = crc32(NEWLINE, crc32(bytes.subarray(0, end), crc));
      count++;
    },
  );
  return { count, crc };
}

/** The unit in which storage that was allocated but never written reads back as zeros. */
export const SECTOR = 512;

/**
 * Whether `bytes` (read at file offset `offset`) hold a whole sector of NUL bytes, each sector cut to
 * the range of `bytes`: what a power loss leaves where a write's blocks never reached the disk. A NUL
 * among written bytes (a damaged line) is not that shape.
 */
export function unwrittenSector(bytes: Buffer, offset: number): boolean {
  for (let i = bytes.indexOf(0); i >= 0; ) {
    const sector = offset + i - ((offset + i) % SECTOR);
    const from = Math.max(0, sector - offset);
    const to = Math.min(bytes.length, sector + SECTOR - offset);
    let zero = true;
    for (let j = from; j < to && zero; j++) zero = bytes[j] === 0;
    if (zero) return true;
    i = to < bytes.length ? bytes.indexOf(0, to) : -1;
  }
  return false;
}

/**
 * Which commit of a plain file's header its history holds: undefined for the
 * header's own (`message_count`, `revision`, `saved_at`, `history_crc32`), or
 * its `prior_commit` when the newest save's lines show what a power loss
 * between that save's write and its `fdatasync` leaves (see the module doc,
 * "One sync per save") and the prior commit's lines are intact.
 *
 * The check reads only the bytes the newest save appended (between the two
 * commits' `history_bytes`). They are lost when the file ends before them
 * (the file system did not extend it) or when a whole 512-byte sector of
 * them, cut to their range, holds nothing but NUL bytes (storage allocated,
 * never written: it reads as zeros by sectors and blocks, and JSON lines never
 * hold a NUL). Anything else is the header's commit, whose errors the read
 * reports: a line edited, duplicated or cut inside the newest save — a single
 * byte turned NUL among written ones too — is a `FormatError`, not a silent
 * step back.
 *
 * @param header - the parsed header
 * @param start - byte offset of the first history line
 * @param read - positional reads of the file
 */
export function priorCommitToUse(header: ParsedHeader, start: number, read: ReadAt): PriorCommit | undefined {
  const prior = header.prior;
  const bytes = header.historyBytes;
  if (prior === undefined || bytes === undefined || prior.revision === header.revision) return undefined;
  const delta = bytes - prior.historyBytes;
  if (delta <= 0) return undefined;
  const appended = read(start + prior.historyBytes, delta);
  if (appended.length === delta && !unwrittenSector(appended, start + prior.historyBytes)) return undefined;
  // Lost: the prior commit, if its own lines are intact.
  const { count, crc } = historyLinesCrc(read, start, prior.messageCount);
  return count === prior.messageCount && crcHex(crc) === prior.historyCrc32 ? prior : undefined;
}
