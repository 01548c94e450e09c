/**
 * The README's durable example, complete: the same imports and calls, with the
 * README's elided parts filled in (a local server speaking the OpenAI
 * chat-completions wire protocol, streaming included, stands in for Ollama).
 * Run under Node 20 with ai@6 (`node --import tsx`) and under Node 22 with
 * ai@7 (`compat/ai7`), by test/compat/ai-sdk-majors.test.ts, which also
 * typechecks it against each major. Prints one JSON line with what happened.
 *
 * Usage: readme-durable.ts <journal path>
 */
import { readFileSync } from "node:fs";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, type ModelMessage, stepCountIs, streamText, tool } from "ai";
import { approve, DurableAgent, durableModel, durableTool, runDurable, SqliteJournal } from "dumplings-ai/durable";
import { startModelServer } from "dumplings-ai/testing";
import { z } from "zod";

const server = await startModelServer({
  script: [
    { toolCalls: [{ id: "call_lookup", name: "lookup", arguments: { orderId: 7 } }] },
    { toolCalls: [{ id: "call_refund", name: "refund", arguments: { orderId: 7, amount: 42 } }] },
    { text: "Refunded 42 for order 7." },
    // the user's own loop (second part)
    { toolCalls: [{ id: "call_own", name: "lookup", arguments: { orderId: 8 } }] },
    { text: "Order 8 totals 42." },
    { text: "Streamed once, replayed from the journal." },
  ],
});
const effects: string[] = [];
const lookup = tool({
  description: "Look up an order",
  inputSchema: z.object({ orderId: z.number() }),
  execute: async ({ orderId }) => {
    effects.push(`lookup ${orderId}`);
    return { orderId, total: 42 };
  },
});
const refundDef = {
  description: "Refund an order",
  inputSchema: z.object({ orderId: z.number(), amount: z.number() }),
  execute: async ({ orderId, amount }: { orderId: number; amount: number }) => {
    effects.push(`refund ${orderId} ${amount}`);
    return { refunded: amount };
  },
};
const messages: ModelMessage[] = [{ role: "user", content: "Please refund order 7." }];

// ---- as in the README
const journal = new SqliteJournal({ path: process.argv[2] ?? "runs.db" });
const model = createOpenAICompatible({ name: "local", baseURL: server.url })("llama3.2");
const agent = new DurableAgent({ model, tools: { lookup, refund: tool({ ...refundDef, needsApproval: true }) } });
let r = await runDurable("chat-1", agent.workflow(), { journal, input: { messages } });
const first = r.status;
const toolCallId = r.status === "waiting" ? r.waitingFor.name.replace(/^approval:/, "") : "";
await approve("chat-1", toolCallId, { journal });
r = await runDurable("chat-1", agent.workflow(), { journal });
// ----

// ---- as in the README ("Your own AI SDK loop"): generateText with a durable model and tool
const own = durableModel(createOpenAICompatible({ name: "local", baseURL: server.url })("llama3.2"));
const ownTools = { lookup: durableTool(lookup, { name: "lookup" }) };
const loop = async () => {
  const { text } = await generateText({ model: own, tools: ownTools, stopWhen: stepCountIs(3), prompt: "Order 8?" });
  return text;
};
const mine = await runDurable("loop-1", loop, { journal, input: {} });
// ----
const requestsBeforeReplay = server.count;
// a replay of the finished loop's journal (a new run id would call the model again; this one must not)
await journal.resetRun("loop-1", 2, "readme-example");
const replayed = await runDurable("loop-1", loop, { journal });
const loopRequestsOnReplay = server.count - requestsBeforeReplay;
const streaming = async () => {
  let text = "";
  for await (const delta of streamText({ model: own, prompt: "Stream something" }).textStream) text += delta;
  return text;
};
const streamed = await runDurable("stream-1", streaming, { journal, input: {} });
const requestsBeforeStreamReplay = server.count;
await journal.resetRun("stream-1", 0, "readme-example");
const restreamed = await runDurable("stream-1", streaming, { journal });
const streamRequestsOnReplay = server.count - requestsBeforeStreamReplay;

const output = r.status === "completed" ? (r.output as { text?: string }) : undefined;
console.log(
  JSON.stringify({
    first,
    toolCallId,
    status: r.status,
    text: output?.text ?? null,
    modelRequests: server.count,
    effects,
    steps: (await journal.readSteps("chat-1")).map((s) => `${s.name}:${s.status}`),
    ownLoop: {
      status: mine.status,
      text: mine.status === "completed" ? mine.output : null,
      steps: (await journal.readSteps("loop-1")).map((s) => `${s.name}:${s.status}`),
      replayed: replayed.status === "completed" ? replayed.output : replayed.status,
      requestsOnReplay: loopRequestsOnReplay,
    },
    streamed: {
      text: streamed.status === "completed" ? streamed.output : streamed.status,
      replayed: restreamed.status === "completed" ? restreamed.output : restreamed.status,
      requestsOnReplay: streamRequestsOnReplay,
    },
    ai: aiVersion(),
  }),
);
await journal.close();
await server.close();

/** The major of the `ai` package this program resolved (ai@6 under Node 20, ai@7 under compat/ai7). */
function aiVersion(): string {
  const url = import.meta.resolve("ai");
  const root = url.slice(0, url.lastIndexOf("/node_modules/ai/") + "/node_modules/ai/".length);
  return (JSON.parse(readFileSync(new URL("package.json", root), "utf8")) as { version: string }).version;
}
