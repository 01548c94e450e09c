/**
 * Shared helpers of the workflow tests: temporary directories and stores on
 * real SQLite files.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
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
 * A cold store conformance fixture on a fresh SQLite file, with every hook (they reach the
 * tables through a second connection of their own, as another process would), optionally
 * behind a hot tier.
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
    async ageSnapshots(workflowId, createdAt) {
      // Snapshots live in one table per month (and the single table of files written before the split).
      const tables = db()
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name GLOB 'workflow_snapshots*'")
        .all() as { name: string }[];
      for (const { name } of tables) {
        db().prepare(`UPDATE "${name}" SET created_at = ? WHERE workflow_id = ?`).run(createdAt, workflowId);
      }
      db().prepare("UPDATE workflow_idempotency SET started_at = ? WHERE workflow_id = ?").run(createdAt, workflowId);
    },
    async countIdempotencyRecords(workflowId) {
      const row = db().prepare("SELECT COUNT(*) AS n FROM workflow_idempotency WHERE workflow_id = ?").get(workflowId);
      return (row as { n: number }).n;
    },
    async bulkInsertSummaries(count) {
      const ins = db().prepare(
        `INSERT INTO workflows (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
       VALUES (?, ?, ?, 0, 'n', 0, NULL, ?, ?)`,
      );
      const statuses = ["running", "waiting", "finished", "failed"];
      db().transaction(() => {
        for (let i = 0; i < count; i++) {
          const t = 1_700_000_000_000 + (i % 9973) * 1000;
          ins.run(`bulk-${i}`, `s-${i}`, statuses[i % 4], t, t);
        }
      })();
      db().exec("ANALYZE");
    },
    listPlan: {
      mustMatch: /USING INDEX workflows_(status_)?updated/,
      mustNotMatch: /SCAN workflows\b(?! USING)|TEMP B-TREE/,
    },
  };
}
