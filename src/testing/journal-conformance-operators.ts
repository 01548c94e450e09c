/**
 * @internal The journal conformance suite's tests of operator actions: `cancelRun` (atomic with the
 * executor's writes), `resetRun`, `retryRun`, and deleting a run with everything recorded for it.
 * Registered by `runJournalConformance` (`journal-conformance.ts`), in this order among its parts.
 *
 * @module
 */
import { InvalidOptionError } from "../core/errors.js";
import { JournalIntegrityError, RunNotFoundError, RunStateError, StaleFencingTokenError } from "../durable/errors.js";
import type { Journal } from "../durable/journal.js";

import { type JournalSuite, lease, rec } from "./journal-conformance-kit.js";

/** @internal Registers the tests of operator actions. */
export function operatorTests<J extends Journal>(suite: JournalSuite<J>): void {
  const { it, expect, newRunId } = suite;
  it("cancelRun: a waiting run ends cancelled, its executor is fenced off, the event names who and why; an ended run is left as it is", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const t = await lease(j, id, "A");
    await j.writeStep(t, rec(id, 0, t, { status: "completed", output: 1, finishedAt: Date.now() }));
    await j.updateRun(t, id, { status: "waiting", waitingFor: "approval" });
    const cancelled = await j.cancelRun(id, "alice@ops", "customer withdrew");
    expect(cancelled).toMatchObject({ runId: id, status: "cancelled", fencingToken: t + 1 });
    expect(cancelled.leaseOwner).toBeUndefined();
    expect(cancelled.leaseExpiresAt).toBeUndefined();
    expect(cancelled.waitingFor).toBeUndefined();
    expect(await j.getRun(id)).toEqual(cancelled);
    // the executor that held the lease can write nothing more
    await expect(j.writeStep(t, rec(id, 1, t))).rejects.toBeInstanceOf(StaleFencingTokenError);
    await expect(j.updateRun(t, id, { status: "completed", output: 1 })).rejects.toBeInstanceOf(StaleFencingTokenError);
    await expect(j.renewLease(id, t, 1000)).rejects.toBeInstanceOf(StaleFencingTokenError);
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0]);
    const events = await j.readEvents(id);
    expect(events.at(-1)).toMatchObject({
      type: "run_cancelled",
      by: "alice@ops",
      detail: "customer withdrew",
      fencingToken: t + 1,
    });
    expect((await j.listRuns({ status: "cancelled" })).map((r) => r.runId)).toContain(id);
    // cancelling again, or cancelling a completed run, changes nothing and records nothing
    expect(await j.cancelRun(id, "bob", "again")).toEqual(cancelled);
    const done = newRunId();
    await j.createRun({ runId: done, workflow: "wf", input: null });
    const td = await lease(j, done, "A");
    await j.updateRun(td, done, { status: "completed", output: "ok" });
    const before = await j.readEvents(done);
    expect(await j.cancelRun(done, "bob")).toMatchObject({ status: "completed", output: "ok", fencingToken: td });
    expect(await j.readEvents(done)).toEqual(before);
    expect((await j.readEvents(id)).length).toBe(events.length);
    // a pending run without any lease is cancelled too; reason is optional
    const fresh = newRunId();
    await j.createRun({ runId: fresh, workflow: "wf", input: null });
    expect(await j.cancelRun(fresh, "carol")).toMatchObject({ status: "cancelled", fencingToken: 1 });
    expect((await j.readEvents(fresh)).at(-1)?.detail).toBeUndefined();
    await expect(j.cancelRun(`${id}-x`, "bob")).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it("cancelRun is atomic with the executor's writes: each write lands before the cancel or is refused", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const t = await lease(j, id, "A");
    let written = 0;
    let cancel: Promise<unknown> | undefined;
    const writer = (async () => {
      for (let seq = 0; seq < 400; seq++) {
        // the operator's cancel is sent while the executor keeps writing
        if (seq === 3) cancel = j.cancelRun(id, "alice");
        try {
          await j.writeStep(t, rec(id, seq, t, { status: "completed", output: seq, finishedAt: Date.now() }));
          written++;
        } catch (e) {
          return e;
        }
        await new Promise((r) => setImmediate(r));
      }
      return undefined;
    })();
    expect(await writer).toBeInstanceOf(StaleFencingTokenError);
    await cancel;
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual(Array.from({ length: written }, (_, i) => i));
    const types = (await j.readEvents(id)).map((e) => e.type);
    expect(types.filter((x) => x === "step_completed")).toHaveLength(written);
    expect(types.at(-1)).toBe("run_cancelled");
  });

  it("resetRun: keeps steps 0..toSeq, the run is pending again with a new token (a completed run too), the event names who", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: { q: 1 } });
    const t = await lease(j, id, "A");
    for (let seq = 0; seq < 4; seq++) {
      await j.writeStep(t, rec(id, seq, t, { status: "completed", output: { seq }, finishedAt: Date.now() }));
    }
    await j.updateRun(t, id, { status: "completed", output: { done: true } });
    // reset of a completed run is allowed: it re-runs from step toSeq + 1 on its next resume
    const reset = await j.resetRun(id, 1, "bob@ops");
    expect(reset).toMatchObject({ runId: id, status: "pending", input: { q: 1 }, fencingToken: t + 1 });
    for (const field of ["output", "error", "waitingFor", "wakeAt", "leaseOwner", "leaseExpiresAt"] as const) {
      expect(reset[field], field).toBeUndefined();
    }
    expect(await j.getRun(id)).toEqual(reset);
    expect((await j.readSteps(id)).map((s) => [s.seq, s.status, s.output])).toEqual([
      [0, "completed", { seq: 0 }],
      [1, "completed", { seq: 1 }],
    ]);
    expect((await j.readEvents(id)).at(-1)).toMatchObject({ type: "run_reset", seq: 1, by: "bob@ops" });
    await expect(j.writeStep(t, rec(id, 2, t))).rejects.toBeInstanceOf(StaleFencingTokenError);
    await expect(j.updateRun(t, id, { status: "running" })).rejects.toBeInstanceOf(StaleFencingTokenError);
    // the next executor continues at seq 2: no gap, and the kept steps stay completed
    const t2 = await lease(j, id, "B");
    expect(t2).toBe(t + 2);
    await expect(j.writeStep(t2, rec(id, 1, t2, { attempt: 2 }))).rejects.toBeInstanceOf(JournalIntegrityError);
    await j.writeStep(t2, rec(id, 2, t2, { name: "another" }));
    // -1 drops every step
    expect(await j.resetRun(id, -1, "carol")).toMatchObject({ status: "pending", fencingToken: t2 + 1 });
    expect(await j.readSteps(id)).toEqual([]);
    // a seq beyond the journal keeps everything
    const t3 = await lease(j, id, "C");
    await j.writeStep(t3, rec(id, 0, t3));
    await j.resetRun(id, 99, "carol");
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0]);
    // bad seqs change nothing
    const before = await j.getRun(id);
    for (const bad of [-2, 0.5, Number.NaN]) {
      await expect(j.resetRun(id, bad, "x")).rejects.toBeInstanceOf(InvalidOptionError);
    }
    expect(await j.getRun(id)).toEqual(before);
    await expect(j.resetRun(`${id}-x`, 0, "x")).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it("retryRun: a failed run is pending again without its failed last step; a blocked run keeps its steps; others are refused", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const t = await lease(j, id, "A");
    await j.writeStep(t, rec(id, 0, t, { status: "completed", output: 0, finishedAt: Date.now() }));
    await j.writeStep(t, rec(id, 1, t, { name: "tool:pay", status: "started" }));
    // a running run cannot be retried
    const refused = await j.retryRun(id, "bob").catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RunStateError);
    expect(refused).toMatchObject({
      code: "RUN_STATE",
      runId: id,
      status: (await j.getRun(id))?.status,
      action: "retry",
    });
    expect((await j.getRun(id))?.fencingToken).toBe(t);
    const error = { name: "Error", message: "card declined" };
    await j.writeStep(t, rec(id, 1, t, { name: "tool:pay", status: "failed", attempt: 3, error }));
    await j.updateRun(t, id, { status: "failed", error });
    const retried = await j.retryRun(id, "bob@ops");
    expect(retried).toMatchObject({ status: "pending", fencingToken: t + 1 });
    expect(retried.error).toBeUndefined();
    expect(retried.leaseOwner).toBeUndefined();
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0]);
    expect((await j.readEvents(id)).at(-1)).toMatchObject({
      type: "run_retried",
      by: "bob@ops",
      seq: 1,
      name: "tool:pay",
      fencingToken: t + 1,
    });
    await expect(j.writeStep(t, rec(id, 1, t, { name: "tool:pay" }))).rejects.toBeInstanceOf(StaleFencingTokenError);
    // the step runs again at the same seq with a fresh attempt count
    const t2 = await lease(j, id, "B");
    await j.writeStep(t2, rec(id, 1, t2, { name: "tool:pay", attempt: 1 }));
    // blocked: the steps are kept (the last one did not fail)
    await j.writeStep(t2, rec(id, 1, t2, { name: "tool:pay", status: "completed", output: 1, finishedAt: Date.now() }));
    await j.updateRun(t2, id, { status: "blocked", error: { name: "ReplayMismatchError", message: "diverged" } });
    expect(await j.retryRun(id, "carol")).toMatchObject({ status: "pending", fencingToken: t2 + 1 });
    expect((await j.readSteps(id)).map((s) => s.seq)).toEqual([0, 1]);
    const last = (await j.readEvents(id)).at(-1);
    expect(last).toMatchObject({ type: "run_retried", by: "carol" });
    expect(last?.seq).toBeUndefined();
    // pending, completed and cancelled runs are refused
    await expect(j.retryRun(id, "carol")).rejects.toBeInstanceOf(RunStateError);
    await j.cancelRun(id, "carol");
    await expect(j.retryRun(id, "carol")).rejects.toBeInstanceOf(RunStateError);
    expect((await j.getRun(id))?.status).toBe("cancelled");
    await expect(j.retryRun(`${id}-x`, "x")).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it("deletes a run with everything recorded for it", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: 1 });
    const lease = await j.acquireLease(id, "A", 10_000);
    if (!lease.acquired) throw new Error("lease");
    await j.writeStep(lease.fencingToken, rec(id, 0, lease.fencingToken));
    await j.sendSignal(id, "x", 1);
    await j.deleteRun(id);
    expect(await j.getRun(id)).toBeUndefined();
    expect(await j.readSteps(id)).toEqual([]);
    expect(await j.listSignals(id)).toEqual([]);
    expect(await j.readEvents(id)).toEqual([]);
    // the id can be reused
    expect((await j.createRun({ runId: id, workflow: "wf", input: 2 })).created).toBe(true);
  });
}
