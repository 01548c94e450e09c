/**
 * Approvals that carry what the reviewer said (issue 25, item 4), on the SQLite, PostgreSQL and Redis
 * journals, with a real local model server speaking the OpenAI chat protocol:
 *
 * - `approve(runId, callId, { note, args })` for a tool listed in `DurableAgent({ editableArgs })` is
 *   journaled verbatim; the tool runs once, with the corrected arguments; the model's next request holds
 *   the note and the corrected arguments in the tool's result;
 * - corrected arguments that do not match the tool's schema, or for a tool that did not opt in, are an
 *   `InvalidOptionError` at approve time and nothing is recorded (the run still waits);
 * - a rejection without a note sends the model the documented default text;
 * - a raw approval signal with an unknown key or a wrong type is refused (never silently dropped);
 * - a signal or an approval sent to a cancelled or a completed run is a typed error, nothing recorded;
 * - `dumplings approve --note --args` (a real process) does what `approve` does, and exits 2 on bad arguments;
 *   so does the web inspector's form (400 on bad arguments).
 */
import { randomUUID } from "node:crypto";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type ModelMessage, tool } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { InvalidOptionError } from "../../src/core/errors.js";
import { DurableAgent } from "../../src/durable/agent.js";
import { ApprovalNotPendingError, RunStateError } from "../../src/durable/errors.js";
import type { Journal } from "../../src/durable/journal.js";
import { cancel, runDurable } from "../../src/durable/run.js";
import { approvalSignalName, approve, reject, signal } from "../../src/durable/signals.js";
import { type ModelServer, type RecordedRequest, startModelServer } from "../../src/testing/model-server.js";
import { startUi } from "../../src/ui/server.js";
import { runCli } from "../fixtures/durable/cli-run.js";
import { journalStores, type OpenedStore } from "../fixtures/durable/stores.js";

const stores = await journalStores();
let server: ModelServer;
const opened: OpenedStore[] = [];

/** The run a request belongs to: the user message starts with `[runId]`. */
const runOf = (r: RecordedRequest) => /\[([^\]"]+)\] refund/.exec(JSON.stringify(r.body.messages))?.[1] ?? "";
const requestsOf = (runId: string) => server.requests.filter((r) => runOf(r) === runId);
/** The `tool` messages of a request, as the provider received them (OpenAI chat protocol). */
const toolMessages = (r: RecordedRequest | undefined) =>
  ((r?.body.messages ?? []) as { role: string; content: unknown }[]).filter((m) => m.role === "tool");

beforeAll(async () => {
  server = await startModelServer({
    handler: (request) => {
      const round = ((request.body.messages ?? []) as { role: string }[]).filter((m) => m.role === "assistant").length;
      return round === 0
        ? { toolCalls: [{ id: "call_9", name: "refund", arguments: { amount: 500, currency: "EUR" } }] }
        : { text: "done" };
    },
  });
});
afterAll(async () => {
  for (const o of opened) await o.destroy();
  await server?.close();
});

/** An agent with a `refund` tool that needs approval; `editable` lists it in `editableArgs`. */
function makeAgent(calls: unknown[], editable: boolean, json = false) {
  const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "test-key" });
  return new DurableAgent({
    model: provider("scripted-model"),
    tools: {
      refund: tool({
        description: "Refund an amount",
        inputSchema: z.object({ amount: z.number().int().positive().max(1000), currency: z.enum(["EUR", "USD"]) }),
        needsApproval: true,
        execute: async (input) => {
          calls.push(input);
          return json ? { refunded: input.amount } : `refunded ${input.amount} ${input.currency}`;
        },
      }),
    },
    ...(editable ? { editableArgs: ["refund"] } : {}),
  });
}

const input = (runId: string) => ({ messages: [{ role: "user", content: `[${runId}] refund 500` }] as ModelMessage[] });

async function paused(journal: Journal, agent: DurableAgent, prefix: string): Promise<string> {
  const runId = `${prefix}-${randomUUID().slice(0, 8)}`;
  const r = await runDurable(runId, agent.workflow(), { journal, input: input(runId) as never });
  expect(r).toMatchObject({ status: "waiting", waitingFor: { kind: "signal", name: "approval:call_9" } });
  return runId;
}

for (const store of stores) {
  describe.skipIf(!!store.skip)(
    `approvals with a note and corrected arguments on the ${store.name} journal${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      const open = () => {
        const o = store.open();
        opened.push(o);
        return o.journal;
      };

      it("the tool runs once with the corrected arguments; the decision is journaled verbatim; the model sees the note", async () => {
        const journal = open();
        const calls: unknown[] = [];
        const runId = await paused(journal, makeAgent(calls, true), "review");

        // arguments the schema refuses: a typed error, nothing recorded, the run still waits
        const bad = await approve(runId, "call_9", { journal, args: { amount: -5, currency: "GBP" } }).catch(
          (e: unknown) => e,
        );
        expect(bad).toBeInstanceOf(InvalidOptionError);
        expect(bad).toMatchObject({ code: "INVALID_OPTION", option: "args" });
        expect((bad as Error).message).toMatch(/amount: .*currency: /);
        const unknownKey = approve(runId, "call_9", { journal, args: { amount: 40, currency: "EUR", to: "x" } });
        await expect(unknownKey).rejects.toBeInstanceOf(InvalidOptionError);
        expect(await journal.listSignals(runId)).toEqual([]);
        expect(await journal.getRun(runId)).toMatchObject({ status: "waiting", waitingFor: "approval:call_9" });

        const note = "Customer agreed to 40 EUR; do not refund more.";
        const sent = await approve(runId, "call_9", { journal, note, args: { amount: 40, currency: "EUR" } });
        expect(sent.wakes).toBe(true);
        expect((await journal.getSignal(runId, approvalSignalName("call_9")))?.value).toEqual({
          approved: true,
          note,
          args: { amount: 40, currency: "EUR" },
        });

        const done = await runDurable(runId, makeAgent(calls, true).workflow(), { journal });
        expect(done).toMatchObject({ status: "completed", output: { text: "done", llmSteps: 2 } });
        expect(calls).toEqual([{ amount: 40, currency: "EUR" }]);
        const toolStep = (await journal.readSteps(runId)).find((s) => s.name === "tool:refund");
        expect(toolStep).toMatchObject({ status: "completed", output: "refunded 40 EUR" });
        // the model's second request: the tool's result, then what the reviewer said
        const second = requestsOf(runId)[1];
        const [result] = toolMessages(second);
        expect(result?.content).toBe(
          `refunded 40 EUR\n\nApproved by a human reviewer with corrected arguments {"amount":40,"currency":"EUR"}. Reviewer's note: ${note}`,
        );
        expect(requestsOf(runId)).toHaveLength(2);
      });

      it("a rejection without a note sends the model the default text; with one, the note", async () => {
        const journal = open();
        const calls: unknown[] = [];
        const a = await paused(journal, makeAgent(calls, false), "deny");
        await reject(a, "call_9", { journal });
        expect((await journal.getSignal(a, approvalSignalName("call_9")))?.value).toEqual({ approved: false });
        expect(await runDurable(a, makeAgent(calls, false).workflow(), { journal })).toMatchObject({
          status: "completed",
        });
        expect(toolMessages(requestsOf(a)[1])[0]?.content).toBe("rejected by a human reviewer");

        const b = await paused(journal, makeAgent(calls, false), "deny");
        await reject(b, "call_9", { journal, note: "refunds over 100 need a manager" });
        await runDurable(b, makeAgent(calls, false).workflow(), { journal });
        expect(toolMessages(requestsOf(b)[1])[0]?.content).toBe("refunds over 100 need a manager");
        expect(calls).toEqual([]);
      });

      it("a signal or an approval to a cancelled or a completed run is a typed error; nothing is recorded", async () => {
        const journal = open();
        const calls: unknown[] = [];
        const runId = await paused(journal, makeAgent(calls, true), "ended");
        await cancel(runId, { journal, by: "ops", reason: "customer left" });
        const approval = await approve(runId, "call_9", { journal, note: "too late" }).catch((e: unknown) => e);
        expect(approval).toBeInstanceOf(ApprovalNotPendingError);
        expect(approval).toMatchObject({ status: "cancelled" });
        const raw = await signal(runId, approvalSignalName("call_9"), { approved: true }, { journal }).catch(
          (e: unknown) => e,
        );
        expect(raw).toBeInstanceOf(RunStateError);
        expect(raw).toMatchObject({ code: "RUN_STATE", status: "cancelled", action: "signal" });
        await expect(signal(runId, "go", true, { journal })).rejects.toBeInstanceOf(RunStateError);
        expect(await journal.listSignals(runId)).toEqual([]);

        const finished = `finished-${randomUUID().slice(0, 8)}`;
        await runDurable(finished, async () => "ok", { journal, input: null });
        const late = await signal(finished, "go", { late: true }, { journal }).catch((e: unknown) => e);
        expect(late).toBeInstanceOf(RunStateError);
        expect((late as Error).message).toContain(`run "${finished}" is completed: it waits for nothing`);
        await expect(approve(finished, "call_9", { journal })).rejects.toBeInstanceOf(ApprovalNotPendingError);
        await expect(
          signal(finished, approvalSignalName("call_9"), { approved: false }, { journal }),
        ).rejects.toBeInstanceOf(RunStateError);
        expect(await journal.listSignals(finished)).toEqual([]);
      });
    },
  );
}

describe("the raw approval signal and tools that did not opt in (SQLite)", () => {
  const sqlite = stores.find((s) => s.name === "sqlite") as (typeof stores)[number];
  const open = () => {
    const o = sqlite.open();
    opened.push(o);
    return o.journal;
  };

  it("an unknown key, a wrong type, args on a rejection: refused, nothing recorded", async () => {
    const journal = open();
    const runId = await paused(journal, makeAgent([], true), "raw");
    const name = approvalSignalName("call_9");
    const cases: [unknown, string][] = [
      [{ approved: true, nots: "typo" }, "nots"],
      [{ approved: true, args: { amount: 40, currency: "EUR" }, comment: "x" }, "comment"],
      [{ approved: "yes" }, "approved"],
      [{ approved: true, note: 42 }, "note"],
      [{ approved: true, note: "a", reason: "b" }, "reason"],
      [{ approved: false, args: { amount: 40, currency: "EUR" } }, "args"],
      [{ approved: true, args: [40] }, "args"],
      [{ approved: true, args: { amount: "forty", currency: "EUR" } }, "args"],
      ["approve", "value"],
    ];
    for (const [value, option] of cases) {
      const error = await signal(runId, name, value as never, { journal }).catch((e: unknown) => e);
      expect(error, JSON.stringify(value)).toBeInstanceOf(InvalidOptionError);
      expect(error).toMatchObject({ option });
    }
    const typo = await signal(runId, name, { approved: true, nots: "x" }, { journal }).catch((e: unknown) => e);
    expect((typo as Error).message).toContain("did you mean note?");
    expect(await journal.listSignals(runId)).toEqual([]);

    // the shape a reviewer's tool sends: { approved, args, note } is taken whole
    const calls: unknown[] = [];
    await signal(runId, name, { approved: true, args: { amount: 12, currency: "USD" }, note: "partial" }, { journal });
    await runDurable(runId, makeAgent(calls, true, true).workflow(), { journal });
    expect(calls).toEqual([{ amount: 12, currency: "USD" }]);
    expect(JSON.parse(String(toolMessages(requestsOf(runId)[1])[0]?.content))).toEqual({
      result: { refunded: 12 },
      review: `Approved by a human reviewer with corrected arguments {"amount":12,"currency":"USD"}. Reviewer's note: partial`,
    });
  });

  it("a tool not listed in editableArgs takes a note but refuses corrected arguments", async () => {
    const journal = open();
    const calls: unknown[] = [];
    const runId = await paused(journal, makeAgent(calls, false, true), "fixed");
    const refused = await approve(runId, "call_9", { journal, args: { amount: 40, currency: "EUR" } }).catch(
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(InvalidOptionError);
    expect((refused as Error).message).toContain('editableArgs: ["refund"]');
    await expect(
      signal(
        runId,
        approvalSignalName("call_9"),
        { approved: true, args: { amount: 1, currency: "EUR" } },
        { journal },
      ),
    ).rejects.toBeInstanceOf(InvalidOptionError);
    expect(await journal.listSignals(runId)).toEqual([]);
    await approve(runId, "call_9", { journal, note: "ok, once" });
    await runDurable(runId, makeAgent(calls, false, true).workflow(), { journal });
    expect(calls).toEqual([{ amount: 500, currency: "EUR" }]);
    expect(JSON.parse(String(toolMessages(requestsOf(runId)[1])[0]?.content))).toEqual({
      result: { refunded: 500 },
      review: "Approved by a human reviewer. Reviewer's note: ok, once",
    });
  });

  it("editableArgs must name needsApproval tools", () => {
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const plain = tool({ inputSchema: z.object({}), execute: async () => 1 });
    expect(() => new DurableAgent({ model: provider("m"), tools: { plain }, editableArgs: ["plain"] })).toThrow(
      InvalidOptionError,
    );
    expect(() => new DurableAgent({ model: provider("m"), tools: { plain }, editableArgs: ["nope"] })).toThrow(
      /names no tool/,
    );
  });
});

describe("dumplings approve --note --args (SQLite, a real process)", () => {
  const sqlite = stores.find((s) => s.name === "sqlite") as (typeof stores)[number];

  it("records the note and the corrected arguments; arguments the schema refuses exit 2 and record nothing", async () => {
    const o = sqlite.open();
    opened.push(o);
    const { journal } = o;
    const db = o.env.TARGET;
    const calls: unknown[] = [];
    const runId = await paused(journal, makeAgent(calls, true), "cli");
    const shown = await runCli(db, "runs", runId);
    expect(shown.stdout).toContain(`dumplings approve ${runId} call_9 [--note …] [--args JSON]`);

    const bad = await runCli(db, "approve", runId, "call_9", "--args", '{"amount":"40","currency":"EUR"}');
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toContain("INVALID_OPTION");
    expect(bad.stderr).toContain("amount:");
    const notJson = await runCli(db, "approve", runId, "call_9", "--args", "{amount:40}");
    expect(notJson.code).toBe(2);
    expect(await journal.listSignals(runId)).toEqual([]);

    const ok = await runCli(
      db,
      "approve",
      runId,
      "call_9",
      "--note",
      "40 is the cap",
      "--args",
      '{"amount":40,"currency":"EUR"}',
      "--json",
    );
    expect(ok.code, ok.stderr).toBe(0);
    expect(JSON.parse(ok.stdout)).toMatchObject({
      value: { approved: true, note: "40 is the cap", args: { amount: 40, currency: "EUR" } },
      wakes: true,
    });
    const pending = await runCli(db, "runs", runId);
    expect(pending.stdout).toContain(
      'approved tool call call_9 with arguments {"amount":40,"currency":"EUR"} (40 is the cap); pending resume',
    );
    await runDurable(runId, makeAgent(calls, true).workflow(), { journal });
    expect(calls).toEqual([{ amount: 40, currency: "EUR" }]);

    const other = await paused(journal, makeAgent(calls, true), "cli");
    const rejected = await runCli(db, "reject", other, "call_9", "--note", "not this customer");
    expect(rejected.code, rejected.stderr).toBe(0);
    expect((await journal.getSignal(other, approvalSignalName("call_9")))?.value).toEqual({
      approved: false,
      note: "not this customer",
    });
  });
});

describe("the web inspector's approval form (SQLite)", () => {
  const sqlite = stores.find((s) => s.name === "sqlite") as (typeof stores)[number];

  it("shows the arguments to correct for a tool of editableArgs; records note and args; 400 on bad arguments; unchanged arguments are no correction", async () => {
    const o = sqlite.open();
    opened.push(o);
    const { journal } = o;
    const calls: unknown[] = [];
    const runId = await paused(journal, makeAgent(calls, true), "ui");
    const ui = await startUi(
      {
        sessions: { label: "none", missing: "not given" },
        workflows: { label: "none", missing: "not given" },
        journal: { value: journal, label: `sqlite:${o.env.TARGET}` },
        by: "tester@test",
      },
      { port: 0 },
    );
    try {
      const first = await fetch(ui.url, { redirect: "manual" });
      const cookie = (first.headers.get("set-cookie") ?? "").split(";")[0] as string;
      const post = (form: Record<string, string>) =>
        fetch(`${ui.origin}/runs/${runId}/approve`, {
          method: "POST",
          headers: { cookie, origin: ui.origin, "content-type": "application/x-www-form-urlencoded" },
          body: new URLSearchParams(form).toString(),
          redirect: "manual",
        });
      const page = await (await fetch(`${ui.origin}/runs/${runId}`, { headers: { cookie } })).text();
      expect(page).toContain('name="args"');
      expect(page).toContain('name="note"');

      const shown = JSON.stringify({ amount: 500, currency: "EUR" });
      const bad = await post({ toolCallId: "call_9", args: '{"amount":0,"currency":"EUR"}', argsShown: shown });
      expect(bad.status).toBe(400);
      expect(await journal.listSignals(runId)).toEqual([]);

      const ok = await post({
        toolCallId: "call_9",
        note: "capped",
        args: '{"amount":40,"currency":"EUR"}',
        argsShown: shown,
      });
      expect(ok.status).toBe(303);
      expect((await journal.getSignal(runId, approvalSignalName("call_9")))?.value).toEqual({
        approved: true,
        note: "capped",
        args: { amount: 40, currency: "EUR" },
      });
      // the field left as shown (the model's own arguments) is no correction: nothing but the approval is recorded
      const other = await paused(journal, makeAgent(calls, true), "ui");
      const same = await fetch(`${ui.origin}/runs/${other}/approve`, {
        method: "POST",
        headers: { cookie, origin: ui.origin, "content-type": "application/x-www-form-urlencoded" },
        body: new URLSearchParams({ toolCallId: "call_9", args: shown, argsShown: shown }).toString(),
        redirect: "manual",
      });
      expect(same.status).toBe(303);
      expect((await journal.getSignal(other, approvalSignalName("call_9")))?.value).toEqual({ approved: true });
    } finally {
      await ui.close();
    }
    await runDurable(runId, makeAgent(calls, true).workflow(), { journal });
    expect(calls).toEqual([{ amount: 40, currency: "EUR" }]);
  });
});
