/**
 * `<baseDir>/.revision-floor`: revisions are never reused after a delete.
 *
 * @module
 */

import { closeSync, constants, fsyncSync, openSync, readFileSync, renameSync } from "node:fs";
import path from "node:path";
import { isCode, NOFOLLOW, syncDir, writeAll } from "./io.js";
import type { FileLocks } from "./lock.js";

/**
 * `<baseDir>/.revision-floor`: the highest revision ever deleted in the directory. A file created
 * later starts above it, so a stale writer holding a deleted session's revision gets a
 * `ConflictError` from a session created later on the same key instead of overwriting it.
 */
export class RevisionFloor {
  /**
   * @param baseDir - the directory of the files
   * @param locks - the directory's locks (the floor has its own, beside it)
   */
  constructor(
    private readonly baseDir: string,
    private readonly locks: FileLocks,
  ) {}

  /** The file holding the highest revision ever deleted in `baseDir` (hidden: keys never start with "."). */
  private path(): string {
    return path.join(this.baseDir, ".revision-floor");
  }

  /** The highest revision ever deleted in `baseDir` (0 when none). */
  read(): number {
    try {
      const n = Number(readFileSync(this.path(), "latin1").trim());
      return Number.isSafeInteger(n) && n > 0 ? n : 0;
    } catch (e) {
      if (isCode(e, "ENOENT")) return 0;
      throw e;
    }
  }

  /** Raises the floor to `revision` (durable before it returns; under its own lock: it only grows). */
  async raise(revision: number): Promise<void> {
    const file = this.path();
    const lock = await this.locks.lockAt(this.locks.lockPathBeside(file));
    try {
      if (this.read() >= revision) return;
      const tmp = `${file}.tmp`;
      const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | NOFOLLOW, 0o644);
      try {
        writeAll(fd, Buffer.from(`${revision}\n`), 0);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
      renameSync(tmp, file);
      syncDir(this.baseDir);
    } finally {
      this.locks.unlock(lock);
    }
  }
}
