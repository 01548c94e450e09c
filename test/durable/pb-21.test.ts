/**
 * Case PB-21 (vercel/workflow#2780): a payload on an unrelated hook woke a run
 * while a slow step was in flight, and the replay re-dispatched the step; both
 * attempts ran (duplicate emails) while the log showed one completion.
 *
 * Here, with real processes: the hook payload is only recorded (the run is not
 * waiting for it, so nothing is woken); even a second executor started on
 * purpose does not dispatch the step while the first one's lease is live; the
 * payload is consumed once when the workflow reaches it. Re-dispatch happens
 * only after the lease expires (a crash), with a visibly incremented attempt.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { signal } from "../../src/durable/signals.js";
import { type ChildResult, fixture, startChild } from "../fixtures/durable/spawn.js";

let dir: string;
let db: string;
let journal: SqliteJournal;
beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-pb21-"));
  db = path.join(dir, "journal.db");
  journal = new SqliteJournal({ path: db });
});
afterAll(async () => {
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

const emails = (runId: string) => {
  const f = path.join(dir, `${runId}.effects`);
  return existsSync(f)
    ? readFileSync(f, "utf8")
        .split("\n")
        .filter((l) => l === "email sent").length
    : 0;
};
const start = (runId: string) =>
  startChild(fixture("pb21-child.ts"), {
    DB: db,
    RUN_ID: runId,
    EFFECTS: path.join(dir, `${runId}.effects`),
    SEND_MS: "1500",
    LEASE_TTL_MS: "600",
  });
async function untilStarted(runId: string): Promise<void> {
  for (let i = 0; i < 800; i++) {
    const steps = await journal.readSteps(runId).catch(() => []);
    if (steps[0]?.name === "send_email" && steps[0].status === "started" && emails(runId) === 1) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error("send_email never started");
}

describe("PB-21: an unrelated hook must not re-dispatch an in-flight step", () => {
  it("the hook is recorded without waking the run; a second executor does not run the live step; one email", async () => {
    const runId = "run-21";
    const a = start(runId);
    await untilStarted(runId);
    let woken = 0;
    const sent = await signal(
      runId,
      "approval-hook",
      { note: "unrelated" },
      { journal, wake: async () => void woken++ },
    );
    expect(sent.wakes).toBe(false);
    expect(woken).toBe(0);
    expect(sent.run.status).toBe("running");
    // the faulty library re-dispatched here: start a second executor anyway
    const b = start(runId);
    const [ra, rb] = (await Promise.all([a.done, b.done])) as [ChildResult, ChildResult];
    const expected = { runId, status: "completed", output: { hook: { note: "unrelated" } } };
    expect(ra.json, ra.stderr).toEqual(expected);
    expect(rb.json, rb.stderr).toEqual(expected);

    expect(emails(runId)).toBe(1);
    const events = await journal.readEvents(runId);
    const send = events.filter((e) => e.name === "send_email");
    expect(send.map((e) => e.type)).toEqual(["step_started", "step_completed"]);
    expect((await journal.listSignals(runId)).map((s) => [s.name, s.value])).toEqual([
      ["approval-hook", { note: "unrelated" }],
    ]);
    const hookSteps = (await journal.readSteps(runId)).filter((s) => s.name === "signal:approval-hook");
    expect(hookSteps).toHaveLength(1);
    expect(hookSteps[0]).toMatchObject({ status: "completed", output: { note: "unrelated" } });
  });

  it("after a crash the step is re-dispatched only once the lease expired, as attempt 2", async () => {
    const runId = "run-21-crash";
    const a = start(runId);
    await untilStarted(runId);
    await signal(runId, "approval-hook", { note: "unrelated" }, { journal });
    a.child.kill("SIGKILL");
    expect((await a.done).signal).toBe("SIGKILL");
    const b = await start(runId).done;
    expect(b.json, b.stderr).toMatchObject({ status: "completed", output: { hook: { note: "unrelated" } } });
    expect(emails(runId)).toBe(2); // the body is at-least-once: pair it with an idempotency key for external effects
    const [rec] = await journal.readSteps(runId);
    expect(rec).toMatchObject({ name: "send_email", status: "completed", attempt: 2, fencingToken: 2 });
    const send = (await journal.readEvents(runId)).filter((e) => e.name === "send_email");
    expect(send.map((e) => [e.type, e.attempt])).toEqual([
      ["step_started", 1],
      ["step_started", 2],
      ["step_completed", 2],
    ]);
  });
});
