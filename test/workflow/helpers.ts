/**
 * Shared helpers of the workflow tests: temporary directories and stores on
 * real SQLite files.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import { CheckpointStore, type CheckpointStoreOptions } from "../../src/workflow/store.js";

/**
 * A fresh temporary directory and its cleanup. `memory: true` puts it on tmpfs (/dev/shm)
 * when available: a SIGKILL test does not depend on fsync reaching the disk (the page cache
 * survives the death of a process), and skipping the disk keeps crash tests fast on busy CI.
 */
export function tempDir(label: string, options: { memory?: boolean } = {}): { dir: string; cleanup: () => void } {
  const base = options.memory && existsSync("/dev/shm") ? "/dev/shm" : os.tmpdir();
  const dir = mkdtempSync(path.join(base, `dumplings-wf-${label}-`));
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

/** A checkpoint store on a fresh SQLite file in `dir`. */
export async function sqliteStore(
  dir: string,
  extra: Partial<CheckpointStoreOptions> = {},
  file = "checkpoints.db",
): Promise<CheckpointStore> {
  return CheckpointStore.open({
    cold: new SqliteColdStore({ path: path.join(dir, file) }),
    blobDir: path.join(dir, "blobs"),
    ...extra,
  });
}
