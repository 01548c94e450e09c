/**
 * Workflow checkpoints written in the original design's layout (the
 * workflow-snapshot article): `workflow_snapshots` rows with a snake_case
 * state, float-second times, `START`/`END` node names and no summary row,
 * and a plain Redis string at `agent:state:{id}`. `runOrResume` resumes from
 * them — never from step 0 — writes every new checkpoint in the current
 * layout and leaves the original rows as they were. A node returning the
 * original `(next, updates)` tuple gets a typed error naming the shape.
 */
import { mkdirSync } from "node:fs";
import path from "node:path";
import Database from "better-sqlite3";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConflictError } from "../../src/core/errors.js";
import {
  type CheckpointStore,
  createWorkflowState,
  END,
  type GraphNode,
  NodeFailedError,
  RedisHotTier,
  ResumableGraphRunner,
  START,
} from "../../src/workflow/index.js";
import { runJson } from "../cli/run-cli.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { sqliteStore, tempDir } from "./helpers.js";

const tmp = tempDir("original");
afterAll(() => tmp.cleanup());
let n = 0;

/** The state of the original design at a step (Python's json.dumps of the pydantic model). */
function originalState(workflowId: string, step: number, currentNode: string, extra: Record<string, unknown> = {}) {
  const memory: Record<string, unknown> = { topic: "tea" };
  if (step >= 1) memory.plan = ["search", "summarise"];
  if (step >= 2) memory.notes = "green tea has less caffeine";
  return {
    workflow_id: workflowId,
    session_id: "sess-1",
    current_node: currentNode,
    step_index: step,
    shared_memory: memory,
    history_records:
      step >= 2
        ? [
            {
              tool_name: "search",
              arguments: { q: "tea" },
              result: "3 hits",
              latency_ms: 12.5,
              timestamp: 1741944414.75,
            },
          ]
        : [],
    is_finished: currentNode === "END",
    updated_at: 1741944413.25 + step,
    ...extra,
  };
}

/** A database file exactly as the original design creates and fills it. */
function originalDatabase(
  file: string,
  workflows: Record<string, [node: string, currentNode: string][]>,
  createdAtOf?: (step: number) => string | number,
): void {
  const db = new Database(file);
  db.exec(`CREATE TABLE IF NOT EXISTS workflow_snapshots (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workflow_id TEXT NOT NULL,
    step_index INTEGER NOT NULL,
    node_name TEXT NOT NULL,
    state_json TEXT NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    UNIQUE (workflow_id, step_index))`);
  const insert = db.prepare(
    "INSERT OR REPLACE INTO workflow_snapshots (workflow_id, step_index, node_name, state_json, created_at) VALUES (?, ?, ?, ?, ?)",
  );
  for (const [id, steps] of Object.entries(workflows)) {
    steps.forEach(([node, current], step) => {
      // created_at as the original left it: CURRENT_TIMESTAMP text, or float seconds.
      const createdAt =
        createdAtOf?.(step) ?? (step % 2 === 0 ? `2025-03-14 09:26:5${3 + step}` : 1741944413.25 + step);
      insert.run(id, step, node, JSON.stringify(originalState(id, step, current)), createdAt);
    });
  }
  db.close();
}

const ORIGINAL_STEPS: [string, string][] = [
  ["START", "START"],
  ["plan", "research"],
  ["research", "write"],
];

/**
 * A workflow's rows of `workflow_snapshots` (the original table, or the view over the journal it
 * becomes when a store adopts the file): what the original design's own reader sees. The `id` and
 * `created_at` columns are left out: the journal numbers its records per run and keeps times in ms.
 */
const rows = (file: string, workflowId: string) => {
  const db = new Database(file, { readonly: true });
  const all = db
    .prepare(
      "SELECT step_index, node_name, state_json FROM workflow_snapshots WHERE workflow_id = ? ORDER BY step_index",
    )
    .all(workflowId) as { step_index: number; node_name: string; state_json: string }[];
  db.close();
  return all;
};

function graph(calls: string[]): Record<string, GraphNode> {
  return {
    plan: async () => {
      calls.push("plan");
      return { next: "research", updates: { plan: ["again"] } };
    },
    research: async () => {
      calls.push("research");
      return { next: "write", updates: { notes: "again" } };
    },
    write: async (s) => {
      calls.push("write");
      return { next: END, updates: { report: `${s.sharedMemory.topic}: ${s.sharedMemory.notes}` } };
    },
  };
}

describe("a SQLite archive in the original layout", () => {
  it("runOrResume continues at the original's next node, writes new steps in the current layout, keeps the original rows", async () => {
    const dir = path.join(tmp.dir, `a${n++}`);
    const file = path.join(dir, "checkpoints.db");
    mkdirSync(dir, { recursive: true });
    originalDatabase(file, { "wf-orig": ORIGINAL_STEPS, "wf-done": [...ORIGINAL_STEPS, ["write", "END"]] });
    const before = rows(file, "wf-orig");
    const store = await sqliteStore(dir);
    try {
      // Read as the current shape: ms times, START as __start__, records converted.
      const latest = await store.loadLatest("wf-orig");
      expect(latest).toMatchObject({
        workflowId: "wf-orig",
        sessionId: "sess-1",
        stepIndex: 2,
        currentNode: "write",
        status: "running",
        isFinished: false,
        updatedAt: 1741944415250,
        historyRecords: [
          { toolName: "search", arguments: { q: "tea" }, result: "3 hits", latencyMs: 12.5, timestamp: 1741944414750 },
        ],
      });
      expect((await store.get("wf-orig", 0)).currentNode).toBe(START);
      expect((await store.summary("wf-orig"))?.latestStep).toBe(2);

      // Creating the workflow again must not replace its archived step 0.
      await expect(
        store.save(createWorkflowState({ workflowId: "wf-orig" }), { expectedStep: null }),
      ).rejects.toBeInstanceOf(ConflictError);

      const calls: string[] = [];
      const runner = new ResumableGraphRunner({ store, nodes: graph(calls) });
      const result = await runner.runOrResume("wf-orig", { sharedMemory: { topic: "ignored" } });
      expect(calls).toEqual(["write"]);
      expect(result.status).toBe("finished");
      expect(result.state.stepIndex).toBe(3);
      expect(result.state.sharedMemory).toEqual({
        topic: "tea",
        plan: ["search", "summarise"],
        notes: "green tea has less caffeine",
        report: "tea: green tea has less caffeine",
      });

      const history = await store.history("wf-orig");
      expect(history.map((h) => [h.stepIndex, h.nodeName])).toEqual([
        [0, START],
        [1, "plan"],
        [2, "research"],
        [3, "write"],
      ]);
      expect(history[0]?.createdAt).toBe(Date.UTC(2025, 2, 14, 9, 26, 53));
      expect(history[1]?.createdAt).toBe(1741944414250);
      // Both adopted workflows are listed (the finished one too: the move gave it its run), newest first.
      expect((await store.listWorkflows()).items.map((w) => [w.workflowId, w.status, w.latestStep])).toEqual([
        ["wf-orig", "finished", 3],
        ["wf-done", "finished", 3],
      ]);

      // A finished original workflow runs nothing and writes nothing.
      const done = await runner.runOrResume("wf-done");
      expect(done.status).toBe("finished");
      expect(done.state.currentNode).toBe(END);
      expect(calls).toEqual(["write"]);
    } finally {
      await store.close();
    }
    // The original rows read as they were through the original design's table (now a view); step 3
    // is in the current layout.
    const after = rows(file, "wf-orig");
    expect(after.slice(0, 3)).toEqual(before);
    expect(after).toHaveLength(4);
    expect(after[3]?.state_json.startsWith('{"workflowId":"wf-orig"')).toBe(true);
    expect(rows(file, "wf-done")).toHaveLength(4);
  });

  it("dumplings workflows show reads an original archive nothing has opened yet; its rows read as they were", () => {
    const dir = path.join(tmp.dir, `a${n++}`);
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, "checkpoints.db");
    originalDatabase(file, { "wf-cli": ORIGINAL_STEPS });
    const before = rows(file, "wf-cli");
    const shown = runJson<{
      summary: { latestStep: number; currentNode: string; status: string };
      history: { stepIndex: number; nodeName: string }[];
    }>(["workflows", "show", "wf-cli", "--store", `sqlite:${file}`]);
    expect(shown.summary).toMatchObject({ latestStep: 2, currentNode: "write", status: "running" });
    expect(shown.history.map((h) => [h.stepIndex, h.nodeName])).toEqual([
      [0, START],
      [1, "plan"],
      [2, "research"],
    ]);
    expect(rows(file, "wf-cli")).toEqual(before);
  });

  it("retention reads float-second created_at as seconds: an adopted workflow's recent original rows are kept", async () => {
    const dir = path.join(tmp.dir, `a${n++}`);
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, "checkpoints.db");
    const hourAgo = Date.now() / 1000 - 3600; // float seconds, as time.time() wrote them
    originalDatabase(file, { recent: ORIGINAL_STEPS }, (step) => hourAgo + step);
    const store = await sqliteStore(dir);
    try {
      await new ResumableGraphRunner({ store, nodes: graph([]) }).runOrResume("recent");
      expect((await store.summary("recent"))?.latestStep).toBe(3);
      // An hour-old row is not older than a day (it would be if its seconds were read as ms).
      expect((await store.prune({ olderThan: 24 * 3600_000, keepLast: 1 })).deletedSnapshots).toBe(0);
      expect(rows(file, "recent")).toHaveLength(4);
      // Older than the cutoff, they go (retention is asked for), each workflow's newest step stays.
      expect((await store.prune({ olderThan: new Date(Date.now() + 60_000), keepLast: 1 })).deletedSnapshots).toBe(3);
      expect((await store.history("recent")).map((h) => h.stepIndex)).toEqual([3]);
    } finally {
      await store.close();
    }
  });

  it("an unknown field of an original snapshot is a typed error naming it; nothing is written", async () => {
    const dir = path.join(tmp.dir, `a${n++}`);
    mkdirSync(dir, { recursive: true });
    const file = path.join(dir, "checkpoints.db");
    originalDatabase(file, { w: ORIGINAL_STEPS });
    const db = new Database(file);
    db.prepare("UPDATE workflow_snapshots SET state_json = ? WHERE step_index = 2").run(
      JSON.stringify(originalState("w", 2, "write", { priority: "high" })),
    );
    db.close();
    const before = rows(file, "w");
    const store = await sqliteStore(dir);
    const calls: string[] = [];
    const runner = new ResumableGraphRunner({ store, nodes: graph(calls) });
    await expect(runner.runOrResume("w")).rejects.toThrow(/step 2: invalid state at priority: unknown field/);
    expect(calls).toEqual([]);
    await store.close();
    expect(rows(file, "w")).toEqual(before);
  });
});

describe("a node returning the original (next, updates) tuple", () => {
  it("is a NodeFailedError naming the expected shape, recorded with the step; the checkpoint stays", async () => {
    const dir = path.join(tmp.dir, `t${n++}`);
    const store = await sqliteStore(dir);
    const runner = new ResumableGraphRunner({
      store,
      nodes: {
        // biome-ignore lint/suspicious/noExplicitAny: the original design's return shape, on purpose
        plan: (async () => ["write", { plan: 1 }]) as any,
        write: async () => ({ next: END }),
      },
    });
    const error = await runner.runOrResume("tuple").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(NodeFailedError);
    const message = (error as Error).message;
    expect(message).toContain('node "plan" failed');
    expect(message).toContain("(next, updates) tuple");
    expect(message).toContain("{ next, updates }");
    expect(message).not.toContain("unknown node");
    expect((await store.loadLatest("tuple"))?.stepIndex).toBe(0);
    expect((await store.errors("tuple"))[0]?.nodeName).toBe("plan");
    // Other shapes a node may return by mistake name the shape too.
    for (const wrong of [{ next_node: "write" }, "write", { next: "write", updates: [1] }]) {
      const r = new ResumableGraphRunner({
        store,
        // biome-ignore lint/suspicious/noExplicitAny: wrong shapes, on purpose
        nodes: { plan: (async () => wrong) as any, write: async () => ({ next: END }) },
      });
      const e = await r.runOrResume(`wrong-${JSON.stringify(wrong).length}`).catch((x: unknown) => x);
      expect(e).toBeInstanceOf(NodeFailedError);
      expect((e as Error).message).toContain("a node returns { next, updates }");
    }
    await store.close();
  });
});

const skip = await redisSkipReason();
const prefix = `dumplings-test:wf-original:${process.pid}:${Date.now().toString(36)}:`;

describe.skipIf(skip)("an original Redis string at agent:state:{id}", () => {
  let raw: Redis;
  const keys: string[] = [];
  beforeAll(() => {
    raw = new Redis(REDIS_URL);
  });
  afterAll(async () => {
    if (keys.length) await raw.del(...keys);
    await raw.quit();
  });
  const open = async (dir: string): Promise<CheckpointStore> => {
    const store = await sqliteStore(dir, { hot: new RedisHotTier({ url: REDIS_URL, keyPrefix: prefix }) });
    await store.hot?.waitReady(2000);
    return store;
  };

  it("is read (no WRONGTYPE), resumed from, and replaced by the current layout on the next write", async () => {
    const dir = path.join(tmp.dir, `r${n++}`);
    mkdirSync(dir, { recursive: true });
    originalDatabase(path.join(dir, "checkpoints.db"), { "wf-r": ORIGINAL_STEPS });
    const key = `${prefix}agent:state:wf-r`;
    keys.push(key);
    await raw.setex(key, 3600, JSON.stringify(originalState("wf-r", 2, "write")));
    const store = await open(dir);
    try {
      expect((await store.loadLatest("wf-r"))?.currentNode).toBe("write");
      expect(store.stats).toMatchObject({ hotHits: 1, hotErrors: 0 });
      const calls: string[] = [];
      const result = await new ResumableGraphRunner({ store, nodes: graph(calls) }).runOrResume("wf-r");
      expect(calls).toEqual(["write"]);
      expect(result.state.stepIndex).toBe(3);
      expect(store.stats.hotErrors).toBe(0);
      expect(await raw.type(key)).toBe("hash");
      expect(await raw.hget(key, "step")).toBe("3");
      expect(await raw.pttl(key)).toBeGreaterThan(0);
    } finally {
      await store.close();
    }
  });

  it("a string holding a newer step is not replaced; a string that is no workflow state is left alone and counted", async () => {
    const dir = path.join(tmp.dir, `r${n++}`);
    mkdirSync(dir, { recursive: true });
    const store = await open(dir);
    try {
      const newer = `${prefix}agent:state:newer`;
      const foreign = `${prefix}agent:state:foreign`;
      keys.push(newer, foreign);
      const newerText = JSON.stringify(originalState("newer", 7, "write"));
      await raw.set(newer, newerText);
      await store.save(createWorkflowState({ workflowId: "newer" }), { expectedStep: null });
      expect(await raw.get(newer)).toBe(newerText);

      await raw.set(foreign, "not a workflow");
      await store.save(createWorkflowState({ workflowId: "foreign" }), { expectedStep: null });
      expect(await raw.get(foreign)).toBe("not a workflow");
      expect((await store.loadLatest("foreign"))?.stepIndex).toBe(0); // from the cold store
      expect(store.stats.hotErrors).toBe(3); // the refused write, read and refill
      expect(await raw.get(foreign)).toBe("not a workflow");
    } finally {
      await store.close();
    }
  });
});
