/**
 * SQLite `sessions` rows written by the original design (dumplingsAI 0.4.0):
 * one table, `meta`/`config`/`state` as snake_case JSON, the history as JSONL
 * in the row. Opening migrates the table; every read path — `load`, `read`,
 * `readHeader`, `iterHistory`, `loadState`, `dumplings show`/`export` — then
 * returns the state in the current shape, and the next save writes that shape.
 * Rows of the original layout written after the migration (an old process
 * still running) load too.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import Database from "better-sqlite3";
import { afterAll, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { encodeState } from "../../src/core/codec/encode.js";
import { FormatError } from "../../src/core/errors.js";
import type { Message } from "../../src/core/messages.js";
import type { AgentState } from "../../src/core/state.js";
import { type BaseAgent, loadState, saveState } from "../../src/index.js";
import { runCli, runJson } from "../cli/run-cli.js";

const dir = mkdtempSync(path.join(tmpdir(), "dumplings-sqlite-original-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
const freshPath = () => path.join(dir, `o${n++}.db`);

const HISTORY: Message[] = [
  { role: "system", content: "You are a helpful weather assistant." },
  { role: "user", content: "What's the weather in Paris?" },
  {
    role: "assistant",
    content: null,
    tool_calls: [{ id: "call_1", type: "function", function: { name: "weather", arguments: '{"city": "Paris"}' } }],
  },
  { role: "tool", tool_call_id: "call_1", content: "Sunny, 21 °C" },
  { role: "assistant", content: "Sunny, 21 °C." },
];

/** Python's json.dumps: ", " and ": " separators, non-ASCII escaped. */
const pyJson = (v: unknown): string => {
  if (Array.isArray(v)) return `[${v.map(pyJson).join(", ")}]`;
  if (v !== null && typeof v === "object") {
    return `{${Object.entries(v)
      .map(([k, x]) => `${pyJson(k)}: ${pyJson(x)}`)
      .join(", ")}}`;
  }
  return JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
};

const META = {
  format_version: "1.0",
  schema_version: "0.4.0",
  agent_uuid: "3f2b8c1e-9d4a-4e57-b6a1-0c7d2e5f8a90",
  agent_name: "weather_agent",
  protocol: "openai",
  class: "dumplings-ai:BaseAgent",
  saved_at: "2025-03-14T09:26:53.589793+00:00",
  message_count: HISTORY.length,
};
const CONFIG = {
  prompt: "You are a helpful weather assistant.",
  api_provider: "https://api.openai.com/v1/chat/completions",
  api_key_env: "OPENAI_API_KEY",
  model_name: "gpt-4o-mini",
  max_tokens: 4096,
  stream: false,
  fc_model: true,
  tool_timeout: 30,
  tool_max_workers: 4,
};

const EXPECTED: AgentState = {
  meta: {
    formatVersion: "1.0",
    schemaVersion: "0.4.0",
    agentUuid: META.agent_uuid,
    agentName: "weather_agent",
    protocol: "openai",
    class: "dumplings-ai:BaseAgent",
    savedAt: META.saved_at,
    messageCount: HISTORY.length,
  },
  config: {
    prompt: CONFIG.prompt,
    apiProvider: CONFIG.api_provider,
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

const { message_count: _count, ...META_NO_COUNT } = META;
const NOTES_META = pyJson({ ...META_NO_COUNT, format_version: 1, agent_name: "notes" });

/** A database exactly as the original design creates and fills it. */
function originalDatabase(file: string): void {
  const db = new Database(file);
  db.exec(
    "CREATE TABLE IF NOT EXISTS sessions (key TEXT PRIMARY KEY, meta TEXT, config TEXT, state TEXT, history TEXT, saved_at TEXT)",
  );
  const insert = db.prepare(
    "INSERT OR REPLACE INTO sessions (key, meta, config, state, history, saved_at) VALUES (?, ?, ?, ?, ?, ?)",
  );
  const jsonl = (h: Message[]) => h.map((m) => pyJson(m)).join("\n");
  insert.run(
    "weather",
    pyJson(META),
    pyJson(CONFIG),
    pyJson({ current_task_id: "tid-abc123", hooks: [] }),
    jsonl(HISTORY),
    "2025-03-14T09:26:53.589793",
  );
  // format_version as a JSON number, no message_count, a subclass's fields beside current_task_id.
  insert.run(
    "notes",
    NOTES_META,
    pyJson(CONFIG),
    pyJson({ current_task_id: null, hooks: ["hooks:audit"], notes: ["buy milk"], counter: 3 }),
    `${jsonl(HISTORY.slice(0, 2))}\n`,
    "2025-03-14 09:30:00",
  );
  db.close();
}

describe("SQLite rows of the original design", () => {
  it("load after the migration on open, on every read path, and the next save writes the current shape", async () => {
    const file = freshPath();
    originalDatabase(file);
    const backend = new SQLiteBackend({ dbPath: file });
    try {
      expect(backend.load("weather")).toEqual(EXPECTED);
      expect((await backend.read("weather"))?.state).toEqual(EXPECTED);
      const head = await backend.readHeader("weather");
      expect(head?.header).toEqual({ meta: EXPECTED.meta, config: EXPECTED.config, state: EXPECTED.state });
      const streamed: Message[] = [];
      for await (const m of backend.iterHistory("weather")) streamed.push(m);
      expect(streamed).toEqual(HISTORY);

      const notes = backend.load("notes");
      expect(notes.meta).toMatchObject({ formatVersion: "1.0", agentName: "notes", messageCount: 2 });
      expect(notes.state).toEqual({
        currentTaskId: null,
        hooks: ["hooks:audit"],
        fields: { notes: ["buy milk"], counter: 3 },
      });
      expect(notes.history).toEqual(HISTORY.slice(0, 2));

      const agent = await loadState<BaseAgent>("weather", { backend });
      expect(agent.currentTaskId).toBe("tid-abc123");
      agent.history.push({ role: "user", content: "And tomorrow?" });
      await saveState(agent, "weather", { backend });
    } finally {
      backend.close();
    }
    const raw = new Database(file, { readonly: true });
    const meta = JSON.parse(raw.prepare("SELECT meta FROM sessions WHERE key = 'weather'").pluck().get() as string);
    expect(meta).toMatchObject({ formatVersion: "1.0", agentUuid: META.agent_uuid, messageCount: 6 });
    // Reading never rewrites a row: the original JSON of an untouched session is still there.
    expect(raw.prepare("SELECT meta FROM sessions WHERE key = 'notes'").pluck().get()).toBe(NOTES_META);
    raw.close();
    const again = new SQLiteBackend({ dbPath: file });
    expect(again.load("weather").history).toEqual([...HISTORY, { role: "user", content: "And tomorrow?" }]);
    // The saved row holds the current shape in every part (the config was once kept in its snake_case form).
    expect(again.load("weather").config).toEqual(EXPECTED.config);
    expect(again.load("weather").state).toEqual(EXPECTED.state);
    expect((await loadState<BaseAgent>("weather", { backend: again })).currentTaskId).toBe("tid-abc123");
    again.close();
  });

  it("a row in the original layout written after the migration (an old process still running) loads too", async () => {
    const file = freshPath();
    new SQLiteBackend({ dbPath: file }).close();
    const old = new Database(file);
    old
      .prepare("INSERT INTO sessions (key, meta, config, state, history, saved_at) VALUES (?, ?, ?, ?, ?, ?)")
      .run(
        "late",
        pyJson(META),
        pyJson(CONFIG),
        pyJson({ current_task_id: "tid-abc123", hooks: [] }),
        HISTORY.map((m) => pyJson(m)).join("\n"),
        "2025-03-14T09:26:53Z",
      );
    old.close();
    const backend = new SQLiteBackend({ dbPath: file });
    expect(backend.load("late")).toEqual(EXPECTED);
    const streamed: Message[] = [];
    for await (const m of backend.iterHistory("late")) streamed.push(m);
    expect(streamed).toEqual(HISTORY);
    expect((await backend.readHeader("late"))?.header.meta).toEqual(EXPECTED.meta);
    backend.close();
  });

  it("an unknown key or a message_count that differs from the history is a FormatError naming the key", () => {
    const file = freshPath();
    originalDatabase(file);
    const db = new Database(file);
    db.prepare("UPDATE sessions SET config = ? WHERE key = 'weather'").run(pyJson({ ...CONFIG, temperature: 0.2 }));
    db.prepare("UPDATE sessions SET meta = ? WHERE key = 'notes'").run(pyJson({ ...META, message_count: 9 }));
    db.close();
    const backend = new SQLiteBackend({ dbPath: file });
    expect(() => backend.load("weather")).toThrow(FormatError);
    expect(() => backend.load("weather")).toThrow(/"weather".*unknown key "temperature" in config/);
    expect(() => backend.load("notes")).toThrow(/"notes".*message_count is 9 but the history holds 2 messages/);
    backend.close();
  });

  it("the read-only commands (ls, show) open a database of the original design that nothing has opened yet", () => {
    const file = freshPath();
    originalDatabase(file);
    const listed = runJson<unknown>(["ls", "--backend", "sqlite", "--db", file]);
    expect(JSON.stringify(listed)).toContain("weather");
    expect(JSON.stringify(listed)).toContain("notes");
    const shown = runJson<{ messages: { total: number } }>(["show", "notes", "--backend", "sqlite", "--db", file]);
    expect(shown.messages.total).toBe(2);
    // A file that holds no sessions table is still no store (nothing created).
    const other = freshPath();
    new Database(other).exec("CREATE TABLE unrelated (x)");
    expect(runCli(["ls", "--backend", "sqlite", "--db", other]).code).toBe(3);
  });

  it("dumplings show and export read the original rows (once the library has opened the file)", () => {
    const file = freshPath();
    originalDatabase(file);
    new SQLiteBackend({ dbPath: file }).close(); // the migration on open; the rows keep their original JSON
    const shown = runJson<{ messages: { total: number } }>(["show", "weather", "--backend", "sqlite", "--db", file]);
    expect(shown.messages.total).toBe(HISTORY.length);
    expect(JSON.stringify(shown)).toContain("tid-abc123");
    const out = path.join(dir, `export-${n++}.duas`);
    const r = runCli(["export", "weather", "-o", out, "--backend", "sqlite", "--db", file]);
    expect(r.code).toBe(0);
    expect(readFileSync(out, "utf8")).toBe(encodeState(EXPECTED));
  });
});
