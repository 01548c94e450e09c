/**
 * The README's `useChat` server route, driven as `useChat` drives it: POST
 * `{ id, messages }`, read the UI message stream to its end, then the chat is
 * stored (saved in `onFinish`) and a second turn appends two messages (the
 * question and the answer), sending the stored history to the model.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { type UIMessage, validateUIMessages } from "ai";
import { afterAll, afterEach, expect, it } from "vitest";
import { type ChatStore, createChatStore } from "../../src/ai-sdk/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import type { StateBackend, WriteResult } from "../../src/backends/types.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";

const root = path.resolve(import.meta.dirname, "..", "..");
const readme = readFileSync(path.join(root, "README.md"), "utf8");
const local = path.join(import.meta.dirname, `.generated-${randomUUID()}`);
mkdirSync(local);
afterAll(() => rmSync(local, { recursive: true, force: true }));
let server: ModelServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

type Route = (req: Request) => Promise<Response>;
async function readmeRoute(): Promise<(chats: ChatStore<UIMessage>, model: unknown) => Route> {
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  const found = blocks.filter((b) => b.includes("export function createChatRoute"));
  expect(found).toHaveLength(1);
  const file = path.join(local, "route.ts");
  writeFileSync(
    file,
    (found[0] as string)
      .replaceAll('"dumplings-ai/ai-sdk"', JSON.stringify(pathToFileURL(path.join(root, "src/ai-sdk/index.ts")).href))
      .replaceAll('"dumplings-ai"', JSON.stringify(pathToFileURL(path.join(root, "src/index.ts")).href)),
  );
  return ((await import(pathToFileURL(file).href)) as { createChatRoute: never }).createChatRoute;
}

function post(route: Route, id: string, messages: UIMessage[]): Promise<Response> {
  return route(
    new Request("http://localhost/api/chat", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ id, messages, trigger: "submit-message" }),
    }),
  );
}

/** The text a UI message stream (SSE) carries, from its `text-delta` chunks. */
function streamedText(sse: string): string {
  return sse
    .split("\n")
    .filter((l) => l.startsWith("data: {"))
    .map((l) => JSON.parse(l.slice(6)) as { type: string; delta?: string })
    .filter((c) => c.type === "text-delta")
    .map((c) => c.delta)
    .join("");
}

async function until(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 200 && !(await check()); i++) await new Promise((r) => setTimeout(r, 10));
}

it("the README's useChat route stores each turn: the question before the model call, then the answer", async () => {
  server = await startModelServer({ script: [{ text: "Hello there." }, { text: "Still here." }] });
  const model = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" })("scripted");
  const memory = new MemoryBackend();
  const writes: WriteResult[] = [];
  const store: StateBackend = new Proxy(memory, {
    get(target, prop) {
      if (prop === "write") {
        return async (...args: Parameters<MemoryBackend["write"]>) => {
          const r = await target.write(...args);
          writes.push(r);
          return r;
        };
      }
      const v = Reflect.get(target, prop);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  const chats = createChatStore<UIMessage>({ store });
  const route = (await readmeRoute())(chats, model);
  const id = `chat-${randomUUID()}`;

  const q1: UIMessage = { id: "q1", role: "user", parts: [{ type: "text", text: "Hi?" }] };
  const r1 = await post(route, id, [q1]);
  expect(r1.status).toBe(200);
  expect(streamedText(await r1.text())).toBe("Hello there.");
  await until(async () => ((await chats.load(id)) ?? []).length === 2);
  const after1 = (await chats.load(id)) as UIMessage[];
  expect(after1.map((m) => m.role)).toStrictEqual(["user", "assistant"]);
  expect(after1[1]?.parts.filter((p) => p.type === "text")).toMatchObject([{ text: "Hello there." }]);
  await validateUIMessages({ messages: after1 });

  // the client sends its whole list; the route takes only the new message
  const q2: UIMessage = { id: "q2", role: "user", parts: [{ type: "text", text: "Still there?" }] };
  const r2 = await post(route, id, [...after1, q2]);
  expect(streamedText(await r2.text())).toBe("Still here.");
  await until(async () => ((await chats.load(id)) ?? []).length === 4);
  const after2 = (await chats.load(id)) as UIMessage[];
  expect(after2.slice(0, 2)).toStrictEqual(after1);
  expect(after2[2]).toStrictEqual(q2);
  // the question, stored before the model call, then the answer: one message each
  expect(writes.slice(-2)).toMatchObject([
    { written: 1, rewritten: false },
    { written: 1, rewritten: false },
  ]);
  // the model got the stored history with the new question
  const sent = JSON.stringify(server.requests[1]?.body.messages);
  expect(sent).toContain("Hello there.");
  expect(sent).toContain("Still there?");
});

it("two turns posted at once to the README's route: settled before any model call; one is stored whole, the other gets 409 at once", async () => {
  server = await startModelServer({ script: [{ text: "First." }, { text: "A." }, { text: "B." }] });
  const model = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" })("scripted");
  const chats = createChatStore<UIMessage>({ store: new MemoryBackend() });
  const route = (await readmeRoute())(chats, model);
  const id = `chat-${randomUUID()}`;
  const q1: UIMessage = { id: "q1", role: "user", parts: [{ type: "text", text: "Hi?" }] };
  await (await post(route, id, [q1])).text();
  await until(async () => ((await chats.load(id)) ?? []).length === 2);
  const base = (await chats.load(id)) as UIMessage[];
  const qa: UIMessage = { id: "qa", role: "user", parts: [{ type: "text", text: "A?" }] };
  const qb: UIMessage = { id: "qb", role: "user", parts: [{ type: "text", text: "B?" }] };
  const calls = server.count;
  const [ra, rb] = await Promise.all([post(route, id, [...base, qa]), post(route, id, [...base, qb])]);
  const statuses = [ra.status, rb.status].sort();
  expect(statuses).toEqual([200, 409]); // the loser is told at once, not after an answer streamed
  const winner = ra.status === 200 ? ra : rb;
  expect(["A.", "B."]).toContain(streamedText(await winner.text()));
  await until(async () => ((await chats.load(id)) ?? []).length === 4);
  expect(server.count - calls).toBe(1); // one model call: the loser's answer was never generated
  const stored = (await chats.load(id)) as UIMessage[];
  // exactly one of the two turns, whole: the question and its answer, after the first turn
  expect(stored).toHaveLength(4);
  expect(stored.slice(0, 2)).toStrictEqual(base);
  expect(["qa", "qb"]).toContain(stored[2]?.id);
  expect(stored[3]?.role).toBe("assistant");
});
