/** The CheckpointStore suite on real SQLite files. */
import path from "node:path";
import { describe, expect, it } from "vitest";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import type { ColdStore } from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";
import { checkpointStoreSuite } from "./store-suite.js";

const db = (cold: ColdStore) => (cold as SqliteColdStore).db;

checkpointStoreSuite("SQLite", () => {
  const tmp = tempDir("sqlite-suite");
  let n = 0;
  return {
    async make() {
      return new SqliteColdStore({ path: path.join(tmp.dir, `c${n++}.db`) });
    },
    async bulkInsertSummaries(cold, count) {
      const ins = db(cold).prepare(
        `INSERT INTO workflows (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at)
         VALUES (?, ?, ?, 0, 'n', 0, NULL, ?, ?)`,
      );
      const statuses = ["running", "waiting", "finished", "failed"];
      db(cold).transaction(() => {
        for (let i = 0; i < count; i++) {
          const t = 1_700_000_000_000 + (i % 9973) * 1000;
          ins.run(`bulk-${i}`, `s-${i}`, statuses[i % 4], t, t);
        }
      })();
      db(cold).exec("ANALYZE");
    },
    async ageSnapshots(cold, workflowId, createdAt) {
      db(cold).prepare("UPDATE workflow_snapshots SET created_at = ? WHERE workflow_id = ?").run(createdAt, workflowId);
      db(cold)
        .prepare("UPDATE workflow_idempotency SET started_at = ? WHERE workflow_id = ?")
        .run(createdAt, workflowId);
    },
    async overwriteJson(cold, workflowId, stepIndex, json) {
      db(cold)
        .prepare("UPDATE workflow_snapshots SET state_json = ? WHERE workflow_id = ? AND step_index = ?")
        .run(json, workflowId, stepIndex);
    },
    async countIdempotency(cold, workflowId) {
      return (
        db(cold).prepare("SELECT COUNT(*) AS n FROM workflow_idempotency WHERE workflow_id = ?").get(workflowId) as {
          n: number;
        }
      ).n;
    },
    planMustMatch: /USING INDEX workflows_(status_)?updated/,
    planMustNotMatch: /SCAN workflows\b(?! USING)|TEMP B-TREE/,
    async cleanup() {
      tmp.cleanup();
    },
  };
});

describe("SQLite retention", () => {
  it("new files use incremental auto-vacuum, so prune gives pages back to the file system", async () => {
    const tmp = tempDir("sqlite-vacuum");
    const { CheckpointStore, createWorkflowState } = await import("../../src/workflow/index.js");
    const cold = new SqliteColdStore({ path: path.join(tmp.dir, "v.db") });
    const store = await CheckpointStore.open({ cold, blobDir: path.join(tmp.dir, "blobs") });
    expect(cold.db.pragma("auto_vacuum", { simple: true })).toBe(2); // INCREMENTAL
    let s = createWorkflowState({ workflowId: "v", sharedMemory: { pad: "p".repeat(50_000) }, now: 1000 });
    await store.save(s, { expectedStep: null });
    for (let i = 1; i <= 40; i++) {
      s = { ...s, stepIndex: i, updatedAt: 1000 + i, sharedMemory: { pad: `${i}${"p".repeat(50_000)}` } };
      await store.save(s, { expectedStep: i - 1 });
    }
    const pages = () => cold.db.pragma("page_count", { simple: true }) as number;
    const before = pages();
    expect((await store.prune({ olderThan: new Date(5000), keepLast: 1 })).deletedSnapshots).toBe(40);
    expect(pages()).toBeLessThan(before / 4);
    expect(cold.db.pragma("freelist_count", { simple: true })).toBe(0);
    expect((await store.loadLatest("v"))?.stepIndex).toBe(40);
    await store.close();
    tmp.cleanup();
  });
});
