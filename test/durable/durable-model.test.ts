/**
 * durableModel: a user's own AI SDK loop (generateText / streamText) whose
 * model calls are journaled `llm` steps, against the real local model server.
 * A loop SIGKILLed after its first model call resumes in a new process and the
 * server sees each request once; a streamText loop replays its recorded
 * stream; outside a run the call throws NoRunContextError; a replay mismatch
 * reaches the developer as ReplayMismatchError (run blocked).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, stepCountIs, streamText, tool } from "ai";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { durableTool } from "../../src/durable/agent.js";
import { step, waitForSignal } from "../../src/durable/context.js";
import { NoRunContextError, ReplayMismatchError } from "../../src/durable/errors.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { durableModel } from "../../src/durable/model.js";
import { runDurable } from "../../src/durable/run.js";
import { signal } from "../../src/durable/signals.js";
import { MemoryRunStream } from "../../src/durable/stream.js";
import { type ModelServer, type RecordedRequest, startModelServer } from "../../src/testing/model-server.js";
import { fixture, runChild } from "../fixtures/durable/spawn.js";

let dir: string;
let server: ModelServer;
beforeEach(() => {
  dir = mkdtempSync(path.join(tmpdir(), "dumplings-durable-model-"));
});
afterEach(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** Answers by round (assistant messages already in the request), whichever process asks. */
function byRound(request: RecordedRequest) {
  const round = ((request.body.messages ?? []) as { role: string }[]).filter((m) => m.role === "assistant").length;
  if (round === 0) return { toolCalls: [{ id: "call_1", name: "lookup", arguments: { id: 1 } }] };
  if (round === 1) return { toolCalls: [{ id: "call_2", name: "lookup", arguments: { id: 2 } }] };
  return { text: "Orders 1 and 2 total 83.", chunkSize: 4 };
}

const roundOf = (r: RecordedRequest) =>
  ((r.body.messages ?? []) as { role: string }[]).filter((m) => m.role === "assistant").length;

describe("durableModel", () => {
  it("a user's generateText loop SIGKILLed after its first model call resumes without calling the model again", async () => {
    server = await startModelServer({ handler: byRound });
    const env = {
      DB: path.join(dir, "j.db"),
      MODEL_URL: server.url,
      RUN_ID: "loop-1",
      EFFECTS: path.join(dir, "effects.txt"),
    };
    // writes: llm started (1), llm completed (2) → killed right after the first model call is recorded
    const first = await runChild(fixture("durable-model-child.ts"), { ...env, KILL_AFTER_WRITES: "2" });
    expect(first.signal).toBe("SIGKILL");
    expect(server.count).toBe(1);
    const second = await runChild(fixture("durable-model-child.ts"), env);
    expect(second.json).toMatchObject({ status: "completed", output: { text: "Orders 1 and 2 total 83.", steps: 3 } });
    expect(server.requests.map(roundOf)).toEqual([0, 1, 2]); // each request once
    expect(readFileSync(env.EFFECTS, "utf8")).toBe("lookup 1\nlookup 2\n");
    const journal = new SqliteJournal({ path: env.DB });
    try {
      const steps = await journal.readSteps("loop-1");
      expect(steps.map((s) => `${s.name}:${s.status}`)).toEqual([
        "llm:completed",
        "tool:lookup:completed",
        "llm:completed",
        "tool:lookup:completed",
        "llm:completed",
      ]);
      expect(steps[0]?.attempt).toBe(1);
      // a third run of the completed run sends nothing
      const again = await runChild(fixture("durable-model-child.ts"), env);
      expect(again.json).toMatchObject({ status: "completed" });
      expect(server.count).toBe(3);
    } finally {
      await journal.close();
    }
  });

  it("a streamText loop replays its recorded stream after a pause: same text, no request, tokens on the side channel", async () => {
    server = await startModelServer({ handler: byRound });
    const journal = new SqliteJournal({ path: path.join(dir, "j.db") });
    const stream = new MemoryRunStream();
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const model = durableModel(provider("scripted-model"));
    let lookups = 0;
    const lookup = durableTool(
      tool({
        description: "Look up",
        inputSchema: z.object({ id: z.number() }),
        execute: async ({ id }) => {
          lookups++;
          return { id, total: 40 + id };
        },
      }),
      { name: "lookup" },
    );
    const texts: string[] = [];
    const workflow = async () => {
      const result = streamText({ model, tools: { lookup }, stopWhen: stepCountIs(3), prompt: "total?" });
      const text = await result.text;
      texts.push(text);
      await waitForSignal("ack");
      return { text };
    };
    try {
      expect((await runDurable("s1", workflow, { journal, stream, input: null })).status).toBe("waiting");
      expect(server.count).toBe(3);
      const tokens = (await stream.read("s1")).map((e) => e.data as { type: string; text?: string });
      expect(
        tokens
          .filter((t) => t.type === "token")
          .map((t) => t.text)
          .join(""),
      ).toBe("Orders 1 and 2 total 83.");
      await signal("s1", "ack", true, { journal });
      const done = await runDurable("s1", workflow, { journal, stream });
      expect(done).toMatchObject({ status: "completed", output: { text: "Orders 1 and 2 total 83." } });
      expect(server.count).toBe(3);
      expect(lookups).toBe(2);
      expect(texts).toEqual(["Orders 1 and 2 total 83.", "Orders 1 and 2 total 83."]);
    } finally {
      await journal.close();
    }
  });

  it("outside a run the model call throws NoRunContextError and sends nothing", async () => {
    server = await startModelServer({ script: [{ text: "hi" }] });
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    await expect(
      generateText({ model: durableModel(provider("scripted-model")), prompt: "hi", maxRetries: 0 }),
    ).rejects.toBeInstanceOf(NoRunContextError);
    expect(server.count).toBe(0);
  });

  it("a replay mismatch reaches the developer as ReplayMismatchError (the run is blocked), not as a tool error", async () => {
    server = await startModelServer({ script: [{ text: "one" }] });
    const journal = new SqliteJournal({ path: path.join(dir, "j.db") });
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const model = durableModel(provider("scripted-model"));
    let caught: unknown;
    try {
      const v1 = async () => {
        await step("load", () => 1);
        const r = await generateText({ model, prompt: "hi" });
        await waitForSignal("go");
        return r.text;
      };
      expect((await runDurable("m1", v1, { journal, input: null })).status).toBe("waiting");
      // v2 calls the model first: position 0 holds the step "load"
      const v2 = async () => {
        try {
          await generateText({ model, prompt: "hi" });
        } catch (error) {
          caught = error;
          throw error;
        }
        return "x";
      };
      await signal("m1", "go", true, { journal });
      const r = await runDurable("m1", v2, { journal });
      expect(r.status).toBe("blocked");
      expect(caught).toBeInstanceOf(ReplayMismatchError);
      expect(server.count).toBe(1);
    } finally {
      await journal.close();
    }
  });
});
