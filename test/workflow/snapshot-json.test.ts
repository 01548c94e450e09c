/**
 * A checkpoint's snapshot text is `JSON.stringify` of the state with its large
 * `sharedMemory` values moved to blobs, built from the texts each value was
 * measured with (the memory is serialised once), and the default
 * `sharedMemory` schema checks JSON in one walk (not `z.json()`'s union at
 * every node) with the same verdicts.
 */
import path from "node:path";
import { describe, expect, it } from "vitest";
import { InvalidOptionError, NonJsonValueError } from "../../src/core/errors.js";
import { SqliteColdStore } from "../../src/workflow/cold-sqlite.js";
import {
  CheckpointStore,
  createWorkflowState,
  END,
  JsonValueSchema,
  ResumableGraphRunner,
  WorkflowStateError,
  WorkflowStateSchema,
} from "../../src/workflow/index.js";
import { tempDir } from "./helpers.js";

describe("checkpoint snapshot text", () => {
  it("is JSON.stringify of the stored state: key order (integer-like keys first), blobs", async () => {
    const tmp = tempDir("snapshot-json");
    const cold = new SqliteColdStore({ path: path.join(tmp.dir, "c.db") });
    const store = await CheckpointStore.open({ cold, blobDir: path.join(tmp.dir, "blobs"), blobThreshold: 1000 });
    try {
      const big = { text: "é".repeat(800) }; // 1,600 bytes of UTF-8 in 800 UTF-16 units: above the threshold
      const sharedMemory = { b: 1, "2": ["x", { y: null }], a: 'ü\u2028\n"', big, "1": 0 };
      const state = createWorkflowState({ workflowId: "w", sharedMemory: sharedMemory as never, now: 5 });
      const saved = await store.save(state, { expectedStep: null });
      const row = await cold.latest("w");
      const stored = JSON.parse(row?.stateJson ?? "null") as { sharedMemory: Record<string, unknown> };
      const ref = stored.sharedMemory.big as Record<string, unknown>;
      expect(Object.keys(ref)).toEqual(["$dumplings_blob", "bytes"]);
      expect(ref.bytes).toBe(Buffer.byteLength(JSON.stringify(big)));
      const expected = JSON.stringify({ ...saved, sharedMemory: { ...saved.sharedMemory, big: ref } });
      expect(row?.stateJson).toBe(expected);
      expect(Object.keys(stored.sharedMemory)).toEqual(["1", "2", "b", "a", "big"]);
      const loaded = await store.loadLatest("w");
      expect(loaded?.sharedMemory).toEqual({ b: 1, "2": ["x", { y: null }], a: 'ü\u2028\n"', big, "1": 0 });
    } finally {
      await store.close();
      tmp.cleanup();
    }
  });

  it("the default JSON schema gives z.json()'s verdicts; a save still names the path of a non-JSON value", async () => {
    for (const ok of ["s", 1.5, -0, true, null, [], [1, [2, { a: "b" }]], { a: { b: [null] } }, Object.create(null)]) {
      expect(JsonValueSchema.safeParse(ok).success, typeof ok).toBe(true);
    }
    const sparse: number[] = [];
    sparse[0] = 1;
    sparse[2] = 2; // a hole at 1
    for (const bad of [
      undefined,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      new Date(0),
      sparse,
      () => 1,
      1n,
      { a: [undefined] },
    ]) {
      expect(JsonValueSchema.safeParse(bad).success, typeof bad).toBe(false);
    }
    const base = createWorkflowState({ workflowId: "v", now: 1 });
    expect(() => WorkflowStateSchema.parse({ ...base, sharedMemory: { d: new Date(0) } })).toThrow();
    const tmp = tempDir("snapshot-json-bad");
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: path.join(tmp.dir, "c.db") }) });
    try {
      const e = await store
        .save({ ...base, sharedMemory: { deep: { list: [1, Number.NaN] } } } as never, { expectedStep: null })
        .catch((x: unknown) => x);
      expect(e).toBeInstanceOf(NonJsonValueError);
      expect((e as Error).message).toContain("sharedMemory.deep.list[1]");
      const e2 = await store
        .save({ ...base, sharedMemory: { x: undefined, y: [undefined] } } as never)
        .catch((x: unknown) => x);
      expect(e2 instanceof NonJsonValueError || e2 instanceof WorkflowStateError).toBe(true);
      expect(await store.loadLatest("v")).toBeUndefined();
    } finally {
      await store.close();
      tmp.cleanup();
    }
  });

  it("an undefined property is left out on the first run as on its replay (it failed the first run only)", async () => {
    const tmp = tempDir("snapshot-json-undefined");
    const store = await CheckpointStore.open({ cold: new SqliteColdStore({ path: path.join(tmp.dir, "c.db") }) });
    try {
      let charges = 0;
      const runner = new ResumableGraphRunner({
        store,
        nodes: {
          n: async (_s, ctx) => {
            const r = await ctx.sideEffect("charge", async () => {
              charges++;
              return { id: "ch_1", refund: undefined, meta: { x: undefined, y: 1 } } as never;
            });
            return { next: END, updates: { r } };
          },
        },
      });
      const first = await runner.runOrResume("u");
      expect(first.status).toBe("finished");
      const expected = { r: { id: "ch_1", meta: { y: 1 } } };
      expect(JSON.parse(JSON.stringify(first.state.sharedMemory))).toEqual(expected);
      expect((await store.loadLatest("u"))?.sharedMemory).toEqual(expected);
      expect(charges).toBe(1);
      const direct = createWorkflowState({ workflowId: "d", sharedMemory: { a: { b: undefined, c: [1] } } as never });
      await store.save(direct, { expectedStep: null });
      expect((await store.loadLatest("d"))?.sharedMemory).toEqual({ a: { c: [1] } });
      for (const bad of ["0", -1, 1.5]) {
        const e = await store
          .save({ ...direct, stepIndex: 1 }, { expectedStep: bad as never })
          .catch((x: unknown) => x);
        expect(e, String(bad)).toBeInstanceOf(InvalidOptionError);
      }
    } finally {
      await store.close();
      tmp.cleanup();
    }
  });
});
