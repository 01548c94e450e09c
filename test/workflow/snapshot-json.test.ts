/**
 * A checkpoint's snapshot text is `JSON.stringify` of the state with its large
 * `sharedMemory` values moved to blobs, built from the texts each value was
 * measured with (the memory is serialised once), and the default
 * `sharedMemory` schema checks JSON in one walk (not `z.json()`'s union at
 * every node) with the same verdicts. A large state is serialised in pieces
 * and encoded to UTF-8 once; SQLite stores those bytes as TEXT and the hot
 * tier caches the same bytes.
 */
import path from "node:path";
import { describe, expect, it } from "vitest";
import { InvalidOptionError, NonJsonValueError } from "../../src/core/errors.js";
import { RedisHotTier } from "../../src/durable/checkpoints/hot-redis.js";
import { SqliteColdStore } from "../../src/durable/checkpoints/sqlite.js";
import {
  CheckpointStore,
  createWorkflowState,
  END,
  ResumableGraphRunner,
  WorkflowStateError,
  WorkflowStateSchema,
} from "../../src/workflow/index.js";
import { JsonValueSchema } from "../../src/workflow/state.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { tempDir } from "./helpers.js";

const redisSkip = await redisSkipReason();

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

  it('keeps sharedMemory keys named "__proto__" as data, at the top and below, through save and load', async () => {
    const tmp = tempDir("snapshot-proto");
    const cold = new SqliteColdStore({ path: path.join(tmp.dir, "c.db") });
    const store = await CheckpointStore.open({ cold });
    try {
      // JSON.parse makes "__proto__" an own data property (an object literal would set the prototype).
      const sharedMemory = JSON.parse('{"__proto__":{"polluted":true},"counts":{"__proto__":2,"the":5}}');
      const state = createWorkflowState({ workflowId: "p", sharedMemory, now: 5 });
      const text = JSON.stringify(sharedMemory);
      const saved = await store.save(state, { expectedStep: null });
      expect(JSON.stringify(saved.sharedMemory)).toBe(text);
      const loaded = await store.loadLatest("p");
      expect(JSON.stringify(loaded?.sharedMemory)).toBe(text);
      expect(Object.getPrototypeOf(loaded?.sharedMemory)).toBe(Object.prototype);
      expect(({} as Record<string, unknown>).polluted).toBeUndefined();
      // A value JSON cannot carry is still refused by the schema, at its key.
      const bad = WorkflowStateSchema.safeParse({ ...state, sharedMemory: { ok: 1, when: new Date(0) } });
      expect(bad.success).toBe(false);
      expect(bad.error?.issues.map((x) => x.path.join("."))).toEqual(["sharedMemory.when"]);
    } finally {
      await store.close();
      tmp.cleanup();
    }
  });

  it.skipIf(redisSkip !== undefined)(
    "a large state, serialised in pieces, is JSON.stringify's text in SQLite (as TEXT) and in the hot tier",
    async () => {
      const tmp = tempDir("snapshot-json-large");
      const cold = new SqliteColdStore({ path: path.join(tmp.dir, "c.db") });
      const hot = new RedisHotTier({ url: REDIS_URL, keyPrefix: `snapshot-json:${process.pid}:${Date.now()}:` });
      const store = await CheckpointStore.open({
        cold,
        hot,
        blobDir: path.join(tmp.dir, "blobs"),
        blobThreshold: 60_000,
      });
      try {
        // Every shape the pieces take: a list of objects (split at once), an object holding a large list,
        // a large list of strings, a large object, text above U+00FF and outside the BMP, a large value
        // that goes to a blob, and undefined properties (left out) at every level.
        const message = (i: number) => ({
          role: i % 2 ? "user" : "assistant",
          content: `ünïcödé ✓ 🙂 ${"x".repeat(400)} ${i}`,
          n: i,
          drop: undefined,
        });
        const sharedMemory = {
          messages: Array.from({ length: 120 }, (_, i) => message(i)),
          nested: { inner: { list: Array.from({ length: 90 }, (_, i) => message(i)), skip: undefined }, k: "v" },
          strings: Array.from({ length: 60 }, (_, i) => `“quoted” ${i} ${"y".repeat(500)}`),
          big: Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, message(i)])),
          blob: Array.from({ length: 200 }, (_, i) => message(i)),
          empty: [],
          one: [{ a: 1 }],
          none: {},
          undef: undefined,
        };
        const state = createWorkflowState({ workflowId: "large", sharedMemory: sharedMemory as never, now: 7 });
        const saved = await store.save(state, { expectedStep: null });
        const row = await cold.latest("large");
        const stored = JSON.parse(row?.stateJson ?? "null") as { sharedMemory: Record<string, unknown> };
        const ref = stored.sharedMemory.blob as Record<string, unknown>;
        expect(Object.keys(ref)).toEqual(["$dumplings_blob", "bytes"]);
        expect(ref.bytes).toBe(Buffer.byteLength(JSON.stringify(sharedMemory.blob)));
        const expected = JSON.stringify({ ...saved, sharedMemory: { ...saved.sharedMemory, blob: ref } });
        expect(row?.stateJson).toBe(expected);
        // The checkpoint is step `checkpoint:0:<node>` of run "large": its output is that text, as TEXT.
        const texts = cold.db
          .prepare(
            "SELECT typeof(output_json) AS t, output_json AS text FROM durable_steps WHERE run_id = ? AND name GLOB 'checkpoint:0:*'",
          )
          .all("large") as { t: string; text: string }[];
        expect(texts).toEqual([{ t: "text", text: expected }]);
        expect((await hot.get("large"))?.stateJson).toBe(expected);
        const loaded = await store.loadLatest("large");
        expect(store.stats.hotHits).toBe(1);
        expect(loaded?.sharedMemory).toEqual(JSON.parse(JSON.stringify(sharedMemory)));
      } finally {
        await hot.delete("large");
        await store.close();
        tmp.cleanup();
      }
    },
  );

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
