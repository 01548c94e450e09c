/**
 * What a save hands to the backend: the agent's header (`toState({ history: false })`) and a
 * history copy built in O(new messages) from the messages known to be stored. The copy must
 * behave as a snapshot: a write in flight never sees the agent's later changes, and a failed
 * write leaves nothing claimed as stored.
 */
import { describe, expect, it } from "vitest";
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
