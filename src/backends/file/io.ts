/**
 * The file engine's I/O primitives: positional reads and writes, line splitting, the directory
 * sync, and the `.duas` descriptors kept open between saves.
 *
 * @module
 */

import { type BigIntStats, closeSync, constants, fsyncSync, openSync, readSync, unlinkSync, writeSync } from "node:fs";

export const PAGE = 4096;

export const NOFOLLOW = constants.O_NOFOLLOW ?? 0;

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function isCode(e: unknown, code: string): boolean {
  return (e as NodeJS.ErrnoException | undefined)?.code === code;
}

export function lineHasContent(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = buf[i] as number;
    if (c === 0x20 || (c >= 0x09 && c <= 0x0d)) continue;
    // Blank is what the parser's String#trim() removes: Unicode spaces (U+3000, U+00A0, …) too.
    return c < 0x80 || buf.toString("utf8", i, end).trim() !== "";
  }
  return false;
}

export const NEWLINE = Buffer.from("\n");

/**
 * Calls `each` with every `\n`-terminated line (without it) of the file from byte `start`, while
 * `more()`, reading 256 KB at a time.
 *
 * @returns the bytes after the last `\n` when the file ends without one (undefined when none)
 */
export function eachLine(
  read: ReadAt,
  start: number,
  more: () => boolean,
  each: (bytes: Buffer) => void,
): Buffer | undefined {
  // The pieces of a line longer than a chunk, joined once at its end: joining them chunk by chunk
  // copied a 50 MB message some 200 times (quadratic: 6 s to stream it, against 0.5 s to load it).
  let pending: Buffer[] = [];
  for (let pos = start; more(); ) {
    const chunk = read(pos, 256 * 1024);
    const n = chunk.length;
    if (n === 0) break;
    pos += n;
    let i = 0;
    while (i < n && more()) {
      const nl = chunk.indexOf(0x0a, i);
      if (nl < 0) {
        pending.push(chunk.subarray(i, n));
        break;
      }
      const piece = chunk.subarray(i, nl);
      each(pending.length === 0 ? piece : Buffer.concat([...pending, piece]));
      pending = [];
      i = nl + 1;
    }
  }
  return pending.length === 0 ? undefined : Buffer.concat(pending);
}

/** Reads `length` bytes of a file at `offset` (fewer at its end). */
export type ReadAt = (offset: number, length: number) => Buffer;

/** Positional reads of an open file: up to `length` bytes at `position` (fewer at its end). */
export function readAtFd(fd: number): ReadAt {
  return (position, length) => {
    const b = Buffer.allocUnsafe(length);
    let got = 0;
    while (got < length) {
      const n = readSync(fd, b, got, length - got, position + got);
      if (n === 0) break;
      got += n;
    }
    return b.subarray(0, got);
  };
}

/** {@link readAtFd} over a file's bytes already read. */
export function readAtBuffer(buf: Buffer): ReadAt {
  return (position, length) => buf.subarray(position, position + length);
}

/** A plain `.duas` file's descriptor kept open between saves (see {@link keptFiles}). */
export interface KeptFile {
  fd: number;
  /** Identity of the file it was opened on (a save uses it only while the path's lstat shows the same). */
  ino: bigint;
  dev: bigint;
}

/** Whether `.duas` files' descriptors are kept open between saves (not on Windows, as {@link KEEP_LOCK_FDS}). */
export const KEEP_FILE_FDS = process.platform !== "win32";

/** At most this many `.duas` descriptors are kept open (per process, for all backends). */
export const KEPT_FILES_MAX = 64;

/**
 * Plain `.duas` files' descriptors kept open after a save, by path, shared by the backends of this
 * process: a save whose `lstat` of the path shows the same file (inode and device) writes through it,
 * with no `open`, `fstat` or `close`. Used only inside a save's synchronous part under the key's lock
 * (never by two saves at once); closed when the file is replaced, deleted or a save fails; bounded
 * (the oldest is closed).
 */
export const keptFiles = new Map<string, KeptFile>();

export function keepFile(file: string, fd: number, st: BigIntStats): void {
  dropFile(file);
  if (keptFiles.size >= KEPT_FILES_MAX) {
    const [oldest] = keptFiles.keys();
    if (oldest !== undefined) dropFile(oldest);
  }
  keptFiles.set(file, { fd, ino: st.ino, dev: st.dev });
}

/** Closes the kept descriptor of `file`, if any. */
export function dropFile(file: string): void {
  const kept = keptFiles.get(file);
  if (kept === undefined) return;
  keptFiles.delete(file);
  try {
    closeSync(kept.fd);
  } catch {
    // already closed: nothing to release
  }
}

/** `paths`' entry for `key`, made by `make` the first time (at most 4096 kept). */
export function memoPath(paths: Map<string, string>, key: string, make: () => string): string {
  let p = paths.get(key);
  if (p === undefined) {
    if (paths.size >= 4096) paths.clear();
    p = make();
    paths.set(key, p);
  }
  return p;
}

/**
 * Splits a byte stream into lines on `\n` (nothing else), each with whether it
 * was terminated by one; a long line is joined once, not chunk by chunk.
 */
export async function* splitLines(
  input: AsyncIterable<Buffer>,
): AsyncGenerator<{ bytes: Buffer; terminated: boolean }> {
  let pending: Buffer[] = [];
  for await (const chunk of input) {
    let pos = 0;
    for (;;) {
      const nl = chunk.indexOf(0x0a, pos);
      if (nl < 0) break;
      const piece = chunk.subarray(pos, nl);
      const bytes = pending.length > 0 ? Buffer.concat([...pending, piece]) : piece;
      pending = [];
      yield { bytes, terminated: true };
      pos = nl + 1;
    }
    if (pos < chunk.length) pending.push(chunk.subarray(pos));
  }
  if (pending.length > 0) yield { bytes: Buffer.concat(pending), terminated: false };
}

export function writeAll(fd: number, bytes: Buffer, position: number): void {
  let off = 0;
  while (off < bytes.length) {
    off += writeSync(fd, bytes, off, bytes.length - off, position + off);
  }
}

export function safeUnlink(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // already gone
  }
}

export function syncDir(dir: string): void {
  const fd = openSync(dir, constants.O_RDONLY);
  try {
    fsyncSync(fd);
  } catch (e) {
    // some file systems refuse fsync on a directory; the rename itself is still atomic
    if (!isCode(e, "EINVAL") && !isCode(e, "EISDIR")) throw e;
  } finally {
    closeSync(fd);
  }
}
