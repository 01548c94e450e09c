/**
 * The cold store conformance suite on real SQLite files (a fresh file per test), and the
 * SQLite-only retention check. The hooks reach the tables through a second connection of
 * their own, as another process would.
 */
import path from "node:path";
import Database from "better-sqlite3";
import * as vitest from "vitest";
import { describe, expect, it } from "vitest";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { CheckpointStore, createWorkflowState } from "../../src/workflow/index.js";
import { runColdStoreConformance } from "./cold-store-suite.js";
import { sqliteColdFixture, tempDir } from "./helpers.js";

runColdStoreConformance("sqlite", () => sqliteColdFixture(), { test: vitest });

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
