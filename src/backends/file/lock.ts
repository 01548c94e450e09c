/**
 * The writers' locks of `FileBackend`: one key's read-check-write cycle at a time, across
 * processes.
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
 * holder on this host is waited for (up to `lockTimeoutMs`).
 *
 * @module
 */

import {
  closeSync,
  constants,
  fstatSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  renameSync,
  statSync,
  writeSync,
} from "node:fs";
import { createRequire } from "node:module";
import { hostname } from "node:os";
import path from "node:path";
import { BackendError } from "../../core/errors.js";
import { DUAS_EXTENSION } from "../../core/version.js";
import { isCode, memoPath, NOFOLLOW, safeUnlink, sleep } from "./io.js";

/**
 * Advisory locks on an open descriptor from `fs-native-extensions` (open file
 * description locks on Linux, `flock` on macOS, `LockFileEx` on Windows).
 */
export interface OsLocks {
  tryLock(fd: number): boolean;
  unlock(fd: number): void;
}

let osLocksLoaded: OsLocks | Error | undefined;

/** The OS lock addon, or the error that kept it from loading on this platform (asked once). */
export function osLocks(): OsLocks | Error {
  if (osLocksLoaded === undefined) {
    try {
      osLocksLoaded = createRequire(import.meta.url)("fs-native-extensions") as OsLocks;
    } catch (e) {
      osLocksLoaded = e instanceof Error ? e : new Error(String(e));
    }
  }
  return osLocksLoaded;
}

let cachedHost: string | undefined;

/** This machine's host name, asked once (a system call that was 4% of a save's CPU), for lock files. */
function localHost(): string {
  cachedHost ??= hostname();
  return cachedHost;
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

/**
 * The writers' locks of one directory (see {@link FileBackendOptions.locks}): an OS lock on a kept
 * descriptor of `.<key>.duas.lck`, or a lock file `<key>.duas.lock`; waits for a holder up to
 * `lockTimeoutMs`, breaks a stale lock file.
 */
export class FileLocks {
  /** Lock paths held now with an OS lock, and their descriptors. */
  private readonly held = new Map<string, number>();
  /** The OS locks' paths, by (checked) key. */
  private readonly lockPaths = new Map<string, string>();

  /**
   * @param baseDir - the directory of the files
   * @param lockTimeoutMs - how long a lock is waited for
   * @param staleLockMs - age from which another host's lock file is broken
   * @param osAddon - the OS lock functions, undefined for lock files, or null to load them on the first lock
   */
  constructor(
    private readonly baseDir: string,
    private readonly lockTimeoutMs: number,
    private readonly staleLockMs: number,
    private osAddon: OsLocks | undefined | null,
  ) {}

  /** The OS lock functions, or undefined for lock files (the addon is loaded on the first call). */
  private get os(): OsLocks | undefined {
    if (this.osAddon === null) {
      const os = osLocks();
      this.osAddon = os instanceof Error ? undefined : os;
    }
    return this.osAddon;
  }

  /** Whether `lockPath` is held now with an OS lock (its file may be removed while held). */
  holds(lockPath: string): boolean {
    return this.held.has(lockPath);
  }

  /** Takes `key`'s lock (see {@link FileBackendOptions.locks}); returns its path, for {@link FileBackend.unlock}. */
  lock(key: string, data: string): Promise<string> {
    return this.lockAt(
      this.os
        ? memoPath(this.lockPaths, key, () => path.join(this.baseDir, `.${key}${DUAS_EXTENSION}.lck`))
        : `${data}.lock`,
      key,
    );
  }

  /** The lock guarding the file `file` (the revision floor's): `<file>.lck` or `<file>.lock`. */
  lockPathBeside(file: string): string {
    return `${file}${this.os ? ".lck" : ".lock"}`;
  }

  /**
   * Takes the lock at `lockPath`: an OS lock on an open descriptor of it
   * (`locks: "os"`), else the lock file itself (O_EXCL), breaking a stale one.
   * Waits for another holder up to `lockTimeoutMs`.
   *
   * @throws {BackendError} on a timeout
   */
  async lockAt(lockPath: string, key?: string): Promise<string> {
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
  unlock(lockPath: string, drop = false): void {
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

/** Closes the idle lock descriptors kept open for the files directly inside `inside` (a directory path ending with a separator). */
export function closeKeptLocks(inside: string): void {
  for (const [lockPath, kept] of [...keptLocks]) {
    if (!kept.busy && lockPath.startsWith(inside)) {
      keptLocks.delete(lockPath);
      closeSync(kept.fd);
    }
  }
}
