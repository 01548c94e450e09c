/**
 * `dumplings runs` / `approve` / `reject` against a real SQLite journal, run as
 * real processes: a waiting approval is listed with the command that releases
 * it, approving it records the signal, a second decision fails with a typed error.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { describeWait, renderJournal, renderRuns } from "../../src/cli/durable-commands.js";
import { step, waitForSignal } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { runCli } from "../fixtures/durable/cli-run.js";

let dir: string;
let db: string;
let journal: SqliteJournal;

const cli = (...args: string[]) => runCli(db, ...args);

const workflow = async () => {
  await step("prepare", () => ({ ok: true }));
  const decision = await waitForSignal<{ approved: boolean }>("approval:call_42");
  return decision.approved ? "ran" : "refused";
};

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-cli-durable-"));
  db = path.join(dir, "j.db");
  journal = new SqliteJournal({ path: db });
  await runDurable("run-a", workflow, { journal, input: null, workflow: "approval-demo" });
  await runDurable("run-b", async () => "done", { journal, input: null, workflow: "quick" });
});
afterAll(async () => {
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

describe("durable CLI commands", () => {
  it("renders runs with what they wait for, and a run's journal", async () => {
    const { text, runs } = await renderRuns(journal);
    expect(runs.map((r) => [r.runId, r.status]).sort()).toEqual([
      ["run-a", "waiting"],
      ["run-b", "completed"],
    ]);
    expect(text).toContain("approval of call_42 (dumplings approve run-a call_42)");
    const run = await journal.getRun("run-a");
    expect(run && describeWait(run)).toBe("approval of call_42 (dumplings approve run-a call_42)");
    const table = renderJournal(await journal.readSteps("run-a"));
    expect(table).toMatch(/0\s+prepare\s+completed\s+1\s+1/);
    expect(table).toMatch(/1\s+signal:approval:call_42\s+waiting/);
  });

  it("dumplings runs lists the waiting approval; approve releases it once; a second decision fails", async () => {
    const listed = await cli("runs", "--status", "waiting");
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toContain("run-a");
    expect(listed.stdout).not.toContain("run-b");
    expect(listed.stdout).toContain("dumplings approve run-a call_42");

    const approved = await cli("approve", "run-a", "call_42", "--json");
    expect(approved.code, approved.stderr).toBe(0);
    expect(JSON.parse(approved.stdout)).toEqual({
      runId: "run-a",
      signal: "approval:call_42",
      value: { approved: true },
      wakes: true,
    });
    const again = await cli("reject", "run-a", "call_42", "--reason", "too late");
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("SIGNAL_CONFLICT");
    expect(await runDurable("run-a", workflow, { journal })).toMatchObject({ status: "completed", output: "ran" });

    const shown = await cli("runs", "run-a");
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toMatch(/signal:approval:call_42\s+completed/);
    // A completed run waits for nothing: a decision sent to it is refused, not recorded for ever.
    const late = await cli("approve", "run-a", "call_made_up");
    expect(late.code).toBe(2);
    expect(late.stderr).toContain("is completed");
    expect(await journal.getSignal("run-a", "approval:call_made_up")).toBeUndefined();
    const missing = await cli("runs", "nope");
    expect(missing.code).toBe(3); // the CLI's "not found" class
    expect(missing.stderr).toContain("RUN_NOT_FOUND");
  });
});
