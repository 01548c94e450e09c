/**
 * Streams that end (issue 25 item 3): a subscription survives the loss of its
 * Redis connection (CLIENT KILL) and goes on from its cursor, each event once;
 * with `journal`, a finished run's stream answers at once (its events then the
 * end, or a typed "gone" when it expired or was deleted) and a producer that
 * died (SIGKILL of the process running the run) is a typed error within the
 * lease TTL plus a poll; a read behind the retained window reports the gap.
 * The contract runs on both streams; the AI SDK UI stream of a `useChat`
 * reader survives a connection kill.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { readUIMessageStream, type UIMessage, type UIMessageChunk } from "ai";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runUIMessageStream } from "../../src/ai-sdk/index.js";
import { BackendError, FormatError, InvalidOptionError } from "../../src/core/errors.js";
import { step } from "../../src/durable/context.js";
import { RunStreamError } from "../../src/durable/errors.js";
import type { Journal, RunRecord } from "../../src/durable/journal.js";
import { SqliteJournal } from "../../src/durable/journal-sqlite.js";
import { runDurable } from "../../src/durable/run.js";
import {
  MemoryRunStream,
  RedisRunStream,
  type RunEventStream,
  type RunStreamEvent,
  readText,
  type SubscribeOptions,
} from "../../src/durable/stream.js";
import { type ModelServer, startModelServer } from "../../src/testing/model-server.js";
import { fixture, startChild } from "../fixtures/durable/spawn.js";
import { HELLO, HELLO_CHUNK } from "../fixtures/durable/stream-fixture.js";
import { redisServerBinary, startRedis } from "../helpers/redis-server.js";
import { REDIS_URL, redisSkipReason } from "../helpers/services.js";

const redisSkip = await redisSkipReason();
const prefix = `test:stream-end:${randomUUID()}:`;
const closers: (() => Promise<void>)[] = [];
const dir = mkdtempSync(path.join(tmpdir(), "dumplings-stream-end-"));
let admin: Redis | undefined;
let journal: SqliteJournal;

beforeAll(() => {
  journal = new SqliteJournal({ path: path.join(dir, "journal.db") });
  if (!redisSkip) admin = new Redis(REDIS_URL);
});
afterAll(async () => {
  for (const c of closers.reverse()) await c().catch(() => undefined);
  await journal.close();
  if (admin) {
    const keys = await admin.keys(`${prefix}*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
  rmSync(dir, { recursive: true, force: true });
});

function redisStream(options: { maxLength?: number; ttlMs?: number; blockMs?: number } = {}): RedisRunStream {
  const s = new RedisRunStream({ url: REDIS_URL, keyPrefix: prefix, blockMs: 200, ...options });
  closers.push(() => s.close());
  return s;
}

/** Collects a subscription: its events, and how it ended (`end`, or the error) and when (ms after the start). */
async function collect(stream: RunEventStream, runId: string, options: SubscribeOptions = {}) {
  const t0 = Date.now();
  const events: RunStreamEvent[] = [];
  try {
    for await (const e of stream.subscribe(runId, options)) events.push(e);
    return { events, error: undefined as unknown, ms: Date.now() - t0 };
  } catch (error) {
    return { events, error, ms: Date.now() - t0 };
  }
}

/** A finished run that streamed two tokens (then runDurable's run-end): 3 events. */
async function finishedRun(stream: RunEventStream, runId: string): Promise<void> {
  const result = await runDurable(
    runId,
    async () => {
      await step("say", async () => {
        await stream.append(runId, { type: "token", text: "Hel" });
        await stream.append(runId, { type: "token", text: "lo" });
        return "Hello";
      });
      return "Hello";
    },
    { journal, stream, input: {} },
  );
  expect(result.status).toBe("completed");
}

/** A journal view of one run in the given status (`running` runs with a lease that expired at 1000). */
function fakeJournal(status: RunRecord["status"], leaseExpiresAt?: number): Pick<Journal, "getRun" | "now"> {
  return {
    getRun: async (runId) =>
      ({
        runId,
        workflow: "w",
        status,
        input: {},
        fencingToken: 1,
        createdAt: 0,
        updatedAt: 0,
        ...(leaseExpiresAt === undefined ? {} : { leaseOwner: "dead-worker", leaseExpiresAt }),
      }) as RunRecord,
    now: async () => 5000,
  };
}

const kinds: { name: string; skip: string | undefined; make: () => RunEventStream }[] = [
  { name: "memory", skip: undefined, make: () => new MemoryRunStream() },
  { name: "redis", skip: redisSkip, make: () => redisStream() },
];

for (const kind of kinds) {
  describe.skipIf(!!kind.skip)(`stream contract with journal: ${kind.name}`, () => {
    it("a finished run's stream answers at once: its events after the cursor, then the end", async () => {
      const stream = kind.make();
      const runId = `fin-${kind.name}-${randomUUID().slice(0, 8)}`;
      await finishedRun(stream, runId);
      const all = await collect(stream, runId, { journal });
      expect(all.error).toBeUndefined();
      expect(all.events.map((e) => e.index)).toEqual([1, 2, 3]);
      expect(all.ms).toBeLessThan(500);
      const rest = await collect(stream, runId, { journal, after: 2 });
      expect(rest.events.map((e) => e.index)).toEqual([3]);
      const none = await collect(stream, runId, { journal, after: 3 });
      expect(none.error).toBeUndefined();
      expect(none.events).toEqual([]);
      expect(none.ms).toBeLessThan(500);
    });

    it('a finished run whose stream was deleted: a RunStreamError "gone" at once, saying where the text is', async () => {
      const stream = kind.make();
      const runId = `gone-${kind.name}-${randomUUID().slice(0, 8)}`;
      await finishedRun(stream, runId);
      await stream.delete(runId);
      for (const after of [0, 2]) {
        const r = await collect(stream, runId, { journal, after });
        expect(r.error).toBeInstanceOf(RunStreamError);
        expect(r.error).toMatchObject({ code: "RUN_STREAM", reason: "gone", runId, after });
        expect((r.error as Error).message).toMatch(/readText\(stream, runId, \{ journal \}\)/);
        expect(r.ms).toBeLessThan(500);
      }
    });

    it('a running run whose lease expired: its events, then a RunStreamError "producer-lost"', async () => {
      const stream = kind.make();
      const runId = `lost-${kind.name}-${randomUUID().slice(0, 8)}`;
      await stream.append(runId, { type: "token", text: "Hel" });
      const r = await collect(stream, runId, { journal: fakeJournal("running", 1000) });
      expect(r.events.map((e) => e.index)).toEqual([1]);
      expect(r.error).toBeInstanceOf(RunStreamError);
      expect(r.error).toMatchObject({ code: "RUN_STREAM", reason: "producer-lost", runId, after: 1 });
      // a live lease: the subscription stays open (ended here by its signal)
      const live = await collect(stream, runId, {
        journal: fakeJournal("running", 10_000),
        signal: AbortSignal.timeout(1500),
      });
      expect(live.error).toBeUndefined();
      expect(live.events.map((e) => e.index)).toEqual([1]);
    });

    it("a waiting run keeps the subscription open: events appended when it resumes are delivered", async () => {
      const stream = kind.make();
      const runId = `wait-${kind.name}-${randomUUID().slice(0, 8)}`;
      await stream.append(runId, { n: 1 });
      const ac = new AbortController();
      const sub = collect(stream, runId, { journal: fakeJournal("waiting"), signal: ac.signal, after: 1 });
      await new Promise((r) => setTimeout(r, 1300)); // past a poll of either stream
      await stream.append(runId, { n: 2 });
      await new Promise((r) => setTimeout(r, 300));
      ac.abort();
      const r = await sub;
      expect(r.error).toBeUndefined();
      expect(r.events.map((e) => e.index)).toEqual([2]);
    });

    it("refuses a journal without getRun/now and an after that is not a non-negative integer", async () => {
      const stream = kind.make();
      for (const options of [{ journal: {} }, { journal: null }, { after: -1 }, { after: 1.5 }, { after: "3" }]) {
        const r = await collect(stream, "x", options as SubscribeOptions);
        expect(r.error).toBeInstanceOf(InvalidOptionError);
      }
    });
  });
}

/** The ids of the connections blocked in an XREAD now. */
async function xreadClients(): Promise<Set<string>> {
  const list = (await admin?.call("CLIENT", "LIST", "TYPE", "normal")) as string;
  return new Set(
    list
      .split("\n")
      .filter((l) => / cmd=xread /.test(l))
      .map((l) => /(?:^|\s)id=(\d+)/.exec(l)?.[1] as string),
  );
}

/** Kills the XREAD connections opened since `before` (this test's readers), by id. */
async function killNewReaders(before: Set<string>): Promise<number> {
  for (let i = 0; i < 50; i++) {
    const ids = [...(await xreadClients())].filter((id) => !before.has(id));
    if (ids.length > 0) {
      for (const id of ids) await admin?.call("CLIENT", "KILL", "ID", id);
      return ids.length;
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("no reader connection found");
}

async function read(ui: ReadableStream<UIMessageChunk>, onChunk: (c: UIMessageChunk) => void) {
  const chunks: UIMessageChunk[] = [];
  const tapped = ui.pipeThrough(
    new TransformStream<UIMessageChunk, UIMessageChunk>({
      transform(c, ctl) {
        chunks.push(c);
        onChunk(c);
        ctl.enqueue(c);
      },
    }),
  );
  let message: UIMessage | undefined;
  for await (const m of readUIMessageStream({ stream: tapped, terminateOnError: false, onError: () => undefined }))
    message = m;
  return { chunks, message };
}
const textOf = (m: UIMessage | undefined) => (m?.parts ?? []).map((p) => (p.type === "text" ? p.text : "")).join("");

const until = (e: RunStreamEvent) => (e.data as { type?: string }).type === "end";

describe.skipIf(!!redisSkip)("RedisRunStream: connection loss, trimming, expiry", () => {
  it("CLIENT KILL of a subscriber's connection mid-stream: it reconnects and gets every event exactly once, then the end", async () => {
    const stream = redisStream();
    const runId = `kill-${randomUUID().slice(0, 8)}`;
    for (let i = 1; i <= 3; i++) await stream.append(runId, { i });
    const before = await xreadClients();
    const got: number[] = [];
    let seen3: () => void = () => undefined;
    const third = new Promise<void>((r) => (seen3 = r));
    const sub = (async () => {
      for await (const e of stream.subscribe(runId, { until })) {
        got.push(e.index);
        if (e.index === 3) seen3();
      }
    })();
    await third;
    expect(await killNewReaders(before)).toBe(1); // blocked after event 3
    for (let i = 4; i <= 6; i++) await stream.append(runId, { i });
    await new Promise((r) => setTimeout(r, 300));
    // and a second time, while it is blocked again on its fresh connection
    expect(await killNewReaders(before)).toBe(1);
    await stream.append(runId, { i: 7 });
    await stream.append(runId, { type: "end" });
    await sub;
    expect(got).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
  });

  it.skipIf(!redisServerBinary())(
    "Redis restarted under a subscriber: it resumes from its cursor; Redis gone for good: a BackendError within the budget",
    async () => {
      const server = await startRedis();
      closers.push(() => server.kill());
      const stream = new RedisRunStream({ url: server.url, keyPrefix: prefix, blockMs: 200, connectTimeoutMs: 1500 });
      closers.push(() => stream.close());
      const runId = "restart";
      for (let i = 1; i <= 3; i++) await stream.append(runId, { i });
      const got: number[] = [];
      let seen3: () => void = () => undefined;
      const third = new Promise<void>((r) => (seen3 = r));
      const sub = (async () => {
        try {
          for await (const e of stream.subscribe(runId, { until })) {
            got.push(e.index);
            if (e.index === 3) seen3();
          }
          return { error: undefined as unknown };
        } catch (error) {
          return { error };
        }
      })();
      await third;
      await server.kill();
      await new Promise((r) => setTimeout(r, 300));
      const again = await startRedis(server.port);
      closers.push(() => again.kill());
      // the restarted server is empty (no persistence): the producer writes the run's events again
      for (let i = 1; i <= 4; i++) await stream.append(runId, { i });
      await stream.append(runId, { type: "end" });
      expect((await sub).error).toBeUndefined();
      expect(got).toEqual([1, 2, 3, 4, 5]);

      // gone for good: the subscription gives up within connectTimeoutMs (+ one connection attempt and a margin)
      const second = collect(stream, runId, { after: 5 });
      await new Promise((r) => setTimeout(r, 300));
      const killedAt = Date.now();
      await again.kill();
      const r = await second;
      expect(r.error).toBeInstanceOf(BackendError);
      expect((r.error as Error).message).toMatch(/not replaced within connectTimeoutMs \(1500 ms\); its cursor was 5/);
      expect(Date.now() - killedAt).toBeLessThan(2 * 1500 + 1500);
    },
  );

  it('a read from a cursor behind the trimmed window: a RunStreamError "trimmed" naming the cursor and the first index held', async () => {
    const stream = redisStream({ maxLength: 5 });
    const runId = `trim-${randomUUID().slice(0, 8)}`;
    for (let i = 1; i <= 400; i++) await stream.append(runId, { type: "token", text: `w${i} ` });
    const first = (await stream.read(runId))[0]?.index as number;
    expect(first).toBeGreaterThan(3);
    const r = await collect(stream, runId, { after: 2, signal: AbortSignal.timeout(2000) });
    expect(r.events).toEqual([]);
    expect(r.error).toBeInstanceOf(RunStreamError);
    expect(r.error).toMatchObject({ code: "RUN_STREAM", reason: "trimmed", runId, after: 2, firstIndex: first });
    // from a cursor inside the window: no gap
    const ok = await collect(stream, runId, { after: first - 1, until: (e) => e.index === 400 });
    expect(ok.error).toBeUndefined();
    expect(ok.events[0]?.index).toBe(first);
    // readText refuses with the same class (still a FormatError)
    const refused = await readText(stream, runId).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RunStreamError);
    expect(refused).toBeInstanceOf(FormatError);
    expect(refused).toMatchObject({ reason: "trimmed", after: 0, firstIndex: first });
  });

  it('a finished run whose stream expired (ttlMs): a RunStreamError "gone" at once', async () => {
    const stream = redisStream({ ttlMs: 150 });
    const runId = `ttl-${randomUUID().slice(0, 8)}`;
    await finishedRun(stream, runId);
    await new Promise((r) => setTimeout(r, 400));
    expect(await stream.read(runId)).toEqual([]);
    const r = await collect(stream, runId, { journal });
    expect(r.error).toMatchObject({ code: "RUN_STREAM", reason: "gone", runId });
    expect(r.ms).toBeLessThan(500);
  });
});

describe.skipIf(!!redisSkip)("a producer SIGKILLed mid-stream", () => {
  let server: ModelServer;
  beforeAll(async () => {
    server = await startModelServer({
      handler: () => ({ text: HELLO, chunkSize: HELLO_CHUNK, delayMs: 300, chunkDelayMs: 500 }),
    });
  });
  afterAll(async () => {
    await server?.close();
  });

  it('its reader gets the events it appended, then a RunStreamError "producer-lost" within the lease TTL and a poll', async () => {
    const stream = redisStream();
    const runId = `sigkill-${randomUUID().slice(0, 8)}`;
    const leaseTtlMs = 600;
    const sub = collect(stream, runId, { journal, signal: AbortSignal.timeout(20_000) });
    // what a useChat client reads of it (AbortSignal.timeout: ends the old code's endless wait)
    const ui = read(
      runUIMessageStream(stream, runId, { journal, pollMs: 100, signal: AbortSignal.timeout(20_000) }),
      () => undefined,
    );
    const child = startChild(fixture("stream-child.ts"), {
      STORE: "sqlite",
      TARGET: path.join(dir, "journal.db"),
      SCOPE: "",
      REDIS_URL,
      STREAM_PREFIX: prefix,
      MODEL_URL: server.url,
      RUN_ID: runId,
      LEASE_TTL_MS: String(leaseTtlMs),
      KILL_AFTER_TOKENS: "1",
    });
    const died = await child.done;
    const diedAt = Date.now();
    expect(died.signal, died.stderr).toBe("SIGKILL");
    const r = await sub;
    const after = Date.now() - diedAt;
    expect(r.events.map((e) => (e.data as { text?: string }).text).filter(Boolean)).toEqual(["Hello, "]);
    expect(r.error).toBeInstanceOf(RunStreamError);
    expect(r.error).toMatchObject({ code: "RUN_STREAM", reason: "producer-lost", runId });
    // lease TTL + the 1 s grace (a takeover at the expiry wins) + one poll (blockMs 200), with a margin for a loaded machine
    expect(after).toBeLessThan(leaseTtlMs + 1000 + 200 + 1000);
    const { chunks } = await ui;
    expect(chunks.filter((c) => c.type === "error")).toEqual([
      { type: "error", errorText: expect.stringMatching(/the process running the run stopped/) },
    ]);
    expect(chunks.at(-1)).toEqual({ type: "finish" });
  });
});

describe.skipIf(!!redisSkip)("runUIMessageStream (what a useChat client reads)", () => {
  it("a kill of the reader's connection mid-answer: the message ends whole, with no error", async () => {
    const stream = redisStream();
    const runId = `ui-kill-${randomUUID().slice(0, 8)}`;
    await stream.append(runId, { type: "token", text: "Hello, " });
    const before = await xreadClients();
    let firstDelta: () => void = () => undefined;
    const delta = new Promise<void>((r) => (firstDelta = r));
    const reading = read(runUIMessageStream(stream, runId), (c) => {
      if (c.type === "text-delta") firstDelta();
    });
    await delta;
    expect(await killNewReaders(before)).toBe(1);
    await stream.append(runId, { type: "token", text: "world" });
    await stream.append(runId, { type: "run-end", status: "completed" });
    const { chunks, message } = await reading;
    expect(chunks.filter((c) => c.type === "error")).toEqual([]);
    expect(textOf(message)).toBe(HELLO);
    expect(chunks.at(-1)).toEqual({ type: "finish" });
  });

  it("with the journal, a finished run whose stream expired: an error chunk saying so, at once", async () => {
    const stream = redisStream({ ttlMs: 150 });
    const runId = `ui-gone-${randomUUID().slice(0, 8)}`;
    await finishedRun(stream, runId);
    await new Promise((r) => setTimeout(r, 400));
    const { chunks } = await read(runUIMessageStream(stream, runId, { journal }), () => undefined);
    expect(chunks.find((c) => c.type === "error")).toMatchObject({ errorText: expect.stringMatching(/expired/) });
    expect(chunks.at(-1)).toEqual({ type: "finish" });
  });
});
