// A fresh application's script (copied into each app by
// test/compat/fresh-app-providers.test.ts): BaseAgent against the project's
// local model server, with a tool whose parameters are a zod 3 schema (the
// app's `zod@3`) and one whose parameters are a zod 4 schema (the app's
// `zod4` = zod@4, not dumplings-ai's own copy), then an agent on the other
// protocol, whose provider package is missing or does not fit the app's `ai`.
// Prints one JSON line.
import { createRequire } from "node:module";
import { AnthropicAgent, BaseAgent } from "dumplings-ai";
import { startModelServer } from "dumplings-ai/testing";
import { z as z3 } from "zod";
import { z as z4 } from "zod4";

const require = createRequire(import.meta.url);
const out = { node: process.version, ai: require("ai/package.json").version, zod: require("zod/package.json").version };
const server = await startModelServer({
  script: [
    { toolCalls: [{ id: "c1", name: "weather", arguments: { city: "Oslo", days: 2 } }] },
    { text: "zod 3 ok" },
    { toolCalls: [{ id: "c2", name: "weather", arguments: { city: "Bergen", days: 3 } }] },
    { text: "zod 4 ok" },
  ],
});
try {
  for (const [label, z] of [
    ["zod3", z3],
    ["zod4", z4],
  ]) {
    const agent = new BaseAgent({
      name: `app-${label}`,
      apiProvider: `${server.url}/chat/completions`,
      modelName: "m",
      apiKeyEnv: "",
    });
    const calls = [];
    agent.registerTool({
      name: "weather",
      description: "Weather in a city",
      parameters: z.object({ city: z.string(), days: z.number().int() }),
      execute: (args) => {
        calls.push(args);
        return "sunny";
      },
    });
    const before = server.requests.length;
    const result = await agent.conversationWithTool("Weather?");
    const tools = server.requests[before]?.body.tools ?? [];
    out[label] = { text: result.text, calls, sent: tools[0]?.function?.parameters };
  }
  const anthropic = new AnthropicAgent({
    name: "app-anthropic",
    apiProvider: `${server.url}/messages`,
    modelName: "m",
    apiKeyEnv: "",
  });
  const before = server.requests.length;
  try {
    const r = await anthropic.conversationWithTool("Hi?");
    out.anthropic = { ok: r.text };
  } catch (e) {
    out.anthropic = { name: e.name, code: e.code, message: e.message, requests: server.requests.length - before };
  }
} finally {
  await server.close();
}
console.log(JSON.stringify(out));
