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
 * ## The mechanisms, one module each
 *
 * - `append.ts`: appends, O(new messages), and their crash-safety argument; the per-key cache;
 * - `power-loss.ts`: one sync per save, the commit pair a reader falls back to after a power loss;
 * - `header-journal.ts`: the journal of a header write spanning pages;
 * - `lock.ts`: the writers' locks; `revision-floor.ts`: revisions never reused after a delete;
 * - `scan.ts` and `read.ts`: reading a file (its header, its committed lines) and the read paths;
 * - `whole-write.ts`: whole-file writes; `layout.ts`: the header memo;
 * - `io.ts`: positional reads and writes, kept descriptors; `lazy-codec.ts`: what loads with the codec.
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
 * interleave (see `lock.ts`). `expectedRevision` ≠ stored → `ConflictError` and nothing
 * written; `expectedRevision` given and the file deleted → `ConflictError`
 * (a stale writer never resurrects a deleted session); `null` = must not
 * exist; `force` skips the check. Readers take no lock: they read the file,
 * then re-read the header and retry if it changed meanwhile (a seqlock).
 *
 * @module
 */

import {
  type BigIntStats,
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  statSync,
  unlinkSync,
} from "node:fs";
import path from "node:path";
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
import type { Message } from "../../core/messages.js";
import { checkOptions, optionKeys } from "../../core/options.js";
import type { AgentState } from "../../core/state.js";
import { DUAS_EXTENSION, DUAS_GZ_EXTENSION } from "../../core/version.js";
import { booleanOption, pathIdentity, positiveOption } from "../../drivers/options.js";
import { validateKey, windowsFileNameProblem } from "../keys.js";
import type {
  HeaderReadOptions,
  HeaderResult,
  HistoryReadOptions,
  ReadResult,
  StateBackend,
  WriteOptions,
  WriteResult,
} from "../types.js";
import { checkHeaderReadOptions, checkHistoryReadOptions, checkWriteOptions } from "../write-options.js";
import type { FileInfo } from "./append.js";
import { HeaderJournals } from "./header-journal.js";
import { dropFile, isCode, KEEP_FILE_FDS, keepFile, keptFiles, NOFOLLOW, safeUnlink, syncDir } from "./io.js";
import {
  DuasLineParser,
  feedHeader,
  fileLines,
  loadCodec,
  readFileWhole,
  readHead,
  rewrite,
  tryAppend,
  validInfo,
} from "./lazy-codec.js";
import { closeKeptLocks, FileLocks, type OsLocks, osLocks } from "./lock.js";
import type { LinesRef, ReadContext } from "./read.js";
import { RevisionFloor } from "./revision-floor.js";
import type { WholeWriteContext } from "./whole-write.js";

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

/** Keys Windows cannot name a file after are refused there ({@link windowsFileNameProblem}). */
const WINDOWS = process.platform === "win32";

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
  private readonly headerSlack: number;
  /** The writers' locks of the directory's keys. */
  private readonly locks: FileLocks;
  /** The header journals of the directory's files. */
  private readonly journals: HeaderJournals;
  /** The highest revision ever deleted in the directory. */
  private readonly floor: RevisionFloor;
  /** What whole-file writes need of this backend. */
  private readonly whole: WholeWriteContext;
  /** What the read paths need of this backend. */
  private readonly reader: ReadContext;
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
    const lockTimeoutMs = positiveOption("file", "lockTimeoutMs", options.lockTimeoutMs, 10_000);
    const staleLockMs = positiveOption("file", "staleLockMs", options.staleLockMs, 60_000);
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
    let osAddon: OsLocks | undefined | null;
    if (locks === "os") {
      const os = osLocks();
      if (os instanceof Error) {
        throw new InvalidOptionError(
          "file",
          "locks",
          `"os" needs fs-native-extensions, which does not load on this platform (${os.message}); use "files"`,
        );
      }
      osAddon = os;
    } else {
      // null: loaded on the first lock (tens of milliseconds that constructing a backend to list its keys does not spend)
      osAddon = locks === "files" ? undefined : null;
    }
    this.locks = new FileLocks(this.baseDir, lockTimeoutMs, staleLockMs, osAddon);
    this.journals = new HeaderJournals(this.baseDir);
    this.floor = new RevisionFloor(this.baseDir, this.locks);
    this.whole = {
      baseDir: this.baseDir,
      gzip: this.gzip,
      headerSlack: this.headerSlack,
      journals: this.journals,
      cache: this.cache,
      gzCache: this.gzCache,
    };
    this.reader = {
      name: this.name,
      journals: this.journals,
      assertKeyOf: (key, file, stored) => this.assertKeyOf(key, file, stored),
    };
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
      if (gz) return readFileWhole(this.reader, key, file, true).key;
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
      lock = await this.locks.lock(key, this.pathOf(key, DUAS_EXTENSION));
      // Never another key's file (a case-insensitive file system names it by this key too).
      for (const ext of [DUAS_EXTENSION, DUAS_GZ_EXTENSION]) {
        const file = this.pathOf(key, ext);
        this.assertKeyOf(key, file, this.storedKeyOf(key, file, ext === DUAS_GZ_EXTENSION));
      }
      // A session created later on this key (or any other) starts above every revision deleted here, so a
      // stale writer holding this session's revision gets a ConflictError instead of overwriting it.
      const gone = this.storedRevision(key);
      if (gone > 0) await this.floor.raise(gone);
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
      safeUnlink(this.journals.of(key));
      // An OS lock's file is removed while held (a waiter on it sees that and takes the next one).
      if (this.locks.holds(lock)) {
        safeUnlink(lock);
        dropLock = true;
      }
      this.cache.delete(key);
      this.gzCache.delete(key);
      if (deleted) syncDir(this.baseDir);
      return deleted;
    } catch (e) {
      throw this.wrap(e, `cannot delete ${JSON.stringify(key)}`, key);
    } finally {
      if (lock) this.locks.unlock(lock, dropLock);
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
      lock = await this.locks.lock(key, this.pathOf(key, DUAS_EXTENSION)); // creates the directory when it is missing
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
      if (lock) this.locks.unlock(lock);
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
          info = validInfo(this.journals, this.cache, key, fd, current.file, st);
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
          const found = readFileWhole(this.reader, key, current.file, true);
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
          : Math.max(this.floor.read(), current ? this.storedRevision(key) : 0) + 1;
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
        const appended = tryAppend(this.journals, this.cache, key, fd, info, state, revision, base);
        if (appended) return appended;
      }
    } finally {
      if (fd !== undefined && keptFiles.get((current as { file: string }).file)?.fd !== fd) closeSync(fd);
    }
    return rewrite(
      this.whole,
      key,
      this.tempOf(key),
      target,
      state,
      current && actual !== null
        ? nextRevision(Math.max(actual, info?.abandoned ?? 0))
        : Math.max(this.floor.read(), current ? this.storedRevision(key) : 0) + 1,
      current,
    );
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
          highest = Math.max(highest, readFileWhole(this.reader, key, file, true).revision);
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
    return Math.max(highest, this.journals.read(key)?.revision ?? 0);
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
      const r = readFileWhole(this.reader, key, current.file, current.gz);
      this.assertKeyOf(key, current.file, r.key);
      return { state: r.state, revision: r.revision };
    } catch (e) {
      if (isCode(e, "ENOENT")) return undefined; // deleted between the check and the open
      throw this.wrap(e, `cannot load ${JSON.stringify(key)}`, key);
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
      for await (const _ of fileLines(this.reader, key, current.file, current.gz, ref, { headerOnly: true, clipAt })) {
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
      yield* fileLines(this.reader, key, current.file, current.gz, ref, { revision: options.revision });
    } catch (e) {
      if (isCode(e, "ENOENT")) throw new StateNotFoundError(key, "file");
      throw this.wrap(e, `cannot read the history of ${JSON.stringify(key)}`, key);
    }
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
    closeKeptLocks(inside);
  }

  private dirExists(): boolean {
    try {
      return statSync(this.baseDir).isDirectory();
    } catch (e) {
      if (isCode(e, "ENOENT")) return false;
      throw e;
    }
  }
}

const PLAIN_FIRST = [false, true] as const;
const GZ_FIRST = [true, false] as const;

function nextRevision(actual: number | null): number {
  return (actual ?? 0) + 1;
}
