/**
 * Retention as the workflow-snapshot design describes it (issue 11 item 19;
 * issue 22 moved the checkpoints into the journal): checkpoints counted by
 * UTC month, a past month archived to its own file (the original design's
 * single `workflow_snapshots` table) and dropped while every workflow stays
 * resumable, a full VACUUM besides the incremental one, through
 * `store.prune`, `store.dropMonth` and `dumplings workflows prune`; archives
 * written before the split (one `workflow_snapshots` table) are adopted.
 */
import { existsSync, statSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { workflowsCommand } from "../../src/cli/workflow-commands.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import { SqliteColdStore, snapshotMonth } from "../../src/durable/checkpoints/sqlite.js";
import {
  CheckpointStore,
  createWorkflowState,
  END,
  ResumableGraphRunner,
  type WorkflowState,
} from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

const tmp = tempDir("retention");
afterAll(() => tmp.cleanup());
let n = 0;

const JAN = Date.UTC(2025, 0, 10);
const FEB = Date.UTC(2025, 1, 10);
const CURRENT = snapshotMonth(Date.now());

async function open(file = path.join(tmp.dir, `r${n++}.db`)) {
  const store = await CheckpointStore.open({
    cold: new SqliteColdStore({ path: file }),
    blobDir: path.join(tmp.dir, "blobs"),
  });
  return { store, file };
}

/** Saves steps 0..times.length-1 of a workflow, step i created at times[i]. */
async function saveSteps(store: CheckpointStore, workflowId: string, times: number[]): Promise<WorkflowState> {
  let s = createWorkflowState({ workflowId, sharedMemory: { step: 0 }, now: times[0]! });
  await store.save(s, { expectedStep: null, nodeName: "__start__" });
  for (let i = 1; i < times.length; i++) {
    s = { ...s, stepIndex: i, currentNode: "n", updatedAt: times[i]!, sharedMemory: { step: i } };
    await store.save(s, { expectedStep: i - 1, nodeName: "n" });
  }
  return s;
}

/** The original design's query for a workflow's newest checkpoint, on a second connection. */
function seedLatest(file: string, workflowId: string): unknown {
  const db = new Database(file, { readonly: true });
  try {
    const row = db
      .prepare("SELECT state_json FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index DESC LIMIT 1")
      .get(workflowId) as { state_json: string } | undefined;
    return row && (JSON.parse(row.state_json) as WorkflowState).sharedMemory;
  } finally {
    db.close();
  }
}

describe("SQLite archive split by month", () => {
  it("counts checkpoints by month, reads a workflow across months; the original design's query finds the newest", async () => {
    const { store, file } = await open();
    try {
      await saveSteps(store, "a", [JAN, JAN + 1, FEB, Date.now()]);
      await saveSteps(store, "b", [JAN, JAN + 1]); // its latest lives in January only
      expect((await store.history("a")).map((h) => h.stepIndex)).toEqual([0, 1, 2, 3]);
      expect((await store.loadLatest("a"))?.sharedMemory).toEqual({ step: 3 });
      expect((await store.loadLatest("b"))?.sharedMemory).toEqual({ step: 1 });
      expect((await store.get("a", 2)).sharedMemory).toEqual({ step: 2 });
      expect((await store.months()).map((m) => [m.month, m.snapshots])).toEqual([
        ["2025-01", 4],
        ["2025-02", 1],
        [CURRENT, 1],
      ]);
      expect(seedLatest(file, "a")).toEqual({ step: 3 });
      expect(seedLatest(file, "b")).toEqual({ step: 1 });
    } finally {
      await store.close();
    }
  });

  it("a month dropped by another process is gone from this store's next listing and read", async () => {
    const { store, file } = await open();
    const other = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    try {
      await saveSteps(store, "r", [JAN, FEB, Date.now()]);
      expect((await store.months()).map((m) => m.month)).toEqual(["2025-01", "2025-02", CURRENT]);
      await other.dropMonth("2025-01");
      expect((await store.months()).map((m) => m.month)).toEqual(["2025-02", CURRENT]);
      expect((await store.history("r")).map((h) => h.stepIndex)).toEqual([1, 2]);
    } finally {
      await other.close();
      await store.close();
    }
  });

  it("a time past year 9999 files under 9999-12 and is read back", async () => {
    expect(snapshotMonth(Date.UTC(10_000, 0, 1))).toBe("9999-12");
    expect(snapshotMonth(9_007_199_254_740_991)).toBe("9999-12");
    expect(snapshotMonth(0)).toBe("1970-01");
    const { store } = await open();
    try {
      await saveSteps(store, "far", [JAN, 9_007_199_254_740_991]);
      expect((await store.loadLatest("far"))?.stepIndex).toBe(1);
      expect((await store.months()).map((m) => m.month)).toContain("9999-12");
    } finally {
      await store.close();
    }
  });

  it("a step written again in another month keeps one row", async () => {
    const { store } = await open();
    try {
      const s = await saveSteps(store, "w", [JAN, JAN + 1]);
      // Written again without a compare-and-set (an upsert of step 1), now in February.
      await store.save({ ...s, updatedAt: FEB, sharedMemory: { step: 99 } });
      expect((await store.history("w")).map((h) => [h.stepIndex, h.state.sharedMemory])).toEqual([
        [0, { step: 0 }],
        [1, { step: 99 }],
      ]);
      expect((await store.months()).filter((m) => m.snapshots > 0).map((m) => [m.month, m.snapshots])).toEqual([
        ["2025-01", 1],
        ["2025-02", 1],
      ]);
    } finally {
      await store.close();
    }
  });

  it("prune archives past months to their own files and drops them whole; every workflow still resumes", async () => {
    const { store, file } = await open();
    const archiveDir = path.join(tmp.dir, `archive-${n}`);
    try {
      await saveSteps(store, "a", [JAN, JAN + 1, JAN + 2, FEB]);
      await saveSteps(store, "b", [JAN, JAN + 1]);
      await saveSteps(store, "c", [Date.now() - 1000, Date.now()]);
      const out = await store.prune({ olderThan: new Date(Date.UTC(2025, 5, 1)), keepLast: 1, archiveDir });
      expect(out.droppedMonths).toEqual([
        { month: "2025-01", archivedTo: path.join(archiveDir, "workflow_snapshots_2025_01.db") },
        { month: "2025-02", archivedTo: path.join(archiveDir, "workflow_snapshots_2025_02.db") },
      ]);
      // a: 0,1,2 (Jan) deleted, 3 (Feb) kept; b: 0 deleted, 1 (its latest) kept.
      expect(out.deletedSnapshots).toBe(4);
      expect((await store.months()).map((m) => [m.month, m.snapshots])).toEqual([
        ["2025-01", 1],
        ["2025-02", 1],
        [CURRENT, 2],
      ]);
      expect(seedLatest(file, "b")).toEqual({ step: 1 });
      expect((await store.loadLatest("a"))?.sharedMemory).toEqual({ step: 3 });
      expect((await store.loadLatest("b"))?.sharedMemory).toEqual({ step: 1 });
      expect((await store.history("c")).map((h) => h.stepIndex)).toEqual([0, 1]);
      // The archives hold the whole months, in the single-table layout.
      const jan = new Database(path.join(archiveDir, "workflow_snapshots_2025_01.db"), { readonly: true });
      const rows = jan.prepare("SELECT workflow_id, step_index FROM workflow_snapshots ORDER BY 1, 2").all();
      jan.close();
      expect(rows).toEqual([
        { workflow_id: "a", step_index: 0 },
        { workflow_id: "a", step_index: 1 },
        { workflow_id: "a", step_index: 2 },
        { workflow_id: "b", step_index: 0 },
        { workflow_id: "b", step_index: 1 },
      ]);
      // An archive opens as a store of its own (adopted as the original layout), its checkpoints readable.
      const archived = await CheckpointStore.open({
        cold: new SqliteColdStore({ path: path.join(archiveDir, "workflow_snapshots_2025_01.db") }),
      });
      try {
        expect((await archived.history("a")).map((h) => [h.stepIndex, h.state.sharedMemory])).toEqual([
          [0, { step: 0 }],
          [1, { step: 1 }],
          [2, { step: 2 }],
        ]);
      } finally {
        await archived.close();
      }
      // The runner resumes each workflow from its carried checkpoint (not from step 0).
      const ran: string[] = [];
      const runner = new ResumableGraphRunner({
        store,
        nodes: {
          n: (s) => {
            ran.push(s.workflowId);
            return { next: END, updates: { resumedFrom: s.stepIndex } };
          },
        },
      });
      const b = await runner.runOrResume("b");
      expect(b.status).toBe("finished");
      expect(ran).toEqual(["b"]);
      expect((await store.loadLatest("b"))?.sharedMemory).toMatchObject({ step: 1, resumedFrom: 1 });
      expect((await store.history("b")).map((h) => h.stepIndex)).toEqual([1, 2]);
    } finally {
      await store.close();
    }
  });

  it("dropMonth refuses a current, future, malformed or absent month and an existing archive file, changing nothing", async () => {
    const { store } = await open();
    try {
      await saveSteps(store, "a", [JAN, JAN + 1, Date.now()]);
      const before = await store.months();
      for (const month of [CURRENT, "2999-01", "2025-1", "2025-13", "2024-12"]) {
        await expect(store.dropMonth(month)).rejects.toBeInstanceOf(InvalidOptionError);
      }
      const archiveTo = path.join(tmp.dir, `exists-${n}.db`);
      new Database(archiveTo).close();
      const e = await store.dropMonth("2025-01", { archiveTo }).catch((x) => x);
      expect(e).toBeInstanceOf(InvalidOptionError);
      expect(e.message).toContain("never overwritten");
      expect(await store.months()).toEqual(before);
      expect((await store.history("a")).map((h) => h.stepIndex)).toEqual([0, 1, 2]);
      const out = await store.dropMonth("2025-01", { keepLast: 1 });
      expect(out).toMatchObject({ month: "2025-01", deletedSnapshots: 2, carriedForward: 0, archivedTo: null });
      expect((await store.history("a")).map((h) => h.stepIndex)).toEqual([2]);
    } finally {
      await store.close();
    }
  });

  it("an archive written before the split (one workflow_snapshots table) is adopted, pruned and continued", async () => {
    const file = path.join(tmp.dir, `r${n++}.db`);
    const db = new Database(file);
    db.exec(`CREATE TABLE workflow_snapshots (
      id INTEGER PRIMARY KEY AUTOINCREMENT, workflow_id TEXT NOT NULL, step_index INTEGER NOT NULL,
      node_name TEXT NOT NULL, state_json TEXT NOT NULL, created_at INTEGER NOT NULL)`);
    const s0 = createWorkflowState({ workflowId: "old", sharedMemory: { step: 0 }, now: JAN });
    const s1 = { ...s0, stepIndex: 1, currentNode: "n", updatedAt: JAN + 1, sharedMemory: { step: 1 } };
    const ins = db.prepare(
      "INSERT INTO workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at) VALUES (?, ?, ?, ?, ?)",
    );
    ins.run("old", 0, "__start__", JSON.stringify(s0), JAN);
    ins.run("old", 1, "n", JSON.stringify(s1), JAN + 1);
    db.close();
    const again = await open(file);
    try {
      expect((await again.store.loadLatest("old"))?.sharedMemory).toEqual({ step: 1 });
      await again.store.save({ ...s1, stepIndex: 2, updatedAt: FEB, sharedMemory: { step: 2 } }, { expectedStep: 1 });
      expect((await again.store.history("old")).map((h) => h.stepIndex)).toEqual([0, 1, 2]);
      expect(seedLatest(file, "old")).toEqual({ step: 2 });
      const out = await again.store.prune({ olderThan: new Date(Date.UTC(2025, 5, 1)), keepLast: 1 });
      expect(out.deletedSnapshots).toBe(2); // steps 0 and 1 of the adopted table; step 2 is the newest
      expect((await again.store.history("old")).map((h) => h.stepIndex)).toEqual([2]);
    } finally {
      await again.store.close();
    }
  });

  it("vacuum: full rewrites a file that has no incremental auto-vacuum (an older archive); incremental cannot", async () => {
    const sizes: Record<string, { before: number; after: number; free: number }> = {};
    for (const vacuum of ["incremental", "full"] as const) {
      const file = path.join(tmp.dir, `vac-${vacuum}-${n++}.db`);
      const pre = new Database(file); // a file made before incremental auto-vacuum: auto_vacuum = NONE
      pre.exec("CREATE TABLE unrelated (x)");
      pre.close();
      const { store } = await open(file);
      try {
        const big = "x".repeat(20_000);
        for (let w = 0; w < 20; w++) {
          let s = createWorkflowState({ workflowId: `v${w}`, sharedMemory: { big, w }, now: Date.now() - 10_000 });
          await store.save(s, { expectedStep: null });
          for (let i = 1; i < 5; i++) {
            s = { ...s, stepIndex: i, updatedAt: s.updatedAt + 1, sharedMemory: { big, w, i } };
            await store.save(s, { expectedStep: i - 1 });
          }
        }
        const before = statSync(file).size;
        const out = await store.prune({ olderThan: 1000, keepLast: 1, vacuum });
        expect(out.deletedSnapshots).toBe(80);
        const db = new Database(file, { readonly: true });
        const free = Number(db.pragma("freelist_count", { simple: true }));
        db.close();
        sizes[vacuum] = { before, after: statSync(file).size, free };
        expect((await store.loadLatest("v3"))?.stepIndex).toBe(4);
      } finally {
        await store.close();
      }
    }
    expect(sizes.incremental!.free).toBeGreaterThan(0); // pages freed but kept in the file
    expect(sizes.full!.free).toBe(0);
    expect(sizes.full!.after).toBeLessThan(sizes.full!.before / 2);
    await expect((await open()).store.prune({ olderThan: 1, vacuum: "bogus" as "full" })).rejects.toBeInstanceOf(
      InvalidOptionError,
    );
  });

  it("dumplings workflows prune --archive-dir --vacuum full --json", async () => {
    const { store, file } = await open();
    await saveSteps(store, "cli", [JAN, JAN + 1, Date.now()]);
    await store.close();
    const archiveDir = path.join(tmp.dir, `cli-archive-${n}`);
    let out = "";
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array) => {
      out += String(chunk);
      return true;
    }) as typeof process.stdout.write;
    try {
      await workflowsCommand()
        .exitOverride()
        .parseAsync(
          [
            "prune",
            "--older-than",
            "90d",
            "--archive-dir",
            archiveDir,
            "--vacuum",
            "full",
            "--json",
            "--store",
            `sqlite:${file}`,
          ],
          { from: "user" },
        );
    } finally {
      process.stdout.write = write;
    }
    const json = JSON.parse(out);
    expect(json).toMatchObject({
      deletedSnapshots: 2,
      droppedMonths: [{ month: "2025-01", archivedTo: path.join(archiveDir, "workflow_snapshots_2025_01.db") }],
    });
    expect(existsSync(path.join(archiveDir, "workflow_snapshots_2025_01.db"))).toBe(true);
    await expect(
      workflowsCommand()
        .exitOverride()
        .parseAsync(["prune", "--older-than", "1d", "--vacuum", "sometimes", "--store", `sqlite:${file}`], {
          from: "user",
        }),
    ).rejects.toThrow(/--vacuum/);
  });
});

describe("PostgreSQL keeps one snapshot table", async () => {
  const { DATABASE_URL, postgresSkipReason } = await import("../helpers/services.js");
  const skip = await postgresSkipReason();
  it.skipIf(skip)(
    "months() lists no month tables; archiveDir and dropMonth are refused; vacuum full runs",
    async () => {
      const pg = (await import("pg")).default;
      const { PostgresColdStore } = await import("../../src/durable/checkpoints/postgres.js");
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
      const schema = `wf_ret_${Math.random().toString(36).slice(2, 12)}`;
      const store = await CheckpointStore.open({
        cold: new PostgresColdStore({ pool, schema }),
        blobDir: path.join(tmp.dir, "pg-blobs"),
      });
      try {
        await saveSteps(store, "p", [JAN, JAN + 1, FEB, Date.now()]);
        // The store is a journal: its checkpoints are steps of the workflow's run, in no month table.
        expect(await store.months()).toEqual([]);
        await expect(store.prune({ olderThan: 1, archiveDir: tmp.dir })).rejects.toBeInstanceOf(InvalidOptionError);
        await expect(store.dropMonth("2025-01")).rejects.toBeInstanceOf(InvalidOptionError);
        const out = await store.prune({ olderThan: new Date(Date.UTC(2025, 5, 1)), keepLast: 1, vacuum: "full" });
        expect(out).toEqual({ deletedSnapshots: 3, deletedBlobs: 0, droppedMonths: [] });
        expect((await store.history("p")).map((h) => h.stepIndex)).toEqual([3]);
      } finally {
        await store.close();
        await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
        await pool.end();
      }
    },
  );
});
