/**
 * What one checkpoint costs the SQLite journal store (issue 22's bench
 * criterion: no slower than the store before the journal): the run, the
 * compare-and-set and the seq are read under the write transaction's lock, in the one
 * transaction of the save (no reads of the steps before it, whose large rows
 * make every probe of the key costly), and the state is written from the
 * UTF-8 bytes the store serialised (never decoded to a string and encoded
 * again). The behaviours kept (conflict, fencing, cancel) are the cold-store
 * suite's.
 */
import path from "node:path";
import Database from "better-sqlite3";
import { describe, expect, it } from "vitest";
import type { SnapshotWrite } from "../../src/durable/checkpoints/contract.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { CheckpointStore, createWorkflowState } from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

/** A snapshot row of `stepIndex` with `text` as its state, counting the reads of its `stateJson`. */
function snapshot(workflowId: string, stepIndex: number, text: string, reads: { n: number }): SnapshotWrite {
  return {
    workflowId,
    stepIndex,
    nodeName: `node-${stepIndex}`,
    get stateJson() {
      reads.n++;
      return text;
    },
    stateBytes: Buffer.from(text, "utf8"),
    createdAt: 1_000 + stepIndex,
    sessionId: "s",
    status: "running",
    currentNode: `node-${stepIndex}`,
    parentWorkflowId: null,
    activeStep: stepIndex,
    inNode: false,
    blobRefs: [],
  };
}

describe("a checkpoint on the SQLite journal store", () => {
  it("is one transaction: the run and the steps are read only under its write lock", async () => {
    const tmp = tempDir("checkpoint-one-tx");
    const log: string[] = [];
    const db = new Database(path.join(tmp.dir, "c.db"), { verbose: (sql) => log.push(String(sql)) });
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ database: db }) });
    try {
      const big = Array.from({ length: 200 }, (_, i) => `message ${i} ${"x".repeat(400)}`); // rows with overflow pages
      let state = createWorkflowState({ workflowId: "w", sharedMemory: { big } as never, now: 1 });
      state = await store.save(state, { expectedStep: null });
      for (let i = 1; i < 4; i++) {
        log.length = 0;
        state = await store.save({ ...state, stepIndex: i, currentNode: `n${i}` }, { expectedStep: i - 1 });
        const begin = log.findIndex((s) => /^BEGIN/.test(s));
        const commit = log.findIndex((s) => /^COMMIT/.test(s));
        expect(log.filter((s) => /^BEGIN/.test(s))).toEqual(["BEGIN IMMEDIATE"]);
        expect(log.filter((s) => /^COMMIT/.test(s))).toHaveLength(1);
        const stepsAt = log.flatMap((s, k) => (/durable_(steps|runs)/.test(s) ? [k] : []));
        expect(stepsAt.length).toBeGreaterThan(0);
        for (const k of stepsAt) {
          expect(k > begin && k < commit, `outside the transaction: ${log[k]}`).toBe(true);
        }
      }
      expect((await store.loadLatest("w"))?.stepIndex).toBe(3);
    } finally {
      await store.close();
      db.close();
      tmp.cleanup();
    }
  });

  it("writes the state from its UTF-8 bytes, never decoded, as the same TEXT", async () => {
    const tmp = tempDir("checkpoint-bytes");
    const cold = new SqliteColdStore({ path: path.join(tmp.dir, "c.db") });
    try {
      const reads = { n: 0 };
      const text = JSON.stringify({ workflowId: "w", note: "ünïcödé ✓ 🙂 \u2028", n: [1, 2, 3] });
      await cold.write(snapshot("w", 0, text, reads), null);
      await cold.write(snapshot("w", 1, text.replace("1,", "4,"), reads), 0);
      expect(reads.n).toBe(0);
      const rows = cold.db
        .prepare(
          "SELECT typeof(output_json) AS t, output_json AS text FROM durable_steps WHERE run_id = ? ORDER BY seq",
        )
        .all("w") as { t: string; text: string }[];
      expect(rows.filter((r) => r.text?.startsWith("{"))).toEqual([
        { t: "text", text },
        { t: "text", text: text.replace("1,", "4,") },
      ]);
      expect((await cold.latest("w"))?.state).toEqual(JSON.parse(text.replace("1,", "4,")));
    } finally {
      await cold.close();
      tmp.cleanup();
    }
  });
});
