/**
 * `.duas` files of the original design (dumplingsAI 0.4.0): `format_version = 1`
 * and plain `[STATE]` values (`current_task_id = tid-abc123`) load on every
 * read path — `decodeState`, `loadStateString`, the file backend's `load`,
 * `read`, `readHeader` and `iterHistory`, `loadState`, the CLI's `show` and
 * `export` — and the next save writes the canonical `1.0` form. A `1.0` file
 * stays strict: the original's leniencies are not accepted there.
 */
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { decodeState, decodeStateBytes } from "../../src/core/codec/bytes.js";
import { encodeState } from "../../src/core/codec/encode.js";
import { FormatError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { type BaseAgent, iterHistory, loadState, loadStateString, saveState } from "../../src/index.js";
import { runCli, runJson } from "../cli/run-cli.js";

const FIXTURES = new URL("../fixtures/original/", import.meta.url);
const fixture = (name: string) => readFileSync(new URL(name, FIXTURES), "utf8");
const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-original-duas-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const freshDir = () => {
  const dir = path.join(tmp, `d${n++}`);
  mkdirSync(dir, { recursive: true });
  return dir;
};

const HISTORY: Message[] = [
  { role: "system", content: "You are a helpful weather assistant." },
  { role: "user", content: "What's the weather in Paris?" },
  { role: "assistant", content: "Sunny, 21 °C." },
];

const EXPECTED: AgentState = {
  meta: {
    formatVersion: "1.0",
    schemaVersion: "0.4.0",
    agentUuid: "3f2b8c1e-9d4a-4e57-b6a1-0c7d2e5f8a90",
    agentName: "weather_agent",
    protocol: "openai",
    class: "dumplings-ai:BaseAgent",
    savedAt: "2025-03-14T09:26:53.589793+00:00",
    messageCount: 3,
  },
  config: {
    prompt: "You are a helpful weather assistant.",
    apiProvider: "https://api.openai.com/v1/chat/completions",
    apiKeyEnv: "OPENAI_API_KEY",
    modelName: "gpt-4o-mini",
    maxTokens: 4096,
    stream: false,
    fcModel: true,
    toolTimeout: 30,
    toolMaxWorkers: 4,
  },
  state: { currentTaskId: "tid-abc123", hooks: [], fields: {} },
  history: HISTORY,
};

describe("decoding a file of the original design", () => {
  it("reads format_version = 1 as 1.0 and a plain current_task_id as a string", () => {
    expect(decodeState(fixture("agent-0.4.duas"), { source: "agent-0.4.duas" })).toEqual(EXPECTED);
  });

  it("reads the same bytes gzip-compressed", () => {
    expect(decodeStateBytes(gzipSync(fixture("agent-0.4.duas")))).toEqual(EXPECTED);
  });

  it("reads bare [STATE] keys as subclass fields, None as null, True/False, and the format line duagent-state/1", () => {
    const state = decodeState(fixture("subclass-0.4.duas"));
    expect(state.meta.formatVersion).toBe("1.0");
    expect(state.config).toMatchObject({ stream: false, fcModel: true, maxTokens: 1024 });
    expect(state.state).toEqual({
      currentTaskId: null,
      hooks: ["hooks:audit"],
      fields: { notes: ["buy milk", "call mum"], counter: 3, mood: "cheerful", archived: false, parent: null },
    });
    // Written back in the canonical form, which reads back to the same state.
    const canonical = encodeState(state);
    expect(canonical).toContain("format_version = 1.0\n");
    expect(canonical).toContain('field.mood = "cheerful"\n');
    expect(decodeState(canonical)).toEqual(state);
  });

  it("writes the canonical form: format_version = 1.0, JSON [STATE] values", () => {
    const text = encodeState(decodeState(fixture("agent-0.4.duas")));
    expect(text).toContain("# format: duagent-state/1.0\n");
    expect(text).toContain("format_version = 1.0\n");
    expect(text).toContain('current_task_id = "tid-abc123"\n');
    expect(decodeState(text)).toEqual(EXPECTED);
  });

  it.each([
    [
      "a quoted value must still be one JSON literal",
      "current_task_id = None",
      'current_task_id = "tid',
      "current_task_id",
    ],
    ["a JSON-looking field must parse", "counter = 3", "counter = [1, 2", "counter"],
    ["a control character in a plain value", "mood = cheerful", "mood = che\u0000erful", "control characters"],
    ["a field name that is not an identifier", "counter = 3", "my-field = 1", "bad field name"],
  ])("an original file is still checked: %s", (_label, from, to, text) => {
    const original = fixture("subclass-0.4.duas");
    expect(original).toContain(`${from}\n`);
    const error = (() => {
      try {
        decodeState(original.replace(`${from}\n`, `${to}\n`), { source: "x.duas" });
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(FormatError);
    expect((error as FormatError).message).toContain(text);
    expect((error as FormatError).line).toBe(original.split("\n").indexOf(from) + 1);
  });

  it("a 1.0 file stays strict: no plain [STATE] value, no bare field, no True", () => {
    const canonical = encodeState(EXPECTED);
    for (const [from, to] of [
      ['current_task_id = "tid-abc123"', "current_task_id = tid-abc123"],
      ["hooks = []", "hooks = []\nnotes = [1]"],
      ["stream = false", "stream = False"],
    ] as const) {
      expect(canonical).toContain(from);
      expect(() => decodeState(canonical.replace(from, to))).toThrow(FormatError);
    }
  });

  it("format_version = 2 and duagent-state/2 are still unknown versions, naming the version", () => {
    const text = fixture("agent-0.4.duas");
    expect(() => decodeState(text.replace("duagent-state/1.0", "duagent-state/2"))).toThrow(
      /unknown format version "2"/,
    );
    expect(() => decodeState(text.replace("format_version = 1\n", "format_version = 2\n"))).toThrow(
      /format_version "2" does not match the format line \(1.0\)/,
    );
  });
});

describe("every read path takes the original file", () => {
  it("loadStateString restores the agent with its task id", async () => {
    const agent = await loadStateString<BaseAgent>(fixture("agent-0.4.duas"));
    expect(agent.currentTaskId).toBe("tid-abc123");
    expect(agent.name).toBe("weather_agent");
    expect(agent.history).toEqual(HISTORY);
  });

  it("the file backend's load, read, readHeader and iterHistory; loadState; a save writes 1.0", async () => {
    const dir = freshDir();
    copyFileSync(new URL("agent-0.4.duas", FIXTURES), path.join(dir, "weather.duas"));
    writeFileSync(path.join(dir, "zipped.duas.gz"), gzipSync(fixture("agent-0.4.duas")));
    const backend = new FileBackend({ baseDir: dir });
    try {
      expect(await backend.load("weather")).toEqual(EXPECTED);
      expect(await backend.load("zipped")).toEqual(EXPECTED);
      expect((await backend.read("weather"))?.state).toEqual(EXPECTED);
      const head = await backend.readHeader("weather");
      expect(head?.header.meta.formatVersion).toBe("1.0");
      expect(head?.header.state.currentTaskId).toBe("tid-abc123");
      const streamed: Message[] = [];
      for await (const m of backend.iterHistory("weather")) streamed.push(m);
      expect(streamed).toEqual(HISTORY);

      const viaApi: Message[] = [];
      for await (const m of iterHistory("weather", { backend })) viaApi.push(m);
      expect(viaApi).toEqual(HISTORY);

      const agent = await loadState<BaseAgent>("weather", { backend });
      expect(agent.currentTaskId).toBe("tid-abc123");
      agent.history.push({ role: "user", content: "And tomorrow?" });
      await saveState(agent, "weather", { backend });
      const text = readFileSync(path.join(dir, "weather.duas"), "utf8");
      expect(text).toMatch(/^format_version = 1\.0$/m);
      expect(text).toContain('current_task_id = "tid-abc123"');
      expect((await backend.load("weather")).history).toEqual([...HISTORY, { role: "user", content: "And tomorrow?" }]);
    } finally {
      await backend.close?.();
    }
  });

  it("dumplings show and export read it; export writes the canonical form", () => {
    const dir = freshDir();
    copyFileSync(new URL("agent-0.4.duas", FIXTURES), path.join(dir, "weather.duas"));
    const shown = runJson<{ meta: Record<string, unknown>; messages: { total: number } }>([
      "show",
      "weather",
      "--dir",
      dir,
    ]);
    expect(shown.messages.total).toBe(3);
    expect(JSON.stringify(shown)).toContain("tid-abc123");
    const out = path.join(dir, "out.duas");
    const r = runCli(["export", "weather", "-o", out, "--dir", dir]);
    expect(r.code).toBe(0);
    expect(readFileSync(out, "utf8")).toBe(encodeState(EXPECTED));
    // The original file itself is untouched by reading it.
    expect(readFileSync(path.join(dir, "weather.duas"), "utf8")).toBe(fixture("agent-0.4.duas"));
  });

  it("dumplings import takes the original file and stores it in the canonical form", async () => {
    const dir = freshDir();
    const r = runCli(["import", fileURLToPath(new URL("agent-0.4.duas", FIXTURES)), "--key", "imported", "--dir", dir]);
    expect(r.code).toBe(0);
    const text = readFileSync(path.join(dir, "imported.duas"), "utf8");
    expect(text).toMatch(/^format_version = 1\.0$/m);
    const backend = new FileBackend({ baseDir: dir });
    expect(await backend.load("imported")).toEqual(EXPECTED);
    await backend.close?.();
  });
});

describe("the original design's own example, with its inline # notes (issue 25)", () => {
  const EXAMPLE_HISTORY: Message[] = [
    { role: "system", content: "你是一个天气助手..." },
    { role: "user", content: "hi" },
    {
      role: "assistant",
      content: "hello",
      tool_calls: [{ id: "call_1", type: "function", function: { name: "echo", arguments: '{"text":"yo"}' } }],
    },
    { role: "tool", tool_call_id: "call_1", name: "echo", content: "echo:yo" },
  ];
  const EXAMPLE: AgentState = {
    meta: {
      formatVersion: "1.0",
      schemaVersion: "0.4.0",
      agentUuid: "abc123...",
      agentName: "weather",
      protocol: "openai",
      class: "examples.api.agents_config:WeatherAgent",
      savedAt: "2026-07-31T10:30:00+08:00",
      messageCount: 4,
    },
    config: {
      prompt: "你是一个天气助手...",
      apiProvider: "https://api.example.com/v1/chat/completions",
      apiKeyEnv: "API_KEY",
      modelName: "qwen3.5-plus",
      maxTokens: 4096,
      stream: true,
      fcModel: true,
      toolTimeout: 60,
      toolMaxWorkers: 8,
    },
    state: { currentTaskId: "tid-abc123", hooks: ["examples.api.agents_config:audit_hook"], fields: {} },
    history: EXAMPLE_HISTORY,
  };

  it("the fixture is the original's text: its notes are there", () => {
    const text = fixture("example-0.4.duas");
    expect(text).toMatch(/^schema_version = 0\.4\.0 +# \S/m);
    expect(text).toMatch(/^api_key_env = API_KEY +# \S/m);
  });

  it("loads with every value without its note: api_key_env = API_KEY, schema_version = 0.4.0", () => {
    const state = decodeState(fixture("example-0.4.duas"), { source: "example-0.4.duas" });
    expect(state.config.apiKeyEnv).toBe("API_KEY");
    expect(state.meta.schemaVersion).toBe("0.4.0");
    expect(state).toEqual(EXAMPLE);
    expect(decodeState(encodeState(state))).toEqual(EXAMPLE);
  });

  it("the file backend's load, read and readHeader, and dumplings show, read it the same", async () => {
    const dir = freshDir();
    copyFileSync(new URL("example-0.4.duas", FIXTURES), path.join(dir, "weather.duas"));
    const backend = new FileBackend({ baseDir: dir });
    try {
      expect(await backend.load("weather")).toEqual(EXAMPLE);
      expect((await backend.read("weather"))?.state).toEqual(EXAMPLE);
      expect((await backend.readHeader("weather"))?.header.config.apiKeyEnv).toBe("API_KEY");
    } finally {
      await backend.close?.();
    }
    const shown = JSON.stringify(runJson(["show", "weather", "--dir", dir]));
    expect(shown).toContain('"API_KEY"');
    expect(shown).not.toContain("不存明文");
  });

  it("a note after any kind of value, and a # that is not a note", () => {
    const canonical = encodeState(EXPECTED);
    const edit = (pairs: [string, string][]) => {
      let text = canonical;
      for (const [from, to] of pairs) {
        expect(text).toContain(`${from}\n`);
        text = text.replace(`${from}\n`, `${to}\n`);
      }
      return decodeState(text);
    };
    const noted = edit([
      ["model_name = gpt-4o-mini", "model_name = gpt-4o-mini\t# tab before the note"],
      ["max_tokens = 4096", "max_tokens = 4096   # a number"],
      ["stream = false", "stream = false # a boolean"],
      ["prompt = You are a helpful weather assistant.", 'prompt = "a # b"   # a quoted value'],
      ['current_task_id = "tid-abc123"', 'current_task_id = "t #1" # JSON'],
      ["hooks = []", 'hooks = ["m:a #b"]  # JSON with a # inside'],
    ]);
    expect(noted.config).toMatchObject({ modelName: "gpt-4o-mini", maxTokens: 4096, stream: false, prompt: "a # b" });
    expect(noted.state).toMatchObject({ currentTaskId: "t #1", hooks: ["m:a #b"] });
    // no whitespace before #, or nothing before it: the # is the value's
    const kept = edit([
      ["model_name = gpt-4o-mini", "model_name = a#b"],
      ["prompt = You are a helpful weather assistant.", "prompt = #tag"],
    ]);
    expect(kept.config).toMatchObject({ modelName: "a#b", prompt: "#tag" });
    // values the writer writes stay exact: a string holding # is quoted, never cut
    const values = ["a # b", "x\t#y", "#", " # ", "k #", "a  #b # c"];
    for (const v of values) {
      const state: AgentState = {
        ...EXPECTED,
        meta: { ...EXPECTED.meta, agentName: v },
        config: { ...EXPECTED.config, prompt: v, modelName: v },
        state: { currentTaskId: v, hooks: [], fields: { note: v, list: [v, { k: v }] } },
        history: [{ role: "user", content: v }],
      };
      state.meta.messageCount = 1;
      expect(decodeState(encodeState(state))).toEqual(state);
    }
  });
});
