/**
 * `DumplingsSession` on every built-in backend: items of every type (hand-made,
 * and the bundled conversations converted) round-trip exactly, through a new
 * instance too; `getItems(limit)` returns the latest items in order; adding
 * items writes only them; `popItem`, `clearSession`; concurrent writers both
 * keep their items; bad input changes nothing.
 */
import { randomUUID } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { type AgentInputItem, MemorySession, protocol } from "@openai/agents-core";
import { Redis } from "ioredis";
import pg from "pg";
import { afterAll, describe, expect, it } from "vitest";
import { FileBackend } from "../../src/backends/file/index.js";
import { MemoryBackend } from "../../src/backends/memory.js";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import type { StateBackend, WriteOptions, WriteResult } from "../../src/backends/types.js";
import {
  FormatError,
  InvalidKeyError,
  InvalidOptionError,
  InvalidStateError,
  NonJsonValueError,
} from "../../src/core/errors.js";
import { DumplingsSession } from "../../src/openai-agents/index.js";
import { makeState } from "../../src/testing/states.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";
import { handMadeItems, sampleSessions } from "./fixtures.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-agents-"));
const redisSkip = await redisSkipReason();
const postgresSkip = await postgresSkipReason();
const redisPrefix = `agents-test:${randomUUID()}:`;
const pgSchema = `agents_${randomUUID().replaceAll("-", "").slice(0, 20)}`;
const opened: StateBackend[] = [];

/** `make()` opens a backend; `reopen(b)` opens another instance on the same store (memory: the same one). */
type Harness = { name: string; skip?: string; make: () => StateBackend; reopen: (b: StateBackend) => StateBackend };
const track = <B extends StateBackend>(b: B): B => {
  opened.push(b);
  return b;
};
const harnesses: Harness[] = [
  { name: "memory", make: () => new MemoryBackend(), reopen: (b) => b },
  {
    name: "file",
    make: () => track(new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "file-")) })),
    reopen: (b) => track(new FileBackend({ baseDir: (b as FileBackend).baseDir })),
  },
  {
    name: "sqlite",
    make: () => track(new SQLiteBackend({ dbPath: path.join(mkdtempSync(path.join(tmp, "db-")), "a.db") })),
    reopen: (b) => track(new SQLiteBackend({ dbPath: (b as SQLiteBackend).dbPath })),
  },
  {
    name: "redis",
    skip: redisSkip,
    make: () => track(new RedisBackend({ url: REDIS_URL, keyPrefix: redisPrefix })),
    reopen: () => track(new RedisBackend({ url: REDIS_URL, keyPrefix: redisPrefix })),
  },
  {
    name: "postgres",
    skip: postgresSkip,
    make: () => track(new PostgresBackend({ url: DATABASE_URL, schema: pgSchema })),
    reopen: () => track(new PostgresBackend({ url: DATABASE_URL, schema: pgSchema })),
  },
];

/** A backend whose `write` calls are recorded (options and what the backend says it wrote). */
function recorded(backend: StateBackend): {
  backend: StateBackend;
  writes: Array<{ options: WriteOptions | undefined; result: WriteResult }>;
} {
  const writes: Array<{ options: WriteOptions | undefined; result: WriteResult }> = [];
  const write = backend.write?.bind(backend);
  if (write === undefined) throw new Error("backend without write");
  const proxy = new Proxy(backend, {
    get(target, prop, receiver) {
      if (prop === "write") {
        return async (key: string, state: Parameters<typeof write>[1], options?: WriteOptions) => {
          const result = await write(key, state, options);
          writes.push({ options, result });
          return result;
        };
      }
      const v = Reflect.get(target, prop, receiver);
      return typeof v === "function" ? v.bind(target) : v;
    },
  });
  return { backend: proxy, writes };
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

it("the hand-made items are valid items of the SDK (its own ModelItem schema) and cover every item type", () => {
  const items = handMadeItems();
  for (const item of items) expect(protocol.ModelItem.safeParse(item).success, JSON.stringify(item)).toBe(true);
  const types = new Set(items.map((i) => (i as { type?: string }).type ?? "message"));
  for (const t of [
    "message",
    "reasoning",
    "function_call",
    "function_call_result",
    "hosted_tool_call",
    "computer_call",
    "computer_call_result",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "compaction",
    "unknown",
  ]) {
    expect(types.has(t), t).toBe(true);
  }
});

for (const h of harnesses) {
  describe.skipIf(h.skip)(`DumplingsSession on ${h.name}${h.skip ? ` (skipped: ${h.skip})` : ""}`, () => {
    it("items of every type round-trip exactly, through a new instance on the same store too", async () => {
      const backend = h.make();
      const id = `s-${randomUUID()}`;
      const session = new DumplingsSession({ sessionId: id, store: backend });
      const items = handMadeItems();
      await session.addItems(items.slice(0, 3));
      await session.addItems(items.slice(3, 10));
      await session.addItems(items.slice(10));
      expect(await session.getSessionId()).toBe(id);
      const back = await session.getItems();
      expect(back).toStrictEqual(items);
      // the SDK's own session keeps the same items: ours reads back what it would
      expect(back).toStrictEqual(await new MemorySession({ initialItems: items }).getItems());
      const again = await new DumplingsSession({ sessionId: id, store: h.reopen(backend) }).getItems();
      expect(again).toStrictEqual(items);
      const render = again.find(
        (i) => (i as { callId?: string }).callId === "call_render" && i.type === "function_call_result",
      );
      const image = (render as { output: { image: { data: unknown } } }).output.image.data;
      expect(image).toBeInstanceOf(Uint8Array);
      expect(Buffer.isBuffer(image)).toBe(false);
      expect(
        "note" in
          (again.find((i) => (i as { callId?: string }).callId === "call_render") as { providerData: object })
            .providerData,
      ).toBe(true);
    });

    it("the bundled conversations round-trip", async () => {
      const backend = h.make();
      for (const [name, items] of sampleSessions(4)) {
        const session = new DumplingsSession({ sessionId: `c-${randomUUID()}`, store: backend });
        const half = Math.floor(items.length / 2);
        await session.addItems(items.slice(0, half));
        for (const item of items.slice(half)) await session.addItems([item]);
        expect(await session.getItems(), name).toStrictEqual(items);
        expect(
          await new DumplingsSession({ sessionId: session.sessionId, store: h.reopen(backend) }).getItems(),
        ).toStrictEqual(items);
      }
    });

    it("getItems(limit) returns the latest items in order", async () => {
      const session = new DumplingsSession({ sessionId: `l-${randomUUID()}`, store: h.make() });
      expect(await session.getItems()).toEqual([]);
      expect(await session.getItems(3)).toEqual([]);
      const items = Array.from({ length: 7 }, (_, i) => ({ role: "user" as const, content: `m${i}` }));
      await session.addItems(items);
      expect(await session.getItems(3)).toStrictEqual(items.slice(4));
      expect(await session.getItems(1)).toStrictEqual(items.slice(6));
      expect(await session.getItems(100)).toStrictEqual(items);
      expect(await session.getItems(0)).toEqual([]);
      expect(await session.getItems(-2)).toEqual([]);
      await expect(session.getItems(Number.NaN)).rejects.toBeInstanceOf(InvalidOptionError);
    });

    it("adding items writes only the new items (compare-and-set appends)", async () => {
      const { backend, writes } = recorded(h.make());
      const session = new DumplingsSession({ sessionId: `w-${randomUUID()}`, store: backend });
      const many = Array.from({ length: 50 }, (_, i) => ({ role: "user" as const, content: `m${i}` }));
      await session.addItems(many);
      expect(writes[0]?.options?.expectedRevision).toBeNull(); // create only
      for (let i = 0; i < 5; i++) {
        await session.addItems([{ type: "function_call", callId: `c${i}`, name: "f", arguments: "{}" }]);
        const last = writes.at(-1);
        expect(last?.result.written).toBe(1);
        expect(last?.result.rewritten).toBe(false);
        expect(last?.options?.baseLength).toBe(50 + i);
        expect(last?.options?.expectedRevision).toBe(writes.at(-2)?.result.revision);
      }
      expect(await session.getItems()).toHaveLength(55);
    });

    it("popItem removes and returns the latest item; clearSession empties the session", async () => {
      const backend = h.make();
      const session = new DumplingsSession({ sessionId: `p-${randomUUID()}`, store: backend });
      expect(await session.popItem()).toBeUndefined();
      const items = handMadeItems().slice(0, 6);
      await session.addItems(items);
      expect(await session.popItem()).toStrictEqual(items[5]);
      expect(await session.popItem()).toStrictEqual(items[4]);
      expect(await session.getItems()).toStrictEqual(items.slice(0, 4));
      const other = new DumplingsSession({ sessionId: session.sessionId, store: h.reopen(backend) });
      expect(await other.getItems()).toStrictEqual(items.slice(0, 4));
      await session.addItems([items[5] as AgentInputItem]);
      expect(await other.getItems()).toStrictEqual([...items.slice(0, 4), items[5]]);
      await session.clearSession();
      expect(await session.getItems()).toEqual([]);
      expect(await other.getItems()).toEqual([]);
      expect(await other.popItem()).toBeUndefined();
      await session.addItems([items[0] as AgentInputItem]);
      expect(await other.getItems()).toStrictEqual([items[0]]);
      expect(await other.popItem()).toStrictEqual(items[0]);
      expect(await session.getItems()).toEqual([]);
    });

    it("two writers of one session both keep their items (a conflict reads again and appends after)", async () => {
      const backend = h.make();
      const id = `cc-${randomUUID()}`;
      const a = new DumplingsSession({ sessionId: id, store: backend });
      const b = new DumplingsSession({ sessionId: id, store: h.reopen(backend) });
      await a.addItems([{ role: "user", content: "a0" }]);
      await b.addItems([{ role: "user", content: "b0" }]); // b never read: it creates or appends, never overwrites
      await a.addItems([{ role: "user", content: "a1" }]); // a's revision is stale: conflict, read, append
      await Promise.all([a.addItems([{ role: "user", content: "a2" }]), b.addItems([{ role: "user", content: "b1" }])]);
      const contents = (await a.getItems()).map((i) => (i as { content: string }).content);
      expect(contents.slice(0, 3)).toEqual(["a0", "b0", "a1"]);
      expect(contents.slice(3).sort()).toEqual(["a2", "b1"]);
      expect((await b.getItems()).map((i) => (i as { content: string }).content)).toEqual(contents);
    });

    it("bad input is refused with a typed error naming the item, and stored items are unchanged", async () => {
      const session = new DumplingsSession({ sessionId: `bad-${randomUUID()}`, store: h.make() });
      await session.addItems([{ role: "user", content: "kept" }]);
      const bad = [
        { role: "user", content: "fine" },
        { type: "function_call", callId: "c", name: "f", arguments: "{}", providerData: { n: 10n } },
      ] as unknown as AgentInputItem[];
      await expect(session.addItems(bad)).rejects.toThrow(NonJsonValueError);
      await expect(session.addItems(bad)).rejects.toThrow(/items\[1\]\.providerData\.n/);
      await expect(session.addItems([{ role: "robot", content: "x" } as unknown as AgentInputItem])).rejects.toThrow(
        InvalidStateError,
      );
      await expect(session.addItems([null as unknown as AgentInputItem])).rejects.toThrow(/items\[0\]/);
      await expect(session.addItems("x" as unknown as AgentInputItem[])).rejects.toThrow(InvalidStateError);
      expect(await session.getItems()).toStrictEqual([{ role: "user", content: "kept" }]);
    });

    it("a key holding something else is a FormatError naming the key; nothing is changed", async () => {
      const backend = h.make();
      const id = `other-${randomUUID()}`;
      await backend.save(
        `agents-${id}`,
        makeState([
          { role: "user", content: "a" },
          { role: "assistant", content: "b" },
        ]),
      );
      const session = new DumplingsSession({ sessionId: id, store: backend });
      await expect(session.getItems()).rejects.toThrow(FormatError);
      await expect(session.getItems()).rejects.toThrow(`agents-${id}`);
      await expect(session.addItems([{ role: "user", content: "x" }])).rejects.toThrow(FormatError);
      const stored = await backend.load(`agents-${id}`);
      expect(stored?.history).toHaveLength(2);
    });
  });
}

describe("DumplingsSession options", () => {
  it("takes a SPEC string as its store", async () => {
    const dir = mkdtempSync(path.join(tmp, "spec-"));
    const file = path.join(dir, "agents.db");
    const a = new DumplingsSession({ sessionId: "u1", store: `sqlite:${file}` });
    await a.addItems([{ role: "user", content: "hi" }]);
    await a.store.close?.();
    const b = new DumplingsSession({ sessionId: "u1", store: `sqlite:${file}` });
    expect(await b.getItems()).toStrictEqual([{ role: "user", content: "hi" }]);
    await b.store.close?.();
    expect(new DumplingsSession({ store: "memory:" }).store.name).toBe("memory");
  });

  it("a random session id by default, as MemorySession", async () => {
    const s = new DumplingsSession({ store: new MemoryBackend() });
    expect(await s.getSessionId()).toMatch(/^[0-9a-f-]{36}$/);
    expect(s.key).toBe(`agents-${s.sessionId}`);
    expect(new DumplingsSession({ store: new MemoryBackend(), sessionId: "x", keyPrefix: "p:" }).key).toBe("p:x");
  });

  it("refuses an unknown option, a missing store, a bad SPEC and a bad session id", () => {
    const store = new MemoryBackend();
    expect(() => new DumplingsSession({ store, sessionid: "x" } as never)).toThrow(InvalidOptionError);
    expect(() => new DumplingsSession({ store, sessionid: "x" } as never)).toThrow(/sessionId/);
    expect(() => new DumplingsSession({} as never)).toThrow(InvalidOptionError);
    expect(() => new DumplingsSession({ store: "mysql://x" })).toThrow(InvalidOptionError);
    expect(() => new DumplingsSession({ store, sessionId: "../etc" })).toThrow(InvalidKeyError);
    expect(() => new DumplingsSession({ store, sessionId: "" })).toThrow(InvalidOptionError);
    expect(() => new DumplingsSession({ store, keyPrefix: 3 as never })).toThrow(InvalidOptionError);
  });

  it("works on a custom backend with only the four seed methods (whole-state saves)", async () => {
    const map = new Map<string, unknown>();
    const store: StateBackend = {
      save: (k, s) => void map.set(k, structuredClone(s)),
      load: (k) => structuredClone(map.get(k)) as never,
      delete: (k) => map.delete(k),
      listKeys: () => [...map.keys()],
    };
    const session = new DumplingsSession({ sessionId: "c", store });
    const items = handMadeItems();
    await session.addItems(items.slice(0, 4));
    await session.addItems(items.slice(4));
    expect(await new DumplingsSession({ sessionId: "c", store }).getItems()).toStrictEqual(items);
    expect(await session.popItem()).toStrictEqual(items.at(-1));
    await session.clearSession();
    expect(map.size).toBe(0);
  });
});
