/**
 * Revision tracking follows the store, not the backend object: an agent
 * loaded through one backend instance saves through another instance of the
 * same store (same directory, database file, PostgreSQL database and schema,
 * Redis server and prefix) without a ConflictError, and still appends.
 * Instances of different stores stay apart: a fresh agent may only create a
 * key there.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PostgresBackend } from "../../src/backends/postgres.js";
import { RedisBackend } from "../../src/backends/redis.js";
import { SQLiteBackend } from "../../src/backends/sqlite.js";
import {
  BaseAgent,
  ConflictError,
  FileBackend,
  loadState,
  MemoryBackend,
  type StateBackend,
  saveState,
  trackedRevision,
} from "../../src/index.js";
import { DATABASE_URL, postgresSkipReason, REDIS_URL, redisSkipReason } from "../helpers/services.js";

const tmp = mkdtempSync(path.join(tmpdir(), "dumplings-storeid-"));
const opened: StateBackend[] = [];
afterAll(async () => {
  for (const b of opened) await b.close?.();
  rmSync(tmp, { recursive: true, force: true });
});

function track<B extends StateBackend>(b: B): B {
  opened.push(b);
  return b;
}

let redisSkip: string | undefined;
let postgresSkip: string | undefined;
beforeAll(async () => {
  redisSkip = await redisSkipReason();
  postgresSkip = await postgresSkipReason();
});

const schema = `sid_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
const prefix = `sid-${randomUUID()}:`;

/** Per backend: two instances of one store (spelled differently where the store allows it), and one of another store. */
const cases: [string, () => { a: StateBackend; b: StateBackend; other: StateBackend }, () => string | undefined][] = [
  [
    "file",
    () => {
      const dir = mkdtempSync(path.join(tmp, "f-"));
      const link = `${dir}-link`;
      symlinkSync(dir, link);
      return {
        a: new FileBackend({ baseDir: dir }),
        b: new FileBackend({ baseDir: `${path.relative(process.cwd(), link)}/` }),
        other: new FileBackend({ baseDir: mkdtempSync(path.join(tmp, "f-")) }),
      };
    },
    () => undefined,
  ],
  [
    "sqlite",
    () => {
      const dir = mkdtempSync(path.join(tmp, "s-"));
      mkdirSync(path.join(dir, "sub"));
      return {
        a: track(new SQLiteBackend({ dbPath: path.join(dir, "s.db") })),
        b: track(new SQLiteBackend({ dbPath: path.join(dir, "sub", "..", "s.db") })),
        other: track(new SQLiteBackend({ dbPath: path.join(dir, "t.db") })),
      };
    },
    () => undefined,
  ],
  [
    "redis",
    () => {
      const u = new URL(REDIS_URL);
      const spelled = `redis://${u.hostname.toUpperCase() === "LOCALHOST" ? "localhost" : u.hostname}:${u.port || 6379}/0`;
      return {
        a: track(new RedisBackend({ url: REDIS_URL, keyPrefix: prefix })),
        b: track(new RedisBackend({ url: spelled, keyPrefix: prefix })),
        other: track(new RedisBackend({ url: REDIS_URL, keyPrefix: `${prefix}other:` })),
      };
    },
    () => redisSkip,
  ],
  [
    "postgres",
    () => {
      const u = new URL(DATABASE_URL);
      u.port = u.port || "5432";
      const spelled = u.href.replace(/^postgres:/, "postgresql:");
      return {
        a: track(new PostgresBackend({ url: DATABASE_URL, schema })),
        b: track(new PostgresBackend({ url: spelled, schema })),
        other: track(new PostgresBackend({ url: DATABASE_URL, schema: `${schema}_o` })),
      };
    },
    () => postgresSkip,
  ],
];

describe.each(cases)("on the %s backend", (_name, make, skip) => {
  it("two instances of one store report the same storeId; another store a different one", (ctx) => {
    if (skip()) ctx.skip();
    const { a, b, other } = make();
    expect(a.storeId).toBeTypeOf("string");
    expect(b.storeId).toBe(a.storeId);
    expect(other.storeId).not.toBe(a.storeId);
  });

  it("load through one instance, save through another instance of the same store: no ConflictError, an append", async (ctx) => {
    if (skip()) ctx.skip();
    const { a, b } = make();
    const key = `k-${randomUUID()}`;
    const origin = new BaseAgent({ name: "identity", history: [{ role: "user", content: "one" }] });
    await saveState(origin, key, { backend: a });
    const agent = await loadState(key, { backend: a });
    agent.history.push({ role: "assistant", content: "two" });
    const r = await saveState(agent, key, { backend: b });
    expect(r).toMatchObject({ written: 1, rewritten: false });
    expect(trackedRevision(agent, key, { backend: a })).toBe(r.revision);
    // And back through the first instance.
    agent.history.push({ role: "user", content: "three" });
    const r2 = await saveState(agent, key, { backend: a });
    expect(r2).toMatchObject({ written: 1, rewritten: false });
    expect((await loadState(key, { backend: b })).history.map((m) => m.content)).toEqual(["one", "two", "three"]);
    // The one who saved first through b keeps compare-and-set: a second agent that loaded before is refused.
    const stale = await loadState(key, { backend: b });
    agent.history.push({ role: "assistant", content: "four" });
    await saveState(agent, key, { backend: b });
    stale.history.push({ role: "assistant", content: "lost?" });
    await expect(saveState(stale, key, { backend: a })).rejects.toBeInstanceOf(ConflictError);
  });

  it("another store stays apart: an agent known to one store may only create the key in another", async (ctx) => {
    if (skip()) ctx.skip();
    const { a, other } = make();
    const key = `k-${randomUUID()}`;
    const agent = new BaseAgent({ name: "apart", history: [{ role: "user", content: "mine" }] });
    await saveState(agent, key, { backend: a });
    await saveState(new BaseAgent({ name: "someone-else" }), key, { backend: other });
    await expect(saveState(agent, key, { backend: other })).rejects.toBeInstanceOf(ConflictError);
    expect((await loadState(key, { backend: other })).name).toBe("someone-else");
  });
});

describe("backends without a storeId", () => {
  it("are told apart by instance (two MemoryBackends are two stores)", async () => {
    const a = new MemoryBackend();
    const b = new MemoryBackend();
    expect((a as StateBackend).storeId).toBeUndefined();
    const agent = new BaseAgent({ name: "mem", history: [{ role: "user", content: "x" }] });
    await saveState(agent, "k", { backend: a });
    await saveState(new BaseAgent({ name: "other" }), "k", { backend: b });
    await expect(saveState(agent, "k", { backend: b })).rejects.toBeInstanceOf(ConflictError);
  });

  it("a custom backend object without storeId keeps instance tracking", async () => {
    const inner = new MemoryBackend();
    const custom: StateBackend = {
      save: (k, s) => inner.save(k, s),
      load: (k) => inner.load(k),
      delete: (k) => inner.delete(k),
      listKeys: () => inner.listKeys(),
      write: (k, s, o) => inner.write(k, s, o),
      read: (k) => inner.read(k),
    };
    const agent = new BaseAgent({ name: "custom", history: [{ role: "user", content: "x" }] });
    await saveState(agent, "k", { backend: custom });
    agent.history.push({ role: "assistant", content: "y" });
    expect(await saveState(agent, "k", { backend: custom })).toMatchObject({ written: 1 });
  });
});
