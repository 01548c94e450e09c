/**
 * Failure cases from public bug reports, against the real persistence API:
 * - pb-04 (serialization drops fields): unknown message fields and
 *   provider-specific data survive save/load on every backend, exactly;
 * - pb-11 (old records after an upgrade): a state written by an older
 *   package version (older `schema_version`, fewer `[STATE]` entries) still
 *   loads and keeps appending; an unknown future `format_version` fails
 *   closed with a FormatError naming the version.
 * (pb-10 is in classes.test.ts, pb-23 in credentials.test.ts.)
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { toModelMessages } from "../../src/agent/ai-sdk-messages.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { packageVersion } from "../../src/core/version.js";
import {
  type AgentState,
  AnthropicAgent,
  BaseAgent,
  exportStateString,
  FileBackend,
  FormatError,
  loadState,
  loadStateString,
  MemoryBackend,
  type Message,
  type StateBackend,
  saveState,
} from "../../src/index.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-cases-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A custom backend storing JSON text (whole-state saves only). */
class JsonBackend implements StateBackend {
  readonly name = "json-custom";
  readonly store = new Map<string, string>();
  save(key: string, state: AgentState) {
    this.store.set(key, JSON.stringify(state));
  }
  load(key: string) {
    const s = this.store.get(key);
    return s === undefined ? undefined : (JSON.parse(s) as AgentState);
  }
  delete(key: string) {
    return this.store.delete(key);
  }
  listKeys() {
    return [...this.store.keys()];
  }
}

const backends: [string, () => StateBackend][] = [
  ["memory", () => new MemoryBackend()],
  ["file", () => new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) })],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "d-")), "s.db") })],
  ["custom", () => new JsonBackend()],
];

/** An OpenAI history full of fields this library does not model (pb-04's approval request, vendor extras). */
const openAIHistory: Message[] = [
  { role: "system", content: "You manage files.", name: "policy" },
  {
    role: "user",
    content: [
      { type: "text", text: "delete a.txt" },
      { type: "input_audio", input_audio: { data: "AAA=", format: "wav" } },
    ],
  },
  {
    role: "assistant",
    content: null,
    refusal: null,
    annotations: [],
    tool_calls: [
      {
        id: "mcpr_001",
        type: "function",
        function: { name: "delete_file", arguments: '{"path":"a.txt"}' },
        providerData: { approval_request_id: "mcpr_001", "x-vendor-extra": [1, 2, 3] },
      },
    ],
    providerData: { type: "mcp_approval_request", server: "files", id: "mcpr_001" },
  },
  {
    role: "tool",
    tool_call_id: "mcpr_001",
    content: "approved: deleted",
    approval: { approve: true, approval_request_id: "mcpr_001" },
  },
  { role: "assistant", content: "Done.", audio: null, "x-unknown-\u0000-key": { deep: [{ nested: ["\ud83d", "→"] }] } },
] as unknown as Message[];

/** An Anthropic history with blocks and fields this library does not model. */
const anthropicHistory: Message[] = [
  { role: "user", content: [{ type: "text", text: "hi", cache_control: { type: "ephemeral" } }] },
  {
    role: "assistant",
    content: [
      { type: "thinking", thinking: "…", signature: "sig-abc" },
      { type: "redacted_thinking", data: "opaque" },
      { type: "mcp_tool_use", id: "mcptoolu_01", name: "delete_file", server_name: "files", input: { path: "a.txt" } },
      { type: "tool_use", id: "toolu_01", name: "search", input: { q: "x" }, caller: { type: "direct" } },
    ],
    stop_reason: "tool_use",
    usage: { input_tokens: 10, output_tokens: 5 },
  },
  {
    role: "user",
    content: [
      { type: "mcp_tool_result", tool_use_id: "mcptoolu_01", is_error: false, content: [{ type: "text", text: "ok" }] },
      { type: "tool_result", tool_use_id: "toolu_01", content: "found", citations: null },
    ],
  },
] as unknown as Message[];

describe("pb-04: unknown fields and provider data survive save/load exactly", () => {
  it.each(backends)("on the %s backend", async (_name, make) => {
    const backend = make();
    const oa = new BaseAgent({ name: "run-4", history: openAIHistory });
    const an = new AnthropicAgent({ name: "run-4a", history: anthropicHistory });
    const expectedOA = structuredClone(openAIHistory);
    const expectedAN = structuredClone(anthropicHistory);
    await saveState(oa, "run-4", { backend });
    await saveState(an, "run-4a", { backend });
    const loadedOA = await loadState("run-4", { backend });
    const loadedAN = await loadState("run-4a", { backend });
    expect(loadedOA.history).toEqual(expectedOA);
    expect(loadedAN.history).toEqual(expectedAN);
    expect(JSON.stringify(loadedOA.history)).toBe(JSON.stringify(expectedOA)); // key order too
    const call = (loadedOA.history[2] as unknown as { tool_calls: { providerData: Record<string, unknown> }[] })
      .tool_calls[0]!;
    expect(call.providerData["x-vendor-extra"]).toEqual([1, 2, 3]);
    // The next provider request built from the loaded history still references the approval id.
    expect(JSON.stringify(toModelMessages("openai", loadedOA.history))).toContain("mcpr_001");
    expect(JSON.stringify(toModelMessages("anthropic", loadedAN.history))).toContain("mcptoolu_01");
  });

  it("and through .duas text", async () => {
    const a = await loadStateString(exportStateString(new BaseAgent({ history: openAIHistory })));
    expect(JSON.stringify(a.history)).toBe(JSON.stringify(openAIHistory));
  });
});

describe("pb-11: records written by an older version still load; a future format fails closed", () => {
  function olderRecordText(): string {
    const agent = new BaseAgent({ name: "t11", history: [{ role: "user", content: "hi" }] });
    agent.currentTaskId = "task-1";
    return exportStateString(agent).replace(`schema_version = ${packageVersion()}`, "schema_version = 0.0.1");
  }

  it("a .duas file with an older schema_version loads, appends and re-saves on the file backend", async () => {
    const baseDir = mkdtempSync(path.join(tmp, "old-"));
    writeFileSync(path.join(baseDir, "t11.duas"), olderRecordText());
    const backend = new FileBackend({ baseDir });
    const agent = await loadState("t11", { backend });
    expect(agent.currentTaskId).toBe("task-1");
    agent.history.push({ role: "user", content: "still there?" });
    await agent.saveState();
    const again = await loadState("t11", { backend });
    expect(again.history).toEqual([
      { role: "user", content: "hi" },
      { role: "user", content: "still there?" },
    ]);
    expect(readFileSync(path.join(baseDir, "t11.duas"), "utf8")).toContain(`schema_version = ${packageVersion()}`);
    // Old and new sessions coexist.
    await new BaseAgent({ name: "new" }).saveState("t11-new", { backend });
    expect((await backend.listKeys()).sort()).toEqual(["t11", "t11-new"]);
  });

  it("an old record from a custom backend missing [STATE] entries takes the documented defaults", async () => {
    const backend = new JsonBackend();
    const state = new BaseAgent({ name: "legacy", history: [{ role: "user", content: "hi" }] }).toState();
    const legacy = JSON.parse(JSON.stringify(state)) as {
      meta: { schemaVersion: string };
      state?: unknown;
      config: { toolMaxWorkers?: number };
    };
    legacy.meta.schemaVersion = "0.0.1";
    delete legacy.state; // written before [STATE] existed
    delete legacy.config.toolMaxWorkers; // written before this config field existed
    backend.store.set("legacy", JSON.stringify(legacy));
    const agent = await loadState("legacy", { backend });
    expect(agent.currentTaskId).toBeNull();
    expect(agent.hooks).toEqual([]);
    expect(agent.config.toolMaxWorkers).toBe(4);
    agent.history.push({ role: "assistant", content: "hello again" });
    await agent.saveState();
    expect((await loadState("legacy", { backend })).history).toHaveLength(2);
  });

  it("an unknown future format_version is a FormatError naming the version, on every path", async () => {
    const future = olderRecordText().replace("format_version = 1.0", "format_version = 99.0");
    const e = await loadStateString(future, { source: "t11-future.duas" }).catch((x) => x);
    expect(e).toBeInstanceOf(FormatError);
    expect(e.version).toBe("99.0");
    expect(e.message).toContain("99.0");

    const baseDir = mkdtempSync(path.join(tmp, "future-"));
    writeFileSync(path.join(baseDir, "t11-future.duas"), future);
    await expect(loadState("t11-future", { backend: new FileBackend({ baseDir }) })).rejects.toBeInstanceOf(
      FormatError,
    );

    const custom = new JsonBackend();
    const state = new BaseAgent().toState();
    custom.store.set("t11-future", JSON.stringify({ ...state, meta: { ...state.meta, formatVersion: "99" } }));
    const ce = await loadState("t11-future", { backend: custom }).catch((x) => x);
    expect(ce).toBeInstanceOf(FormatError);
    expect(ce.message).toContain('"99"');
  });
});
