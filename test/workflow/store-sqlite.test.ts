/** The CheckpointStore suite on real SQLite files. */
import path from "node:path";
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
