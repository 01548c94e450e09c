/**
 * @internal The journal conformance suite's tests of retention: snapshot steps and `pruneRuns` (with a cutoff, `keepLast`, a window), `create: true` writes, and blobs written with their step and deleted with their last reference. Registered by
 * `runJournalConformance` (`journal-conformance.ts`), in this order among its parts.
 *
 * @module
 */
import { createHash, randomUUID } from "node:crypto";
import { InvalidOptionError } from "../core/errors.js";
import { JournalIntegrityError } from "../durable/errors.js";
import type { Journal, StepRecord } from "../durable/journal.js";

import { type JournalSuite, lease, rec } from "./journal-conformance-kit.js";

/** @internal Registers the tests of retention. */
export function retentionTests<J extends Journal>(suite: JournalSuite<J>): void {
  const { it, expect, newRunId } = suite;
  it("snapshot steps and pruneRuns: only steps finished before the cutoff and before the keepLast-th newest snapshot go; the next seq stays highest + 1", async () => {
    const j = suite.journal();
    const old = Date.now() - 10 * 60_000;
    const plain = newRunId();
    await j.createRun({ runId: plain, workflow: "wf", input: null });
    const tp = await lease(j, plain, "A");
    for (let seq = 0; seq < 3; seq++) {
      await j.writeStep(tp, rec(plain, seq, tp, { status: "completed", output: seq, finishedAt: old }));
    }
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "graph", input: null });
    const t = await lease(j, id, "A");
    const done = (seq: number, finishedAt: number) =>
      rec(id, seq, t, { name: `checkpoint:${seq}`, status: "completed", output: { seq }, finishedAt });
    await j.writeStep(t, done(0, old));
    await j.writeStep(t, rec(id, 1, t, { name: "checkpoint:1" }), { snapshot: true });
    await j.writeStep(t, done(1, old), { snapshot: true, sync: false });
    await j.writeStep(t, done(2, old));
    await j.writeStep(t, done(3, Date.now()));
    await j.writeStep(t, done(4, old), { snapshot: true });
    await j.writeStep(t, rec(id, 5, t, { name: "effect:5" }));
    const steps = await j.readSteps(id);
    expect(steps.map((s) => s.snapshot === true)).toEqual([false, true, false, false, true, false]);
    expect(steps.filter((s) => "snapshot" in s).map((s) => s.seq)).toEqual([1, 4]);
    // keepLast 2: the 2nd newest snapshot is #1, so only #0 goes
    expect(await j.pruneRuns({ olderThanMs: 60_000, keepLast: 2 })).toEqual({ deletedSteps: 1, deletedBlobs: 0 });
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([1, 2, 3, 4, 5]);
    // keepLast 1: #1 and #2 go; #3 finished after the cutoff stays; the plain run loses nothing
    expect(await j.pruneRuns({ olderThanMs: 60_000 })).toEqual({ deletedSteps: 2, deletedBlobs: 0 });
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([3, 4, 5]);
    expect((await j.readSteps(plain)).map((s) => s.seq)).toEqual([0, 1, 2]);
    expect(await j.pruneRuns({ olderThanMs: 60_000, vacuum: "full" })).toEqual({ deletedSteps: 0, deletedBlobs: 0 });
    expect((await j.readSteps(id, { namePrefix: "checkpoint:", last: 1 })).map((s) => [s.seq, s.snapshot])).toEqual([
      [4, true],
    ]);
    expect((await j.readSteps(id, { fromSeq: 1, last: 2 })).map((s) => s.seq)).toEqual([4, 5]);
    // outputs: false may leave out output and error, and keeps every other field
    const strip = ({ output: _o, error: _e, ...rest }: StepRecord) => rest;
    expect((await j.readSteps(id, { outputs: false })).map(strip)).toEqual((await j.readSteps(id)).map(strip));
    expect((await j.readSteps(id, { namePrefix: "checkpoint:", last: 1, outputs: false })).map((s) => s.seq)).toEqual([
      4,
    ]);
    await expect(j.readSteps(id, { outputs: "no" } as never)).rejects.toBeInstanceOf(InvalidOptionError);
    // holes are never filled: the next seq is the highest + 1
    for (const seq of [0, 2, 7]) {
      await expect(j.writeStep(t, rec(id, seq, t, { name: `checkpoint:${seq}` })), `#${seq}`).rejects.toBeInstanceOf(
        JournalIntegrityError,
      );
    }
    await j.writeStep(t, rec(id, 5, t, { name: "effect:5", status: "completed", output: 5, finishedAt: old }));
    await j.writeStep(t, rec(id, 6, t));
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([3, 4, 5, 6]);
    // a reset keeps the steps up to toSeq; the run goes on after its highest kept seq
    await j.resetRun(id, 4, "ops");
    const t2 = await lease(j, id, "B");
    await expect(j.writeStep(t2, rec(id, 6, t2))).rejects.toBeInstanceOf(JournalIntegrityError);
    await j.writeStep(t2, rec(id, 5, t2, { name: "again" }));
    expect((await j.readSteps(id)).map((s) => [s.seq, s.name])).toEqual([
      [3, "checkpoint:3"],
      [4, "checkpoint:4"],
      [5, "again"],
    ]);
    // everything finished before now, keepLast above the number of snapshots: nothing goes
    expect(await j.pruneRuns({ olderThanMs: 0, keepLast: 5 })).toEqual({ deletedSteps: 0, deletedBlobs: 0 });
    for (const bad of [
      {},
      { olderThanMs: -1 },
      { olderThanMs: Number.NaN },
      { olderThanMs: 1, keepLast: 0 },
      { olderThanMs: 1, keepLast: 1.5 },
      { olderThanMs: 1, vacuum: "all" },
      { olderThanMs: 1, keep: 2 },
      { olderThanMs: 1, finishedBefore: 5 },
      { finishedBefore: Number.NaN },
      { finishedBefore: 5, finishedFrom: "1" },
    ]) {
      await expect(j.pruneRuns(bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(InvalidOptionError);
    }
    await expect(j.writeStep(t2, rec(id, 6, t2), { snapshots: true } as never)).rejects.toBeInstanceOf(
      InvalidOptionError,
    );
  });

  it("writeStep with create: true never replaces a record, not even a started one of its name", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const t = await lease(j, id, "A");
    await j.writeStep(t, rec(id, 0, t, { name: "effect:pay" }), { create: true });
    // another starter that read the same next seq: refused, the first record stays
    await expect(
      j.writeStep(t, rec(id, 0, t, { name: "effect:pay", attempt: 2 }), { create: true }),
    ).rejects.toBeInstanceOf(JournalIntegrityError);
    expect((await j.readSteps(id)).map((s) => [s.seq, s.name, s.attempt])).toEqual([[0, "effect:pay", 1]]);
    // without it, a started record of the same name is replaced (the step's next attempt)
    await j.writeStep(t, rec(id, 0, t, { name: "effect:pay", attempt: 2 }));
    expect((await j.readSteps(id)).map((s) => s.attempt)).toEqual([2]);
    await j.writeStep(t, rec(id, 1, t, { name: "effect:ship" }), { create: true });
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0, 1]);
    await expect(j.writeStep(t, rec(id, 2, t), { create: "yes" } as never)).rejects.toBeInstanceOf(InvalidOptionError);
  });

  it("pruneRuns with a window (finishedFrom, finishedBefore): only the records that finished inside it go", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "graph", input: null });
    const t = await lease(j, id, "A");
    const base = Date.UTC(2020, 0, 1);
    const at = [base, base + 1000, base + 2000, base + 3000];
    for (const [seq, finishedAt] of at.entries()) {
      await j.writeStep(
        t,
        rec(id, seq, t, { name: `checkpoint:${seq}`, status: "completed", output: seq, finishedAt }),
        {
          snapshot: true,
        },
      );
    }
    // [base + 1000, base + 3000): #1 and #2; #3 is the newest snapshot and stays anyway
    expect(await j.pruneRuns({ finishedFrom: at[1]!, finishedBefore: at[3]! })).toEqual({
      deletedSteps: 2,
      deletedBlobs: 0,
    });
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0, 3]);
    // the bound is exclusive above, inclusive below
    expect(await j.pruneRuns({ finishedFrom: at[0]! + 1, finishedBefore: at[3]! + 1 })).toEqual({
      deletedSteps: 0,
      deletedBlobs: 0,
    });
    expect(await j.pruneRuns({ finishedBefore: at[0]! + 1 })).toEqual({ deletedSteps: 1, deletedBlobs: 0 });
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([3]);
  });

  it("blobs: written once with their step, read back by reference, deleted with their last reference (rewrite, deleteRun, resetRun, pruneRuns)", async () => {
    const j = suite.journal();
    const blob = (text: string) => {
      const bytes = new Uint8Array(Buffer.from(text, "utf8"));
      return [createHash("sha256").update(bytes).digest("hex"), bytes] as const;
    };
    const [a, aBytes] = blob(`alpha ${randomUUID()}`);
    const [b, bBytes] = blob(`beta ${randomUUID()}`);
    const [c, cBytes] = blob(`gamma ${randomUUID()}`);
    const [d, dBytes] = blob(`delta ${randomUUID()}`);
    const binary = new Uint8Array([0, 255, 1, 128, 0, 10, 13]);
    const e = createHash("sha256").update(binary).digest("hex");
    const one = newRunId();
    const two = newRunId();
    for (const id of [one, two]) await j.createRun({ runId: id, workflow: "graph", input: null });
    const t1 = await lease(j, one, "A");
    const t2 = await lease(j, two, "A");
    const done = (id: string, seq: number, t: number, output: unknown = { seq }) =>
      rec(id, seq, t, { status: "completed", output: output as never, finishedAt: Date.now() - 600_000 });
    await j.writeStep(t1, rec(one, 0, t1));
    await j.writeStep(t1, done(one, 0, t1, { a, b }), {
      blobs: new Map([
        [a, aBytes],
        [b, bBytes],
        [e, binary],
      ]),
      blobRefs: [a, b],
    });
    expect(await j.readBlob(a)).toEqual(aBytes);
    expect(await j.readBlob(b)).toEqual(bBytes);
    expect(await j.readBlob(e)).toEqual(binary);
    expect(await j.readBlob(c)).toBeUndefined();
    // a stored blob is referenced without its bytes; a missing one is refused and nothing is written
    await j.writeStep(t2, done(two, 0, t2, { a }), { blobRefs: [a], snapshot: true });
    await expect(j.writeStep(t2, done(two, 1, t2), { blobRefs: [c] })).rejects.toBeInstanceOf(JournalIntegrityError);
    expect((await j.readSteps(two)).map((s) => s.seq)).toEqual([0]);
    for (const bad of [
      { blobs: new Map([[a, bBytes]]) },
      { blobs: new Map([["sha256:x", aBytes]]) },
      { blobRefs: ["not-a-hash"] },
      { blobs: { [a]: aBytes } },
    ]) {
      await expect(j.writeStep(t2, done(two, 1, t2), bad as never)).rejects.toBeInstanceOf(InvalidOptionError);
    }
    // a record that is not completed rewritten with other references: the blob it held goes
    await j.writeStep(t2, rec(two, 1, t2), { blobs: new Map([[c, cBytes]]), blobRefs: [c] });
    expect(await j.readBlob(c)).toEqual(cBytes);
    await j.writeStep(t2, done(two, 1, t2), { blobs: new Map([[d, dBytes]]), blobRefs: [d] });
    expect(await j.readBlob(c)).toBeUndefined();
    expect(await j.readBlob(d)).toEqual(dBytes);
    // deleteRun: b was run one's alone, a is still run two's
    await j.deleteRun(one);
    expect(await j.readBlob(b)).toBeUndefined();
    expect(await j.readBlob(a)).toEqual(aBytes);
    // pruneRuns: run two's #0 (a) goes before its snapshot #2
    await j.writeStep(t2, done(two, 2, t2, { d }), { blobRefs: [d], snapshot: true });
    expect(await j.pruneRuns({ olderThanMs: 60_000 })).toEqual({ deletedSteps: 2, deletedBlobs: 1 });
    expect(await j.readBlob(a)).toBeUndefined();
    expect(await j.readBlob(d)).toEqual(dBytes);
    // retryRun dropping a failed last record drops its blob
    const [f, fBytes] = blob(`phi ${randomUUID()}`);
    const error = { name: "Error", message: "x" };
    await j.writeStep(t2, rec(two, 3, t2, { status: "failed", error }), {
      blobs: new Map([[f, fBytes]]),
      blobRefs: [f],
    });
    expect(await j.readBlob(f)).toEqual(fBytes);
    await j.updateRun(t2, two, { status: "failed", error });
    await j.retryRun(two, "ops");
    expect(await j.readBlob(f)).toBeUndefined();
    expect(await j.readBlob(d)).toEqual(dBytes);
    // resetRun dropping the last record that references d
    await j.resetRun(two, -1, "ops");
    expect(await j.readBlob(d)).toBeUndefined();
  });
}
