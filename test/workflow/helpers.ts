/**
 * Shared helpers of the workflow tests: temporary directories and stores on
 * real SQLite files.
 */
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import { CheckpointStore, type CheckpointStoreOptions } from "../../src/workflow/store.js";

/** A fresh temporary directory and its cleanup. */
export function tempDir(label: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(path.join(os.tmpdir(), `dumplings-wf-${label}-`));
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
