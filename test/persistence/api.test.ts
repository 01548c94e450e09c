/**
 * The persistence API end to end against real backends (memory, file, SQLite
 * in temp dirs) and a custom four-method backend.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { packageVersion } from "../../src/core/version.js";
import {
  type AgentState,
  AnthropicAgent,
  BackendError,
  BaseAgent,
  configure,
  deleteState,
  exportStateString,
  FileBackend,
  FormatError,
  InvalidKeyError,
  iterHistory,
  listStates,
  loadState,
  loadStateString,
  MemoryBackend,
  type Message,
  NonJsonValueError,
  registerBackend,
  type StateBackend,
  StateNotFoundError,
  saveState,
  UnsupportedOperationError,
} from "../../src/index.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-api-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** A custom backend with only the four seed methods; `load` returns undefined for a missing key. */
class PlainBackend implements StateBackend {
  readonly name = "plain";
  readonly store = new Map<string, string>();
  saves = 0;
  save(key: string, state: AgentState): void {
    this.saves++;
    this.store.set(key, JSON.stringify(state));
  }
  load(key: string): AgentState | undefined {
    const s = this.store.get(key);
    return s === undefined ? undefined : (JSON.parse(s) as AgentState);
  }
  delete(key: string): boolean {
    return this.store.delete(key);
  }
  listKeys(): string[] {
    return [...this.store.keys()];
  }
}

const samples = loadSampleConversations({ source: "bundled" });

function agentFor(protocol: "openai" | "anthropic", history: Message[], name = "sample"): BaseAgent {
  const Cls = protocol === "openai" ? BaseAgent : AnthropicAgent;
  return new Cls({ name, apiKeyEnv: "OPENAI_API_KEY", modelName: "gpt-4o-mini", history });
}

const backends: [string, () => StateBackend][] = [
  ["memory", () => new MemoryBackend()],
  ["file", () => new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "file-")) })],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "db-")), "s.db") })],
  ["custom four-method", () => new PlainBackend()],
];

describe.each(backends)("saveState/loadState on the %s backend", (_name, make) => {
  it("round-trips every bundled real conversation exactly, with the agent's class, uuid, name and config", async () => {
    const backend = make();
    expect(samples.length).toBeGreaterThan(0);
    for (const sample of samples) {
      const agent = agentFor(sample.protocol, sample.messages, sample.id);
      agent.currentTaskId = "task-7";
      const { key } = await saveState(agent, sample.id, { backend });
      expect(key).toBe(sample.id);
      const loaded = await loadState(sample.id, { backend });
      expect(loaded).toBeInstanceOf(sample.protocol === "openai" ? BaseAgent : AnthropicAgent);
      expect(loaded.constructor).toBe(agent.constructor);
      expect(loaded.history).toEqual(sample.messages);
      expect(loaded.uuid).toBe(agent.uuid);
      expect(loaded.name).toBe(sample.id);
      expect(loaded.config).toEqual(agent.config);
      expect(loaded.currentTaskId).toBe("task-7");
    }
    expect((await listStates({ backend })).sort()).toEqual(samples.map((s) => s.id).sort());
  });

  it("deletes, lists, and reports a missing key as StateNotFoundError", async () => {
    const backend = make();
    const agent = agentFor("openai", [{ role: "user", content: "hi" }]);
    await saveState(agent, "a", { backend });
    await saveState(agent, "b", { backend });
    expect(await listStates({ backend })).toEqual(["a", "b"]);
    expect(await deleteState("a", { backend })).toBe(true);
    expect(await deleteState("a", { backend })).toBe(false);
    expect(await listStates({ backend })).toEqual(["b"]);
    await expect(loadState("a", { backend })).rejects.toBeInstanceOf(StateNotFoundError);
  });

  it("refuses invalid keys before any backend call, writing nothing", async () => {
    const backend = make();
    const agent = agentFor("openai", [{ role: "user", content: "hi" }]);
    for (const bad of ["", "../x", "a/b", "a\\b", ".hidden", "nul\u0000", "x".repeat(201)]) {
      await expect(saveState(agent, bad, { backend })).rejects.toBeInstanceOf(InvalidKeyError);
      await expect(loadState(bad, { backend })).rejects.toBeInstanceOf(InvalidKeyError);
      await expect(deleteState(bad, { backend })).rejects.toBeInstanceOf(InvalidKeyError);
    }
    expect(await listStates({ backend })).toEqual([]);
  });

  it("refuses a history value JSON cannot carry, naming the message index and path, and writes nothing", async () => {
    const backend = make();
    const agent = agentFor("openai", [{ role: "user", content: "ok" }]);
    agent.history.push({ role: "assistant", content: "x", meta: { n: 10n } } as unknown as Message);
    const err = await saveState(agent, "bad", { backend }).catch((e) => e);
    expect(err).toBeInstanceOf(NonJsonValueError);
    expect(err.messageIndex).toBe(1);
    expect(err.path).toBe("history[1].meta.n");
    expect(await listStates({ backend })).toEqual([]);
  });

  it("streams a stored history with iterHistory", async () => {
    const backend = make();
    const sample = samples[0]!;
    await saveState(agentFor(sample.protocol, sample.messages), "stream", { backend });
    const seen: Message[] = [];
    for await (const m of iterHistory("stream", { backend })) seen.push(m);
    expect(seen).toEqual(sample.messages);
    const missing = (async () => {
      for await (const _ of iterHistory("nothing-here", { backend })) {
        // unreachable
      }
    })();
    await expect(missing).rejects.toBeInstanceOf(StateNotFoundError);
  });
});

describe("custom backends keep working through whole-state saves", () => {
  it("uses save() when there is no write(), and refuses ifRevision it cannot honour", async () => {
    const backend = new PlainBackend();
    const agent = agentFor("openai", [{ role: "user", content: "hi" }]);
    const r = await saveState(agent, "k", { backend });
    expect(r).toEqual({ key: "k", written: 1, rewritten: true });
    expect(backend.saves).toBe(1);
    await expect(saveState(agent, "k", { backend, ifRevision: 1 })).rejects.toBeInstanceOf(UnsupportedOperationError);
    expect(backend.saves).toBe(1);
  });

  it("wraps a driver failure in BackendError with the cause, naming the key", async () => {
    const cause = new Error("disk on fire");
    const broken: StateBackend = {
      name: "broken",
      save() {
        throw cause;
      },
      load() {
        throw cause;
      },
      delete: () => false,
      listKeys: () => [],
    };
    const agent = agentFor("openai", []);
    const e = await saveState(agent, "k1", { backend: broken }).catch((x) => x);
    expect(e).toBeInstanceOf(BackendError);
    expect(e.cause).toBe(cause);
    expect(e.message).toContain('"k1"');
    expect(e.message).toContain("disk on fire");
    await expect(loadState("k1", { backend: broken })).rejects.toBeInstanceOf(BackendError);
  });

  it("validates what a custom backend returns: a malformed record fails, never a partial agent", async () => {
    const backend = new PlainBackend();
    backend.store.set("junk", JSON.stringify({ meta: { formatVersion: "1.0" }, history: "nope" }));
    await expect(loadState("junk", { backend })).rejects.toMatchObject({ code: "INVALID_STATE" });
  });
});

describe("custom backends with read()", () => {
  it("a malformed header from read() is an InvalidStateError, never a partial agent", async () => {
    const good = new BaseAgent({ name: "ok" }).toState();
    const backend: StateBackend = {
      name: "reader",
      save() {},
      load: () => undefined,
      delete: () => false,
      listKeys: () => [],
      read: async (key) =>
        key === "bad"
          ? { state: { ...good, state: { currentTaskId: 5 } } as unknown as AgentState, revision: 1 }
          : key === "missing"
            ? undefined
            : { state: good, revision: 3 },
    };
    await expect(loadState("bad", { backend })).rejects.toMatchObject({ code: "INVALID_STATE" });
    await expect(loadState("missing", { backend })).rejects.toBeInstanceOf(StateNotFoundError);
    expect((await loadState("fine", { backend })).name).toBe("ok");
  });
});

describe("backends by name, through the registry", () => {
  it("saves to a registered custom backend by name and to the configured default", async () => {
    const plain = new PlainBackend();
    registerBackend("plain-api-test", plain);
    const agent = agentFor("openai", [{ role: "user", content: "hi" }]);
    await saveState(agent, "named", { backend: "plain-api-test" });
    expect(plain.store.has("named")).toBe(true);
    configure({ backend: "plain-api-test" });
    const other = agentFor("openai", [{ role: "user", content: "yo" }]);
    await saveState(other, "by-default");
    expect(plain.store.has("by-default")).toBe(true);
    expect((await loadState("by-default")).history).toEqual([{ role: "user", content: "yo" }]);
    await expect(saveState(agent, "x", { backend: "no-such-backend" })).rejects.toMatchObject({
      code: "UNKNOWN_BACKEND",
    });
    configure({ backend: "memory" });
  });
});

describe("default keys and the agent's home", () => {
  beforeEach(() => configure({ backend: "memory", keyStrategy: "uuid" }));

  it("uses the uuid by default and the name with keyStrategy 'name'", async () => {
    const a = agentFor("openai", [], "alice");
    expect((await saveState(a)).key).toBe(a.uuid);
    configure({ keyStrategy: "name" });
    const b = agentFor("openai", [], "bob");
    expect((await saveState(b)).key).toBe("bob");
    expect((await loadState("bob")).uuid).toBe(b.uuid);
  });

  it("keeps saving a loaded agent under the key it was loaded from", async () => {
    const a = agentFor("openai", [{ role: "user", content: "1" }], "carol");
    await saveState(a, "session-1");
    const loaded = await loadState("session-1");
    loaded.history.push({ role: "assistant", content: "2" });
    expect((await loaded.saveState()).key).toBe("session-1");
    expect((await loadState("session-1")).history).toHaveLength(2);
  });

  it("keeps its key's backend for that key; a new key goes to the default backend, where loadState finds it", async () => {
    const home = new MemoryBackend();
    await saveState(agentFor("openai", [], "dave"), "d1", { backend: home });
    const loaded = await loadState("d1", { backend: home });
    loaded.history.push({ role: "user", content: "again" });
    await loaded.saveState();
    expect((await loadState("d1", { backend: home })).history).toHaveLength(1);
    await loaded.saveState("d2");
    expect((await home.listKeys()).sort()).toEqual(["d1"]);
    expect((await loadState("d2")).uuid).toBe(loaded.uuid);
  });

  it("refuses an agent name that is not a valid key under the name strategy", async () => {
    configure({ keyStrategy: "name" });
    await expect(saveState(agentFor("openai", [], "a/b"))).rejects.toBeInstanceOf(InvalidKeyError);
  });
});

describe(".duas strings", () => {
  it("exportStateString/loadStateString round-trip every bundled conversation", async () => {
    for (const sample of samples) {
      const agent = agentFor(sample.protocol, sample.messages, sample.id);
      agent.config.prompt = "Line one\nline = two # not a comment\n\t[x] trailing  ";
      const text = exportStateString(agent);
      expect(text).toContain(`schema_version = ${packageVersion()}`);
      const back = await loadStateString(text);
      expect(back.history).toEqual(sample.messages);
      expect(back.config).toEqual(agent.config);
      expect(back.constructor).toBe(agent.constructor);
      expect(exportStateString(back).replace(/saved_at = .*/, "")).toBe(text.replace(/saved_at = .*/, ""));
    }
  });

  it("schema_version is the package's own version from package.json", async () => {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as {
      version: string;
    };
    const state = agentFor("openai", []).toState();
    expect(state.meta.schemaVersion).toBe(pkg.version);
    expect(exportStateString(agentFor("openai", []))).toContain(`\nschema_version = ${pkg.version}\n`);
  });

  it("malformed or truncated text is a FormatError with a line number, never a partial agent", async () => {
    const text = exportStateString(
      agentFor("openai", [
        { role: "user", content: "a" },
        { role: "assistant", content: "b" },
      ]),
    );
    const cut = text.slice(0, text.lastIndexOf("{"));
    const e = await loadStateString(cut).catch((x) => x);
    expect(e).toBeInstanceOf(FormatError);
    expect(typeof e.line === "number" || /message_count/.test(e.message)).toBe(true);
    await expect(loadStateString("not a duas file\n")).rejects.toBeInstanceOf(FormatError);
  });
});
