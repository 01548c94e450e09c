/**
 * `saveState(agent, options)` and `agent.saveState(options)`: the options may
 * come second when the key is left to its default (found by a new user's
 * trial: the object used to be taken as the key, "[object Object]").
 */
import { describe, expect, it } from "vitest";
import { BaseAgent, InvalidOptionError, loadState, MemoryBackend, saveState } from "../../src/index.js";

describe("saveState with options and no key", () => {
  it("saves under the default key with the given backend, and again under the agent's home", async () => {
    const backend = new MemoryBackend();
    const agent = new BaseAgent({ name: "opts-only" });
    agent.history.push({ role: "user", content: "one" });
    const first = await saveState(agent, { backend });
    expect(first.key).toBe(agent.uuid);
    expect(backend.listKeys()).toEqual([agent.uuid]);
    agent.history.push({ role: "user", content: "two" });
    const second = await agent.saveState({ backend, ifRevision: first.revision });
    expect(second).toMatchObject({ key: agent.uuid, revision: (first.revision as number) + 1, written: 1 });
    const back = await loadState(agent.uuid, { backend });
    expect(back.history).toEqual(agent.history);
  });

  it("refuses options given twice, and unknown options, with InvalidOptionError and nothing written", async () => {
    const backend = new MemoryBackend();
    const agent = new BaseAgent({ name: "twice" });
    await expect(saveState(agent, { backend } as never, { backend })).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(agent.saveState({ backend } as never, { backend })).rejects.toBeInstanceOf(InvalidOptionError);
    await expect(saveState(agent, { backend, bakend: 1 } as never)).rejects.toBeInstanceOf(InvalidOptionError);
    expect(backend.listKeys()).toEqual([]);
  });
});
