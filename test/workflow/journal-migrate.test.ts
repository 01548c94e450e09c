/**
 * The one-time move of an earlier release's workflow tables into the durable journal of the same
 * SQLite file (`workflowJournalMigrations`): a file written by the SQL cold store of the previous release
 * (a fixture: test/fixtures/workflow/prev-moved.db.gz; checkpoints, a waiting interrupt, a started side effect, a node failure, lease tokens) and a file
 * in the original design's layout open as a journal, resume and finish; no fencing token goes back;
 * the old tables are gone and the original design's query reads the newest checkpoint from the
 * `workflow_snapshots` view.
 */
import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gunzipSync } from "node:zlib";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { JournalColdStore } from "../../src/durable/checkpoints/journal-store.js";
import { workflowJournalMigrations } from "../../src/durable/checkpoints/migrate.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import { hashInput } from "../../src/durable/journal.js";
import { DEFAULT_JOURNAL_TABLE_PREFIX } from "../../src/durable/journal-sql-schema.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { signal } from "../../src/durable/signals.js";
import {
  CheckpointStore,
  createWorkflowState,
  END,
  type GraphNode,
  IdempotencyGuard,
  ResumableGraphRunner,
  UnknownSideEffectError,
} from "../../src/workflow/index.js";
import { tempDir, unzipFixture } from "./helpers.js";

const tmp = tempDir("journal-migrate");
afterAll(() => tmp.cleanup());
let n = 0;

const SEED_QUERY = "SELECT state_json FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index DESC LIMIT 1";

/** The journal of a file, with the workflow tables of an earlier release moved into it. */
function journalOf(file: string): SqliteJournal {
  return new SqliteJournal({ path: file }, [workflowJournalMigrations(DEFAULT_JOURNAL_TABLE_PREFIX)]);
}

const tableNames = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return (
      db.prepare("SELECT name, type FROM sqlite_master WHERE type IN ('table', 'view')").all() as {
        name: string;
        type: string;
      }[]
    ).map((r) => `${r.type}:${r.name}`);
  } finally {
    db.close();
  }
};

describe("workflow tables of an earlier release move into the journal", () => {
  it("checkpoints, a waiting interrupt, a started side effect, a node failure and lease tokens", async () => {
    let charged = 0;
    const nodes: Record<string, GraphNode> = {
      draft: () => ({ next: "approve", updates: { draft: "hello" } }),
      approve: async (_s, ctx) => {
        const answer = await ctx.interrupt<{ ok: boolean }>({ reason: "approve?" });
        await ctx.sideEffect("charge", () => {
          charged++;
          return "ch_1";
        });
        return { next: END, updates: { approved: answer.ok } };
      },
    };
    // Written by the previous release's SQL cold store (test/fixtures/workflow/prev-moved.db.gz, at
    // commit ab998f93, `SqlColdStore` with the previous release's migrations, since deleted): "waits"
    // run with these nodes to the interrupt; "fails" run with nodes a → b, b throwing "boom", then
    // leased 3 times (tokens 2..4, after the runner's 1); a side effect "effects:0:0" ("mail",
    // started at 1234) never finished; "big" saved with a 300 KB value (`"b".repeat(300_000)`), kept
    // in the old blob table.
    const file = unzipFixture("prev-moved.db.gz", path.join(tmp.dir, `old-${n++}.db`));
    const big = "b".repeat(300_000);
    const oldHistory = [
      [0, "__start__"],
      [1, "draft"],
      [2, "approve"],
    ];
    expect(tableNames(file)).toEqual(
      expect.arrayContaining(["table:workflows", "table:workflow_idempotency", "table:workflow_leases"]),
    );

    // Opened as a journal: moved once.
    const journal = journalOf(file);
    const store = await CheckpointStore.open({ cold: new JournalColdStore({ journal, closeJournal: false }) });
    try {
      const names = tableNames(file);
      expect(
        names.filter((t) =>
          /workflow_(snapshots_|step_errors|idempotency|leases|lease_floor|blob)|table:workflows$/.test(t),
        ),
      ).toEqual([]);
      expect(names).toContain("view:workflow_snapshots");
      expect((await store.history("waits")).map((h) => [h.stepIndex, h.nodeName])).toEqual(oldHistory);
      expect((await store.summary("waits"))?.status).toBe("waiting");
      // The waiting interrupt is a run waiting for its signal.
      expect((await journal.getRun("waits"))?.waitingFor).toMatch(/^interrupt:waits:/);
      expect((await store.summary("fails"))?.status).toBe("failed");
      expect(await store.errors("fails")).toMatchObject([
        { nodeName: "b", error: { message: expect.stringMatching(/boom/) } },
      ]);
      // The run is the workflow: its token starts above every lease token the old table held.
      const run = await journal.getRun("fails");
      expect(run).toMatchObject({ workflow: "graph", status: "failed" });
      expect(run?.fencingToken).toBeGreaterThanOrEqual(4);
      const lease = await journal.acquireLease("fails", "x", 30_000);
      expect(lease).toMatchObject({ acquired: true });
      expect((lease as { fencingToken: number }).fencingToken).toBeGreaterThan(4);
      await journal.releaseLease("fails", (lease as { fencingToken: number }).fencingToken);
      // The blob moved with its checkpoint: read back, and deleted with the workflow.
      expect((await store.loadLatest("big"))?.sharedMemory).toEqual({ big, n: 1 });
      const ref = `sha256:${createHash("sha256").update(JSON.stringify(big)).digest("hex")}`;
      expect(await store.cold.readBlob?.(ref)).toBeDefined();
      expect(await store.delete("big")).toBe(true);
      expect(await store.cold.readBlob?.(ref)).toBeUndefined();
      // The started side effect goes to reconcile, never a blind re-run.
      const guard = new IdempotencyGuard({ store });
      const unknown = await guard.run("effects:0:0", () => "again", { name: "mail" }).catch((e: unknown) => e);
      expect(unknown).toBeInstanceOf(UnknownSideEffectError);
      expect(unknown).toMatchObject({ startedAt: 1234 });
      // The waiting workflow is answered and finishes; its side effect ran once.
      const runner = new ResumableGraphRunner({ store, nodes });
      const done = await runner.resume("waits", { ok: true });
      expect(done.status).toBe("finished");
      expect(done.state.sharedMemory).toMatchObject({ draft: "hello", approved: true });
      expect(charged).toBe(1);
      // The original design's query reads the newest checkpoint from the view.
      const db = new Database(file, { readonly: true });
      try {
        const row = db.prepare(SEED_QUERY).get("waits") as { state_json: string };
        expect(JSON.parse(row.state_json)).toMatchObject({ workflowId: "waits", isFinished: true });
        expect(JSON.parse(row.state_json).stepIndex).toBe((await store.loadLatest("waits"))?.stepIndex);
      } finally {
        db.close();
      }
    } finally {
      await store.close();
      await journal.close();
    }
    // Opened again: nothing moves twice.
    const again = journalOf(file);
    try {
      expect((await again.listRuns({ workflow: "graph" })).map((r) => r.runId).sort()).toEqual([
        "big",
        "effects",
        "fails",
        "waits",
      ]);
    } finally {
      await again.close();
    }
  });

  it("a file in the original design's layout: moved, resumed, and read by the original query", async () => {
    const file = path.join(tmp.dir, `seed-${n++}.db`);
    const db = new Database(file);
    db.exec(`CREATE TABLE IF NOT EXISTS workflow_snapshots (
      id INTEGER PRIMARY KEY AUTOINCREMENT, workflow_id TEXT NOT NULL, step_index INTEGER NOT NULL,
      node_name TEXT NOT NULL, state_json TEXT NOT NULL, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
      UNIQUE (workflow_id, step_index))`);
    const state = (step: number, node: string) => ({
      workflow_id: "tea",
      session_id: "s",
      current_node: node,
      step_index: step,
      shared_memory: { topic: "tea", step },
      history_records: [],
      is_finished: false,
      updated_at: 1741944413.25 + step,
    });
    const insert = db.prepare(
      "INSERT INTO workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at) VALUES (?, ?, ?, ?, ?)",
    );
    insert.run("tea", 0, "START", JSON.stringify(state(0, "plan")), "2025-03-14 09:26:53");
    insert.run("tea", 1, "plan", JSON.stringify(state(1, "write")), 1741944414.25);
    db.close();

    const journal = journalOf(file);
    const store = await CheckpointStore.open({ cold: new JournalColdStore({ journal, closeJournal: false }) });
    try {
      const history = await store.history("tea");
      expect(history.map((h) => [h.stepIndex, h.nodeName, h.createdAt])).toEqual([
        [0, "__start__", Date.UTC(2025, 2, 14, 9, 26, 53)],
        [1, "plan", 1741944414250],
      ]);
      const runner = new ResumableGraphRunner({
        store,
        nodes: { write: () => ({ next: END, updates: { written: true } }) },
      });
      const out = await runner.runOrResume("tea");
      expect(out.status).toBe("finished");
      expect(out.state.sharedMemory).toMatchObject({ topic: "tea", step: 1, written: true });
      const read = new Database(file, { readonly: true });
      try {
        const row = read.prepare(SEED_QUERY).get("tea") as { state_json: string };
        expect(JSON.parse(row.state_json)).toMatchObject({ stepIndex: 2, isFinished: true });
      } finally {
        read.close();
      }
    } finally {
      await store.close();
      await journal.close();
    }
  });

  it("a fresh file: no workflow tables, the view over the journal's checkpoints", async () => {
    const file = path.join(tmp.dir, `fresh-${n++}.db`);
    const journal = journalOf(file);
    const cold = new JournalColdStore({ journal });
    const store = await CheckpointStore.open({ cold });
    try {
      const runner = new ResumableGraphRunner({
        store,
        nodes: { a: () => ({ next: "b", updates: { x: 1 } }), b: () => ({ next: END, updates: { x: 2 } }) },
      });
      await runner.runOrResume("fresh");
      const names = tableNames(file);
      expect(names.filter((t) => t.startsWith("table:workflow"))).toEqual([]);
      expect(names.filter((t) => t.startsWith("table:")).length).toBeLessThanOrEqual(14);
      const read = new Database(file, { readonly: true });
      try {
        const row = read.prepare(SEED_QUERY).get("fresh") as { state_json: string };
        expect(JSON.parse(row.state_json)).toMatchObject({ stepIndex: 2, sharedMemory: { x: 2 } });
      } finally {
        read.close();
      }
    } finally {
      await store.close();
    }
  });
});

describe("a durable run of a workflow's id", () => {
  it("is left alone: neither the workflow's checkpoints nor a side effect of its key are written into it", async () => {
    const file = path.join(tmp.dir, `dup-${n++}.db`);
    // A journal first, with a durable run "dup" half done.
    const durable = new SqliteJournal({ path: file });
    const { run } = await durable.createRun({ runId: "dup", workflow: "orders", input: { order: 7 } });
    const lease = await durable.acquireLease("dup", "w1", 30_000);
    if (!lease.acquired) throw new Error("no lease");
    await durable.writeStep(lease.fencingToken, {
      runId: "dup",
      seq: 0,
      name: "charge",
      inputHash: hashInput({ order: 7 }),
      status: "completed",
      output: { receipt: "r7" },
      attempt: 1,
      startedAt: 1,
      finishedAt: 2,
      fencingToken: lease.fencingToken,
    });
    await durable.releaseLease("dup", lease.fencingToken);
    const before = { run: await durable.getRun("dup"), steps: await durable.readSteps("dup") };
    expect(before.run?.runId).toBe(run.runId);
    await durable.close();
    // Then 0.1's tables beside it: a workflow of that id with a side effect of its key, and another one.
    const db = new Database(file);
    db.exec(readFileSync(fileURLToPath(new URL("../fixtures/workflow/cold-0.1-sqlite.sql", import.meta.url)), "utf8"));
    for (const id of ["dup", "other"]) {
      const state = createWorkflowState({ workflowId: id, sharedMemory: { id }, now: 1000 });
      db.prepare(
        "INSERT INTO workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at) VALUES (?, 0, '__start__', ?, 1000)",
      ).run(id, JSON.stringify({ ...state, status: "finished", isFinished: true }));
      db.prepare(
        "INSERT INTO workflows (workflow_id, session_id, status, latest_step, current_node, active_step, parent_workflow_id, created_at, updated_at) VALUES (?, ?, 'finished', 0, '__end__', 0, NULL, 1000, 1000)",
      ).run(id, id);
    }
    db.prepare(
      "INSERT INTO workflow_idempotency (idem_key, workflow_id, step_index, name, status, result_json, started_at, finished_at) VALUES ('dup:0:0', 'dup', 0, 'mail', 'finished', '{\"v\":1}', 10, 11)",
    ).run();
    db.close();

    const journal = journalOf(file);
    try {
      expect(await journal.getRun("dup")).toEqual(before.run);
      expect(await journal.readSteps("dup")).toEqual(before.steps);
      expect(await journal.getRun("other")).toMatchObject({ workflow: "graph", status: "completed" });
      expect(tableNames(file).filter((t) => t.startsWith("table:workflow"))).toEqual([]);
    } finally {
      await journal.close();
    }
  });
});

describe("a fixture file written before the journal (test/fixtures/workflow/pre-journal-0.1.db.gz)", () => {
  it("opens as a journal, resumes its waiting workflow with a 300 KB value and finishes it; a started side effect goes to reconcile", async () => {
    // Written by the previous release's SqliteColdStore (its own workflow_* tables, month tables, the blob table).
    const file = path.join(tmp.dir, `fixture-${n++}.db`);
    const gz = fileURLToPath(new URL("../fixtures/workflow/pre-journal-0.1.db.gz", import.meta.url));
    writeFileSync(file, gunzipSync(readFileSync(gz)));
    // Opened as a user opens it (the store moves the tables), then its journal through another connection.
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: file }) });
    const journal = new SqliteJournal({ path: file });
    try {
      expect(tableNames(file).filter((t) => t.startsWith("table:workflow"))).toEqual([]);
      const latest = await store.loadLatest("waiting-big");
      if (!latest) throw new Error("the moved workflow waiting-big is missing");
      expect(latest.status).toBe("waiting");
      expect((latest.sharedMemory.big as string).length).toBe(300_000);
      const run = await journal.getRun("waiting-big");
      expect(run?.waitingFor).toBe(`interrupt:${latest.pendingInterrupt?.id}`);
      await signal("waiting-big", run?.waitingFor as string, { ok: true }, { journal });
      let sent = 0;
      const runner = new ResumableGraphRunner({
        store,
        nodes: {
          fetch: () => ({ next: "approve", updates: {} }),
          approve: async (_s, ctx) => {
            const answer = await ctx.interrupt<{ ok: boolean }>({ reason: "send it?" });
            await ctx.sideEffect("send", () => {
              sent++;
              return "sent";
            });
            return { next: END, updates: { approved: answer.ok } };
          },
        },
      });
      const done = await runner.runOrResume("waiting-big");
      expect(done.status).toBe("finished");
      expect(done.state.sharedMemory).toMatchObject({ fetched: true, approved: true });
      expect((done.state.sharedMemory.big as string).length).toBe(300_000);
      expect(sent).toBe(1);
      const guard = new IdempotencyGuard({ store });
      await expect(guard.run("crashed:0:0", () => "again", { name: "pay" })).rejects.toBeInstanceOf(
        UnknownSideEffectError,
      );
    } finally {
      await store.close();
      await journal.close();
    }
  });
});
