/**
 * A side channel readers can trust (pb-35): every event a run appends carries
 * the run, the step and the attempt that produced it; a retried `llm` attempt
 * first appends a reset for the abandoned one; `readText` rebuilds exactly the
 * journaled text ("Hello, world", never "Hello, Hello, world") — after a
 * connection dropped mid-stream (memory and Redis streams) and after a SIGKILL
 * mid-stream with the replay in another process, on the SQLite, PostgreSQL and
 * Redis journals.
 */
import { randomUUID } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { currentRun, step } from "../../src/durable/context.js";
import { runDurable } from "../../src/durable/run.js";
import {
  MemoryRunStream,
  type RebuildTextOptions,
  RedisRunStream,
  type RunEventStream,
  type RunStreamEvent,
  readText,
  rebuildText,
} from "../../src/durable/stream.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";
import { fixture, runChild } from "../fixtures/durable/spawn.js";
import { journalStores } from "../fixtures/durable/stores.js";
import { HELLO, HELLO_CHUNK, helloMessages, makeHelloAgent, runOfRequest } from "../fixtures/durable/stream-fixture.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const stores = await journalStores();
const redisSkip = await redisSkipReason();
const streamPrefix = `test:stream-attempts:${randomUUID()}:`;
const closers: (() => Promise<void>)[] = [];

let server: ModelServer;
/** Runs whose first model request is cut after the "Hello, " chunk (the connection is dropped). */
const dropFirst = new Set<string>();
const requestsByRun = new Map<string, number>();

beforeAll(async () => {
  server = await startModelServer({
    handler: (request) => {
      const run = runOfRequest(request.body);
      const n = (requestsByRun.get(run) ?? 0) + 1;
      requestsByRun.set(run, n);
      // SSE events: the role chunk, "Hello, ", "world", … — dropAfterEvents: 2 cuts after "Hello, "
      return { text: HELLO, chunkSize: HELLO_CHUNK, ...(n === 1 && dropFirst.has(run) ? { dropAfterEvents: 2 } : {}) };
    },
  });
});
afterAll(async () => {
  for (const close of closers.reverse()) await close();
  await server?.close();
});

type Token = { type: "token"; text: string; seq?: number; attempt?: number };
const dataOf = (e: RunStreamEvent) => e.data as { type?: string; text?: string; seq?: number; attempt?: number };
const naive = (events: RunStreamEvent[]) =>
  events
    .map(dataOf)
    .filter((d): d is Token => d.type === "token")
    .map((d) => d.text)
    .join("");

function redisStream(): RedisRunStream {
  const s = new RedisRunStream({ url: REDIS_URL, keyPrefix: streamPrefix, blockMs: 100 });
  closers.push(() => s.close());
  return s;
}

const streams: { name: string; skip: string | undefined; make: () => RunEventStream }[] = [
  { name: "memory", skip: undefined, make: () => new MemoryRunStream() },
  { name: "redis", skip: redisSkip, make: redisStream },
];

for (const store of stores) {
  describe.skipIf(!!store.skip)(
    `side channel on the ${store.name} journal${store.skip ? ` (skipped: ${store.skip})` : ""}`,
    () => {
      for (const kind of streams) {
        it.skipIf(!!kind.skip)(
          `${kind.name} stream: a dropped first llm attempt is reset, and readText gives exactly the journaled text`,
          async () => {
            const opened = store.open();
            closers.push(() => opened.destroy());
            const { journal } = opened;
            const stream = kind.make();
            const runId = `pb35-${store.name}-${kind.name}-${randomUUID().slice(0, 8)}`;
            dropFirst.add(runId);

            const result = await runDurable(runId, makeHelloAgent(server.url).workflow(), {
              journal,
              stream,
              input: { messages: helloMessages(runId) },
            });
            expect(result).toMatchObject({ status: "completed", output: { text: HELLO, llmSteps: 1 } });
            expect(requestsByRun.get(runId)).toBe(2); // the llm step really was retried

            const steps = await journal.readSteps(runId);
            expect(steps.map((s) => [s.name, s.status, s.attempt])).toEqual([["llm", "completed", 2]]);
            const journaled = (steps[0]?.output as { content: { type: string; text: string }[] } | undefined)?.content
              .filter((p) => p.type === "text")
              .map((p) => p.text)
              .join("");
            expect(journaled).toBe(HELLO);

            const events = await stream.read(runId);
            // the bug a reader without the markers has
            expect(naive(events)).toBe("Hello, Hello, world");
            // every token event names its run, step, attempt and executor; the data says the step and attempt too
            const tokens = events.filter((e) => dataOf(e).type === "token");
            for (const e of tokens) {
              expect(e).toMatchObject({ runId, seq: 0, fencingToken: steps[0]?.fencingToken });
              expect(dataOf(e)).toMatchObject({ seq: 0, attempt: e.attempt });
            }
            expect(tokens.map((e) => [e.attempt, dataOf(e).text])).toEqual([
              [1, "Hello, "],
              [2, "Hello, "],
              [2, "world"],
            ]);
            // attempt 2 first resets attempt 1, before any token of its own
            const reset = events.findIndex((e) => dataOf(e).type === "reset");
            expect(events[reset]).toMatchObject({
              runId,
              seq: 0,
              attempt: 2,
              data: { type: "reset", seq: 0, attempt: 1 },
            });
            expect(reset).toBeGreaterThan(events.indexOf(tokens[0] as RunStreamEvent));
            expect(reset).toBeLessThan(events.indexOf(tokens[1] as RunStreamEvent));
            // the run's end is outside any step: no seq, no attempt
            const end = events.find((e) => dataOf(e).type === "run-end");
            expect(end?.seq).toBeUndefined();
            expect(end?.attempt).toBeUndefined();

            expect(await readText(stream, runId)).toBe(HELLO);
            expect(await readText(stream, runId, { journal })).toBe(journaled);
            expect(await readText(stream, runId, { journal, seq: 0 })).toBe(HELLO);
            expect(await readText(stream, runId, { seq: 1 })).toBe("");
          },
        );
      }

      it.skipIf(!!redisSkip)(
        "a SIGKILL mid-stream, then the replay in this process: readText gives the journaled text",
        async () => {
          const opened = store.open();
          closers.push(() => opened.destroy());
          const { journal } = opened;
          const stream = redisStream();
          const runId = `pb35-kill-${store.name}-${randomUUID().slice(0, 8)}`;

          const child = await runChild(fixture("stream-child.ts"), {
            ...opened.env,
            REDIS_URL,
            STREAM_PREFIX: streamPrefix,
            MODEL_URL: server.url,
            RUN_ID: runId,
            LEASE_TTL_MS: "500",
            KILL_AFTER_TOKENS: "1",
          });
          expect(child.signal, child.stderr).toBe("SIGKILL");
          const cut = await stream.read(runId);
          expect(naive(cut)).toBe("Hello, ");
          expect((await journal.readSteps(runId)).map((s) => [s.name, s.status, s.attempt])).toEqual([
            ["llm", "started", 1],
          ]);

          const result = await runDurable(runId, makeHelloAgent(server.url).workflow(), { journal, stream });
          expect(result).toMatchObject({ status: "completed", output: { text: HELLO } });
          expect(requestsByRun.get(runId)).toBe(2);

          const events = await stream.read(runId);
          expect(naive(events)).toBe("Hello, Hello, world");
          const [step0] = await journal.readSteps(runId);
          expect(step0).toMatchObject({ status: "completed", attempt: 2 });
          const tokens = events.filter((e) => dataOf(e).type === "token");
          const [first, ...rest] = tokens;
          expect(first).toMatchObject({ runId, seq: 0, attempt: 1 });
          // the replay ran under a newer fencing token than the killed process
          expect(first?.fencingToken).toBeLessThan(step0?.fencingToken ?? 0);
          for (const e of rest) expect(e).toMatchObject({ seq: 0, attempt: 2, fencingToken: step0?.fencingToken });
          expect(events.find((e) => dataOf(e).type === "reset")).toMatchObject({
            data: { seq: 0, attempt: 1 },
            attempt: 2,
          });

          expect(await readText(stream, runId)).toBe(HELLO);
          expect(await readText(stream, runId, { journal })).toBe(HELLO);
        },
      );
    },
  );
}

describe("event origin", () => {
  it("a step body's appends are tagged with its run, step and attempt; appends outside a run are not", async () => {
    const stores0 = stores[0];
    if (!stores0) throw new Error("no store");
    const opened = stores0.open();
    closers.push(() => opened.destroy());
    const stream = new MemoryRunStream();
    let failures = 0;
    const result = await runDurable(
      "origin-1",
      async () => {
        await currentRun()?.emit({ type: "note", text: "workflow" });
        await step("a", () => null);
        return step(
          "b",
          async () => {
            await stream.append("origin-1", { type: "token", text: "direct" });
            if (failures++ === 0) throw new Error("first attempt fails");
            return "ok";
          },
          { retry: { maxAttempts: 2, backoffMs: 1 } },
        );
      },
      { journal: opened.journal, stream, input: null },
    );
    expect(result.status).toBe("completed");
    const events = await stream.read("origin-1");
    const token = (await opened.journal.getRun("origin-1"))?.fencingToken;
    expect(events.map(({ index: _, ...e }) => e)).toEqual([
      { runId: "origin-1", fencingToken: token, data: { type: "note", text: "workflow" } },
      { runId: "origin-1", seq: 1, attempt: 1, fencingToken: token, data: { type: "token", text: "direct" } },
      { runId: "origin-1", seq: 1, attempt: 2, fencingToken: token, data: { type: "token", text: "direct" } },
      { data: { type: "run-end", status: "completed" } },
    ]);
    // appends from outside the run carry no origin; an explicit origin is validated
    await stream.append("origin-1", "outside");
    expect((await stream.read("origin-1", 4))[0]).toEqual({ index: 5, data: "outside" });
    await expect(stream.append("origin-1", "x", { seq: -1 })).rejects.toBeInstanceOf(TypeError);
    await stream.append("origin-1", "tagged", { seq: 3, attempt: 2, fencingToken: 9 });
    expect((await stream.read("origin-1", 5))[0]).toEqual({
      index: 6,
      runId: "origin-1",
      seq: 3,
      attempt: 2,
      fencingToken: 9,
      data: "tagged",
    });
  });

  it.skipIf(!!redisSkip)("the Redis stream stores and returns the same origin fields", async () => {
    const stream = redisStream();
    const run = `origin-${randomUUID()}`;
    await stream.append(run, { type: "token", text: "a" }, { seq: 2, attempt: 3, fencingToken: 7 });
    await stream.append(run, { type: "token", text: "b" });
    expect(await stream.read(run)).toEqual([
      { index: 1, runId: run, seq: 2, attempt: 3, fencingToken: 7, data: { type: "token", text: "a" } },
      { index: 2, data: { type: "token", text: "b" } },
    ]);
    const seen: RunStreamEvent[] = [];
    for await (const e of stream.subscribe(run, { until: (e) => e.index === 2 })) seen.push(e);
    expect(seen[0]).toMatchObject({ runId: run, seq: 2, attempt: 3, fencingToken: 7 });
    await stream.delete(run);
  });
});

describe("rebuildText", () => {
  let index = 0;
  const ev = (data: Record<string, unknown>, origin: Partial<RunStreamEvent> = {}): RunStreamEvent =>
    ({ index: ++index, runId: "r", ...origin, data }) as RunStreamEvent;
  const tok = (text: string, seq: number, attempt: number, fencingToken = 1) =>
    ev({ type: "token", text }, { seq, attempt, fencingToken });
  const reset = (seq: number, abandoned: number, fencingToken = 1) =>
    ev({ type: "reset", seq, attempt: abandoned }, { seq, attempt: abandoned + 1, fencingToken });
  const rebuild = (events: RunStreamEvent[], options?: RebuildTextOptions) => rebuildText(events, options);

  it("keeps the latest attempt of each step, and what is outside steps", () => {
    const events = [
      ev({ type: "token", text: "[" }),
      tok("Hel", 0, 1),
      reset(0, 1),
      tok("Hello", 0, 2),
      tok(" there", 1, 1),
      ev({ type: "token", text: "]" }),
    ];
    expect(rebuild(events)).toBe("[Hello there]");
    expect(rebuild(events, { seq: 0 })).toBe("Hello");
    expect(rebuild(events, { seq: 1 })).toBe(" there");
    expect(rebuild(events, { type: "other" })).toBe("");
  });

  it("drops a zombie attempt's late tokens, whatever their position", () => {
    // attempt 1 lost its lease but keeps streaming after attempt 2 (another executor) reset it
    expect(rebuild([tok("A", 0, 1, 1), reset(0, 1, 2), tok("B", 0, 2, 2), tok("a", 0, 1, 1)])).toBe("B");
  });

  it("an attempt that has reset but streamed nothing yet shows nothing", () => {
    expect(rebuild([tok("Hello, ", 0, 1), reset(0, 1)])).toBe("");
  });

  it("an operator retry that starts the step over at attempt 1 wins by its newer fencing token", () => {
    expect(rebuild([tok("old", 0, 1, 3), tok("older", 0, 2, 3), tok("new", 0, 1, 5)])).toBe("new");
  });

  it("with the journal's records: only the completed attempt of each step", () => {
    const events = [tok("x", 0, 1, 1), tok("Hi", 0, 2, 1), tok("partial", 1, 1, 1), tok("!", 2, 1, 1)];
    const rec = (seq: number, status: "completed" | "started" | "failed", attempt: number, fencingToken = 1) => ({
      runId: "r",
      seq,
      name: "llm",
      inputHash: "",
      status,
      attempt,
      startedAt: 0,
      fencingToken,
    });
    expect(rebuild(events, { steps: [rec(0, "completed", 2), rec(1, "started", 1), rec(2, "failed", 1)] })).toBe("Hi");
    // the same attempt number under another executor is not the journaled attempt
    expect(rebuild(events, { steps: [rec(0, "completed", 2, 9)] })).toBe("");
  });

  it("a stream that keeps no origin: the seq and attempt in the data are used", () => {
    const plain = (data: Record<string, unknown>) => ({ index: ++index, data }) as RunStreamEvent;
    const events = [
      plain({ type: "token", seq: 0, attempt: 1, text: "Hello, " }),
      plain({ type: "reset", seq: 0, attempt: 1 }),
      plain({ type: "token", seq: 0, attempt: 2, text: "Hello, " }),
      plain({ type: "token", seq: 0, attempt: 2, text: "world" }),
    ];
    expect(rebuild(events)).toBe(HELLO);
  });
});
