/** IdempotencyGuard on a real SQLite file: once per key, replay, unknown outcomes go to reconcile. */
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { NonJsonValueError } from "../../src/core/errors.js";
import type { UnknownSideEffect } from "../../src/workflow/idempotency.js";
import {
  type CheckpointStore,
  IdempotencyGuard,
  NondeterminismError,
  UnknownSideEffectError,
} from "../../src/workflow/index.js";
import { sqliteStore, tempDir } from "./helpers.js";

let tmp: ReturnType<typeof tempDir>;
let store: CheckpointStore;
beforeEach(async () => {
  tmp = tempDir("idem");
  store = await sqliteStore(tmp.dir);
});
afterEach(async () => {
  await store.close();
  tmp.cleanup();
});

describe("IdempotencyGuard", () => {
  it("runs a side effect once per key and returns the recorded result afterwards, across guard instances", async () => {
    let calls = 0;
    const key = IdempotencyGuard.key("w", 3, 0);
    expect(key).toBe("w:3:0");
    const g1 = new IdempotencyGuard({ store });
    expect(await g1.run(key, () => ({ receipt: ++calls }))).toEqual({ receipt: 1 });
    const g2 = new IdempotencyGuard({ store: store.cold });
    expect(await g2.run(key, () => ({ receipt: ++calls }))).toEqual({ receipt: 1 });
    expect(calls).toBe(1);
    expect(g2.stats).toEqual({ executed: 0, replayed: 1, reconciled: 0 });
    // undefined results round-trip as undefined.
    expect(await g1.run("void", () => undefined)).toBeUndefined();
    expect(await g1.run("void", () => undefined)).toBeUndefined();
  });

  it("a side effect that throws is not recorded, so it can be retried", async () => {
    const g = new IdempotencyGuard({ store });
    await expect(
      g.run("k", () => {
        throw new Error("503");
      }),
    ).rejects.toThrow("503");
    expect(await g.run("k", () => "ok")).toBe("ok");
  });

  it("started but never finished (crash in between) → unknown: reconcile decides, never a blind re-run", async () => {
    // Simulate a process that recorded the start and died before recording the finish.
    await store.cold.idempotencyBegin("crashed", { workflowId: "w", stepIndex: 1, name: "charge", now: 1234 });
    let charged = 0;
    const charge = () => ++charged;
    const plain = new IdempotencyGuard({ store });
    const err = await plain.run("crashed", charge, { name: "charge" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UnknownSideEffectError);
    expect(err).toMatchObject({ key: "crashed", startedAt: 1234, code: "SIDE_EFFECT_UNKNOWN" });
    expect(charged).toBe(0);

    const asked: UnknownSideEffect[] = [];
    const happened = new IdempotencyGuard({
      store,
      reconcile: (e) => {
        asked.push(e);
        return { outcome: "happened", result: 42 };
      },
    });
    expect(await happened.run("crashed", charge, { name: "charge" })).toBe(42);
    expect(asked).toEqual([
      { status: "unknown", key: "crashed", name: "charge", workflowId: "w", stepIndex: 1, startedAt: 1234 },
    ]);
    expect(charged).toBe(0);
    // Recorded as finished now: no more questions.
    expect(await plain.run("crashed", charge, { name: "charge" })).toBe(42);

    await store.cold.idempotencyBegin("crashed-2", { workflowId: "w", stepIndex: 1, name: "charge", now: 1 });
    const notHappened = new IdempotencyGuard({ store, reconcile: () => ({ outcome: "not-happened" }) });
    expect(await notHappened.run("crashed-2", charge, { name: "charge" })).toBe(1);
    expect(await notHappened.run("crashed-2", charge, { name: "charge" })).toBe(1);
    expect(charged).toBe(1);
  });

  it("a different call under a recorded key is a nondeterminism error", async () => {
    const g = new IdempotencyGuard({ store });
    await g.run("k", () => 1, { name: "send-mail" });
    await expect(g.run("k", () => 2, { name: "charge-card" })).rejects.toBeInstanceOf(NondeterminismError);
  });

  it("a result JSON cannot carry is refused with its path and the record stays unknown", async () => {
    const g = new IdempotencyGuard({ store });
    const err = await g.run("bad", () => ({ at: new Date() }) as never).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NonJsonValueError);
    expect((err as NonJsonValueError).path).toContain(".at");
    await expect(g.run("bad", () => 1)).rejects.toBeInstanceOf(UnknownSideEffectError);
  });
});
