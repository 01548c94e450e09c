/**
 * @internal The journal conformance suite's tests of signals, the store's clock and the audit log: one
 * signal per name, ended runs refusing signals, racing senders, `now()` and time stamped by the store,
 * `updateRun` blocked, `appendEvent`. Registered by `runJournalConformance`
 * (`journal-conformance.ts`), in this order among its parts.
 *
 * @module
 */
import { RunNotFoundError, RunStateError, SignalConflictError } from "../durable/errors.js";
import type { Journal } from "../durable/journal.js";

import { type JournalSuite, lease, sleep, withShiftedClock } from "./journal-conformance-kit.js";

/** @internal Registers the tests of signals, the store's clock and the audit log. */
export function signalTests<J extends Journal>(suite: JournalSuite<J>): void {
  const { it, expect, newRunId } = suite;
  it("signals: one per name (the second is refused); a wait is not suspended when its signal already arrived", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const lease = await j.acquireLease(id, "A", 10_000);
    if (!lease.acquired) throw new Error("lease");
    const t = lease.fencingToken;
    expect(await j.updateRun(t, id, { status: "waiting", waitingFor: "go" })).toEqual({ ok: true });
    const run = await j.sendSignal(id, "go", { approved: true, reason: "ok" });
    expect(run).toMatchObject({ status: "waiting", waitingFor: "go" });
    await expect(j.sendSignal(id, "go", { approved: false })).rejects.toBeInstanceOf(SignalConflictError);
    expect((await j.getSignal(id, "go"))?.value).toEqual({ approved: true, reason: "ok" });
    await j.sendSignal(id, "early", [1, "two"]);
    expect(await j.updateRun(t, id, { status: "running" })).toEqual({ ok: true });
    const res = await j.updateRun(t, id, { status: "waiting", waitingFor: "early" });
    expect(res.ok).toBe(false);
    if (!res.ok) expect(res.signal.value).toEqual([1, "two"]);
    expect((await j.getRun(id))?.status).toBe("running");
    expect((await j.listSignals(id)).map((s) => s.name).sort()).toEqual(["early", "go"]);
    await expect(j.sendSignal(`${id}-x`, "go", 1)).rejects.toBeInstanceOf(RunNotFoundError);
    const waitingTimer = await j.updateRun(t, id, { status: "waiting", wakeAt: 1234 });
    expect(waitingTimer.ok).toBe(true);
    expect(await j.getRun(id)).toMatchObject({ status: "waiting", wakeAt: 1234 });
    await j.updateRun(t, id, { status: "completed", output: { done: true } });
    expect(await j.getRun(id)).toMatchObject({ status: "completed", output: { done: true } });
    expect((await j.getRun(id))?.waitingFor).toBeUndefined();
  });

  it("a run that ended (completed, failed, cancelled) refuses a new signal; a reset run takes signals again", async () => {
    const j = suite.journal();
    for (const end of ["completed", "failed", "cancelled"] as const) {
      const id = newRunId();
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const lease = await j.acquireLease(id, "A", 10_000);
      if (!lease.acquired) throw new Error("lease");
      await j.updateRun(lease.fencingToken, id, { status: "waiting", waitingFor: "approval:c1" });
      await j.sendSignal(id, "early", 1);
      if (end === "cancelled") await j.cancelRun(id, "ops", "no longer needed");
      else {
        await j.updateRun(lease.fencingToken, id, { status: "running" });
        await j.updateRun(
          lease.fencingToken,
          id,
          end === "completed" ? { status: end, output: 1 } : { status: end, error: { name: "Error", message: "x" } },
        );
      }
      const refused = await j.sendSignal(id, "approval:c1", { approved: true }).catch((e: unknown) => e);
      expect(refused, end).toBeInstanceOf(RunStateError);
      expect(refused).toMatchObject({ code: "RUN_STATE", runId: id, status: end, action: "signal" });
      // a signal sent before the end is still a conflict, not a status error
      await expect(j.sendSignal(id, "early", 2)).rejects.toBeInstanceOf(SignalConflictError);
      expect((await j.listSignals(id)).map((x) => x.name)).toEqual(["early"]);
      expect((await j.readEvents(id)).filter((e) => e.type === "signal_received")).toHaveLength(1);
      await j.resetRun(id, -1, "ops");
      expect(await j.sendSignal(id, "approval:c1", { approved: true })).toMatchObject({ status: "pending" });
    }
  });

  it("exactly one of two racing signals for one name is taken", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const results = await Promise.allSettled([
      j.sendSignal(id, "approval:c1", { approved: true }),
      j.sendSignal(id, "approval:c1", { approved: false }),
      j.sendSignal(id, "approval:c1", { approved: false }),
    ]);
    expect(results.filter((r) => r.status === "fulfilled")).toHaveLength(1);
    for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(SignalConflictError);
  });

  it("now() is the store's clock: monotone and close to this machine's clock", async () => {
    const j = suite.journal();
    const tolerance = suite.clockToleranceMs ?? 2000;
    const readings: number[] = [];
    for (let i = 0; i < 20; i++) readings.push(await j.now());
    for (const t of readings) expect(Number.isInteger(t)).toBe(true);
    for (let i = 1; i < readings.length; i++) expect(readings[i]!).not.toBeLessThan(readings[i - 1]!);
    const before = Date.now();
    const t = await j.now();
    const after = Date.now();
    expect(t).toBeGreaterThan(before - tolerance);
    expect(t).toBeLessThan(after + tolerance);
    await sleep(30);
    expect((await j.now()) - t).toBeGreaterThan(20);
  });

  it("time comes from the store: a worker whose clock is 2 minutes ahead cannot take a live lease, and stamps nothing with its clock", async () => {
    const j = suite.journal();
    const id = newRunId();
    const t0 = await j.now();
    const token = await withShiftedClock(120_000, async () => {
      await j.createRun({ runId: id, workflow: "wf", input: null });
      const a = await lease(j, id, "A", 60_000);
      // B's clock is 2 minutes ahead: by its clock A's lease expired a minute ago; by the store's it is live
      const b = await j.acquireLease(id, "B", 60_000);
      expect(b).toMatchObject({ acquired: false, owner: "A" });
      await j.sendSignal(id, "go", 1);
      await j.appendEvent(id, { type: "step_drift", seq: 0, name: "s0", detail: "input changed" });
      return a;
    });
    const t1 = await j.now();
    const within = (t: number | undefined, lo: number, hi: number, what: string) => {
      expect(t, what).not.toBeUndefined();
      expect(t!, what).not.toBeLessThan(lo);
      expect(t!, what).toBeLessThanOrEqual(hi);
    };
    const run = await j.getRun(id);
    within(run?.createdAt, t0, t1, "createdAt");
    within(run?.updatedAt, t0, t1, "updatedAt");
    within(run?.leaseExpiresAt, t0 + 60_000, t1 + 60_000, "leaseExpiresAt");
    within((await j.getSignal(id, "go"))?.sentAt, t0, t1, "sentAt");
    const events = await j.readEvents(id);
    expect(events.map((e) => e.type)).toEqual(["run_created", "lease_acquired", "signal_received", "step_drift"]);
    for (const e of events) within(e.at, t0, t1, `event ${e.type}`);
    // a clock 2 minutes behind neither shortens a renewed lease nor lets the holder keep an expired one longer
    const renewedAt = await j.now();
    const expiresAt = await withShiftedClock(-120_000, () => j.renewLease(id, token, 60_000));
    within(expiresAt, renewedAt + 60_000, (await j.now()) + 60_000, "renewed expiresAt");
    // and a short lease expires by the store's clock even for a caller whose clock is behind
    const short = newRunId();
    await j.createRun({ runId: short, workflow: "wf", input: null });
    await lease(j, short, "A", 100);
    await sleep(150);
    const taken = await withShiftedClock(-120_000, () => j.acquireLease(short, "B", 1000));
    expect(taken).toMatchObject({ acquired: true, fencingToken: 2 });
  });

  it("updateRun blocked: the run keeps its reason in error, records run_blocked with the reason as detail", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const t = await lease(j, id, "A");
    const reason = {
      name: "ReplayMismatchError",
      message: 'step #1 is "tool:x" in the journal',
      code: "REPLAY_MISMATCH",
    };
    expect(await j.updateRun(t, id, { status: "blocked", error: reason })).toEqual({ ok: true });
    expect(await j.getRun(id)).toMatchObject({ status: "blocked", error: reason });
    expect((await j.listRuns({ status: "blocked" })).map((r) => r.runId)).toContain(id);
    expect((await j.listRuns({ status: "running" })).map((r) => r.runId)).not.toContain(id);
    const last = (await j.readEvents(id)).at(-1);
    expect(last).toMatchObject({ type: "run_blocked", detail: reason.message, fencingToken: t });
  });

  it("appendEvent: numbered after the others, stamped by the store, every field kept; a missing run is refused", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const detail = 'input of "llm" changed: système prompt \u2028 ✓';
    await j.appendEvent(id, { type: "step_drift", seq: 3, name: "llm", attempt: 2, detail });
    await j.appendEvent(id, { type: "run_reset", seq: -1, by: "ops@host" });
    const events = await j.readEvents(id);
    expect(events.map((e) => e.index)).toEqual([0, 1, 2]);
    expect(events[1]).toMatchObject({ runId: id, type: "step_drift", seq: 3, name: "llm", attempt: 2, detail });
    expect(events[1]?.by).toBeUndefined();
    expect(events[2]).toMatchObject({ type: "run_reset", seq: -1, by: "ops@host" });
    expect(events[2]?.detail).toBeUndefined();
    await expect(j.appendEvent(`${id}-x`, { type: "step_drift" })).rejects.toBeInstanceOf(RunNotFoundError);
  });
}
