/**
 * `FileBackend`: one `.duas` file per session in a directory, with atomic
 * whole-file writes, revisions with compare-and-set, and saves that cost
 * O(new messages).
 *
 * ## Files
 *
 * `<baseDir>/<key>.duas` (or `<key>.duas.gz` with `{ gzip: true }`); the
 * directory is created on the first write. Keys go through `validateKey`
 * and the resolved path must stay directly inside `baseDir`; files are opened
 * with `O_NOFOLLOW`, so a symlink planted in `baseDir` is never followed.
 * Nothing touches the file system for a bad key. `listKeys()` returns the
 * stems of `*.duas` / `*.duas.gz` and ignores everything else (the temp file
 * `.<key>.duas.tmp`, the header journal `.<key>.duas.hdr` and the lock,
 * `.<key>.duas.lck` or `<key>.duas.lock`). When both `<key>.duas` and
 * `<key>.duas.gz` exist (a crash between writing one and removing the other
 * after a `gzip` option change), the one of the backend's own `gzip` option wins.
 *
 * ## Whole-file writes (first write, `save`, `force`, edits in the middle, `.duas.gz`)
 *
 * The text goes to a temp file in the same directory (`.<key>.duas.tmp`, one per
 * key: writers hold the key's lock, and a temp file left by a crash is overwritten),
 * which is fsync'ed, renamed over `<key>.duas`, and the directory is fsync'ed:
 * a crash leaves the old file or the new one, never a mix. `.duas.gz` files are
 * always written whole this way (a gzip stream cannot be patched in place).
 *
 * ## Appends: O(new messages) (`write(key, state, { expectedRevision, baseLength })`)
 *
 * Files written by this backend carry `[META] revision`, `generation`,
 * `key`, `history_crc32`, `history_bytes`, `prior_commit` and `header_crc32`
 * (see "Identity and integrity" below; `key`, the key the file was written
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
 * ### One sync per save: the commit pair (after the two meta pages of LMDB)
 *
 * Without a sync between 1 and 2, a power loss can leave the head on disk and
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
 * ## Identity and integrity
 *
 * `generation` is a random id written by every whole-file write and kept by
 * appends: the identity of one incarnation of the file. The journal records
 * it and applies only to a file with the same one, because inode and revision
 * numbers are reused: after a delete (`<key>.duas` unlinked first, the
 * journal second) killed between the two unlinks, a session created later on
 * the same key may get the freed inode and the same revisions, and the old
 * journal would roll the deleted session's header and message into it. With
 * the generation such a journal is garbage whatever the order of the
 * unlinks; a writer removes it, and a whole-file write removes any journal of
 * the previous incarnation. Revisions are not reused either: `delete` first
 * raises `<baseDir>/.revision-floor` (the highest revision ever deleted,
 * written atomically under its own lock) to the session's revision, and a new
 * file starts at floor + 1 (as SQLite's `revision_floor`), so a stale writer
 * holding the deleted session's revision gets a `ConflictError` from a
 * session created later on the same key instead of overwriting it.
 *
 * `history_crc32` is a running CRC-32 of the history lines (see `core/codec/crc.ts`): an append
 * extends it from the stored value, and every reader checks the committed
 * lines against it, so a duplicated, reordered or edited line is a
 * `FormatError`, never other data. Only files with a `revision` (written
 * here) may carry an uncommitted tail; a writer verifies the checksum before it
 * truncates one, so a real message is never cut as a "tail". `header_crc32`
 * seals the header. Files of older versions (no generation/chain) load as
 * before and are rewritten whole on their next save.
 *
 * ## Revisions, compare-and-set and processes
 *
 * The revision lives in the file (`[META] revision`, +1 per write; a file
 * without one, e.g. copied in by hand, counts as revision 1). A write's
 * read-check-write cycle runs under an exclusive lock of the key, so writers
 * in several processes (and several backends of one process) never
 * interleave.
 *
 * **Locks.** By default (`locks: "os"`, where the `fs-native-extensions`
 * addon loads: Linux, macOS, Windows on x64/arm64) the lock is an advisory
 * lock on an open descriptor of `.<key>.duas.lck` (open file description locks
 * on Linux, `flock` on macOS, `LockFileEx` on Windows): the file is created
 * once and kept, so a save creates and removes no file (that was half of a
 * save's cost on ext4: a directory change in every sync), and the OS releases
 * the lock of a process that dies, so there is no stale lock to break. A
 * writer that gets the lock checks the path still names the file it locked:
 * `delete` removes the lock file while holding it. Outside Windows the lock
 * file's descriptor, and the `.duas` file's, stay open between saves (at most
 * 64 of each per process, shared by the backends of the process but never used
 * by two saves at once; `close()` releases a directory's): a save that finds
 * the path still naming the same file (its `lstat`) locks and writes through
 * them, with no `open`, `fstat` or `close`. A holder is waited for up to
 * `lockTimeoutMs`. Every process writing one directory must use the same kind
 * of lock. With `locks: "files"` (the fallback where the addon does not load)
 * the lock is a file `<key>.duas.lock`
 * created with `O_EXCL` and holding `pid` and host name. A lock whose process is dead (same host), an
 * empty/unreadable lock older than one second (its writer died between
 * creating and filling it), or another host's lock older than `staleLockMs`,
 * is broken by renaming it away and re-checking it was the same lock. A live
 * holder on this host is waited for (up to `lockTimeoutMs`). `expectedRevision` ≠ stored → `ConflictError` and nothing
 * written; `expectedRevision` given and the file deleted → `ConflictError`
 * (a stale writer never resurrects a deleted session); `null` = must not
 * exist; `force` skips the check. Readers take no lock: they read the file,
 * then re-read the header and retry if it changed meanwhile (a seqlock).
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

import { createHash, randomBytes } from "node:crypto";
import {
  type BigIntStats,
  closeSync,
  constants,
  createReadStream,
  fdatasyncSync,
  fstatSync,
  fsyncSync,
  ftruncateSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { createRequire } from "node:module";
import { hostname } from "node:os";
import path from "node:path";
import { createGunzip, gunzipSync, gzipSync } from "node:zlib";
import {
  BackendError,
  ConflictError,
  DumplingsError,
  FormatError,
  InvalidKeyError,
  InvalidOptionError,
  KeyCollisionError,
  StateNotFoundError,
} from "../../core/errors.js";
import { jsonShape, sameJsonShape } from "../../core/json.js";
import type { Message, Protocol } from "../../core/messages.js";
import { checkOptions, optionKeys } from "../../core/options.js";
import type { AgentState } from "../../core/state.js";
import { DUAS_EXTENSION, DUAS_GZ_EXTENSION } from "../../core/version.js";
import { booleanOption, pathIdentity, positiveOption } from "../../drivers/options.js";
import { validateKey, windowsFileNameProblem } from "../keys.js";
import type {
  ClippedValue,
  HeaderReadOptions,
  HeaderResult,
  HistoryReadOptions,
  ReadResult,
  StateBackend,
  WriteOptions,
  WriteResult,
} from "../types.js";
import { checkHeaderReadOptions, checkHistoryReadOptions, checkWriteOptions } from "../write-options.js";
import {
  crc32,
  crcHex,
  DuasLineParser,
  decodeBytesDetailed,
  decodeStateDetailed,
  decodeUtf8,
  type EncodedHeader,
  encodeHeader,
  encodeHeaderMemo,
  encodeHistoryLines,
  encodeIniString,
  type HeaderMemo,
  HISTORY_CRC_START,
  historyCrc,
  historyCrcOfLines,
  iniKeyOf,
  isGzip,
  isWellFormedMessage,
  LongValueSummary,
  lentText,
  loadCodec,
  messageText,
  type ParsedHeader,
  type PriorCommit,
} from "./lazy-codec.js";

/** The keys of {@link FileBackendOptions}: any other is an `InvalidOptionError`. */
const FILE_OPTIONS = optionKeys<FileBackendOptions>({
  baseDir: true,
  gzip: true,
  lockTimeoutMs: true,
  staleLockMs: true,
  headerSlack: true,
  locks: true,
});

/** Options of {@link FileBackend}. */
export interface FileBackendOptions {
  /** Directory holding the `.duas` files (created on the first write). */
  baseDir: string;
  /** Write `<key>.duas.gz` (always whole-file writes). @default false */
  gzip?: boolean;
  /** How long a write waits for another process's lock before a `BackendError`, in ms. @default 10000 */
  lockTimeoutMs?: number;
  /** A lock older than this is considered abandoned whatever its owner, in ms. @default 60000 */
  staleLockMs?: number;
  /** Extra bytes of header padding written on whole-file writes, for in-place header updates. @default 256 */
  headerSlack?: number;
  /**
   * How writers of one key exclude each other (see the module doc, "Locks"):
   * `"os"`, an advisory lock on an open descriptor of `.<key>.duas.lck` (a file
   * kept between saves; released by the OS when its process dies), or
   * `"files"`, a lock file `<key>.duas.lock` created and removed per save
   * (stale ones broken after `staleLockMs`). Every process writing one
   * directory must use the same kind: set `DUMPLINGS_FILE_LOCKS` (`os` or `files`) to give every
   * FileBackend of a process (the `dumplings` CLI's too) the same default.
   * @default `DUMPLINGS_FILE_LOCKS`, else "os" where its addon (`fs-native-extensions`) loads, else "files"
   */
  locks?: "os" | "files";
}

/**
 * Advisory locks on an open descriptor from `fs-native-extensions` (open file
 * description locks on Linux, `flock` on macOS, `LockFileEx` on Windows).
 */
interface OsLocks {
  tryLock(fd: number): boolean;
  unlock(fd: number): void;
}

let osLocksLoaded: OsLocks | Error | undefined;
/** The OS lock addon, or the error that kept it from loading on this platform (asked once). */
function osLocks(): OsLocks | Error {
  if (osLocksLoaded === undefined) {
    try {
      osLocksLoaded = createRequire(import.meta.url)("fs-native-extensions") as OsLocks;
    } catch (e) {
      osLocksLoaded = e instanceof Error ? e : new Error(String(e));
    }
  }
  return osLocksLoaded;
}

const PAGE = 4096;
const NOFOLLOW = constants.O_NOFOLLOW ?? 0;
/** Keys Windows cannot name a file after are refused there ({@link windowsFileNameProblem}). */
const WINDOWS = process.platform === "win32";

/** What the backend knows about a plain `.duas` file it has scanned or written. */
interface FileInfo {
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
function fixedMetaOf(meta: AgentState["meta"]): readonly unknown[] {
  return [meta.formatVersion, meta.schemaVersion, meta.agentUuid, meta.agentName, meta.protocol, meta.class];
}

/** Whether `meta`'s {@link fixedMetaOf} values are `fixed` (compared in place: asked at every append). */
function sameFixedMeta(fixed: readonly unknown[], meta: AgentState["meta"]): boolean {
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
function headOf(header: Buffer): number {
  const i = header.indexOf("\n[CONFIG]\n");
  return i < 0 ? header.length : i;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function isCode(e: unknown, code: string): boolean {
  return (e as NodeJS.ErrnoException | undefined)?.code === code;
}

function lineHasContent(buf: Buffer, start: number, end: number): boolean {
  for (let i = start; i < end; i++) {
    const c = buf[i] as number;
    if (c === 0x20 || (c >= 0x09 && c <= 0x0d)) continue;
    // Blank is what the parser's String#trim() removes: Unicode spaces (U+3000, U+00A0, …) too.
    return c < 0x80 || buf.toString("utf8", i, end).trim() !== "";
  }
  return false;
}

const HISTORY_MARKER = Buffer.from("\n[HISTORY]\n");
const HISTORY_LINE = "[HISTORY]\n";

/**
 * Reads a plain `.duas` file's header bytes (through the `[HISTORY]` line) with
 * positional reads, or undefined when no `[HISTORY]` line is found (then the
 * caller falls back to a whole-file read and its own checks).
 */
function readHead(fd: number): Buffer | undefined {
  for (let size = 64 * 1024; size <= 64 * 1024 * 1024; size *= 4) {
    const b = Buffer.allocUnsafe(size);
    const n = readSync(fd, b, 0, size, 0);
    const i = b.subarray(0, n).indexOf(HISTORY_MARKER);
    if (i >= 0) return Buffer.from(b.subarray(0, i + HISTORY_MARKER.length));
    if (n < size) return undefined;
  }
  return undefined;
}

let cachedHost: string | undefined;
/** This machine's host name, asked once (a system call that was 4% of a save's CPU), for lock files. */
function localHost(): string {
  cachedHost ??= hostname();
  return cachedHost;
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
function verifyCommitted(fd: number, start: number, parser: DuasLineParser): void {
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

/**
 * The number of message lines and their running history CRC-32, over the first `target` message
 * lines from byte `start`, with the readers' rules: a `\r` before the `\n` and blank lines are not
 * in the checksum (see `historyCrc`).
 */
function historyLinesCrc(read: ReadAt, start: number, target: number): { count: number; crc: number } {
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

/**
 * Calls `each` with every `\n`-terminated line (without it) of the file from byte `start`, while
 * `more()`, reading 256 KB at a time.
 *
 * @returns the bytes after the last `\n` when the file ends without one (undefined when none)
 */
function eachLine(read: ReadAt, start: number, more: () => boolean, each: (bytes: Buffer) => void): Buffer | undefined {
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

/** What {@link FileBackend}'s line reader leaves behind: the parser (its header) and the values it clipped. */
interface LinesRef {
  parser: DuasLineParser;
  clipped: ClippedValue[];
}

/** Header lines longer than this many bytes are read in pieces by {@link readHeadBounded}. */
const LONG_LINE_BYTES = 64 * 1024;
const NEWLINE = Buffer.from("\n");
/** The `[CONFIG]` keys whose value is an INI string (a long one can be clipped), with their paths. */
const CLIPPABLE_CONFIG: ReadonlyMap<string, string> = new Map([
  ["prompt", "config.prompt"],
  ["api_provider", "config.apiProvider"],
  ["api_key_env", "config.apiKeyEnv"],
  ["model_name", "config.modelName"],
]);

/** What {@link readHeadBounded} read: the parsed header, where the history starts, the values it clipped. */
interface BoundedHead {
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
function readHeadBounded(fd: number, file: string, clipAt: number): BoundedHead | undefined {
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
function feedHeader(parser: DuasLineParser, head: Buffer, file: string): void {
  let pos = 0;
  while (pos < head.length) {
    const nl = head.indexOf(0x0a, pos);
    const end = nl < 0 ? head.length : nl;
    parser.feed(decodeUtf8(head.subarray(pos, end), file, parser.line + 1, parser.line > 0));
    pos = end + 1;
  }
}

/** Positional reads of an open file: up to `length` bytes at `position` (fewer at its end). */
function readAtFd(fd: number): ReadAt {
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

/** The unit in which storage that was allocated but never written reads back as zeros. */
const SECTOR = 512;

/**
 * Whether `bytes` (read at file offset `offset`) hold a whole sector of NUL bytes, each sector cut to
 * the range of `bytes`: what a power loss leaves where a write's blocks never reached the disk. A NUL
 * among written bytes (a damaged line) is not that shape.
 */
function unwrittenSector(bytes: Buffer, offset: number): boolean {
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

/** {@link readAtFd} over a file's bytes already read. */
function readAtBuffer(buf: Buffer): ReadAt {
  return (position, length) => buf.subarray(position, position + length);
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
function priorCommitToUse(header: ParsedHeader, start: number, read: ReadAt): PriorCommit | undefined {
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
function scanPlain(
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

/**
 * Stores each session as a `.duas` file (see the module doc for the layout,
 * the O(new messages) append path and its crash-safety argument).
 *
 * @example
 * const backend = new FileBackend({ baseDir: "./.dumplingsAI_sessions" });
 * const { revision } = await backend.write("weather-1", state, { expectedRevision: null });
 * state.history.push({ role: "user", content: "and tomorrow?" });
 * await backend.write("weather-1", state, { expectedRevision: revision, baseLength: state.history.length - 1 });
 */
export class FileBackend implements StateBackend {
  /** Backend name used in errors and the registry. */
  readonly name = "file";
  /** Absolute directory of the files. */
  readonly baseDir: string;
  /** The store's identity: the directory's real path (instances on one directory share revision tracking). */
  get storeId(): string {
    if (this.realDir !== undefined) return this.realDir;
    const id = pathIdentity("file", this.baseDir);
    // Once the directory exists its real path is known for good (asked on every save by the tracker).
    if (this.dirExists()) this.realDir = id;
    return id;
  }
  private realDir: string | undefined;
  private readonly gzip: boolean;
  private readonly lockTimeoutMs: number;
  private readonly staleLockMs: number;
  private readonly headerSlack: number;
  /**
   * The OS lock functions (`locks: "os"`), undefined for lock files, or null until the first lock
   * when `locks` is left to its default (loading the addon takes tens of milliseconds, which
   * constructing a backend to list its keys does not spend): see {@link FileBackend.os}.
   */
  private osAddon: OsLocks | undefined | null;
  /** The OS lock functions, or undefined for lock files (the addon is loaded on the first call). */
  private get os(): OsLocks | undefined {
    if (this.osAddon === null) {
      const os = osLocks();
      this.osAddon = os instanceof Error ? undefined : os;
    }
    return this.osAddon;
  }
  /** Lock paths held now with an OS lock, and their descriptors. */
  private readonly held = new Map<string, number>();
  private readonly cache = new Map<string, FileInfo>();
  /** Revision of the `.duas.gz` file this backend last wrote, by key (validated by inode and size). */
  private readonly gzCache = new Map<string, { ino: number; size: number; revision: number }>();

  /**
   * @param options - `baseDir` (required), `gzip` (@default false), `lockTimeoutMs`
   *   (@default 10000), `staleLockMs` (@default 60000), `headerSlack` bytes (@default 256)
   * @throws {InvalidOptionError} for an unknown option, a missing `baseDir` or a value of the wrong kind
   *   (`gzip: "yes"`, `lockTimeoutMs: 0`)
   */
  constructor(options: FileBackendOptions) {
    checkOptions("file", options, FILE_OPTIONS);
    if (!options || typeof options.baseDir !== "string" || options.baseDir === "") {
      throw new InvalidOptionError("file", "baseDir", "is required: the directory of the .duas files (a string)");
    }
    this.baseDir = path.resolve(options.baseDir);
    this.gzip = booleanOption("file", "gzip", options.gzip, false);
    this.lockTimeoutMs = positiveOption("file", "lockTimeoutMs", options.lockTimeoutMs, 10_000);
    this.staleLockMs = positiveOption("file", "staleLockMs", options.staleLockMs, 60_000);
    const slack = options.headerSlack ?? 256;
    if (!Number.isSafeInteger(slack) || slack < 0) {
      throw new InvalidOptionError("file", "headerSlack", `must be a whole number of bytes >= 0, got ${String(slack)}`);
    }
    this.headerSlack = slack;
    // The environment sets the default for every FileBackend of the process (the CLI's too), so all the
    // processes writing one directory can be made to use the same kind of lock.
    const fromEnv = options.locks === undefined ? process.env.DUMPLINGS_FILE_LOCKS || undefined : undefined;
    const locks = options.locks ?? fromEnv;
    if (locks !== undefined && locks !== "os" && locks !== "files") {
      throw new InvalidOptionError(
        "file",
        fromEnv === undefined ? "locks" : "DUMPLINGS_FILE_LOCKS",
        `must be "os" or "files", got ${JSON.stringify(locks)}`,
      );
    }
    if (locks === "os") {
      const os = osLocks();
      if (os instanceof Error) {
        throw new InvalidOptionError(
          "file",
          "locks",
          `"os" needs fs-native-extensions, which does not load on this platform (${os.message}); use "files"`,
        );
      }
      this.osAddon = os;
    } else {
      this.osAddon = locks === "files" ? undefined : null;
    }
  }

  // -------------------------------------------------------------------------
  // paths

  /**
   * The absolute path of `key`'s file with `ext`, checked to lie directly inside `baseDir`.
   *
   * @throws {InvalidKeyError} for a bad key or a path outside `baseDir`
   */
  pathOf(key: string, ext: string = this.gzip ? DUAS_GZ_EXTENSION : DUAS_EXTENSION): string {
    // A save asks for its key's paths several times: each is checked and resolved once (per extension).
    const known = ext === DUAS_EXTENSION ? this.plainPaths : ext === DUAS_GZ_EXTENSION ? this.gzPaths : undefined;
    const memo = known?.get(key);
    if (memo !== undefined) return memo;
    validateKey(key);
    const windows = WINDOWS ? windowsFileNameProblem(key) : undefined;
    if (windows !== undefined) throw new InvalidKeyError(key, windows);
    const p = path.resolve(this.baseDir, key + ext);
    if (path.dirname(p) !== this.baseDir || path.basename(p) !== key + ext) {
      throw new InvalidKeyError(key, `the file would lie outside ${this.baseDir}`);
    }
    if (known !== undefined) {
      if (known.size >= 4096) known.clear();
      known.set(key, p);
    }
    return p;
  }

  /** {@link FileBackend.pathOf}'s checked paths of `.duas` and `.duas.gz` files, by key. */
  private readonly plainPaths = new Map<string, string>();
  private readonly gzPaths = new Map<string, string>();
  /** The header journals' and OS locks' paths, by (checked) key. */
  private readonly journalPaths = new Map<string, string>();
  private readonly lockPaths = new Map<string, string>();

  /** The temp file of `key`'s whole-file writes (hidden: keys never start with "."). */
  private tempOf(key: string): string {
    return path.join(this.baseDir, `.${key}${DUAS_EXTENSION}.tmp`);
  }

  /** The existing file of `key` (own extension first), or undefined. */
  private existing(key: string): { file: string; gz: boolean; st: BigIntStats } | undefined {
    const order = this.gzip ? GZ_FIRST : PLAIN_FIRST;
    for (const gz of order) {
      const file = this.pathOf(key, gz ? DUAS_GZ_EXTENSION : DUAS_EXTENSION);
      try {
        const st = lstatSync(file, { bigint: true });
        if (st.isSymbolicLink()) {
          // ELOOP, as an open with O_NOFOLLOW says: a fault of this one session, not of the store.
          const cause = Object.assign(new Error("a session file is never read or written through a symbolic link"), {
            code: "ELOOP",
          });
          throw new BackendError("file", `refusing to follow the symlink ${file}`, { key, cause });
        }
        return { file, gz, st };
      } catch (e) {
        if (isCode(e, "ENOENT")) continue;
        throw e;
      }
    }
    return undefined;
  }

  /**
   * Refuses a file reached under `key` that was written under another key naming the same file: a file
   * system that folds case or normalises Unicode (macOS, Windows) opens `Alice.duas` for `alice`. Two
   * names lead to one file when their `lstat`s agree; a file merely copied or renamed to another key
   * (two files, or the old name gone) is that key's own.
   *
   * @param key - the key asked for
   * @param file - the path of `key`'s file that was read
   * @param stored - the file's `[META] key`, when it has one
   * @throws {KeyCollisionError} when `stored` is another key whose path names the same file
   */
  private assertKeyOf(key: string, file: string, stored: string | undefined): void {
    if (stored === undefined || stored === key) return;
    let other: string;
    try {
      other = this.pathOf(stored, file.slice(this.pathOf(key, "").length));
    } catch {
      return; // not a key this backend could have written: no other name of this file
    }
    const mine = lstatSync(file, { bigint: true, throwIfNoEntry: false });
    const theirs = lstatSync(other, { bigint: true, throwIfNoEntry: false });
    if (mine !== undefined && theirs !== undefined && mine.ino === theirs.ino && mine.dev === theirs.dev) {
      throw new KeyCollisionError(key, stored, file);
    }
  }

  /** The `[META] key` of `file` (`key`'s file), or undefined when it has none, is missing or cannot be read. */
  private storedKeyOf(key: string, file: string, gz: boolean): string | undefined {
    try {
      if (gz) return this.readFile(key, file, true).key;
      const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
      try {
        const head = readHead(fd);
        if (head === undefined) return undefined;
        const parser = new DuasLineParser(file);
        feedHeader(parser, head, file);
        return parser.header?.key;
      } finally {
        closeSync(fd);
      }
    } catch (e) {
      if (isCode(e, "ENOENT") || e instanceof FormatError) return undefined; // a damaged file may be deleted
      throw e;
    }
  }

  private wrap(e: unknown, what: string, key?: string): unknown {
    if (e instanceof DumplingsError) return e;
    return new BackendError("file", what, { key, cause: e });
  }

  // -------------------------------------------------------------------------
  // the seed contract

  /**
   * Stores the whole state under `key` (a whole-file atomic write; no revision check).
   *
   * @param key - session key (see `validateKey`)
   * @param state - the state
   * @throws {InvalidKeyError} / {NonJsonValueError} / {InvalidStateError} before anything is written
   * @throws {BackendError} on an I/O failure
   */
  async save(key: string, state: AgentState): Promise<void> {
    await this.write(key, state);
  }

  /**
   * Loads the state under `key`.
   *
   * @param key - session key
   * @returns the state
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {FormatError} when the file is malformed (file and line in the message)
   * @throws {BackendError} on an I/O failure
   */
  async load(key: string): Promise<AgentState> {
    const r = await this.read(key);
    if (r === undefined) throw new StateNotFoundError(key, "file");
    return r.state;
  }

  /**
   * Deletes `key`'s file(s), under the key's lock.
   *
   * @param key - session key
   * @returns true when a file was deleted
   * @throws {InvalidKeyError} / {BackendError}
   */
  async delete(key: string): Promise<boolean> {
    await loadCodec();
    this.pathOf(key);
    let lock: string | undefined;
    let dropLock = false;
    try {
      if (!this.dirExists()) return false;
      lock = await this.lock(key);
      // Never another key's file (a case-insensitive file system names it by this key too).
      for (const ext of [DUAS_EXTENSION, DUAS_GZ_EXTENSION]) {
        const file = this.pathOf(key, ext);
        this.assertKeyOf(key, file, this.storedKeyOf(key, file, ext === DUAS_GZ_EXTENSION));
      }
      // A session created later on this key (or any other) starts above every revision deleted here, so a
      // stale writer holding this session's revision gets a ConflictError instead of overwriting it.
      const gone = this.storedRevision(key);
      if (gone > 0) await this.raiseFloor(gone);
      let deleted = false;
      for (const ext of [DUAS_EXTENSION, DUAS_GZ_EXTENSION]) {
        try {
          dropFile(this.pathOf(key, ext));
          unlinkSync(this.pathOf(key, ext));
          deleted = true;
        } catch (e) {
          if (!isCode(e, "ENOENT")) throw e;
        }
      }
      safeUnlink(this.tempOf(key));
      safeUnlink(this.journalOf(key));
      // An OS lock's file is removed while held (a waiter on it sees that and takes the next one).
      if (this.held.has(lock)) {
        safeUnlink(lock);
        dropLock = true;
      }
      this.cache.delete(key);
      this.gzCache.delete(key);
      if (deleted) this.syncDir();
      return deleted;
    } catch (e) {
      throw this.wrap(e, `cannot delete ${JSON.stringify(key)}`, key);
    } finally {
      if (lock) this.unlock(lock, dropLock);
    }
  }

  /**
   * Lists the stored keys (stems of `*.duas` and `*.duas.gz`; other files are ignored).
   *
   * @returns the keys, sorted
   * @throws {BackendError} when the directory cannot be read
   */
  async listKeys(): Promise<string[]> {
    let names: string[];
    try {
      names = readdirSync(this.baseDir);
    } catch (e) {
      if (isCode(e, "ENOENT")) return [];
      throw this.wrap(e, `cannot list ${this.baseDir}`);
    }
    const keys = new Set<string>();
    for (const name of names) {
      const stem = name.endsWith(DUAS_GZ_EXTENSION)
        ? name.slice(0, -DUAS_GZ_EXTENSION.length)
        : name.endsWith(DUAS_EXTENSION)
          ? name.slice(0, -DUAS_EXTENSION.length)
          : undefined;
      if (stem === undefined) continue;
      try {
        validateKey(stem);
        keys.add(stem);
      } catch {
        // not one of ours (e.g. a hidden temp file)
      }
    }
    return [...keys].sort();
  }

  // -------------------------------------------------------------------------
  // revisions, appends

  /**
   * Writes `state` under `key` with an optional compare-and-set, appending only
   * the new messages when possible (see the module doc).
   *
   * @param key - session key
   * @param state - the whole state
   * @param options - `expectedRevision` (number, or `null` = must not exist), `baseLength`
   *   (messages already stored unchanged), `force` (@default false)
   * @returns `{ revision, written, rewritten }`
   * @throws {ConflictError} when the stored revision is not `expectedRevision` (nothing written)
   * @throws {InvalidKeyError} / {NonJsonValueError} / {InvalidStateError} before anything is written
   * @throws {FormatError} when the stored file is malformed and `force` is not set
   * @throws {BackendError} on an I/O failure or a lock timeout
   */
  async write(key: string, state: AgentState, options: WriteOptions = {}): Promise<WriteResult> {
    await loadCodec();
    checkWriteOptions("file", options);
    const target = this.pathOf(key);
    // The key is checked before any file system access; values before any byte of the file is written.
    const protocol = state.meta.protocol;
    let lock: string | undefined;
    try {
      lock = await this.lock(key); // creates the directory when it is missing
      return this.writeLocked(key, target, state, protocol, options);
    } catch (e) {
      // Refusals (conflict, bad value) happen before any byte is written: the cache stays valid.
      if (!(e instanceof DumplingsError) || e instanceof BackendError || e instanceof FormatError) {
        this.cache.delete(key);
        this.gzCache.delete(key);
        dropFile(target);
      }
      throw this.wrap(e, `cannot save ${JSON.stringify(key)}`, key);
    } finally {
      if (lock) this.unlock(lock);
    }
  }

  private writeLocked(
    key: string,
    target: string,
    state: AgentState,
    protocol: AgentState["meta"]["protocol"],
    options: WriteOptions,
  ): WriteResult {
    const current = this.existing(key);
    let info: FileInfo | undefined;
    let fd: number | undefined;
    let actual: number | null = null;
    try {
      if (current && !current.gz) {
        // The descriptor kept from this key's last save when the path still names its file (then the
        // path's lstat is the file's fstat), else a new one, kept for the next save.
        const kept = keptFiles.get(current.file);
        let st: BigIntStats | undefined;
        if (kept !== undefined && kept.ino === current.st.ino && kept.dev === current.st.dev) {
          fd = kept.fd;
          st = current.st;
        } else {
          fd = openSync(current.file, constants.O_RDWR | NOFOLLOW);
          if (KEEP_FILE_FDS) keepFile(current.file, fd, fstatSync(fd, { bigint: true }));
        }
        try {
          info = this.validInfo(key, fd, current.file, st);
        } catch (e) {
          if (!(options.force && e instanceof FormatError)) throw e;
        }
        // force too: another key's file is never overwritten
        this.assertKeyOf(key, current.file, info?.key);
        actual = info?.revision ?? null;
      } else if (current?.gz) {
        const stat = statSync(current.file);
        const known = this.gzCache.get(key);
        if (known && known.ino === stat.ino && known.size === stat.size) actual = known.revision;
        else {
          const found = this.readFile(key, current.file, true);
          this.assertKeyOf(key, current.file, found.key);
          actual = found.revision;
        }
      }
      if (options.force !== true && options.expectedRevision !== undefined) {
        const exists = current !== undefined;
        if (options.expectedRevision === null ? exists : !exists || actual !== options.expectedRevision) {
          throw new ConflictError(key, options.expectedRevision, exists ? actual : null, "file");
        }
      }
      // A new file starts above every deleted revision (the floor); an existing one counts on (above a
      // commit that did not reach the disk too, see priorCommitToUse: its revision number is never reused).
      // A file whose header cannot be read (force over a damaged file) still names its revision: above it.
      const revision =
        current && actual !== null
          ? nextRevision(Math.max(actual, info?.abandoned ?? 0))
          : Math.max(this.readFloor(), current ? this.storedRevision(key) : 0) + 1;
      const base = options.baseLength;
      if (
        fd !== undefined &&
        info !== undefined &&
        !this.gzip &&
        options.force !== true &&
        typeof options.expectedRevision === "number" &&
        base !== undefined &&
        base === info.count &&
        base <= state.history.length &&
        protocol === info.protocol
      ) {
        const appended = this.tryAppend(key, fd, info, state, revision, base);
        if (appended) return appended;
      }
    } finally {
      if (fd !== undefined && keptFiles.get((current as { file: string }).file)?.fd !== fd) closeSync(fd);
    }
    return this.rewrite(
      key,
      target,
      state,
      current && actual !== null
        ? nextRevision(Math.max(actual, info?.abandoned ?? 0))
        : Math.max(this.readFloor(), current ? this.storedRevision(key) : 0) + 1,
      current,
    );
  }

  /** Validates the cached info of `key` against the open file, or rescans it (repairing an uncommitted tail). */
  private validInfo(key: string, fd: number, file: string, stat?: BigIntStats): FileInfo {
    const st = stat ?? fstatSync(fd, { bigint: true });
    const size = Number(st.size);
    const ino = Number(st.ino);
    const cached = this.cache.get(key);
    // The file is the one this backend last wrote or scanned when its identity (inode, size, mtime, ctime,
    // the journal's) is unchanged and so is its head: revision, generation, count and header_crc32 (every
    // writer changes the revision). The body of the header (a prompt of any size) is not read again.
    if (
      cached &&
      cached.ino === ino &&
      cached.end === size &&
      cached.mtimeNs === st.mtimeNs &&
      cached.ctimeNs === st.ctimeNs &&
      this.journalId(key) === cached.journal
    ) {
      const head = Buffer.allocUnsafe(cached.headBytes);
      const n = readSync(fd, head, 0, head.length, 0);
      if (n === head.length && head.equals(cached.header.subarray(0, cached.headBytes))) return cached;
    }
    const journal = this.readJournal(key);
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
      safeUnlink(this.journalOf(key));
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
      journal: this.journalId(key),
      historyBytes: scan.header.historyBytes,
      savedAt: scan.header.meta.savedAt,
      fixedMeta: fixedMetaOf(scan.header.meta),
    };
    if (scan.commit !== undefined && scan.written !== undefined) info.abandoned = scan.written;
    this.cache.set(key, info);
    return info;
  }

  /** The append path; returns undefined when the header change cannot be done in place. */
  private tryAppend(
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
    const plan = (
      prior: PriorCommit,
    ): { enc: EncodedHeader; patches: HeaderPatch[]; pages: Set<number> } | undefined => {
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
        if ((enc.headOnly || enc.tail) && enc.headBytes !== info.headBytes)
          enc = encodeHeaderMemo(state, count, layout);
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
        for (
          let page = Math.floor(p.offset / PAGE);
          page <= Math.floor((p.offset + p.bytes.length - 1) / PAGE);
          page++
        ) {
          pages.add(page);
        }
      }
      if (pages.size === 1 && patches.length > 1) {
        // Within one page, one write (all-or-nothing under kill -9, see the module doc), not one per range.
        const from = (patches[0] as HeaderPatch).offset;
        const to =
          (patches[patches.length - 1] as HeaderPatch).offset +
          (patches[patches.length - 1] as HeaderPatch).bytes.length;
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
      this.writeJournal(key, {
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
      journal = this.journalId(key); // applied: settled for the next saves
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
    this.cache.set(key, {
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

  /** The file holding the highest revision ever deleted in `baseDir` (hidden: keys never start with "."). */
  private floorPath(): string {
    return path.join(this.baseDir, ".revision-floor");
  }

  /** The highest revision ever deleted in `baseDir` (0 when none). */
  private readFloor(): number {
    try {
      const n = Number(readFileSync(this.floorPath(), "latin1").trim());
      return Number.isSafeInteger(n) && n > 0 ? n : 0;
    } catch (e) {
      if (isCode(e, "ENOENT")) return 0;
      throw e;
    }
  }

  /** Raises the floor to `revision` (durable before it returns; under its own lock: it only grows). */
  private async raiseFloor(revision: number): Promise<void> {
    const file = this.floorPath();
    const lock = await this.lockAt(this.lockPathBeside(file));
    try {
      if (this.readFloor() >= revision) return;
      const tmp = `${file}.tmp`;
      const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | NOFOLLOW, 0o644);
      try {
        writeAll(fd, Buffer.from(`${revision}\n`), 0);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, file);
      this.syncDir();
    } finally {
      this.unlock(lock);
    }
  }

  /**
   * The highest revision `key`'s files say they hold (the header's, or a pending journal's), 0 when none
   * can be read. Read under the key's lock by `delete`, from the header bytes only.
   */
  private storedRevision(key: string): number {
    let highest = 0;
    for (const ext of [DUAS_EXTENSION, DUAS_GZ_EXTENSION]) {
      const file = this.pathOf(key, ext);
      try {
        if (ext === DUAS_GZ_EXTENSION) {
          highest = Math.max(highest, this.readFile(key, file, true).revision);
          continue;
        }
        const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
        try {
          const head = readHead(fd) ?? Buffer.alloc(0);
          const m = /\nrevision = (\d+)/.exec(head.toString("latin1"));
          highest = Math.max(highest, m ? Number(m[1]) : head.length > 0 ? 1 : 0);
        } finally {
          closeSync(fd);
        }
      } catch (e) {
        if (isCode(e, "ENOENT")) continue;
        if (!(e instanceof FormatError)) throw e;
        // a damaged file: its revision is unknown; the journal may still tell, else nothing to raise
      }
    }
    return Math.max(highest, this.readJournal(key)?.revision ?? 0);
  }

  /** The header journal of `key` (hidden: keys never start with "."). */
  private journalOf(key: string): string {
    return memoPath(this.journalPaths, key, () => path.join(this.baseDir, `.${key}${DUAS_EXTENSION}.hdr`));
  }

  /**
   * The identity of `key`'s journal file (inode, size, mtime, ctime), or undefined when there is none:
   * a journal this backend wrote and applied, or examined, is not read again while it is unchanged.
   */
  private journalId(key: string): string | undefined {
    const s = lstatSync(this.journalOf(key), { bigint: true, throwIfNoEntry: false });
    return s === undefined ? undefined : `${s.ino}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
  }

  /**
   * Makes the new header durable in the journal before the in-place write that
   * spans several pages (see the module doc). Created once per key (then the
   * directory is fsync'ed), overwritten afterwards.
   */
  private writeJournal(key: string, journal: Journal): void {
    const file = this.journalOf(key);
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
    if (created) this.syncDir();
  }

  /** Reads `key`'s journal; undefined when absent or not intact. */
  private readJournal(key: string): Journal | undefined {
    let bytes: Buffer;
    try {
      const jfd = openSync(this.journalOf(key), constants.O_RDONLY | NOFOLLOW);
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

  /** Whole-file atomic write: temp file, fsync, rename, fsync of the directory. */
  private rewrite(
    key: string,
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
    if (this.gzip) {
      header = encodeHeader(state, count, sealed);
    } else {
      // The natural header, then `headerSlack` bytes of padding in a comment line before [HISTORY]
      // (what encodeHeader's padTo writes for padTo = natural + headerSlack + 2, encoded once). Its
      // prior_commit is its own commit (a whole-file write is synced before the rename makes it visible).
      historyBytes = Buffer.byteLength(lines);
      const prior = { revision, messageCount: count, historyBytes, historyCrc32, savedAt: state.meta.savedAt };
      enc = encodeHeaderMemo(state, count, { ...sealed, fixedWidth: true, historyBytes, prior });
      header = `${enc.text.slice(0, -HISTORY_LINE.length)}#${" ".repeat(this.headerSlack)}\n${HISTORY_LINE}`;
    }
    const text = Buffer.from(header + lines, "utf8");
    const bytes = this.gzip ? gzipSync(text) : text;
    // One temp name per key is safe: we hold the key's lock. A temp file left by a crash is simply overwritten.
    const tmp = this.tempOf(key);
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
    this.syncDir();
    // The old incarnation's journal is garbage now (it could never apply: other generation); tidy it up.
    safeUnlink(this.journalOf(key));
    // rename changes the ctime: the identity the next save checks is taken after it
    const st = this.gzip ? undefined : lstatSync(target, { bigint: true });
    if (this.gzip || enc === undefined || st === undefined || Number(st.ino) !== ino) {
      this.cache.delete(key);
      if (this.gzip) this.gzCache.set(key, { ino, size: bytes.length, revision });
      else this.gzCache.delete(key);
    } else {
      this.gzCache.delete(key);
      const headerLen = Buffer.byteLength(header);
      this.cache.set(key, {
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
        journal: this.journalId(key),
        historyBytes,
        savedAt: state.meta.savedAt,
        fixedMeta: fixedMetaOf(state.meta),
      });
    }
    return { revision, written: count, rewritten: true };
  }

  /**
   * Loads `key` with its revision.
   *
   * @param key - session key
   * @returns `{ state, revision }`, or undefined when nothing is stored
   * @throws {FormatError} / {InvalidKeyError} / {BackendError}
   */
  async read(key: string): Promise<ReadResult | undefined> {
    await loadCodec();
    try {
      const current = this.existing(key);
      if (!current) return undefined;
      const r = this.readFile(key, current.file, current.gz);
      this.assertKeyOf(key, current.file, r.key);
      return { state: r.state, revision: r.revision };
    } catch (e) {
      if (isCode(e, "ENOENT")) return undefined; // deleted between the check and the open
      throw this.wrap(e, `cannot load ${JSON.stringify(key)}`, key);
    }
  }

  /** Reads and decodes one file: the committed part of a plain file (seqlock-checked), or a whole gzip file. */
  private readFile(
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
          const journal = this.readJournal(key);
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
   * The header of `key` (meta, config, state) without reading its history.
   * With `clipAt`, a `[CONFIG]` string or `[STATE]` value longer than that is
   * read in pieces and returned clipped (listed in `clipped`): memory stays
   * bounded whatever the value's size, for a sealed header (every header this
   * backend writes; another is read whole).
   *
   * @param key - session key
   * @param options - `clipAt` (see {@link HeaderReadOptions})
   * @returns `{ header, revision, clipped? }`, or undefined when nothing is stored
   * @throws {InvalidOptionError} for an unknown option or a bad `clipAt`
   * @throws {FormatError} / {InvalidKeyError} / {BackendError}
   */
  async readHeader(key: string, options: HeaderReadOptions = {}): Promise<HeaderResult | undefined> {
    await loadCodec();
    const clipAt = checkHeaderReadOptions(this.name, options);
    const current = this.existing(key);
    if (!current) return undefined;
    const ref: LinesRef = { parser: new DuasLineParser(current.file), clipped: [] };
    try {
      for await (const _ of this.lines(key, current.file, current.gz, ref, { headerOnly: true, clipAt })) {
        // header only
      }
    } catch (e) {
      if (isCode(e, "ENOENT")) return undefined;
      throw this.wrap(e, `cannot load ${JSON.stringify(key)}`, key);
    }
    const h = ref.parser.header;
    if (!h) return undefined;
    const result: HeaderResult = {
      header: { meta: h.meta, config: h.config, state: h.state },
      revision: h.revision ?? 1,
    };
    if (ref.clipped.length > 0) result.clipped = ref.clipped;
    return result;
  }

  /**
   * Streams the history of `key` line by line with bounded memory (also for `.duas.gz`).
   * Only committed messages are returned (see the module doc).
   *
   * The stream reads one open file: saves made meanwhile (appends, rewrites by rename) never change it.
   *
   * @param key - session key
   * @param options - `revision`: the stored revision the stream must be (see {@link HistoryReadOptions})
   * @returns the messages in order
   * @throws {StateNotFoundError} when nothing is stored
   * @throws {ConflictError} when `options.revision` is not the revision of the file the stream opened
   * @throws {FormatError} for a malformed line (file and line in the message)
   */
  async *iterHistory(key: string, options: HistoryReadOptions = {}): AsyncGenerator<Message> {
    await loadCodec();
    checkHistoryReadOptions(this.name, options);
    const current = this.existing(key);
    if (!current) throw new StateNotFoundError(key, "file");
    const ref: LinesRef = { parser: new DuasLineParser(current.file), clipped: [] };
    try {
      yield* this.lines(key, current.file, current.gz, ref, { revision: options.revision });
    } catch (e) {
      if (isCode(e, "ENOENT")) throw new StateNotFoundError(key, "file");
      throw this.wrap(e, `cannot read the history of ${JSON.stringify(key)}`, key);
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
  private async *lines(
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
      this.assertKeyOf(key, file, h.key);
      if (revision !== undefined && (h.revision ?? 1) !== revision) {
        throw new ConflictError(key, revision, h.revision ?? 1, this.name);
      }
    };
    const journal = gz ? undefined : this.readJournal(key);
    if (journal && journalPending(file, journal)) {
      // A save interrupted by a crash, not rolled forward yet (no writer since): the journal holds it.
      yield* this.linesOfWholeRead(key, file, ref, headerOnly, pin);
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
      yield* this.linesOfWholeRead(key, file, ref, headerOnly, pin);
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
            yield* this.linesOfWholeRead(key, file, ref, headerOnly, pin);
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
  private async *linesOfWholeRead(
    key: string,
    file: string,
    ref: { parser: DuasLineParser },
    headerOnly: boolean,
    pin: (h: ParsedHeader) => void,
  ): AsyncGenerator<Message> {
    const { state, revision, key: stored } = this.readFile(key, file, false);
    this.assertKeyOf(key, file, stored);
    const parser = new DuasLineParser(file);
    const text = encodeHeader(state, state.history.length, { revision }).split("\n");
    text.pop();
    for (const l of text) parser.feed(l);
    ref.parser = parser;
    if (parser.header) pin(parser.header);
    if (headerOnly) return;
    for (const m of state.history) yield m;
  }

  /**
   * Forgets what this backend cached and closes the descriptors kept open between saves of this
   * directory's files and locks (a later save opens them again).
   */
  close(): void {
    this.cache.clear();
    this.gzCache.clear();
    // The descriptors kept open for this directory's files (another backend on it opens them again when it saves).
    const inside = this.baseDir + path.sep;
    for (const file of [...keptFiles.keys()]) if (file.startsWith(inside)) dropFile(file);
    for (const [lockPath, kept] of [...keptLocks]) {
      if (!kept.busy && lockPath.startsWith(inside)) {
        keptLocks.delete(lockPath);
        closeSync(kept.fd);
      }
    }
  }

  // -------------------------------------------------------------------------
  // locking

  private dirExists(): boolean {
    try {
      return statSync(this.baseDir).isDirectory();
    } catch (e) {
      if (isCode(e, "ENOENT")) return false;
      throw e;
    }
  }

  private syncDir(): void {
    const fd = openSync(this.baseDir, constants.O_RDONLY);
    try {
      fsyncSync(fd);
    } catch (e) {
      // some file systems refuse fsync on a directory; the rename itself is still atomic
      if (!isCode(e, "EINVAL") && !isCode(e, "EISDIR")) throw e;
    } finally {
      closeSync(fd);
    }
  }

  /** Takes `key`'s lock (see {@link FileBackendOptions.locks}); returns its path, for {@link FileBackend.unlock}. */
  private lock(key: string): Promise<string> {
    const data = this.pathOf(key, DUAS_EXTENSION);
    return this.lockAt(
      this.os
        ? memoPath(this.lockPaths, key, () => path.join(this.baseDir, `.${key}${DUAS_EXTENSION}.lck`))
        : `${data}.lock`,
      key,
    );
  }

  /** The lock guarding the file `file` (the revision floor's): `<file>.lck` or `<file>.lock`. */
  private lockPathBeside(file: string): string {
    return `${file}${this.os ? ".lck" : ".lock"}`;
  }

  /**
   * Takes the lock at `lockPath`: an OS lock on an open descriptor of it
   * (`locks: "os"`), else the lock file itself (O_EXCL), breaking a stale one.
   * Waits for another holder up to `lockTimeoutMs`.
   *
   * @throws {BackendError} on a timeout
   */
  private async lockAt(lockPath: string, key?: string): Promise<string> {
    if (this.os) return this.lockOs(this.os, lockPath, key);
    const me = `${process.pid}\n${localHost()}\n`;
    let madeDir = false;
    const deadline = Date.now() + this.lockTimeoutMs;
    let wait = 1;
    for (;;) {
      try {
        const fd = openSync(lockPath, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | NOFOLLOW, 0o644);
        try {
          writeSync(fd, me);
        } finally {
          closeSync(fd);
        }
        return lockPath;
      } catch (e) {
        if (isCode(e, "ENOENT") && !madeDir) {
          // the first write into a new directory (not a mkdir on every save)
          mkdirSync(path.dirname(lockPath), { recursive: true });
          madeDir = true;
          continue;
        }
        if (!isCode(e, "EEXIST")) throw e;
      }
      if (this.breakIfStale(lockPath)) continue;
      if (Date.now() > deadline) {
        throw new BackendError("file", `timed out after ${this.lockTimeoutMs} ms waiting for the lock ${lockPath}`, {
          key,
        });
      }
      await sleep(wait);
      wait = Math.min(wait * 2, 25);
    }
  }

  /** True when the lock was stale and has been removed (or vanished). */
  private breakIfStale(lockPath: string): boolean {
    let content: string;
    let age: number;
    try {
      content = readFileSync(lockPath, "utf8");
      age = Date.now() - statSync(lockPath).mtimeMs;
    } catch (e) {
      if (isCode(e, "ENOENT")) return true;
      throw e;
    }
    if (!this.isStale(content, age)) return false;
    const aside = `${lockPath}.${process.pid}.${Math.random().toString(36).slice(2)}.stale`;
    try {
      renameSync(lockPath, aside);
    } catch (e) {
      if (isCode(e, "ENOENT")) return true; // someone else broke it
      throw e;
    }
    let moved = "";
    try {
      moved = readFileSync(aside, "utf8");
    } catch {
      // gone: nothing to restore
    }
    if (moved !== content) {
      // We moved a fresh lock taken after our check: put it back.
      try {
        linkSync(aside, lockPath);
      } catch {
        // a third process holds a new lock; ours is the lost one
      }
    }
    safeUnlink(aside);
    return true;
  }

  private isStale(content: string, ageMs: number): boolean {
    const [pidText, host] = content.split("\n");
    const pid = Number(pidText);
    if (!content.endsWith("\n") || !Number.isInteger(pid) || pid <= 0) return ageMs > 1000;
    if (host !== localHost()) return ageMs > this.staleLockMs; // cannot check another host's process
    if (pid === process.pid) return false;
    try {
      process.kill(pid, 0);
      return false; // a live holder on this host is waited for, however long it takes
    } catch (e) {
      return isCode(e, "ESRCH");
    }
  }

  /**
   * The `locks: "os"` path of {@link FileBackend.lockAt}: opens (creating it once) the lock file and takes
   * an exclusive advisory lock on that descriptor; no file is created or removed per save, and the OS
   * releases the lock of a process that dies. The file stays between saves; `delete` removes it while it
   * holds the lock, so a writer that got the lock on a file no longer at the path drops it and retries.
   * Outside Windows the descriptor is kept open after the unlock (see {@link keptLocks}), so the next save
   * of the key locks it again with no `open`, `fstat` or `close`: only the path's identity is checked.
   */
  private async lockOs(os: OsLocks, lockPath: string, key: string | undefined): Promise<string> {
    let madeDir = false;
    const deadline = Date.now() + this.lockTimeoutMs;
    let wait = 1;
    for (;;) {
      const kept = keptLocks.get(lockPath);
      if (kept !== undefined && !kept.busy) {
        // The kept descriptor of this lock file (no other backend of this process holds it now).
        if (os.tryLock(kept.fd)) {
          const now = lstatSync(lockPath, { throwIfNoEntry: false });
          if (now !== undefined && now.ino === kept.ino && now.dev === kept.dev) {
            kept.busy = true;
            this.held.set(lockPath, kept.fd);
            return lockPath;
          }
          // removed (by a delete) since it was kept: drop it (closing releases the lock) and open the file now there
          keptLocks.delete(lockPath);
          closeSync(kept.fd);
          continue;
        }
      } else {
        let fd: number;
        try {
          fd = openSync(lockPath, constants.O_RDWR | constants.O_CREAT | NOFOLLOW, 0o644);
        } catch (e) {
          if (isCode(e, "ENOENT") && !madeDir) {
            // the first write into a new directory (not a mkdir on every save)
            mkdirSync(path.dirname(lockPath), { recursive: true });
            madeDir = true;
            continue;
          }
          throw e;
        }
        let kept = false;
        try {
          if (os.tryLock(fd)) {
            const now = lstatSync(lockPath, { throwIfNoEntry: false });
            const mine = fstatSync(fd);
            if (now !== undefined && now.ino === mine.ino && now.dev === mine.dev) {
              this.held.set(lockPath, fd);
              if (KEEP_LOCK_FDS && !keptLocks.has(lockPath)) keepLock(lockPath, fd, mine.ino, mine.dev);
              kept = true;
              return lockPath;
            }
            continue; // removed by a delete meanwhile: lock the file now at the path (closing drops this lock)
          }
        } finally {
          if (!kept) closeSync(fd);
        }
      }
      if (Date.now() > deadline) {
        throw new BackendError("file", `timed out after ${this.lockTimeoutMs} ms waiting for the lock ${lockPath}`, {
          key,
        });
      }
      await sleep(wait);
      wait = Math.min(wait * 2, 25);
    }
  }

  /**
   * Releases a lock of {@link FileBackend.lockAt}: unlocks its descriptor (and closes it unless it is kept
   * for the next save: `drop` after its file was removed), or removes the lock file.
   */
  private unlock(lockPath: string, drop = false): void {
    const fd = this.held.get(lockPath);
    if (fd === undefined) {
      safeUnlink(lockPath);
      return;
    }
    this.held.delete(lockPath);
    const kept = keptLocks.get(lockPath);
    const keep = kept !== undefined && kept.fd === fd && !drop;
    if (kept !== undefined && kept.fd === fd && drop) keptLocks.delete(lockPath);
    try {
      this.os?.unlock(fd);
    } finally {
      if (keep) (kept as KeptLock).busy = false;
      else closeSync(fd);
    }
  }
}

const PLAIN_FIRST = [false, true] as const;
const GZ_FIRST = [true, false] as const;

/** A plain `.duas` file's descriptor kept open between saves (see {@link keptFiles}). */
interface KeptFile {
  fd: number;
  /** Identity of the file it was opened on (a save uses it only while the path's lstat shows the same). */
  ino: bigint;
  dev: bigint;
}

/** Whether `.duas` files' descriptors are kept open between saves (not on Windows, as {@link KEEP_LOCK_FDS}). */
const KEEP_FILE_FDS = process.platform !== "win32";
/** At most this many `.duas` descriptors are kept open (per process, for all backends). */
const KEPT_FILES_MAX = 64;
/**
 * Plain `.duas` files' descriptors kept open after a save, by path, shared by the backends of this
 * process: a save whose `lstat` of the path shows the same file (inode and device) writes through it,
 * with no `open`, `fstat` or `close`. Used only inside a save's synchronous part under the key's lock
 * (never by two saves at once); closed when the file is replaced, deleted or a save fails; bounded
 * (the oldest is closed).
 */
const keptFiles = new Map<string, KeptFile>();

function keepFile(file: string, fd: number, st: BigIntStats): void {
  dropFile(file);
  if (keptFiles.size >= KEPT_FILES_MAX) {
    const [oldest] = keptFiles.keys();
    if (oldest !== undefined) dropFile(oldest);
  }
  keptFiles.set(file, { fd, ino: st.ino, dev: st.dev });
}

/** Closes the kept descriptor of `file`, if any. */
function dropFile(file: string): void {
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
function memoPath(paths: Map<string, string>, key: string, make: () => string): string {
  let p = paths.get(key);
  if (p === undefined) {
    if (paths.size >= 4096) paths.clear();
    p = make();
    paths.set(key, p);
  }
  return p;
}

/** A lock file's descriptor kept open between saves (see {@link keptLocks}). */
interface KeptLock {
  fd: number;
  /** Identity of the file it was opened on (compared with the path's at every lock). */
  ino: number;
  dev: number;
  /** Locked now by a backend of this process (another backend, or save, opens its own descriptor). */
  busy: boolean;
}

/**
 * Whether lock files' descriptors are kept open between saves. Not on Windows, where a file open
 * elsewhere cannot be created again at its path once deleted until every descriptor is closed.
 */
const KEEP_LOCK_FDS = process.platform !== "win32";
/** At most this many lock descriptors are kept open (per process, for all backends). */
const KEPT_LOCKS_MAX = 64;
/**
 * Lock files' descriptors kept open after an unlock, by path, shared by the backends of this process:
 * the next lock of the path is a `tryLock` on it and an `lstat` of the path (it must still name the
 * same file), not an `open`, `fstat` and `close` per save. A descriptor in use (`busy`) is never
 * shared: a second backend of the process on the same directory opens its own, so the OS lock still
 * excludes it (the locks are per open file description). Bounded: the oldest idle one is closed.
 */
const keptLocks = new Map<string, KeptLock>();

function keepLock(lockPath: string, fd: number, ino: number, dev: number): void {
  if (keptLocks.size >= KEPT_LOCKS_MAX) {
    for (const [p, k] of keptLocks) {
      if (k.busy) continue;
      keptLocks.delete(p);
      closeSync(k.fd);
      break;
    }
    if (keptLocks.size >= KEPT_LOCKS_MAX) return;
  }
  keptLocks.set(lockPath, { fd, ino, dev, busy: true });
}

/** True when the file's first bytes are no longer `before` (a writer updated the header meanwhile). */
function headerMoved(fd: number, before: Buffer): boolean {
  const now = Buffer.alloc(before.length);
  const n = readSync(fd, now, 0, now.length, 0);
  return n !== before.length || !now.equals(before);
}

/**
 * Splits a byte stream into lines on `\n` (nothing else), each with whether it
 * was terminated by one; a long line is joined once, not chunk by chunk.
 */
async function* splitLines(input: AsyncIterable<Buffer>): AsyncGenerator<{ bytes: Buffer; terminated: boolean }> {
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

function nextRevision(actual: number | null): number {
  return (actual ?? 0) + 1;
}

/** Bytes of a header at a byte offset (a piece of a new header, or what a save changes in it). */
interface HeaderPatch {
  offset: number;
  bytes: Buffer;
}

/**
 * A durable copy of a save (the header bytes it changes + appended lines) about to be written in place
 * across several pages.
 */
interface Journal {
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

const JOURNAL_MAGIC = "duas-header-journal/4";
/** Journals of older versions, each holding the whole new header: `/3`, and `/2` without a generation. */
const JOURNAL_MAGIC_V3 = "duas-header-journal/3";
const JOURNAL_MAGIC_V2 = "duas-header-journal/2";

function sha256(bytes: Buffer): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/**
 * The byte ranges where `pieces` (of a new header, at their offsets) differ from `old`: compared a
 * page at a time (memcmp), runs of changed pages joined, each run cut to its first and last changed
 * byte. A save that changes the head and `[STATE]` around a 50 MB prompt yields two small patches.
 */
function changedRanges(pieces: readonly HeaderPatch[], old: Buffer): HeaderPatch[] {
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

function encodeJournal(j: Journal): Buffer {
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
function decodeJournal(bytes: Buffer): Journal | undefined {
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
function fileGeneration(head: Buffer): string | undefined {
  const end = head.indexOf("\n[CONFIG]");
  const m = /\ngeneration = ([0-9a-f]+)\n/.exec(head.toString("latin1", 0, end < 0 ? head.length : end));
  return m?.[1];
}

/** Reads `length` bytes of a file at `offset` (fewer at its end). */
type ReadAt = (offset: number, length: number) => Buffer;

/** How much of a header's start holds `[META]` (its generation and revision) in all but odd files. */
const META_PROBE = 64 * 1024;

/**
 * The file's committed bytes with the journal's save applied, when the journal
 * applies and the file does not already hold it: same inode, and the file's
 * header revision is the journal's or the one before (a torn or
 * not-yet-written save is rolled forward: the journal was durable before any
 * byte of the file was touched). Otherwise undefined.
 */
function applyJournal(buf: Buffer, journal: Journal, ino: number): Buffer | undefined {
  if (!journalApplies(readAtBuffer(buf), buf.length, journal, ino)) return undefined;
  const out = Buffer.concat([buf.subarray(0, journal.dataOffset), journal.lines]);
  for (const p of journal.patches) p.bytes.copy(out, p.offset);
  return out;
}

/**
 * The decision of {@link applyJournal}, reading the file's bytes through `readAt`: the header's
 * `[META]`, the bytes under each patch and at the journal's data offset.
 */
function journalApplies(readAt: ReadAt, size: number, journal: Journal, ino: number): boolean {
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
function journalPending(file: string, journal: Journal): boolean {
  const fd = openSync(file, constants.O_RDONLY | NOFOLLOW);
  try {
    const st = fstatSync(fd);
    return journalApplies(readAtFd(fd), st.size, journal, st.ino);
  } finally {
    closeSync(fd);
  }
}

/**
 * The `.duas` lines of `history[from…]`: a message whose JSON text the persistence layer lent for this
 * write (see `lendTexts`) and that keeps its protocol's schema is not serialised or validated again;
 * any other goes through `encodeHistoryLines` (which names the field at fault).
 */
function newLines(history: readonly Message[], from: number, protocol: Protocol): string {
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

function jsonOf(message: Message | undefined): string | undefined {
  return message === undefined ? undefined : JSON.stringify(message);
}

function writeAll(fd: number, bytes: Buffer, position: number): void {
  let off = 0;
  while (off < bytes.length) {
    off += writeSync(fd, bytes, off, bytes.length - off, position + off);
  }
}

function safeUnlink(file: string): void {
  try {
    unlinkSync(file);
  } catch {
    // already gone
  }
}
