/**
 * Operator commands against a real SQLite journal, run as real processes:
 * `dumplings cancel`, `reset --to-step`, `retry`, each journaled with who did
 * it and shown by `dumplings runs RUN`; `--status` refuses an unknown status.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { step, waitForSignal } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { runCli } from "../fixtures/durable/cli-run.js";

let dir: string;
let db: string;
let journal: SqliteJournal;
const cli = (...args: string[]) => runCli(db, ...args);

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-operator-"));
  db = path.join(dir, "j.db");
  journal = new SqliteJournal({ path: db });
});
afterAll(async () => {
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("operator commands", () => {
  it("cancel releases a waiting run for good, with who and why; a late approval is refused", async () => {
    await runDurable(
      "wait-1",
      async () => {
        await step("prepare", () => 1);
        return waitForSignal("approval:call_9");
      },
      { journal, input: null, workflow: "w" },
    );
    const out = await cli("cancel", "wait-1", "--reason", "customer left", "--by", "ops@test");
    expect(out.code, out.stderr).toBe(0);
    expect(out.stdout).toContain("wait-1 is cancelled (cancel by ops@test)");
    expect((await journal.getRun("wait-1"))?.status).toBe("cancelled");
    const shown = await cli("runs", "wait-1");
    expect(shown.stdout).toMatch(/cancelled by ops@test at .*: customer left/);
    const late = await cli("approve", "wait-1", "call_9");
    expect(late.code).toBe(2);
    expect(late.stderr).toContain("is cancelled");
  });

  it("reset --to-step keeps steps 0..N and the next resume runs the rest again", async () => {
    let calls = 0;
    const wf = async () => {
      const a = await step("a", () => 1);
      const b = await step("b", () => {
        calls++;
        return 2;
      });
      return a + b;
    };
    expect(await runDurable("reset-1", wf, { journal, input: null, workflow: "w" })).toMatchObject({
      status: "completed",
    });
    const out = await cli("reset", "reset-1", "--to-step", "0", "--by", "ops@test");
    expect(out.code, out.stderr).toBe(0);
    expect((await journal.readSteps("reset-1")).map((s) => s.name)).toEqual(["a"]);
    expect((await journal.getRun("reset-1"))?.status).toBe("pending");
    expect(await runDurable("reset-1", wf, { journal })).toMatchObject({ status: "completed", output: 3 });
    expect(calls).toBe(2);
    expect((await cli("runs", "reset-1")).stdout).toMatch(/reset to step 0 by ops@test/);
    const bad = await cli("reset", "reset-1", "--to-step", "x");
    expect(bad.code).toBe(2);
    // A step beyond the journal would keep everything: refused, nothing recorded.
    const beyond = await cli("reset", "reset-1", "--to-step", "9");
    expect(beyond.code).toBe(2);
    expect(beyond.stderr).toContain("would keep them all");
    expect((await journal.readEvents("reset-1")).filter((e) => e.type === "run_reset")).toHaveLength(1);
    // Cancelling an ended run is refused, not reported as done.
    const ended = await cli("cancel", "reset-1");
    expect(ended.code).toBe(2);
    expect(ended.stderr).toContain("nothing to cancel");
  });

  it("retry runs a failed step again with a fresh budget", async () => {
    let fail = true;
    const wf = async () =>
      step("flaky", () => {
        if (fail) throw new Error("upstream down");
        return "ok";
      });
    expect(await runDurable("retry-1", wf, { journal, input: null, workflow: "w" })).toMatchObject({
      status: "failed",
    });
    // the list says why it failed and what to do
    expect((await cli("runs")).stdout).toMatch(/retry-1 .*failed .*upstream down.*dumplings retry retry-1/);
    const out = await cli("retry", "retry-1", "--by", "ops@test");
    expect(out.code, out.stderr).toBe(0);
    expect((await journal.getRun("retry-1"))?.status).toBe("pending");
    fail = false;
    expect(await runDurable("retry-1", wf, { journal })).toMatchObject({ status: "completed", output: "ok" });
    expect((await cli("runs", "retry-1")).stdout).toMatch(/retried by ops@test/);
    // A completed run cannot be retried: a typed error, nothing changed.
    const again = await cli("retry", "retry-1");
    expect(again.code, "a usage error (RUN_STATE), not a journal fault").toBe(2);
    expect(again.stderr).toMatch(/is completed: only a failed or blocked run can be retried/);
    expect((await journal.getRun("retry-1"))?.status).toBe("completed");
  });

  it("--status refuses a status that does not exist", async () => {
    const out = await cli("runs", "--status", "bogus");
    expect(out.code).toBe(2);
    expect(out.stderr).toContain("is not a run status");
  });
});
