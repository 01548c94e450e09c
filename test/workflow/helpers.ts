/**
 * Shared helpers of the workflow tests: temporary directories and stores on
 * real SQLite files.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { gunzipSync } from "node:zlib";
import Database from "better-sqlite3";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import type { RedisHotTier } from "../../src/workflow/hot-redis.js";
import { CheckpointStore, type CheckpointStoreOptions } from "../../src/workflow/store.js";
import type { ColdStoreFixture } from "./cold-store-suite.js";

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

/**
 * Writes the gunzipped bytes of `test/fixtures/workflow/<name>` (a `.gz` fixture) to `file`,
 * creating its directory; returns `file`.
 */
export function unzipFixture(name: string, file: string): string {
  const gz = path.join(import.meta.dirname, "..", "fixtures", "workflow", name);
  mkdirSync(path.dirname(file), { recursive: true });
  writeFileSync(file, gunzipSync(readFileSync(gz)));
  return file;
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

/**
 * A cold store conformance fixture on a fresh SQLite file, with the hooks that age and count
 * records (they reach the journal's tables through a second connection of their own, as another
 * process would), optionally behind a hot tier.
 */
export function sqliteColdFixture(hot?: RedisHotTier): ColdStoreFixture<SqliteColdStore> {
  const tmp = tempDir("sqlite-conformance");
  const file = path.join(tmp.dir, "cold.db");
  const cold = new SqliteColdStore({ path: file });
  let connection: Database.Database | undefined;
  /** A second connection to the store's file, opened on first use (after the store created its tables). */
  const db = () => {
    connection ??= new Database(file);
    connection.pragma("busy_timeout = 5000");
    return connection;
  };
  return {
    cold,
    hot,
    async destroy() {
      connection?.close();
      await hot?.close();
      await cold.close();
      tmp.cleanup();
    },
    // A workflow is run W of the file's journal: its checkpoints and side-effect records are steps
    // `checkpoint:<k>:<N>` and `effect:<s>:<i>:<name>` in durable_steps.
    async ageSnapshots(workflowId, createdAt) {
      db()
        .prepare(
          "UPDATE durable_steps SET started_at = ?, finished_at = ? WHERE run_id = ? AND (name GLOB 'checkpoint:*' OR name GLOB 'effect:*')",
        )
        .run(createdAt, createdAt, workflowId);
    },
    async countIdempotencyRecords(workflowId) {
      const row = db()
        .prepare("SELECT COUNT(*) AS n FROM durable_steps WHERE run_id = ? AND name GLOB 'effect:*'")
        .get(workflowId);
      return (row as { n: number }).n;
    },
    // No bulkInsertSummaries/listPlan: the journal's list is a keyset query on the runs' index plus one
    // read of each listed run's newest checkpoint, not a single query whose plan explainList returns.
  };
}
