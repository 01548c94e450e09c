/**
 * DurableAgent's AI SDK options against the real local model server:
 * toolChoice / providerOptions / maxOutputTokens reach the request and are
 * recorded; prepareStep shapes a round and what it returns is what the llm
 * step hashes; stopWhen stops on the recorded rounds; toModelOutput, generator
 * tools and non-JSON results; tool calls of a round run concurrently (bounded)
 * with seqs in call order, and a replay of such a round sends and runs nothing.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type ModelMessage, stepCountIs, type ToolSet, tool } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { DurableAgent, type DurableAgentOptions } from "../../src/durable/agent.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { approve } from "../../src/durable/signals.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

let dir: string;
let journal: SqliteJournal;
let server: ModelServer;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-agent-opts-"));
  journal = new SqliteJournal({ path: path.join(dir, "j.db") });
});
afterEach(async () => {
  await server?.close();
  await journal.close();
  rmSync(dir, { recursive: true, force: true });
});

const messages: ModelMessage[] = [{ role: "user", content: "go" }];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function agentOf(tools: ToolSet, options: Partial<DurableAgentOptions> = {}) {
  const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
  return new DurableAgent({ model: provider("scripted-model"), tools, ...options });
}

const lookup = tool({
  description: "Look up an order",
  inputSchema: z.object({ id: z.number() }),
  execute: async ({ id }) => ({ id, total: 42 }),
});

describe("DurableAgent options", () => {
  it("runs are stored under the agent's name (default durable-agent), not the generic 'workflow'", async () => {
    server = await startModelServer({ script: [{ text: "one" }, { text: "two" }] });
    await runDurable("named-default", agentOf({}).workflow(), { journal, input: { messages } });
    await runDurable("named-support", agentOf({}, { name: "support-agent" }).workflow(), {
      journal,
      input: { messages },
    });
    expect((await journal.getRun("named-default"))?.workflow).toBe("durable-agent");
    expect((await journal.getRun("named-support"))?.workflow).toBe("support-agent");
    expect(() => agentOf({}, { name: "" })).toThrow(/name.*non-empty/);
  });

  it("toolChoice, providerOptions and maxOutputTokens reach the model request and are recorded in the llm step", async () => {
    server = await startModelServer({
      script: [{ toolCalls: [{ id: "c1", name: "lookup", arguments: { id: 7 } }] }, { text: "done" }],
    });
    const agent = agentOf(
      { lookup },
      {
        toolChoice: { type: "tool", toolName: "lookup" },
        providerOptions: { local: { user: "user-42" } },
        maxOutputTokens: 64,
      },
    );
    const r = await runDurable("o1", agent.workflow(), { journal, input: agent.input(messages) });
    expect(r).toMatchObject({ status: "completed", output: { text: "done", llmSteps: 2 } });
    const body = server.requests[0]?.body as Record<string, unknown>;
    expect(body.tool_choice).toEqual({ type: "function", function: { name: "lookup" } });
    expect(body.max_tokens).toBe(64);
    expect(body.user).toBe("user-42");
    // a changed option is a changed llm input: the same program with another toolChoice hashes differently
    const other = agentOf({ lookup }, { providerOptions: { local: { user: "user-42" } }, maxOutputTokens: 64 });
    server.push({ text: "done" });
    const r2 = await runDurable("o1b", other.workflow(), { journal, input: other.input(messages) });
    expect(r2.status).toBe("completed");
    const [a] = await journal.readSteps("o1");
    const [b] = await journal.readSteps("o1b");
    expect(a?.name).toBe("llm");
    expect(a?.inputHash).not.toBe(b?.inputHash);
  });

  it("prepareStep changes one round's request (activeTools, toolChoice, messages); a replay records no drift", async () => {
    server = await startModelServer({
      script: [
        { toolCalls: [{ id: "c1", name: "lookup", arguments: { id: 7 } }] },
        { toolCalls: [{ id: "c2", name: "refund", arguments: { amount: 42 } }] },
        { text: "refunded" },
      ],
    });
    const refund = tool({
      description: "Refund",
      inputSchema: z.object({ amount: z.number() }),
      needsApproval: true,
      execute: async ({ amount }) => ({ refunded: amount }),
    });
    const seen: number[] = [];
    const agent = agentOf(
      { lookup, refund },
      {
        prepareStep: ({ stepNumber, messages: m }) => {
          seen.push(stepNumber);
          if (stepNumber === 0) return { activeTools: ["lookup"], toolChoice: "required" };
          if (stepNumber === 2) return { messages: [...m, { role: "user", content: "summarise" }] };
          return undefined;
        },
      },
    );
    const first = await runDurable("o2", agent.workflow(), { journal, input: agent.input(messages) });
    expect(first.status).toBe("waiting");
    await approve("o2", "c2", { journal });
    const done = await runDurable("o2", agent.workflow(), { journal });
    expect(done).toMatchObject({ status: "completed", output: { text: "refunded", llmSteps: 3 } });
    expect(server.count).toBe(3); // the replayed rounds sent nothing
    const b0 = server.requests[0]?.body as { tools: { function: { name: string } }[]; tool_choice: unknown };
    expect(b0.tools.map((t) => t.function.name)).toEqual(["lookup"]);
    expect(b0.tool_choice).toBe("required");
    const b1 = server.requests[1]?.body as { tools: unknown[]; tool_choice?: unknown };
    expect(b1.tools).toHaveLength(2);
    const b2 = server.requests[2]?.body as { messages: { role: string; content: unknown }[] };
    expect(b2.messages.at(-1)).toEqual({ role: "user", content: "summarise" });
    // called on replay too, with the same answers: no drift recorded
    expect(seen).toEqual([0, 1, 0, 1, 2]);
    expect((await journal.readEvents("o2")).filter((e) => e.type === "step_drift")).toEqual([]);
    // what prepareStep returned is what the llm step hashes: another answer on replay is drift
    const changed = agentOf(
      { lookup, refund },
      { prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: "required" } : undefined) },
    );
    server.push({ toolCalls: [{ id: "c9", name: "refund", arguments: { amount: 1 } }] });
    const again = await runDurable("o2c", changed.workflow(), { journal, input: changed.input(messages) });
    expect(again.status).toBe("waiting");
    const [orig] = await journal.readSteps("o2");
    const [other] = await journal.readSteps("o2c");
    expect(orig?.inputHash).not.toBe(other?.inputHash);
  });

  it("stopWhen: stepCountIs(1) stops after the first round's tools, evaluated again on replay", async () => {
    server = await startModelServer({
      script: [{ toolCalls: [{ id: "c1", name: "lookup", arguments: { id: 7 } }] }, { text: "never sent" }],
    });
    const agent = agentOf({ lookup }, { stopWhen: stepCountIs(1) });
    const r = await runDurable("o3", agent.workflow(), { journal, input: agent.input(messages) });
    expect(r).toMatchObject({ status: "completed", output: { llmSteps: 1 } });
    expect(server.count).toBe(1);
    const out = (r as unknown as { output: { messages: ModelMessage[] } }).output;
    expect(out.messages.at(-1)?.role).toBe("tool");
    expect((await journal.readSteps("o3")).map((s) => s.name)).toEqual(["llm", "tool:lookup"]);
  });

  it("toModelOutput shapes what the model sees; a generator tool's last value is its result", async () => {
    server = await startModelServer({
      script: [
        {
          toolCalls: [
            { id: "c1", name: "secret", arguments: {} },
            { id: "c2", name: "progress", arguments: {} },
          ],
        },
        { text: "ok" },
      ],
    });
    const agent = agentOf({
      secret: tool({
        description: "s",
        inputSchema: z.object({}),
        execute: async () => ({ card: "4242", summary: "card on file" }),
        toModelOutput: ({ output }) => ({ type: "text", value: (output as { summary: string }).summary }),
      }),
      progress: tool({
        description: "p",
        inputSchema: z.object({}),
        async *execute() {
          yield { pct: 10 };
          yield { pct: 60 };
          yield { pct: 100, done: true };
        },
      }),
    });
    const r = await runDurable("o4", agent.workflow(), { journal, input: agent.input(messages) });
    expect(r.status).toBe("completed");
    const steps = await journal.readSteps("o4");
    expect(steps[1]).toMatchObject({ name: "tool:secret", output: { card: "4242", summary: "card on file" } });
    expect(steps[2]).toMatchObject({ name: "tool:progress", output: { pct: 100, done: true } });
    const sent = JSON.stringify(server.requests[1]?.body.messages);
    expect(sent).toContain("card on file");
    expect(sent).not.toContain("4242");
    expect(sent).toContain('\\"pct\\":100');
  });

  it("a non-JSON tool result (Date, BigInt, class instance) fails that tool step with NonJsonValueError naming the tool", async () => {
    server = await startModelServer({
      script: [
        {
          toolCalls: [
            { id: "c1", name: "clock", arguments: {} },
            { id: "c2", name: "big", arguments: {} },
            { id: "c3", name: "obj", arguments: {} },
          ],
        },
        { text: "ok" },
      ],
    });
    class Money {
      constructor(readonly cents: number) {}
    }
    const t = (execute: () => Promise<unknown>) => tool({ description: "x", inputSchema: z.object({}), execute });
    const agent = agentOf({
      clock: t(async () => ({ now: new Date(0) })),
      big: t(async () => ({ n: 10n })),
      obj: t(async () => new Money(5)),
    });
    const r = await runDurable("o5", agent.workflow(), { journal, input: agent.input(messages) });
    expect(r.status).toBe("completed");
    const steps = await journal.readSteps("o5");
    for (const [i, name] of ["clock", "big", "obj"].entries()) {
      const s = steps[i + 1];
      expect(s).toMatchObject({ name: `tool:${name}`, status: "failed", error: { code: "NON_JSON_VALUE" } });
      expect(s?.error?.message).toContain(`step "tool:${name}" output`);
    }
    const sent = JSON.stringify(server.requests[1]?.body.messages);
    expect(sent).toContain("cannot be stored as JSON");
  });

  it("runs a round's calls concurrently up to maxParallelTools, seqs in call order; the replay runs and sends nothing", async () => {
    const script = () => [
      {
        toolCalls: [
          { id: "c1", name: "slow", arguments: { ms: 150, tag: "a" } },
          { id: "c2", name: "slow", arguments: { ms: 10, tag: "b" } },
          { id: "c3", name: "slow", arguments: { ms: 60, tag: "c" } },
          { id: "c4", name: "slow", arguments: { ms: 10, tag: "d" } },
        ],
      },
      { toolCalls: [{ id: "c5", name: "refund", arguments: {} }] },
      { text: "ok" },
    ];
    server = await startModelServer({ script: [...script(), ...script()] });
    for (const [runId, limit, expected] of [
      ["o6", 2, 2],
      ["o6d", undefined, 4],
    ] as const) {
      let active = 0;
      let peak = 0;
      const ran: string[] = [];
      const agent = agentOf(
        {
          slow: tool({
            description: "slow",
            inputSchema: z.object({ ms: z.number(), tag: z.string() }),
            execute: async ({ ms, tag }) => {
              active++;
              peak = Math.max(peak, active);
              await sleep(ms);
              active--;
              ran.push(tag);
              return { tag };
            },
          }),
          refund: tool({
            description: "r",
            inputSchema: z.object({}),
            needsApproval: true,
            execute: async () => "refunded",
          }),
        },
        limit === undefined ? {} : { maxParallelTools: limit },
      );
      expect((await runDurable(runId, agent.workflow(), { journal, input: agent.input(messages) })).status).toBe(
        "waiting",
      );
      expect(peak).toBe(expected);
      expect(ran[0]).not.toBe("a"); // the slow first call finished after others: they really overlapped
      const steps = await journal.readSteps(runId);
      const tools = steps.filter((s) => s.name === "tool:slow");
      expect(tools.map((s) => s.seq)).toEqual([1, 2, 3, 4]);
      expect(tools.map((s) => (s.output as { tag: string }).tag)).toEqual(["a", "b", "c", "d"]);
      await approve(runId, "c5", { journal });
      const before = server.count;
      ran.length = 0;
      const done = await runDurable(runId, agent.workflow(), { journal });
      expect(done.status).toBe("completed");
      expect(ran).toEqual([]); // recorded tool results replayed
      expect(server.count).toBe(before + 1); // only the last round was sent
      expect((await journal.readEvents(runId)).filter((e) => e.type === "step_drift")).toEqual([]);
    }
  });
});
