/**
 * The `toolArgumentSecrets` policy on appending saves: a save with a proven stored prefix scans
 * only the messages the prefix does not cover (O(new messages), not O(history)), and still never
 * lets a secret reach the store: a new message, a replaced older one, a change of policy and a
 * loaded session are all checked.
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  BaseAgent,
  CredentialError,
  configure,
  loadState,
  MemoryBackend,
  type Message,
  saveState,
} from "../../src/index.js";
import { REDACTED } from "../../src/persistence/credentials.js";

const SECRET = "sk-test-FAKE0123456789abcdefghij";

function secretCall(id: string): Message {
  return {
    role: "assistant",
    content: null,
    tool_calls: [
      { id, type: "function", function: { name: "http_get", arguments: `{"api_key":"${SECRET}","q":"weather"}` } },
    ],
  } as Message;
}

function user(text: string): Message {
  return { role: "user", content: text };
}

function storedText(backend: MemoryBackend, key: string): Promise<string> {
  return loadState(key, { backend }).then((a) => JSON.stringify(a.history));
}

afterEach(() => {
  configure({ toolArgumentSecrets: "keep" });
});

describe("toolArgumentSecrets on appending saves", () => {
  it("refuse: appends stay O(new); a new or a replaced older message with a secret is refused, nothing written", async () => {
    configure({ toolArgumentSecrets: "refuse" });
    const backend = new MemoryBackend();
    const agent = new BaseAgent({ name: "refuse-append" });
    agent.history.push(user("a"));
    await saveState(agent, "k", { backend });
    for (let i = 0; i < 20; i++) {
      agent.history.push(user(`m${i}`));
      expect((await saveState(agent, "k")).written).toBe(1);
    }
    const before = await storedText(backend, "k");

    agent.history.push(secretCall("c1"));
    const e = await saveState(agent, "k").catch((x) => x);
    expect(e).toBeInstanceOf(CredentialError);
    expect(e.field).toBe("history[21].tool_calls[0].function.arguments");
    agent.history.pop();

    agent.history[3] = secretCall("c2"); // an older message replaced: the stored prefix is not proven, all is scanned
    const e2 = await saveState(agent, "k").catch((x) => x);
    expect(e2).toBeInstanceOf(CredentialError);
    expect(e2.field).toBe("history[3].tool_calls[0].function.arguments");
    expect(await storedText(backend, "k")).toBe(before);
  });

  it("a policy changed between saves checks the whole stored prefix again", async () => {
    const backend = new MemoryBackend();
    const agent = new BaseAgent({ name: "policy-change", history: [user("a"), secretCall("c1")] });
    await saveState(agent, "k", { backend }); // keep: stored as is
    configure({ toolArgumentSecrets: "refuse" });
    agent.history.push(user("b"));
    const e = await saveState(agent, "k").catch((x) => x);
    expect(e).toBeInstanceOf(CredentialError);
    expect(e.field).toBe("history[1].tool_calls[0].function.arguments");
  });

  it("a loaded session is checked whole at its first save", async () => {
    const backend = new MemoryBackend();
    await saveState(new BaseAgent({ name: "loaded", history: [user("a"), secretCall("c1")] }), "k", { backend });
    configure({ toolArgumentSecrets: "refuse" });
    const agent = await loadState("k", { backend });
    agent.history.push(user("b"));
    const e = await saveState(agent, "k").catch((x) => x);
    expect(e).toBeInstanceOf(CredentialError);
    expect(e.field).toBe("history[1].tool_calls[0].function.arguments");
  });

  it("redact: a secret in a new message or in the prefix never reaches the store, through appends and a full rewrite", async () => {
    configure({ toolArgumentSecrets: "redact" });
    const backend = new MemoryBackend();
    const agent = new BaseAgent({ name: "redact-append", history: [user("a")] });
    await saveState(agent, "k", { backend });
    for (let i = 0; i < 10; i++) {
      agent.history.push(user(`m${i}`));
      expect((await saveState(agent, "k")).written).toBe(1);
    }
    agent.history.push(secretCall("c1")); // arrives after a clean prefix
    expect((await saveState(agent, "k")).written).toBe(1);
    for (let i = 0; i < 5; i++) {
      agent.history.push(user(`n${i}`));
      expect((await saveState(agent, "k")).written).toBe(1);
    }
    let stored = await storedText(backend, "k");
    expect(stored).not.toContain(SECRET);
    expect(stored).toContain(REDACTED);

    agent.history[0] = user("A"); // a replaced first message: the whole history is rewritten
    const r = await saveState(agent, "k");
    expect(r.rewritten).toBe(true);
    stored = await storedText(backend, "k");
    expect(stored).not.toContain(SECRET);
    expect(stored).toContain(REDACTED);
    expect(JSON.parse(stored)).toHaveLength(17);
    expect(JSON.stringify(agent.history)).toContain(SECRET); // the agent's own messages are untouched
  });
});
