/**
 * The agent state model (BaseAgent / AnthropicAgent: config, identity,
 * history, task id, hooks, toState/fromState) and the agent registry
 * (agentList, templates, resolveNameClash and its old name checkPermission).
 */
import { afterEach, describe, expect, it } from "vitest";
import {
  AgentNameTakenError,
  AgentNotFoundError,
  AnthropicAgent,
  activateTemplate,
  agentList,
  BaseAgent,
  checkPermission,
  defineTemplate,
  InvalidStateError,
  listTemplates,
  loadState,
  MemoryBackend,
  removeTemplate,
  resolveNameClash,
  TemplateNotFoundError,
} from "../../src/index.js";
import { loadSampleConversations } from "../../src/testing/samples.js";

afterEach(() => agentList.clear());

describe("BaseAgent / AnthropicAgent state", () => {
  it("is built from the [CONFIG] fields in camelCase, with defaults, a v4 uuid and an empty history", () => {
    const a = new BaseAgent({
      name: "weather",
      prompt: "Be terse.",
      apiProvider: "https://api.openai.com/v1",
      apiKeyEnv: "OPENAI_API_KEY",
      modelName: "gpt-4o-mini",
      maxTokens: 512,
      stream: true,
      fcModel: false,
      toolTimeout: 2.5,
      toolMaxWorkers: 8,
    });
    expect(a.config).toEqual({
      prompt: "Be terse.",
      apiProvider: "https://api.openai.com/v1",
      apiKeyEnv: "OPENAI_API_KEY",
      modelName: "gpt-4o-mini",
      maxTokens: 512,
      stream: true,
      fcModel: false,
      toolTimeout: 2.5,
      toolMaxWorkers: 8,
    });
    expect(a.uuid).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(a.protocol).toBe("openai");
    expect(new AnthropicAgent().protocol).toBe("anthropic");
    expect(a.history).toEqual([]);
    expect(a.currentTaskId).toBeNull();
    const d = new BaseAgent();
    expect(d.name).toBe("agent");
    expect(d.config).toMatchObject({
      maxTokens: 4096,
      stream: false,
      fcModel: true,
      toolTimeout: 60,
      toolMaxWorkers: 4,
    });
    expect(new BaseAgent({ uuid: "given-id" }).uuid).toBe("given-id");
  });

  it("refuses invalid options with a typed error naming the field", () => {
    expect(() => new BaseAgent({ maxTokens: -1 })).toThrow(InvalidStateError);
    expect(() => new BaseAgent({ maxTokens: -1 })).toThrow(/config\.maxTokens/);
    expect(() => new BaseAgent({ toolMaxWorkers: 1.5 })).toThrow(/config\.toolMaxWorkers/);
    expect(() => new BaseAgent({ uuid: "" })).toThrow(InvalidStateError);
    expect(() => new BaseAgent({ history: [{ role: "wizard", content: "x" } as never] })).toThrow(/history\[0\]/);
    // An Anthropic message is not an OpenAI tool message, and vice versa.
    expect(() => new AnthropicAgent({ history: [{ role: "tool", content: "x", tool_call_id: "1" } as never] })).toThrow(
      InvalidStateError,
    );
  });

  it("toState/fromState round-trip every real conversation, keeping unknown fields", () => {
    for (const s of loadSampleConversations({ source: "bundled" })) {
      const Cls = s.protocol === "openai" ? BaseAgent : AnthropicAgent;
      const a = new Cls({ name: s.id, history: s.messages, currentTaskId: "t-1" });
      const state = a.toState();
      expect(state.meta).toMatchObject({
        agentUuid: a.uuid,
        agentName: s.id,
        protocol: s.protocol,
        messageCount: s.messages.length,
      });
      expect(state.meta.savedAt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
      const b = Cls.fromState(state);
      expect(b).toBeInstanceOf(Cls);
      expect(b.history).toEqual(s.messages);
      expect(b.uuid).toBe(a.uuid);
      expect(b.currentTaskId).toBe("t-1");
      expect(b.history).not.toBe(state.history); // the agent owns its array
    }
  });

  it("fromState refuses a state of the other protocol", () => {
    const state = new AnthropicAgent().toState();
    expect(() => BaseAgent.fromState(state)).toThrow(/protocol anthropic/);
  });

  it("toState refuses a config made invalid after construction", () => {
    const a = new BaseAgent();
    a.config.maxTokens = 0;
    expect(() => a.toState()).toThrow(/config\.maxTokens/);
  });

  it("registerToolHook adds a hook and returns its remover", () => {
    const a = new BaseAgent();
    const h = () => undefined;
    const off = a.registerToolHook(h);
    expect(a.hooks).toEqual([h]);
    off();
    expect(a.hooks).toEqual([]);
    expect(() => a.registerToolHook(42 as never)).toThrow(TypeError);
  });

  it("Class.loadState checks the loaded class", async () => {
    const backend = new MemoryBackend();
    await new BaseAgent({ name: "plain" }).saveState("plain", { backend });
    await expect(AnthropicAgent.loadState("plain", { backend })).rejects.toBeInstanceOf(AgentNotFoundError);
    expect(await BaseAgent.loadState("plain", { backend })).toBeInstanceOf(BaseAgent);
    await new AnthropicAgent({ name: "claude" }).saveState("claude", { backend });
    expect(await BaseAgent.loadState("claude", { backend })).toBeInstanceOf(AnthropicAgent); // a subclass is a BaseAgent
  });
});

describe("agent registry", () => {
  it("resolveNameClash says what a taken name becomes; checkPermission is its deprecated old name", () => {
    const a = new BaseAgent({ name: "triage" });
    const b = new BaseAgent({ name: "triage" });
    expect(resolveNameClash(b, "rename")).toEqual({ action: "add", name: "triage" }); // the name is free
    agentList.add(a);
    expect(resolveNameClash(a)).toEqual({ action: "add", name: "triage" }); // held by the same agent
    expect(resolveNameClash(b, "replace")).toEqual({ action: "replace", name: "triage" });
    expect(resolveNameClash(b, "rename")).toEqual({ action: "rename", name: "triage-2" });
    expect(() => resolveNameClash(b)).toThrow(AgentNameTakenError);
    expect(checkPermission).toBe(resolveNameClash);
  });

  it("agentList refuses a taken name by default, and replace/rename on request (checkPermission)", () => {
    const a = new BaseAgent({ name: "support" });
    const b = new BaseAgent({ name: "support" });
    agentList.add(a);
    expect(agentList.add(a)).toBe(a); // the same agent again is fine
    const e = (() => {
      try {
        agentList.add(b);
      } catch (x) {
        return x;
      }
    })();
    expect(e).toBeInstanceOf(AgentNameTakenError);
    expect((e as AgentNameTakenError).code).toBe("AGENT_NAME_TAKEN");
    expect((e as Error).message).toContain(a.uuid);
    expect(checkPermission(b, "rename")).toEqual({ action: "rename", name: "support-2" });
    expect(agentList.add(b, { onNameTaken: "rename" }).name).toBe("support-2");
    const c = new BaseAgent({ name: "support" });
    expect(checkPermission(c, "rename")).toEqual({ action: "rename", name: "support-3" });
    agentList.add(c, { onNameTaken: "replace" });
    expect(agentList.get("support")).toBe(c);
    expect(agentList.findByUuid(b.uuid)).toBe(b);
    expect([...agentList.keys()].sort()).toEqual(["support", "support-2"]);
    expect(agentList.delete(c)).toBe(true);
    expect(agentList.has("support")).toBe(false);
  });

  it("a name like __proto__ is just a name", () => {
    const a = new BaseAgent({ name: "__proto__" });
    agentList.add(a);
    expect(agentList.get("__proto__")).toBe(a);
    expect(agentList.size).toBe(1);
  });

  it("templates: define, activate into agentList, unknown name lists the defined ones", () => {
    defineTemplate("triage", () => new AnthropicAgent({ prompt: "Sort tickets." }));
    expect(() => defineTemplate("triage", () => new BaseAgent())).toThrow(/already defined/);
    expect(listTemplates()).toContain("triage");
    const t = activateTemplate("triage");
    expect(t).toBeInstanceOf(AnthropicAgent);
    expect(t.name).toBe("triage");
    expect(agentList.get("triage")).toBe(t);
    expect(() => activateTemplate("triage")).toThrow(AgentNameTakenError);
    expect(activateTemplate("triage", { onNameTaken: "rename" }).name).toBe("triage-2");
    const e = (() => {
      try {
        activateTemplate("nope");
      } catch (x) {
        return x;
      }
    })();
    expect(e).toBeInstanceOf(TemplateNotFoundError);
    expect((e as Error).message).toContain("triage");
    expect(removeTemplate("triage")).toBe(true);
  });

  it("loadState({ register: true }) adds the loaded agent, applying the name policy", async () => {
    const backend = new MemoryBackend();
    await new BaseAgent({ name: "desk" }).saveState("desk-1", { backend });
    const first = await loadState("desk-1", { backend, register: true });
    expect(agentList.get("desk")).toBe(first);
    // Loading again without register leaves agentList alone (no leak, no error).
    const plain = await loadState("desk-1", { backend });
    expect(agentList.get("desk")).toBe(first);
    expect(plain).not.toBe(first);
    await expect(loadState("desk-1", { backend, register: true })).rejects.toBeInstanceOf(AgentNameTakenError);
    const renamed = await loadState("desk-1", { backend, register: true, onNameTaken: "rename" });
    expect(renamed.name).toBe("desk-2");
  });
});
