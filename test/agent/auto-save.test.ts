import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { CheckpointFailedError, ModelCallError } from "../../src/agent/conversation.js";
import { INTERRUPTED_RESULT, isHistoryValid } from "../../src/agent/repair.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { registerBackend } from "../../src/backends/registry.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend } from "../../src/backends/types.js";
import type { AgentState } from "../../src/core/state.js";
import { loadState } from "../../src/persistence/api.js";
import { configure } from "../../src/persistence/config.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

/** Wraps a real backend (seed contract only) and counts saves; can be told to fail. */
class CountingBackend implements StateBackend {
  saves: string[] = [];
  failures = 0;
  constructor(
    readonly inner: StateBackend,
    readonly name = "counting",
  ) {}
  async save(key: string, state: AgentState) {
    if (this.failures > 0) {
      this.failures--;
      throw new Error("storage append failed before commit");
    }
    this.saves.push(key);
    await this.inner.save(key, state);
  }
  load(key: string) {
    return this.inner.load(key);
  }
  delete(key: string) {
    return this.inner.delete(key);
  }
  listKeys() {
    return this.inner.listKeys();
  }
}

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-agent-autosave-"));
let server: ModelServer;
let seq = 0;
beforeAll(async () => {
  server = await startModelServer({ script: [] });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});
afterEach(() => configure({ enabled: false, keyStrategy: "uuid" }));

function backendFor(kind: "file" | "sqlite"): CountingBackend {
  const inner =
    kind === "file"
      ? new FileBackend({ baseDir: path.join(dir, `files-${++seq}`) })
      : new SQLiteBackend({ dbPath: path.join(dir, `db-${++seq}.sqlite`) });
  const b = new CountingBackend(inner);
  const name = `count-${kind}-${seq}`;
  registerBackend(name, b);
  configure({ enabled: true, backend: name });
  return b;
}

function newAgent(name = "saver"): BaseAgent {
  const agent = new BaseAgent({
    name,
    apiProvider: `${server.url}/chat/completions`,
    modelName: "scripted",
    apiKeyEnv: "",
  });
  agent.registerTool({ name: "echo", execute: (args: { v?: string }) => args.v ?? "" });
  return agent;
}

describe.each(["file", "sqlite"] as const)("auto-save on the %s backend", (kind) => {
  it("saves once per outermost turn (nested turns too), also when the turn throws", async () => {
    const backend = backendFor(kind);
    const agent = newAgent();
    agent.registerTool({
      name: "ask_self",
      execute: async () => (await agent.conversationWithTool("inner", { maxRetries: 0 })).text,
    });
    server.push(
      { toolCalls: [{ name: "echo", arguments: { v: "a" } }, { name: "ask_self" }] },
      { text: "inner done" },
      { text: "turn one done" },
    );
    await agent.conversationWithTool("one", { maxRetries: 0 });
    expect(backend.saves).toEqual([agent.uuid]);
    server.push({ text: "turn two" });
    await agent.conversationWithTool("two", { maxRetries: 0 });
    expect(backend.saves).toHaveLength(2);
    server.push({ error: { status: 500, message: "upstream down" } });
    await expect(agent.conversationWithTool("three", { maxRetries: 0 })).rejects.toBeInstanceOf(ModelCallError);
    expect(backend.saves).toHaveLength(3);
    const loaded = await loadState<BaseAgent>(agent.uuid, { backend });
    expect(loaded.history).toEqual(agent.history);
    expect(loaded.currentTaskId).toBe(agent.currentTaskId);
    expect(loaded.history.at(-1)).toEqual({ role: "user", content: "three" });
  });
});

describe("auto-save rules", () => {
  it("does not save when persistence is disabled; autoSave by hand still works", async () => {
    const backend = backendFor("file");
    configure({ enabled: false });
    const agent = newAgent();
    server.push({ text: "hi" });
    await agent.conversationWithTool("hello", { maxRetries: 0 });
    expect(backend.saves).toEqual([]);
  });

  it("uses the key strategy: uuid by default, name when configured", async () => {
    const backend = backendFor("sqlite");
    configure({ keyStrategy: "name" });
    const agent = newAgent(`named-${seq}`);
    server.push({ text: "ok" });
    await agent.conversationWithTool("hi", { maxRetries: 0 });
    expect(backend.saves).toEqual([agent.name]);
    const other = backendFor("sqlite");
    configure({ keyStrategy: "uuid" });
    const second = newAgent("whatever");
    server.push({ text: "ok" });
    await second.conversationWithTool("hi", { maxRetries: 0 });
    expect(other.saves).toEqual([second.uuid]);
  });

  it("saves each of two concurrent agents exactly once", async () => {
    const backend = backendFor("file");
    const slow = (agent: BaseAgent) =>
      agent.registerTool(
        { name: "wait", execute: () => new Promise((r) => setTimeout(() => r("waited"), 40)) },
        { replace: true },
      );
    const a = newAgent("a");
    const b = newAgent("b");
    slow(a);
    slow(b);
    server.push(
      { toolCalls: [{ name: "wait" }] },
      { toolCalls: [{ name: "wait" }] },
      { text: "done" },
      { text: "done" },
    );
    await Promise.all([
      a.conversationWithTool("go", { maxRetries: 0 }),
      b.conversationWithTool("go", { maxRetries: 0 }),
    ]);
    expect([...backend.saves].sort()).toEqual([a.uuid, b.uuid].sort());
  });

  it("PB-03: a failed save does not block the turn; the next save stores the tool result before the answer", async () => {
    const backend = backendFor("sqlite");
    let charges = 0;
    const agent = new BaseAgent({ name: "payer", apiProvider: server.url, modelName: "scripted", apiKeyEnv: "" });
    agent.registerTool({
      name: "charge",
      execute: () => {
        charges++;
        return "receipt-5";
      },
    });
    const errors: unknown[] = [];
    agent.on("persistError", (e) => errors.push(e));
    backend.failures = 1;
    server.push(
      { toolCalls: [{ id: "call_C1", name: "charge", arguments: { amount: 5 } }] },
      { text: "Charged 5 EUR." },
    );
    const result = await agent.conversationWithTool("Charge 5 EUR to card on file", { maxRetries: 0 });
    expect(result.text).toBe("Charged 5 EUR.");
    expect(errors).toHaveLength(1);
    expect(backend.saves).toEqual([]);
    // the retry of the lost write: the whole in-memory history, tool result included, reaches the store
    server.push({ text: "Anything else?" });
    await agent.conversationWithTool("thanks", { maxRetries: 0 });
    const stored = await loadState<BaseAgent>(agent.uuid, { backend });
    expect(stored.history.slice(0, 4)).toEqual([
      { role: "user", content: "Charge 5 EUR to card on file" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_C1", type: "function", function: { name: "charge", arguments: '{"amount":5}' } }],
      },
      { role: "tool", tool_call_id: "call_C1", name: "charge", content: "receipt-5" },
      { role: "assistant", content: "Charged 5 EUR." },
    ]);
    expect(charges).toBe(1);
  });
});

describe("checkpoint mode (save after every message)", () => {
  it("PB-03: when progress cannot be saved (after one retry), the turn fails loudly before calling the model again", async () => {
    const backend = backendFor("file");
    let charges = 0;
    const agent = newAgent("strict");
    agent.registerTool({
      name: "charge",
      execute: () => {
        charges++;
        return "receipt-5";
      },
    });
    const errors: unknown[] = [];
    agent.on("persistError", (e) => errors.push(e));
    server.push({ toolCalls: [{ id: "call_C1", name: "charge", arguments: { amount: 5 } }] }, { text: "never sent" });
    const before = server.count;
    // the user message and the assistant call are saved; the tool result's save and its retry fail
    const saveTool = backend.save.bind(backend);
    let calls = 0;
    backend.save = async (key, state) => {
      calls++;
      if (state.history.some((m) => m.role === "tool")) throw new Error("storage append failed before commit");
      return saveTool(key, state);
    };
    const err = await agent
      .conversationWithTool("Charge 5 EUR", { checkpoint: "message", maxRetries: 0 })
      .catch((e) => e);
    expect(err).toBeInstanceOf(CheckpointFailedError);
    expect(server.count - before).toBe(1); // no second model call on unsaved progress
    expect(charges).toBe(1);
    expect(errors.length).toBeGreaterThanOrEqual(2);
    expect(calls).toBeGreaterThanOrEqual(4);
    // the queued answer was never consumed: drain it so later tests start clean
    await fetch(`${server.url}/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ messages: [{ role: "user", content: "drain" }] }),
    });
  });
});

function runChild(env: Record<string, string>): {
  child: ChildProcess;
  done: Promise<{ code: number | null; signal: string | null; out: string; err: string }>;
} {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", path.join(import.meta.dirname, "../fixtures/agent/turn-child.ts")],
    {
      env: { ...process.env, DUMPLINGS_PERSISTENCE: "", ...env, MODEL_URL: server.url },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let out = "";
  let err = "";
  child.stdout?.on("data", (d) => {
    out += d;
  });
  child.stderr?.on("data", (d) => {
    err += d;
  });
  const done = new Promise<{ code: number | null; signal: string | null; out: string; err: string }>((resolve) =>
    child.on("exit", (code, signal) => resolve({ code, signal, out, err })),
  );
  return { child, done };
}

describe("fresh child processes", () => {
  it("DUMPLINGS_PERSISTENCE=on enables auto-save in a fresh process (file backend, env dir)", async () => {
    const sessions = path.join(dir, `env-${++seq}`);
    server.push({ toolCalls: [{ id: "call_E1", name: "charge", arguments: { amount: 7 } }] }, { text: "Charged 7." });
    const { done } = runChild({ DUMPLINGS_PERSISTENCE: "on", DUMPLINGS_PERSISTENCE_DIR: sessions, CHILD_MODE: "turn" });
    const { code, out, err } = await done;
    expect(code, err).toBe(0);
    const { uuid } = JSON.parse(out) as { uuid: string };
    expect(readdirSync(sessions)).toContain(`${uuid}.duas`);
    const loaded = await loadState<BaseAgent>(uuid, { backend: new FileBackend({ baseDir: sessions }) });
    expect(loaded.history.map((m) => m.role)).toEqual(["user", "assistant", "tool", "assistant"]);
  });

  it("without the env var a fresh process saves nothing", async () => {
    const sessions = path.join(dir, `env-off-${++seq}`);
    server.push({ text: "no tools today" });
    const { code } = await runChild({ DUMPLINGS_PERSISTENCE_DIR: sessions, CHILD_MODE: "turn" }).done;
    expect(code).toBe(0);
    expect(existsSync(sessions)).toBe(false);
  });

  it("a child SIGKILLed in the middle of a tool call leaves a session that resumes with a valid history", async () => {
    const db = path.join(dir, `kill-${++seq}.sqlite`);
    const marker = path.join(dir, `marker-${seq}`);
    server.push({ toolCalls: [{ id: "call_K1", name: "charge", arguments: { amount: 5 } }] });
    const { child, done } = runChild({
      DUMPLINGS_PERSISTENCE: "on",
      DUMPLINGS_PERSISTENCE_BACKEND: "sqlite",
      DUMPLINGS_PERSISTENCE_DB: db,
      DUMPLINGS_PERSISTENCE_KEY: "name",
      AGENT_NAME: "killed-agent",
      CHILD_MODE: "hang",
      MARKER: marker,
    });
    while (!existsSync(marker)) await new Promise((r) => setTimeout(r, 20));
    child.kill("SIGKILL");
    expect((await done).signal).toBe("SIGKILL");

    const backend = new SQLiteBackend({ dbPath: db });
    const agent = await loadState<BaseAgent>("killed-agent", { backend });
    // the checkpoint written before the tool ran: the call is there, its result is not
    expect(agent.pendingToolCalls().map((c) => c.id)).toEqual(["call_K1"]);
    expect(isHistoryValid("openai", agent.history)).toBe(false);
    configure({ enabled: true, backend });
    const before = server.count;
    server.push({ text: "The charge was interrupted; shall I retry?" });
    const result = await agent.conversationWithTool("hello?", { maxRetries: 0 });
    expect(result.text).toContain("interrupted");
    expect(server.requests[before]?.status).toBe(200); // the provider accepted the repaired history
    const resumed = await loadState<BaseAgent>("killed-agent", { backend });
    expect(resumed.history[2]).toMatchObject({ role: "tool", tool_call_id: "call_K1", content: INTERRUPTED_RESULT });
    expect(isHistoryValid("openai", resumed.history)).toBe(true);
    expect(resumed.pendingToolCalls()).toEqual([]);
    expect(resumed.history).toEqual(agent.history);
    await backend.close?.();
  });
});
