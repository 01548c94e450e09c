/**
 * The cold store conformance suite on real SQLite files (a fresh file per test), and the
 * SQLite-only retention check. The hooks reach the tables through a second connection of
 * their own, as another process would.
 */
import path from "node:path";
import Database from "better-sqlite3";
import * as vitest from "vitest";
import { describe, expect, it } from "vitest";
import { runColdStoreConformance } from "../../src/testing/index.js";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import { CheckpointStore, createWorkflowState } from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

runColdStoreConformance(
  "sqlite",
  () => {
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
      async destroy() {
        connection?.close();
        await cold.close();
        tmp.cleanup();
      },
      async ageSnapshots(workflowId, createdAt) {
        db().prepare("UPDATE workflow_snapshots SET created_at = ? WHERE workflow_id = ?").run(createdAt, workflowId);
        db().prepare("UPDATE workflow_idempotency SET started_at = ? WHERE workflow_id = ?").run(createdAt, workflowId);
      },
      async countIdempotencyRecords(workflowId) {
        const row = db()
          .prepare("SELECT COUNT(*) AS n FROM workflow_idempotency WHERE workflow_id = ?")
          .get(workflowId);
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
  },
  { test: vitest },
);

describe("SQLite retention", () => {
  it("new files use incremental auto-vacuum, so prune gives pages back to the file system", async () => {
    const tmp = tempDir("sqlite-vacuum");
    const file = path.join(tmp.dir, "v.db");
    const store = await CheckpointStore.open({
      cold: new SqliteColdStore({ path: file }),
      blobDir: path.join(tmp.dir, "blobs"),
    });
    const db = new Database(file, { readonly: true });
    try {
      expect(db.pragma("auto_vacuum", { simple: true })).toBe(2); // INCREMENTAL
      let s = createWorkflowState({ workflowId: "v", sharedMemory: { pad: "p".repeat(50_000) }, now: 1000 });
      await store.save(s, { expectedStep: null });
      for (let i = 1; i <= 40; i++) {
        s = { ...s, stepIndex: i, updatedAt: 1000 + i, sharedMemory: { pad: `${i}${"p".repeat(50_000)}` } };
        await store.save(s, { expectedStep: i - 1 });
      }
      const pages = () => db.pragma("page_count", { simple: true }) as number;
      const before = pages();
      expect((await store.prune({ olderThan: new Date(5000), keepLast: 1 })).deletedSnapshots).toBe(40);
      expect(pages()).toBeLessThan(before / 4);
      expect(db.pragma("freelist_count", { simple: true })).toBe(0);
      expect((await store.loadLatest("v"))?.stepIndex).toBe(40);
    } finally {
      db.close();
      await store.close();
      tmp.cleanup();
    }
  });
});
