/**
 * The library's `approve`/`reject` refuse a tool call the run does not wait on, as `dumplings approve|reject`
 * does (one shared check): a mistyped id, a run that waits for another signal or is finished is an
 * `ApprovalNotPendingError` naming the call it waits on, and nothing is recorded. `signal` of an approval
 * still records a decision ahead of time on purpose.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { step, waitForSignal } from "../../src/durable/context.js";
import { ApprovalConflictError, ApprovalNotPendingError, RunNotFoundError } from "../../src/durable/errors.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approvalSignalName, approve, reject, signal } from "../../src/durable/signals.js";

let dir: string;
let journal: SqliteJournal;

const waitsOnRefund = async () => {
  await step("llm", () => ({
    role: "assistant",
    content: [{ type: "tool-call", toolCallId: "call_r1", toolName: "refund", input: { id: 8 } }],
  }));
  const decision = await waitForSignal<{ approved: boolean }>("approval:call_r1");
  return decision.approved ? "refunded" : "refused";
};

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-approve-"));
  journal = new SqliteJournal({ path: path.join(dir, "j.db") });
  await runDurable("waits", waitsOnRefund, { journal, input: null });
  await runDurable("signal", async () => waitForSignal("go"), { journal, input: null });
  await runDurable("done", async () => "done", { journal, input: null });
});
afterAll(async () => {
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("approve/reject of a call the run does not wait on", () => {
  it("approve of another call id is refused, names the pending call, records nothing", async () => {
    const error = await approve("waits", "call_nope", { journal }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApprovalNotPendingError);
    expect(error).toMatchObject({
      code: "APPROVAL_NOT_PENDING",
      runId: "waits",
      toolCallId: "call_nope",
      status: "waiting",
      waitingOn: ["call_r1"],
    });
    expect((error as Error).message).toMatch(
      /run "waits" does not wait on tool call "call_nope"; it waits on: call_r1 \(refund \{"id":8\}\); nothing was recorded/,
    );
    expect(await journal.getSignal("waits", "approval:call_nope")).toBeUndefined();
    const rejected = await reject("waits", "call_nope", { journal }).catch((e: unknown) => e);
    expect(rejected).toBeInstanceOf(ApprovalNotPendingError);
    expect(await journal.listSignals("waits")).toEqual([]);
  });

  it("a run waiting for another signal, or a finished run, is refused too", async () => {
    const other = await approve("signal", "call_1", { journal }).catch((e: unknown) => e);
    expect(other).toBeInstanceOf(ApprovalNotPendingError);
    expect((other as Error).message).toContain('it waits on no approval (waiting, waiting for "go")');
    const done = await reject("done", "call_1", { journal }).catch((e: unknown) => e);
    expect(done).toBeInstanceOf(ApprovalNotPendingError);
    expect((done as Error).message).toContain('run "done" is completed');
    expect(await journal.listSignals("signal")).toEqual([]);
    expect(await journal.listSignals("done")).toEqual([]);
    await expect(approve("no-such-run", "x", { journal })).rejects.toBeInstanceOf(RunNotFoundError);
  });

  it("the call it waits on is approved, and signal records a decision ahead of time on purpose", async () => {
    await expect(approve("waits", "call_r1", { journal })).resolves.toMatchObject({ wakes: true });
    const ahead = await signal("signal", approvalSignalName("call_later"), { approved: true }, { journal });
    expect(ahead.wakes).toBe(false);
    expect(await journal.getSignal("signal", "approval:call_later")).toBeDefined();
    expect(await runDurable("waits", waitsOnRefund, { journal })).toMatchObject({ output: "refunded" });
    // a reviewer who comes after the run moved on (here: finished) learns what was decided, and when, instead of
    // being told to record a decision ahead of time (a new user's trial)
    const late = reject("waits", "call_r1", { journal, reason: "no" });
    await expect(late).rejects.toBeInstanceOf(ApprovalConflictError);
    await expect(late).rejects.toMatchObject({ code: "SIGNAL_CONFLICT", decision: { approved: true } });
    await expect(late).rejects.toThrow(
      /tool call "call_r1" of run "waits" was already approved at .*nothing was recorded/,
    );
  });
});
