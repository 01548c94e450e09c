/**
 * `runUIMessageStream`: a DurableAgent run on the local model server publishes
 * its tokens to a real side channel (memory, and Redis); the run's UI message
 * stream is read with the AI SDK's own reader (`readUIMessageStream`). Read
 * from before the run, joined mid-run, or cut and read again, it ends with one
 * assistant message whose text is the model's text exactly once — also when
 * the first model request fails mid-stream and the `llm` step is retried
 * (where a naive reader of the side channel shows the first attempt's words
 * twice), and when the process running it is SIGKILLed mid-answer and another
 * one takes the run over. With and without the journal.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { readUIMessageStream, tool, type UIMessage, type UIMessageChunk, validateUIMessages } from "ai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { type RunDraftData, resumeRunResponse, runUIMessageStream } from "../../src/ai-sdk/index.js";
import { InvalidOptionError } from "../../src/core/errors.js";
import { DurableAgent } from "../../src/durable/agent.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import { MemoryRunStream, RedisRunStream, type RunEventStream, readText } from "../../src/durable/stream.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";
import { fixture, runChild } from "../fixtures/durable/spawn.js";
import { journalStores } from "../fixtures/durable/stores.js";
import { makeHelloAgent } from "../fixtures/durable/stream-fixture.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

/** What the model answers (streamed 4 characters per SSE event, 20 ms apart: about 0.3 s). */
const TEXT = "Durable answers survive a dropped model stream, exactly once.";
const redisSkip = await redisSkipReason();
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-run-ui-"));
const closers: (() => Promise<void>)[] = [];
let server: ModelServer;
let journal: SqliteJournal;
/** Runs whose first model request is cut after 5 SSE events (the role, then "Dura", "ble ", "answ", "ers "). */
const dropFirst = new Set<string>();
/** Runs answered in two model calls: text and a tool call, then text after the tool's result. */
const twoRounds = new Set<string>();
const ROUND_1 = "Let me look that up. ";
const ROUND_2 = "The answer is 42.";
/** Runs whose every model request is cut after 5 SSE events. */
const dropAll = new Set<string>();
const requestsByRun = new Map<string, number>();

const runOf = (body: Record<string, unknown>) => /\[([^\]"]+)\]/.exec(JSON.stringify(body.messages))?.[1] ?? "";

beforeAll(async () => {
  journal = new SqliteJournal({ path: path.join(dir, "journal.db") });
  server = await startModelServer({
    handler: (request) => {
      const run = runOf(request.body);
      const n = (requestsByRun.get(run) ?? 0) + 1;
      requestsByRun.set(run, n);
      if (twoRounds.has(run)) {
        return n === 1
          ? {
              text: ROUND_1,
              chunkSize: 4,
              chunkDelayMs: 20,
              toolCalls: [{ id: "c1", name: "lookup", arguments: { q: "x" } }],
            }
          : { text: ROUND_2, chunkSize: 4, chunkDelayMs: 20 };
      }
      const cut = (n === 1 && dropFirst.has(run)) || dropAll.has(run) ? { dropAfterEvents: 5 } : {};
      return { text: TEXT, chunkSize: 4, chunkDelayMs: 20, ...cut };
    },
  });
});
afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await server?.close();
  await journal?.close();
  rmSync(dir, { recursive: true, force: true });
});

function agent(): DurableAgent {
  const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
  return new DurableAgent({ model: provider("scripted"), llmRetry: { maxAttempts: 3, backoffMs: 1 } });
}

function start(stream: RunEventStream, runId: string) {
  return runDurable(runId, agent().workflow(), {
    journal,
    stream,
    input: { messages: [{ role: "user", content: `[${runId}] explain` }] },
  });
}

/** Reads a UI message stream to its end with the AI SDK's reader: every chunk, and the last message. */
async function read(
  ui: ReadableStream<UIMessageChunk>,
  errors: UIMessageChunk[] | undefined = undefined,
): Promise<{ chunks: UIMessageChunk[]; message?: UIMessage }> {
  const chunks: UIMessageChunk[] = [];
  const tapped = ui.pipeThrough(
    new TransformStream<UIMessageChunk, UIMessageChunk>({
      transform(c, ctl) {
        chunks.push(c);
        ctl.enqueue(c);
      },
    }),
  );
  let message: UIMessage | undefined;
  const onError = (e: unknown) => void errors?.push({ type: "error", errorText: (e as Error).message });
  for await (const m of readUIMessageStream({ stream: tapped, terminateOnError: !errors, onError })) message = m;
  return { chunks, ...(message ? { message } : {}) };
}

const textOf = (m: UIMessage | undefined) => (m?.parts ?? []).map((p) => (p.type === "text" ? p.text : "")).join("");
/** All text the client was ever sent (every delta): what it could have shown. */
const deltas = (chunks: UIMessageChunk[]) => chunks.map((c) => (c.type === "text-delta" ? c.delta : "")).join("");
const drafts = (chunks: UIMessageChunk[]) =>
  chunks.filter((c) => c.type === "data-dumplings-draft").map((c) => (c as { data: RunDraftData }).data);

async function tokens(stream: RunEventStream, runId: string): Promise<string> {
  return (await stream.read(runId))
    .map((e) => e.data as { type?: string; text?: string })
    .filter((d) => d.type === "token")
    .map((d) => d.text)
    .join("");
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
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
      const s = new RedisRunStream({ url: REDIS_URL, keyPrefix: `test:run-ui:${randomUUID()}:`, blockMs: 100 });
      closers.push(() => s.close());
      return s;
    },
  },
];

for (const kind of kinds) {
  describe.skipIf(!!kind.skip)(`${kind.name} side channel${kind.skip ? ` (skipped: ${kind.skip})` : ""}`, () => {
    for (const withJournal of [true, false]) {
      const mode = withJournal ? "with the journal" : "without the journal";

      it(`${mode}: read from the start, joined mid-run, and cut then read again, each ends with the model's text once`, async () => {
        const stream = kind.make();
        const runId = `ui-${kind.name}-${randomUUID().slice(0, 8)}`;
        const opts = withJournal ? { journal, pollMs: 50 } : {};
        const whole = read(runUIMessageStream(stream, runId, { ...opts, drafts: true }));
        const run = start(stream, runId);
        // mid-run: tokens are streaming, the step has not ended
        await until(async () => (await tokens(stream, runId)).length >= 12, "the first tokens");
        const joined = read(runUIMessageStream(stream, runId, opts));
        // a client that disconnects after a few chunks
        const cut = runUIMessageStream(stream, runId, { ...opts, drafts: true }).getReader();
        const seen: UIMessageChunk[] = [];
        for (let i = 0; i < 2; i++) seen.push((await cut.read()).value as UIMessageChunk);
        await cut.cancel();
        expect(seen[0]).toStrictEqual({ type: "start", messageId: runId });
        expect(seen[1]).toMatchObject({ type: "data-dumplings-draft", transient: true, data: { state: "streaming" } });
        expect(await tokens(stream, runId)).not.toBe(TEXT); // it was cut mid-stream
        const again = read(runUIMessageStream(stream, runId, opts));

        expect(await run).toMatchObject({ status: "completed", output: { text: TEXT } });
        const results = await Promise.all([whole, joined, again]);
        for (const { chunks, message } of results) {
          expect(textOf(message)).toBe(TEXT);
          expect(deltas(chunks)).toBe(TEXT);
          expect(chunks.at(-1)).toStrictEqual({ type: "finish" });
          expect(message?.id).toBe(runId);
          await validateUIMessages({ messages: [message as UIMessage] });
        }
        expect(results[1]?.message).toStrictEqual(results[0]?.message);
        expect(results[2]?.message).toStrictEqual(results[0]?.message);
        // the live reader got the tokens as they came, as transient drafts, then the committed part
        const d = drafts(results[0]?.chunks ?? []);
        expect(d.filter((x) => x.state === "streaming").length).toBeGreaterThan(3);
        expect(d.map((x) => x.delta ?? "").join("")).toBe(TEXT);
        expect(d.at(-1)).toStrictEqual({ seq: 0, attempt: 1, state: "committed" });
        // after the run: a fresh read replays the same message
        const after = await read(runUIMessageStream(stream, runId, opts));
        expect(after.message).toStrictEqual(results[0]?.message);
      });

      it(`${mode}: a model request cut mid-stream and retried: the client is sent the text once`, async () => {
        const stream = kind.make();
        const runId = `ui-retry-${kind.name}-${randomUUID().slice(0, 8)}`;
        dropFirst.add(runId);
        const opts = withJournal ? { journal, pollMs: 50 } : {};
        const live = read(runUIMessageStream(stream, runId, { ...opts, drafts: true }));
        const run = start(stream, runId);
        // join while the second attempt streams (after the reset)
        await until(
          async () => (await stream.read(runId)).some((e) => (e.data as { type?: string }).type === "reset"),
          "the reset",
        );
        const joined = read(runUIMessageStream(stream, runId, opts));

        expect(await run).toMatchObject({ status: "completed", output: { text: TEXT } });
        expect(requestsByRun.get(runId)).toBe(2);
        // the bug a reader without the attempt markers has: the first attempt's words twice
        expect(await tokens(stream, runId)).toBe(`Durable answers ${TEXT}`);
        expect(await readText(stream, runId, { journal })).toBe(TEXT);

        const results = await Promise.all([live, joined]);
        for (const { chunks, message } of results) {
          expect(textOf(message)).toBe(TEXT);
          expect(deltas(chunks)).toBe(TEXT); // not a word of the abandoned attempt was ever sent as text
          expect(message?.parts.filter((p) => p.type === "text")).toHaveLength(1);
        }
        expect(results[1]?.message).toStrictEqual(results[0]?.message);
        // the live client's drafts: attempt 1 streamed, then was abandoned; attempt 2 committed
        const d = drafts(results[0]?.chunks ?? []);
        expect(
          d
            .filter((x) => x.attempt === 1 && x.state === "streaming")
            .map((x) => x.delta)
            .join(""),
        ).toBe("Durable answers ");
        expect(d).toContainEqual({ seq: 0, attempt: 1, state: "abandoned" });
        expect(d.at(-1)).toStrictEqual({ seq: 0, attempt: 2, state: "committed" });
        const replay = await read(runUIMessageStream(stream, runId, opts));
        expect(replay.message).toStrictEqual(results[0]?.message);
        expect(drafts(replay.chunks)).toStrictEqual([]);
      });
    }
  });
}

describe.skipIf(!!redisSkip)(`a process killed mid-stream${redisSkip ? ` (skipped: ${redisSkip})` : ""}`, () => {
  it("SIGKILL mid-answer, the run taken over by another process: every reader ends with the text once", async () => {
    const [sqlite] = await journalStores();
    const opened = (sqlite as NonNullable<typeof sqlite>).open();
    closers.push(() => opened.destroy());
    const prefix = `test:run-ui-kill:${randomUUID()}:`;
    const stream = new RedisRunStream({ url: REDIS_URL, keyPrefix: prefix, blockMs: 100 });
    closers.push(() => stream.close());
    const runId = `ui-kill-${randomUUID().slice(0, 8)}`;
    const readers = [
      read(runUIMessageStream(stream, runId, { journal: opened.journal, pollMs: 50, drafts: true })),
      read(runUIMessageStream(stream, runId, { drafts: true })),
    ];
    // the first process streams "Dura", "ble " and dies (its model response still open)
    const child = await runChild(fixture("stream-child.ts"), {
      ...opened.env,
      REDIS_URL,
      STREAM_PREFIX: prefix,
      MODEL_URL: server.url,
      RUN_ID: runId,
      LEASE_TTL_MS: "500",
      KILL_AFTER_TOKENS: "2",
    });
    expect(child.signal, child.stderr).toBe("SIGKILL");
    expect(await tokens(stream, runId)).toBe("Durable ");
    // this process takes the run over when the dead one's lease expires, under a newer fencing token
    const result = await runDurable(runId, makeHelloAgent(server.url).workflow(), { journal: opened.journal, stream });
    expect(result).toMatchObject({ status: "completed", output: { text: TEXT } });
    expect(await tokens(stream, runId)).toBe(`Durable ${TEXT}`);
    readers.push(read(runUIMessageStream(stream, runId, { journal: opened.journal })));
    const results = await Promise.all(readers);
    for (const { chunks, message } of results) {
      expect(textOf(message)).toBe(TEXT);
      expect(deltas(chunks)).toBe(TEXT);
    }
    expect(results[1]?.message).toStrictEqual(results[0]?.message);
    expect(results[2]?.message).toStrictEqual(results[0]?.message);
    // the live readers drafted the dead attempt, then dropped it
    for (const r of results.slice(0, 2))
      expect(drafts(r.chunks)).toContainEqual({ seq: 0, attempt: 1, state: "abandoned" });
  });
});

describe("the run's end and the resume answer", () => {
  it("a tool round: one text part per model call, in order, with and without the journal", async () => {
    const stream = new MemoryRunStream();
    const runId = `ui-tools-${randomUUID().slice(0, 8)}`;
    twoRounds.add(runId);
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const lookup = tool({ inputSchema: z.object({ q: z.string() }), execute: async () => ({ answer: 42 }) });
    const a = new DurableAgent({ model: provider("scripted"), tools: { lookup } });
    const readings = [
      read(runUIMessageStream(stream, runId, { journal, pollMs: 50 })),
      read(runUIMessageStream(stream, runId)),
    ];
    const result = await runDurable(runId, a.workflow(), {
      journal,
      stream,
      input: { messages: [{ role: "user", content: `[${runId}] explain` }] },
    });
    expect(result).toMatchObject({ status: "completed", output: { text: ROUND_2, llmSteps: 2 } });
    readings.push(read(runUIMessageStream(stream, runId, { journal })));
    const messages = (await Promise.all(readings)).map((r) => r.message);
    for (const m of messages) {
      // toEqual: the AI SDK's reader sets providerMetadata: undefined on a text part
      expect(m?.parts).toEqual([
        { type: "step-start" },
        { type: "text", text: ROUND_1, state: "done" },
        { type: "step-start" },
        { type: "text", text: ROUND_2, state: "done" },
      ]);
    }
  });

  it("with the journal, a run that waits for an approval ends the stream with what it said so far; messageId and signal", async () => {
    const stream = new MemoryRunStream();
    const runId = `ui-wait-${randomUUID().slice(0, 8)}`;
    twoRounds.add(runId);
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const lookup = tool({
      inputSchema: z.object({ q: z.string() }),
      needsApproval: true,
      execute: async () => ({ answer: 42 }),
    });
    const a = new DurableAgent({ model: provider("scripted"), tools: { lookup } });
    const stopped = new AbortController();
    const readings = [
      read(runUIMessageStream(stream, runId, { journal, pollMs: 50, messageId: "answer-1" })),
      read(runUIMessageStream(stream, runId, { signal: stopped.signal })), // without the journal: no end event comes
    ];
    const result = await runDurable(runId, a.workflow(), {
      journal,
      stream,
      input: { messages: [{ role: "user", content: `[${runId}] explain` }] },
    });
    expect(result).toMatchObject({ status: "waiting", waitingFor: { kind: "signal", name: "approval:c1" } });
    const waiting = await readings[0];
    expect(waiting?.message?.id).toBe("answer-1");
    expect(textOf(waiting?.message)).toBe(ROUND_1);
    expect(waiting?.chunks.at(-1)).toStrictEqual({ type: "finish" });
    stopped.abort();
    const cut = await readings[1];
    // without the journal nothing says the model call was committed (no later step streamed, no end event):
    // its text is still held when the reader stops
    expect(textOf(cut?.message)).toBe("");
    expect(cut?.chunks.map((c) => c.type)).not.toContain("finish");
  });

  it("a run whose model call fails on every attempt: the stream ends with an error chunk and sends none of the streamed text", async () => {
    const stream = new MemoryRunStream();
    const runId = `ui-fail-${randomUUID().slice(0, 8)}`;
    dropAll.add(runId);
    const provider = createOpenAICompatible({ name: "local", baseURL: server.url, apiKey: "k" });
    const a = new DurableAgent({ model: provider("scripted"), llmRetry: { maxAttempts: 2, backoffMs: 1 } });
    const errors: UIMessageChunk[] = [];
    const live = read(runUIMessageStream(stream, runId, { journal, pollMs: 50, drafts: true }), errors);
    const result = await runDurable(runId, a.workflow(), {
      journal,
      stream,
      input: { messages: [{ role: "user", content: `[${runId}] explain` }] },
    });
    expect(result.status).toBe("failed");
    expect(await tokens(stream, runId)).toBe("Durable answers Durable answers ");
    for (const reading of [
      live,
      read(runUIMessageStream(stream, runId, { journal }), errors),
      read(runUIMessageStream(stream, runId), errors),
    ]) {
      const { chunks, message } = await reading;
      expect(chunks.filter((c) => !c.type.startsWith("data-")).map((c) => c.type)).toStrictEqual([
        "start",
        "error",
        "finish",
      ]);
      expect(chunks).toContainEqual({ type: "error", errorText: "the run failed" });
      expect(textOf(message)).toBe("");
    }
    // the AI SDK's reader reported it, once per reading
    expect(errors).toStrictEqual(Array(3).fill({ type: "error", errorText: "the run failed" }));
    expect(drafts((await live).chunks).filter((d) => d.state !== "streaming")).toStrictEqual([
      { seq: 0, attempt: 1, state: "abandoned" },
      { seq: 0, attempt: 2, state: "abandoned" },
    ]);
  });

  it("resumeRunResponse: 204 without a run, for an unknown or ended run; an SSE replay for an active one", async () => {
    const stream = new MemoryRunStream();
    expect((await resumeRunResponse(stream, undefined, { journal })).status).toBe(204);
    expect((await resumeRunResponse(stream, null)).status).toBe(204);
    expect((await resumeRunResponse(stream, "no-such-run", { journal })).status).toBe(204);

    const runId = `ui-resume-${randomUUID().slice(0, 8)}`;
    const run = start(stream, runId);
    await until(async () => (await journal.getRun(runId))?.status === "running", "the run to start");
    const res = await resumeRunResponse(stream, runId, { journal, headers: { "x-run": runId } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    expect(res.headers.get("x-vercel-ai-ui-message-stream")).toBe("v1");
    expect(res.headers.get("x-run")).toBe(runId);
    const sse = await res.text();
    await run;
    expect(sse.startsWith(`data: {"type":"start","messageId":"${runId}"}`)).toBe(true);
    expect(sse.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(sse).toContain(JSON.stringify({ type: "text-delta", id: "run-text-1", delta: TEXT }));
    // ended: the chat store holds the answer
    expect((await resumeRunResponse(stream, runId, { journal })).status).toBe(204);
  });

  it("a side channel that cannot be read: an error chunk (no server detail unless onError says so), then the end", async () => {
    // a real Redis client to a port nothing listens on
    const down = new RedisRunStream({ url: "redis://127.0.0.1:1", connectTimeoutMs: 200, commandTimeoutMs: 300 });
    closers.push(() => down.close());
    const seen: unknown[] = [];
    const report = (e: unknown) => {
      seen.push(e);
      return "the answer cannot be read now";
    };
    for (const onError of [undefined, report]) {
      const errors: UIMessageChunk[] = [];
      const { chunks } = await read(runUIMessageStream(down, "r-down", onError ? { onError } : {}), errors);
      expect(chunks).toStrictEqual([
        { type: "error", errorText: onError ? "the answer cannot be read now" : "An error occurred." },
      ]);
      expect(errors).toHaveLength(1);
    }
    expect(seen).toHaveLength(1);
    expect((seen[0] as { code?: string }).code).toBe("BACKEND_ERROR");
  });

  it.skipIf(!!redisSkip)(
    "a Redis side channel trimmed by maxLength: an error chunk, never the end of the answer passed off as all of it",
    async () => {
      const trimmed = new RedisRunStream({ url: REDIS_URL, keyPrefix: `test:trim:${randomUUID()}:`, maxLength: 5 });
      closers.push(() => trimmed.close());
      for (let i = 0; i < 300; i++)
        await trimmed.append("r-long", { type: "token", seq: 0, attempt: 1, text: `w${i} ` });
      expect((await trimmed.read("r-long"))[0]?.index).toBeGreaterThan(1);
      const errors: UIMessageChunk[] = [];
      const { chunks } = await read(runUIMessageStream(trimmed, "r-long"), errors);
      expect(chunks.map((c) => c.type)).toStrictEqual(["start", "error", "finish"]);
      expect(deltas(chunks)).toBe("");
      expect(errors).toHaveLength(1);
      expect((chunks[1] as { errorText: string }).errorText).toMatch(/trimmed \(maxLength\)/);
      await trimmed.delete("r-long");
    },
  );

  it("refuses an unknown option, an empty run id and a bad pollMs", async () => {
    const stream = new MemoryRunStream();
    expect(() => runUIMessageStream(stream, "r", { jounral: journal } as never)).toThrow(InvalidOptionError);
    expect(() => runUIMessageStream(stream, "")).toThrow(InvalidOptionError);
    expect(() => runUIMessageStream(stream, "r", { pollMs: 0 })).toThrow(InvalidOptionError);
    await expect(resumeRunResponse(stream, "r", { drafts: true, header: {} } as never)).rejects.toThrow(
      InvalidOptionError,
    );
  });
});
