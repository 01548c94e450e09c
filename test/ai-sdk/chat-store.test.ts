/**
 * `createChatStore` on every built-in backend: UIMessage and ModelMessage
 * chats (hand-made with every part type, and the bundled conversations
 * converted) round-trip deep-equal with their types; a chat that grew by one
 * message writes one message, also from freshly parsed arrays, without reading the stored messages'
 * content; an edit, a regeneration or a removal (the AI SDK's message identity) rewrites the chat.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { type ModelMessage, type UIMessage, validateUIMessages } from "ai";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createChatStore } from "../../src/ai-sdk/index.js";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend, WriteOptions, WriteResult } from "../../src/backends/types.js";
import {
  ConflictError,
  FormatError,
  InvalidKeyError,
  InvalidOptionError,
  InvalidStateError,
  NonJsonValueError,
} from "../../src/core/errors.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { handMadeModelMessages, handMadeUIMessages, sampleModelChats, toUIMessages } from "./fixtures.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-ai-sdk-"));
const redisSkip = await redisSkipReason();
const postgresSkip = await postgresSkipReason();
const redisPrefix = `ai-sdk-test:${randomUUID()}:`;
const pgSchema = `ai_sdk_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
const opened: StateBackend[] = [];

type Harness = { name: string; skip?: string; make: () => StateBackend };
const harnesses: Harness[] = [
  { name: "memory", make: () => new MemoryBackend() },
  { name: "file", make: () => new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "file-")) }) },
  { name: "sqlite", make: () => new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "db-")), "c.db") }) },
  { name: "redis", skip: redisSkip, make: () => new RedisBackend({ url: REDIS_URL, keyPrefix: redisPrefix }) },
  { name: "postgres", skip: postgresSkip, make: () => new PostgresBackend({ url: DATABASE_URL, schema: pgSchema }) },
];

/** A backend whose `write` calls are recorded (options and what the backend says it wrote). */
function recorded(backend: StateBackend): {
  backend: StateBackend;
  writes: Array<{ options: WriteOptions | undefined; result: WriteResult; historyLength: number }>;
} {
  const writes: Array<{ options: WriteOptions | undefined; result: WriteResult; historyLength: number }> = [];
  const write = backend.write?.bind(backend);
  if (write === undefined) throw new Error("backend without write");
  const proxy = new Proxy(backend, {
    get(target, prop, receiver) {
      if (prop === "write") {
        return async (key: string, state: Parameters<typeof write>[1], options?: WriteOptions) => {
          const result = await write(key, state, options);
          writes.push({ options, result, historyLength: state.history.length });
          return result;
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { backend: proxy, writes };
}

/** A deep copy with every object's keys in reverse order (same content). */
function reversedKeys<T>(value: T): T {
  if (Array.isArray(value)) return value.map(reversedKeys) as T;
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(
    Object.entries(value)
      .reverse()
      .map(([k, v]) => [k, reversedKeys(v)]),
  ) as T;
}

/** How many history messages the backend holds for `key`, read from the store itself. */
async function storedCount(backend: StateBackend, key: string): Promise<number> {
  const r = await backend.read?.(key);
  return r?.state.history.length ?? -1;
}

/** {@link handMadeModelMessages} as they load: the Buffer comes back as a plain Uint8Array of the same bytes (documented). */
function expectedModelMessages(): ModelMessage[] {
  const expected = handMadeModelMessages();
  const content = expected[1]?.content as Array<{ data?: unknown }>;
  const pdf = content[4] as { data: Uint8Array };
  pdf.data = new Uint8Array(pdf.data);
  return expected;
}

afterAll(async () => {
  for (const b of opened) await b.close?.();
  if (!redisSkip) {
    const admin = new Redis(REDIS_URL);
    const keys = await admin.keys(`${redisPrefix.replace(/[*?[\]\\]/g, "\\$&")}*`);
    if (keys.length > 0) await admin.del(...keys);
    admin.disconnect();
  }
  if (!postgresSkip) {
    const admin = new pg.Pool({ connectionString: DATABASE_URL, max: 1 });
    await admin.query(`DROP SCHEMA IF EXISTS "${pgSchema}" CASCADE`);
    await admin.end();
  }
  rmSync(tmp, { recursive: true, force: true });
});

describe.each(harnesses)("createChatStore on $name", (h) => {
  let backend: StateBackend;
  beforeAll(() => {
    if (h.skip) return;
    backend = h.make();
    opened.push(backend);
  });

  // issue 25 item 5: a route that appends the request's message to the stored chat stored a retried or
  // edited message twice
  it.skipIf(h.skip)(
    "a re-sent message (known id) is an edit: it replaces the earlier one, never a duplicate",
    async () => {
      const chats = createChatStore<UIMessage>({ store: backend });
      const id = `resent-${randomUUID()}`;
      const msg = (mid: string, role: "user" | "assistant", text: string): UIMessage => ({
        id: mid,
        role,
        parts: [{ type: "text", text }],
      });
      const chat = [msg("u1", "user", "hi"), msg("a1", "assistant", "hello"), msg("u2", "user", "weather?")];
      await chats.save(id, chat);
      // A retry of the last request: the route appends the same message again.
      await chats.save(id, [...chat, msg("u2", "user", "weather?")]);
      expect((await chats.load(id))?.map((m) => m.id)).toEqual(["u1", "a1", "u2"]);
      expect(await storedCount(backend, `chat-${id}`)).toBe(3);
      // An edit of an earlier message (useChat's sendMessage({ messageId })): what followed it is replaced.
      const edited = [
        ...chat,
        msg("a2", "assistant", "sunny"),
        msg("u1", "user", "hi again"),
        msg("a3", "assistant", "hey"),
      ];
      const r = await chats.save(id, edited);
      expect(r.rewritten).toBe(true);
      const loaded = await createChatStore<UIMessage>({ store: backend }).load(id);
      expect(loaded).toEqual([msg("u1", "user", "hi again"), msg("a3", "assistant", "hey")]);
      // Model messages have no ids: kept as given.
      const model: ModelMessage[] = [
        { role: "user", content: "x" },
        { role: "user", content: "x" },
      ];
      const modelChats = createChatStore<ModelMessage>({ store: backend });
      await modelChats.save(`${id}-m`, model);
      expect(await modelChats.load(`${id}-m`)).toHaveLength(2);
    },
  );

  it.skipIf(h.skip)("round-trips hand-made UIMessages (every part type) exactly", async () => {
    const chats = createChatStore<UIMessage>({ store: backend });
    const id = `ui-${randomUUID()}`;
    const messages = handMadeUIMessages();
    await validateUIMessages({ messages }); // they are real useChat messages
    await chats.save(id, messages);
    const loaded = await createChatStore<UIMessage>({ store: backend }).load(id);
    expect(loaded).toStrictEqual(handMadeUIMessages());
  });

  it.skipIf(h.skip)(
    "two requests saving their own turn on one read: the later is a ConflictError, no turn is dropped",
    async () => {
      const chats = createChatStore<UIMessage>({ store: backend });
      const id = `turns-${randomUUID()}`;
      const text = (i: string, role: "user" | "assistant"): UIMessage => ({
        id: i,
        role,
        parts: [{ type: "text", text: i }],
      });
      await chats.save(id, [text("u1", "user"), text("a1", "assistant")], { expectedRevision: null });
      // both requests read the same chat (one store instance, as one server process serves both)
      const a = (await chats.read(id)) as { messages: UIMessage[]; revision?: number };
      const b = (await chats.read(id)) as { messages: UIMessage[]; revision?: number };
      expect(a.revision).toBeGreaterThanOrEqual(1);
      const turnA = [...a.messages, text("u2", "user"), text("a2", "assistant")];
      const turnB = [...b.messages, text("u3", "user"), text("a3", "assistant")];
      const savedA = await chats.save(id, turnA, { expectedRevision: a.revision });
      expect(savedA).toMatchObject({ written: 2, rewritten: false });
      const lost = await chats.save(id, turnB, { expectedRevision: b.revision }).catch((e: unknown) => e);
      expect(lost).toBeInstanceOf(ConflictError);
      expect(lost).toMatchObject({ expectedRevision: b.revision, actualRevision: savedA.revision });
      expect(await chats.load(id)).toStrictEqual(turnA);
      // the same save repeated (a step re-run after a crash) is a no-op, not a conflict
      expect(await chats.save(id, turnA, { expectedRevision: a.revision })).toMatchObject({
        revision: savedA.revision,
        written: 0,
      });
      // a new chat with expectedRevision null exists now: a second creator conflicts
      await expect(chats.save(id, [text("x", "user")], { expectedRevision: null })).rejects.toBeInstanceOf(
        ConflictError,
      );
      for (const bad of [{ expectedRevison: 1 }, { expectedRevision: 0 }, { expectedRevision: 1.5 }]) {
        await expect(chats.save(id, turnA, bad as never)).rejects.toBeInstanceOf(InvalidOptionError);
      }
      expect(await chats.load(id)).toStrictEqual(turnA);
    },
  );

  it.skipIf(h.skip)("round-trips hand-made ModelMessages: Uint8Array stays Uint8Array, URL stays URL", async () => {
    const chats = createChatStore<ModelMessage>({ store: backend });
    const id = `model-${randomUUID()}`;
    await chats.save(id, handMadeModelMessages());
    const loaded = (await createChatStore<ModelMessage>({ store: backend }).load(id)) as ModelMessage[];
    expect(loaded).toStrictEqual(expectedModelMessages());
    const user = loaded[1]?.content as Array<{ image?: unknown; data?: unknown }>;
    expect(user[1]?.image).toBeInstanceOf(Uint8Array);
    expect(user[3]?.image).toBeInstanceOf(URL);
    expect(user[4]?.data).toBeInstanceOf(Uint8Array);
  });

  it.skipIf(h.skip)("round-trips the bundled conversations as ModelMessage and UIMessage chats", async () => {
    const chats = createChatStore({ store: backend, keyPrefix: `samples-${randomUUID()}-` });
    const samples = sampleModelChats(4);
    expect(samples.length).toBe(4);
    for (const [sampleId, model] of samples) {
      const ui = toUIMessages(sampleId, model);
      await chats.save(`${sampleId}-model`, model);
      await chats.save(`${sampleId}-ui`, ui);
      expect(await chats.load(`${sampleId}-model`)).toStrictEqual(model);
      expect(await chats.load(`${sampleId}-ui`)).toStrictEqual(ui);
    }
    expect(await chats.list()).toStrictEqual(samples.flatMap(([s]) => [`${s}-model`, `${s}-ui`]).sort());
  });

  it.skipIf(h.skip)("a chat that grew by one message writes one message; a changed older one rewrites", async () => {
    const { backend: spy, writes } = recorded(backend);
    const chats = createChatStore<UIMessage>({ store: spy });
    const id = `grow-${randomUUID()}`;
    const key = `chat-${id}`;
    const [sampleId, model] = sampleModelChats(1)[0] as [string, ModelMessage[]];
    const messages = toUIMessages(sampleId, model);
    expect(messages.length).toBeGreaterThan(3);

    const first = await chats.save(id, messages.slice(0, 3));
    expect(first).toMatchObject({ written: 3, rewritten: true });
    for (let n = 4; n <= messages.length; n++) {
      // every request brings fresh objects (as JSON from useChat), keys possibly in another order
      // (the AI SDK rebuilds messages): stored messages are found by id, the last stored one by content
      // (its canonical JSON, whatever the key order), never by object identity
      const next = n % 2 === 0 ? reversedKeys(messages.slice(0, n)) : structuredClone(messages.slice(0, n));
      const r = await chats.save(id, next);
      expect(r).toMatchObject({ written: 1, rewritten: false });
      const w = writes[writes.length - 1];
      expect(w?.options?.baseLength).toBe(n - 1);
      expect(w?.result.written).toBe(1);
      expect(await storedCount(backend, key)).toBe(n);
    }
    // a store instance that never saw the chat (another server process) appends too
    const fresh = createChatStore<UIMessage>({ store: spy });
    const grown = [...messages, { id: "extra", role: "user", parts: [{ type: "text", text: "more" }] } as UIMessage];
    expect(await fresh.save(id, grown)).toMatchObject({ written: 1, rewritten: false });
    // saving the same chat again writes nothing
    const before = writes.length;
    expect(await fresh.save(id, structuredClone(grown))).toMatchObject({ written: 0, rewritten: false });
    expect(writes.length).toBe(before);

    // an older answer replaced by another message (a new id, as `regenerate()` gives): the chat is rewritten
    const edited = structuredClone(grown);
    edited[1] = { ...(edited[1] as UIMessage), id: "regenerated-1", parts: [{ type: "text", text: "regenerated" }] };
    const r = await fresh.save(id, edited);
    expect(r.rewritten).toBe(true);
    expect(r.written).toBe(edited.length);
    expect(await chats.load(id)).toStrictEqual(edited);
    // a shorter chat (a message removed) also rewrites, and the store holds exactly it
    const cut = edited.slice(0, 2);
    expect((await chats.save(id, cut)).rewritten).toBe(true);
    expect(await storedCount(backend, key)).toBe(2);
    expect(await createChatStore({ store: backend }).load(id)).toStrictEqual(cut);
  });

  it.skipIf(h.skip)(
    "AI SDK message identity: an edit, a regeneration and a removal each rewrite the chat, atomically and exactly",
    async () => {
      const chats = createChatStore<UIMessage>({ store: backend });
      const id = `identity-${randomUUID()}`;
      const text = (i: number, t = `message ${i}`): UIMessage => ({
        id: `m${i}`,
        role: i % 2 === 0 ? "user" : "assistant",
        parts: [{ type: "text", text: t }],
      });
      const base = Array.from({ length: 6 }, (_, i) => text(i));
      const reload = async () => createChatStore<UIMessage>({ store: backend }).load(id);
      expect(await chats.save(id, base)).toMatchObject({ written: 6, rewritten: true });

      // edit: `sendMessage({ text, messageId: "m2" })` keeps m2's id, changes it and drops what followed
      const edited = [...structuredClone(base.slice(0, 2)), text(2, "edited question")];
      expect(await chats.save(id, JSON.parse(JSON.stringify(edited)))).toMatchObject({ written: 3, rewritten: true });
      expect(await reload()).toStrictEqual(edited);
      // the same edit re-sent with the stale tail (`[...stored, message]` in a route): the re-sent id replaces
      const grown = [...edited, text(3, "answer to the edit")];
      expect(await chats.save(id, JSON.parse(JSON.stringify(grown)))).toMatchObject({ written: 1, rewritten: false });
      const resent = [...grown, text(2, "edited twice")];
      expect(await chats.save(id, JSON.parse(JSON.stringify(resent)))).toMatchObject({ written: 3, rewritten: true });
      expect(await reload()).toStrictEqual([...edited.slice(0, 2), text(2, "edited twice")]);

      // the last stored message changed in place, same id (a streamed answer completed, a tool result or
      // an approval added to it): compared by content, so rewritten
      const partial = [...edited.slice(0, 2), text(2, "edited twice"), text(3, "partial ans")];
      expect(await chats.save(id, JSON.parse(JSON.stringify(partial)))).toMatchObject({ written: 1, rewritten: false });
      const completed = [...partial.slice(0, 3), text(3, "partial answer, now complete")];
      expect(await chats.save(id, JSON.parse(JSON.stringify(completed)))).toMatchObject({
        written: 4,
        rewritten: true,
      });
      expect(await reload()).toStrictEqual(completed);

      // regeneration: `regenerate()` replaces the last answer with a new message (a new id)
      const regenerated = [...completed.slice(0, 3), { ...text(3, "another answer"), id: "m3-regenerated" }];
      expect(await chats.save(id, JSON.parse(JSON.stringify(regenerated)))).toMatchObject({
        written: 4,
        rewritten: true,
      });
      expect(await reload()).toStrictEqual(regenerated);

      // removal of a message in the middle, then one more: not a prefix of the stored chat, so rewritten
      const removed = [regenerated[0], regenerated[2], regenerated[3], text(4)] as UIMessage[];
      expect(await chats.save(id, JSON.parse(JSON.stringify(removed)))).toMatchObject({ written: 4, rewritten: true });
      expect(await reload()).toStrictEqual(removed);
      // a shorter chat (the last message removed)
      const cut = removed.slice(0, 2);
      expect(await chats.save(id, JSON.parse(JSON.stringify(cut)))).toMatchObject({ written: 2, rewritten: true });
      expect(await reload()).toStrictEqual(cut);

      // documented: an older message (not the last stored) changed in place with its id kept is the same
      // message to the AI SDK, and to the store: not rewritten (the stored copy stays)
      const longer = [...cut, text(5), text(6)];
      expect(await chats.save(id, longer)).toMatchObject({ written: 2, rewritten: false });
      const sameId = [text(0, "changed, same id"), ...longer.slice(1), text(7)];
      expect(await chats.save(id, JSON.parse(JSON.stringify(sameId)))).toMatchObject({ written: 1, rewritten: false });
      expect(await reload()).toStrictEqual([...longer, text(7)]);
    },
  );

  it.skipIf(h.skip)(
    "a save of a freshly parsed chat writes only the new message and never reads the stored messages' content",
    async () => {
      const { backend: spy, writes } = recorded(backend);
      const chats = createChatStore<UIMessage>({ store: spy });
      const id = `fresh-${randomUUID()}`;
      const message = (i: number): UIMessage => ({
        id: `msg-${i}`,
        role: i % 2 === 0 ? "user" : "assistant",
        parts: [{ type: "text", text: `text ${i}` }],
      });
      const all = Array.from({ length: 40 }, (_, i) => message(i));
      await chats.save(id, JSON.parse(JSON.stringify(all.slice(0, 30))));
      for (let n = 31; n <= 40; n++) {
        // a request body: fresh objects, whose stored messages' parts must not be read (O(new) work)
        const body = JSON.parse(JSON.stringify(all.slice(0, n))) as UIMessage[];
        let reads = 0;
        for (const m of body.slice(0, n - 2)) {
          const parts = m.parts;
          Object.defineProperty(m, "parts", {
            enumerable: true,
            get: () => {
              reads++;
              return parts;
            },
          });
        }
        expect(await chats.save(id, body)).toMatchObject({ written: 1, rewritten: false });
        expect(writes.at(-1)?.options?.baseLength).toBe(n - 1);
        expect(reads).toBe(0);
      }
      expect(await createChatStore({ store: backend }).load(id)).toStrictEqual(all);
      // The stored prefix is left unencoded until a backend reads it: a backend that writes all of it
      // (here: one that drops `baseLength`, so it rewrites) reads and stores every message.
      const rewriting = new Proxy(backend, {
        get(target, prop) {
          if (prop === "write") {
            return (key: string, state: never, options: WriteOptions = {}) =>
              target.write?.(key, state, { ...options, baseLength: undefined });
          }
          const v = Reflect.get(target, prop, target);
          return typeof v === "function" ? v.bind(target) : v;
        },
      });
      const rewriter = createChatStore<UIMessage>({ store: rewriting });
      await rewriter.read(id);
      const more = [...all, message(40), message(41)];
      expect(await rewriter.save(id, JSON.parse(JSON.stringify(more)))).toMatchObject({ written: 42, rewritten: true });
      expect(await createChatStore({ store: backend }).load(id)).toStrictEqual(more);
    },
  );

  it.skipIf(h.skip)("two stores saving one chat: the stale one gets ConflictError and nothing is lost", async () => {
    const id = `race-${randomUUID()}`;
    const a = createChatStore<UIMessage>({ store: backend });
    const b = createChatStore<UIMessage>({ store: backend });
    const base = handMadeUIMessages();
    await a.save(id, base);
    await b.load(id);
    const fromA = [...base, { id: "a", role: "user", parts: [{ type: "text", text: "from a" }] } as UIMessage];
    await a.save(id, fromA);
    const fromB = [...base, { id: "b", role: "user", parts: [{ type: "text", text: "from b" }] } as UIMessage];
    await expect(b.save(id, fromB)).rejects.toBeInstanceOf(ConflictError);
    expect(await b.load(id)).toStrictEqual(fromA);
  });

  it.skipIf(h.skip)("bad input is a typed error and changes nothing stored", async () => {
    const chats = createChatStore({ store: backend });
    const id = `bad-${randomUUID()}`;
    const good = handMadeModelMessages();
    await chats.save(id, good);
    const withBigInt = [
      ...good,
      { role: "user", content: [{ type: "text", text: "x", providerOptions: { a: { n: 1n } } }] },
    ];
    await expect(chats.save(id, withBigInt as ModelMessage[])).rejects.toThrow(NonJsonValueError);
    await expect(chats.save(id, withBigInt as ModelMessage[])).rejects.toThrow(
      /messages\[5\]\.content\[0\]\.providerOptions\.a\.n/,
    );
    await expect(chats.save(id, [{ role: "robot", content: "x" } as never])).rejects.toThrow(InvalidStateError);
    await expect(chats.save("a/b", good)).rejects.toThrow(InvalidKeyError);
    expect(await createChatStore({ store: backend }).load(id)).toStrictEqual(expectedModelMessages());
  });

  it.skipIf(h.skip)("load of a missing chat is undefined; delete and list", async () => {
    const chats = createChatStore({ store: backend, keyPrefix: `del-${randomUUID()}-` });
    expect(await chats.load("nope")).toBeUndefined();
    await chats.save("x", [{ role: "user", content: "hi" }]);
    expect(await chats.list()).toStrictEqual(["x"]);
    expect(await chats.delete("x")).toBe(true);
    expect(await chats.delete("x")).toBe(false);
    expect(await chats.load("x")).toBeUndefined();
    expect(await chats.list()).toStrictEqual([]);
  });

  it.skipIf(h.skip)("a key holding an agent session is not read as a chat", async () => {
    const key = `chat-agent-${randomUUID()}`;
    await backend.write?.(key, makeState([{ role: "user", content: "hi" }]), {});
    await expect(createChatStore({ store: backend }).load(key.slice(5))).rejects.toThrow(FormatError);
  });
});

describe("createChatStore options", () => {
  it("refuses an unknown option and a missing store", () => {
    expect(() => createChatStore({ store: new MemoryBackend(), prefix: "x" } as never)).toThrow(InvalidOptionError);
    expect(() => createChatStore({} as never)).toThrow(InvalidOptionError);
  });

  it("works on a custom backend with only the four seed methods (whole-state saves)", async () => {
    const map = new Map<string, unknown>();
    const custom: StateBackend = {
      save: (k, s) => void map.set(k, JSON.parse(JSON.stringify(s))),
      load: (k) => map.get(k) as never,
      delete: (k) => map.delete(k),
      listKeys: () => [...map.keys()],
    };
    const chats = createChatStore<UIMessage>({ store: custom });
    expect(await chats.save("c", handMadeUIMessages())).toMatchObject({ rewritten: true });
    expect(await chats.load("c")).toStrictEqual(handMadeUIMessages());
  });
});
