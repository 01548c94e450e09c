/**
 * The header journal, `.<key>.duas.hdr`: the commit point of a save whose header bytes span pages.
 *
 * When the changed header bytes span more than one 4096-byte page (a long
 * prompt sits between `[META]` and `[STATE]`), the save instead writes a
 * journal, `.<key>.duas.hdr` (`duas-header-journal/4`: inode, generation,
 * revision, header length, data offset, SHA-256, the byte ranges of the header
 * the save changes with their new bytes, new lines), `fdatasync`s it — that is
 * the commit point — then writes the lines and those ranges into the file and
 * `fdatasync`s it once. Only changed bytes are journaled and written: a save
 * that changes `[STATE]` under a 50 MB prompt writes the head and `[STATE]`,
 * a few hundred bytes (the `[CONFIG]` bytes and their CRC-32 are the memo's).
 * Journals of the previous version (`/3`, `/2`: the whole new header) are
 * still applied.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { closeSync, constants, fdatasyncSync, fstatSync, lstatSync, openSync, readFileSync } from "node:fs";
import path from "node:path";
import { DUAS_EXTENSION } from "../../core/version.js";
import { isCode, memoPath, NOFOLLOW, PAGE, type ReadAt, readAtBuffer, readAtFd, syncDir, writeAll } from "./io.js";

/** Bytes of a header at a byte offset (a piece of a new header, or what a save changes in it). */
export interface HeaderPatch {
  offset: number;
  bytes: Buffer;
}

/**
 * A durable copy of a save (the header bytes it changes + appended lines) about to be written in place
 * across several pages.
 */
export interface Journal {
  ino: number;
  /** `[META] generation` of the file it patches (undefined in a journal of an older version, `/2`). */
  generation: string | undefined;
  revision: number;
  /** Byte length of the header (fixed: an in-place save never changes it). */
  headerLength: number;
  /** The new header's bytes where they differ from the old one, in order (a `/2`, `/3` journal: all of it). */
  patches: HeaderPatch[];
  /** Offset where `lines` go (the committed end before the save). */
  dataOffset: number;
  lines: Buffer;
}

export const JOURNAL_MAGIC = "duas-header-journal/4";

/** Journals of older versions, each holding the whole new header: `/3`, and `/2` without a generation. */
export const JOURNAL_MAGIC_V3 = "duas-header-journal/3";

export const JOURNAL_MAGIC_V2 = "duas-header-journal/2";

export function sha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * The byte ranges where `pieces` (of a new header, at their offsets) differ from `old`: compared a
 * page at a time (memcmp), runs of changed pages joined, each run cut to its first and last changed
 * byte. A save that changes the head and `[STATE]` around a 50 MB prompt yields two small patches.
 */
export function changedRanges(pieces: readonly HeaderPatch[], old: Buffer): HeaderPatch[] {
  const out: HeaderPatch[] = [];
  for (const { offset, bytes } of pieces) {
    const end = offset + bytes.length;
    let run = -1; // file offset where the current run of changed pages starts
    const close = (upTo: number) => {
      let a = run;
      while (a < upTo && bytes[a - offset] === old[a]) a++;
      let b = upTo;
      while (b > a && bytes[b - 1 - offset] === old[b - 1]) b--;
      if (b > a) out.push({ offset: a, bytes: bytes.subarray(a - offset, b - offset) });
      run = -1;
    };
    for (let at = offset; at < end; ) {
      const next = Math.min(end, (Math.floor(at / PAGE) + 1) * PAGE);
      const same = bytes.subarray(at - offset, next - offset).equals(old.subarray(at, next));
      if (!same && run < 0) run = at;
      if (same && run >= 0) close(at);
      at = next;
    }
    if (run >= 0) close(end);
  }
  return out;
}

export function encodeJournal(j: Journal): Buffer {
  const body = Buffer.concat([...j.patches.map((p) => p.bytes), j.lines]);
  const spec = j.patches.length === 0 ? "-" : j.patches.map((p) => `${p.offset}+${p.bytes.length}`).join(",");
  const fields = [
    JOURNAL_MAGIC,
    j.ino,
    j.generation ?? "-",
    j.revision,
    j.headerLength,
    j.dataOffset,
    j.lines.length,
    spec,
  ];
  // The checksum covers the identity fields too: a flipped inode or generation digit makes the journal torn.
  const head = fields.join(" ");
  return Buffer.concat([Buffer.from(`${head} ${sha256(Buffer.concat([Buffer.from(head, "latin1"), body]))}\n`), body]);
}

/** The journal record, or undefined when it is torn (a crash while it was written) or not ours. */
export function decodeJournal(bytes: Buffer): Journal | undefined {
  const nl = bytes.indexOf(0x0a);
  if (nl < 0) return undefined;
  const first = bytes.toString("latin1", 0, nl);
  const parts = first.split(" ");
  const version =
    parts[0] === JOURNAL_MAGIC ? 4 : parts[0] === JOURNAL_MAGIC_V3 ? 3 : parts[0] === JOURNAL_MAGIC_V2 ? 2 : 0;
  if (version === 0) return undefined;
  const [ino, generation, revision, headerLength, dataOffset, linesLength, spec, hash] =
    version === 2
      ? [parts[1], "-", ...parts.slice(2, 6), "", parts[6]]
      : version === 3
        ? [...parts.slice(1, 7), "", parts[7]]
        : parts.slice(1);
  const h = Number(headerLength);
  const l = Number(linesLength);
  // /2 and /3 hold the whole header at offset 0; /4 the changed ranges its spec lists, in order
  const ranges: [number, number][] = [];
  if (version < 4) ranges.push([0, h]);
  else if (spec !== "-") {
    for (const r of (spec ?? "").split(",")) {
      const m = /^(\d+)\+(\d+)$/.exec(r);
      if (!m) return undefined;
      ranges.push([Number(m[1]), Number(m[2])]);
    }
  }
  let total = l;
  let prev = 0;
  for (const [o, n] of ranges) {
    if (!Number.isSafeInteger(o) || !Number.isSafeInteger(n) || o < prev || o + n > h) return undefined;
    prev = o + n;
    total += n;
  }
  if (
    !Number.isSafeInteger(h) ||
    !Number.isSafeInteger(l) ||
    l < 0 ||
    !Number.isSafeInteger(total) ||
    nl + 1 + total > bytes.length
  ) {
    return undefined;
  }
  const body = bytes.subarray(nl + 1, nl + 1 + total);
  const sealed =
    version === 2 ? body : Buffer.concat([Buffer.from(first.slice(0, first.lastIndexOf(" ")), "latin1"), body]);
  if (sha256(sealed) !== hash) return undefined;
  let at = 0;
  const patches = ranges.map(([offset, n]) => {
    const p = { offset, bytes: Buffer.from(body.subarray(at, at + n)) };
    at += n;
    return p;
  });
  return {
    ino: Number(ino),
    generation: generation === "-" ? undefined : generation,
    revision: Number(revision),
    headerLength: h,
    patches,
    dataOffset: Number(dataOffset),
    lines: Buffer.from(body.subarray(at)),
  };
}

/** `[META] generation` in a file's (possibly torn) header bytes; undefined in files of older versions. */
export function fileGeneration(head: Buffer): string | undefined {
  const end = head.indexOf("\n[CONFIG]");
  const m = /\ngeneration = ([0-9a-f]+)\n/.exec(head.toString("latin1", 0, end < 0 ? head.length : end));
  return m?.[1];
}

/** How much of a header's start holds `[META]` (its generation and revision) in all but odd files. */
export const META_PROBE = 64 * 1024;

/**
 * The file's committed bytes with the journal's save applied, when the journal
 * applies and the file does not already hold it: same inode, and the file's
 * header revision is the journal's or the one before (a torn or
 * not-yet-written save is rolled forward: the journal was durable before any
 * byte of the file was touched). Otherwise undefined.
 */
export function applyJournal(buf: Buffer, journal: Journal, ino: number): Buffer | undefined {
  if (!journalApplies(readAtBuffer(buf), buf.length, journal, ino)) return undefined;
  const out = Buffer.concat([buf.subarray(0, journal.dataOffset), journal.lines]);
  for (const p of journal.patches) p.bytes.copy(out, p.offset);
  return out;
}

/**
 * The decision of {@link applyJournal}, reading the file's bytes through `readAt`: the header's
 * `[META]`, the bytes under each patch and at the journal's data offset.
 */
export function journalApplies(readAt: ReadAt, size: number, journal: Journal, ino: number): boolean {
  const { headerLength, lines, dataOffset } = journal;
  if (journal.ino !== ino || size < dataOffset || dataOffset < headerLength) return false;
  let meta = readAt(0, Math.min(headerLength, META_PROBE));
  if (meta.indexOf("\n[CONFIG]") < 0 && meta.length < headerLength) meta = readAt(0, headerLength);
  const end = meta.indexOf("\n[CONFIG]");
  const head = end < 0 ? meta : meta.subarray(0, end);
  // Bound to the file's incarnation: a journal left by a deleted session never applies to a new file that
  // reuses the inode and the revision numbers (a generation never changes within one file).
  if (journal.generation !== fileGeneration(head)) return false;
  const m = /\nrevision = (\d+)/.exec(head.toString("latin1"));
  // A journal applies only on top of the revision it was written for (or a torn header of its own save):
  // an older journal never rolls a newer file back, nor a newer journal an older file.
  if (m && Number(m[1]) !== journal.revision && Number(m[1]) !== journal.revision - 1) return false;
  const holds = (offset: number, bytes: Buffer) => bytes.length === 0 || readAt(offset, bytes.length).equals(bytes);
  return !(journal.patches.every((p) => holds(p.offset, p.bytes)) && holds(dataOffset, lines));
}

/** True when `journal` holds a save that `file` does not (checked with a few small reads). */
export function journalPending(file: string, journal: Journal): boolean {
  const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
  try {
    const st = fstatSync(fd);
    return journalApplies(readAtFd(fd), st.size, journal, st.ino);
  } finally {
    closeSync(fd);
  }
}

/** The header journals of one directory's files, `.<key>.duas.hdr`: written before an in-place save across pages, read by writers and readers. */
export class HeaderJournals {
  /** The journals' paths, by (checked) key. */
  private readonly paths = new Map<string, string>();

  /** @param baseDir - the directory of the files */
  constructor(private readonly baseDir: string) {}

  /** The header journal of `key` (hidden: keys never start with "."). */
  of(key: string): string {
    return memoPath(this.paths, key, () => path.join(this.baseDir, `.${key}${DUAS_EXTENSION}.hdr`));
  }

  /**
   * The identity of `key`'s journal file (inode, size, mtime, ctime), or undefined when there is none:
   * a journal this backend wrote and applied, or examined, is not read again while it is unchanged.
   */
  id(key: string): string | undefined {
    const s = lstatSync(this.of(key), { bigint: true, throwIfNoEntry: false });
    return s === undefined ? undefined : `${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
  }

  /**
   * Makes the new header durable in the journal before the in-place write that
   * spans several pages (see the module doc). Created once per key (then the
   * directory is fsync'ed), overwritten afterwards.
   */
  write(key: string, journal: Journal): void {
    const file = this.of(key);
    let created = false;
    try {
      lstatSync(file);
    } catch (e) {
      if (!isCode(e, "ENOENT")) throw e;
      created = true;
    }
    // Overwritten in place, not truncated: the record carries its lengths and checksum, so bytes left
    // after it by a longer earlier record are ignored, and the file's size rarely changes (a cheaper sync).
    const jfd = openSync(file, constants.O_WRONLY | constants.O_CREAT | NOFOLLOW, 0o644);
    try {
      writeAll(jfd, encodeJournal(journal), 0);
      fdatasyncSync(jfd);
    } finally {
      closeSync(jfd);
    }
    if (created) syncDir(this.baseDir);
  }

  /** Reads `key`'s journal; undefined when absent or not intact. */
  read(key: string): Journal | undefined {
    let bytes: Buffer;
    try {
      const jfd = openSync(this.of(key), constants.O_RDONLY | NOFOLLOW);
      try {
        bytes = readFileSync(jfd);
      } finally {
        closeSync(jfd);
      }
    } catch (e) {
      if (isCode(e, "ENOENT")) return undefined;
      throw e;
    }
    return decodeJournal(bytes);
  }
}
