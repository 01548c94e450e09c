/**
 * `dumplings runs` / `approve` / `reject` against a real SQLite journal, run as
 * real processes: a waiting approval is listed with the command that releases
 * it, approving it records the signal, a second decision fails with a typed error.
 * An agent's approval shows the tool and its arguments in `runs` and `runs RUN`
 * (not only with --json); approving a call the run does not wait on is refused
 * with the pending ones listed; a recorded decision reads "pending resume"
 * until the run resumes (issue 11, item 16).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type ModelMessage, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { renderJournal, renderRuns } from "../../src/cli/durable-commands.js";
import { DurableAgent } from "../../src/durable/agent.js";
import { step, waitForSignal } from "../../src/durable/context.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { describeWait } from "../../src/ops/runs.js";
import { startModelServer } from "../../src/testing/model-server.js";
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

/**
 * The journal of a durable agent waiting on an approval: the `llm` step records the assistant message with
 * its tool-call part (the AI SDK's shape, as `DurableAgent` records it), then the run waits for `approval:<id>`.
 */
const agentLike = async () => {
  await step("llm", () => ({
    role: "assistant",
    content: [
      { type: "text", text: "I will send the refund." },
      {
        type: "tool-call",
        toolCallId: "call_7",
        toolName: "refund_payment",
        input: { orderId: "A-1009", amountCents: 4999, note: "damaged on arrival" },
      },
    ],
  }));
  const decision = await waitForSignal<{ approved: boolean }>("approval:call_7");
  return decision.approved ? "refunded" : "refused";
};

beforeAll(async () => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-cli-durable-"));
  db = path.join(dir, "j.db");
  journal = new SqliteJournal({ path: db });
  await runDurable("run-a", workflow, { journal, input: null, workflow: "approval-demo" });
  await runDurable("run-b", async () => "done", { journal, input: null, workflow: "quick" });
  await runDurable("run-c", agentLike, { journal, input: null, workflow: "support-agent" });
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
      ["run-c", "waiting"],
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
    expect(again.code).toBe(2); // as the README's table says: the run no longer waits on that call
    expect(again.stderr).toContain("SIGNAL_CONFLICT");
    expect(again.stderr).toContain('tool call "call_42" of run "run-a" was already approved at');
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

  it("runs and runs RUN show the tool and arguments of a pending approval, without --json", async () => {
    const listed = await cli("runs");
    expect(listed.code, listed.stderr).toBe(0);
    expect(listed.stdout).toMatch(
      /run-c .* approval of call_7: refund_payment \{"orderId":"A-1009",.*\(dumplings approve run-c call_7\)/,
    );
    const shown = await cli("runs", "run-c");
    expect(shown.code, shown.stderr).toBe(0);
    expect(shown.stdout).toContain("pending approval of tool call call_7: dumplings approve run-c call_7");
    expect(shown.stdout).toContain("  tool: refund_payment");
    expect(shown.stdout).toMatch(
      /arguments: \{\n\s+"orderId": "A-1009",\n\s+"amountCents": 4999,\n\s+"note": "damaged on arrival"\n\s+\}/,
    );
    const json = JSON.parse((await cli("runs", "run-c", "--json")).stdout) as { approvals: unknown[] };
    expect(json.approvals).toEqual([
      {
        toolCallId: "call_7",
        toolName: "refund_payment",
        input: { orderId: "A-1009", amountCents: 4999, note: "damaged on arrival" },
      },
    ]);
  });

  it("approve of a call the run does not wait on exits 2, lists the pending one and records nothing", async () => {
    const typo = await cli("approve", "run-c", "call_typo");
    expect(typo.code).toBe(2);
    expect(typo.stderr).toMatch(
      /run "run-c" does not wait on tool call "call_typo"; it waits on: call_7 \(refund_payment \{"orderId":"A-1009".*\); nothing was recorded/,
    );
    expect(await journal.getSignal("run-c", "approval:call_typo")).toBeUndefined();
    const onCompleted = await cli("reject", "run-b", "call_7");
    expect(onCompleted.code).toBe(2);
    expect(onCompleted.stderr).toContain("is completed");
    const asJson = await cli("approve", "run-c", "call_typo", "--json");
    expect(asJson.code).toBe(2);
    expect(JSON.parse(asJson.stdout)).toMatchObject({ error: { code: "APPROVAL_NOT_PENDING", exitCode: 2 } });
    expect((await cli("runs", "--status", "bogus")).code).toBe(2);
  });

  it("after an approval, runs shows it as approved, pending resume, until the run resumes", async () => {
    const approved = await cli("approve", "run-c", "call_7", "--reason", "checked the photos");
    expect(approved.code, approved.stderr).toBe(0);
    const listed = await cli("runs", "--status", "waiting");
    expect(listed.stdout).toMatch(/run-c .* approved call_7: refund_payment \{.*, pending resume/);
    expect(listed.stdout).not.toMatch(/dumplings approve run-c call_7/);
    const shown = await cli("runs", "run-c");
    expect(shown.stdout).toContain("approved tool call call_7 (checked the photos); pending resume");
    expect(await runDurable("run-c", agentLike, { journal })).toMatchObject({
      status: "completed",
      output: "refunded",
    });
    const after = await cli("runs", "run-c");
    expect(after.stdout).not.toContain("pending");
  });

  it("a real DurableAgent's pending approval shows its tool and arguments", async () => {
    const server = await startModelServer({
      handler: () => ({
        toolCalls: [{ id: "call_D1", name: "delete_branch", arguments: { repo: "shop", branch: "main" } }],
      }),
    });
    try {
      const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "test-key" });
      const agent = new DurableAgent({
        model: provider("scripted-model"),
        tools: {
          delete_branch: tool({
            description: "Delete a git branch",
            inputSchema: z.object({ repo: z.string(), branch: z.string() }),
            needsApproval: true,
            execute: async () => "deleted",
          }),
        },
      });
      const paused = await runDurable("run-d", agent.workflow(), {
        journal,
        input: { messages: [{ role: "user", content: "clean up" }] as ModelMessage[] } as never,
        workflow: "ops-agent",
      });
      expect(paused).toMatchObject({ status: "waiting" });
    } finally {
      await server.close();
    }
    const listed = await cli("runs", "--status", "waiting");
    expect(listed.stdout).toMatch(/run-d .* approval of call_D1: delete_branch \{"repo":"shop","branch":"main"\}/);
    const shown = await cli("runs", "run-d");
    expect(shown.stdout).toContain("  tool: delete_branch");
    expect(shown.stdout).toMatch(/"branch": "main"/);
  });
});
