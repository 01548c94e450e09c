/**
 * @internal The journal conformance suite's tests of step records and listings: steps in seq order
 * (gaps, renames, rewrites and stale tokens refused), `readSteps` with a query, `listRuns` newest
 * created first in pages by `runCursor`. Registered by `runJournalConformance`
 * (`journal-conformance.ts`), in this order among its parts.
 *
 * @module
 */
import { InvalidOptionError, NonJsonValueError } from "../core/errors.js";
import { JournalIntegrityError, StaleFencingTokenError } from "../durable/errors.js";
import { type Journal, type RunRecord, runCursor } from "../durable/journal.js";

import { type JournalSuite, lease, newestCreated, rec, sleep, walk } from "./journal-conformance-kit.js";

/** @internal Registers the tests of step records and listings. */
export function stepTests<J extends Journal>(suite: JournalSuite<J>): void {
  const { it, expect, newRunId } = suite;
  it("writes steps in seq order; refuses gaps, renames, rewrites of completed steps and stale tokens", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const lease = await j.acquireLease(id, "A", 10_000);
    if (!lease.acquired) throw new Error("lease");
    const t = lease.fencingToken;
    await j.writeStep(t, rec(id, 0, t));
    await expect(j.writeStep(t, rec(id, 2, t))).rejects.toBeInstanceOf(JournalIntegrityError);
    const output = { text: "naïve \u2028 \ud83d end", n: 12345678901234, nested: [{}, [], null, false] };
    await j.writeStep(t, rec(id, 0, t, { status: "completed", output, finishedAt: Date.now() }));
    await expect(j.writeStep(t, rec(id, 0, t, { status: "started", attempt: 2 }))).rejects.toBeInstanceOf(
      JournalIntegrityError,
    );
    await j.writeStep(t, rec(id, 1, t));
    await expect(j.writeStep(t, rec(id, 1, t, { name: "renamed" }))).rejects.toBeInstanceOf(JournalIntegrityError);
    await expect(
      j.writeStep(t, rec(id, 1, t, { status: "completed", output: { d: new Date() } as never })),
    ).rejects.toBeInstanceOf(NonJsonValueError);
    // another owner takes over after expiry: the old token is fenced out
    await j.releaseLease(id, t);
    const b = await j.acquireLease(id, "B", 10_000);
    if (!b.acquired) throw new Error("lease B");
    const err = await j
      .writeStep(t, rec(id, 1, t, { status: "completed", output: "zombie", finishedAt: Date.now() }))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(StaleFencingTokenError);
    expect(err).toMatchObject({ token: t, currentToken: b.fencingToken });
    await j.writeStep(
      b.fencingToken,
      rec(id, 1, b.fencingToken, { status: "failed", attempt: 3, error: { name: "TypeError", message: "x" } }),
    );
    const steps = await j.readSteps(id);
    expect(steps.map((s) => [s.seq, s.name, s.status])).toEqual([
      [0, "s0", "completed"],
      [1, "s1", "failed"],
    ]);
    expect(steps[0]?.output).toEqual(output);
    expect(steps[1]).toMatchObject({ attempt: 3, error: { name: "TypeError", message: "x" }, fencingToken: 2 });
    await expect(j.updateRun(t, id, { status: "completed", output: 1 })).rejects.toBeInstanceOf(StaleFencingTokenError);
    const events = await j.readEvents(id);
    expect(events.map((e) => e.index)).toEqual(events.map((_, i) => i));
    expect(events.map((e) => e.type)).toEqual([
      "run_created",
      "lease_acquired",
      "step_started",
      "step_completed",
      "step_started",
      "lease_acquired",
      "step_failed",
    ]);
  });

  it("readSteps with a query: fromSeq, namePrefix (characters, not bytes), last n newest, in seq order; bad queries refused", async () => {
    const j = suite.journal();
    const id = newRunId();
    await j.createRun({ runId: id, workflow: "wf", input: null });
    const t = await lease(j, id, "A");
    const names = ["checkpoint:0:a", "effect:0:0:x", "checkpoint:1:b", "ü:1", "checkpoint:2:c", "üb:2", "check"];
    for (const [seq, name] of names.entries()) {
      await j.writeStep(t, rec(id, seq, t, { name, status: "completed", output: { seq }, finishedAt: Date.now() }));
    }
    const seqs = async (q?: Parameters<Journal["readSteps"]>[1]) => (await j.readSteps(id, q)).map((s) => s.seq);
    expect(await seqs()).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(await seqs({})).toEqual([0, 1, 2, 3, 4, 5, 6]);
    const newest = await j.readSteps(id, { namePrefix: "checkpoint:", last: 1 });
    expect(newest).toHaveLength(1);
    expect(newest[0]).toMatchObject({
      runId: id,
      seq: 4,
      name: "checkpoint:2:c",
      status: "completed",
      output: { seq: 4 },
    });
    expect(newest[0]).toEqual((await j.readSteps(id))[4]);
    expect(await seqs({ namePrefix: "checkpoint:" })).toEqual([0, 2, 4]);
    expect(await seqs({ namePrefix: "checkpoint:", last: 2 })).toEqual([2, 4]);
    expect(await seqs({ namePrefix: "checkpoint:", fromSeq: 1 })).toEqual([2, 4]);
    expect(await seqs({ namePrefix: "checkpoint:", fromSeq: 5 })).toEqual([]);
    expect(await seqs({ fromSeq: 5 })).toEqual([5, 6]);
    expect(await seqs({ last: 3 })).toEqual([4, 5, 6]);
    expect(await seqs({ last: 100 })).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(await seqs({ namePrefix: "ü" })).toEqual([3, 5]);
    expect(await seqs({ namePrefix: "üb" })).toEqual([5]);
    expect(await seqs({ namePrefix: "check" })).toEqual([0, 2, 4, 6]);
    expect(await seqs({ namePrefix: "checkpoint:0:a-longer" })).toEqual([]);
    expect(await seqs({ namePrefix: "" })).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(await j.readSteps(`${id}-none`, { namePrefix: "checkpoint:", last: 1 })).toEqual([]);
    for (const bad of [{ fromSeq: -1 }, { fromSeq: 1.5 }, { last: 0 }, { last: -1 }, { namePrefix: 3 }, { lastN: 1 }]) {
      await expect(j.readSteps(id, bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(InvalidOptionError);
    }
  });

  it("listRuns: newest created first by (createdAt, runId), of a status and a workflow, in pages by runCursor", async () => {
    const j = suite.journal();
    const base = newRunId();
    const ids: string[] = [];
    for (let i = 0; i < 7; i++) {
      const id = `${base}-${i}`; // one base: runs of one millisecond sort by their index
      ids.push(id);
      await j.createRun({ runId: id, workflow: i % 2 === 0 ? "graph" : "agent", input: i });
      if (i === 2) await sleep(3); // some runs share a millisecond, others do not
    }
    const t3 = await lease(j, ids[3] as string, "A");
    await j.updateRun(t3, ids[3] as string, { status: "completed", output: 3 });
    const stored = await Promise.all(ids.map(async (id) => (await j.getRun(id)) as RunRecord));
    const all = await j.listRuns();
    expect(all.map((r) => r.runId)).toEqual(newestCreated(stored).map((r) => r.runId));
    expect(all[0]?.runId).toBe(ids[6]); // the run updated last keeps its place
    for (let i = 1; i < all.length; i++) {
      expect((all[i - 1] as RunRecord).createdAt >= (all[i] as RunRecord).createdAt).toBe(true);
    }
    // pages of 1, 2 and 3 walk the same list
    for (const limit of [1, 2, 3]) {
      expect(await walk(j, { limit })).toEqual(all.map((r) => r.runId));
    }
    const graphs = all.filter((r) => r.workflow === "graph").map((r) => r.runId);
    expect((await j.listRuns({ workflow: "graph" })).map((r) => r.runId)).toEqual(graphs);
    const first = await j.listRuns({ workflow: "graph", limit: 2 });
    expect(first.map((r) => r.runId)).toEqual(graphs.slice(0, 2));
    expect(
      (await j.listRuns({ workflow: "graph", after: runCursor(first[1] as RunRecord) })).map((r) => r.runId),
    ).toEqual(graphs.slice(2));
    expect((await j.listRuns({ workflow: "agent", status: "completed" })).map((r) => r.runId)).toEqual([ids[3]]);
    expect(await j.listRuns({ workflow: "graph", status: "completed" })).toEqual([]);
    expect(await j.listRuns({ workflow: "none" })).toEqual([]);
    expect(await walk(j, { limit: 1, workflow: "graph", status: "pending" })).toEqual(graphs);
    // bad filters
    for (const bad of [
      { limit: 0 },
      { limit: 1.5 },
      { after: "not a cursor" },
      { after: 7 },
      { after: Buffer.from(JSON.stringify([Date.now(), ids[0]]), "utf8").toString("base64url") }, // update order: 0.4's
      { workflows: "x" },
      { status: "bogus" },
      { status: "" },
    ]) {
      await expect(j.listRuns(bad as never), JSON.stringify(bad)).rejects.toBeInstanceOf(InvalidOptionError);
    }
  });

  it("listRuns: a walk lists each run exactly once while runs are updated, cancelled, retried and created between its pages", async () => {
    const j = suite.journal();
    // the whole journal, then one workflow's runs (each walk on runs of its own)
    for (const [w, filter] of [
      ["w1", {}],
      ["w2", { workflow: "w2" }],
    ] as const) {
      const ids: string[] = [];
      for (let i = 0; i < 9; i++) {
        const id = `${newRunId()}-${i}`;
        ids.push(id);
        await j.createRun({ runId: id, workflow: w, input: i });
        if (i % 3 === 2) await sleep(3); // some runs share a millisecond, others do not
      }
      const before = (await j.listRuns(filter)).map((r) => r.runId);
      const seen: string[] = [];
      const touched = new Set<string>(); // changed once each, so every change is legal
      let after: string | undefined;
      for (let n = 0; n < 40; n++) {
        const page = await j.listRuns({ ...filter, limit: 2, ...(after !== undefined ? { after } : {}) });
        if (page.length === 0) break;
        seen.push(...page.map((r) => r.runId));
        after = runCursor(page.at(-1) as RunRecord);
        await sleep(2); // the updates below get a later time than anything listed so far
        // a run not listed yet is leased and completed (it was the oldest: its update makes it the newest
        // changed), a listed one is cancelled, another not listed is retried, and a new run is created
        const unlisted = ids.filter((id) => !seen.includes(id) && !touched.has(id));
        const oldest = unlisted.at(-1);
        if (oldest !== undefined) {
          touched.add(oldest);
          const t = await lease(j, oldest, `w${n}`);
          await j.updateRun(
            t,
            oldest,
            n % 2 === 0 ? { status: "completed", output: n } : { status: "failed", error: { name: "E", message: "y" } },
          );
        }
        const listed = seen.filter((id) => ids.includes(id)).at(-1);
        if (listed !== undefined) await j.cancelRun(listed, "op", "walk").catch(() => undefined);
        const failed = unlisted.find((id) => id !== oldest);
        if (failed !== undefined) {
          touched.add(failed);
          const t = await lease(j, failed, `x${n}`);
          await j.updateRun(t, failed, { status: "failed", error: { name: "E", message: "x" } });
          await j.retryRun(failed, "op");
        }
        await j.createRun({ runId: `${newRunId()}-new-${n}`, workflow: w, input: n });
      }
      for (const id of ids) {
        expect(
          seen.filter((x) => x === id),
          `${id} in ${JSON.stringify(filter)}`,
        ).toHaveLength(1);
      }
      expect(new Set(seen).size, "no run twice").toBe(seen.length);
      // the runs of before the walk in their order, whatever was created meanwhile
      expect(seen.filter((id) => before.includes(id))).toEqual(before.filter((id) => seen.includes(id)));
    }
  });
}
