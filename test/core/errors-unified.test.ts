/**
 * One error class per concept for both engines (issue 22, part 1): the workflow runner's old names are
 * the durable classes themselves, so `instanceof` holds both ways, on errors really thrown by each engine
 * (a real SQLite journal and a real SQLite cold store), with one stable code per concept.
 */
import path from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import * as core from "../../src/core/errors.js";
import * as durable from "../../src/durable/index.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import * as workflow from "../../src/workflow/index.js";
import {
  CheckpointStore,
  END,
  IdempotencyGuard,
  ResumableGraphRunner,
  SqliteColdStore,
} from "../../src/workflow/index.js";
import { tempDir } from "../workflow/helpers.js";

describe("one class per concept", () => {
  it("the deprecated workflow names are the durable classes, exported from both entries and core", () => {
    expect(workflow.WorkflowLeaseHeldError).toBe(durable.LeaseHeldError);
    expect(workflow.WorkflowLeaseLostError).toBe(durable.StaleFencingTokenError);
    expect(workflow.NondeterminismError).toBe(durable.ReplayMismatchError);
    expect(workflow.LeaseHeldError).toBe(core.LeaseHeldError);
    expect(workflow.StaleFencingTokenError).toBe(core.StaleFencingTokenError);
    expect(workflow.ReplayMismatchError).toBe(core.ReplayMismatchError);
    expect(durable.LeaseHeldError).toBe(core.LeaseHeldError);
    // Answering what is not waited for stays two classes: a lost race (a ConflictError) and a wrong target.
    expect(new workflow.WorkflowNotWaitingError("w", 1, "finished")).toBeInstanceOf(core.ConflictError);
    expect(workflow.WorkflowNotWaitingError).not.toBe(durable.ApprovalNotPendingError as unknown);
  });

  it("the durable positional constructors of 0.1 still work (custom journals throw them)", () => {
    const held = new durable.LeaseHeldError("r1", "w-1", 0);
    expect(held).toMatchObject({ name: "LeaseHeldError", runId: "r1", workflowId: "r1", owner: "w-1", expiresAt: 0 });
    expect(held.message).toBe('[dumplings:durable] run "r1" is held by "w-1" until 1970-01-01T00:00:00.000Z');
    const stale = new durable.StaleFencingTokenError("r1", 3, 4);
    expect(stale).toMatchObject({ token: 3, fencingToken: 3, currentToken: 4, code: "STALE_FENCING_TOKEN" });
    expect(stale.message).toBe(
      '[dumplings:durable] write to run "r1" refused: fencing token 3 is stale (current token is 4); another worker holds the run',
    );
    const drift = new durable.ReplayMismatchError(
      "r1",
      2,
      { name: "a", inputHash: "x" },
      { name: "b", inputHash: "x" },
    );
    expect(drift).toMatchObject({ seq: 2, key: undefined, code: "REPLAY_MISMATCH" });
  });
});

describe("errors thrown by each engine are instances of both names", () => {
  let tmp: ReturnType<typeof tempDir>;
  let cold: SqliteColdStore;
  let store: CheckpointStore;
  let journal: SqliteJournal;
  beforeEach(async () => {
    tmp = tempDir("errors-unified");
    cold = new SqliteColdStore({ path: path.join(tmp.dir, "wf.db") });
    store = await CheckpointStore.open({
      cold,
      blobDir: path.join(tmp.dir, "blobs"),
    });
    journal = new SqliteJournal({ path: path.join(tmp.dir, "j.db") });
  });
  afterEach(async () => {
    await store.close();
    await journal.close();
    tmp.cleanup();
  });

  it("the workflow runner: a held lease, a stale token and a renamed side effect", async () => {
    const taken = await cold.acquireLease("w1", "other-worker", 30_000);
    if (!taken.acquired) throw new Error("not acquired");
    const runner = new ResumableGraphRunner({
      store,
      owner: "me",
      nodes: { a: async () => ({ next: END, updates: {} }) },
      entry: "a",
      leaseWaitMs: 0,
    });
    const held = await runner.runOrResume("w1").catch((e: unknown) => e);
    expect(held).toBeInstanceOf(durable.LeaseHeldError);
    expect(held).toBeInstanceOf(workflow.WorkflowLeaseHeldError);
    expect(held).toMatchObject({
      name: "WorkflowLeaseHeldError", // the old name, kept until 0.3 (logs, stored error records)
      code: "LEASE_HELD",
      runId: "w1",
      workflowId: "w1",
      owner: "other-worker",
      fencingToken: taken.fencingToken,
    });
    expect((held as Error).message).toContain('is held by "other-worker"');

    const lost = await cold.renewLease("w1", taken.fencingToken + 5, 30_000).catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(durable.StaleFencingTokenError);
    expect(lost).toBeInstanceOf(workflow.WorkflowLeaseLostError);
    expect(lost).toMatchObject({
      code: "STALE_FENCING_TOKEN",
      workflowId: "w1",
      runId: "w1",
      fencingToken: taken.fencingToken + 5,
      token: taken.fencingToken + 5,
      currentToken: taken.fencingToken,
      owner: "other-worker",
    });

    const guard = new IdempotencyGuard({ store });
    await guard.run("w1:0:0", () => 1, { name: "charge", workflowId: "w1" });
    const renamed = await guard.run("w1:0:0", () => 2, { name: "refund", workflowId: "w1" }).catch((e: unknown) => e);
    expect(renamed).toBeInstanceOf(durable.ReplayMismatchError);
    expect(renamed).toBeInstanceOf(workflow.NondeterminismError);
    expect(renamed).toMatchObject({
      name: "NondeterminismError",
      code: "REPLAY_MISMATCH",
      key: "w1:0:0",
      workflowId: "w1",
      recorded: { name: "charge" },
      requested: { name: "refund" },
    });
  });

  it("durable runs: a held lease and a stale token", async () => {
    const wf = async () => durable.waitForSignal("go");
    expect(await durable.runDurable("r1", wf, { journal, input: null })).toMatchObject({ status: "waiting" });
    const taken = await journal.acquireLease("r1", "other-worker", 30_000);
    if (!taken.acquired) throw new Error("not acquired");
    const held = await durable.runDurable("r1", wf, { journal, leaseWaitMs: 0 }).catch((e: unknown) => e);
    expect(held).toBeInstanceOf(workflow.WorkflowLeaseHeldError);
    expect(held).toBeInstanceOf(durable.LeaseHeldError);
    expect(held).toMatchObject({ name: "LeaseHeldError", code: "LEASE_HELD", runId: "r1", owner: "other-worker" });

    const stale = await journal.updateRun(taken.fencingToken - 1, "r1", { status: "running" }).catch((e: unknown) => e);
    expect(stale).toBeInstanceOf(workflow.WorkflowLeaseLostError);
    expect(stale).toBeInstanceOf(durable.StaleFencingTokenError);
    expect(stale).toMatchObject({
      name: "StaleFencingTokenError",
      code: "STALE_FENCING_TOKEN",
      runId: "r1",
      token: taken.fencingToken - 1,
      fencingToken: taken.fencingToken - 1,
      currentToken: taken.fencingToken,
    });
  });
});
