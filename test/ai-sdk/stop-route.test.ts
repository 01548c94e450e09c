/**
 * Stop from any instance: the README's durable chat routes (POST /api/chat,
 * GET /api/chat/:id/stream, POST /api/chat/:id/stop) served by two real HTTP
 * servers (node:http, instances A and B) that share one journal (a SQLite
 * file, then a PostgreSQL schema), one SQLite chat store file and one Redis
 * side channel, each through its own journal, store and RedisRunStream
 * objects. The answer runs on A, whose executor is held on a gate mid-answer
 * (its next token's append waits); a reader follows it on A's POST stream and
 * another on B's resume route; the stop is sent to B. The stop returns while
 * A's executor is still held; both readers end with the partial text and a
 * `finish`; the run is `cancelled` in the journal (one `run_cancelled`
 * event); the partial answer is the chat's assistant message; the model is
 * not called again. Then, in one process: each option, a stop before any
 * text, a stop that lost the race (void), ended runs and bad options.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { DefaultChatTransport, readUIMessageStream, type UIMessage, type UIMessageChunk } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type ChatStore, createChatStore, runUIMessageStream, stopRunResponse } from "../../src/ai-sdk/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import type { JsonValue } from "../../src/core/json.js";
import { DurableAgent } from "../../src/durable/agent.js";
import { currentRun, step } from "../../src/durable/context.js";
import type { Journal } from "../../src/durable/journal.js";
import { PostgresJournal } from "../../src/durable/journal-postgres.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import {
  type EventOrigin,
  MemoryRunStream,
  RedisRunStream,
  type RunEventStream,
  type RunStreamEvent,
  type SubscribeOptions,
} from "../../src/durable/stream.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const TEXT = "A durable answer outlives the request that asked for it, and a stop ends it anywhere.";
/** Tokens the executor streams before the gate holds it (4 characters each). */
const BEFORE_GATE = 5;
const PARTIAL = TEXT.slice(0, 4 * BEFORE_GATE);

const root = path.resolve(import.meta.dirname, "..", "..");
const src = (entry: string) => JSON.stringify(pathToFileURL(path.join(root, "src", entry)).href);
const redisSkip = await redisSkipReason();
const pgSkip = await postgresSkipReason();
const local = path.join(import.meta.dirname, `.generated-${randomUUID()}`);
mkdirSync(local);
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-stop-route-"));
const closers: (() => Promise<void>)[] = [];
let model: ModelServer;
const requestsByQuestion = new Map<string, number>();

beforeAll(async () => {
  model = await startModelServer({
    handler: (request) => {
      const q = /\[([^\]"]+)\]/.exec(JSON.stringify(request.body.messages))?.[1] ?? "";
      requestsByQuestion.set(q, (requestsByQuestion.get(q) ?? 0) + 1);
      return { text: TEXT, chunkSize: 4, chunkDelayMs: 5 };
    },
  });
});
afterAll(async () => {
  for (const close of closers.reverse()) await close().catch(() => undefined);
  await model?.close();
  rmSync(local, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
});

type Routes = {
  POST(req: Request): Promise<Response>;
  GET(req: Request, chatId: string): Promise<Response>;
  STOP(req: Request, chatId: string): Promise<Response>;
};
type MakeRoutes = (
  chats: ChatStore<UIMessage>,
  agent: DurableAgent,
  journal: Journal,
  stream: RunEventStream,
) => Routes;

/** The README's routes block, its package imports pointed at this checkout's sources. */
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

/** Serves the routes over node:http: POST /api/chat, GET /api/chat/:id/stream, POST /api/chat/:id/stop. */
async function serve(routes: Routes): Promise<string> {
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
    const stop = /^\/api\/chat\/([^/]+)\/stop$/.exec(url.pathname);
    const response =
      req.method === "POST" && url.pathname === "/api/chat"
        ? await routes.POST(request)
        : req.method === "GET" && resume
          ? await routes.GET(request, decodeURIComponent(resume[1] as string))
          : req.method === "POST" && stop
            ? await routes.STOP(request, decodeURIComponent(stop[1] as string))
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
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** A side channel whose appends of `token` events wait on a gate after the first `open` ones. */
class GatedStream implements RunEventStream {
  tokens = 0;
  /** Appends waiting on the gate now. */
  held = 0;
  private release!: () => void;
  private readonly gate = new Promise<void>((r) => {
    this.release = r;
  });
  opened = false;
  constructor(
    private readonly inner: RunEventStream,
    private readonly open: number,
  ) {}
  openGate(): void {
    this.opened = true;
    this.release();
  }
  async append(runId: string, data: JsonValue, origin?: EventOrigin): Promise<number> {
    if ((data as { type?: string } | null)?.type === "token" && ++this.tokens > this.open) {
      this.held++;
      await this.gate;
      this.held--;
    }
    return this.inner.append(runId, data, origin);
  }
  read(runId: string, after?: number, limit?: number): Promise<RunStreamEvent[]> {
    return this.inner.read(runId, after, limit);
  }
  subscribe(runId: string, options?: SubscribeOptions): AsyncIterable<RunStreamEvent> {
    return this.inner.subscribe(runId, options);
  }
  delete(runId: string): Promise<void> {
    return this.inner.delete(runId);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const textOf = (m: UIMessage | undefined) => (m?.parts ?? []).map((p) => (p.type === "text" ? p.text : "")).join("");

async function until(check: () => Promise<boolean> | boolean, what: string): Promise<void> {
  for (let i = 0; i < 2000; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** Reads a UI message stream to its end: the chunks and the message they build. */
async function readAll(stream: ReadableStream<UIMessageChunk>) {
  const chunks: UIMessageChunk[] = [];
  let message: UIMessage | undefined;
  const tapped = stream.pipeThrough(
    new TransformStream<UIMessageChunk, UIMessageChunk>({
      transform(c, ctl) {
        chunks.push(c);
        ctl.enqueue(c);
      },
    }),
  );
  for await (const m of readUIMessageStream({ stream: tapped })) message = m;
  return { chunks, message };
}

/** The journal both instances share: each opens its own object on one SQLite file or one PostgreSQL schema. */
const journalKinds: { name: string; skip: string | undefined; open: () => () => Journal }[] = [
  {
    name: "SQLite",
    skip: undefined,
    open: () => {
      const file = path.join(dir, `journal-${randomUUID()}.db`);
      return () => {
        const journal = new SqliteJournal({ path: file });
        closers.push(() => journal.close());
        return journal;
      };
    },
  },
  {
    name: "PostgreSQL",
    skip: pgSkip,
    open: () => {
      const schema = `stop_${randomUUID().replaceAll("-", "").slice(0, 16)}`;
      let first = true;
      return () => {
        const journal = new PostgresJournal({ url: DATABASE_URL, schema });
        if (first) {
          first = false;
          closers.push(async () => {
            const dropper = new PostgresJournal({ url: DATABASE_URL, schema });
            await dropper.dropSchema();
            await dropper.close();
          });
        }
        closers.push(() => journal.close());
        return journal;
      };
    },
  },
];

for (const kind of journalKinds) {
  const skip = redisSkip ?? kind.skip;
  describe.skipIf(!!skip)(
    `stop from any instance: two servers, one ${kind.name} journal, one Redis side channel${skip ? ` (skipped: ${skip})` : ""}`,
    () => {
      it("the stop sent to B returns while A's executor is held; every reader ends with the partial text; the run is cancelled; the partial answer is the chat's message", async () => {
        const keyPrefix = `test:stop-route:${randomUUID()}:`;
        const openJournal = kind.open();
        const chatsFile = path.join(dir, `chats-${randomUUID()}.db`);
        const provider = createOpenAICompatible({ name: "local", baseURL: model.url, apiKey: "k" });
        const makeRoutes = await readmeRoutes();
        const instance = async (gated: boolean) => {
          const journal = openJournal();
          const redis = new RedisRunStream({ url: REDIS_URL, keyPrefix, blockMs: 100 });
          const stream = gated ? new GatedStream(redis, BEFORE_GATE) : redis;
          const store = new SQLiteBackend({ dbPath: chatsFile });
          const chats = createChatStore<UIMessage>({ store });
          closers.push(async () => {
            await redis.close();
            await store.close?.();
          });
          const agent = new DurableAgent({ model: provider("scripted") });
          const url = await serve(makeRoutes(chats, agent, journal, stream));
          return { journal, stream, chats, url };
        };
        const a = await instance(true);
        const b = await instance(false);
        const gate = a.stream as GatedStream;

        const chatId = `c-${randomUUID().slice(0, 8)}`;
        const q = `q-${randomUUID().slice(0, 8)}`;
        const runId = `chat:${chatId}:1`;
        const question: UIMessage = { id: "u1", role: "user", parts: [{ type: "text", text: `[${q}] why?` }] };

        // the answer starts on A; its client reads A's POST stream
        const onA = new DefaultChatTransport<UIMessage>({ api: `${a.url}/api/chat` });
        const first = await onA.sendMessages({
          chatId,
          messages: [question],
          abortSignal: undefined,
          trigger: "submit-message",
          messageId: undefined,
        });
        const readerA = readAll(first);
        // A's executor streams BEFORE_GATE tokens, then its next token waits on the gate
        await until(() => gate.held === 1, "A's executor to be held on the gate");
        const streamed = async () =>
          (await b.stream.read(runId))
            .map((e) => e.data as { type?: string; text?: string })
            .filter((d) => d.type === "token")
            .map((d) => d.text)
            .join("");
        expect(await streamed()).toBe(PARTIAL);

        // another client reads the answer through B's resume route
        const onB = new DefaultChatTransport<UIMessage>({ api: `${b.url}/api/chat` });
        const resumed = await onB.reconnectToStream({ chatId });
        expect(resumed).not.toBeNull();
        const readerB = readAll(resumed as ReadableStream<UIMessageChunk>);

        // the stop, sent to B: it answers while A's executor is still held on the gate
        const stop = await fetch(`${b.url}/api/chat/${chatId}/stop`, { method: "POST" });
        expect(gate.opened).toBe(false);
        expect(gate.held).toBe(1);
        expect(stop.status).toBe(200);
        const body = (await stop.json()) as { runId: string; status: string; stopped: boolean; message: UIMessage };
        expect(body).toMatchObject({ runId, status: "cancelled", stopped: true });
        expect(body.message.id).toBe(runId);
        expect(body.message.role).toBe("assistant");
        expect(textOf(body.message)).toBe(PARTIAL);
        // the executor has not ended the run's stream (it is still held): the stop did not wait for it
        expect((await b.stream.read(runId)).some((e) => (e.data as { type?: string }).type === "run-end")).toBe(false);

        // both readers end with the partial text and a finish, no error (before the executor moves again)
        for (const reader of [readerB, readerA]) {
          const { chunks, message } = await reader;
          expect(chunks.at(-1)).toStrictEqual({ type: "finish" });
          expect(chunks.filter((c) => c.type === "error")).toStrictEqual([]);
          expect(message?.id).toBe(runId);
          expect(textOf(message)).toBe(PARTIAL);
          expect(message).toEqual(body.message);
        }
        expect(gate.opened).toBe(false);

        // the journal (read through A): cancelled, with who and why
        expect((await a.journal.getRun(runId))?.status).toBe("cancelled");
        const cancelled = (await a.journal.readEvents(runId)).filter((e) => e.type === "run_cancelled");
        expect(cancelled).toHaveLength(1);

        // the partial answer is the chat's assistant message, read through A's store
        expect(await a.chats.load(chatId)).toStrictEqual([question, body.message]);
        // nothing is active any more: both resume routes answer 204
        expect(await onA.reconnectToStream({ chatId })).toBeNull();
        expect(await onB.reconnectToStream({ chatId })).toBeNull();

        // the executor moves again: it notices the cancellation, ends its run, and calls the model no more
        gate.openGate();
        await until(
          async () =>
            (await b.stream.read(runId)).some(
              (e) => JSON.stringify(e.data) === JSON.stringify({ type: "run-end", status: "cancelled" }),
            ),
          "A's executor to end the run",
        );
        await new Promise((r) => setTimeout(r, 100));
        expect(requestsByQuestion.get(q)).toBe(1);
        expect((await a.journal.getRun(runId))?.status).toBe("cancelled");
        expect(await b.chats.load(chatId)).toStrictEqual([question, body.message]);
        // a token the executor streamed after the stop counts for nobody: a replay ends as the readers did
        expect((await streamed()).length).toBeGreaterThan(PARTIAL.length);
        const replay = await readAll(runUIMessageStream(b.stream, runId, { journal: b.journal }));
        expect(replay.message).toEqual(body.message);

        // stopping again: the chat's last message is the answer (204), and the helper answers what happened
        expect((await fetch(`${b.url}/api/chat/${chatId}/stop`, { method: "POST" })).status).toBe(204);
        const again = await stopRunResponse(b.stream, runId, { journal: b.journal, chats: b.chats, chatId });
        expect(await again.json()).toStrictEqual({ runId, status: "cancelled", stopped: false, message: null });
        expect(await b.chats.load(chatId)).toStrictEqual([question, body.message]);
      });
    },
  );
}

describe("stopRunResponse, one process (MemoryRunStream, SQLite journal)", () => {
  /** A run whose step streams `words` as `type` events, then waits for `gate` (as a model call that is slow). */
  async function heldRun(words: string[], type = "token", later: string[] = []) {
    const journal = new SqliteJournal({ path: path.join(dir, `unit-${randomUUID()}.db`) });
    closers.push(() => journal.close());
    const stream = new MemoryRunStream();
    const runId = `run-${randomUUID().slice(0, 8)}`;
    let release!: () => void;
    const gate = new Promise<void>((r) => {
      release = r;
    });
    let streamed = false;
    const result = runDurable(
      runId,
      async () => {
        await step("talk", async () => {
          for (const text of words) await currentRun()?.emit({ type, text });
          streamed = true;
          await gate;
          for (const text of later) await currentRun()?.emit({ type, text });
          return null;
        });
        return "done";
      },
      { journal, stream, input: null, cancelCheckMs: 20 },
    );
    await until(() => streamed, "the step to stream");
    return { journal, stream, runId, release, result };
  }

  it("by, reason, messageId, type and headers; without chats the partial answer is only in the body", async () => {
    const { journal, stream, runId, release, result } = await heldRun(["Hel", "lo"], "word");
    const res = await stopRunResponse(stream, runId, {
      journal,
      by: "alice",
      reason: "changed her mind",
      messageId: "m-1",
      type: "word",
      headers: { "x-stop": "yes" },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-stop")).toBe("yes");
    const body = (await res.json()) as { message: UIMessage };
    expect(body).toMatchObject({ runId, status: "cancelled", stopped: true });
    expect(body.message.id).toBe("m-1");
    expect(textOf(body.message)).toBe("Hello");
    const event = (await journal.readEvents(runId)).find((e) => e.type === "run_cancelled");
    expect(event).toMatchObject({ by: "alice", detail: "changed her mind" });
    // the marker carries them too
    expect((await stream.read(runId)).map((e) => e.data)).toContainEqual({
      type: "run-stop",
      by: "alice",
      reason: "changed her mind",
    });
    release();
    expect(await result).toStrictEqual({ runId, status: "cancelled" });
  });

  it("a stop before any text saves no message; the chat keeps its question", async () => {
    const { journal, stream, runId, release, result } = await heldRun([]);
    const chats = createChatStore<UIMessage>({ store: new MemoryBackend() });
    const question: UIMessage = { id: "u1", role: "user", parts: [{ type: "text", text: "why?" }] };
    await chats.save("c1", [question]);
    const res = await stopRunResponse(stream, runId, { journal, chats, chatId: "c1" });
    expect(await res.json()).toStrictEqual({ runId, status: "cancelled", stopped: true, message: null });
    expect(await chats.load("c1")).toStrictEqual([question]);
    release();
    await result;
  });

  it("a chat that already holds the answer's id is left as it is", async () => {
    const { journal, stream, runId, release, result } = await heldRun(["Hel"]);
    const chats = createChatStore<UIMessage>({ store: new MemoryBackend() });
    const saved: UIMessage[] = [
      { id: "u1", role: "user", parts: [{ type: "text", text: "why?" }] },
      { id: runId, role: "assistant", parts: [{ type: "text", text: "the whole answer" }] },
    ];
    await chats.save("c1", saved);
    const res = await stopRunResponse(stream, runId, { journal, chats, chatId: "c1" });
    expect(((await res.json()) as { stopped: boolean }).stopped).toBe(true);
    expect(await chats.load("c1")).toStrictEqual(saved);
    release();
    await result;
  });

  it("a stop whose cancel lost the race is void with a journal: the readers end with the whole answer", async () => {
    const { journal, stream, runId, release, result } = await heldRun(["Hel"], "token", ["lo"]);
    // the first half of a stop (its marker), whose cancel never lands: the run completes
    await stream.append(runId, { type: "run-stop" });
    release();
    expect((await result).status).toBe("completed");
    const withJournal = await readAll(runUIMessageStream(stream, runId, { journal }));
    // the journal says completed: the marker is void, the text after it counts
    expect(textOf(withJournal.message)).toBe("Hello");
    expect(withJournal.chunks.filter((c) => c.type === "error")).toStrictEqual([]);
    expect(withJournal.chunks.at(-1)).toStrictEqual({ type: "finish" });
    // without a journal nothing can tell: the marker ends the message (documented)
    const without = await readAll(runUIMessageStream(stream, runId));
    expect(textOf(without.message)).toBe("Hel");
    expect(without.chunks.filter((c) => c.type === "error")).toStrictEqual([]);
    expect(without.chunks.at(-1)).toStrictEqual({ type: "finish" });
  });

  it("no run, an ended run, bad options", async () => {
    const { journal, stream, runId, release, result } = await heldRun(["Hel"]);
    expect((await stopRunResponse(stream, undefined, { journal })).status).toBe(204);
    expect((await stopRunResponse(stream, "", { journal })).status).toBe(204);
    expect((await stopRunResponse(stream, "no-such-run", { journal })).status).toBe(204);
    for (const bad of [
      {},
      { journal, chats: createChatStore<UIMessage>({ store: new MemoryBackend() }) },
      { journal, chats: {} as ChatStore<UIMessage>, chatId: "c1" },
      { journal, by: "" },
      { journal, reason: 1 },
      { journal, messageId: "" },
      { journal, type: "" },
      { journal, chatId: "" },
      { journal, sigal: undefined },
    ]) {
      await expect(stopRunResponse(stream, runId, bad as never)).rejects.toThrow(InvalidOptionError);
    }
    release();
    expect((await result).status).toBe("completed");
    const res = await stopRunResponse(stream, runId, { journal });
    expect(await res.json()).toStrictEqual({ runId, status: "completed", stopped: false, message: null });
    // nothing was appended to the ended run's stream
    expect((await stream.read(runId)).map((e) => (e.data as { type: string }).type)).not.toContain("run-stop");
  });
});
