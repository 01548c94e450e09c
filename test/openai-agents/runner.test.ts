/**
 * A real OpenAI Agents SDK `Runner` with an `Agent` that has a tool, its memory
 * a `DumplingsSession`, against the local model server speaking the OpenAI
 * Responses protocol (JSON and SSE) through the SDK's own Responses model:
 * in one process, and across a process restart (one child process runs the
 * first turn and exits, a second continues the session), where the model
 * receives the whole history: the user message, the reasoning item, the
 * function call and its output, the answer, then the new message.
 */
import { execFile } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { Agent, Runner, tool } from "@openai/agents-core";
import { OpenAIProvider } from "@openai/agents-openai";
import pg from "pg";
import { afterAll, afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { DumplingsSession } from "../../src/openai-agents/index.js";
import { type ModelServer, type ScriptedTurn, startModelServer } from "../../src/testing/model-server.js";
import { DATABASE_URL, postgresSkipReason } from "../helpers/services.js";

const run = promisify(execFile);
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-agents-runner-"));
const postgresSkip = await postgresSkipReason();
const pgSchema = `agents_run_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
const turnScript = path.resolve(import.meta.dirname, "..", "fixtures", "openai-agents", "turn.ts");

let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});
afterAll(async () => {
  if (!postgresSkip) {
    const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await admin.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
    await admin.end();
  }
  rmSync(tmp, { recursive: true, force: true });
});

/** The model's side of two turns: a reasoning item and a tool call, the answer; then an answer. */
const script = (): ScriptedTurn[] => [
  {
    thinking: "The user wants the weather: call the tool.",
    toolCalls: [{ id: "call_w1", name: "get_weather", arguments: { city: "Paris" } }],
  },
  { text: "It is sunny in Paris." },
  { text: "You asked about Paris." },
];

/** A compact view of a Responses request's `input`, one string per item. */
function inputOf(body: Record<string, unknown>): string[] {
  const input = body.input as Array<Record<string, unknown>>;
  return input.map((i) => {
    const text = (content: unknown) =>
      typeof content === "string" ? content : (content as Array<{ text?: string }>).map((p) => p.text ?? "").join("");
    if (i.type === "reasoning")
      return `reasoning:${(i.summary as Array<{ text: string }>).map((s) => s.text).join("")}`;
    if (i.type === "function_call") return `call:${String(i.call_id)}:${String(i.name)}:${String(i.arguments)}`;
    if (i.type === "function_call_output") return `output:${String(i.call_id)}:${text(i.output)}`;
    return `${String(i.role)}:${text(i.content)}`;
  });
}

const FIRST_TURN = [
  "user:What's the weather in Paris?",
  "reasoning:The user wants the weather: call the tool.",
  'call:call_w1:get_weather:{"city":"Paris"}',
  "output:call_w1:sunny in Paris, 21C",
  "assistant:It is sunny in Paris.",
];

function weatherAgent(): Agent {
  const getWeather = tool({
    name: "get_weather",
    description: "The weather in a city",
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => `sunny in ${city}, 21C`,
  });
  return new Agent({ name: "Weather", instructions: "Answer with the tool.", tools: [getWeather] });
}

describe("Runner + DumplingsSession against the local Responses server", () => {
  for (const stream of [false, true]) {
    it(`two turns in one process keep the whole history (${stream ? "SSE" : "JSON"})`, async () => {
      server = await startModelServer({ script: script().map((t) => ({ ...t, chunkSize: 3 })) });
      const runner = new Runner({
        modelProvider: new OpenAIProvider({ apiKey: "test", baseURL: server.url, useResponses: true }),
        model: "scripted-model",
        tracingDisabled: true,
      });
      const store = new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "db-")), "a.db") });
      const session = new DumplingsSession({ sessionId: "u1", store });
      const agent = weatherAgent();
      const turn = async (input: string) => {
        if (!stream) return (await runner.run(agent, input, { session })).finalOutput;
        const result = await runner.run(agent, input, { session, stream: true });
        await result.completed;
        return result.finalOutput;
      };
      expect(await turn("What's the weather in Paris?")).toBe("It is sunny in Paris.");
      const stored = await session.getItems();
      expect(stored.map((i) => i.type ?? "message")).toEqual([
        "message",
        "reasoning",
        "function_call",
        "function_call_result",
        "message",
      ]);
      expect(await turn("Which city did I ask about?")).toBe("You asked about Paris.");
      expect(server.requests.map((r) => [r.protocol, r.status, r.stream])).toEqual([
        ["responses", 200, stream],
        ["responses", 200, stream],
        ["responses", 200, stream],
      ]);
      expect(inputOf(server.requests[2]?.body ?? {})).toEqual([...FIRST_TURN, "user:Which city did I ask about?"]);
      expect(await session.getItems()).toHaveLength(7);
      await store.close();
    });
  }

  const stores: Array<{ name: string; skip?: string; spec: () => string }> = [
    { name: "SQLite", spec: () => `sqlite:${path.join(mkdtempSync(path.join(tmp, "restart-")), "agents.db")}` },
    { name: "PostgreSQL", skip: postgresSkip, spec: () => `${DATABASE_URL}?schema=${pgSchema}` },
  ];
  for (const s of stores) {
    it.skipIf(s.skip)(
      `a second process continues the session the first one wrote (${s.name})`,
      async () => {
        server = await startModelServer({ script: script() });
        const spec = s.spec();
        const sessionId = `restart-${randomUUID()}`;
        const turn = async (message: string, mode: string) => {
          const { stdout } = await run(
            process.execPath,
            ["--import", import.meta.resolve("tsx"), turnScript, server?.url ?? "", spec, sessionId, message, mode],
            { cwd: tmp, timeout: 60_000 },
          );
          return JSON.parse(stdout) as { finalOutput: string; items: number };
        };
        expect(await turn("What's the weather in Paris?", "json")).toEqual({
          finalOutput: "It is sunny in Paris.",
          items: 5,
        });
        expect(await turn("Which city did I ask about?", "stream")).toEqual({
          finalOutput: "You asked about Paris.",
          items: 7,
        });
        expect(server.requests.map((r) => r.status)).toEqual([200, 200, 200]);
        expect(inputOf(server.requests[2]?.body ?? {})).toEqual([...FIRST_TURN, "user:Which city did I ask about?"]);
      },
      120_000,
    );
  }
});
