/**
 * @internal The journal conformance suite's tests of creating runs and leases: a run created once,
 * non-JSON input refused, leases and fencing tokens (takeover after expiry, one winner among
 * concurrent takers, `reentrant: false`). Registered by `runJournalConformance`
 * (`journal-conformance.ts`), in this order among its parts.
 *
 * @module
 */
import { InvalidOptionError, NonJsonValueError } from "../core/errors.js";
import { RunNotFoundError, StaleFencingTokenError } from "../durable/errors.js";
import type { Journal } from "../durable/journal.js";

import { type JournalSuite, sleep } from "./journal-conformance-kit.js";

/** @internal Registers the tests of creating runs and leases. */
export function runTests<J extends Journal>(suite: JournalSuite<J>): void {
  const { it, expect, newRunId } = suite;
  it("creates a run once; a second create returns the stored run", async () => {
    const j = suite.journal();
    const id = newRunId();
    const a = await j.createRun({ runId: id, workflow: "wf", input: { q: "héllo \ud83d", n: [1, 2.5] } });
    expect(a.created).toBe(true);
    expect(a.run).toMatchObject({ runId: id, workflow: "wf", status: "pending", fencingToken: 0 });
    const b = await j.createRun({ runId: id, workflow: "other", input: null });
    expect(b.created).toBe(false);
    expect(b.run.workflow).toBe("wf");
    expect(b.run.input).toEqual({ q: "héllo \ud83d", n: [1, 2.5] });
    expect(await j.getRun(`${id}-missing`)).toBeUndefined();
    const runs = await j.listRuns({ status: "pending" });
    expect(runs.map((r) => r.runId)).toContain(id);
    expect((await j.listRuns({ status: "completed" })).map((r) => r.runId)).not.toContain(id);
  });

  it("refuses a non-JSON run input and stores nothing", async () => {
    const j = suite.journal();
    const id = newRunId();
    await expect(j.createRun({ runId: id, workflow: "wf", input: { a: 1n } as never })).rejects.toBeInstanceOf(
      NonJsonValueError,
    );
    expect(await j.getRun(id)).toBeUndefined();
  });

  it("leases: taking one increments the fencing token; a live lease of another owner is refused; an expired one is taken over", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const a = await j.acquireLease(id, "A", 150);
    expect(a).toMatchObject({ acquired: true, fencingToken: 1 });
    const b = await j.acquireLease(id, "B", 150);
    expect(b).toMatchObject({ acquired: false, owner: "A" });
    const again = await j.acquireLease(id, "A", 150);
    expect(again).toMatchObject({ acquired: true, fencingToken: 2 });
    await sleep(200);
    const c = await j.acquireLease(id, "B", 5000);
    expect(c).toMatchObject({ acquired: true, fencingToken: 3 });
    await expect(j.renewLease(id, 2, 1000)).rejects.toBeInstanceOf(StaleFencingTokenError);
    expect(await j.renewLease(id, 3, 1000)).toBeGreaterThan(Date.now());
    await j.releaseLease(id, 2); // stale: no effect
    expect((await j.getRun(id))?.leaseOwner).toBe("B");
    await j.releaseLease(id, 3);
    expect((await j.getRun(id))?.leaseOwner).toBeUndefined();
    const d = await j.acquireLease(id, "C", 1000);
    expect(d).toMatchObject({ acquired: true, fencingToken: 4 });
    await expect(j.acquireLease(`${id}-x`, "A", 10)).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it("exactly one of many concurrent lease takers wins", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const results = await Promise.all(Array.from({ length: 12 }, (_, i) => j.acquireLease(id, `owner-${i}`, 10_000)));
    expect(results.filter((r) => r.acquired)).toHaveLength(1);
    expect((await j.getRun(id))?.fencingToken).toBe(1);
  });

  it("reentrant: false: a live lease is refused to its own owner too (one execution per lease); expired or released, it is taken", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const once = { reentrant: false };
    expect(await j.acquireLease(id, "web-1", 150, once)).toMatchObject({ acquired: true, fencingToken: 1 });
    // a second execution under the same owner id (another slot of one worker) must not take it back
    expect(await j.acquireLease(id, "web-1", 150, once)).toMatchObject({ acquired: false, owner: "web-1" });
    expect(await j.getRun(id)).toMatchObject({ fencingToken: 1, leaseOwner: "web-1" });
    expect(await j.renewLease(id, 1, 150)).toBeGreaterThan(0); // the holder's token still holds it
    await sleep(200);
    expect(await j.acquireLease(id, "web-1", 10_000, once)).toMatchObject({ acquired: true, fencingToken: 2 });
    await j.releaseLease(id, 2);
    expect(await j.acquireLease(id, "web-1", 10_000, once)).toMatchObject({ acquired: true, fencingToken: 3 });
    expect(await j.acquireLease(id, "web-2", 10_000, once)).toMatchObject({ acquired: false, owner: "web-1" });
    // many executions of one worker racing for a free lease: exactly one wins
    const raced = newRunId();
    await j.createRun({ runId: raced, workflow: "wf", input: null });
    const results = await Promise.all(Array.from({ length: 8 }, () => j.acquireLease(raced, "web-1", 10_000, once)));
    expect(results.filter((r) => r.acquired)).toHaveLength(1);
    expect((await j.getRun(raced))?.fencingToken).toBe(1);
    for (const bad of [{ reentrant: "no" }, { reentrnt: false }, 5]) {
      await expect(j.acquireLease(raced, "web-1", 1000, bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(
        InvalidOptionError,
      );
    }
    expect((await j.getRun(raced))?.fencingToken).toBe(1);
  });
}
