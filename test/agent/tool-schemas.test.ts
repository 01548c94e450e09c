/**
 * Every schema a user has works as a tool's parameters (issue 23): zod 3 (the
 * README's `parameters` pattern, which used to send the model zod's internals
 * and throw `function is not iterable`), zod 3 from before Standard Schema,
 * zod 4, a JSON Schema object, and the AI SDK's `jsonSchema()` / `tool()`,
 * under `parameters` or `inputSchema`. Each is sent to the model as a real
 * JSON Schema (asserted on the request the local model server recorded) and
 * each validates a call's arguments with its own validator.
 */
import { jsonSchema, tool } from "ai";
import { afterEach, describe, expect, it } from "vitest";
import { z as z4 } from "zod";
import { z as z3 } from "zod/v3";
import { BaseAgent } from "../../src/agent/base-agent.js";
import {
  type JsonSchemaObject,
  runToolCalls,
  type ToolDefinition,
  ToolRegistrationError,
  toAiSdkTools,
} from "../../src/agent/tools.js";
import { toToolSchema } from "../../src/core/tool-schema.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

/** zod 3 as it was before 3.24: no Standard Schema interface. */
function withoutStandard<T extends object>(schema: T): T {
  return new Proxy(schema, { has: (target, key) => key !== "~standard" && Reflect.has(target, key) });
}

const json: JsonSchemaObject & { type: "object" } = {
  type: "object",
  properties: { city: { type: "string" }, days: { type: "integer" } },
  required: ["city", "days"],
  additionalProperties: false,
};

const schemas: Array<[string, unknown]> = [
  ["zod 4", z4.object({ city: z4.string(), days: z4.number().int() })],
  ["zod 3", z3.object({ city: z3.string(), days: z3.number().int() })],
  ["zod 3 before Standard Schema", withoutStandard(z3.object({ city: z3.string(), days: z3.number().int() }))],
  ["a JSON Schema object", json],
  ["jsonSchema()", jsonSchema(json as Parameters<typeof jsonSchema>[0])],
];

describe.each(schemas)("a tool whose schema is %s", (_kind, schema) => {
  it.each(["parameters", "inputSchema"] as const)(
    "under %s: the model gets its JSON Schema and the tool its arguments",
    async (key) => {
      server = await startModelServer({
        script: [{ toolCalls: [{ id: "c1", name: "weather", arguments: { city: "Oslo", days: 2 } }] }, { text: "ok" }],
      });
      const agent = new BaseAgent({
        name: "schemas",
        apiProvider: `${server.url}/chat/completions`,
        modelName: "m",
        apiKeyEnv: "",
      });
      const calls: unknown[] = [];
      agent.registerTool({
        name: "weather",
        [key]: schema,
        execute: (args: unknown) => {
          calls.push(args);
          return "sunny";
        },
      } as ToolDefinition);
      expect((await agent.conversationWithTool("Weather?")).text).toBe("ok");
      expect(calls).toEqual([{ city: "Oslo", days: 2 }]);
      const tools = server.requests[0]?.body.tools as Array<{ function: { name: string; parameters: unknown } }>;
      const sent = tools.find((t) => t.function.name === "weather")?.function.parameters;
      expect(sent).toMatchObject({
        type: "object",
        properties: { city: { type: "string" }, days: { type: "integer" } },
        required: ["city", "days"],
      });
      expect(JSON.stringify(sent)).not.toContain("_def");
    },
  );

  it("arguments that do not match are refused with the schema's reason, the tool not run", async () => {
    let ran = false;
    const tools = new Map<string, ToolDefinition>([
      ["weather", { name: "weather", parameters: schema as ToolDefinition["parameters"], execute: () => (ran = true) }],
    ]);
    const [outcome] = await runToolCalls([{ id: "c1", name: "weather", arguments: '{"city":"Oslo","days":"two"}' }], {
      tools,
      taskId: "t",
    });
    expect(ran).toBe(false);
    expect(outcome?.status).toBe("invalid-arguments");
    expect(outcome?.content).toContain("days");
  });
});

describe("schemas without a validator of their own, and things that are not schemas", () => {
  it("a JSON Schema object is checked for required keys and primitive types", async () => {
    const tools = new Map<string, ToolDefinition>([["w", { name: "w", parameters: json, execute: () => "ran" }]]);
    const [missing, ok] = await runToolCalls(
      [
        { id: "c1", name: "w", arguments: '{"city":"Oslo"}' },
        { id: "c2", name: "w", arguments: '{"city":"Oslo","days":3}' },
      ],
      { tools, taskId: "t" },
    );
    expect(missing?.content).toBe('Error: invalid arguments for w: missing required property "days"');
    expect(ok).toMatchObject({ status: "ok", content: "ran" });
  });

  it("an AI SDK tool() with a zod 3 inputSchema registers and declares like any other", async () => {
    const weather = tool({
      description: "Weather",
      inputSchema: z3.object({ city: z3.string() }),
      execute: async ({ city }) => city,
    });
    const agent = new BaseAgent({ name: "t", apiProvider: "http://127.0.0.1:9/v1", modelName: "m", apiKeyEnv: "" });
    agent.registerTool("weather", weather);
    const declared = toAiSdkTools(new Map([["weather", { name: "weather", ...weather } as ToolDefinition]]));
    expect(await toToolSchema(declared.weather?.inputSchema).jsonSchema).toMatchObject({
      properties: { city: { type: "string" } },
    });
  });

  it("no schema is an empty object schema; a string or null is a ToolRegistrationError", async () => {
    expect(await toToolSchema(undefined).jsonSchema).toEqual({ type: "object", properties: {} });
    const agent = new BaseAgent({ name: "t", apiProvider: "http://127.0.0.1:9/v1", modelName: "m", apiKeyEnv: "" });
    for (const bad of ["{}", null, 3]) {
      expect(() =>
        agent.registerTool({ name: "x", parameters: bad as never, execute: () => 1 }, { replace: true }),
      ).toThrow(ToolRegistrationError);
      expect(() =>
        agent.registerTool({ name: "x", inputSchema: bad as never, execute: () => 1 }, { replace: true }),
      ).toThrow(/inputSchema is not a schema/);
    }
  });
});
