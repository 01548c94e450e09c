/**
 * The README's durable `useChat` routes (POST starts an answer as a durable
 * run, GET `/api/chat/:id/stream` resumes it), served over a real HTTP server
 * (node:http) and driven by the AI SDK's own client: its `DefaultChatTransport`
 * (the transport `useChat` uses) and its `AbstractChat` (the chat logic under
 * `useChat`). The client disconnects mid-answer, reconnects through the
 * resume GET, and ends with the model's text exactly once — also when the
 * first model request fails mid-stream and is retried. The GET is a 204 when
 * no answer is being written. The side channel is a MemoryRunStream and a
 * RedisRunStream; the journal SQLite.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import {
  AbstractChat,
  type ChatState,
  type ChatStatus,
  DefaultChatTransport,
  readUIMessageStream,
  type UIMessage,
  type UIMessageChunk,
} from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChatStore, createChatStore } from "../../src/ai-sdk/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { DurableAgent } from "../../src/durable/agent.js";
import type { Journal } from "../../src/durable/journal.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { MemoryRunStream, RedisRunStream, type RunEventStream } from "../../src/durable/stream.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

/** The model's answer: 4 characters per SSE event, 25 ms apart (about 0.35 s), so a client can leave mid-answer. */
const TEXT = "A durable answer outlives the request that asked for it.";
const root = path.resolve(import.meta.dirname, "..", "..");
const src = (entry: string) => JSON.stringify(pathToFileURL(path.join(root, "src", entry)).href);
const redisSkip = await redisSkipReason();
const local = path.join(import.meta.dirname, `.generated-${randomUUID()}`);
mkdirSync(local);
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-chat-route-"));
const closers: (() => Promise<void>)[] = [];
let model: ModelServer;
let journal: SqliteJournal;
/** Questions whose first model request is cut after 5 SSE events (the role, then "A du", "rabl", "e an", "swer"). */
const dropFirst = new Set<string>();
const requestsByQuestion = new Map<string, number>();

beforeAll(async () => {
  journal = new SqliteJournal({ path: path.join(dir, "journal.db") });
  model = await startModelServer({
    handler: (request) => {
      const q = /\[([^\]"]+)\]/.exec(JSON.stringify(request.body.messages))?.[1] ?? "";
      const n = (requestsByQuestion.get(q) ?? 0) + 1;
      requestsByQuestion.set(q, n);
      return {
        text: TEXT,
        chunkSize: 4,
        chunkDelayMs: 25,
        ...(n === 1 && dropFirst.has(q) ? { dropAfterEvents: 5 } : {}),
      };
    },
  });
});
afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await model?.close();
  await journal?.close();
  rmSync(local, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

type Routes = { POST(req: Request): Promise<Response>; GET(req: Request, chatId: string): Promise<Response> };
type MakeRoutes = (
  chats: ChatStore<UIMessage>,
  agent: DurableAgent,
  journal: Journal,
  stream: RunEventStream,
) => Routes;

/** The README's block, its package imports pointed at this checkout's sources. */
async function readmeRoutes(): Promise<MakeRoutes> {
  const readme = readFileSync(path.join(root, "README.md"), "utf8");
  const blocks = [...readme.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => m[1] as string);
  const found = blocks.filter((b) => b.includes("export function createDurableChatRoutes"));
  expect(found).toHaveLength(1);
  const file = path.join(local, `routes-${randomUUID()}.ts`);
  writeFileSync(
    file,
    (found[0] as string)
      .replaceAll('"dumplings-ai/ai-sdk"', src("ai-sdk/index.ts"))
      .replaceAll('"dumplings-ai/durable"', src("durable/index.ts")),
  );
  return ((await import(pathToFileURL(file).href)) as { createDurableChatRoutes: MakeRoutes }).createDurableChatRoutes;
}

/** Serves the routes over node:http: POST /api/chat, GET /api/chat/:id/stream. A client that leaves cancels the body. */
async function serve(routes: Routes): Promise<{ url: string; server: Server }> {
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1");
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const request = new Request(url, {
      method: req.method ?? "GET",
      headers: req.headers as Record<string, string>,
      ...(req.method === "POST" ? { body: Buffer.concat(chunks) } : {}),
    });
    const resume = /^\/api\/chat\/([^/]+)\/stream$/.exec(url.pathname);
    const response =
      req.method === "POST" && url.pathname === "/api/chat"
        ? await routes.POST(request)
        : req.method === "GET" && resume
          ? await routes.GET(request, decodeURIComponent(resume[1] as string))
          : new Response("not found", { status: 404 });
    res.writeHead(response.status, Object.fromEntries(response.headers));
    if (!response.body) return void res.end();
    const reader = response.body.getReader();
    res.on("close", () => void reader.cancel().catch(() => undefined));
    for (;;) {
      const { done, value } = await reader.read().catch(() => ({ done: true, value: undefined }));
      if (done) break;
      res.write(value);
    }
    res.end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => new Promise((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** ChatState as `useChat` keeps it, in plain arrays (what `@ai-sdk/react` keeps in React state). */
class ArrayChatState implements ChatState<UIMessage> {
  status: ChatStatus = "ready";
  error: Error | undefined = undefined;
  messages: UIMessage[] = [];
  pushMessage = (m: UIMessage) => void this.messages.push(m);
  popMessage = () => void this.messages.pop();
  replaceMessage = (i: number, m: UIMessage) => {
    this.messages[i] = m;
  };
  snapshot = <T>(thing: T): T => structuredClone(thing);
}
class TestChat extends AbstractChat<UIMessage> {
  readonly view: ArrayChatState;
  constructor(id: string, transport: DefaultChatTransport<UIMessage>) {
    const state = new ArrayChatState();
    super({ id, transport, state });
    this.view = state;
  }
}

const textOf = (m: UIMessage | undefined) => (m?.parts ?? []).map((p) => (p.type === "text" ? p.text : "")).join("");

async function until(check: () => Promise<boolean> | boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const kinds: { name: string; skip: string | undefined; make: () => RunEventStream }[] = [
  { name: "memory", skip: undefined, make: () => new MemoryRunStream() },
  {
    name: "redis",
    skip: redisSkip,
    make: () => {
      const s = new RedisRunStream({ url: REDIS_URL, keyPrefix: `test:chat-route:${randomUUID()}:`, blockMs: 100 });
      closers.push(() => s.close());
      return s;
    },
  },
];

for (const kind of kinds) {
  describe.skipIf(!!kind.skip)(
    `README durable chat routes, ${kind.name} side channel${kind.skip ? ` (skipped: ${kind.skip})` : ""}`,
    () => {
      async function setup() {
        const stream = kind.make();
        const chats = createChatStore<UIMessage>({ store: new MemoryBackend() });
        const provider = createOpenAICompatible({ name: "local", baseURL: model.url, apiKey: "k" });
        const agent = new DurableAgent({ model: provider("scripted"), llmRetry: { maxAttempts: 3, backoffMs: 1 } });
        const { url } = await serve((await readmeRoutes())(chats, agent, journal, stream));
        const transport = new DefaultChatTransport<UIMessage>({ api: `${url}/api/chat` });
        const tokens = async (runId: string) =>
          (await stream.read(runId))
            .map((e) => e.data as { type?: string; text?: string })
            .filter((d) => d.type === "token")
            .map((d) => d.text)
            .join("");
        return { stream, chats, transport, tokens };
      }

      for (const retried of [false, true]) {
        const what = retried ? "a model request cut mid-stream and retried" : "one model request";
        it(`${what}: the transport leaves mid-answer, resumes with GET, and reads the text once`, async () => {
          const { chats, transport, tokens } = await setup();
          const chatId = `c-${randomUUID().slice(0, 8)}`;
          const q = `q-${randomUUID().slice(0, 8)}`;
          if (retried) dropFirst.add(q);
          const runId = `chat:${chatId}:1`;
          const question: UIMessage = { id: "u1", role: "user", parts: [{ type: "text", text: `[${q}] why?` }] };
          // nothing to resume yet
          expect(await transport.reconnectToStream({ chatId })).toBeNull();

          const leave = new AbortController();
          const first = await transport.sendMessages({
            chatId,
            messages: [question],
            abortSignal: leave.signal,
            trigger: "submit-message",
            messageId: undefined,
          });
          const reader = first.getReader();
          expect((await reader.read()).value).toStrictEqual({ type: "start", messageId: runId });
          // mid-answer (and, when retried, after the first attempt was cut): the client leaves
          await until(async () => (await tokens(runId)).length >= (retried ? 20 : 8), "tokens");
          leave.abort();
          await reader.read().catch(() => undefined);
          const atLeave = await tokens(runId);
          expect(atLeave.length).toBeLessThan(TEXT.length + (retried ? 16 : 0));

          const resumed = await transport.reconnectToStream({ chatId });
          expect(resumed).not.toBeNull();
          const chunks: UIMessageChunk[] = [];
          let message: UIMessage | undefined;
          const tapped = (resumed as ReadableStream<UIMessageChunk>).pipeThrough(
            new TransformStream<UIMessageChunk, UIMessageChunk>({
              transform(c, ctl) {
                chunks.push(c);
                ctl.enqueue(c);
              },
            }),
          );
          for await (const m of readUIMessageStream({ stream: tapped, terminateOnError: true })) message = m;
          expect(message?.id).toBe(runId);
          expect(textOf(message)).toBe(TEXT);
          expect(chunks.map((c) => (c.type === "text-delta" ? c.delta : "")).join("")).toBe(TEXT);
          if (retried) {
            expect(requestsByQuestion.get(q)).toBe(2);
            // a naive reader of the side channel would show the cut attempt's words twice
            expect(await tokens(runId)).toBe(`A durable answer${TEXT}`);
          }

          // the run's last step stored the answer: what the stream built
          await until(async () => ((await chats.load(chatId)) ?? []).length === 2, "the stored answer");
          const stored = (await chats.load(chatId)) as UIMessage[];
          expect(stored[0]).toStrictEqual(question);
          expect(stored[1]).toEqual(message);
          // the answer is written: nothing to resume
          expect(await transport.reconnectToStream({ chatId })).toBeNull();
        });
      }

      it("useChat's own logic (AbstractChat): stop mid-answer, resumeStream, one assistant message with the text once", async () => {
        const { transport, chats, tokens } = await setup();
        const chatId = `c-${randomUUID().slice(0, 8)}`;
        const q = `q-${randomUUID().slice(0, 8)}`;
        dropFirst.add(q);
        const chat = new TestChat(chatId, transport);
        const sending = chat.sendMessage({ text: `[${q}] why?` });
        await until(() => chat.status === "streaming" || chat.view.messages.length === 2, "the answer to start");
        // mid-answer: the first attempt was cut, the second one streams
        await until(async () => (await tokens(`chat:${chatId}:1`)).length >= 20, "the second attempt's tokens");
        await chat.stop(); // in a resumable setup: a disconnect, the run goes on
        await sending;
        expect(chat.view.messages.map((m) => m.role)).toStrictEqual(["user", "assistant"]);

        // a page that comes back: useChat({ resume: true }) calls resumeStream on mount
        await chat.resumeStream();
        expect(chat.status).toBe("ready");
        expect(chat.view.messages.map((m) => [m.role, m.id])).toStrictEqual([
          ["user", chat.view.messages[0]?.id],
          ["assistant", `chat:${chatId}:1`],
        ]);
        expect(textOf(chat.view.messages[1])).toBe(TEXT);
        await until(async () => ((await chats.load(chatId)) ?? []).length === 2, "the stored answer");
        expect((await chats.load(chatId))?.[1]).toEqual(chat.view.messages[1]);
      });
    },
  );
}
