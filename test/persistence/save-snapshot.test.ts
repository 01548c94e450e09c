/**
 * What a save hands to the backend: the agent's header (`toState({ history: false })`) and a
 * history copy built in O(new messages) from the messages known to be stored. The copy must
 * behave as a snapshot: a write in flight never sees the agent's later changes, and a failed
 * write leaves nothing claimed as stored.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it, vi } from "vitest";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  type AgentState,
  BackendError,
  BaseAgent,
  MemoryBackend,
  type Message,
  type ReadResult,
  registerAgentClass,
  type StateBackend,
  type WriteOptions,
  type WriteResult,
} from "../../src/index.js";

/** A MemoryBackend whose write can be held open or made to fail once, recording what it was sent. */
class GatedBackend implements StateBackend {
  readonly name = "gated";
  readonly inner = new MemoryBackend();
  readonly sent: { length: number; baseLength: number | undefined }[] = [];
  gate: Promise<void> | undefined;
  failNext = false;
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
    await this.gate;
    if (this.failNext) {
      this.failNext = false;
      throw new Error("the store is down");
    }
    this.sent.push({ length: state.history.length, baseLength: options.baseLength });
    return this.inner.write(key, state, options);
  }
  read(key: string): Promise<ReadResult | undefined> {
    return this.inner.read(key);
  }
}

const msg = (i: number): Message => ({ role: "user", content: `m${i}` });

describe("the history a save hands to the backend", () => {
  it("is a snapshot: messages pushed while the write is in flight are not in it, and the next save appends them", async () => {
    const backend = new GatedBackend();
    const agent = new BaseAgent({ name: "snap" });
    agent.history.push(msg(0), msg(1));
    await agent.saveState("k", { backend });
    agent.history.push(msg(2));
    let open!: () => void;
    backend.gate = new Promise((r) => {
      open = r;
    });
    const saving = agent.saveState("k", { backend });
    await new Promise((r) => setTimeout(r, 10)); // the save has taken its snapshot and waits in write()
    agent.history.push(msg(3));
    agent.history[0] = { role: "user", content: "edited while in flight" };
    open();
    await saving;
    backend.gate = undefined;
    const stored = (await backend.read("k"))?.state;
    expect(stored?.history).toEqual([msg(0), msg(1), msg(2)]);
    expect(stored?.meta.messageCount).toBe(3);
    const next = await agent.saveState("k", { backend });
    expect(next.rewritten).toBe(true); // history[0] was replaced: detected, the whole history rewritten
    expect((await backend.read("k"))?.state.history).toEqual(agent.history);
  });

  it("after a failed write, the next save sends the same messages again", async () => {
    const backend = new GatedBackend();
    const agent = new BaseAgent({ name: "fail" });
    agent.history.push(msg(0));
    await agent.saveState("k", { backend });
    agent.history.push(msg(1), msg(2));
    backend.failNext = true;
    await expect(agent.saveState("k", { backend })).rejects.toBeInstanceOf(BackendError);
    agent.history.push(msg(3));
    const r = await agent.saveState("k", { backend });
    expect(backend.sent.at(-1)).toEqual({ length: 4, baseLength: 1 });
    expect(r.written).toBe(3);
    expect((await backend.read("k"))?.state.history).toEqual(agent.history);
  });

  it("an agent whose toState ignores { history: false } is saved with the history it returns", async () => {
    class OwnCopyAgent extends BaseAgent {
      override toState(): AgentState {
        const state = super.toState();
        return {
          ...state,
          history: state.history.map((m) => (m.role === "system" ? { ...m, content: "(hidden)" } : m)),
        };
      }
    }
    registerAgentClass(OwnCopyAgent, import.meta.url);
    const backend = new GatedBackend();
    const agent = new OwnCopyAgent({ name: "own" });
    agent.history.push({ role: "system", content: "not saved" }, msg(0));
    await agent.saveState("k", { backend });
    expect((await backend.read("k"))?.state.history).toEqual([{ role: "system", content: "(hidden)" }, msg(0)]);
  });

  it("toState({ history: false }) is the header of toState(), with messageCount the history's length", () => {
    const agent = new BaseAgent({ name: "h", prompt: "p" });
    agent.history.push(msg(0), msg(1));
    const header = agent.toState({ history: false });
    const { history, ...full } = agent.toState();
    expect("history" in header).toBe(false);
    expect(history).toHaveLength(2);
    expect({ ...header, meta: { ...header.meta, savedAt: "" } }).toEqual({
      ...full,
      meta: { ...full.meta, savedAt: "" },
    });
    expect(header.meta.messageCount).toBe(2);
    expect(() => agent.toState({ histroy: false } as never)).toThrow(/did you mean history/);
  });
});

describe("the fingerprint of the last stored message", () => {
  const edits: [string, (m: Record<string, unknown>) => void][] = [
    ["a nested value", (m) => ((m.tool_calls as { function: { arguments: string } }[])[0]!.function.arguments = "{}")],
    [
      "an array grown",
      (m) => (m.tool_calls as unknown[]).push({ id: "c2", type: "function", function: { name: "g", arguments: "{}" } }),
    ],
    ["a key added", (m) => (m.name = "bot")],
    [
      "keys reordered",
      (m) => {
        const { role, ...rest } = m;
        for (const k of Object.keys(m)) delete m[k];
        Object.assign(m, rest, { role });
      },
    ],
  ];
  it.each(edits)("detects %s edited in place (the whole history is rewritten)", async (_, edit) => {
    const backend = new GatedBackend();
    const agent = new BaseAgent({ name: "fp" });
    const last = {
      role: "assistant",
      content: null,
      tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: '{"x":1}' } }],
    } as Message;
    agent.history.push(msg(0), last);
    await agent.saveState("k", { backend });
    edit(last as unknown as Record<string, unknown>);
    const r = await agent.saveState("k", { backend });
    expect(r.rewritten).toBe(true);
    expect((await backend.read("k"))?.state.history).toEqual(agent.history);
    expect(JSON.stringify((await backend.read("k"))?.state.history[1])).toBe(JSON.stringify(last));
  });

  it("does not count an undefined property added in place as an edit (JSON leaves it out): an append", async () => {
    const backend = new GatedBackend();
    const agent = new BaseAgent({ name: "fp" });
    const last: Message = { role: "assistant", content: "done" };
    agent.history.push(msg(0), last);
    await agent.saveState("k", { backend });
    (last as { extra?: unknown }).extra = undefined;
    agent.history.push(msg(2));
    const r = await agent.saveState("k", { backend });
    expect(r).toMatchObject({ rewritten: false, written: 1 });
  });

  it("is not the message's JSON text: a huge last message is not serialised again by the next saves", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "dumplings-snapshot-"));
    const backend = new SQLiteBackend({ path: path.join(dir, "s.db") });
    try {
      const agent = new BaseAgent({ name: "big" });
      const huge = "tool output line\n".repeat(250_000); // ~4.3 MB
      agent.history.push(msg(0), { role: "tool", tool_call_id: "c1", content: huge } as Message);
      await agent.saveState("k", { backend });
      const original = JSON.stringify;
      let big = 0;
      const spy = vi.spyOn(JSON, "stringify").mockImplementation(((...args: Parameters<typeof JSON.stringify>) => {
        const out = original(...args);
        if (typeof out === "string" && out.length >= huge.length) big++;
        return out;
      }) as typeof JSON.stringify);
      try {
        for (let i = 2; i < 6; i++) {
          agent.history.push(msg(i));
          expect(await agent.saveState("k", { backend })).toMatchObject({ rewritten: false, written: 1 });
        }
      } finally {
        spy.mockRestore();
      }
      expect(big).toBe(0);
      expect((await backend.read("k"))?.state.history).toEqual(agent.history);
    } finally {
      backend.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
