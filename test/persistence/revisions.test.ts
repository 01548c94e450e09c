/**
 * Revisions and compare-and-set as seen from saveState/autoSave, and the
 * append-only saves the persistence layer asks for (baseLength), counted on
 * a wrapper backend around real built-in backends.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  type AgentState,
  autoSave,
  BaseAgent,
  ConflictError,
  deleteState,
  FileBackend,
  loadState,
  MemoryBackend,
  type Message,
  type ReadResult,
  type StateBackend,
  trackedRevision,
  type WriteOptions,
  type WriteResult,
} from "../../src/index.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-rev-"));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

/** Wraps a real backend and records every write() call and how many messages it physically wrote. */
class CountingBackend implements StateBackend {
  readonly name: string;
  readonly writes: { options: WriteOptions; result: WriteResult; historyLength: number }[] = [];
  constructor(readonly inner: StateBackend) {
    this.name = `counting-${inner.name}`;
  }
  get written(): number {
    return this.writes.reduce((n, w) => n + w.result.written, 0);
  }
  save(key: string, state: AgentState) {
    return this.inner.save(key, state);
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
  async write(key: string, state: AgentState, options: WriteOptions = {}): Promise<WriteResult> {
    const result = await this.inner.write!(key, state, options);
    this.writes.push({ options: { ...options }, result, historyLength: state.history.length });
    return result;
  }
  read(key: string): Promise<ReadResult | undefined> {
    return this.inner.read!(key);
  }
}

const inners: [string, () => StateBackend][] = [
  ["memory", () => new MemoryBackend()],
  ["file", () => new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) })],
  ["sqlite", () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "d-")), "s.db") })],
];

// The longest bundled OpenAI conversation, capped at 60 messages (the file backend fsyncs every save).
const longest = loadSampleConversations({ source: "bundled", protocol: "openai" })
  .sort((a, b) => b.messages.length - a.messages.length)
  .at(0)!;
const sample = { ...longest, messages: longest.messages.slice(0, 60) };

describe.each(inners)("on the %s backend", (_name, make) => {
  it("a save after every message of a real conversation sends only the new message (append-only, O(new))", async () => {
    const backend = new CountingBackend(make());
    const agent = new BaseAgent({ name: "appender" });
    for (const m of sample.messages) {
      agent.history.push(m);
      await agent.saveState("conv", { backend });
    }
    const n = sample.messages.length;
    expect(backend.writes).toHaveLength(n);
    expect(backend.written).toBe(n); // each message physically written exactly once
    expect(backend.writes[0]!.options.expectedRevision).toBeNull(); // a never-saved agent may only create the key
    backend.writes.slice(1).forEach((w, i) => {
      expect(w.options.baseLength).toBe(i + 1);
      expect(w.options.expectedRevision).toBe(backend.writes[i]!.result.revision);
      expect(w.result.rewritten).toBe(false);
    });
    const loaded = await loadState("conv", { backend });
    expect(loaded.history).toEqual(sample.messages);
    // A loaded agent appends too.
    loaded.history.push({ role: "user", content: "one more" });
    const r = await loaded.saveState(undefined, { backend });
    expect(r.written).toBe(1);
    expect(backend.writes.at(-1)!.options.baseLength).toBe(n);
  });

  it("an edit in the middle of the history is detected and rewrites the whole history", async () => {
    const backend = new CountingBackend(make());
    const agent = new BaseAgent({ name: "editor" });
    agent.history.push(
      { role: "user", content: "a" },
      { role: "assistant", content: "b" },
      { role: "user", content: "c" },
    );
    await agent.saveState("edit", { backend });
    agent.history[1] = { role: "assistant", content: "B (edited)" };
    agent.history.push({ role: "assistant", content: "d" });
    const r = await agent.saveState("edit", { backend });
    expect(backend.writes[1]!.options.baseLength).toBeUndefined();
    expect(r.rewritten).toBe(true);
    expect(r.written).toBe(4);
    // A removed message is detected too.
    agent.history.splice(0, 1);
    await agent.saveState("edit", { backend });
    expect(backend.writes[2]!.options.baseLength).toBeUndefined();
    expect((await loadState("edit", { backend })).history).toEqual(agent.history);
  });

  it("an in-place edit of the last stored message is detected by its fingerprint", async () => {
    const backend = new CountingBackend(make());
    const agent = new BaseAgent({ name: "streamer" });
    const partial: Message = { role: "assistant", content: "Hel" };
    agent.history.push({ role: "user", content: "hi" }, partial);
    await agent.saveState("fp", { backend });
    (partial as { content: string }).content = "Hello!";
    await agent.saveState("fp", { backend });
    expect(backend.writes[1]!.options.baseLength).toBeUndefined();
    expect((await loadState("fp", { backend })).history[1]).toEqual({ role: "assistant", content: "Hello!" });
  });

  it("two instances loaded from one key: the second save is a ConflictError naming both revisions, nothing lost", async () => {
    const backend = make();
    const origin = new BaseAgent({ name: "shared", history: [{ role: "user", content: "start" }] });
    await origin.saveState("shared", { backend });
    const a = await loadState("shared", { backend });
    const b = await loadState("shared", { backend });
    a.history.push({ role: "assistant", content: "from A" });
    b.history.push({ role: "assistant", content: "from B" });
    const ra = await a.saveState();
    const e = await b.saveState().catch((x) => x);
    expect(e).toBeInstanceOf(ConflictError);
    expect(e.expectedRevision).toBe(ra.revision! - 1);
    expect(e.actualRevision).toBe(ra.revision);
    expect(e.message).toContain(String(ra.revision));
    expect((await loadState("shared", { backend })).history.at(-1)).toEqual({ role: "assistant", content: "from A" });
    // force overwrites on purpose
    await b.saveState(undefined, { force: true });
    expect((await loadState("shared", { backend })).history.at(-1)).toEqual({ role: "assistant", content: "from B" });
    // and A is now stale in turn
    a.history.push({ role: "user", content: "late" });
    await expect(a.saveState()).rejects.toBeInstanceOf(ConflictError);
  });

  it("ifRevision overrides the tracked revision; null means 'only if nothing is stored'", async () => {
    const backend = make();
    const agent = new BaseAgent({ name: "cas", history: [{ role: "user", content: "x" }] });
    const r1 = await agent.saveState("cas", { backend, ifRevision: null });
    expect(trackedRevision(agent)).toBe(r1.revision);
    await expect(agent.saveState("cas", { backend, ifRevision: null })).rejects.toBeInstanceOf(ConflictError);
    await expect(agent.saveState("cas", { backend, ifRevision: r1.revision! + 5 })).rejects.toBeInstanceOf(
      ConflictError,
    );
    const r2 = await agent.saveState("cas", { backend, ifRevision: r1.revision });
    expect(r2.revision).toBe(r1.revision! + 1);
  });

  it("a delete followed by a late save from a stale instance does not bring the session back", async () => {
    const backend = make();
    const agent = new BaseAgent({ name: "gone", history: [{ role: "user", content: "x" }] });
    await agent.saveState("gone", { backend });
    expect(await deleteState("gone", { backend })).toBe(true);
    agent.history.push({ role: "assistant", content: "late" });
    await expect(agent.saveState()).rejects.toBeInstanceOf(ConflictError);
    expect(await backend.listKeys()).not.toContain("gone");
  });

  it("autoSave reports a conflict as a persistError event and returns false, never throwing", async () => {
    const backend = make();
    const origin = new BaseAgent({ name: "auto", history: [{ role: "user", content: "start" }] });
    await origin.saveState("auto", { backend });
    const a = await loadState("auto", { backend });
    const b = await loadState("auto", { backend });
    a.history.push({ role: "assistant", content: "A" });
    b.history.push({ role: "assistant", content: "B" });
    const errors: unknown[] = [];
    b.on("persistError", (e) => errors.push(e));
    const log = vi.spyOn(console, "error").mockImplementation(() => undefined);
    try {
      expect(await autoSave(a)).toBe(true);
      expect(await autoSave(b)).toBe(false);
      expect(await autoSave(b)).toBe(false);
      expect(errors).toHaveLength(2);
      expect(errors[0]).toBeInstanceOf(ConflictError);
      expect(log).not.toHaveBeenCalled(); // handled by the listener: not also printed
      // nobody listens: logged once for the same failure, not at every save
      b.removeAllListeners("persistError");
      expect(await autoSave(b)).toBe(false);
      expect(await autoSave(b)).toBe(false);
      expect(log).toHaveBeenCalledTimes(1);
      expect(String(log.mock.calls[0]?.[0])).toMatch(/^\[dumplings\] auto-save of agent "auto" failed: /);
    } finally {
      log.mockRestore();
    }
  });

  it("concurrent saves of one agent are serialised, so they never conflict with each other", async () => {
    const backend = new CountingBackend(make());
    const agent = new BaseAgent({ name: "busy" });
    const saves: Promise<unknown>[] = [];
    for (let i = 0; i < 10; i++) {
      agent.history.push({ role: "user", content: `m${i}` });
      saves.push(agent.saveState("busy", { backend }));
    }
    await Promise.all(saves);
    expect((await loadState("busy", { backend })).history).toHaveLength(10);
    expect(backend.written).toBeLessThanOrEqual(10 + 10); // no repeated full rewrites
  });
});
