/**
 * `BaseAgent.registerTool` takes an AI SDK `tool()` (issue 13): its
 * `inputSchema` (zod or `jsonSchema`) reaches the model as the parameter list
 * (asserted on the request the local model server recorded), its `execute`
 * runs with the validated input, and a key the agent loop cannot honour is a
 * typed error instead of being dropped.
 */
import { jsonSchema, tool } from "ai";
import { afterEach, describe, expect, it } from "vitest";
import { z } from "zod";
import { AnthropicAgent } from "../../src/agent/anthropic-agent.js";
import { BaseAgent } from "../../src/agent/base-agent.js";
import { ToolRegistrationError } from "../../src/agent/tools.js";
import { type ModelServer, type ScriptedTurn, startModelServer } from "../../src/testing/model-server.js";

let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});
process.env.DUMPLINGS_AI_SDK_TEST_KEY = "sk-test-value";

async function agentOn(Agent: typeof BaseAgent | typeof AnthropicAgent, script: ScriptedTurn[]) {
  server = await startModelServer({ script });
  const protocol = Agent === BaseAgent ? "openai" : "anthropic";
  return new Agent({
    name: `tools-${protocol}`,
    apiProvider: `${server.url}/${protocol === "openai" ? "chat/completions" : "messages"}`,
    modelName: "scripted",
    apiKeyEnv: "DUMPLINGS_AI_SDK_TEST_KEY",
  });
}

/** The parameters JSON schema of tool `name` in a recorded request body, for either wire protocol. */
function sentParameters(body: Record<string, unknown>, name: string): Record<string, unknown> | undefined {
  const tools = (body.tools ?? []) as Array<Record<string, unknown>>;
  for (const t of tools) {
    const fn = t.function as Record<string, unknown> | undefined;
    if (fn?.name === name) return fn.parameters as Record<string, unknown>;
    if (t.name === name) return t.input_schema as Record<string, unknown>;
  }
  return undefined;
}

const weatherZod = tool({
  description: "The weather in a city",
  inputSchema: z.object({ city: z.string().describe("city name"), days: z.number().int().min(1) }),
  execute: async ({ city, days }, { abortSignal }) => `${city}: sunny for ${days} days (${abortSignal?.aborted})`,
});

const weatherJson = tool({
  description: "The weather in a city",
  inputSchema: jsonSchema<{ city: string }>({
    type: "object",
    properties: { city: { type: "string", description: "city name" } },
    required: ["city"],
    additionalProperties: false,
  }),
  execute: async ({ city }) => ({ city, sky: "clear" }),
});

describe.each([
  ["BaseAgent", BaseAgent],
  ["AnthropicAgent", AnthropicAgent],
] as const)("%s.registerTool with an AI SDK tool()", (_name, Agent) => {
  it("a zod inputSchema is sent as the parameter list and execute gets the validated input", async () => {
    const agent = await agentOn(Agent, [
      { toolCalls: [{ id: "c1", name: "weather", arguments: { city: "Oslo", days: 2 } }] },
      { text: "Sunny." },
    ]);
    agent.registerTool("weather", weatherZod);
    const result = await agent.conversationWithTool("Weather in Oslo?");
    expect(result.text).toBe("Sunny.");
    const params = sentParameters(server?.requests[0]?.body ?? {}, "weather");
    expect(params).toMatchObject({
      type: "object",
      properties: { city: { type: "string", description: "city name" }, days: { type: "integer", minimum: 1 } },
      required: ["city", "days"],
    });
    expect(JSON.stringify(agent.history)).toContain("Oslo: sunny for 2 days (false)");
  });

  it("a jsonSchema() inputSchema, spread with a name, is sent as given; invalid arguments reach the model as an error", async () => {
    const agent = await agentOn(Agent, [
      { toolCalls: [{ id: "c1", name: "weather", arguments: { town: "Oslo" } }] },
      { toolCalls: [{ id: "c2", name: "weather", arguments: { city: "Oslo" } }] },
      { text: "Clear." },
    ]);
    agent.registerTool({ name: "weather", ...weatherJson });
    await agent.conversationWithTool("Weather?");
    expect(sentParameters(server?.requests[0]?.body ?? {}, "weather")).toStrictEqual({
      type: "object",
      properties: { city: { type: "string", description: "city name" } },
      required: ["city"],
      additionalProperties: false,
    });
    const history = JSON.stringify(agent.history);
    expect(history).toContain("invalid arguments for weather");
    expect(history).toContain('{\\"city\\":\\"Oslo\\",\\"sky\\":\\"clear\\"}');
  });
});

describe("registerTool's types", () => {
  it("types execute's argument from zod parameters (the README example compiles under strict TypeScript)", () => {
    const agent = new BaseAgent({ name: "typed" });
    // A compile-time check as much as a run-time one: `a` and `b` are numbers here, not implicit anys.
    const add = ({ a, b }: { a: number; b: number }): number => a + b;
    expect(() =>
      agent.registerTool({
        name: "add",
        parameters: z.object({ a: z.number(), b: z.number() }),
        execute: ({ a, b }) => add({ a, b }),
      }),
    ).not.toThrow();
  });
});

describe("registerTool refuses what it cannot honour", () => {
  it("an unknown key, an approval, a provider tool, parameters and inputSchema together", () => {
    const agent = new BaseAgent({ name: "refuse" });
    const base = { description: "d", inputSchema: z.object({}), execute: () => "ok" };
    expect(() => agent.registerTool({ name: "a", ...base, inputSchma: 1 } as never)).toThrow(ToolRegistrationError);
    expect(() => agent.registerTool({ name: "a", ...base, inputSchma: 1 } as never)).toThrow(/inputSchma/);
    expect(() => agent.registerTool("a", tool({ ...base, needsApproval: true }))).toThrow(/needsApproval/);
    expect(() => agent.registerTool("a", { ...base, toModelOutput: () => ({ type: "text", value: "" }) })).toThrow(
      /toModelOutput/,
    );
    expect(() => agent.registerTool({ name: "a", ...base, parameters: { type: "object" } } as never)).toThrow(
      /not both/,
    );
    expect(() => agent.registerTool("a", { description: "no execute", inputSchema: z.object({}) })).toThrow(
      /execute must be a function/,
    );
    expect(() => agent.registerTool("a", tool(base), { replace: true, force: true } as never)).toThrow(/force/);
    expect(agent.tools.size).toBe(0); // nothing half-registered
    agent.registerTool("a", tool(base));
    expect([...agent.tools.keys()]).toStrictEqual(["a"]);
  });
});
